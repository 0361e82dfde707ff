//! The agent's error type. Its exit status (agent-contract.md section 12) comes from the one
//! table of the command line (`cli::exit`).

use std::path::PathBuf;

use crate::host::root::RootError;
use crate::package::PackageError;
use crate::state::StateError;

use super::args::UsageError;
use super::prepare_error::PrepareError;
use crate::mode::settings::{ResourceIdError, SettingError};

/// Python's message for an undecodable payload.
pub const BAD_PAYLOAD: &str =
    "Serialized interrupt must be base64 encoded {'type': str, **kwargs: dict[str, any]}";

/// An interrupt payload that cannot be used (exit 1, nothing written).
#[derive(Debug, thiserror::Error)]
pub enum InterruptError {
    /// Not base64, not a JSON object, or no string `type` (Python's message, then the detail).
    #[error("{BAD_PAYLOAD} ({detail})")]
    Malformed {
        /// What exactly is wrong.
        detail: String,
    },
    /// An unknown `type` (Python's message).
    #[error(
        "Unknown interrupt {0} must be one of: no_op, node_restart, restart_all_services, script_interrupt, service_restart"
    )]
    UnknownType(String),
    /// `services` is present but not a list of strings.
    #[error("interrupt payload field \"services\" must be a list of strings")]
    BadServices,
}

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
    /// A setting in the environment is out of range (`SKYHOOK_SCRIPT_TIMEOUT`).
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// A `.rhai` step (or an import) does not compile: `file:line:col: message`.
    #[error(transparent)]
    Compile(#[from] crate::script::ScriptError),
    /// A `.rhai` step is not UTF-8.
    #[error("{}: not valid UTF-8", path.display())]
    NotUtf8 {
        /// The script.
        path: PathBuf,
    },
    /// A package file on this machine cannot be read (`skyhook-run --package`).
    #[error("failed to read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The preflight of a mode (static check, then plan) found errors, printed before this
    /// one; nothing was changed.
    #[error(
        "preflight of mode {mode} failed with {errors} error{}: nothing was changed",
        if *errors == 1 { "" } else { "s" }
    )]
    Preflight {
        /// The mode.
        mode: String,
        /// How many errors were printed.
        errors: usize,
    },
    /// An `expected_config_files` name is missing from a local configMaps folder.
    #[error("expected config file {name} not found in {}", dir.display())]
    ExpectedConfigFile {
        /// The missing name.
        name: String,
        /// The configMaps folder searched.
        dir: PathBuf,
    },
    /// The node metadata the operator mounts (`packages.json`) is unreadable or not JSON.
    #[error("node metadata: {0}")]
    NodeMetadata(String),
    /// A step's log files cannot be created (the message names the path).
    #[error(transparent)]
    Logs(#[from] crate::logs::LogError),
    /// Host preparation failed.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// A state file could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// The mode loop stopped between steps (a state, host file or log file failure).
    #[error(transparent)]
    Mode(#[from] crate::mode::ModeError),
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

/// Render an error and its causes on one line (`a: b: c`); see [`crate::chain::render`].
pub use crate::chain::render as render_chain;
