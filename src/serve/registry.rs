//! [`Registry`]: the executions by id (one namespace for every engine), the ended ones in
//! the order they ended (evicted oldest first), the running count against
//! `--max-running`, and whether starts are still taken (not after shutdown began). The
//! service keeps it under one lock; dropping an evicted execution's ring (which the byte
//! budget counts) is the service's.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::json;

use super::execution::Execution;
use super::request::Refusal;

/// Executions by id (see the module docs).
pub(super) struct Registry {
    execs: HashMap<String, Arc<Execution>>,
    finished: VecDeque<String>,
    running: usize,
    closed: bool,
}

impl Registry {
    /// A registry of `execs` (the recovered executions of an earlier server), none running.
    pub(super) fn new(execs: HashMap<String, Arc<Execution>>) -> Registry {
        Registry {
            execs,
            finished: VecDeque::new(),
            running: 0,
            closed: false,
        }
    }

    /// The execution `id`, whoever started it.
    pub(super) fn get(&self, id: &str) -> Option<Arc<Execution>> {
        self.execs.get(id).cloned()
    }

    /// Every known execution, in no order.
    pub(super) fn all(&self) -> Vec<Arc<Execution>> {
        self.execs.values().cloned().collect()
    }

    /// Executions running now.
    pub(super) fn running(&self) -> usize {
        self.running
    }

    /// Executions known (running, ended and recovered).
    pub(super) fn known(&self) -> usize {
        self.execs.len()
    }

    /// Take no more starts (shutdown).
    pub(super) fn close(&mut self) {
        self.closed = true;
    }

    /// Register `exec` as running; the new running count.
    ///
    /// # Errors
    /// `503` once closed, `409` for a known id, `429` (with `Retry-After: 1`) when
    /// `max_running` run already.
    pub(super) fn admit(
        &mut self,
        exec: Arc<Execution>,
        max_running: usize,
    ) -> Result<usize, Refusal> {
        if self.closed {
            return Err(Refusal::new(503, json!({"error": "shutting down"})));
        }
        if self.execs.contains_key(&exec.id) {
            return Err(Refusal::exists(&exec.id));
        }
        if self.running >= max_running {
            let mut r = Refusal::new(
                429,
                json!({"error": "too many running", "max_running": max_running}),
            );
            r.headers.push(("Retry-After", "1".into()));
            return Err(r);
        }
        self.running += 1;
        self.execs.insert(exec.id.clone(), exec);
        Ok(self.running)
    }

    /// `id` ended: one fewer running, the newest ended one; `evict` gets each ended
    /// execution beyond the `keep_finished` newest, forgotten oldest first. The new running
    /// count.
    pub(super) fn ended(
        &mut self,
        id: &str,
        keep_finished: usize,
        mut evict: impl FnMut(&Execution),
    ) -> usize {
        self.running -= 1;
        self.finished.push_back(id.to_string());
        while self.finished.len() > keep_finished {
            if let Some(old) = self.finished.pop_front()
                && let Some(e) = self.execs.remove(&old)
            {
                evict(&e);
            }
        }
        self.running
    }

    /// Forget the oldest ended execution other than `keep` (which may have just ended);
    /// `None` when there is none.
    pub(super) fn evict_oldest_except(&mut self, keep: &str) -> Option<Arc<Execution>> {
        loop {
            let pos = self.finished.iter().position(|id| id != keep)?;
            let old = self.finished.remove(pos)?;
            if let Some(e) = self.execs.remove(&old) {
                return Some(e);
            }
        }
    }
}
