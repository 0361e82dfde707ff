//! What `skyhook-run` does on this machine: one script or a package's mode
//! ([`crate::local`]) run and rendered (the plan as text or one JSON document), and `check`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use super::exit::usage;
use super::exit::{CliError, ExitStatus};
use super::run_args::{Cli, Output};
use crate::agent::error::AgentError;
use crate::host::ExecMode;
use crate::local::{LocalError, PackageRun, ScriptRun, error_json, script_error_json};
use crate::mode::Console;
use crate::package::Mode;
use crate::script::host_api::Capture;
use crate::script::lint::{Checker, Diagnostic, Severity, check_step};
use crate::script::{Limits, ModuleStore, ScriptEngine, ScriptOutput, StdioOutput};

/// `skyhook-run SCRIPT` or `skyhook-run --package DIR` on this machine (no `--remote`).
pub(crate) fn run(cli: &Cli) -> ExitStatus {
    let json = cli.output == Output::Json;
    let usage = |msg: &str| usage_error(json, msg);
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
    if cli.package.is_some() && mode == Mode::Interrupt {
        return usage(
            "--mode interrupt: the operator runs a package's interrupts (its interrupt stage); \
             skyhook-run --package runs the modes with steps",
        );
    }
    if let Some(dir) = &cli.configmaps
        && !dir.is_dir()
    {
        return fail_message(
            json,
            format!("--configmaps {}: no such directory", dir.display()),
        );
    }
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
        Some(dir) => {
            let run = PackageRun {
                dir: dir.clone(),
                root,
                mode,
                configmaps: cli.configmaps.clone(),
                env,
                capture,
                skyhook_cr: cli.skyhook_cr.clone(),
                diffs: cli.diff,
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
                return fail_message(
                    json,
                    format!(
                        "{} is not a Rhai script: skyhook-run runs .rhai files (a package's \
                         other steps run with --package DIR --mode MODE)",
                        script.display()
                    ),
                );
            }
            let cancel = crate::process::Cancel::new();
            if cli.apply {
                super::signal::abort_on_signals(&cancel);
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
fn no_steps(run: &PackageRun, json: bool) -> Option<ExitStatus> {
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
    let written = if json {
        print_json(&json!({
            "package_mode": run.mode.as_str(),
            "ok": true,
            "steps": [],
            "exit_code": ExitStatus::Done.code(),
        }))
    } else {
        Ok(())
    };
    Some(finish(written, ExitStatus::Done))
}

/// A usage error ([`usage`]); in JSON mode also the error document with exit code 2.
pub(crate) fn usage_error(json: bool, msg: &str) -> ExitStatus {
    let code = usage(msg);
    if json {
        let message = format!("skyhook-run: error: {msg}");
        let errors = vec![error_json(&message)];
        let written = print_json(
            &json!({"ok": false, "error": message, "errors": errors, "exit_code": code.code()}),
        );
        return finish(written, code);
    }
    code
}

/// Print `skyhook-run: error: {message}` (and, in JSON mode, the error document) and
/// return [`ExitStatus::Failure`].
fn fail_message(json: bool, message: String) -> ExitStatus {
    let message = format!("skyhook-run: error: {message}");
    eprintln!("{message}");
    let code = ExitStatus::Failure;
    if json {
        let errors = vec![error_json(&message)];
        let written = print_json(
            &json!({"ok": false, "error": message, "errors": errors, "exit_code": code.code()}),
        );
        return finish(written, code);
    }
    code
}

/// Print an error (and, in JSON mode, the error document) and return its exit status (the
/// one table, [`CliError::exit_status`]).
fn fail(json: bool, e: LocalError) -> ExitStatus {
    let message = match &e {
        // Already `file:line:col: message`.
        LocalError::Compile(c) | LocalError::Agent(AgentError::Compile(c)) => c.to_string(),
        other => format!("skyhook-run: error: {}", crate::chain::render(other)),
    };
    let errors = match &e {
        LocalError::Compile(c) | LocalError::Agent(AgentError::Compile(c)) => {
            vec![script_error_json(c)]
        }
        _ => vec![error_json(&message)],
    };
    eprintln!("{message}");
    let code = CliError::Local(e).exit_status();
    if json {
        let written = print_json(
            &json!({"ok": false, "error": message, "errors": errors, "exit_code": code.code()}),
        );
        return finish(written, code);
    }
    code
}

/// `v` as one pretty-printed JSON document on stdout.
///
/// # Errors
/// The write's error.
pub(crate) fn print_json(v: &Value) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into());
    super::stdout::print(&format!("{text}\n"))
}

/// `text` on stdout, as is.
///
/// # Errors
/// The write's error.
pub(crate) fn print_text(text: &str) -> std::io::Result<()> {
    super::stdout::print(text)
}

/// `code`, unless the result's write to stdout failed ([`super::stdout::status`]).
pub(crate) fn finish(written: std::io::Result<()>, code: ExitStatus) -> ExitStatus {
    super::stdout::status("skyhook-run", written, code)
}

pub(crate) fn exit_code(ok: bool, exec: ExecMode, changes: usize, detailed: bool) -> ExitStatus {
    if !ok {
        ExitStatus::Failure
    } else if detailed && exec == ExecMode::Plan && changes > 0 {
        ExitStatus::Changes
    } else {
        ExitStatus::Done
    }
}

fn script_run(
    run: &ScriptRun,
    engine: &ScriptEngine,
    output: Arc<dyn ScriptOutput>,
    json: bool,
    detailed: bool,
) -> ExitStatus {
    let (outcome, redactor) = match run.run(engine, output) {
        Ok(r) => r,
        Err(e) => return fail(json, e),
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
    // The report says what the script did; the undo journal has put its files and live
    // sysctl values back (the other changes stay and are its "not undone:" lines).
    let undone = report
        .changes
        .iter()
        .filter(|c| crate::host::effects::session::UNDONE_KINDS.contains(&c.kind.as_str()))
        .count();
    if !outcome.ok && report.mode == ExecMode::Apply && undone > 0 {
        eprintln!("skyhook-run: the script failed: {undone} of the changes listed were undone");
    }
    if json {
        let mut v = outcome.to_json(&redactor);
        if let Value::Object(m) = &mut v {
            m.insert("script".into(), run.script.display().to_string().into());
            m.insert("step_mode".into(), run.mode.as_str().into());
            m.insert("exit_code".into(), code.code().into());
            let errors: Vec<Value> = outcome
                .error
                .iter()
                .map(|e| error_json(&redactor.redact(e)))
                .collect();
            m.insert("errors".into(), Value::Array(errors));
        }
        finish(print_json(&v), code)
    } else {
        finish(print_text(&report.render_text(&redactor)), code)
    }
}

fn package_plan(
    run: &PackageRun,
    engine: &ScriptEngine,
    output: Arc<dyn ScriptOutput>,
    json: bool,
    detailed: bool,
) -> ExitStatus {
    let plan = match run.plan(engine, output) {
        Ok(p) => p,
        Err(e) => return fail(json, e),
    };
    for w in &plan.warnings {
        eprintln!("WARNING: {w}");
    }
    let total = plan.total();
    let code = exit_code(plan.ok(), plan.exec_mode, total.changes.len(), detailed);
    if json {
        let mut v = plan.to_json();
        if let Value::Object(m) = &mut v {
            m.insert("exit_code".into(), code.code().into());
        }
        finish(print_json(&v), code)
    } else {
        finish(print_text(&plan.render_text()), code)
    }
}

fn package_apply(run: &PackageRun, json: bool) -> ExitStatus {
    // The agent prints on stdout; in JSON mode stdout is kept for the document, so the
    // agent's console is stderr.
    let stdout = super::stdout::Watched::default();
    let console = if json {
        Console::stderr_only()
    } else {
        Console::with_writers(Box::new(stdout.clone()), Box::new(std::io::stderr()))
    };
    super::signal::exit_on_second_signal();
    let result = run.apply(&console);
    let applied = match result {
        Ok(r) => r,
        Err(e) => return fail(json, e),
    };
    let (ok, copy_dir) = (applied.ok, &applied.copy_dir);
    let code = if ok {
        ExitStatus::Done
    } else {
        ExitStatus::Failure
    };
    let written = if json {
        let mut v = applied.to_json();
        if let Value::Object(m) = &mut v {
            m.insert("exit_code".into(), code.code().into());
        }
        print_json(&v)
    } else {
        print_text(&format!(
            "skyhook-run: mode {} {} (package copy at {})\n",
            run.mode.as_str(),
            if ok { "succeeded" } else { "failed" },
            copy_dir.display()
        ))
    };
    // The agent's own output went through the console.
    let written = written.and(stdout.result());
    finish(written, code)
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
pub(crate) fn check(files: &[PathBuf]) -> ExitStatus {
    // Limits that matter at compile time do not depend on the timeout, so the environment
    // is not consulted here.
    let engine = ScriptEngine::new(Limits::default());
    let checker = Checker::new();
    let mut code = ExitStatus::Done;
    let mut written = Ok(());
    for file in files {
        if !is_rhai(file) {
            eprintln!(
                "{}: error: not a Rhai script (check takes .rhai files)",
                file.display()
            );
            code = ExitStatus::Failure;
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
                code = ExitStatus::Failure;
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
                    code = ExitStatus::Failure;
                } else if warnings > 0 {
                    let s = if warnings == 1 { "" } else { "s" };
                    written = written.and(print_text(&format!(
                        "OK {} ({warnings} warning{s})\n",
                        file.display()
                    )));
                } else {
                    written = written.and(print_text(&format!("OK {}\n", file.display())));
                }
            }
        }
    }
    finish(written, code)
}

/// Whether `path` names a `.rhai` file.
fn is_rhai(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "rhai")
}
