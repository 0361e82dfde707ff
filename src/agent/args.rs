//! The arguments of one agent run as the command line gives them (agent-contract.md
//! section 2), and what is wrong with a malformed command line. Parsed by
//! [`crate::cli::agent`].

use std::path::PathBuf;

/// The usage line printed for a malformed command line (exit 2).
pub const USAGE: &str = "usage: skyhook-agent MODE [ROOT_MOUNT] COPY_DIR [INTERRUPT_DATA]";

/// The root mount of the legacy forms.
pub const LEGACY_ROOT: &str = "/root";

/// Arguments of a mode run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunArgs {
    /// The mode string as given (may be unknown).
    pub mode: String,
    /// The root mount (agent side), absolute.
    pub root: PathBuf,
    /// The copy dir (host path), absolute.
    pub copy_dir: PathBuf,
    /// The interrupt payload (base64), when given.
    pub payload: Option<String>,
}

/// A malformed command line (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// Wrong number of arguments.
    #[error("{USAGE}")]
    Count,
    /// A path that must be absolute is not.
    #[error("{what} must be an absolute path, got {value:?}\n{USAGE}")]
    NotAbsolute {
        /// `ROOT_MOUNT` or `COPY_DIR`.
        what: &'static str,
        /// The value as given.
        value: String,
    },
    /// `completions SHELL` names a shell there is no completion script for.
    #[error("completions: unknown shell {0:?} (bash, zsh, fish, elvish, powershell)")]
    Shell(String),
    /// `validate` or `completions` with other than one argument after it.
    #[error("{form} takes one {what}, got {got} arguments\nusage: skyhook-agent {form} {what}")]
    Arity {
        /// `validate` or `completions`.
        form: &'static str,
        /// `CONFIG_JSON` or `SHELL`.
        what: &'static str,
        /// The number of arguments after the form's word.
        got: usize,
    },
    /// Interrupt data (a fourth argument) after a known mode other than `interrupt`; the
    /// Go agent (v7) refuses it alike. An unknown mode stays a no-op (section 2).
    #[error("stage {mode:?} does not accept interrupt data\n{USAGE}")]
    InterruptData {
        /// The mode as given.
        mode: String,
    },
    /// `--version` (or `-V`) followed by more arguments, refused as by the Go agent (v7).
    #[error("--version does not accept additional arguments\n{USAGE}")]
    VersionArgs,
    /// An argument is not valid UTF-8.
    #[error("arguments must be valid UTF-8\n{USAGE}")]
    NotUtf8,
    /// `--help`, `--version` or a clap error: clap renders it.
    #[error("{0}")]
    Clap(#[from] clap::Error),
}
