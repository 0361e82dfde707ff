//! The agent's error type and its mapping to exit status (agent-contract.md section 12).

use std::path::PathBuf;

use crate::host::root::RootError;
use crate::package::PackageError;
use crate::state::StateError;

use super::cli::UsageError;
use super::interrupt::InterruptError;
use super::prepare::PrepareError;
use super::settings::ResourceIdError;

/// Exit status: the mode completed.
pub const EXIT_OK: i32 = 0;
/// Exit status: a step or check failed, invalid input, SIGTERM, any internal error.
pub const EXIT_FAILURE: i32 = 1;
/// Exit status: malformed command line.
pub const EXIT_USAGE: i32 = 2;

/// Everything that can stop the agent before or between steps.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Malformed command line.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// Bad `SKYHOOK_RESOURCE_ID`.
    #[error(transparent)]
    ResourceId(#[from] ResourceIdError),
    /// The root mount cannot be opened.
    #[error("failed to open root mount {}", path.display())]
    OpenRoot {
        /// The root mount.
        path: PathBuf,
        /// The cause.
        #[source]
        source: RootError,
    },
    /// config.json is invalid or unreadable.
    #[error(transparent)]
    Package(#[from] PackageError),
    /// A `.rhai` step failed to compile or a script-related setup failed.
    #[error("{0}")]
    Script(String),
    /// Host preparation failed.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// A state file could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// A host file operation failed.
    #[error(transparent)]
    Root(#[from] RootError),
    /// The interrupt payload is invalid.
    #[error(transparent)]
    Interrupt(#[from] InterruptError),
    /// The async runtime could not be started.
    #[error("failed to start the runtime")]
    Runtime(#[source] std::io::Error),
}

impl AgentError {
    /// The exit status this error maps to.
    pub fn exit_code(&self) -> i32 {
        match self {
            AgentError::Usage(_) => EXIT_USAGE,
            _ => EXIT_FAILURE,
        }
    }
}

/// Render an error and its causes on one line (`a: b: c`); see [`crate::chain::render`].
pub use crate::chain::render as render_chain;
