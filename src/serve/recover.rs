//! Recovery: the executions an earlier server recorded in the state dir whose processes
//! still live ([`load`] at startup), how one of them ends when its processes are found gone
//! (`{"error": "unknown"}`) and its cancel (every process of it, then
//! `{"error": "cancelled"}`). Their output is gone; only their ids, owners and processes
//! are known (docs/remote.md "Restart").

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::execution::{Execution, lock};
use super::request::Kind;
use super::state::StateDir;
use crate::process::cgroup;
use crate::redact::Redactor;

/// The recovered executions of `state` by id, and the warnings about files of the dir
/// that are no records (skipped unread). A record whose processes are all gone is retired
/// (record and cgroup removed) instead.
pub(super) fn load(state: Option<&StateDir>) -> (HashMap<String, Arc<Execution>>, Vec<String>) {
    let mut execs = HashMap::new();
    let (records, warnings) = state.map(StateDir::all).unwrap_or_default();
    for (id, rec) in records {
        if super::state::members(&rec).is_empty() {
            // Everything of it is gone: retire its record and cgroup.
            if let Some(dir) = &rec.cgroup {
                let _ = cgroup::remove(dir);
            }
            if let Some(s) = state {
                s.remove(&id);
            }
            continue;
        }
        let mut exec = Execution::new(
            id.clone(),
            Kind::Sh,
            rec.engine.clone(),
            1,
            rec.cgroup.clone(),
            Redactor::new(),
        );
        exec.recovered = true;
        lock(&exec.inner).proc = Some(rec);
        execs.insert(id, Arc::new(exec));
    }
    (execs, warnings)
}

impl Execution {
    /// A recovered execution that still runs but has no process left: its exit becomes
    /// `{"error": "unknown"}` and its record and cgroup are retired. Not while a cancel of
    /// it is under way (the cancel retires it, `{"error": "cancelled"}`).
    pub(super) fn refresh_recovered(&self, state: Option<&StateDir>) {
        if !self.recovered || self.cancel.is_aborted() {
            return;
        }
        let rec = {
            let i = lock(&self.inner);
            if i.exit.is_some() {
                return;
            }
            i.proc.clone()
        };
        if rec
            .as_ref()
            .is_some_and(|r| !super::state::members(r).is_empty())
        {
            return;
        }
        self.retire(state, json!({"error": "unknown"}));
    }

    /// End a recovered execution with `exit`: forget its record, remove its cgroup.
    fn retire(&self, state: Option<&StateDir>, exit: Value) {
        let rec = {
            let mut i = lock(&self.inner);
            if i.exit.is_none() {
                i.exit = Some(exit);
            }
            i.proc.take()
        };
        if let Some(s) = state {
            s.remove(&self.id);
        }
        if let Some(dir) = rec.and_then(|r| r.cgroup) {
            let _ = cgroup::remove(&dir);
        }
        self.tick.send_replace(0);
    }
}

/// Cancel the recovered `exec` for `engine`: its token aborted (so it is not found gone
/// meanwhile), then, on the blocking pool, SIGTERM to every process of its record, `grace`,
/// SIGKILL until none is left, and its exit `{"error": "cancelled"}`. The `202` body.
pub(super) fn cancel(
    exec: Arc<Execution>,
    engine: &str,
    grace: Duration,
    state: Option<StateDir>,
) -> Value {
    exec.cancel
        .abort(crate::process::CancelReason::Remote(engine.to_string()));
    let id = exec.id.clone();
    if let Some(rec) = exec.proc_record() {
        tokio::task::spawn_blocking(move || {
            super::state::terminate(&rec, grace);
            exec.retire(state.as_ref(), json!({"error": "cancelled"}));
        });
    }
    json!({"id": id, "state": "cancelling", "recovered": true})
}
