//! [`PrepareError`]: what can fail preparing the host ([`super::prepare`]). A file of its
//! own so that [`super::error::AgentError`] wraps it without importing the preparation
//! (which reads the package through [`super::site`], which returns `AgentError`).

use std::path::PathBuf;

use crate::host::root::RootError;

/// A failure while preparing the host.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The legacy copy source does not exist.
    #[error(
        "copy dir {} does not exist on the host and SKYHOOK_DATA_DIR {} does not exist to copy it from",
        copy_dir.display(), data_dir.display()
    )]
    MissingDataDir {
        /// The host copy dir.
        copy_dir: PathBuf,
        /// The agent-side source.
        data_dir: PathBuf,
    },
    /// Reading the agent-side source failed.
    #[error("failed to read {}", path.display())]
    ReadSource {
        /// The agent-side path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A host operation failed.
    #[error(transparent)]
    Root(#[from] RootError),
    /// Applying the overlay, the package copy or the legacy copy failed: what, and the
    /// error naming the path; what was written is undone (and what could not be, listed).
    #[error("{what}: {message}")]
    Apply {
        /// `root_dir overlay`, `package copy` or `legacy copy`.
        what: &'static str,
        /// The error, then any `; not undone: ...` lines.
        message: String,
    },
    /// An expected configMap file is missing (Python's message).
    #[error("Expected config file {name} not found in configmaps directory.")]
    ExpectedConfigFile {
        /// The missing name.
        name: String,
    },
}
