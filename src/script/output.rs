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
//! [`run_script`](super::run_script).

use std::sync::{Arc, Mutex};

use rhai::{Dynamic, Engine, ImmutableString, Module};

/// Where a run's output goes: the agent pipes it into its log sink (labels, timestamps, log
/// files), `skyhook-run` to the terminal, tests into a buffer.
pub trait ScriptOutput: Send + Sync {
    /// One chunk of the step's stdout.
    fn stdout(&self, bytes: &[u8]);
    /// One chunk of the step's stderr.
    fn stderr(&self, bytes: &[u8]);
}

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

/// Hook `print`, `debug` and the `log` module of one run to `out`.
pub(crate) fn register(engine: &mut Engine, out: Arc<dyn ScriptOutput>) {
    let o = out.clone();
    engine.on_print(move |s| o.stdout(&line("", s)));
    let o = out.clone();
    engine.on_debug(move |s, _source, _pos| o.stderr(&line("", s)));
    // Rhai's own `debug` quotes strings (`debug("hi")` would print `"hi"`); a step's
    // stderr wants the text. Functions on the engine take precedence over packages.
    engine.register_fn("debug", |s: ImmutableString| s);

    let mut log = Module::new();
    let levels: [(&str, &str, bool); 3] = [
        ("info", "INFO: ", false),
        ("warn", "WARN: ", true),
        ("error", "ERROR: ", true),
    ];
    for (name, prefix, to_stderr) in levels {
        let o = out.clone();
        log.set_native_fn(name, move |msg: Dynamic| {
            let bytes = line(prefix, &text_of(&msg));
            if to_stderr {
                o.stderr(&bytes);
            } else {
                o.stdout(&bytes);
            }
            Ok(())
        });
    }
    engine.register_static_module("log", log.into());
}
