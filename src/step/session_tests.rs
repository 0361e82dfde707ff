//! [`ScriptStep::run`]'s end of the step after a failed script, and the text of a failed
//! end: the failure of the work pending at the end (here: the batched line edits' write,
//! after a writer that takes no path lock changed the file) is written to the step's stderr
//! too, in the same words whichever front end runs the step.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{End, ScriptStep};
use crate::host::root::HostRoot;
use crate::logs::sink::Label;
use crate::redact::Redactor;
use crate::script::{
    CaptureOutput, CompiledScript, ModuleStore, ScriptEngine, ScriptOutput, compile_source,
};
use crate::step::invocation::{ConsoleStreams, StepInvocation, StepProgram, StepResult};
use crate::step::{ScriptRunner, StepSpec};

/// Append `outside` to `file` as a writer that does not take skyhook's path locks (an
/// editor) would.
fn poke(file: &Path) {
    let mut text = std::fs::read_to_string(file).unwrap();
    text.push_str("outside\n");
    std::fs::write(file, text).unwrap();
}

/// Captures output; a `poke` on stdout pokes `file` while the script runs.
struct PokeOnPrint {
    inner: CaptureOutput,
    file: PathBuf,
}

impl ScriptOutput for PokeOnPrint {
    fn stdout(&self, bytes: &[u8]) {
        if bytes.starts_with(b"poke") {
            poke(&self.file);
        }
        self.inner.stdout(bytes);
    }
    fn stderr(&self, bytes: &[u8]) {
        self.inner.stderr(bytes);
    }
}

/// A root with `/etc/<name>` holding `x`, and `source` compiled as `w.rhai`.
fn setup(name: &str, source: &str) -> (tempfile::TempDir, PathBuf, ScriptEngine, CompiledScript) {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("etc")).unwrap();
    let file = d.path().join("etc").join(name);
    std::fs::write(&file, "x\n").unwrap();
    let engine = ScriptEngine::default();
    let script = compile_source(
        &engine,
        "w.rhai",
        source,
        Arc::new(ModuleStore::new(d.path())),
    )
    .unwrap();
    (d, file, engine, script)
}

/// Run `script` (of `engine`) as the step `spec` on the root `d`, ending its session, a
/// `poke` it prints poking `file`: its result and its stderr.
fn run_poking(
    d: &tempfile::TempDir,
    file: &Path,
    engine: &ScriptEngine,
    script: &CompiledScript,
    spec: &StepSpec,
) -> (StepResult, String) {
    let api = spec.session(HostRoot::open(d.path()).unwrap());
    let out = Arc::new(PokeOnPrint {
        inner: CaptureOutput::new(),
        file: file.to_path_buf(),
    });
    let o = ScriptStep {
        engine,
        script,
        spec,
        api: &api,
        end: End::Session,
        list_drift: false,
    }
    .run(out.clone());
    (o, String::from_utf8(out.inner.stderr_bytes()).unwrap())
}

#[test]
fn a_failed_flush_after_a_failed_script_is_reported_too() {
    let (d, file, engine, script) = setup(
        "f",
        "fs::ensure_line(\"/etc/f\", \"a\");\nprint(\"poke\");\nthrow \"boom\";\n",
    );
    let spec = StepSpec::builder("apply", true).build();
    let (o, stderr) = run_poking(&d, &file, &engine, &script, &spec);
    assert!(!o.ok);
    // The first error is the step's error.
    assert_eq!(o.error.as_deref(), Some("w.rhai:3:1: boom"));
    // The outside writer's content is kept, the batched edit was not written ...
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x\noutside\n");
    // ... and stderr says so after the script's error.
    assert!(
        stderr.ends_with(
            "w.rhai: the work pending at the end of the step failed: /etc/f changed under the \
             step (by a writer that does not take skyhook's path lock) after its line edits \
             read it; its 1 pending line edit(s) were not written, the file is left as the \
             other writer made it\n"
        ),
        "{stderr}"
    );
    assert_eq!(o.report.changes.len(), 1);
}

/// The agent's console: stdout pokes `file` on a `poke`; stderr is kept.
struct PokeConsole {
    file: PathBuf,
    err: Arc<Mutex<Vec<u8>>>,
}

struct ConsoleWriter {
    poke: Option<PathBuf>,
    err: Option<Arc<Mutex<Vec<u8>>>>,
}

impl Write for ConsoleWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if let Some(f) = &self.poke
            && b.windows(4).any(|w| w == b"poke")
        {
            poke(f);
        }
        if let Some(e) = &self.err {
            e.lock().unwrap().extend_from_slice(b);
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl ConsoleStreams for PokeConsole {
    fn writer(&self, label: Label) -> Box<dyn Write + Send> {
        Box::new(match label {
            Label::Out => ConsoleWriter {
                poke: Some(self.file.clone()),
                err: None,
            },
            _ => ConsoleWriter {
                poke: None,
                err: Some(self.err.clone()),
            },
        })
    }
    fn error_line(&self, line: &str) {
        self.err
            .lock()
            .unwrap()
            .extend_from_slice(format!("{line}\n").as_bytes());
    }
}

/// The step's environment: `TOKEN` is redacted (`SKYHOOK_REDACT_ENV`).
fn secret_env() -> Vec<(String, String)> {
    vec![
        ("SKYHOOK_REDACT_ENV".into(), "TOKEN".into()),
        ("TOKEN".into(), "hunter2".into()),
    ]
}

/// The agent's text of a failed end whose cause redaction changed (the file's name is a
/// secret): the error with its causes rendered, then redacted, so the cause is repeated.
const REDACTED_CAUSE: &str = "w.rhai: the work pending at the end of the step failed: /etc/*** \
    changed under the step (by a writer that does not take skyhook's path lock) after its line \
    edits read it; its 1 pending line edit(s) were not written, the file is left as the other \
    writer made it: /etc/*** changed under the step (by a writer that does not take skyhook's \
    path lock) after its line edits read it; its 1 pending line edit(s) were not written, the \
    file is left as the other writer made it";

const SECRET_FILE_STEP: &str = "fs::ensure_line(\"/etc/hunter2\", \"a\");\nprint(\"poke\");\n";

/// The agent's runner on the step: its result.
fn run_as_agent(
    root: &Path,
    file: &Path,
    engine: ScriptEngine,
    script: CompiledScript,
) -> (StepResult, String) {
    let redactor = Redactor::from_env(&secret_env());
    let spec = StepSpec::builder("apply", true)
        .env(secret_env())
        .redactor(redactor)
        .build();
    let inv = StepInvocation {
        path: "w.rhai".into(),
        program: StepProgram::Script(script),
        args: Vec::new(),
        env: Vec::new(),
        spec,
        logs: None,
        preamble: None,
        keep_fds: Vec::new(),
    };
    let err = Arc::new(Mutex::new(Vec::new()));
    let console = Arc::new(PokeConsole {
        file: file.to_path_buf(),
        err: err.clone(),
    });
    let runner = ScriptRunner {
        engine: Arc::new(engine),
        root: root.to_path_buf(),
        opened: None,
        log_format: crate::logs::sink::LogFormat::Prefixed,
        start: Default::default(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(runner.run_step(inv, console));
    let err = String::from_utf8(err.lock().unwrap().clone()).unwrap();
    (r, err)
}

#[test]
fn a_failed_end_whose_cause_was_redacted_reads_the_same_for_every_front_end() {
    // The agent.
    let (d, file, engine, script) = setup("hunter2", SECRET_FILE_STEP);
    let (agent, agent_err) = run_as_agent(d.path(), &file, engine, script);
    assert!(!agent.ok);
    assert_eq!(agent.code, 1, "a failed end with code 0 has status 1");
    assert_eq!(agent.error.as_deref(), Some(REDACTED_CAUSE));
    assert!(
        agent_err.contains(&format!(" {REDACTED_CAUSE}\n")),
        "{agent_err}"
    );
    assert!(!agent_err.contains("hunter2"), "{agent_err}");

    // The dry run, serve and skyhook-run (the same step on the Apply executor, output
    // captured): the same text.
    let (d, file, engine, script) = setup("hunter2", SECRET_FILE_STEP);
    let spec = StepSpec::builder("apply", true).env(secret_env()).build();
    let (o, stderr) = run_poking(&d, &file, &engine, &script, &spec);
    assert!(!o.ok);
    assert_eq!((o.code, o.status()), (0, 1));
    assert_eq!(o.error.as_deref(), Some(REDACTED_CAUSE));
    assert_eq!(stderr, format!("{REDACTED_CAUSE}\n"));
}
