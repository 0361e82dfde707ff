//! Script output: `print`, `debug`, `log::info/warn/error`, routed through [`ScriptOutput`]
//! (`docs/host-api.md`, section Output and results).
//!
//! Each call writes exactly one chunk ending in `\n`:
//!
//! | script call | stream | bytes |
//! |---|---|---|
//! | `print(x)` | stdout | `x` as `to_string` renders it, `\n` |
//! | `debug(x)` | stderr | a string as it is, any other value in Rhai's debug form (`[1, "a"]`), `\n` |
//! | `log::info(msg)` | stdout | `INFO: msg\n` |
//! | `log::warn(msg)` | stderr | `WARN: msg\n` |
//! | `log::error(msg)` | stderr | `ERROR: msg\n` |
//!
//! A script error is written to stderr as `file:line:col: message\n` by
//! [`run_script`](crate::step::run_script).
//!
//! # Output limit
//!
//! A run writes at most [`Limits::max_output`](super::Limits::max_output) bytes (both streams
//! together, prefixes and newlines included) through these calls. The chunk that would pass
//! the limit, and any after it, is not written; `log::` functions then fail at the call, and
//! after `print` and `debug` (whose hooks cannot fail) the run stops before its next
//! operation, or when it ends, with `output limit exceeded`. Output of commands run with
//! `stream: true` is not counted (like a bash step's, it is bounded by the command's
//! timeout), nor is the final error message.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rhai::{Dynamic, Engine, EvalAltResult, ImmutableString, Module, NativeCallContext};

use super::errors::Stop;
use crate::host::api::{host_fns, script_fn};

pub use crate::host::api::ScriptOutput;

/// Writes to this process's stdout and stderr (each chunk in one `write_all`; errors such as
/// a closed pipe are ignored: output must never fail a step).
#[derive(Debug, Default, Clone, Copy)]
pub struct StdioOutput;

impl ScriptOutput for StdioOutput {
    fn stdout(&self, bytes: &[u8]) {
        use std::io::Write;
        let _ = std::io::stdout().lock().write_all(bytes);
    }
    fn stderr(&self, bytes: &[u8]) {
        use std::io::Write;
        let _ = std::io::stderr().lock().write_all(bytes);
    }
}

/// Collects output in memory: both streams apart, and every chunk in order with its stream.
#[derive(Debug, Default)]
pub struct CaptureOutput {
    chunks: Mutex<Vec<(Stream, Vec<u8>)>>,
}

/// One of the two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl CaptureOutput {
    /// An empty capture.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every chunk so far, in order.
    pub fn chunks(&self) -> Vec<(Stream, Vec<u8>)> {
        self.chunks.lock().map(|c| c.clone()).unwrap_or_default()
    }

    fn joined(&self, which: Stream) -> Vec<u8> {
        self.chunks()
            .into_iter()
            .filter(|(s, _)| *s == which)
            .flat_map(|(_, b)| b)
            .collect()
    }

    /// All stdout bytes so far.
    pub fn stdout_bytes(&self) -> Vec<u8> {
        self.joined(Stream::Stdout)
    }

    /// All stderr bytes so far.
    pub fn stderr_bytes(&self) -> Vec<u8> {
        self.joined(Stream::Stderr)
    }

    fn push(&self, s: Stream, bytes: &[u8]) {
        if let Ok(mut c) = self.chunks.lock() {
            c.push((s, bytes.to_vec()));
        }
    }
}

impl ScriptOutput for CaptureOutput {
    fn stdout(&self, bytes: &[u8]) {
        self.push(Stream::Stdout, bytes);
    }
    fn stderr(&self, bytes: &[u8]) {
        self.push(Stream::Stderr, bytes);
    }
}

fn line(prefix: &str, text: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(prefix.len() + text.len() + 1);
    v.extend_from_slice(prefix.as_bytes());
    v.extend_from_slice(text.as_bytes());
    v.push(b'\n');
    v
}

/// Text of a `log::` argument: a string as it is, anything else as `to_string`.
fn text_of(value: &Dynamic) -> String {
    match value.clone().into_immutable_string() {
        Ok(s) => s.to_string(),
        Err(_) => value.to_string(),
    }
}

/// One run's output with its limit (see the module docs): writes chunks through to the
/// inner output until `limit` bytes would be passed, then drops every chunk and remembers
/// it ([`CappedOutput::exceeded`]).
pub(crate) struct CappedOutput {
    inner: Arc<dyn ScriptOutput>,
    limit: u64,
    used: AtomicU64,
    exceeded: AtomicBool,
}

impl CappedOutput {
    /// `inner` limited to `limit` bytes.
    pub(crate) fn new(inner: Arc<dyn ScriptOutput>, limit: usize) -> Self {
        CappedOutput {
            inner,
            limit: u64::try_from(limit).unwrap_or(u64::MAX),
            used: AtomicU64::new(0),
            exceeded: AtomicBool::new(false),
        }
    }

    /// True once a chunk was refused: the run must stop.
    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded.load(Ordering::Relaxed)
    }

    /// Count `n` bytes; false (and [`CappedOutput::exceeded`] from now on) when they do not
    /// fit.
    fn admit(&self, n: usize) -> bool {
        if self.exceeded() {
            return false;
        }
        let n = n as u64;
        let before = self.used.fetch_add(n, Ordering::Relaxed);
        if before.saturating_add(n) > self.limit {
            self.exceeded.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Write `bytes` to stdout or stderr if they fit; false when refused.
    fn write(&self, to_stderr: bool, bytes: &[u8]) -> bool {
        if !self.admit(bytes.len()) {
            return false;
        }
        if to_stderr {
            self.inner.stderr(bytes);
        } else {
            self.inner.stdout(bytes);
        }
        true
    }
}

/// The error that stops a run at its output limit.
pub(crate) fn output_stop(pos: rhai::Position) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorTerminated(
        Dynamic::from(Stop::Output),
        pos,
    ))
}

script_fn! {
    /// Write `x` (as `to_string` renders it) and a newline to the step's stdout.
    #[script(ns = "", effects = Computes)]
    fn print(out: &CappedOutput; x: &str as "?") -> () {
        out.write(false, &line("", x));
    }
}

script_fn! {
    /// Write `x` and a newline to the step's stderr: a string as it is, any other value in
    /// Rhai's debug form.
    #[script(ns = "", effects = Computes)]
    fn debug(out: &CappedOutput; x: &str as "?") -> () {
        out.write(true, &line("", x));
    }
}

/// A `log::` line: `prefix`, the message's text, a newline, to stdout or stderr; the run
/// stops when its output limit is passed.
fn log_line(
    out: &CappedOutput,
    ctx: &NativeCallContext,
    prefix: &str,
    to_stderr: bool,
    msg: &Dynamic,
) -> Result<(), Box<EvalAltResult>> {
    if out.write(to_stderr, &line(prefix, &text_of(msg))) {
        Ok(())
    } else {
        Err(output_stop(ctx.call_position()))
    }
}

script_fn! {
    /// `INFO: msg` to the step's stdout.
    #[script(ns = "log", name = "info", effects = Computes)]
    fn log_info(out: &CappedOutput, ctx: NativeCallContext; msg: Dynamic)
        -> Result<(), Box<EvalAltResult>> as "()" {
        log_line(out, &ctx, "INFO: ", false, &msg)
    }
}

script_fn! {
    /// `WARN: msg` to the step's stderr.
    #[script(ns = "log", name = "warn", effects = Computes)]
    fn log_warn(out: &CappedOutput, ctx: NativeCallContext; msg: Dynamic)
        -> Result<(), Box<EvalAltResult>> as "()" {
        log_line(out, &ctx, "WARN: ", true, &msg)
    }
}

script_fn! {
    /// `ERROR: msg` to the step's stderr.
    #[script(ns = "log", name = "error", effects = Computes)]
    fn log_error(out: &CappedOutput, ctx: NativeCallContext; msg: Dynamic)
        -> Result<(), Box<EvalAltResult>> as "()" {
        log_line(out, &ctx, "ERROR: ", true, &msg)
    }
}

host_fns!(SCRIPT_FNS: print, debug, log_info, log_warn, log_error);

/// Hook `print`, `debug` and the `log` module of one run to `out`, which holds the run's
/// output limit.
pub(crate) fn register(engine: &mut Engine, out: Arc<CappedOutput>) {
    let o = out.clone();
    engine.on_print(move |s| print(&o, s));
    let o = out.clone();
    engine.on_debug(move |s, _source, _pos| debug(&o, s));
    // Rhai's own `debug` quotes strings (`debug("hi")` would print `"hi"`); a step's
    // stderr wants the text. Functions on the engine take precedence over packages.
    engine.register_fn("debug", |s: ImmutableString| s);

    let mut log = Module::new();
    let o = out.clone();
    log.set_native_fn("info", move |ctx: NativeCallContext, msg: Dynamic| {
        log_info(&o, ctx, msg)
    });
    let o = out.clone();
    log.set_native_fn("warn", move |ctx: NativeCallContext, msg: Dynamic| {
        log_warn(&o, ctx, msg)
    });
    log.set_native_fn("error", move |ctx: NativeCallContext, msg: Dynamic| {
        log_error(&out, ctx, msg)
    });
    engine.register_static_module("log", log.into());
}
