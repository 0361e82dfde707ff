//! The one exit-status table of `skyhook-agent`, `skyhook-agent serve` and `skyhook-run`
//! (README.md, "Exit status"), and the one mapping of every error kind onto it.
//!
//! The agent's statuses (0, 1, 2) are the operator's contract (agent-contract.md section
//! 12); `skyhook-run` adds "changes pending" (3) and the second-signal statuses (130, 143).

use crate::agent::error::AgentError;
use crate::local::LocalError;
use crate::local::scaffold::ScaffoldError;
use crate::remote::RemoteError;
use crate::serve::start::ServeError;

/// How a command ended; [`ExitStatus::code`] is the process exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Done: the mode completed (or was unknown, or had nothing to do), the dry run or
    /// check succeeded, `--help`/`--version`.
    Done,
    /// A step or check failed, drift in a check, invalid input (package, script,
    /// environment, files), any runtime error.
    Failure,
    /// A malformed command line.
    Usage,
    /// `skyhook-run --detailed-exitcode`: a dry run that succeeded with changes pending.
    Changes,
    /// `skyhook-run --apply`: a second SIGINT ended the run at once (128 + 2).
    Interrupted,
    /// `skyhook-run --apply`: a second SIGTERM ended the run at once (128 + 15).
    Terminated,
}

impl ExitStatus {
    /// The process exit status: 0, 1, 2, 3, 130 or 143.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Done => 0,
            ExitStatus::Failure => 1,
            ExitStatus::Usage => 2,
            ExitStatus::Changes => 3,
            ExitStatus::Interrupted => 130,
            ExitStatus::Terminated => 143,
        }
    }

    /// [`ExitStatus::Done`] when `ok`, else [`ExitStatus::Failure`].
    pub fn from_ok(ok: bool) -> ExitStatus {
        if ok {
            ExitStatus::Done
        } else {
            ExitStatus::Failure
        }
    }

    /// The status of a clap error: `--help` and `--version` are [`ExitStatus::Done`]
    /// (printed on stdout), anything else is [`ExitStatus::Usage`].
    pub fn of_clap(e: &clap::Error) -> ExitStatus {
        if e.use_stderr() {
            ExitStatus::Usage
        } else {
            ExitStatus::Done
        }
    }
}

impl From<ExitStatus> for std::process::ExitCode {
    fn from(s: ExitStatus) -> Self {
        std::process::ExitCode::from(s.code())
    }
}

/// Every error that ends one of the three commands.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A malformed command line (a missing or conflicting option, an unknown mode); the
    /// message says which.
    #[error("{0}")]
    Usage(String),
    /// The agent stopped before or between steps.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// A local run (`skyhook-run`) could not start or stopped before or between steps.
    #[error(transparent)]
    Local(#[from] LocalError),
    /// `skyhook-agent serve` refused its options or could not start.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// `skyhook-run --remote`: the node could not be reached or refused the execution.
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// `skyhook-run new NAME` could not write the package.
    #[error(transparent)]
    Scaffold(#[from] ScaffoldError),
    /// A file of this machine named on the command line cannot be read or written.
    #[error("{what} {}: {source}", path.display())]
    File {
        /// What the file is (`--token-file`, `script`, `man page`).
        what: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl CliError {
    /// The exit status of this error: the one mapping all three commands use.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            CliError::Usage(_)
            | CliError::Agent(AgentError::Usage(_))
            | CliError::Local(LocalError::Agent(AgentError::Usage(_))) => ExitStatus::Usage,
            CliError::Agent(_)
            | CliError::Local(_)
            | CliError::Serve(_)
            | CliError::Remote(_)
            | CliError::Scaffold(_)
            | CliError::File { .. } => ExitStatus::Failure,
        }
    }
}

/// Print a usage error (clap's layout) and return [`ExitStatus::Usage`].
pub(crate) fn usage(msg: &str) -> ExitStatus {
    eprintln!("error: {msg}\n\nFor more information, try '--help'.");
    CliError::Usage(msg.to_string()).exit_status()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::args::UsageError;

    #[test]
    fn the_table() {
        let codes: Vec<u8> = [
            ExitStatus::Done,
            ExitStatus::Failure,
            ExitStatus::Usage,
            ExitStatus::Changes,
            ExitStatus::Interrupted,
            ExitStatus::Terminated,
        ]
        .iter()
        .map(|s| s.code())
        .collect();
        assert_eq!(codes, [0, 1, 2, 3, 130, 143]);
        assert_eq!(ExitStatus::from_ok(true), ExitStatus::Done);
        assert_eq!(ExitStatus::from_ok(false), ExitStatus::Failure);
    }

    /// Each error kind maps to its status: a malformed command line to 2 whichever command
    /// found it, everything else to 1.
    #[test]
    fn each_error_kind_maps_to_its_code() {
        let io = || std::io::Error::other("boom");
        let cases: Vec<(CliError, u8)> = vec![
            (CliError::Usage("--root DIR is required".into()), 2),
            (CliError::Agent(AgentError::Usage(UsageError::Count)), 2),
            (
                CliError::Local(LocalError::Agent(AgentError::Usage(UsageError::NotUtf8))),
                2,
            ),
            (CliError::Agent(AgentError::NodeMetadata("x".into())), 1),
            (CliError::Agent(AgentError::Runtime(io())), 1),
            (
                CliError::Local(LocalError::UnsupportedMode("interrupt".into())),
                1,
            ),
            (
                CliError::Local(LocalError::Agent(AgentError::NodeMetadata("x".into()))),
                1,
            ),
            (
                CliError::Serve(ServeError::Options("--shell is empty".into())),
                1,
            ),
            (CliError::Serve(ServeError::Runtime(io())), 1),
            (CliError::Remote(RemoteError::Url("ftp://x".into())), 1),
            (CliError::Scaffold(ScaffoldError::Exists("demo".into())), 1),
            (CliError::Scaffold(ScaffoldError::Name("a/b".into())), 1),
            (
                CliError::File {
                    what: "man page",
                    path: "/x".into(),
                    source: io(),
                },
                1,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(e.exit_status().code(), code, "{e:?}");
        }
    }

    #[test]
    fn clap_help_and_version_are_done_other_clap_errors_usage() {
        let cmd = || {
            clap::Command::new("x")
                .version("1")
                .arg(clap::Arg::new("a").long("a"))
        };
        let help = cmd().try_get_matches_from(["x", "--help"]).unwrap_err();
        let version = cmd().try_get_matches_from(["x", "--version"]).unwrap_err();
        let unknown = cmd().try_get_matches_from(["x", "--b"]).unwrap_err();
        assert_eq!(ExitStatus::of_clap(&help), ExitStatus::Done);
        assert_eq!(ExitStatus::of_clap(&version), ExitStatus::Done);
        assert_eq!(ExitStatus::of_clap(&unknown), ExitStatus::Usage);
    }
}
