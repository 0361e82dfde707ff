//! Where a script's output goes ([`ScriptOutput`]), and the two wrappers a session puts
//! around it: [`RecordingOutput`] keeps each chunk in the session's ordered list (so a plan
//! shows output where it happened between changes), [`RedactingOutput`] hides secrets across
//! chunk boundaries.

use std::sync::{Arc, Mutex};

use crate::redact::Redactor;
use crate::redact::StreamRedactor;

/// A poisoned lock still guards its data: a panic inside a host call is contained by the
/// script runner, and output must keep flowing.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where a run's output goes: the agent pipes it into its log sink (labels, timestamps, log
/// files), `skyhook-run` to the terminal, tests into a buffer.
pub trait ScriptOutput: Send + Sync {
    /// One chunk of the step's stdout.
    fn stdout(&self, bytes: &[u8]);
    /// One chunk of the step's stderr.
    fn stderr(&self, bytes: &[u8]);
}

/// What [`super::HostApi::capture_output`] does with script output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// Write both streams as usual and record them in the ordered list (`--output json`).
    Record,
    /// Record stdout instead of writing it (the plan renders it in order); write and record
    /// stderr (a dry run's text plan).
    StdoutInPlan,
}

/// Records output into a session's journal ([`HostApi::capture_output`]).
pub(crate) struct RecordingOutput {
    pub(crate) inner: Arc<dyn ScriptOutput>,
    pub(crate) journal: crate::host::effects::report::Journal,
    pub(crate) forward_stdout: bool,
}

impl ScriptOutput for RecordingOutput {
    fn stdout(&self, bytes: &[u8]) {
        self.journal
            .output(crate::host::effects::report::OutputStream::Stdout, bytes);
        if self.forward_stdout {
            self.inner.stdout(bytes);
        }
    }
    fn stderr(&self, bytes: &[u8]) {
        self.journal
            .output(crate::host::effects::report::OutputStream::Stderr, bytes);
        self.inner.stderr(bytes);
    }
}

/// Redacts each stream as a byte stream (a secret split across two chunks of a streamed
/// command is still hidden, and a multi-byte character split across chunks is passed on
/// intact); a possible partial secret held back at the end is released when the output is
/// dropped.
pub(crate) struct RedactingOutput {
    pub(crate) inner: Arc<dyn ScriptOutput>,
    pub(crate) redactor: Redactor,
    pub(crate) out: Mutex<StreamRedactor>,
    pub(crate) err: Mutex<StreamRedactor>,
}

impl RedactingOutput {
    fn pass(&self, stream: &Mutex<StreamRedactor>, bytes: &[u8], stdout: bool) {
        let mut buf = Vec::with_capacity(bytes.len());
        lock(stream).push(&self.redactor, bytes, &mut buf);
        if !buf.is_empty() {
            if stdout {
                self.inner.stdout(&buf);
            } else {
                self.inner.stderr(&buf);
            }
        }
    }
}

impl ScriptOutput for RedactingOutput {
    fn stdout(&self, bytes: &[u8]) {
        self.pass(&self.out, bytes, true);
    }
    fn stderr(&self, bytes: &[u8]) {
        self.pass(&self.err, bytes, false);
    }
}

impl Drop for RedactingOutput {
    fn drop(&mut self) {
        let mut tail = Vec::new();
        lock(&self.out).finish(&mut tail);
        if !tail.is_empty() {
            self.inner.stdout(&tail);
        }
        tail.clear();
        lock(&self.err).finish(&mut tail);
        if !tail.is_empty() {
            self.inner.stderr(&tail);
        }
    }
}
