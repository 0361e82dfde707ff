//! The error of the log layer ([`LogError`]): creating, listing and pruning step log files,
//! relaying a step's output.

use std::io;
use std::path::PathBuf;

use crate::host::root::RootError;

/// An error of the log layer. Messages read after "failed to" where they name an operation.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A log file could not be created (the cause names the host path).
    #[error("failed to create step log file")]
    Create(#[source] RootError),
    /// Every name from the start time on, for 3600 seconds, is taken.
    #[error("failed to find a free log file name for {} ({attempts} seconds tried)", path.display())]
    NoFreeName {
        /// The host path of the first name tried (`.../<base>-<TS>.log`).
        path: PathBuf,
        /// How many consecutive timestamps were tried.
        attempts: u32,
    },
    /// The log directory could not be listed for retention.
    #[error("failed to list log directory for retention")]
    List(#[source] RootError),
    /// An old log file could not be removed by retention.
    #[error("failed to remove old log file")]
    Remove(#[source] RootError),
    /// The step's output pipe could not be read (the stream is then treated as ended).
    #[error("failed to read step {stream}")]
    Read {
        /// `stdout` or `stderr`.
        stream: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Relayed bytes could not be written to a console stream or log file.
    #[error("failed to write step output to {target}")]
    Write {
        /// `stdout`, `stderr` or the log file's host path.
        target: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}
