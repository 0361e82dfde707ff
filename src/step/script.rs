//! Runs a `.rhai` step in-process: the script's `print`/`debug`/`log::` output goes through
//! the same log sink as a process step's pipes (labels, per-chunk timestamps, console and
//! `.log`/`.log.err` files, redaction), so logs look the same whatever kind a step is.

use std::sync::{Arc, Mutex};

use chrono::NaiveDateTime;

use super::session::{End, ScriptStep};
use crate::logs::LogError;
use crate::logs::sink::{Label, LogFormat, Relay, StepLogFiles, StreamSink};
use crate::redact::{Redactor, StreamRedactor};
use crate::script::engine::ScriptEngine;
use crate::script::output::ScriptOutput;

/// One output stream of a script: relay state and its sink.
struct Stream {
    relay: Relay,
    sink: StreamSink,
    out: Vec<u8>,
    errors: Vec<LogError>,
    redact: StreamRedactor,
    scratch: Vec<u8>,
}

impl Stream {
    fn new(label: Label, sink: StreamSink) -> Self {
        Stream {
            relay: Relay::new(label),
            sink,
            out: Vec::new(),
            errors: Vec::new(),
            redact: StreamRedactor::new(),
            scratch: Vec::new(),
        }
    }
}

/// A [`ScriptOutput`] that relays each chunk exactly as a process's pipe would be relayed
/// (agent-contract.md 9.3): one chunk per `print`, timestamped with the local time when it is
/// written, secrets replaced by `***`.
pub struct SinkOutput {
    out: Mutex<Stream>,
    err: Mutex<Stream>,
    redactor: Option<Redactor>,
    clock: fn() -> NaiveDateTime,
}

fn local_now() -> NaiveDateTime {
    crate::clock::now_local()
}

impl SinkOutput {
    /// Relay to the agent's stdout/stderr and, when given, the step's log files.
    ///
    /// # Errors
    /// When a console descriptor cannot be duplicated.
    pub fn console(
        logs: Option<StepLogFiles>,
        redactor: Option<Redactor>,
    ) -> Result<Self, LogError> {
        let (out_file, err_file) = match logs {
            Some(l) => (
                Some((l.out_file, l.out_path)),
                Some((l.err_file, l.err_path)),
            ),
            None => (None, None),
        };
        Ok(Self::with_sinks(
            StreamSink::console(Label::Out, out_file)?,
            StreamSink::console(Label::Err, err_file)?,
            redactor,
            local_now,
        ))
    }

    /// Relay into the given sinks with `clock` (for tests and embedding).
    pub fn with_sinks(
        out: StreamSink,
        err: StreamSink,
        redactor: Option<Redactor>,
        clock: fn() -> NaiveDateTime,
    ) -> Self {
        SinkOutput {
            out: Mutex::new(Stream::new(Label::Out, out)),
            err: Mutex::new(Stream::new(Label::Err, err)),
            redactor,
            clock,
        }
    }

    /// The same output relaying in `format` (no output may have been relayed yet).
    pub fn with_log_format(self, format: LogFormat) -> Self {
        let set = |m: Mutex<Stream>| {
            let mut s = m.into_inner().unwrap_or_else(|p| p.into_inner());
            s.relay = Relay::with_format(s.relay.label(), format);
            Mutex::new(s)
        };
        SinkOutput {
            out: set(self.out),
            err: set(self.err),
            ..self
        }
    }

    fn feed(&self, stream: &Mutex<Stream>, bytes: &[u8]) {
        let mut s = match stream.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        let s = &mut *s;
        s.out.clear();
        match &self.redactor {
            Some(r) => {
                s.scratch.clear();
                s.redact.push(r, bytes, &mut s.scratch);
                s.relay.feed(&s.scratch, (self.clock)(), &mut s.out);
            }
            None => s.relay.feed(bytes, (self.clock)(), &mut s.out),
        }
        s.sink.write(&s.out, &mut s.errors);
    }

    /// Flush a dangling partial UTF-8 sequence (none in practice: prints are whole strings)
    /// and return the write errors seen (at most one per target).
    pub fn finish(&self) -> Vec<LogError> {
        let mut errors = Vec::new();
        for stream in [&self.out, &self.err] {
            let mut s = match stream.lock() {
                Ok(s) => s,
                Err(p) => p.into_inner(),
            };
            let s = &mut *s;
            s.out.clear();
            s.scratch.clear();
            s.redact.finish(&mut s.scratch);
            s.relay.feed(&s.scratch, (self.clock)(), &mut s.out);
            s.relay.finish(&mut s.out);
            s.sink.write(&s.out, &mut s.errors);
            errors.append(&mut s.errors);
        }
        errors
    }
}

impl ScriptOutput for SinkOutput {
    fn stdout(&self, bytes: &[u8]) {
        self.feed(&self.out, bytes);
    }
    fn stderr(&self, bytes: &[u8]) {
        self.feed(&self.err, bytes);
    }
}

/// Runs compiled `.rhai` steps on one shared engine, each on a fresh host session over the
/// host root mount.
#[derive(Clone)]
pub struct ScriptRunner {
    /// The engine (built once per run, immutable; the deadline is per step).
    pub engine: Arc<ScriptEngine>,
    /// The host root mount (an agent-side path) each step's session opens.
    pub root: std::path::PathBuf,
    /// The run's open handle on `root`: each step's session gets a duplicate of it
    /// ([`HostRoot::try_clone`](crate::host::root::HostRoot::try_clone)) instead of
    /// canonicalizing and opening the mount again; `None` opens `root` per step.
    pub opened: Option<Arc<crate::host::root::HostRoot>>,
    /// How each step's output is relayed (`SKYHOOK_AGENT_LOG_FORMAT`).
    pub log_format: LogFormat,
}

impl ScriptRunner {
    /// Run one `.rhai` step of the agent: a new host session over [`ScriptRunner::root`]
    /// from `inv.spec` ([`super::spec::StepSpec::session`]; Apply in run modes, Check in `*-check`
    /// modes: pending changes are drift and fail the step, each listed on the step's
    /// stderr), output relayed like a process's (console via `console`, the step's log
    /// files, redaction), then the step's deferred work (daemon-reload, grub), whose failure
    /// fails the step. A succeeded step on the Apply executor then lists what it changed
    /// on its stdout ([`super::invocation::StepResult::changes_text`]; nothing when it
    /// changed nothing).
    ///
    /// The script runs on tokio's blocking pool while the caller awaits it, so the runtime
    /// keeps polling its drivers (a SIGTERM during the step is recorded at once).
    ///
    /// Never fails: a root that cannot be reopened or a runner that panicked is a failed
    /// step with the error on stderr.
    pub async fn run_step(
        &self,
        mut inv: super::invocation::StepInvocation,
        console: Arc<dyn super::invocation::ConsoleStreams>,
    ) -> super::invocation::StepResult {
        use super::invocation::{StepProgram, StepResult};
        use crate::host::root::HostRoot;
        use crate::logs::sink::Label;
        let exec = inv.spec.exec;
        let StepProgram::Script(script) = &inv.program else {
            return StepResult::failed(exec, 1);
        };
        let file = script.file().to_string();
        let session_root = match self
            .opened
            .as_ref()
            .map_or_else(|| HostRoot::open(&self.root), |r| r.try_clone())
        {
            Ok(r) => r,
            Err(e) => {
                console.error_line(&format!(
                    "skyhook-agent: {file}: failed to open host root {}: {}",
                    self.root.display(),
                    crate::chain::render(&e)
                ));
                return StepResult::failed(exec, 1);
            }
        };
        let (out_file, err_file) = match inv.logs.take() {
            Some(l) => (
                Some((
                    Box::new(l.out_file) as Box<dyn std::io::Write + Send>,
                    l.out_path,
                )),
                Some((
                    Box::new(l.err_file) as Box<dyn std::io::Write + Send>,
                    l.err_path,
                )),
            ),
            None => (None, None),
        };
        let output = Arc::new(
            SinkOutput::with_sinks(
                StreamSink::new("stdout", console.writer(Label::Out), out_file),
                StreamSink::new("stderr", console.writer(Label::Err), err_file),
                inv.spec.redactor.clone(),
                local_now,
            )
            .with_log_format(self.log_format),
        );
        let api = inv.spec.session(session_root);
        let ran = {
            let engine = self.engine.clone();
            let (script, spec, out) = (script.clone(), inv.spec.clone(), output.clone());
            // The step's diagnostics span follows the script onto the blocking pool.
            let span = tracing::Span::current();
            tokio::task::spawn_blocking(move || {
                let _entered = span.enter();
                ScriptStep {
                    engine: &engine,
                    script: &script,
                    spec: &spec,
                    api: &api,
                    end: End::Session,
                    list_drift: true,
                }
                .run(out)
            })
            .await
        };
        let mut result = match ran {
            Ok(r) => r,
            Err(e) => {
                let msg = format!("{file}: script runner: {e}\n");
                ScriptOutput::stderr(&*output, msg.as_bytes());
                let log_errors = finish_output(&output, &*console);
                return StepResult {
                    log_errors,
                    ..StepResult::failed(exec, 1)
                };
            }
        };
        result.code = result.status();
        // What the step changed, as step output (agent-contract 9.3 lines, no new marker).
        if let Some(text) = result.changes_text() {
            ScriptOutput::stdout(&*output, text.as_bytes());
        }
        result.log_errors = finish_output(&output, &*console);
        result
    }
}

/// End a step's output and report its write errors on stderr (as a process step's).
fn finish_output(
    output: &SinkOutput,
    console: &dyn super::invocation::ConsoleStreams,
) -> Vec<String> {
    let lines = super::invocation::log_error_lines(&output.finish());
    for line in &lines {
        console.error_line(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::resolver::ModuleStore;
    use chrono::NaiveDate;
    use std::io::Write;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn fixed() -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2025, 1, 2)
            .unwrap()
            .and_hms_micro_opt(13, 45, 1, 123456)
            .unwrap()
    }

    /// A console keeping what the agent writes on each stream.
    #[derive(Default)]
    struct KeepConsole {
        out: Buf,
        err: Buf,
    }

    impl crate::step::invocation::ConsoleStreams for KeepConsole {
        fn writer(&self, label: Label) -> Box<dyn Write + Send> {
            Box::new(match label {
                Label::Out => self.out.clone(),
                _ => self.err.clone(),
            })
        }
        fn error_line(&self, line: &str) {
            self.err
                .0
                .lock()
                .unwrap()
                .extend_from_slice(format!("{line}\n").as_bytes());
        }
    }

    /// Run `source` as `w.rhai` on the agent's runner over `root` (plain log format, so the
    /// console has the lines as written) with `spec`: the result and the console's stdout.
    fn agent_step(
        root: &std::path::Path,
        source: &str,
        spec: crate::step::StepSpec,
    ) -> (crate::step::StepResult, String) {
        let engine = Arc::new(ScriptEngine::default());
        let script = crate::script::run::compile_source(
            &engine,
            "w.rhai",
            source,
            Arc::new(ModuleStore::new(root)),
        )
        .unwrap();
        let inv = crate::step::StepInvocation {
            path: "w.rhai".into(),
            program: crate::step::StepProgram::Script(script),
            args: Vec::new(),
            env: Vec::new(),
            spec,
            logs: None,
            preamble: None,
            keep_fds: Vec::new(),
        };
        let console = Arc::new(KeepConsole::default());
        let runner = ScriptRunner {
            engine,
            root: root.to_path_buf(),
            opened: None,
            log_format: LogFormat::Plain,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let r = rt.block_on(runner.run_step(inv, console.clone()));
        let out = String::from_utf8(console.out.0.lock().unwrap().clone()).unwrap();
        (r, out)
    }

    /// Three changes between two prints; the file names hold `hunter2`, a secret.
    const THREE: &str = "print(\"start\");\n\
        fs::write(\"/etc/d/hunter2.conf\", \"a=1\\n\");\n\
        fs::write(\"/etc/b.conf\", \"b=2\\n\", #{mode: 0o600});\n\
        fs::remove(\"/etc/old.conf\");\n\
        print(\"end\");\n";

    /// A root with `/etc/b.conf` (`b=1`, 0644) and `/etc/old.conf`.
    fn three_root() -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("etc")).unwrap();
        let b = d.path().join("etc/b.conf");
        std::fs::write(&b, "b=1\n").unwrap();
        std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(d.path().join("etc/old.conf"), "x\n").unwrap();
        d
    }

    fn secret_spec() -> crate::step::StepSpec {
        let env = vec![
            ("SKYHOOK_REDACT_ENV".to_string(), "TOKEN".to_string()),
            ("TOKEN".to_string(), "hunter2".to_string()),
        ];
        crate::step::StepSpec {
            redactor: Some(Redactor::from_env(&env)),
            env,
            ..crate::step::StepSpec::default()
        }
    }

    #[test]
    fn an_applied_step_lists_what_it_changed_after_its_output() {
        let d = three_root();
        let (r, out) = agent_step(d.path(), THREE, secret_spec());
        assert!(r.ok, "{r:?}");
        assert_eq!(
            out,
            "start\nend\n\
             + mkdir /etc/d\n\
             ~ create /etc/d/***.conf (mode 0644)  # w.rhai:2\n\
             ~ update /etc/b.conf (mode 0644 -> 0600)  # w.rhai:3\n\
             ~ remove /etc/old.conf  # w.rhai:4\n\
             Apply: 3 changed, 0 unchanged.\n"
        );
        // Converged: the step's own output only.
        let (r, out) = agent_step(d.path(), THREE, secret_spec());
        assert!(r.ok && r.changes_text().is_none(), "{r:?}");
        assert_eq!(out, "start\nend\n");
    }

    #[test]
    fn with_diffs_each_file_change_carries_its_unified_diff() {
        let d = three_root();
        let spec = crate::step::StepSpec {
            diffs: true,
            ..secret_spec()
        };
        let (_, out) = agent_step(d.path(), THREE, spec);
        assert_eq!(
            out,
            "start\nend\n\
             + mkdir /etc/d\n\
             ~ create /etc/d/***.conf (mode 0644)  # w.rhai:2\n\
             --- /dev/null\n+++ b/etc/d/***.conf\n@@ -0,0 +1 @@\n+a=1\n\
             ~ update /etc/b.conf (mode 0644 -> 0600)  # w.rhai:3\n\
             --- a/etc/b.conf\n+++ b/etc/b.conf\n@@ -1 +1 @@\n-b=1\n+b=2\n\
             ~ remove /etc/old.conf  # w.rhai:4\n\
             --- a/etc/old.conf\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n\
             Apply: 3 changed, 0 unchanged.\n"
        );
    }

    #[test]
    fn failed_and_checking_steps_list_no_changes() {
        // A failed step: its error is its account; the report keeps what it did.
        let d = three_root();
        let (r, out) = agent_step(
            d.path(),
            "fs::write(\"/etc/c.conf\", \"c\\n\");\nprint(\"x\");\nthrow \"boom\";\n",
            crate::step::StepSpec::default(),
        );
        assert!(!r.ok);
        assert_eq!(r.report.changes.len(), 1);
        assert_eq!(out, "x\n");
        // A check: pending changes are drift, on stderr, not a list of changes.
        let spec = crate::step::StepSpec {
            exec: crate::host::ExecMode::Check,
            ..crate::step::StepSpec::default()
        };
        let (r, out) = agent_step(d.path(), THREE, spec);
        assert!(!r.ok);
        assert_eq!(r.report.drift().len(), 3);
        assert_eq!(out, "start\nend\n");
    }

    #[test]
    fn script_output_is_relayed_like_a_process_with_redaction() {
        let (con_out, file_out, con_err) = (Buf::default(), Buf::default(), Buf::default());
        let redactor = Redactor::new();
        redactor.add("hunter2");
        let out = Arc::new(SinkOutput::with_sinks(
            StreamSink::new(
                "stdout",
                Box::new(con_out.clone()),
                Some((Box::new(file_out.clone()), "/log/x.rhai.log".into())),
            ),
            StreamSink::new("stderr", Box::new(con_err.clone()), None),
            Some(redactor),
            fixed,
        ));
        let engine = Arc::new(ScriptEngine::default());
        let dir = tempfile::tempdir().unwrap();
        let script = crate::script::run::compile_source(
            &engine,
            "x.rhai",
            "print(\"one\"); print(\"pw=hunter2\"); debug(\"e1\");",
            Arc::new(ModuleStore::new(dir.path())),
        )
        .unwrap();
        let opts = crate::script::RunOptions::new(out.clone(), crate::process::Cancel::new());
        let outcome = crate::script::run_script_with(
            &engine,
            &script,
            &crate::script::StepContext::default(),
            &opts,
        );
        assert!(!outcome.failed());
        assert!(out.finish().is_empty());
        let ts = "2025-01-02T13:45:01.123456";
        let expected = format!("[out]{ts} one\n[out]{ts} pw=***\n[out]{ts} ");
        assert_eq!(
            String::from_utf8(con_out.0.lock().unwrap().clone()).unwrap(),
            expected
        );
        assert_eq!(
            String::from_utf8(file_out.0.lock().unwrap().clone()).unwrap(),
            expected
        );
        assert_eq!(
            String::from_utf8(con_err.0.lock().unwrap().clone()).unwrap(),
            format!("[err]{ts} e1\n[err]{ts} ")
        );
    }
}
