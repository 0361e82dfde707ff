//! Runs a `.rhai` step in-process: the script's `print`/`debug`/`log::` output goes through
//! the same log sink as a process step's pipes (labels, per-chunk timestamps, console and
//! `.log`/`.log.err` files, redaction), so logs look the same whatever kind a step is.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use chrono::NaiveDateTime;

use crate::logs::redact::{Redactor, StreamRedactor};
use crate::logs::sink::{Label, LogError, Relay, StepLogFiles, StreamSink};
use crate::script::bindings::ScriptHost;
use crate::script::context::StepContext;
use crate::script::engine::ScriptEngine;
use crate::script::output::ScriptOutput;
use crate::script::run::{CompiledScript, RunOptions, ScriptOutcome, run_script_with};

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
    chrono::Local::now().naive_local()
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

/// Runs compiled `.rhai` steps on one shared engine.
#[derive(Clone)]
pub struct ScriptRunner {
    /// The engine (built once, immutable).
    pub engine: Arc<ScriptEngine>,
}

impl ScriptRunner {
    /// Run `script` with `ctx`, the host API `host`, output through `output`. Blocks until
    /// the script ends (it runs on its own thread; see
    /// [`run_script_with`](crate::script::run::run_script_with)).
    ///
    /// The outcome fails on any script error, `fail()`, limit, deadline or cancel, whatever
    /// the step's `returncodes` say; otherwise its `code` is checked against them by the caller.
    pub fn run(
        &self,
        script: &CompiledScript,
        ctx: &StepContext,
        host: Arc<dyn ScriptHost>,
        output: Arc<SinkOutput>,
        cancel: Arc<AtomicBool>,
    ) -> ScriptOutcome {
        let opts = RunOptions {
            output,
            cancel,
            host,
            timeout: None,
        };
        run_script_with(&self.engine, script, ctx, &opts)
    }
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
        let runner = ScriptRunner { engine };
        let outcome = runner.run(
            &script,
            &StepContext::default(),
            Arc::new(crate::script::bindings::NoHost),
            out.clone(),
            Arc::new(AtomicBool::new(false)),
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
