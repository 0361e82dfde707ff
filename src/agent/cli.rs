//! The agent's command line (agent-contract.md section 2): positional forms, current and
//! legacy, plus `validate CONFIG_JSON`, `--version` and `--help`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;

/// The usage line printed for a malformed command line (exit 2).
pub const USAGE: &str = "usage: skyhook-agent MODE [ROOT_MOUNT] COPY_DIR [INTERRUPT_DATA]";

/// The root mount of the legacy forms.
pub const LEGACY_ROOT: &str = "/root";

const AFTER_HELP: &str = "\
FORMS (the operator uses the first two):
  skyhook-agent MODE ROOT_MOUNT COPY_DIR            run one mode of the package in COPY_DIR
  skyhook-agent interrupt ROOT_MOUNT COPY_DIR DATA  run an interrupt (DATA: base64 JSON)
  skyhook-agent MODE COPY_DIR                       legacy: ROOT_MOUNT is /root
  skyhook-agent interrupt COPY_DIR DATA             legacy: ROOT_MOUNT is /root
  skyhook-agent validate CONFIG_JSON                check a config.json, its step files and
                                                    .rhai steps (as skyhook-run check)
  skyhook-agent serve [OPTIONS]                     the remote step API (serve --help)

MODES:
  apply, apply-check, config, config-check, upgrade, upgrade-check, uninstall,
  uninstall-check, post-interrupt, post-interrupt-check, interrupt.
  An unknown mode prints a warning and exits 0 (an older agent survives a newer operator):
  after the banner when SKYHOOK_RESOURCE_ID is usable, at once without it.

ENVIRONMENT:
  SKYHOOK_RESOURCE_ID         <id>_<package>_<version> (required for every known mode)
  SKYHOOK_ROOT_DIR            state root on the host (default /etc/skyhook)
  SKYHOOK_LOG_DIR             log root on the host (default /var/log/skyhook)
  SKYHOOK_DATA_DIR            legacy copy source (default /skyhook-package)
  SKYHOOK_AGENT_WRITE_LOGS    write per-step log files (default true)
  SKYHOOK_AGENT_BUFFER_LIMIT  bytes read from a step's output per chunk (default 8192;
                              ignored with SKYHOOK_AGENT_LOG_FORMAT=plain)
  SKYHOOK_AGENT_LOG_FORMAT    step output on the console and in log files: prefixed
                              ([out]/[err] and time on every line, v6; default) or
                              plain (lines as written, v7)
  COPY_RESOLV                 copy /etc/resolv.conf to the host first (default true)
  OVERLAY_ALWAYS_RUN_STEP     ignore step flags (default false)
  SKYHOOK_SCRIPT_TIMEOUT      wall-clock limit of a .rhai step, seconds (default 600)
  SKYHOOK_REDACT_ENV          comma-separated variable names whose values are shown as ***
                              in every step's output and logs
  SKYHOOK_SECRETS_DIR         where secret(name, key) reads mounted Secrets
                              (default /var/run/secrets/skyhook)
  SKYHOOK_ALLOWED_SECRETS     comma-separated Secret names secret() may read (default none)

STEPS:
  A step whose path ends in .rhai runs in-process in the Rhai runtime with the host API
  (docs/host-api.md); any other step runs as a process chrooted into ROOT_MOUNT. In a
  *-check mode a .rhai script runs with its changes held back: any change it would make is
  drift and fails the check. Every .rhai step of the mode and its imports are compiled
  before anything on the host is written.

EXIT STATUS:
  0  the mode completed (or unknown mode, or everything already done)
  1  a step or check failed, invalid package or environment, interrupt failed, or stopped
     by SIGTERM before its last step
  2  malformed command line";

/// Raw clap view: everything positional so that the Python argument forms keep working.
#[derive(Debug, Parser)]
#[command(
    name = "skyhook-agent",
    version,
    about = "Skyhook node agent: runs a package's lifecycle steps on the host",
    after_help = AFTER_HELP,
    override_usage = "skyhook-agent MODE [ROOT_MOUNT] COPY_DIR [INTERRUPT_DATA]\n       skyhook-agent validate CONFIG_JSON"
)]
struct RawArgs {
    /// MODE, ROOT_MOUNT, COPY_DIR and INTERRUPT_DATA, as the forms below describe.
    #[arg(
        value_name = "ARGS",
        allow_hyphen_values = true,
        trailing_var_arg = true,
        hide = true
    )]
    args: Vec<OsString>,
}

/// A parsed invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// `validate CONFIG_JSON`.
    Validate(PathBuf),
    /// A mode (or interrupt) run.
    Run(RunArgs),
}

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
    /// An argument is not valid UTF-8.
    #[error("arguments must be valid UTF-8\n{USAGE}")]
    NotUtf8,
    /// `--help`, `--version` or a clap error: clap renders and exits itself.
    #[error("{0}")]
    Clap(#[from] clap::Error),
}

/// Parse the arguments after the program name.
///
/// # Errors
/// [`UsageError`] for every malformed form; `--help`/`--version` come back as
/// [`UsageError::Clap`] whose `exit()` prints and exits 0.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Invocation, UsageError> {
    parse_args(args)
}

/// The clap definition of `skyhook-agent` (its `--help`), for generated man pages.
pub fn command() -> clap::Command {
    <RawArgs as clap::CommandFactory>::command()
}

fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Invocation, UsageError> {
    let raw =
        RawArgs::try_parse_from(std::iter::once(OsString::from("skyhook-agent")).chain(args))?;
    let args: Vec<String> = raw
        .args
        .into_iter()
        .map(|a| a.into_string().map_err(|_| UsageError::NotUtf8))
        .collect::<Result<_, _>>()?;
    let (mode, root, copy_dir, payload) = match args.as_slice() {
        [v, config] if v == "validate" => return Ok(Invocation::Validate(PathBuf::from(config))),
        [mode, copy] => (mode.clone(), LEGACY_ROOT.to_string(), copy.clone(), None),
        [mode, copy, payload] if mode == "interrupt" => (
            mode.clone(),
            LEGACY_ROOT.to_string(),
            copy.clone(),
            Some(payload.clone()),
        ),
        [mode, root, copy] => (mode.clone(), root.clone(), copy.clone(), None),
        [mode, root, copy, payload] => (
            mode.clone(),
            root.clone(),
            copy.clone(),
            Some(payload.clone()),
        ),
        _ => return Err(UsageError::Count),
    };
    for (what, value) in [("ROOT_MOUNT", &root), ("COPY_DIR", &copy_dir)] {
        if !value.starts_with('/') {
            return Err(UsageError::NotAbsolute {
                what,
                value: value.clone(),
            });
        }
    }
    Ok(Invocation::Run(RunArgs {
        mode,
        root: PathBuf::from(root),
        copy_dir: PathBuf::from(copy_dir),
        payload,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Invocation, UsageError> {
        parse(args.iter().map(OsString::from))
    }

    fn run(mode: &str, root: &str, copy: &str, payload: Option<&str>) -> Invocation {
        Invocation::Run(RunArgs {
            mode: mode.into(),
            root: root.into(),
            copy_dir: copy.into(),
            payload: payload.map(String::from),
        })
    }

    #[test]
    fn forms() {
        assert_eq!(
            p(&["apply", "/root", "/c"]).unwrap(),
            run("apply", "/root", "/c", None)
        );
        assert_eq!(
            p(&["apply", "/c"]).unwrap(),
            run("apply", "/root", "/c", None)
        );
        assert_eq!(
            p(&["interrupt", "/c", "eA=="]).unwrap(),
            run("interrupt", "/root", "/c", Some("eA=="))
        );
        // only the exact word `interrupt` selects the legacy interrupt form
        assert_eq!(
            p(&["interrupt", "/root", "/copy"]).unwrap(),
            run("interrupt", "/root", "/root", Some("/copy"))
        );
        assert_eq!(
            p(&["interrupt", "/r", "/c", "eA=="]).unwrap(),
            run("interrupt", "/r", "/c", Some("eA=="))
        );
        assert_eq!(
            p(&["apply", "/r", "/c", "x"]).unwrap(),
            run("apply", "/r", "/c", Some("x"))
        );
        assert_eq!(
            p(&["validate", "x/config.json"]).unwrap(),
            Invocation::Validate("x/config.json".into())
        );
    }

    #[test]
    fn usage_errors() {
        assert!(matches!(p(&["apply"]), Err(UsageError::Count)));
        assert!(matches!(p(&[]), Err(UsageError::Count)));
        assert!(matches!(
            p(&["a", "/b", "/c", "d", "e"]),
            Err(UsageError::Count)
        ));
        assert!(matches!(
            p(&["apply", "/r", "rel"]),
            Err(UsageError::NotAbsolute {
                what: "COPY_DIR",
                ..
            })
        ));
        assert!(matches!(
            p(&["apply", "r", "/c"]),
            Err(UsageError::NotAbsolute {
                what: "ROOT_MOUNT",
                ..
            })
        ));
    }
}
