//! [`RootError`]: a failed file operation under the host root, naming the operation, the
//! host path and the root.

use std::io;
use std::path::PathBuf;

/// An error from a file operation under the host root.
///
/// The message reads after "failed to": `failed to write /etc/x.conf under host root /mnt`.
#[derive(Debug, thiserror::Error)]
#[error("failed to {op} {} under host root {}", path.display(), root.display())]
pub struct RootError {
    /// The operation that failed (`write`, `read`, `create directory`, ...).
    pub op: &'static str,
    /// The host path it was applied to.
    pub path: PathBuf,
    /// The root mount.
    pub root: PathBuf,
    /// The OS error. `EXDEV` means pathrs detected an attempt to escape the root.
    #[source]
    pub source: io::Error,
}

impl RootError {
    /// The underlying OS error kind.
    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }

    /// True when the path (or one of its parents) does not exist.
    pub fn is_not_found(&self) -> bool {
        self.source.kind() == io::ErrorKind::NotFound
    }
}

/// Result alias for host root operations.
pub type Result<T, E = RootError> = std::result::Result<T, E>;
