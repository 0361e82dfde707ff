//! The fleet preview's bad-input error: the file, and what is wrong in it.

use std::path::{Path, PathBuf};

/// Bad input: the file or field and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct InputError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong (and where in it).
    pub message: String,
}

/// An [`InputError`] for `path`.
pub(super) fn input_err(path: &Path, message: impl Into<String>) -> InputError {
    InputError {
        path: path.to_path_buf(),
        message: message.into(),
    }
}
