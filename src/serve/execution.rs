//! [`Execution`]: one execution as the service keeps it: its event ring and the exit event
//! kept beside it, its exit once it ended, its process record, its cancel token and its
//! redactor. The service ([`super::exec::Service`]) appends to it; streams and status read
//! it.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::watch;

use super::request::Kind;
use super::ring::{Events, Gap, Ring};
use super::state::ProcRecord;
use crate::process::Cancel;
use crate::redact::Redactor;

/// `m` locked, also after a panic of another holder (the data stays usable: every holder
/// leaves it consistent between statements).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What of an execution changes while it runs (under one lock).
pub(super) struct Inner {
    pub(super) ring: Ring,
    pub(super) exit: Option<Value>,
    /// The exit event, kept beside the ring so that a reader of an execution whose ring
    /// was evicted still gets it (after a lost event).
    pub(super) exit_line: Option<(u64, Arc<str>)>,
    pub(super) proc: Option<ProcRecord>,
}

/// One execution: its ring, its exit once it ended, its cancel token.
pub struct Execution {
    /// The engine's id.
    pub id: String,
    /// sh or rhai.
    pub kind: Kind,
    /// Who started it (tokens file name).
    pub engine: String,
    pub(super) started: Instant,
    pub(super) inner: Mutex<Inner>,
    /// The last seq appended (0 for a change that is no event: an exit found, `u64::MAX`
    /// when the ring was evicted); streams wait on it.
    pub(super) tick: watch::Sender<u64>,
    pub(super) cancel: Cancel,
    pub(super) timed_out: AtomicBool,
    pub(super) redactor: Redactor,
    /// Found in the state dir at startup (started by an earlier server): no stream, no
    /// exit code; its processes can be cancelled.
    pub(super) recovered: bool,
    /// The execution's cgroup directory (when the service has a root).
    pub(super) cgroup: Option<PathBuf>,
}

impl std::fmt::Debug for Execution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Execution")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Execution {
    /// A new execution that has not run yet: an empty ring of `ring_lines`, a fresh cancel
    /// token.
    pub(super) fn new(
        id: String,
        kind: Kind,
        engine: String,
        ring_lines: usize,
        cgroup: Option<PathBuf>,
        redactor: Redactor,
    ) -> Execution {
        Execution {
            id,
            kind,
            engine,
            started: Instant::now(),
            recovered: false,
            cgroup,
            inner: Mutex::new(Inner {
                ring: Ring::new(ring_lines),
                exit: None,
                exit_line: None,
                proc: None,
            }),
            tick: watch::channel(0).0,
            cancel: Cancel::new(),
            timed_out: AtomicBool::new(false),
            redactor,
        }
    }

    /// Up to `max` events after `after`, whether the execution ended, and the last seq.
    ///
    /// # Errors
    /// [`Gap`] when the ring no longer reaches back to `after + 1`.
    pub fn read(&self, after: u64, max: usize) -> Result<(Events, bool, u64), Gap> {
        let i = lock(&self.inner);
        let ev = i.ring.after(after, max)?;
        Ok((ev, i.exit.is_some(), i.ring.last_seq()))
    }

    /// As [`Execution::read`], but a reader that fell behind the ring is moved past what
    /// was dropped: `Some((from_seq, to_seq))` names the events it lost, and the events
    /// returned follow them (the kept exit event when the whole ring was evicted).
    pub(super) fn read_on(
        &self,
        after: u64,
        max: usize,
    ) -> (Option<(u64, u64)>, Events, bool, u64) {
        let i = lock(&self.inner);
        let (ended, last) = (i.exit.is_some(), i.ring.last_seq());
        let g = match i.ring.after(after, max) {
            Ok(ev) => return (None, ev, ended, last),
            Err(g) => g,
        };
        if i.ring.is_empty()
            && let Some((seq, line)) = &i.exit_line
            && *seq >= g.wanted
        {
            let lost = (*seq > g.wanted).then(|| (g.wanted, *seq - 1));
            return (lost, vec![(*seq, line.clone())], ended, last);
        }
        let ev = i.ring.after(g.oldest - 1, max).unwrap_or_default();
        (Some((g.wanted, g.oldest - 1)), ev, ended, last)
    }

    /// The seq of the last event appended (0 before the first).
    pub(super) fn last_seq(&self) -> u64 {
        lock(&self.inner).ring.last_seq()
    }

    /// `{"id", "state", "exit", "first_seq", "last_seq"}`, plus `"recovered": true` for an
    /// execution of an earlier server (its exit is `{"error": "unknown"}` once its processes
    /// are gone, `{"error": "cancelled"}` after a cancel).
    pub fn status(&self) -> Value {
        let i = lock(&self.inner);
        let mut v = json!({
            "id": self.id,
            "state": if i.exit.is_some() { "exited" } else { "running" },
            "exit": i.exit.clone(),
            "first_seq": i.ring.first_seq(),
            "last_seq": i.ring.last_seq(),
        });
        if self.recovered {
            v["recovered"] = true.into();
        }
        v
    }

    /// True for an execution found in the state dir at startup.
    pub fn is_recovered(&self) -> bool {
        self.recovered
    }

    /// The exit object once ended.
    pub fn exit(&self) -> Option<Value> {
        lock(&self.inner).exit.clone()
    }

    /// Wait until the execution ended; its exit object.
    pub async fn ended(&self) -> Value {
        let mut tick = self.tick.subscribe();
        loop {
            if let Some(e) = self.exit() {
                return e;
            }
            // The sender lives in `self`: this never fails while we wait.
            let _ = tick.changed().await;
        }
    }

    /// The process record (pid == pgid, start time, cgroup) of a running sh execution.
    pub fn proc_record(&self) -> Option<ProcRecord> {
        lock(&self.inner).proc.clone()
    }
}
