//! Local runs for package authors (what `skyhook-run` does): one `.rhai` script, or a whole
//! package the way the agent runs it, against a host root on this machine.
//!
//! - [`script`]: [`ScriptRun`] runs one script as a dry run ([`ExecMode::Plan`](crate::host::ExecMode::Plan)), for real
//!   ([`ExecMode::Apply`](crate::host::ExecMode::Apply)) or as a check ([`ExecMode::Check`](crate::host::ExecMode::Check), the `*-check` modes), and
//!   returns a [`StepResult`] with the host [`Report`](crate::host::Report).
//! - [`package`]: [`PackageRun`] loads and validates a package directory, then either plans
//!   every step of one mode in one host session ([`PackageRun::plan`] → [`PackagePlan`]:
//!   `.rhai` steps run on the Plan or Check executor, other steps are listed as
//!   `would run: <path> <args>`), or copies it into the root and runs the agent's own mode
//!   flow ([`PackageRun::apply`], [`crate::agent::mode::ModeRun`]).
//!
//! Nothing here prints: script output goes to the [`ScriptOutput`](crate::script::ScriptOutput)
//! the caller gives, results come back as values the caller renders
//! ([`crate::host::Report::render_text`], [`PackagePlan::render_text`], the `to_json`
//! methods), except [`PackageRun::apply`], which is the agent flow and prints as the agent
//! does.
//!
//! The step environment is what the caller passes (`skyhook-run`: its own environment plus
//! `--env`), as the agent passes its environment to every step.

pub mod package;
pub mod scaffold;
pub mod script;

use std::path::PathBuf;

pub use package::{PackagePlan, PackageRun, PlannedStep, StepKind, default_copy_dir};
pub use script::{ScriptRun, StepResult};

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

/// The value of `name` in `env` (last definition wins).
pub(crate) fn env_get<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// `env` with `name=value` appended unless `name` is already set.
pub(crate) fn env_default(env: &mut Vec<(String, String)>, name: &str, value: String) {
    if env_get(env, name).is_none() {
        env.push((name.to_string(), value));
    }
}

#[cfg(test)]
mod tests;

/// An error message as JSON, `{file, line, column, message}` (`docs/plan.schema.json`):
/// the parts of `file:line:col: message` (or `file:line: message`, the script errors'
/// form); `file`, `line` and `column` null for a message without a position (e.g. the
/// failure of deferred work), whose `message` is then the whole text.
pub fn error_json(text: &str) -> serde_json::Value {
    static POSITIONED: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = POSITIONED.get_or_init(|| {
        regex::Regex::new(r"(?s)^(.+?):(\d+)(?::(\d+))?: (.*)$").expect("valid regex")
    });
    let num = |m: Option<regex::Match<'_>>| m.and_then(|m| m.as_str().parse::<u64>().ok());
    match re.captures(text.trim_end()) {
        Some(c) => serde_json::json!({
            "file": &c[1],
            "line": num(c.get(2)),
            "column": num(c.get(3)),
            "message": &c[4],
        }),
        None => serde_json::json!({
            "file": null,
            "line": null,
            "column": null,
            "message": text.trim_end(),
        }),
    }
}

/// The error of a compile failure as JSON (as [`error_json`], from its parts).
pub fn script_error_json(e: &crate::script::ScriptError) -> serde_json::Value {
    serde_json::json!({
        "file": e.file,
        "line": e.line,
        "column": e.column,
        "message": e.message,
    })
}
