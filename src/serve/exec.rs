//! [`Service`]: everything that decides what the remote step API does, without HTTP.
//! Executions by id (`super::registry`), validation before anything is spawned
//! ([`super::request`]), secrets, the event rings and their byte budget, `--max-running`,
//! cancel, status, streams with heartbeats, shutdown, the audit line. Running an execution
//! is `super::run`'s, the executions of an earlier server `super::recover`'s. The HTTP
//! layer ([`super::http`]) maps requests onto these calls.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

pub use super::config::Config;
use super::event::{Body, Extra, alive_line, lost_line};
pub use super::execution::Execution;
use super::execution::lock;
use super::metrics::Metrics;
use super::registry::Registry;
pub use super::request::{
    Kind, MAX_ARG_BYTES, MAX_ENV_BYTES, MAX_ENV_ENTRIES, Refusal, StartRequest, valid_id,
};
use super::ring::Gap;
use super::run::{Ledger, Prepared, Program, Work};
use super::state::StateDir;
use crate::process::{CancelReason, cgroup, sweep};
use crate::redact::Redactor;
use crate::script::ScriptEngine;

/// Events handed to a stream per ring read (bounds what one reader copies at once).
const READ_BATCH: usize = 256;

/// An event line this long or longer (64 KiB) is streamed as the ring holds it, shared,
/// rather than copied into the reader's chunk.
const SHARED_LINE: usize = 64 << 10;

/// An event line of the ring as the bytes of a stream's chunk ([`Bytes::from_owner`]).
struct RingLine(Arc<str>);

impl AsRef<[u8]> for RingLine {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// Where audit lines go (stderr by default).
pub type AuditSink = Arc<dyn Fn(&str) + Send + Sync>;

/// The remote step service (see the module docs). Use it behind an `Arc`, inside a tokio
/// runtime (executions run as tasks).
pub struct Service {
    pub(super) cfg: Config,
    pub(super) engine: Arc<ScriptEngine>,
    /// The engine of package plans (`--plan-max-operations`).
    pub(super) plan_engine: Arc<ScriptEngine>,
    pub(super) reg: Mutex<Registry>,
    pub(super) bytes: AtomicUsize,
    pub(super) metrics: Metrics,
    pub(super) running: watch::Sender<usize>,
    pub(super) state: Option<StateDir>,
    audit: AuditSink,
    json_audit: bool,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Service {
    /// A service with `cfg`, auditing to stderr (JSON lines when `json_audit`). A failed
    /// audit write (stderr's reader gone: a restarted journald, a closed pipe) is dropped:
    /// `eprintln!` would panic in the request's task and fail every later request.
    ///
    /// # Errors
    /// The state dir cannot be created.
    pub fn new(cfg: Config, json_audit: bool) -> std::io::Result<Arc<Service>> {
        Self::with_audit(
            cfg,
            json_audit,
            Arc::new(|line: &str| {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            }),
        )
    }

    /// As [`Service::new`] with audit lines given to `audit`. The executions an earlier
    /// server recorded in the state dir whose processes still live are known at once
    /// (`recover::load`).
    ///
    /// # Errors
    /// The state dir cannot be created.
    pub fn with_audit(
        cfg: Config,
        json_audit: bool,
        audit: AuditSink,
    ) -> std::io::Result<Arc<Service>> {
        let state = cfg.state_dir.as_deref().map(StateDir::open).transpose()?;
        let (execs, warnings) = super::recover::load(state.as_ref());
        let svc = Arc::new(Service {
            engine: crate::step::engine(),
            plan_engine: cfg.plan.engine(),
            reg: Mutex::new(Registry::new(execs)),
            bytes: AtomicUsize::new(0),
            metrics: Metrics::default(),
            running: watch::channel(0).0,
            state,
            audit,
            json_audit,
            cfg,
        });
        // A state-dir file that is not a record (a FIFO, a huge file) was skipped unread.
        for w in warnings {
            svc.audit(json!({ "warning": w }));
        }
        Ok(svc)
    }

    /// Executions recorded in the state dir by an earlier server whose processes still run,
    /// sorted: their ids are taken (a start is `409`), status reports them, cancel reaches
    /// them; their output is gone.
    pub fn recovered(&self) -> Vec<String> {
        let execs: Vec<Arc<Execution>> = lock(&self.reg).all();
        let mut ids: Vec<String> = execs
            .into_iter()
            .filter(|e| {
                e.refresh_recovered(self.state.as_ref());
                e.recovered && e.exit().is_none()
            })
            .map(|e| e.id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// The boundary of each sh execution, for the startup message.
    pub fn boundary(&self) -> String {
        match &self.cfg.cgroup {
            Some(r) => format!(
                "a cgroup {} per execution under {}",
                match r.version() {
                    cgroup::Version::V2 => "v2",
                    cgroup::Version::V1 => "v1",
                },
                r.dir().display()
            ),
            None => "process group + subreaper sweep (no cgroup)".into(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Executions running now.
    pub fn running(&self) -> usize {
        lock(&self.reg).running()
    }

    /// Bytes held by all rings (at most `ring_bytes`, plus one event).
    pub fn ring_bytes(&self) -> usize {
        self.bytes.load(Ordering::SeqCst)
    }

    /// The counters (the HTTP layer adds connections and refusals).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The Prometheus text exposition of [`Service::metrics`] with the execution and ring
    /// gauges.
    pub fn metrics_text(&self) -> String {
        let (running, known) = {
            let reg = lock(&self.reg);
            (reg.running(), reg.known())
        };
        self.metrics.render(
            running,
            known.saturating_sub(running),
            self.ring_bytes(),
            self.cfg.ring_bytes,
        )
    }

    /// `{"version", "running"}`.
    pub fn health(&self) -> Value {
        json!({"version": env!("CARGO_PKG_VERSION"), "running": self.running()})
    }

    /// A known execution, whoever started it (a recovered one whose processes are all gone
    /// is marked exited).
    pub fn get(&self, id: &str) -> Option<Arc<Execution>> {
        let e = lock(&self.reg).get(id)?;
        e.refresh_recovered(self.state.as_ref());
        Some(e)
    }

    /// A known execution that `engine` started; `None` for one of another engine, so that
    /// an engine cannot tell it from an unknown id.
    pub fn get_owned(&self, id: &str, engine: &str) -> Option<Arc<Execution>> {
        self.get(id).filter(|e| e.engine == engine)
    }

    /// `GET /v1/executions/{id}`: [`Execution::status`] of an execution `engine` started.
    ///
    /// # Errors
    /// `404` for an unknown id or another engine's execution.
    pub fn status(&self, id: &str, engine: &str) -> Result<Value, Refusal> {
        self.get_owned(id, engine)
            .map(|e| e.status())
            .ok_or_else(Refusal::not_found)
    }

    /// `GET /v1/executions/{id}/events?after=N`: [`Service::stream`] of an execution `engine`
    /// started.
    ///
    /// # Errors
    /// `404` for an unknown id or another engine's execution; `400` when `after` is beyond
    /// the last event (`last_seq` in the body: sequence numbers never go back, so such a
    /// cursor did not come from this execution); `410` for a [`Gap`].
    pub fn events(
        self: &Arc<Self>,
        id: &str,
        after: u64,
        engine: &str,
    ) -> Result<mpsc::Receiver<Bytes>, Refusal> {
        let exec = self.get_owned(id, engine).ok_or_else(Refusal::not_found)?;
        let last = exec.last_seq();
        if after > last {
            return Err(Refusal::new(
                400,
                json!({"error": "bad request",
                       "detail": format!("after {after} is beyond the last event {last}"),
                       "last_seq": last}),
            ));
        }
        self.stream(exec, after).map_err(Refusal::gap)
    }

    /// Write one audit line: `fields` plus `ts` (JSON, or `key=value` words).
    pub fn audit(&self, fields: Value) {
        let mut m = Map::new();
        m.insert("ts".into(), super::event::now_ts().into());
        if let Value::Object(f) = fields {
            m.extend(f);
        }
        let line = if self.json_audit {
            Value::Object(m).to_string()
        } else {
            let mut s = String::from("audit");
            for (k, v) in &m {
                let v = match v {
                    Value::String(s) => s.clone(),
                    Value::Null => continue,
                    other => other.to_string(),
                };
                s.push_str(&format!(" {k}={v}"));
            }
            s
        };
        (self.audit)(&line);
    }

    /// Validate and start an execution (`POST /v1/executions`). Nothing is spawned, written
    /// or registered unless every check passed: JSON shape (unknown fields refused), id,
    /// kind-specific fields, env names, workdir, timeout, the Rhai script compiles, every
    /// secret resolves, the id is new (`409`), fewer than `max_running` run (`429`).
    ///
    /// # Errors
    /// The [`Refusal`] to answer with.
    pub fn start(self: &Arc<Self>, body: &[u8], engine: &str) -> Result<Arc<Execution>, Refusal> {
        use super::request as check;
        let (req, mut plan) = match super::plan::parse_plan(body).map_err(Refusal::from)? {
            Some(p) => (
                StartRequest::plan(p.id, self.cfg.plan.plan_timeout(p.timeout_s)),
                Some(p.job),
            ),
            None => (check::parse(body)?, None),
        };
        if !check::valid_id(&req.id) {
            return Err(Refusal::bad("id must match [A-Za-z0-9._-]{1,128}"));
        }
        if self.get(&req.id).is_some() {
            return Err(Refusal::exists(&req.id));
        }
        let common = check::common(&req, &self.cfg.workdir)?;
        let values = self
            .cfg
            .secrets
            .resolve_all(&req.secrets)
            .map_err(|e| Refusal::secret(&e))?;
        let redactor = Redactor::new();
        for (_, v) in &values {
            redactor.add(v);
        }
        let declared = check::declared(&req, &values);
        let env = check::environment(&req, &values)?;
        let step = |program| {
            Work::Step(Prepared {
                program,
                env,
                declared,
            })
        };
        let work = match req.kind {
            Kind::PackagePlan => match plan.take() {
                Some(mut job) => {
                    // A place under --max-plans (429 over it), held until the plan's thread ends.
                    let permit = self.cfg.plan.admit().ok_or_else(|| {
                        let mut r = Refusal::new(429, self.cfg.plan.over_cap());
                        r.headers.push(("Retry-After", "1".into()));
                        r
                    })?;
                    job.bound(&self.cfg.plan, permit);
                    Work::Plan(Box::new(job))
                }
                None => return Err(Refusal::bad("kind package_plan needs package")),
            },
            Kind::Sh => {
                let command = check::sh_command(&req)?;
                let workdir = self.resolve_workdir(&common.workdir)?;
                step(Program::Sh { command, workdir })
            }
            Kind::Rhai => {
                let rhai = check::rhai(&req)?;
                let compiled = check::compile(&self.engine, &rhai, &redactor)?;
                step(Program::Rhai {
                    compiled,
                    exec: rhai.exec,
                })
            }
        };
        // The execution's own cgroup, made last: every refusal below removes it.
        // A Rhai execution's commands join it through the host options.
        let cg = match &self.cfg.cgroup {
            Some(root) => Some(root.create(&req.id).map_err(|e| {
                Refusal::new(
                    503,
                    json!({"error": "cannot create the execution's cgroup",
                           "detail": format!("{}: {e}", root.dir().display())}),
                )
            })?),
            None => None,
        };
        let exec = Arc::new(Execution::new(
            req.id.clone(),
            req.kind,
            engine.to_string(),
            self.cfg.ring_lines,
            cg.clone(),
            redactor,
        ));
        {
            let mut reg = lock(&self.reg);
            match reg.admit(exec.clone(), self.cfg.max_running) {
                Ok(running) => {
                    self.running.send_replace(running);
                }
                Err(r) => {
                    if let Some(dir) = &cg {
                        let _ = cgroup::remove(dir);
                    }
                    return Err(r);
                }
            }
        }
        self.metrics.started();
        super::run::launch(self, &exec, work, common.timeout);
        Ok(exec)
    }

    /// `workdir` resolved inside the host root as the chrooted step will see it (`..` stops
    /// at the root, symlinks are followed inside it): the host path of a directory.
    ///
    /// # Errors
    /// `422 {"error": "workdir not found", "workdir"}` when it is not a directory inside the
    /// root (also when resolving it would leave the root); `500` when the root cannot be
    /// opened.
    fn resolve_workdir(&self, workdir: &Path) -> Result<PathBuf, Refusal> {
        let root = crate::host::root::HostRoot::open(&self.cfg.root).map_err(|e| {
            Refusal::new(500, json!({"error": format!("cannot open host root: {e}")}))
        })?;
        let not_found = || {
            Refusal::new(
                422,
                json!({"error": "workdir not found", "workdir": workdir}),
            )
        };
        let resolved = root
            .canonical(workdir)
            .ok()
            .flatten()
            .ok_or_else(not_found)?;
        match root.metadata(&resolved) {
            Ok(Some(m)) if m.is_dir() => Ok(resolved),
            _ => Err(not_found()),
        }
    }

    /// Append one event to `exec`'s ring, keeping the byte budget; nothing once it has
    /// its exit event.
    pub(super) fn emit(&self, exec: &Execution, body: &Body) {
        let (seq, delta, evicted) = {
            let mut i = lock(&exec.inner);
            // The exit is the stream's last event (a cancelled plan's thread may still end).
            if i.exit.is_some() {
                return;
            }
            let before = i.ring.first_seq();
            let (seq, delta) = i.ring.push(|s| body.render(s));
            (seq, delta, i.ring.first_seq() - before)
        };
        self.metrics.evicted(evicted);
        self.account(delta);
        exec.tick.send_replace(seq);
        if self.bytes.load(Ordering::SeqCst) > self.cfg.ring_bytes {
            self.reclaim(exec);
        }
    }

    /// Count `delta` bytes more (or fewer) held by the rings.
    pub(super) fn account(&self, delta: isize) {
        if delta >= 0 {
            self.bytes.fetch_add(delta as usize, Ordering::SeqCst);
        } else {
            self.bytes.fetch_sub((-delta) as usize, Ordering::SeqCst);
        }
    }

    /// Over the byte budget: evict the oldest ended executions, then the oldest events of
    /// `exec` (never its last one).
    pub(super) fn reclaim(&self, exec: &Execution) {
        let over = || self.bytes.load(Ordering::SeqCst) > self.cfg.ring_bytes;
        {
            let mut reg = lock(&self.reg);
            while over() {
                // the oldest ended one other than `exec` (which just ended, maybe)
                let Some(e) = reg.evict_oldest_except(&exec.id) else {
                    break;
                };
                self.drop_ring(&e);
            }
        }
        while over() {
            let mut i = lock(&exec.inner);
            if i.ring.len() <= 1 {
                break;
            }
            let n = i.ring.pop_front();
            drop(i);
            self.metrics.evicted(1);
            self.account(-(n as isize));
        }
    }

    /// Empty the ring of `e`, evicted, and wake its readers.
    pub(super) fn drop_ring(&self, e: &Execution) {
        let mut i = lock(&e.inner);
        let mut n = 0;
        self.metrics.evicted(i.ring.len() as u64);
        while !i.ring.is_empty() {
            n += i.ring.pop_front();
        }
        drop(i);
        self.account(-(n as isize));
        e.tick.send_replace(u64::MAX);
    }

    /// `POST /v1/executions/{id}/cancel` with its body (`{"grace_s": N}`, optional).
    /// `202` when a running execution (or, after a restart, a recovered one: its cgroup's
    /// members, else its process group) is being cancelled; `200` with the exit when it
    /// already ended.
    ///
    /// # Errors
    /// `400` for a bad body, `404` for an unknown id or another engine's execution (also
    /// one recorded by an earlier server).
    pub fn cancel(&self, id: &str, body: &[u8], engine: &str) -> Result<(u16, Value), Refusal> {
        let grace = super::request::cancel_grace(body, self.cfg.default_grace)?;
        let Some(exec) = self.get(id) else {
            return Err(Refusal::not_found());
        };
        if exec.engine != engine {
            return Err(Refusal::not_found());
        }
        if let Some(exit) = exec.exit() {
            return Ok((200, json!({"id": id, "state": "exited", "exit": exit})));
        }
        if exec.recovered {
            let state = self.state.clone();
            return Ok((202, super::recover::cancel(exec, engine, grace, state)));
        }
        super::run::terminate(&exec, CancelReason::Remote(engine.to_string()), grace);
        Ok((202, json!({"id": id, "state": "cancelling"})))
    }

    /// The stream of `exec` from the first event after `after`: NDJSON chunks (each ends
    /// with `\n`), a heartbeat every `alive_every` while it runs, closed after the exit
    /// event. A reader that fell so far behind that the ring dropped what it needs next
    /// gets a lost event (`{"lost": N, "from_seq", "to_seq"}`) and the stream goes on
    /// after it: the step is never slowed down by a reader.
    ///
    /// # Errors
    /// [`Gap`] when the ring does not reach back to `after + 1` now.
    pub fn stream(
        self: &Arc<Self>,
        exec: Arc<Execution>,
        after: u64,
    ) -> Result<mpsc::Receiver<Bytes>, Gap> {
        exec.read(after, 0)?;
        let (tx, rx) = mpsc::channel::<Bytes>(16);
        let alive = self.cfg.alive_every;
        let svc = self.clone();
        let state = self.state.clone();
        tokio::spawn(async move {
            let mut cursor = after;
            let mut tick = exec.tick.subscribe();
            loop {
                tick.borrow_and_update();
                let (lost, events, ended, last) = exec.read_on(cursor, READ_BATCH);
                let mut chunk = Vec::new();
                if let Some((from, to)) = lost {
                    svc.metrics.lost(to - from + 1);
                    chunk.extend_from_slice(lost_line(from, to).as_bytes());
                    chunk.push(b'\n');
                    cursor = to;
                }
                let had = !chunk.is_empty() || !events.is_empty();
                for (seq, line) in events {
                    cursor = seq;
                    if line.len() < SHARED_LINE {
                        chunk.extend_from_slice(line.as_bytes());
                        chunk.push(b'\n');
                        continue;
                    }
                    // A long line (a package plan's exit) is sent as the ring holds it, not
                    // copied: its newline starts the next chunk.
                    let before = Bytes::from(std::mem::take(&mut chunk));
                    let sent = async {
                        if !before.is_empty() {
                            tx.send(before).await?;
                        }
                        tx.send(Bytes::from_owner(RingLine(line))).await
                    };
                    if sent.await.is_err() {
                        return;
                    }
                    chunk.push(b'\n');
                }
                if had && tx.send(Bytes::from(chunk)).await.is_err() {
                    return;
                }
                if ended && cursor >= last {
                    return;
                }
                if had {
                    continue;
                }
                tokio::select! {
                    r = tick.changed() => if r.is_err() { return },
                    () = tokio::time::sleep(alive) => {
                        // A recovered execution ends when its processes are found gone.
                        exec.refresh_recovered(state.as_ref());
                        let mut l = alive_line().into_bytes();
                        l.push(b'\n');
                        if tx.send(Bytes::from(l)).await.is_err() {
                            return;
                        }
                    }
                    () = tx.closed() => return,
                }
            }
        });
        Ok(rx)
    }

    /// Refuse new starts, let running executions finish for `grace`, then cancel what is
    /// left (TERM, the default grace, KILL) and wait until every one ended.
    pub async fn shutdown(&self, grace: Duration) {
        lock(&self.reg).close();
        let mut running = self.running.subscribe();
        let idle = async {
            let _ = running.wait_for(|n| *n == 0).await;
        };
        if tokio::time::timeout(grace, idle).await.is_ok() {
            return;
        }
        let live: Vec<Arc<Execution>> = lock(&self.reg)
            .all()
            .into_iter()
            .filter(|e| !e.recovered && e.exit().is_none())
            .collect();
        for e in &live {
            super::run::terminate(e, CancelReason::Signal("SIGTERM"), self.cfg.default_grace);
        }
        let mut running = self.running.subscribe();
        let _ = running.wait_for(|n| *n == 0).await;
    }
}

impl Ledger for Service {
    fn config(&self) -> &Config {
        &self.cfg
    }

    fn engine(&self) -> &Arc<ScriptEngine> {
        &self.engine
    }

    fn plan_engine(&self) -> &Arc<ScriptEngine> {
        &self.plan_engine
    }

    fn state(&self) -> Option<&StateDir> {
        self.state.as_ref()
    }

    fn emit(&self, exec: &Execution, body: &Body) {
        Service::emit(self, exec, body);
    }

    fn audit(&self, fields: Value) {
        Service::audit(self, fields);
    }

    /// The exit event, the ended state, the running count, eviction by count, the audit line.
    fn finish(&self, exec: &Arc<Execution>, exit: Value, extra: Extra) {
        let body = Body::Exit {
            exit: exit.clone(),
            extra,
        };
        let (seq, delta) = {
            let mut i = lock(&exec.inner);
            let before = i.ring.first_seq();
            let r = i.ring.push(|s| body.into_line(s));
            self.metrics.evicted(i.ring.first_seq() - before);
            i.exit_line = i.ring.after(r.0 - 1, 1).ok().and_then(|mut v| v.pop());
            i.exit = Some(exit.clone());
            i.proc = None;
            r
        };
        self.account(delta);
        self.metrics
            .ended(exec.kind.as_str(), &exit, exec.started.elapsed());
        if let Some(s) = &self.state {
            s.remove(&exec.id);
        }
        // The run emptied the cgroup (bounded); what resists is killed once more.
        if let Some(dir) = &exec.cgroup
            && cgroup::remove(dir).is_err()
            && !(sweep::kill_all(dir, Duration::from_secs(1)) && cgroup::remove(dir).is_ok())
        {
            self.audit(json!({"id": exec.id, "warning":
                format!("cannot remove the execution's cgroup {}", dir.display())}));
        }
        {
            let mut reg = lock(&self.reg);
            let running = reg.ended(&exec.id, self.cfg.keep_finished, |e| self.drop_ring(e));
            self.running.send_replace(running);
        }
        exec.tick.send_replace(seq);
        if self.bytes.load(Ordering::SeqCst) > self.cfg.ring_bytes {
            self.reclaim(exec);
        }
        self.audit(
            json!({"engine": exec.engine, "route": "exit", "id": exec.id,
                          "kind": exec.kind.as_str(), "exit": exit}),
        );
    }
}

#[cfg(test)]
#[path = "tests/exec_tests.rs"]
mod tests;

#[cfg(test)]
mod stream_tests {
    use super::*;

    /// A long event line (a package plan's exit, a 64 KiB piece of output) is streamed as
    /// the ring holds it: the reader's bytes are the ring's line, not a copy (before, each
    /// reader copied every line into its chunk: an 84 MB exit was held once more while it
    /// was sent). The stream is still every line, each ended by a newline.
    #[test]
    fn a_long_event_line_is_streamed_without_a_copy() {
        let svc =
            Service::with_audit(Config::new(Path::new("/")), true, Arc::new(|_: &str| {})).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let start = json!({"id": "long", "kind": "sh",
                "command": "head -c 70000 /dev/zero | tr '\\0' x; echo; echo short"});
            let e = svc.start(start.to_string().as_bytes(), "t").unwrap();
            let mut rx = svc.stream(e.clone(), 0).unwrap();
            let mut chunks = Vec::new();
            while let Some(b) = rx.recv().await {
                chunks.push(b);
            }
            let (events, ended, _) = e.read(0, 100).unwrap();
            assert!(ended);
            let long = events
                .iter()
                .find(|(_, l)| l.len() >= SHARED_LINE)
                .expect("a line of 64 KiB or more");
            assert!(
                chunks
                    .iter()
                    .any(|c| c.as_ptr() == long.1.as_ptr() && c.len() == long.1.len()),
                "the long line was copied"
            );
            let text = String::from_utf8(chunks.concat()).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), events.len(), "{:?}", &text[..200]);
            for ((_, want), got) in events.iter().zip(&lines) {
                assert_eq!(&**want, *got);
            }
            assert!(text.ends_with('\n'));
        });
    }
}
