//! `skyhook-run`: the local tool for package authors. A thin edge over
//! [`skyhook::local`]: argument parsing, rendering and exit codes.
//!
//! - `skyhook-run SCRIPT --root DIR [...]`: one `.rhai` script against a host root, a dry
//!   run unless `--apply`.
//! - `skyhook-run --package DIR --mode MODE --root DIR [...]`: a whole package as the agent
//!   would run it.
//! - `skyhook-run check FILE...`: compile scripts without running them.
//! - `skyhook-run completions bash|zsh|fish`: shell completions from these definitions.
//!
//! Exit codes (interface): 0 done; 1 any error (a failed script or step, drift in a check,
//! a compile error, a usage error); 2 with `--detailed-exitcode`, a dry run that succeeded
//! with changes pending.

/// Counts each thread's allocations, so that a script run's memory can be bounded
/// ([`skyhook::script::memory`], `max_memory`).
#[global_allocator]
static ALLOCATOR: skyhook::script::memory::CountingAlloc = skyhook::script::memory::CountingAlloc;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};
use skyhook::agent::console::Console;
use skyhook::agent::error::AgentError;
use skyhook::host::ExecMode;
use skyhook::local::{LocalError, PackageRun, ScriptRun, error_json, script_error_json};
use skyhook::package::Mode;
use skyhook::script::host_api::Capture;
use skyhook::script::lint::{Checker, Diagnostic, Severity, check_step};
use skyhook::script::{Limits, ModuleStore, ScriptEngine, ScriptOutput, StdioOutput};

/// Done: the run succeeded (a dry run: whatever it plans, unless --detailed-exitcode).
const EXIT_OK: u8 = 0;
/// Any error, usage errors included.
const EXIT_ERROR: u8 = 1;
/// With --detailed-exitcode: a dry run that succeeded with changes pending.
const EXIT_CHANGES: u8 = 2;

const AFTER_HELP: &str = "\
Dry run (the default):
  The script runs for real, but every change goes to a plan instead of the host: reads see
  the planned writes, commands are recorded and not run (unless marked read_only, e.g.
  query()), step.dry_run is true. Nothing under --root changes. The plan lists, in the
  order they happened, each change (`~`, with a unified diff for file contents and
  mode/owner changes, after a `+ mkdir DIR` line for each directory it creates; guarded
  commands such as run(argv, #{creates: path}) are changes too), each action
  (`> would run:`: unguarded commands, service restarts, daemon-reload, update-grub), each
  interrupt (`!`) and the script's stdout (print, log::info); each change, action and
  interrupt ends with `  # file:line`, the script line that made it. The summary line ends it:
      Plan: 2 to change, 5 unchanged, 1 action.
  --apply makes the changes and prints what changed (`Apply: 2 changed, 5 unchanged.`);
  --apply --diff also shows the diffs of file contents, as the plan does.
  SIGTERM or Ctrl-C during a script's --apply stops the script at its next operation and
  still writes what it changed so far (exit 1); a second signal exits at once.
  A *-check mode (--mode apply-check) runs the script as a check: what it would change is
  drift, listed the same way, and the run fails (exit 1) when there is any.

Step context and environment:
  step.mode is --mode (default apply), step.args the --arg values, step.name the file stem.
  The step environment (env() in scripts, and commands' environment) is skyhook-run's own
  environment plus every --env K=V (later wins), as the agent passes its environment to
  steps. SKYHOOK_DIR and STEP_ROOT default to the configMaps folder's parent and the
  script's directory. Relative imports resolve in the script's directory; commands run
  chrooted into --root. configMaps come from --configmaps DIR (may lie outside the root), or,
  for a script in a package's skyhook_dir/, from the package's configmaps/ folder.

Output:
  Script output (print, debug, log::) goes to stdout and stderr with secrets redacted. In a
  dry run the stdout output is part of the plan, in order (and each package step's under its
  `==> step` header); stderr output is written as it happens. Errors are
  `file:line:col: message` on stderr. With --output json stdout holds exactly one JSON
  document, specified by docs/plan.schema.json: the report (mode, changes, actions,
  unchanged, interrupts, summary, counts, items: the ordered list with positions, content
  hashes, diffs and the script's output) plus ok, return_code, error, errors
  ([{file, line, column, message}]), drift and exit_code; script output then goes to
  stderr (and into the items).

Packages (--package DIR --mode MODE):
  DIR holds config.json, skyhook_dir/ and usually configmaps/ (--configmaps replaces it).
  config.json is validated and every .rhai step compiled first. A dry run runs the mode's
  steps in order in one host session (later steps see earlier planned writes): .rhai steps
  on the plan (or check) executor, any other step listed as `would run: <path> <args>`,
  steps the agent would skip for an existing flag listed as skipped. With --apply the agent
  itself runs: the package is copied into the root at
  /var/lib/skyhook/skyhook-run/<name>-<version> (configMaps in its configmaps/), then the
  mode runs as on a node (bash steps chrooted into the root; flags, history and check results
  under SKYHOOK_ROOT_DIR, default /etc/skyhook, logs under SKYHOOK_LOG_DIR, default
  /var/log/skyhook, both inside the root; resource id SKYHOOK_RESOURCE_ID, default
  skyhook-run_<name>_<version>). Flags make a second --apply of a step skip it, as on a node
  (OVERLAY_ALWAYS_RUN_STEP=true runs them anyway).
  Interrupts a .rhai step requests (interrupt::reboot() ...) are never run by a step: the
  operator runs them in its interrupt stage when the package's Skyhook CR declares them.
  A dry run judges each request against --skyhook-cr FILE (or DIR/node-metadata/
  packages.json): a request the CR does not declare fails the step, as on a node.

Exit status:
  0 done; also --package with a mode that has no steps (it says so on stderr: the agent runs
    such a mode as a no-op);
  1 error (failed script or step, drift in a check, compile or usage error, a SCRIPT that is
    not a .rhai file, a --configmaps folder that does not exist);
  2 with --detailed-exitcode: a dry run that succeeded with changes pending (actions alone
    do not count).

Output never carries colour codes (plans and JSON are plain text, whatever the terminal);
only --help is coloured, on a terminal, and not when NO_COLOR is set. Diagnostics:
SKYHOOK_LOG=debug (stderr; SKYHOOK_LOG_FORMAT=json). Shell completions: `skyhook-run
completions bash|zsh|fish`; man pages: `skyhook-run man DIR`.

Checking scripts (skyhook-run check FILE...):
  Compiles each file with its imports and checks it without running anything: unknown
  functions and modules (with a did-you-mean), wrong argument counts, option keys a host
  function does not accept (literal #{...} maps), and warnings for known traps (a `\n` in a
  backtick string, the () result of trim/replace/make_upper/... used as a value). Prints
  `OK FILE` on stdout per file without errors and `file:line:col: error: ...` or
  `file:line:col: warning: ...` on stderr. Exit 0: no errors (warnings allowed); 1: any
  error (a syntax or import error, a finding, a file that is not .rhai).

Examples:
  skyhook-run apply.rhai --root /mnt/node-copy
  skyhook-run apply.rhai --root /mnt/node-copy --apply
  skyhook-run apply.rhai --root /mnt/node-copy --mode apply-check
  skyhook-run tune.rhai --root /mnt/node-copy --configmaps ./cm --env NODE_NAME=n1 --arg fast
  skyhook-run apply.rhai --root /mnt/node-copy --output json --detailed-exitcode
  skyhook-run --package examples/tuning --mode config --root /mnt/node-copy
  skyhook-run --package examples/tuning --mode config --root /mnt/node-copy --apply
  skyhook-run check skyhook_dir/*.rhai";

/// Run Skyhook Rhai step scripts and packages against a host root, as a dry run by default.
///
/// `skyhook-run SCRIPT --root DIR` runs one .rhai script and prints the plan: what it would
/// change (unified diffs), the commands and service/package actions it would run, and a
/// summary line. Nothing under DIR changes unless --apply is given.
/// `--version`: the package version, the git revision and the build date (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("SKYHOOK_GIT_REV"),
    ", built ",
    env!("SKYHOOK_BUILD_DATE"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "skyhook-run",
    version = VERSION,
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    /// The .rhai script to run (relative imports resolve in its directory).
    #[arg(
        value_name = "SCRIPT",
        required_unless_present = "package",
        conflicts_with = "package"
    )]
    script: Option<PathBuf>,

    /// Plan or run a whole package directory (config.json, skyhook_dir/, configmaps/) the way
    /// the agent would; needs --mode.
    #[arg(long, value_name = "DIR", requires = "mode")]
    package: Option<PathBuf>,

    /// The host root: every path a script touches resolves inside it, commands run chrooted
    /// into it.
    #[arg(long, value_name = "DIR", required_unless_present = "remote")]
    root: Option<PathBuf>,

    /// Run SCRIPT on a node through its remote step API (`skyhook-agent serve`):
    /// http://HOST:PORT, https://HOST:PORT (--tls-ca) or unix:/PATH. Plan by default, --apply, --mode check; the node's
    /// root is used (no --root). Only --env values are sent.
    #[arg(long, value_name = "URL", conflicts_with_all = ["package", "root"])]
    remote: Option<String>,

    /// The bearer token for --remote (a file holding it).
    #[arg(long, value_name = "FILE", requires = "remote")]
    token_file: Option<PathBuf>,

    /// CA certificates (PEM) to trust for an https:// --remote.
    #[arg(long, value_name = "FILE", requires = "remote")]
    tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for an https:// --remote that asks for one; needs --tls-key.
    #[arg(long, value_name = "FILE", requires_all = ["remote", "tls_key"])]
    tls_cert: Option<PathBuf>,

    /// Client private key (PEM) for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,

    /// Make the changes (default: a dry run that changes nothing).
    #[arg(long)]
    apply: bool,

    /// With --apply (one script): show the unified diff of each file content change, as a
    /// dry run does.
    #[arg(long, requires = "apply")]
    diff: bool,

    /// The step's mode (step.mode): apply, config, uninstall, upgrade, post-interrupt or a
    /// *-check mode, which checks (drift fails). Default for a script: apply.
    #[arg(long, value_name = "MODE")]
    mode: Option<String>,

    /// The configMaps folder (config:: in scripts); may lie outside the root.
    #[arg(long, value_name = "DIR")]
    configmaps: Option<PathBuf>,

    /// The Skyhook CR (YAML or JSON) that deploys the package: a dry run judges the
    /// interrupts its steps request against the CR's `interrupt`/`configInterrupts` (default:
    /// DIR/node-metadata/packages.json when present). Packages only.
    #[arg(long = "skyhook-cr", value_name = "FILE")]
    skyhook_cr: Option<PathBuf>,

    /// Add K=V to the step environment (repeatable; later wins).
    #[arg(long = "env", value_name = "K=V", value_parser = parse_kv)]
    env: Vec<(String, String)>,

    /// A step argument (step.args; repeatable, in order). Scripts only.
    #[arg(
        long = "arg",
        value_name = "X",
        allow_hyphen_values = true,
        conflicts_with = "package"
    )]
    args: Vec<String>,

    /// Output format: text, or one JSON document on stdout (script output then goes to
    /// stderr).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Output::Text)]
    output: Output,

    /// Exit 2 (instead of 0) from a dry run that succeeded with changes pending.
    #[arg(long)]
    detailed_exitcode: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Human-readable plan and summary line.
    Text,
    /// One JSON document.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compile scripts and their imports and check them without running them: unknown
    /// functions and modules (with a suggestion), wrong argument counts, option keys a host
    /// function does not accept, and known Rhai traps (warnings). Prints `OK FILE` for each
    /// file without errors, and `file:line:col: error: ...` / `warning: ...` on stderr.
    /// Relative imports resolve in each script's directory. Exit 0 when no file has an error
    /// (warnings allowed), 1 otherwise.
    Check {
        /// The .rhai files to check.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Write the man pages skyhook-run.1 and skyhook-agent.1, generated from the command-line
    /// definitions, into DIR (created if missing), e.g. `skyhook-run man /usr/share/man/man1`.
    Man {
        /// The directory to write the pages into.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print a completion script for SHELL on stdout, generated from these definitions, e.g.
    /// `skyhook-run completions bash > /etc/bash_completion.d/skyhook-run`.
    Completions {
        /// bash, zsh, fish (also elvish, powershell).
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected K=V, got {s:?}")),
    }
}

fn main() -> ExitCode {
    // Adopt the orphans of commands, so that nothing a script started outlives it.
    if let Err(e) = skyhook::process::reaper::enable_subreaper() {
        eprintln!("skyhook-run: warning: cannot become a child subreaper: {e}");
    }
    // Diagnostics on stderr when SKYHOOK_LOG is set (stdout stays the plan or JSON document).
    let env: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os().collect();
    if let Err(e) = skyhook::diag::init(&env) {
        eprintln!("WARNING: {e}; running without diagnostics");
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0; anything else is a usage error.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_ERROR } else { EXIT_OK });
        }
    };
    let code = match &cli.command {
        Some(Command::Check { files }) => check(files),
        Some(Command::Completions { shell }) => completions(*shell),
        Some(Command::Man { dir }) => man_pages(dir),
        None => run(&cli),
    };
    ExitCode::from(code)
}

/// Write `skyhook-run.1` and `skyhook-agent.1` into `dir` (clap_mangen, from the same
/// definitions as `--help`).
fn man_pages(dir: &Path) -> u8 {
    use clap::CommandFactory;
    let pages = [
        ("skyhook-run.1", Cli::command()),
        ("skyhook-agent.1", skyhook::agent::cli::command()),
    ];
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("skyhook-run: cannot create {}: {e}", dir.display());
        return EXIT_ERROR;
    }
    for (name, cmd) in pages {
        let mut roff = Vec::new();
        let path = dir.join(name);
        let written = clap_mangen::Man::new(cmd)
            .render(&mut roff)
            .and_then(|()| std::fs::write(&path, &roff));
        if let Err(e) = written {
            eprintln!("skyhook-run: cannot write {}: {e}", path.display());
            return EXIT_ERROR;
        }
        println!("{}", path.display());
    }
    EXIT_OK
}

fn completions(shell: clap_complete::Shell) -> u8 {
    use clap::CommandFactory;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "skyhook-run", &mut script);
    match std::io::stdout().write_all(&script) {
        Ok(()) => EXIT_OK,
        // `skyhook-run completions bash | head`: the reader has what it wanted.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => EXIT_OK,
        Err(e) => {
            eprintln!("skyhook-run: cannot write the completion script: {e}");
            EXIT_ERROR
        }
    }
}

fn usage(msg: &str) -> u8 {
    eprintln!("error: {msg}\n\nFor more information, try '--help'.");
    EXIT_ERROR
}

fn run(cli: &Cli) -> u8 {
    if let Some(url) = &cli.remote {
        return remote_run(cli, url);
    }
    let Some(root) = cli.root.clone() else {
        return usage("--root DIR is required");
    };
    let mode_text = cli.mode.as_deref().unwrap_or("apply");
    let Some(mode) = Mode::parse(mode_text) else {
        let all: Vec<&str> = Mode::ALL.iter().map(|m| m.as_str()).collect();
        return usage(&format!(
            "unknown mode {mode_text:?} (modes: {})",
            all.join(", ")
        ));
    };
    // The step environment: ours, then every --env (later wins).
    let mut env: Vec<(String, String)> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    for (k, v) in &cli.env {
        env.retain(|(n, _)| n != k);
        env.push((k.clone(), v.clone()));
    }
    if let Some(dir) = &cli.configmaps
        && !dir.is_dir()
    {
        eprintln!(
            "skyhook-run: error: --configmaps {}: no such directory",
            dir.display()
        );
        return EXIT_ERROR;
    }
    let json = cli.output == Output::Json;
    // Every limit but the deadline; the deadline (SKYHOOK_SCRIPT_TIMEOUT) is read from the
    // run's environment (ours plus --env), per run.
    let engine = ScriptEngine::new(Limits::default());
    // Script output: the terminal, or only stderr when stdout carries the JSON document.
    let output: Arc<dyn ScriptOutput> = if json {
        Arc::new(StderrOnly)
    } else {
        Arc::new(StdioOutput)
    };
    // Output in the report's ordered list: all of it in JSON; in a text plan stdout is
    // rendered by the plan, in order; an applied text run prints it live.
    let capture = match (json, cli.apply) {
        (true, _) => Some(Capture::Record),
        (false, false) => Some(Capture::StdoutInPlan),
        (false, true) => None,
    };
    match &cli.package {
        Some(_) if cli.diff => {
            usage("--diff shows the diffs of one script; --package --apply runs the agent flow")
        }
        Some(dir) => {
            let run = PackageRun {
                dir: dir.clone(),
                root,
                mode,
                configmaps: cli.configmaps.clone(),
                env,
                capture,
                skyhook_cr: cli.skyhook_cr.clone(),
            };
            if let Some(code) = no_steps(&run, json) {
                return code;
            }
            if cli.apply {
                package_apply(&run, json)
            } else {
                package_plan(&run, &engine, output, json, cli.detailed_exitcode)
            }
        }
        None => {
            let Some(script) = cli.script.clone() else {
                return usage("SCRIPT or --package DIR is required");
            };
            if !is_rhai(&script) {
                eprintln!(
                    "skyhook-run: error: {} is not a Rhai script: skyhook-run runs .rhai \
                     files (a package's other steps run with --package DIR --mode MODE)",
                    script.display()
                );
                return EXIT_ERROR;
            }
            let cancel = skyhook::process::Cancel::new();
            if cli.apply {
                abort_on_signals(&cancel);
            }
            let run = ScriptRun {
                script,
                root,
                mode,
                apply: cli.apply,
                configmaps: cli.configmaps.clone(),
                env,
                args: cli.args.clone(),
                cancel,
                capture,
                diffs: cli.diff,
            };
            script_run(&run, &engine, output, json, cli.detailed_exitcode)
        }
    }
}

/// A package whose mode has no steps: say so (stderr; in JSON mode also the document) and
/// exit 0, as the agent runs such a mode as a no-op. `None` when the mode has steps, or the
/// package does not load (the run then reports why).
fn no_steps(run: &PackageRun, json: bool) -> Option<u8> {
    if run.mode == Mode::Interrupt {
        return None;
    }
    let loaded = run.load().ok()?;
    let p = &loaded.package;
    if !p.steps(run.mode).is_empty() {
        return None;
    }
    let with: Vec<&str> = p
        .modes
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(m, _)| m.as_str())
        .collect();
    eprintln!(
        "skyhook-run: package {} {} has no {} steps: nothing to run (modes with steps: {})",
        p.package_name,
        p.package_version,
        run.mode.as_str(),
        if with.is_empty() {
            "none".to_string()
        } else {
            with.join(", ")
        }
    );
    if json {
        print_json(&json!({
            "package_mode": run.mode.as_str(),
            "ok": true,
            "steps": [],
            "exit_code": EXIT_OK,
        }));
    }
    Some(EXIT_OK)
}

/// Print an error (and, in JSON mode, the error document) and return its exit status
/// ([`LocalError::exit_code`], the mapping the agent uses too).
fn fail(json: bool, e: &LocalError) -> u8 {
    let message = match e {
        // Already `file:line:col: message`.
        LocalError::Compile(c) | LocalError::Agent(AgentError::Compile(c)) => c.to_string(),
        other => format!("skyhook-run: error: {}", skyhook::chain::render(other)),
    };
    let code = u8::try_from(e.exit_code()).unwrap_or(EXIT_ERROR);
    eprintln!("{message}");
    if json {
        let errors = match e {
            LocalError::Compile(c) | LocalError::Agent(AgentError::Compile(c)) => {
                vec![script_error_json(c)]
            }
            _ => vec![error_json(&message)],
        };
        print_json(&json!({"ok": false, "error": message, "errors": errors, "exit_code": code}));
    }
    code
}

fn print_json(v: &Value) {
    let mut out = std::io::stdout().lock();
    let text = serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into());
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

fn print_text(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn exit_code(ok: bool, exec: ExecMode, changes: usize, detailed: bool) -> u8 {
    if !ok {
        EXIT_ERROR
    } else if detailed && exec == ExecMode::Plan && changes > 0 {
        EXIT_CHANGES
    } else {
        EXIT_OK
    }
}

/// During a script's `--apply`, the first SIGTERM or SIGINT aborts `cancel`: the script
/// stops at its next operation or command (a running command is ended as on a timeout), and
/// the session's end still writes what it holds (batched line edits, deferred work), so
/// what was reported as changed is on disk; the run exits 1. A second signal exits at once
/// (143 for SIGTERM, 130 for SIGINT). The handlers are registered by a thread of their own;
/// a signal before they are in place has its default effect.
fn abort_on_signals(cancel: &skyhook::process::Cancel) {
    let cancel = cancel.clone();
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            use tokio::signal::unix::{SignalKind, signal};
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let (Ok(mut term), Ok(mut int)) = (
                    signal(SignalKind::terminate()),
                    signal(SignalKind::interrupt()),
                ) else {
                    return;
                };
                let mut received = false;
                loop {
                    let (name, code) = tokio::select! {
                        _ = term.recv() => ("SIGTERM", 143),
                        _ = int.recv() => ("SIGINT", 130),
                    };
                    if received {
                        eprintln!("skyhook-run: received {name} again: exiting now");
                        std::process::exit(code);
                    }
                    received = true;
                    eprintln!(
                        "skyhook-run: received {name}: stopping the script; what it changed so \
                         far is written (a second signal exits at once)"
                    );
                    cancel.abort(skyhook::process::CancelReason::Signal(name));
                }
            });
        });
    if let Err(e) = spawned {
        eprintln!("skyhook-run: warning: no signal handling: {e}");
    }
}

fn script_run(
    run: &ScriptRun,
    engine: &ScriptEngine,
    output: Arc<dyn ScriptOutput>,
    json: bool,
    detailed: bool,
) -> u8 {
    let (outcome, redactor) = match run.run(engine, output) {
        Ok(r) => r,
        Err(e) => return fail(json, &e),
    };
    let report = &outcome.report;
    let code = exit_code(outcome.ok, report.mode, report.changes.len(), detailed);
    let drift = report.drift().len();
    if drift > 0 {
        eprintln!(
            "skyhook-run: drift: {drift} pending change(s), the host is not in the state this script describes"
        );
    } else if outcome.error.is_none() && !outcome.ok {
        eprintln!(
            "skyhook-run: {}: returned {}",
            run.script.display(),
            outcome.code
        );
    }
    if json {
        let mut v = outcome.to_json(&redactor);
        if let Value::Object(m) = &mut v {
            m.insert("script".into(), run.script.display().to_string().into());
            m.insert("step_mode".into(), run.mode.as_str().into());
            m.insert("exit_code".into(), code.into());
            let errors: Vec<Value> = outcome
                .error
                .iter()
                .map(|e| error_json(&redactor.redact(e)))
                .collect();
            m.insert("errors".into(), Value::Array(errors));
        }
        print_json(&v);
    } else {
        print_text(&report.render_text(&redactor));
    }
    code
}

fn package_plan(
    run: &PackageRun,
    engine: &ScriptEngine,
    output: Arc<dyn ScriptOutput>,
    json: bool,
    detailed: bool,
) -> u8 {
    let plan = match run.plan(engine, output) {
        Ok(p) => p,
        Err(e) => return fail(json, &e),
    };
    for w in &plan.warnings {
        eprintln!("WARNING: {w}");
    }
    let total = plan.total();
    let code = exit_code(plan.ok(), plan.exec_mode, total.changes.len(), detailed);
    if json {
        let mut v = plan.to_json();
        if let Value::Object(m) = &mut v {
            m.insert("exit_code".into(), code.into());
        }
        print_json(&v);
    } else {
        print_text(&plan.render_text());
    }
    code
}

fn package_apply(run: &PackageRun, json: bool) -> u8 {
    // The agent prints on stdout; in JSON mode stdout is kept for the document, so the
    // agent's console is stderr.
    let console = if json {
        Console::stderr_only()
    } else {
        Console::stdio()
    };
    let result = run.apply(&console);
    let (ok, copy_dir) = match result {
        Ok(r) => r,
        Err(e) => return fail(json, &e),
    };
    let code = if ok { EXIT_OK } else { EXIT_ERROR };
    if json {
        print_json(&json!({
            "package_mode": run.mode.as_str(),
            "apply": true,
            "ok": ok,
            "copy_dir": copy_dir.display().to_string(),
            "exit_code": code,
        }));
    } else {
        println!(
            "skyhook-run: mode {} {} (package copy at {})",
            run.mode.as_str(),
            if ok { "succeeded" } else { "failed" },
            copy_dir.display()
        );
    }
    code
}

/// Script output when stdout carries the JSON document: both streams to stderr.
struct StderrOnly;

impl ScriptOutput for StderrOnly {
    fn stdout(&self, bytes: &[u8]) {
        let _ = std::io::stderr().lock().write_all(bytes);
    }
    fn stderr(&self, bytes: &[u8]) {
        let _ = std::io::stderr().lock().write_all(bytes);
    }
}

/// `check FILE...`: compile each file with its imports and run the static checker. Prints
/// `OK <file>` on stdout for each file without errors (with the number of warnings, if any)
/// and every error and warning on stderr as `file:line:col: error: message` /
/// `file:line:col: warning: message`. Exit 0 when no file has an error, else 1.
fn check(files: &[PathBuf]) -> u8 {
    // Limits that matter at compile time do not depend on the timeout, so the environment
    // is not consulted here.
    let engine = ScriptEngine::new(Limits::default());
    let checker = Checker::new();
    let mut code = EXIT_OK;
    for file in files {
        if !is_rhai(file) {
            eprintln!(
                "{}: error: not a Rhai script (check takes .rhai files)",
                file.display()
            );
            code = EXIT_ERROR;
            continue;
        }
        let base = match file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let store = Arc::new(ModuleStore::new(base));
        match check_step(&engine, &checker, file, store) {
            Err(e) => {
                eprintln!("{}", Diagnostic::from_compile(&e));
                code = EXIT_ERROR;
            }
            Ok((_, found)) => {
                for d in &found {
                    eprintln!("{d}");
                }
                let errors = found
                    .iter()
                    .filter(|d| d.severity == Severity::Error)
                    .count();
                let warnings = found.len() - errors;
                if errors > 0 {
                    code = EXIT_ERROR;
                } else if warnings > 0 {
                    let s = if warnings == 1 { "" } else { "s" };
                    println!("OK {} ({warnings} warning{s})", file.display());
                } else {
                    println!("OK {}", file.display());
                }
            }
        }
    }
    code
}

/// Whether `path` names a `.rhai` file.
fn is_rhai(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "rhai")
}

/// `skyhook-run --remote URL --token-file F SCRIPT`: the script runs on the node behind
/// URL (`skyhook-agent serve`) in plan (default), apply (`--apply`) or check (`--mode
/// check` or a `*-check` mode) mode; its output and the plan render as a local run's.
/// Only `--env` values are sent (not this machine's environment). Ctrl-C cancels the
/// execution and waits for its exit.
fn remote_run(cli: &Cli, url: &str) -> u8 {
    let Some(token_file) = &cli.token_file else {
        return usage("--remote needs --token-file FILE");
    };
    let Some(script) = cli.script.clone() else {
        return usage("--remote runs a SCRIPT (not --package)");
    };
    let json_out = cli.output == Output::Json;
    let mode_text = cli.mode.as_deref().unwrap_or("apply");
    let check = mode_text == "check" || mode_text.ends_with("-check");
    if !check && Mode::parse(mode_text).is_none() {
        return usage(&format!("unknown mode {mode_text:?}"));
    }
    let (remote_mode, exec) = if check {
        ("check", ExecMode::Check)
    } else if cli.apply {
        ("apply", ExecMode::Apply)
    } else {
        ("plan", ExecMode::Plan)
    };
    let fail_msg = |msg: String| {
        eprintln!("skyhook-run: error: {msg}");
        if json_out {
            print_json(&json!({"ok": false, "error": msg, "exit_code": EXIT_ERROR}));
        }
        EXIT_ERROR
    };
    let token = match std::fs::read_to_string(token_file) {
        Ok(t) => t,
        Err(e) => return fail_msg(format!("cannot read {}: {e}", token_file.display())),
    };
    let text = match std::fs::read_to_string(&script) {
        Ok(t) => t,
        Err(e) => return fail_msg(format!("cannot read {}: {e}", script.display())),
    };
    let client_cert = cli.tls_cert.as_deref().zip(cli.tls_key.as_deref());
    let client =
        match skyhook::remote::Client::with_tls(url, &token, cli.tls_ca.as_deref(), client_cert) {
            Ok(c) => c,
            Err(e) => return fail_msg(e.to_string()),
        };
    let id = format!(
        "skyhook-run-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let env: serde_json::Map<String, Value> = cli
        .env
        .iter()
        .map(|(k, v)| (k.clone(), Value::from(v.clone())))
        .collect();
    // The node names the script as we do, so errors and plan positions read as a local run's.
    let start = json!({"id": id, "kind": "rhai", "mode": remote_mode, "script": text, "env": env,
                       "script_name": script.display().to_string()});
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail_msg(format!("tokio runtime: {e}")),
    };
    let cancel = skyhook::process::Cancel::new();
    let result = rt.block_on(async {
        let c = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("skyhook-run: interrupted: cancelling the remote execution");
                c.abort(skyhook::process::CancelReason::Signal("SIGINT"));
            }
        });
        let mut on_event = |v: &Value| {
            if let Some(n) = v.get("lost") {
                eprintln!(
                    "skyhook-run: {n} event(s) lost (seq {} to {}): the server's ring dropped \
                     them before they were read",
                    v["from_seq"], v["to_seq"]
                );
                return;
            }
            let Some(line) = v.get("line").and_then(Value::as_str) else {
                return;
            };
            let nl = if v.get("partial") == Some(&Value::Bool(true)) {
                ""
            } else {
                "\n"
            };
            if v["stream"] == "stdout" && !json_out {
                print_text(&format!("{line}{nl}"));
            } else {
                eprint!("{line}{nl}");
            }
        };
        client.execute(&start, &cancel, &mut on_event).await
    });
    let exit_ev = match result {
        Ok(v) => v,
        Err(skyhook::remote::RemoteError::Status { status: 422, body })
            if body.get("line").is_some() =>
        {
            let msg = format!(
                "{}:{}:{}: {}",
                script.display(),
                body["line"],
                body["column"],
                body["message"].as_str().unwrap_or("syntax error")
            );
            eprintln!("{msg}");
            if json_out {
                print_json(&json!({"ok": false, "error": msg, "exit_code": EXIT_ERROR}));
            }
            return EXIT_ERROR;
        }
        Err(e) => return fail_msg(e.to_string()),
    };
    let Some(report) = exit_ev.get("report").cloned() else {
        return fail_msg(format!(
            "the remote execution ended with {}",
            exit_ev["exit"]
        ));
    };
    let ok = report["ok"].as_bool().unwrap_or(false);
    let changes = report["changes"].as_array().map_or(0, Vec::len);
    let code = exit_code(ok, exec, changes, cli.detailed_exitcode);
    let drift = report["drift"].as_u64().unwrap_or(0);
    if drift > 0 {
        eprintln!(
            "skyhook-run: drift: {drift} pending change(s), the host is not in the state this script describes"
        );
    } else if report["error"].is_null() && !ok {
        eprintln!(
            "skyhook-run: {}: returned {}",
            script.display(),
            report["return_code"]
        );
    }
    if json_out {
        let mut v = report;
        if let Value::Object(m) = &mut v {
            m.insert("script".into(), script.display().to_string().into());
            m.insert("step_mode".into(), mode_text.into());
            m.insert("exit_code".into(), code.into());
        }
        print_json(&v);
    } else {
        print_text(exit_ev["rendered"].as_str().unwrap_or(""));
    }
    code
}
