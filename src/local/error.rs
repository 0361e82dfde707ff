//! [`LocalError`]: why a local run could not start or had to stop.

use std::path::PathBuf;

/// Why a local run could not start or had to stop before or between steps (a failing step
/// is not an error: it is an outcome with `ok == false`).
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The script (or an import) does not compile; the message is `file:line:col: message`.
    #[error("{0}")]
    Compile(#[from] crate::script::ScriptError),
    /// The host root cannot be opened.
    #[error("failed to open host root {}", path.display())]
    OpenRoot {
        /// The root as given.
        path: PathBuf,
        /// The cause.
        #[source]
        source: crate::host::root::RootError,
    },
    /// config.json is unreadable or invalid, or step files are missing.
    #[error(transparent)]
    Package(#[from] crate::package::PackageError),
    /// The mode cannot be run locally (`interrupt`).
    #[error("mode {0} cannot be run by skyhook-run (interrupts are run by the agent)")]
    UnsupportedMode(String),
    /// Writing the package copy under the root failed.
    #[error("failed to copy the package into the root at {}", path.display())]
    Copy {
        /// The host path being written.
        path: PathBuf,
        /// The cause.
        #[source]
        source: crate::host::root::RootError,
    },
    /// An entry of the configMaps folder leads out of it (a symlink to outside): the copy
    /// into the root follows links, so nothing is copied.
    #[error(
        "configMap {name:?} leads out of the configMaps folder {} (a symlink to outside it): nothing is copied",
        dir.display()
    )]
    ConfigMapOutside {
        /// The entry, relative to the folder (`k`, `..data/k`).
        name: String,
        /// The configMaps folder.
        dir: PathBuf,
    },
    /// The agent flow failed before or between steps.
    #[error(transparent)]
    Agent(#[from] crate::agent::error::AgentError),
    /// The mode loop of a dry run stopped (a state read, a host file).
    #[error(transparent)]
    Mode(#[from] crate::mode::ModeError),
    /// A host state read (flags, history) failed during a dry run.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// A host file operation failed.
    #[error(transparent)]
    Root(#[from] crate::host::root::RootError),
}
