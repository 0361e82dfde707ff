//! [`ModeError`]: what stops the mode loop before or between steps (a failing step is not
//! an error: it is a record with `ok == false`).

use crate::host::root::RootError;
use crate::logs::LogError;
use crate::state::StateError;

/// A state file, a host file or a step's log files failed; the agent wraps it unchanged
/// (its message and causes are the inner error's).
#[derive(Debug, thiserror::Error)]
pub enum ModeError {
    /// A state file (flags, history, check results, the package lock) could not be read or
    /// written.
    #[error(transparent)]
    State(#[from] StateError),
    /// A host file operation failed.
    #[error(transparent)]
    Root(#[from] RootError),
    /// A step's log files cannot be created (the message names the path).
    #[error(transparent)]
    Logs(#[from] LogError),
}
