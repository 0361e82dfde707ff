//! The command line of `skyhook-agent` (agent-contract.md section 2): the positional forms,
//! current and legacy, plus `validate CONFIG_JSON`, `serve [OPTIONS]`, `completions SHELL`,
//! `--version` and `--help`; and [`main`], which dispatches them and maps the result onto
//! the exit table ([`super::exit`]); and a run's startup (`run`): resource id, host root,
//! banner, runtime, SIGTERM, then the mode or interrupt (`agent::mode`, `agent::interrupt`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::Parser;

use super::exit::{CliError, ExitStatus};
use crate::agent;
use crate::agent::args::{LEGACY_ROOT, RunArgs, UsageError};
use crate::agent::error::AgentError;
use crate::agent::interrupt::{Interrupt, InterruptRun};
use crate::agent::mode::ModeRun;
use crate::host::root::HostRoot;
use crate::mode::Console;
use crate::mode::settings::{ResourceId, Settings};
use crate::package::Mode;

/// `--version`: the package version, the git revision and the build date (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("SKYHOOK_GIT_REV"),
    ", built ",
    env!("SKYHOOK_BUILD_DATE"),
    ")"
);

const AFTER_HELP: &str = "\
FORMS (the operator uses the first two):
  skyhook-agent MODE ROOT_MOUNT COPY_DIR            run one mode of the package in COPY_DIR
  skyhook-agent interrupt ROOT_MOUNT COPY_DIR DATA  run an interrupt (DATA: base64 JSON)
  skyhook-agent MODE COPY_DIR                       legacy: ROOT_MOUNT is /root
  skyhook-agent interrupt COPY_DIR DATA             legacy: ROOT_MOUNT is /root
  skyhook-agent validate CONFIG_JSON                check a config.json, its step files and
                                                    .rhai steps (as skyhook-run check)
  skyhook-agent serve [OPTIONS]                     the remote step API (serve --help)
  skyhook-agent completions SHELL                   a completion script (bash, zsh, fish)

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

EXIT STATUS (the table of all three commands: README.md, \"Exit status\"):
  0  the mode completed (or unknown mode, or everything already done)
  1  a step or check failed, invalid package or environment, interrupt failed, or stopped
     by SIGTERM before its last step
  2  malformed command line (also: DATA after a mode other than interrupt, or anything
     after --version, as the Go agent v7)";

/// Raw clap view: everything positional so that the Python argument forms keep working.
#[derive(Debug, Parser)]
#[command(
    name = "skyhook-agent",
    version = VERSION,
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
    /// `serve OPTIONS...`: the remote step API, with the options after `serve`.
    Serve(Vec<OsString>),
    /// `completions SHELL`: print a completion script.
    Completions(clap_complete::Shell),
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
    let args: Vec<OsString> = args.into_iter().collect();
    if args.first().is_some_and(|a| a == "serve") {
        return Ok(Invocation::Serve(args[1..].to_vec()));
    }
    // clap would print the version and ignore what follows it; the Go agent (v7) refuses it.
    if args.len() > 1 && (args[0] == "--version" || args[0] == "-V") {
        return Err(UsageError::VersionArgs);
    }
    let raw =
        RawArgs::try_parse_from(std::iter::once(OsString::from("skyhook-agent")).chain(args))?;
    let args: Vec<String> = raw
        .args
        .into_iter()
        .map(|a| a.into_string().map_err(|_| UsageError::NotUtf8))
        .collect::<Result<_, _>>()?;
    // `--help` where a path or a form's argument goes (never in INTERRUPT_DATA) is a call
    // for help, as it is as the first word.
    if args
        .iter()
        .skip(1)
        .take(2)
        .any(|a| a == "--help" || a == "-h")
    {
        return Err(RawArgs::try_parse_from(["skyhook-agent", "--help"])
            .expect_err("--help ends parsing")
            .into());
    }
    let form = |form, what| UsageError::Arity {
        form,
        what,
        got: args.len() - 1,
    };
    match args.as_slice() {
        [v, ..] if v == "validate" && args.len() != 2 => {
            return Err(form("validate", "CONFIG_JSON"));
        }
        [c, first, ..] if c == "completions" && !first.starts_with('/') && args.len() != 2 => {
            return Err(form("completions", "SHELL"));
        }
        [c] if c == "completions" => return Err(form("completions", "SHELL")),
        _ => {}
    }
    let (mode, root, copy_dir, payload) = match args.as_slice() {
        [v, config] if v == "validate" => return Ok(Invocation::Validate(PathBuf::from(config))),
        // No mode run has a relative COPY_DIR, so this form takes nothing from the operator.
        [c, shell] if c == "completions" && !shell.starts_with('/') => {
            return <clap_complete::Shell as clap::ValueEnum>::from_str(shell, true)
                .map(Invocation::Completions)
                .map_err(|_| UsageError::Shell(shell.clone()));
        }
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
    if payload.is_some() && Mode::parse(&mode).is_some_and(|m| m != Mode::Interrupt) {
        return Err(UsageError::InterruptData { mode });
    }
    Ok(Invocation::Run(RunArgs {
        mode,
        root: PathBuf::from(root),
        copy_dir: PathBuf::from(copy_dir),
        payload,
    }))
}

/// The definition the completion scripts are generated from: the first word completes to a
/// mode, `validate`, `serve` or `completions` (or `-h`, `-V`); after a mode come paths
/// (ROOT_MOUNT, COPY_DIR) and the interrupt data, after `validate` a file, after
/// `completions` a shell, after `serve` its options.
pub fn completion_command() -> clap::Command {
    // No `-h` after a mode or `validate`: an empty reply lets the shell complete paths.
    let paths = |name: &'static str| {
        clap::Command::new(name).disable_help_flag(true).arg(
            clap::Arg::new("ARGS")
                .num_args(0..=3)
                .value_hint(clap::ValueHint::AnyPath),
        )
    };
    clap::Command::new("skyhook-agent")
        .version(VERSION)
        .disable_help_subcommand(true)
        .subcommands(Mode::ALL.iter().map(|m| paths(m.as_str())))
        .subcommand(
            clap::Command::new("validate").disable_help_flag(true).arg(
                clap::Arg::new("CONFIG_JSON")
                    .required(true)
                    .value_hint(clap::ValueHint::FilePath),
            ),
        )
        .subcommand(super::serve::command().name("serve"))
        .subcommand(
            clap::Command::new("completions").arg(
                clap::Arg::new("SHELL")
                    .required(true)
                    .value_parser(clap::value_parser!(clap_complete::Shell)),
            ),
        )
}

/// Run `skyhook-agent` with `args` (after the program name) and `env`: parse, then a mode
/// run, `validate`, `serve` or `completions`.
pub fn main(
    args: impl IntoIterator<Item = OsString>,
    env: impl IntoIterator<Item = (OsString, OsString)>,
) -> ExitStatus {
    let invocation = match parse(args) {
        Ok(i) => i,
        Err(UsageError::Clap(e)) => {
            return super::stdout::status("skyhook-agent", e.print(), ExitStatus::of_clap(&e));
        }
        Err(e) => {
            eprintln!("{e}");
            return CliError::Agent(e.into()).exit_status();
        }
    };
    let console = Console::stdio();
    let run_args = match invocation {
        Invocation::Serve(args) => return super::serve::main(args),
        Invocation::Completions(shell) => {
            return super::docs::completions(shell, &mut completion_command(), "skyhook-agent");
        }
        Invocation::Validate(path) => {
            // The report is the result: a write that fails fails the command.
            let stdout = super::stdout::Watched::default();
            let console =
                Console::with_writers(Box::new(stdout.clone()), Box::new(std::io::stderr()));
            init_diag(env, &console);
            let ok = crate::agent::validate(&path, &console);
            return super::stdout::status(
                "skyhook-agent",
                stdout.result(),
                ExitStatus::from_ok(ok),
            );
        }
        Invocation::Run(run_args) => run_args,
    };
    let env: Vec<(OsString, OsString)> = env.into_iter().collect();
    init_diag(env.clone(), &console);
    let result = Settings::from_env(env)
        .map_err(AgentError::from)
        .and_then(|settings| run(&run_args, &settings, &console));
    match result {
        Ok(ok) => ExitStatus::from_ok(ok),
        Err(e) => {
            console.error(&format!(
                "skyhook-agent: error: {}",
                crate::agent::error::render_chain(&e)
            ));
            CliError::Agent(e).exit_status()
        }
    }
}

/// Run one mode or interrupt, in the startup order of agent-contract.md section 2 after the
/// arguments: an unknown mode prints its warning and succeeds before anything else is
/// validated, so an older agent survives a newer operator whatever the environment; then
/// `SKYHOOK_RESOURCE_ID`, the host root, `COPY_RESOLV`, the banner, a current-thread tokio
/// runtime with SIGTERM → [`Cancel::stop`](crate::process::Cancel::stop), and the mode
/// ([`ModeRun`]) or interrupt ([`InterruptRun`]). `Ok(true)` = exit 0, `Ok(false)` = exit 1.
///
/// # Errors
/// Anything that stops the run before or between steps (see [`AgentError`]).
fn run(args: &RunArgs, settings: &Settings, console: &Console) -> Result<bool, AgentError> {
    for w in &settings.warnings {
        console.warn(w);
    }
    let mode = Mode::parse(&args.mode);
    let unknown_mode = || {
        let all: Vec<&str> = Mode::ALL.iter().map(|m| m.as_str()).collect();
        console.error(&format!(
            "WARNING:root:This version of the Agent doesn't support the {} mode. Options are: {}.",
            args.mode,
            all.join(",")
        ));
        Ok(true)
    };
    // An unknown mode exits 0 for the operator's forward compatibility (section 2): after the
    // banner and the resolver copy as Python does when the resource id is usable, at once
    // (nothing written, no banner) when it is not.
    let id = match (ResourceId::parse(&settings.resource_id), mode) {
        (Ok(id), _) => id,
        (Err(_), None) => return unknown_mode(),
        (Err(e), Some(_)) => return Err(e.into()),
    };
    let root = HostRoot::open(&args.root).map_err(|source| AgentError::OpenRoot {
        path: args.root.clone(),
        source,
    })?;
    if settings.copy_resolv {
        agent::prepare::copy_resolv(&root, Path::new("/etc/resolv.conf"))?;
    }
    console.write_out(agent::banner::render(args, settings, &id).as_bytes());
    let Some(mode) = mode else {
        return unknown_mode();
    };
    let interrupt = match (mode, &args.payload) {
        (Mode::Interrupt, Some(p)) => Some(Interrupt::decode(p)?),
        (Mode::Interrupt, None) => return Err(UsageError::Count.into()),
        _ => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AgentError::Runtime)?;
    rt.block_on(async {
        let cancel = crate::process::Cancel::new();
        agent::signal::install(&cancel, console).map_err(AgentError::Runtime)?;
        match interrupt {
            Some(i) => {
                InterruptRun {
                    root: &root,
                    settings,
                    id: &id,
                    copy_dir: &args.copy_dir,
                    cancel: &cancel,
                    console,
                }
                .run_mode(&i)
                .await
            }
            None => {
                ModeRun {
                    root: &root,
                    settings,
                    id: &id,
                    copy_dir: &args.copy_dir,
                    mode,
                    cancel: &cancel,
                    console,
                    declarations: None,
                    preflight: true,
                }
                .run()
                .await
            }
        }
    })
}

/// Diagnostics (`SKYHOOK_LOG`) on stderr; a bad setting is a warning, not an error.
fn init_diag(env: impl IntoIterator<Item = (OsString, OsString)>, console: &Console) {
    let env: Vec<(OsString, OsString)> = env.into_iter().collect();
    if let Err(e) = crate::diag::init(&env) {
        console.warn(&format!("{e}; running without diagnostics"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::args::USAGE;

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
            p(&["validate", "x/config.json"]).unwrap(),
            Invocation::Validate("x/config.json".into())
        );
    }

    /// `completions SHELL` and `serve ...` are forms of their own; no mode run form (whose
    /// COPY_DIR is absolute) changes.
    #[test]
    fn completions_and_serve_forms() {
        assert_eq!(
            p(&["completions", "bash"]).unwrap(),
            Invocation::Completions(clap_complete::Shell::Bash)
        );
        assert!(matches!(
            p(&["completions", "tcsh"]),
            Err(UsageError::Shell(s)) if s == "tcsh"
        ));
        assert_eq!(
            p(&["completions", "/copy"]).unwrap(),
            run("completions", "/root", "/copy", None)
        );
        assert_eq!(
            p(&["serve", "--listen", "127.0.0.1:0"]).unwrap(),
            Invocation::Serve(vec!["--listen".into(), "127.0.0.1:0".into()])
        );
    }

    /// `skyhook-agent completions bash` exits 0 without a COPY_DIR (it failed with "COPY_DIR
    /// must be an absolute path").
    #[test]
    fn completions_bash_exits_0() {
        let env: [(OsString, OsString); 0] = [];
        assert_eq!(
            main(["completions", "bash"].map(OsString::from), env),
            ExitStatus::Done
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

    /// `--help` after a form's word is help (exit 0), not a path or a shell (exit 1 or 2).
    #[test]
    fn help_after_a_form_is_help() {
        for args in [
            &["validate", "--help"][..],
            &["completions", "--help"],
            &["apply", "--help"],
            &["apply", "/", "-h"],
        ] {
            match p(args) {
                Err(UsageError::Clap(e)) => {
                    assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp, "{args:?}");
                    assert_eq!(ExitStatus::of_clap(&e), ExitStatus::Done);
                }
                other => panic!("{args:?}: {other:?}"),
            }
        }
        // INTERRUPT_DATA is the operator's, never a call for help
        assert_eq!(
            p(&["interrupt", "/r", "/c", "-h"]).unwrap(),
            run("interrupt", "/r", "/c", Some("-h"))
        );
    }

    /// `validate` and `completions` with more or fewer arguments say so (they blamed
    /// ROOT_MOUNT).
    #[test]
    fn wrong_arity_of_a_form_names_the_form() {
        for (args, form, got) in [
            (
                &["validate", "demo/config.json", "extra"][..],
                "validate",
                2,
            ),
            (&["validate"], "validate", 0),
            (&["completions", "bash", "extra"], "completions", 2),
            (&["completions"], "completions", 0),
        ] {
            match p(args) {
                Err(e @ UsageError::Arity { .. }) => {
                    let text = e.to_string();
                    assert!(
                        text.starts_with(&format!("{form} takes one "))
                            && text.contains(&format!("got {got} arguments")),
                        "{text}"
                    );
                    assert_eq!(CliError::Agent(e.into()).exit_status(), ExitStatus::Usage);
                }
                other => panic!("{args:?}: {other:?}"),
            }
        }
    }

    /// `--version` alone prints the full version line (with the revision and the build
    /// date); with anything after it, it is a malformed command line, exit 2 with the Go
    /// agent's (v7) message (it printed the version and exited 0).
    #[test]
    fn version_with_more_arguments_is_a_usage_error() {
        match p(&["--version"]) {
            Err(UsageError::Clap(e)) => {
                assert_eq!(e.kind(), clap::error::ErrorKind::DisplayVersion);
                assert_eq!(e.to_string(), format!("skyhook-agent {VERSION}\n"));
            }
            other => panic!("{other:?}"),
        }
        for args in [
            &["--version", "x"][..],
            &["-V", "x"],
            &["--version", "/r", "/c"],
        ] {
            let e = p(args).expect_err("--version with more arguments");
            assert_eq!(
                e.to_string(),
                format!("--version does not accept additional arguments\n{USAGE}"),
                "{args:?}"
            );
            assert_eq!(CliError::Agent(e.into()).exit_status(), ExitStatus::Usage);
        }
        let env: [(OsString, OsString); 0] = [];
        assert_eq!(
            main(["--version", "x"].map(OsString::from), env),
            ExitStatus::Usage
        );
    }

    /// Interrupt data given to a mode other than `interrupt` is a malformed command line:
    /// exit 2 with the Go agent's (v7) message, before anything runs (the mode ran and the
    /// data was ignored). An unknown mode stays a no-op whatever follows it (v7 too).
    #[test]
    fn interrupt_data_for_another_mode_is_a_usage_error() {
        for mode in ["apply", "config-check", "uninstall", "post-interrupt"] {
            let e = p(&[mode, "/r", "/c", "payload"]).expect_err("a mode with interrupt data");
            assert_eq!(
                e.to_string(),
                format!("stage \"{mode}\" does not accept interrupt data\n{USAGE}")
            );
            assert_eq!(CliError::Agent(e.into()).exit_status(), ExitStatus::Usage);
        }
        let args = ["apply", "/nonexistent-root", "/nonexistent-copy", "eA=="].map(Into::into);
        let env = [("SKYHOOK_RESOURCE_ID", "sky-0000-1_demo_1.0.0")]
            .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        assert_eq!(main(args, env), ExitStatus::Usage);
        assert_eq!(
            p(&["future-stage", "/r", "/c", "eA=="]).unwrap(),
            run("future-stage", "/r", "/c", Some("eA=="))
        );
        assert_eq!(
            p(&["interrupt", "/r", "/c", "eA=="]).unwrap(),
            run("interrupt", "/r", "/c", Some("eA=="))
        );
    }

    /// An unknown mode exits 0 with its warning even when `SKYHOOK_RESOURCE_ID` is unset (and the
    /// root does not exist): the operator's forward compatibility comes before validation.
    #[test]
    fn unknown_mode_exits_0_before_the_resource_id_is_validated() {
        let args = ["future-stage", "/nonexistent-root", "/nonexistent-copy"].map(Into::into);
        let env = [("PATH", "/bin")].map(|(k, v)| (k.into(), v.into()));
        assert_eq!(main(args, env), ExitStatus::Done);
        // a known mode without SKYHOOK_RESOURCE_ID still fails
        let args = ["apply", "/nonexistent-root", "/nonexistent-copy"].map(Into::into);
        let env = [("PATH", "/bin")].map(|(k, v)| (k.into(), v.into()));
        assert_eq!(main(args, env), ExitStatus::Failure);
    }
}
