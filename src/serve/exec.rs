//! [`Service`]: everything that decides what the remote step API does, without HTTP.
//! Executions by id, validation before anything is spawned, secrets, the event rings and
//! their byte budget, `--max-running`, cancel, status, streams with heartbeats, shutdown,
//! the audit line. The HTTP layer ([`super::http`]) maps requests onto these calls.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use super::event::{Body, Lines, alive_line, lost_line};
use super::metrics::Metrics;
use super::ring::{Events, Gap, Ring};
use super::secrets::{SecretError, SecretRef, Secrets, env_name};
use super::state::{ProcRecord, StateDir, proc_stat};
use crate::host::ExecMode;
use crate::process::{Cancel, CancelReason, Outcome, Status};
use crate::process::{cgroup, sweep};
use crate::redact::Redactor;
use crate::script::{CompiledScript, ModuleStore, ScriptEngine};

/// Most environment entries a step gets (the request's `env`, its `secrets`, `PATH`).
pub const MAX_ENV_ENTRIES: usize = 1024;

/// Most bytes of a step's environment and command together, each entry counted as
/// `NAME=value` plus its NUL: half of the usual 2 MiB `ARG_MAX`, so an exec never fails
/// with `E2BIG`.
pub const MAX_ENV_BYTES: usize = 1 << 20;

/// Most bytes of one `NAME=value` entry or of the command, its NUL included: Linux's
/// `MAX_ARG_STRLEN` (32 pages of 4 KiB), past which an exec fails with `E2BIG`.
pub const MAX_ARG_BYTES: usize = 32 * 4096;

/// Events handed to a stream per ring read (bounds what one reader copies at once).
const READ_BATCH: usize = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Settings of a [`Service`] (the options of `skyhook-agent serve`).
#[derive(Debug, Clone)]
pub struct Config {
    /// The host root (`--root`): sh steps run chrooted there (no chroot when it is `/`),
    /// Rhai steps use the host API confined to it.
    pub root: PathBuf,
    /// Where a step runs when it names no `workdir` (host path, `--workdir`; default `/`).
    pub workdir: PathBuf,
    /// What runs a sh `command` (`--shell`, default `["/bin/sh", "-c"]`); the command is the
    /// last argument.
    pub shell: Vec<String>,
    /// Secrets dir and allowlist.
    pub secrets: Secrets,
    /// Events kept per execution (`--ring-lines`).
    pub ring_lines: usize,
    /// Bytes of event lines kept in all (`--ring-bytes`).
    pub ring_bytes: usize,
    /// Executions running at once (`--max-running`); one more is `429`.
    pub max_running: usize,
    /// Ended executions kept for status and replay (oldest evicted first).
    pub keep_finished: usize,
    /// Heartbeat interval on a stream while the execution runs (`--alive-every`).
    pub alive_every: Duration,
    /// Where `id -> pid + start time` survives a restart (`--state-dir`); `None`: memory only.
    pub state_dir: Option<PathBuf>,
    /// Grace between SIGTERM and SIGKILL when a cancel names none, and after a timeout.
    pub default_grace: Duration,
    /// Where each execution gets its own cgroup (`--cgroup-root`, detected by default);
    /// `None`: its process group and the subreaper sweep are its boundary.
    pub cgroup: Option<cgroup::Root>,
}

impl Config {
    /// Defaults for everything but the root: workdir `/`, `/bin/sh -c`, no secrets, 10000
    /// lines, 64 MiB, 16 running, 1024 ended kept, 10 s heartbeats, no state dir, 10 s grace,
    /// no cgroup.
    pub fn new(root: &Path) -> Config {
        Config {
            root: root.to_path_buf(),
            workdir: PathBuf::from("/"),
            shell: vec!["/bin/sh".into(), "-c".into()],
            secrets: Secrets {
                dir: PathBuf::from("/var/run/secrets/skyhook"),
                allow: Vec::new(),
            },
            ring_lines: 10_000,
            ring_bytes: 64 << 20,
            max_running: 16,
            keep_finished: 1024,
            alive_every: Duration::from_secs(10),
            state_dir: None,
            default_grace: Duration::from_secs(10),
            cgroup: None,
        }
    }
}

/// A refused request: HTTP status, JSON body, extra headers. Never carries a secret value.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The status code (400, 403, 404, 409, 410, 413, 422, 429, 500, 503).
    pub status: u16,
    /// `{"error": "...", ...}`.
    pub body: Value,
    /// Extra headers (`Retry-After` on a 429).
    pub headers: Vec<(&'static str, String)>,
}

impl Refusal {
    fn new(status: u16, body: Value) -> Refusal {
        Refusal {
            status,
            body,
            headers: Vec::new(),
        }
    }

    fn bad(detail: impl std::fmt::Display) -> Refusal {
        Refusal::new(
            400,
            json!({"error": "bad request", "detail": detail.to_string()}),
        )
    }

    /// `404 {"error": "not found"}`.
    pub fn not_found() -> Refusal {
        Refusal::new(404, json!({"error": "not found"}))
    }

    /// `410 {"error": "gap", "wanted", "oldest"}`.
    pub fn gap(g: Gap) -> Refusal {
        Refusal::new(
            410,
            json!({"error": "gap", "wanted": g.wanted, "oldest": g.oldest}),
        )
    }
}

/// The kind of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A shell line.
    Sh,
    /// A Rhai script.
    Rhai,
    /// A read-only package plan (`super::plan`).
    #[serde(rename = "package_plan")]
    PackagePlan,
}

impl Kind {
    /// `"sh"` or `"rhai"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Sh => "sh",
            Kind::Rhai => "rhai",
            Kind::PackagePlan => super::plan::KIND,
        }
    }
}

/// The body of `POST /v1/executions` (unknown fields refused).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// `[A-Za-z0-9._-]{1,128}`, chosen by the engine.
    pub id: String,
    /// `sh` or `rhai`.
    pub kind: Kind,
    /// kind sh: the shell line.
    #[serde(default)]
    pub command: Option<String>,
    /// kind rhai: the script text.
    #[serde(default)]
    pub script: Option<String>,
    /// kind rhai: `apply` (default), `plan` or `check`.
    #[serde(default)]
    pub mode: Option<String>,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Secret coordinates resolved on the host.
    #[serde(default)]
    pub secrets: Vec<SecretRef>,
    /// Host path to run in (default the service's workdir).
    #[serde(default)]
    pub workdir: Option<String>,
    /// Wall-clock limit in seconds (then SIGTERM, grace, SIGKILL; exit `{"error":"timeout"}`).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// kind rhai: the name errors and plan positions give the script (an extension: the
    /// client's file name, so a remote plan reads as a local one); default `<id>.rhai`. At
    /// most 255 bytes, no control characters.
    #[serde(default)]
    pub script_name: Option<String>,
}

impl StartRequest {
    /// The generic part of a `package_plan` start (`super::plan` has the rest).
    fn plan(id: String, timeout_s: Option<f64>) -> StartRequest {
        StartRequest {
            id,
            kind: Kind::PackagePlan,
            command: None,
            script: None,
            mode: None,
            env: BTreeMap::new(),
            secrets: Vec::new(),
            workdir: None,
            timeout_s,
            script_name: None,
        }
    }
}

impl From<super::plan::PlanRefusal> for Refusal {
    fn from(r: super::plan::PlanRefusal) -> Refusal {
        Refusal::new(r.status, r.body)
    }
}

/// True for a valid execution id.
pub fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Everything a start needs, resolved before anything runs.
enum Prepared {
    Sh(crate::process::Spec),
    Rhai {
        compiled: CompiledScript,
        exec: ExecMode,
        env: Vec<(String, String)>,
        declared: Vec<(String, String, String)>,
    },
    Plan(Box<super::plan::PlanJob>),
}

struct Inner {
    ring: Ring,
    exit: Option<Value>,
    /// The exit event, kept beside the ring so that a reader of an execution whose ring
    /// was evicted still gets it (after a lost event).
    exit_line: Option<(u64, Arc<str>)>,
    proc: Option<ProcRecord>,
}

/// One execution: its ring, its exit once it ended, its cancel token.
pub struct Execution {
    /// The engine's id.
    pub id: String,
    /// sh or rhai.
    pub kind: Kind,
    /// Who started it (tokens file name).
    pub engine: String,
    started: Instant,
    inner: Mutex<Inner>,
    tick: watch::Sender<u64>,
    cancel: Cancel,
    timed_out: AtomicBool,
    redactor: Redactor,
    /// Found in the state dir at startup (started by an earlier server): no stream, no
    /// exit code; its processes can be cancelled.
    recovered: bool,
    /// The execution's cgroup directory (when the service has a root).
    cgroup: Option<PathBuf>,
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
    fn read_on(&self, after: u64, max: usize) -> (Option<(u64, u64)>, Events, bool, u64) {
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

    /// A recovered execution that still runs but has no process left: its exit becomes
    /// `{"error": "unknown"}` and its record and cgroup are retired. Not while a cancel of
    /// it is under way (the cancel retires it, `{"error": "cancelled"}`).
    fn refresh_recovered(&self, state: Option<&StateDir>) {
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

struct Registry {
    execs: HashMap<String, Arc<Execution>>,
    finished: VecDeque<String>,
    running: usize,
    closed: bool,
}

/// Where audit lines go (stderr by default).
pub type AuditSink = Arc<dyn Fn(&str) + Send + Sync>;

/// The remote step service (see the module docs). Use it behind an `Arc`, inside a tokio
/// runtime (executions run as tasks).
pub struct Service {
    cfg: Config,
    engine: Arc<ScriptEngine>,
    reg: Mutex<Registry>,
    bytes: AtomicUsize,
    metrics: Metrics,
    running: watch::Sender<usize>,
    state: Option<StateDir>,
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
    /// A service with `cfg`, auditing to stderr (JSON lines when `json_audit`).
    ///
    /// # Errors
    /// The state dir cannot be created.
    pub fn new(cfg: Config, json_audit: bool) -> std::io::Result<Arc<Service>> {
        Self::with_audit(cfg, json_audit, Arc::new(|line: &str| eprintln!("{line}")))
    }

    /// As [`Service::new`] with audit lines given to `audit`.
    ///
    /// # Errors
    /// The state dir cannot be created.
    pub fn with_audit(
        cfg: Config,
        json_audit: bool,
        audit: AuditSink,
    ) -> std::io::Result<Arc<Service>> {
        let state = cfg.state_dir.as_deref().map(StateDir::open).transpose()?;
        let mut execs = HashMap::new();
        let (records, warnings) = state.as_ref().map(StateDir::all).unwrap_or_default();
        for (id, rec) in records {
            if super::state::members(&rec).is_empty() {
                // Everything of it is gone: retire its record and cgroup.
                if let Some(dir) = &rec.cgroup {
                    let _ = cgroup::remove(dir);
                }
                if let Some(s) = &state {
                    s.remove(&id);
                }
                continue;
            }
            let exec = Execution {
                id: id.clone(),
                kind: Kind::Sh,
                engine: rec.engine.clone(),
                cgroup: rec.cgroup.clone(),
                inner: Mutex::new(Inner {
                    ring: Ring::new(1),
                    exit: None,
                    exit_line: None,
                    proc: Some(rec),
                }),
                tick: watch::channel(0).0,
                cancel: Cancel::new(),
                timed_out: AtomicBool::new(false),
                redactor: Redactor::new(),
                started: Instant::now(),
                recovered: true,
            };
            execs.insert(id, Arc::new(exec));
        }
        let svc = Arc::new(Service {
            engine: crate::step::engine(),
            reg: Mutex::new(Registry {
                execs,
                finished: VecDeque::new(),
                running: 0,
                closed: false,
            }),
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
        let execs: Vec<Arc<Execution>> = lock(&self.reg).execs.values().cloned().collect();
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
        lock(&self.reg).running
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
            (reg.running, reg.execs.len())
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
        let e = lock(&self.reg).execs.get(id).cloned()?;
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
        let last = lock(&exec.inner).ring.last_seq();
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
        let (req, mut plan) = match super::plan::parse_plan(body).map_err(Refusal::from)? {
            Some(p) => (StartRequest::plan(p.id, p.timeout_s), Some(p.job)),
            None => (serde_json::from_slice(body).map_err(Refusal::bad)?, None),
        };
        if !valid_id(&req.id) {
            return Err(Refusal::bad("id must match [A-Za-z0-9._-]{1,128}"));
        }
        if self.get(&req.id).is_some() {
            return Err(Refusal::new(
                409,
                json!({"error": "execution exists", "id": req.id}),
            ));
        }
        for (k, v) in &req.env {
            if !env_name(k) || v.contains('\0') {
                return Err(Refusal::bad(format!("invalid env entry {k:?}")));
            }
        }
        let timeout = match req.timeout_s {
            None => None,
            Some(t) if t > 0.0 && t <= 7.0 * 86400.0 => Some(Duration::from_secs_f64(t)),
            Some(_) => return Err(Refusal::bad("timeout_s must be in (0, 604800]")),
        };
        let workdir = match &req.workdir {
            Some(w) if !w.starts_with('/') => {
                return Err(Refusal::bad("workdir must be an absolute host path"));
            }
            Some(w) => PathBuf::from(w),
            None => self.cfg.workdir.clone(),
        };
        let values = self.cfg.secrets.resolve_all(&req.secrets).map_err(|e| {
            let (name, key) = e.coordinate();
            let status = if matches!(e, SecretError::NotAllowed { .. }) {
                403
            } else {
                422
            };
            Refusal::new(
                status,
                json!({"error": e.to_string(), "name": name, "key": key}),
            )
        })?;
        let redactor = Redactor::new();
        for (_, v) in &values {
            redactor.add(v);
        }
        // What a Rhai `secret(name, key)` may answer: only the declared coordinates, with the
        // values resolved above (nothing is read once the step runs).
        let declared: Vec<(String, String, String)> = req
            .secrets
            .iter()
            .zip(&values)
            .map(|(r, (_, v))| (r.name.clone(), r.key.clone(), v.clone()))
            .collect();
        let mut env: Vec<(String, String)> =
            vec![("PATH".into(), crate::process::DEFAULT_PATH.into())];
        for (k, v) in req
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .chain(values)
        {
            env.retain(|(n, _)| n != &k);
            env.push((k, v));
        }
        check_exec_size(&env, req.command.as_deref())?;
        let mut prepared = match req.kind {
            Kind::PackagePlan => match plan.take() {
                Some(job) => Prepared::Plan(Box::new(job)),
                None => return Err(Refusal::bad("kind package_plan needs package")),
            },
            Kind::Sh => {
                if req.script.is_some() || req.mode.is_some() {
                    return Err(Refusal::bad("kind sh takes command, not script or mode"));
                }
                let Some(command) = req.command.clone() else {
                    return Err(Refusal::bad("kind sh needs command"));
                };
                if command.contains('\0') {
                    return Err(Refusal::bad("command contains NUL"));
                }
                let chrooted = !is_slash(&self.cfg.root);
                let workdir = self.resolve_workdir(&workdir)?;
                let mut args: Vec<OsString> =
                    self.cfg.shell[1..].iter().map(OsString::from).collect();
                args.push(command.into());
                Prepared::Sh(crate::process::Spec {
                    program: PathBuf::from(&self.cfg.shell[0]),
                    args,
                    env: env
                        .iter()
                        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                        .collect(),
                    cwd: workdir.clone(),
                    chroot: chrooted.then(|| self.cfg.root.clone()),
                    stdin: None,
                    keep_fds: Vec::new(),
                    cgroup: None,
                    mount_ns: None,
                })
            }
            Kind::Rhai => {
                if req.command.is_some() {
                    return Err(Refusal::bad("kind rhai takes script, not command"));
                }
                let Some(script) = &req.script else {
                    return Err(Refusal::bad("kind rhai needs script"));
                };
                let exec = match req.mode.as_deref().unwrap_or("apply") {
                    "apply" => ExecMode::Apply,
                    "plan" => ExecMode::Plan,
                    "check" => ExecMode::Check,
                    other => {
                        return Err(Refusal::bad(format!(
                            "mode {other:?}: expected apply, plan or check"
                        )));
                    }
                };
                // Only the embedded stdlib (`skyhook/...`) can be imported: a relative import
                // would read the server's own filesystem, outside the host root.
                let store = Arc::new(ModuleStore::stdlib_only());
                let file = match &req.script_name {
                    None => format!("{}.rhai", req.id),
                    Some(n) if n.is_empty() || n.len() > 255 || n.chars().any(char::is_control) => {
                        return Err(Refusal::bad(
                            "script_name must be 1 to 255 bytes without control characters",
                        ));
                    }
                    Some(n) => n.clone(),
                };
                let compiled = crate::script::compile_source(&self.engine, &file, script, store)
                    .map_err(|e| {
                        Refusal::new(
                            422,
                            json!({"error": "script does not compile",
                                   "message": redactor.redact(&e.message),
                                   "line": e.line, "column": e.column}),
                        )
                    })?;
                Prepared::Rhai {
                    compiled,
                    exec,
                    env,
                    declared,
                }
            }
        };
        // The execution's own cgroup, made last: every refusal below removes it.
        // A Rhai execution's commands join it through the host options.
        let cg = match &self.cfg.cgroup {
            Some(root) => match root.create(&req.id) {
                Ok(dir) => {
                    if let Prepared::Sh(spec) = &mut prepared {
                        spec.cgroup = Some(dir.clone());
                    }
                    Some(dir)
                }
                Err(e) => {
                    return Err(Refusal::new(
                        503,
                        json!({"error": "cannot create the execution's cgroup",
                               "detail": format!("{}: {e}", root.dir().display())}),
                    ));
                }
            },
            None => None,
        };
        let refuse = |r: Refusal| {
            if let Some(dir) = &cg {
                let _ = cgroup::remove(dir);
            }
            Err(r)
        };
        let exec = Arc::new(Execution {
            id: req.id.clone(),
            kind: req.kind,
            engine: engine.to_string(),
            started: Instant::now(),
            recovered: false,
            cgroup: cg.clone(),
            inner: Mutex::new(Inner {
                ring: Ring::new(self.cfg.ring_lines),
                exit: None,
                exit_line: None,
                proc: None,
            }),
            tick: watch::channel(0).0,
            cancel: Cancel::new(),
            timed_out: AtomicBool::new(false),
            redactor,
        });
        {
            let mut reg = lock(&self.reg);
            if reg.closed {
                return refuse(Refusal::new(503, json!({"error": "shutting down"})));
            }
            if reg.execs.contains_key(&req.id) {
                return refuse(Refusal::new(
                    409,
                    json!({"error": "execution exists", "id": req.id}),
                ));
            }
            if reg.running >= self.cfg.max_running {
                let mut r = Refusal::new(
                    429,
                    json!({"error": "too many running", "max_running": self.cfg.max_running}),
                );
                r.headers.push(("Retry-After", "1".into()));
                return refuse(r);
            }
            reg.running += 1;
            reg.execs.insert(req.id.clone(), exec.clone());
            self.running.send_replace(reg.running);
        }
        self.metrics.started();
        if let Some(t) = timeout {
            let (svc, e) = (Arc::downgrade(self), Arc::downgrade(&exec));
            tokio::spawn(async move {
                tokio::time::sleep(t).await;
                if let (Some(svc), Some(e)) = (svc.upgrade(), e.upgrade())
                    && e.exit().is_none()
                {
                    e.timed_out.store(true, Ordering::SeqCst);
                    svc.terminate(
                        &e,
                        CancelReason::Deadline {
                            what: "timeout_s".into(),
                            secs: t.as_secs_f64(),
                        },
                        svc.cfg.default_grace,
                    );
                }
            });
        }
        let (svc, e) = (self.clone(), exec.clone());
        tokio::spawn(async move {
            let (exit, extra) = match prepared {
                Prepared::Sh(spec) => svc.run_sh(&e, spec).await,
                Prepared::Rhai {
                    compiled,
                    exec,
                    env,
                    declared,
                } => svc.run_rhai(&e, compiled, exec, env, declared).await,
                Prepared::Plan(job) => {
                    let (s, x) = (svc.clone(), e.clone());
                    let emit: super::plan::Emit = Arc::new(move |b| s.emit(&x, &b));
                    let root = svc.cfg.root.clone();
                    let engine = svc.engine.clone();
                    let (exit, extra) =
                        super::plan::run(*job, root, engine, emit, e.cancel.clone()).await;
                    if e.timed_out.load(Ordering::SeqCst) {
                        (json!({"error": "timeout"}), extra)
                    } else {
                        (exit, extra)
                    }
                }
            };
            svc.finish(&e, exit, extra);
        });
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

    /// Append one event to `exec`'s ring, keeping the byte budget.
    fn emit(&self, exec: &Execution, body: &Body) {
        let (seq, delta, evicted) = {
            let mut i = lock(&exec.inner);
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

    fn account(&self, delta: isize) {
        if delta >= 0 {
            self.bytes.fetch_add(delta as usize, Ordering::SeqCst);
        } else {
            self.bytes.fetch_sub((-delta) as usize, Ordering::SeqCst);
        }
    }

    /// Over the byte budget: evict the oldest ended executions, then the oldest events of
    /// `exec` (never its last one).
    fn reclaim(&self, exec: &Execution) {
        let over = || self.bytes.load(Ordering::SeqCst) > self.cfg.ring_bytes;
        {
            let mut reg = lock(&self.reg);
            while over() {
                // the oldest ended one other than `exec` (which just ended, maybe)
                let Some(pos) = reg.finished.iter().position(|id| id != &exec.id) else {
                    break;
                };
                let Some(old) = reg.finished.remove(pos) else {
                    break;
                };
                if let Some(e) = reg.execs.remove(&old) {
                    self.drop_ring(&e);
                }
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

    fn drop_ring(&self, e: &Execution) {
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

    /// The exit event, the ended state, the running count, eviction by count, the audit line.
    fn finish(&self, exec: &Arc<Execution>, exit: Value, extra: Map<String, Value>) {
        let body = Body::Exit {
            exit: exit.clone(),
            extra,
        };
        let (seq, delta) = {
            let mut i = lock(&exec.inner);
            let before = i.ring.first_seq();
            let r = i.ring.push(|s| body.render(s));
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
            reg.running -= 1;
            reg.finished.push_back(exec.id.clone());
            while reg.finished.len() > self.cfg.keep_finished {
                if let Some(old) = reg.finished.pop_front()
                    && let Some(e) = reg.execs.remove(&old)
                {
                    self.drop_ring(&e);
                }
            }
            self.running.send_replace(reg.running);
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

    /// Abort `exec` (TERM to its group now; a Rhai step stops at its next operation) and
    /// SIGKILL its group after `grace` if it still runs.
    fn terminate(&self, exec: &Arc<Execution>, reason: CancelReason, grace: Duration) {
        exec.cancel.abort(reason);
        let e = Arc::downgrade(exec);
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let Some(e) = e.upgrade() else { return };
            // The main process stays unreaped (pid and group reserved) until the run ends,
            // which clears the record first: a recorded group is still ours.
            let i = lock(&e.inner);
            if let (None, Some(rec)) = (&i.exit, &i.proc)
                && proc_stat(rec.pid).is_some_and(|(_, s)| s == rec.start)
            {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(rec.pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
                if let Some(dir) = &rec.cgroup {
                    cgroup::signal(dir, nix::sys::signal::Signal::SIGKILL);
                }
            }
        });
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
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct CancelBody {
            grace_s: Option<f64>,
        }
        let grace = if body.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            let b: CancelBody = serde_json::from_slice(body).map_err(Refusal::bad)?;
            b.grace_s
        };
        let grace = match grace {
            None => self.cfg.default_grace,
            Some(g) if (0.0..=3600.0).contains(&g) => Duration::from_secs_f64(g),
            Some(_) => return Err(Refusal::bad("grace_s must be in [0, 3600]")),
        };
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
            exec.cancel.abort(CancelReason::Remote(engine.to_string()));
            if let Some(rec) = exec.proc_record() {
                let state = self.state.clone();
                tokio::task::spawn_blocking(move || {
                    super::state::terminate(&rec, grace);
                    exec.retire(state.as_ref(), json!({"error": "cancelled"}));
                });
            }
            return Ok((
                202,
                json!({"id": id, "state": "cancelling", "recovered": true}),
            ));
        }
        self.terminate(&exec, CancelReason::Remote(engine.to_string()), grace);
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
                    chunk.extend_from_slice(line.as_bytes());
                    chunk.push(b'\n');
                    cursor = seq;
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
        lock(&self.reg).closed = true;
        let mut running = self.running.subscribe();
        let idle = async {
            let _ = running.wait_for(|n| *n == 0).await;
        };
        if tokio::time::timeout(grace, idle).await.is_ok() {
            return;
        }
        let live: Vec<Arc<Execution>> = lock(&self.reg)
            .execs
            .values()
            .filter(|e| !e.recovered && e.exit().is_none())
            .cloned()
            .collect();
        for e in &live {
            self.terminate(e, CancelReason::Signal("SIGTERM"), self.cfg.default_grace);
        }
        let mut running = self.running.subscribe();
        let _ = running.wait_for(|n| *n == 0).await;
    }

    async fn run_sh(
        self: &Arc<Self>,
        exec: &Arc<Execution>,
        spec: crate::process::Spec,
    ) -> (Value, Map<String, Value>) {
        let sink = ShSink {
            svc: self.clone(),
            exec: exec.clone(),
            out: Lines::new("stdout"),
            err: Lines::new("stderr"),
        };
        let options = crate::process::Options {
            timeout: None,
            cancel: Some(exec.cancel.clone()),
            // Our own timer sends the SIGKILL after the grace a cancel asks for; this is the
            // upper bound.
            term_grace: Duration::from_secs(3600),
            ..crate::process::Options::default()
        };
        let (report, mut sink) = crate::process::run_async(spec, options, sink).await;
        sink.finish();
        let exit = if exec.timed_out.load(Ordering::SeqCst) {
            json!({"error": "timeout"})
        } else {
            match report.outcome {
                Outcome::Exited(c) => json!({"code": c}),
                Outcome::Signaled(s) => json!({"signal": s}),
                Outcome::SpawnFailed(e) => {
                    json!({"error": exec.redactor.redact(&format!("spawn failed: {e}"))})
                }
                Outcome::TimedOut { .. } => json!({"error": "timeout"}),
                Outcome::Cancelled { status, .. } => status_json(status),
                Outcome::SinkStopped { status } => status_json(Some(status)),
            }
        };
        (exit, Map::new())
    }

    async fn run_rhai(
        self: &Arc<Self>,
        exec: &Arc<Execution>,
        compiled: CompiledScript,
        mode: ExecMode,
        env: Vec<(String, String)>,
        declared: Vec<(String, String, String)>,
    ) -> (Value, Map<String, Value>) {
        // The script runs in this process: the record names it (its pid is no group of the
        // execution's) and the cgroup, whose members a restarted server can still cancel.
        if let (Some(dir), Some(state)) = (&exec.cgroup, &self.state)
            && let Some((_, start)) = proc_stat(std::process::id() as i32)
        {
            let rec = ProcRecord {
                pid: std::process::id() as i32,
                start,
                cgroup: Some(dir.clone()),
                engine: exec.engine.clone(),
            };
            if let Err(e) = state.record(&exec.id, &rec) {
                self.audit(json!({"id": exec.id, "warning":
                    format!("cannot record the execution in the state dir: {e}")}));
            }
        }
        let out = Arc::new(RhaiSink {
            svc: self.clone(),
            exec: exec.clone(),
            streams: Mutex::new((Lines::new("stdout"), Lines::new("stderr"))),
        });
        let svc = self.clone();
        let e = exec.clone();
        let o2 = out.clone();
        let ran = tokio::task::spawn_blocking(move || {
            let root = crate::host::root::HostRoot::open(&svc.cfg.root)
                .map_err(|err| format!("cannot open host root: {err}"))?;
            let spec = crate::step::StepSpec {
                mode: if mode == ExecMode::Check {
                    "apply-check"
                } else {
                    "apply"
                }
                .into(),
                exec: mode,
                name: e.id.clone(),
                resource_id: e.id.clone(),
                env,
                commands_chrooted: !is_slash(&svc.cfg.root),
                secrets: crate::step::SecretSource::Declared(declared),
                redactor: Some(e.redactor.clone()),
                cancel: e.cancel.clone(),
                cgroup: e.cgroup.clone(),
                script_timeout: Some(Duration::from_secs(7 * 86400)),
                ..crate::step::StepSpec::default()
            };
            let api = spec.session(root);
            let o = crate::step::ScriptStep {
                engine: &svc.engine,
                script: &compiled,
                spec: &spec,
                api: &api,
                end: crate::step::End::Session,
                list_drift: false,
            }
            .run(o2);
            Ok::<_, String>(o)
        })
        .await;
        out.finish();
        let r = &exec.redactor;
        let o = match ran {
            Ok(Ok(o)) => o,
            Ok(Err(msg)) => return (json!({"error": r.redact(&msg)}), Map::new()),
            Err(join) => {
                return (
                    json!({"error": format!("script runner: {join}")}),
                    Map::new(),
                );
            }
        };
        let drift = mode == ExecMode::Check;
        for c in &o.report.changes {
            let mut p = json!({
                "action": c.summary.split_whitespace().next().unwrap_or(&c.kind),
                "kind": c.kind,
                "path": r.redact(&c.target),
                "summary": r.redact(&c.summary),
            });
            if let Some(d) = &c.diff {
                p["diff"] = r.redact(d).into_owned().into();
            }
            if drift {
                p["drift"] = true.into();
            }
            self.emit(exec, &Body::Plan(p));
        }
        for a in &o.report.actions {
            let p = json!({"action": a.kind, "path": r.redact(&a.target),
                           "summary": r.redact(&a.summary)});
            self.emit(exec, &Body::Plan(p));
        }
        let code = o.status();
        let exit = if exec.timed_out.load(Ordering::SeqCst) {
            json!({"error": "timeout"})
        } else if exec.cancel.is_aborted() && o.error.is_some() {
            json!({"error": "cancelled"})
        } else if let Some(err) = &o.error {
            json!({"code": code, "error": r.redact(err)})
        } else {
            json!({"code": code})
        };
        let mut extra = Map::new();
        extra.insert("report".into(), o.to_json(r));
        extra.insert("rendered".into(), o.report.render_text(r).into());
        (exit, extra)
    }
}

/// `413` when the environment (`NAME=value` entries, secrets included) and the command
/// would not fit an exec: more than [`MAX_ENV_ENTRIES`] entries, an entry or the command of
/// [`MAX_ARG_BYTES`] or more, or [`MAX_ENV_BYTES`] in all. The refusal names variables,
/// never values.
fn check_exec_size(env: &[(String, String)], command: Option<&str>) -> Result<(), Refusal> {
    let too_large = |detail: String| {
        Refusal::new(
            413,
            json!({"error": "environment too large", "detail": detail,
                   "max_env_entries": MAX_ENV_ENTRIES, "max_env_bytes": MAX_ENV_BYTES,
                   "max_arg_bytes": MAX_ARG_BYTES}),
        )
    };
    if env.len() > MAX_ENV_ENTRIES {
        return Err(too_large(format!(
            "{} environment entries, at most {MAX_ENV_ENTRIES}",
            env.len()
        )));
    }
    let mut total = 0;
    for (k, v) in env {
        let n = k.len() + 1 + v.len() + 1;
        if n >= MAX_ARG_BYTES {
            return Err(too_large(format!(
                "env {k:?} is {n} bytes, each entry must be under {MAX_ARG_BYTES}"
            )));
        }
        total += n;
    }
    if let Some(c) = command {
        if c.len() + 1 >= MAX_ARG_BYTES {
            return Err(too_large(format!(
                "command is {} bytes, it must be under {MAX_ARG_BYTES}",
                c.len() + 1
            )));
        }
        total += c.len() + 1;
    }
    if total > MAX_ENV_BYTES {
        return Err(too_large(format!(
            "environment and command are {total} bytes, at most {MAX_ENV_BYTES}"
        )));
    }
    Ok(())
}

fn status_json(s: Option<Status>) -> Value {
    match s {
        Some(Status::Code(c)) => json!({"code": c}),
        Some(Status::Signal(s)) => json!({"signal": s}),
        None => json!({"error": "cancelled"}),
    }
}

fn is_slash(p: &Path) -> bool {
    std::fs::canonicalize(p).is_ok_and(|c| c == Path::new("/"))
}

/// Output of a sh execution: redacted, split into line events.
struct ShSink {
    svc: Arc<Service>,
    exec: Arc<Execution>,
    out: Lines,
    err: Lines,
}

impl ShSink {
    fn finish(&mut self) {
        let (svc, exec) = (&self.svc, &self.exec);
        for l in [&mut self.out, &mut self.err] {
            l.finish(&mut |b| svc.emit(exec, &b));
        }
    }
}

impl crate::process::Sink for ShSink {
    fn spawned(&mut self, pid: i32) {
        let Some((_, start)) = proc_stat(pid) else {
            return;
        };
        let rec = ProcRecord {
            pid,
            start,
            cgroup: self.exec.cgroup.clone(),
            engine: self.exec.engine.clone(),
        };
        lock(&self.exec.inner).proc = Some(rec.clone());
        if let Some(s) = &self.svc.state
            && let Err(e) = s.record(&self.exec.id, &rec)
        {
            self.svc.audit(json!({"id": self.exec.id, "warning":
                format!("cannot record the process in the state dir: {e}")}));
        }
    }

    fn chunk(&mut self, stream: crate::process::Stream, bytes: &[u8]) -> std::ops::ControlFlow<()> {
        let (svc, exec) = (&self.svc, &self.exec);
        let lines = match stream {
            crate::process::Stream::Stdout => &mut self.out,
            crate::process::Stream::Stderr => &mut self.err,
        };
        lines.push(&exec.redactor, bytes, &mut |b| svc.emit(exec, &b));
        std::ops::ControlFlow::Continue(())
    }
}

/// Output of a Rhai execution (`print`, `debug`, `log::`, the error): the same events.
struct RhaiSink {
    svc: Arc<Service>,
    exec: Arc<Execution>,
    streams: Mutex<(Lines, Lines)>,
}

impl RhaiSink {
    fn finish(&self) {
        let mut s = lock(&self.streams);
        let (out, err) = &mut *s;
        for l in [out, err] {
            l.finish(&mut |b| self.svc.emit(&self.exec, &b));
        }
    }
}

impl crate::script::ScriptOutput for RhaiSink {
    fn stdout(&self, bytes: &[u8]) {
        let mut s = lock(&self.streams);
        s.0.push(&self.exec.redactor, bytes, &mut |b| {
            self.svc.emit(&self.exec, &b)
        });
    }
    fn stderr(&self, bytes: &[u8]) {
        let mut s = lock(&self.streams);
        s.1.push(&self.exec.redactor, bytes, &mut |b| {
            self.svc.emit(&self.exec, &b)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn service(dir: &Path, f: impl FnOnce(&mut Config)) -> Arc<Service> {
        let mut cfg = Config::new(Path::new("/"));
        std::fs::create_dir_all(dir.join("secrets/db")).unwrap();
        std::fs::write(dir.join("secrets/db/pw"), "s3cr3t-value").unwrap();
        cfg.secrets = Secrets {
            dir: dir.join("secrets"),
            allow: vec!["db".into()],
        };
        cfg.state_dir = Some(dir.join("state"));
        f(&mut cfg);
        Service::with_audit(cfg, true, Arc::new(|_: &str| {})).unwrap()
    }

    /// Every line of a stream until it closes.
    async fn collect(mut rx: mpsc::Receiver<Bytes>) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(b) = rx.recv().await {
            for l in String::from_utf8(b.to_vec()).unwrap().lines() {
                out.push(serde_json::from_str(l).unwrap());
            }
        }
        out
    }

    /// `ev` accounts for every seq from 1 to `last` exactly once, in order (numbered events
    /// and lost events' ranges), and ends with the exit event numbered `last`.
    fn assert_covers(ev: &[Value], last: u64) {
        let mut next = 1;
        for e in ev {
            if let Some(n) = e.get("lost") {
                let (from, to) = (e["from_seq"].as_u64(), e["to_seq"].as_u64());
                assert_eq!(from, Some(next), "{e}");
                let to = to.unwrap();
                assert_eq!(n.as_u64(), Some(to - next + 1), "{e}");
                next = to + 1;
            } else if let Some(seq) = e.get("seq") {
                assert_eq!(seq.as_u64(), Some(next), "{e}");
                next += 1;
            }
        }
        assert_eq!(next, last + 1, "events end at {}", next - 1);
        let end = ev.last().unwrap();
        assert!(end.get("exit").is_some(), "the stream ends with {end}");
    }

    async fn run_to_end(svc: &Arc<Service>, body: Value) -> Vec<Value> {
        let e = svc.start(body.to_string().as_bytes(), "t").unwrap();
        collect(svc.stream(e, 0).unwrap()).await
    }

    #[test]
    fn refused_starts_leave_nothing_then_429_and_cancel() {
        let d = tempfile::tempdir().unwrap();
        let svc = service(d.path(), |c| c.max_running = 1);
        rt().block_on(async {
            let marker = d.path().join("ran");
            let touch = format!("touch {}", marker.display());
            let cases = [
                (b"{nope".to_vec(), 400),
                (
                    json!({"id": "a", "kind": "sh", "command": touch, "x": 1})
                        .to_string()
                        .into_bytes(),
                    400,
                ),
                (
                    json!({"id": "a/b", "kind": "sh", "command": touch})
                        .to_string()
                        .into_bytes(),
                    400,
                ),
                (
                    json!({"id": "a", "kind": "sh", "script": "1"})
                        .to_string()
                        .into_bytes(),
                    400,
                ),
                (
                    json!({"id": "a", "kind": "sh", "command": touch, "timeout_s": -1})
                        .to_string()
                        .into_bytes(),
                    400,
                ),
                (
                    json!({"id": "a", "kind": "rhai", "script": "1", "script_name": "a\nb"})
                        .to_string()
                        .into_bytes(),
                    400,
                ),
                (
                    json!({"id": "a", "kind": "sh", "command": touch,
                        "secrets": [{"env": "P", "name": "other", "key": "pw"}]})
                    .to_string()
                    .into_bytes(),
                    403,
                ),
                (
                    json!({"id": "a", "kind": "sh", "command": touch,
                        "secrets": [{"env": "P", "name": "db", "key": "nope"}]})
                    .to_string()
                    .into_bytes(),
                    422,
                ),
                (
                    json!({"id": "a", "kind": "rhai", "script": "fn ("})
                        .to_string()
                        .into_bytes(),
                    422,
                ),
                (
                    json!({"id": "a", "kind": "rhai", "script": "import \"../../etc/hostname\" as m;"})
                        .to_string()
                        .into_bytes(),
                    422,
                ),
                (
                    json!({"id": "a", "kind": "rhai", "script": "1", "mode": "yolo"})
                        .to_string()
                        .into_bytes(),
                    400,
                ),
            ];
            for (body, want) in &cases {
                let r = svc.start(body, "t").unwrap_err();
                assert_eq!(r.status, *want, "{}", String::from_utf8_lossy(body));
                assert!(!r.body.to_string().contains("s3cr3t"));
            }
            assert!(svc.get("a").is_none());
            assert_eq!((svc.running(), svc.ring_bytes()), (0, 0));
            assert!(!marker.exists());
            assert!(
                std::fs::read_dir(d.path().join("state"))
                    .unwrap()
                    .next()
                    .is_none()
            );
            // one running: the next is 429, with Retry-After
            let long = svc
                .start(
                    json!({"id": "long", "kind": "sh", "command": "echo up; sleep 60"})
                        .to_string()
                        .as_bytes(),
                    "t",
                )
                .unwrap();
            let r = svc
                .start(
                    json!({"id": "b", "kind": "sh", "command": "true"})
                        .to_string()
                        .as_bytes(),
                    "t",
                )
                .unwrap_err();
            assert_eq!(r.status, 429);
            assert_eq!(r.headers, vec![("Retry-After", "1".to_string())]);
            assert!(svc.get("b").is_none());
            let mut rx = svc.stream(long.clone(), 0).unwrap();
            let up = rx.recv().await.unwrap();
            assert!(String::from_utf8_lossy(&up).contains("\"line\":\"up\""));
            assert_eq!(svc.cancel("long", b"{\"grace_s\": 1}", "t").unwrap().0, 202);
            let ev = collect(rx).await;
            assert_eq!(ev.last().unwrap()["exit"], json!({"signal": 15}));
            assert_eq!(svc.cancel("long", b"", "t").unwrap().0, 200);
            assert_eq!(svc.running(), 0);
            assert!(
                std::fs::read_dir(d.path().join("state"))
                    .unwrap()
                    .next()
                    .is_none()
            );
        });
    }

    /// A reader that does not read while a step writes past `--ring-lines` loses events:
    /// it is told which (a lost event) and then gets the rest and the exit event.
    #[test]
    fn slow_reader_gets_a_lost_event_then_the_rest_and_the_exit() {
        let d = tempfile::tempdir().unwrap();
        let svc = service(d.path(), |c| {
            c.ring_lines = 50;
            c.keep_finished = 1;
        });
        rt().block_on(async {
            let e = svc
                .start(
                    json!({"id": "s", "kind": "sh", "command": "seq 1 3000"})
                        .to_string()
                        .as_bytes(),
                    "t",
                )
                .unwrap();
            let rx = svc.stream(e.clone(), 0).unwrap();
            assert_eq!(e.ended().await, json!({"code": 0}));
            let ev = collect(rx).await;
            assert_covers(&ev, 3001);
            let lost: u64 = ev.iter().filter_map(|e| e["lost"].as_u64()).sum();
            assert!(lost > 0, "nothing lost: the test did not fall behind");
            let text = svc.metrics_text();
            let line = format!("skyhook_serve_stream_lost_events_total {lost}");
            assert!(text.lines().any(|l| l == line), "{text}");
            // the whole ring evicted (keep_finished = 1): a reader still holding the
            // execution gets the kept exit event after the lost range
            run_to_end(&svc, json!({"id": "t", "kind": "sh", "command": "true"})).await;
            assert!(svc.get("s").is_none());
            let (lost, ev, ended, last) = e.read_on(10, 100);
            assert_eq!((lost, ended, last), (Some((11, 3000)), true, 3001));
            assert_eq!(ev.len(), 1);
            assert!(
                ev[0].1.starts_with(r#"{"seq":3001,"exit":{"code":0}"#),
                "{}",
                ev[0].1
            );
        });
    }

    #[test]
    fn byte_budget_evicts_ended_executions_then_own_oldest_events() {
        let d = tempfile::tempdir().unwrap();
        let svc = service(d.path(), |c| {
            c.ring_bytes = 4000;
            c.keep_finished = 2;
        });
        rt().block_on(async {
            let ev = run_to_end(
                &svc,
                json!({"id": "a", "kind": "sh", "command": "seq 1 10"}),
            )
            .await;
            assert_eq!(ev.len(), 11);
            assert!(svc.get("a").is_some());
            // 200 lines of ~70 bytes: over budget; "a" goes first, then b's oldest events
            let b = svc
                .start(
                    json!({"id": "b", "kind": "sh", "command": "seq 1 200"})
                        .to_string()
                        .as_bytes(),
                    "t",
                )
                .unwrap();
            let rx = svc.stream(b.clone(), 0).unwrap();
            assert_eq!(b.ended().await, json!({"code": 0}));
            // a reader that fell behind the ring is told what it lost, then gets the rest
            let ev = collect(rx).await;
            assert_covers(&ev, 201);
            assert!(ev.iter().any(|e| e.get("lost").is_some()), "no lost event");
            assert!(
                svc.get("a").is_none(),
                "the ended execution was not evicted first"
            );
            assert!(svc.ring_bytes() <= 4000 + 200, "{}", svc.ring_bytes());
            assert!(svc.get("b").is_some());
            let gap = svc.stream(b.clone(), 0).unwrap_err();
            assert_eq!(gap.wanted, 1);
            assert!(gap.oldest > 100, "{gap:?}");
            assert_eq!(b.status()["state"], "exited");
            // by count: keep_finished = 2
            for id in ["c", "d"] {
                run_to_end(&svc, json!({"id": id, "kind": "sh", "command": "true"})).await;
            }
            assert!(svc.get("b").is_none() && svc.get("c").is_some() && svc.get("d").is_some());
        });
    }

    #[test]
    fn heartbeats_secrets_rhai_and_shutdown() {
        let d = tempfile::tempdir().unwrap();
        let svc = service(d.path(), |c| c.alive_every = Duration::from_millis(20));
        rt().block_on(async {
            let ev = run_to_end(
                &svc,
                json!({"id": "h", "kind": "sh", "command": "sleep 0.2; echo \"$P\"",
                       "secrets": [{"env": "P", "name": "db", "key": "pw"}]}),
            )
            .await;
            assert!(ev.iter().any(|e| e["alive"] == true && e.get("seq").is_none()));
            let lines: Vec<&Value> = ev.iter().filter(|e| e.get("seq").is_some()).collect();
            assert_eq!(lines[0]["line"], "***");
            let ev = run_to_end(
                &svc,
                json!({"id": "r", "kind": "rhai", "mode": "plan",
                       "script": "let p = secret(\"db\", \"pw\"); print(p); fs::write(\"/tmp/skyhook-serve-plan-only\", p);",
                       "secrets": [{"env": "P", "name": "db", "key": "pw"}]}),
            )
            .await;
            let text = serde_json::to_string(&ev).unwrap();
            assert!(!text.contains("s3cr3t"), "{text}");
            assert!(!text.contains(&crate::host::root::digest::sha256_tag(b"s3cr3t-value")), "{text}");
            assert_eq!(ev.last().unwrap()["report"]["changes"][0]["after"], "***");
            assert!(ev.iter().any(|e| e["line"] == "***"));
            assert_eq!(ev.last().unwrap()["exit"], json!({"code": 0}));
            // shutdown: the grace passes, the running one is cancelled, new starts refused
            let e = svc
                .start(json!({"id": "s", "kind": "sh", "command": "echo up; sleep 60"}).to_string().as_bytes(), "t")
                .unwrap();
            let mut rx = svc.stream(e, 0).unwrap();
            assert!(!rx.recv().await.unwrap().is_empty(), "the step started");
            svc.shutdown(Duration::from_millis(50)).await;
            assert_eq!(collect(rx).await.last().unwrap()["exit"], json!({"signal": 15}));
            let r = svc
                .start(json!({"id": "z", "kind": "sh", "command": "true"}).to_string().as_bytes(), "t")
                .unwrap_err();
            assert_eq!(r.status, 503);
        });
    }

    #[test]
    fn rhai_secret_reads_only_declared_coordinates_resolved_before_the_start() {
        let d = tempfile::tempdir().unwrap();
        let svc = service(d.path(), |_| {});
        let outside = d.path().join("outside");
        std::fs::write(&outside, "host-file-content").unwrap();
        std::os::unix::fs::symlink(&outside, d.path().join("secrets/db/link")).unwrap();
        std::fs::write(d.path().join("secrets/db/other"), "undeclared-value").unwrap();
        rt().block_on(async {
            let declared = json!([{"env": "P", "name": "db", "key": "pw"}]);
            for key in ["link", "other"] {
                let ev = run_to_end(
                    &svc,
                    json!({"id": format!("r-{key}"), "kind": "rhai", "secrets": declared,
                           "script": format!("print(secret(\"db\", \"{key}\"));")}),
                )
                .await;
                let text = serde_json::to_string(&ev).unwrap();
                assert!(!text.contains("host-file-content"), "{text}");
                assert!(!text.contains("undeclared-value"), "{text}");
                let exit = &ev.last().unwrap()["exit"];
                assert_eq!(exit["code"], 1, "{text}");
                let err = exit["error"].as_str().unwrap();
                assert!(
                    err.contains(&format!(
                        "secret \"db\" key \"{key}\" is not in the request's `secrets` field"
                    )),
                    "{err}"
                );
                assert!(!err.contains("SKYHOOK_ALLOWED_SECRETS"), "{err}");
            }
            // the declared one is read; a declared link out of the dir is refused up front
            let ev = run_to_end(
                &svc,
                json!({"id": "ok", "kind": "rhai", "secrets": declared,
                       "script": "if secret(\"db\", \"pw\") == \"s3cr3t-value\" { print(\"same\"); }"}),
            )
            .await;
            assert!(ev.iter().any(|e| e["line"] == "same"), "{ev:?}");
            let marker = d.path().join("ran");
            let r = svc
                .start(
                    json!({"id": "esc", "kind": "rhai",
                           "script": format!("fs::write(\"{}\", \"x\");", marker.display()),
                           "secrets": [{"env": "P", "name": "db", "key": "link"}]})
                    .to_string()
                    .as_bytes(),
                    "t",
                )
                .unwrap_err();
            assert_eq!(r.status, 422);
            assert_eq!(
                r.body,
                json!({"error": "secret not found", "name": "db", "key": "link"})
            );
            assert!(svc.get("esc").is_none() && !marker.exists());
        });
    }

    #[test]
    fn another_engine_gets_404_for_status_events_and_cancel_also_after_a_restart() {
        let d = tempfile::tempdir().unwrap();
        let svc = service(d.path(), |_| {});
        rt().block_on(async {
            let e = svc
                .start(
                    json!({"id": "mine", "kind": "sh", "command": "echo up; sleep 60"})
                        .to_string()
                        .as_bytes(),
                    "a",
                )
                .unwrap();
            let mut rx = svc.stream(e.clone(), 0).unwrap();
            assert!(String::from_utf8_lossy(&rx.recv().await.unwrap()).contains("up"));
            assert_eq!(svc.status("mine", "b").unwrap_err(), Refusal::not_found());
            assert_eq!(
                svc.events("mine", 0, "b").unwrap_err(),
                Refusal::not_found()
            );
            assert_eq!(
                svc.cancel("mine", b"", "b").unwrap_err(),
                Refusal::not_found()
            );
            assert_eq!(svc.status("mine", "a").unwrap()["state"], "running");
            assert!(e.exit().is_none(), "another engine's cancel reached it");
            // `after` beyond the last event: 400 naming it, for the owner too
            let r = svc.events("mine", 5, "a").unwrap_err();
            assert_eq!(r.status, 400);
            assert_eq!(r.body["last_seq"], 1);
            assert!(svc.events("mine", 1, "a").is_ok());
            // a restarted server reads the owner from the state dir
            let state = d.path().join("state/mine.json");
            let doc: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
            assert_eq!(doc["engine"], "a");
            let again = service(d.path(), |_| {});
            assert_eq!(
                again.cancel("mine", b"", "b").unwrap_err(),
                Refusal::not_found()
            );
            assert!(e.exit().is_none());
            let (code, body) = again.cancel("mine", b"{\"grace_s\": 1}", "a").unwrap();
            assert_eq!((code, &body["recovered"]), (202, &json!(true)));
            assert_eq!(
                collect(rx).await.last().unwrap()["exit"],
                json!({"signal": 15})
            );
        });
    }

    #[test]
    fn workdir_resolves_inside_the_host_root() {
        let t = crate::host::testutil::TestHost::new();
        t.install_sh();
        let d = t.dir.path();
        // beside the root on the host, and an absolute link naming a host directory
        std::fs::create_dir_all(d.join("beside")).unwrap();
        std::fs::create_dir_all(t.p("/srv/real")).unwrap();
        std::os::unix::fs::symlink(d.join("beside"), t.p("/srv/out")).unwrap();
        std::os::unix::fs::symlink("/srv/real", t.p("/srv/in")).unwrap();
        let svc = service(d, |c| c.root = t.root.clone());
        rt().block_on(async {
            for w in [
                "/../beside".to_string(),
                "/srv/out".to_string(),
                format!("{}", d.join("beside").display()),
                "/srv/nope".to_string(),
            ] {
                let r = svc
                    .start(
                        json!({"id": "w", "kind": "sh", "command": "true", "workdir": w})
                            .to_string()
                            .as_bytes(),
                        "t",
                    )
                    .unwrap_err();
                assert_eq!(r.status, 422, "{w}");
                assert_eq!(
                    r.body,
                    json!({"error": "workdir not found", "workdir": w}),
                    "{w}"
                );
                assert!(svc.get("w").is_none());
            }
            // a link inside the root, absolute as the chrooted step reads it
            let ev = run_to_end(
                &svc,
                json!({"id": "in", "kind": "sh", "command": "pwd", "workdir": "/srv/in"}),
            )
            .await;
            assert_eq!(ev[0]["line"], "/srv/real", "{ev:?}");
            assert_eq!(ev.last().unwrap()["exit"], json!({"code": 0}));
        });
    }

    #[test]
    fn an_environment_that_would_not_fit_an_exec_is_413_and_a_relative_import_names_no_path() {
        let d = tempfile::tempdir().unwrap();
        let svc = service(d.path(), |_| {});
        let marker = d.path().join("ran");
        let touch = format!("touch {}", marker.display());
        let big = "v".repeat(200_000);
        let many: BTreeMap<String, String> =
            (0..2000).map(|i| (format!("V{i}"), "x".into())).collect();
        let wide: BTreeMap<String, String> = (0..10)
            .map(|i| (format!("V{i}"), "v".repeat(120_000)))
            .collect();
        rt().block_on(async {
            for (body, detail) in [
                (
                    json!({"id": "e", "kind": "sh", "command": touch, "env": {"BIG": big}}),
                    "env \"BIG\" is 200005 bytes, each entry must be under 131072",
                ),
                (
                    json!({"id": "e", "kind": "sh", "command": touch, "env": many}),
                    "2001 environment entries, at most 1024",
                ),
                (
                    json!({"id": "e", "kind": "rhai", "script": "1", "env": wide}),
                    "environment and command are 12001",
                ),
                (
                    json!({"id": "e", "kind": "sh", "command": format!("{touch} {big}")}),
                    "command is",
                ),
            ] {
                let r = svc.start(body.to_string().as_bytes(), "t").unwrap_err();
                assert_eq!(r.status, 413, "{detail}");
                assert_eq!(r.body["error"], "environment too large");
                assert_eq!(r.body["max_env_bytes"], 1 << 20);
                let got = r.body["detail"].as_str().unwrap();
                assert!(got.starts_with(detail), "{got}");
                assert!(svc.get("e").is_none() && !marker.exists());
            }
            // a large value that fits is passed whole
            let ev = run_to_end(
                &svc,
                json!({"id": "fits", "kind": "sh", "command": "echo ${#V}",
                       "env": {"V": "v".repeat(100_000)}}),
            )
            .await;
            assert_eq!(ev[0]["line"], "100000", "{ev:?}");
            // a relative import: a plain message, no server path
            let r = svc
                .start(
                    json!({"id": "i", "kind": "rhai", "script": "import \"lib/util\" as u;"})
                        .to_string()
                        .as_bytes(),
                    "t",
                )
                .unwrap_err();
            assert_eq!(r.status, 422);
            let msg = r.body["message"].as_str().unwrap();
            assert!(
                msg.contains("only the embedded skyhook/... modules can be imported here"),
                "{msg}"
            );
            assert!(!msg.contains("nonexistent"), "{msg}");
        });
    }

    #[test]
    fn a_cancelled_or_timed_out_rhai_step_stops_at_its_next_operation() {
        let d = tempfile::tempdir().unwrap();
        let svc = service(d.path(), |_| {});
        rt().block_on(async {
            let e = svc
                .start(
                    json!({"id": "spin", "kind": "rhai",
                           "script": "print(\"up\"); let x = 0; loop { x += 1; }"})
                    .to_string()
                    .as_bytes(),
                    "t",
                )
                .unwrap();
            let mut rx = svc.stream(e, 0).unwrap();
            assert!(String::from_utf8_lossy(&rx.recv().await.unwrap()).contains("up"));
            assert_eq!(svc.cancel("spin", b"", "t").unwrap().0, 202);
            let ev = collect(rx).await;
            assert_eq!(ev.last().unwrap()["exit"], json!({"error": "cancelled"}));
            let ev = run_to_end(
                &svc,
                json!({"id": "slow", "kind": "rhai", "timeout_s": 0.2,
                       "script": "let x = 0; loop { x += 1; }"}),
            )
            .await;
            assert_eq!(ev.last().unwrap()["exit"], json!({"error": "timeout"}));
        });
    }

    /// A live (not zombie) process.
    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_string()))
            .is_some_and(|r| !r.starts_with('Z'))
    }

    /// The pid written to `path`, waited for (bounded).
    async fn pid_in(path: &Path) -> i32 {
        for _ in 0..500 {
            if let Some(p) = std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                return p;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no pid in {}", path.display());
    }

    #[test]
    fn concurrent_executions_keep_their_background_children_until_their_own_end() {
        let d = tempfile::tempdir().unwrap();
        let root = cgroup::Root::detect().expect("a usable cgroup here");
        let svc = service(d.path(), |c| c.cgroup = Some(root));
        let p = |n: &str| d.path().join(n);
        rt().block_on(async {
            // A: a Rhai step whose command leaves an orphan and a setsid child while it runs.
            let long = format!(
                "(sleep 100 & echo $! > {}); setsid sleep 100 & echo $! > {}; sleep 100",
                p("a").display(),
                p("as").display()
            );
            let a = svc
                .start(
                    json!({"id": "a", "kind": "rhai",
                           "script": format!("run([\"sh\", \"-c\", {long:?}]);")})
                    .to_string()
                    .as_bytes(),
                    "t",
                )
                .unwrap();
            let (orphan, setsid) = (pid_in(&p("a")).await, pid_in(&p("as")).await);
            let rec = svc.state.as_ref().unwrap().get("a").expect("a recorded");
            let cg = rec.cgroup.expect("a's cgroup recorded");
            assert_eq!(a.cgroup.as_deref(), Some(cg.as_path()));
            assert!(cgroup::procs(&cg).contains(&setsid));
            // B (Rhai) and C (sh) each leave a background child and end.
            let bg = |n: &str| format!("(sleep 100 & echo $! > {})", p(n).display());
            let ev = run_to_end(
                &svc,
                json!({"id": "b", "kind": "rhai",
                       "script": format!("run([\"sh\", \"-c\", {:?}]);", bg("b"))}),
            )
            .await;
            assert_eq!(ev.last().unwrap()["exit"], json!({"code": 0}), "{ev:?}");
            let ev = run_to_end(&svc, json!({"id": "c", "kind": "sh", "command": bg("c")})).await;
            assert_eq!(ev.last().unwrap()["exit"], json!({"code": 0}), "{ev:?}");
            let (b, c) = (pid_in(&p("b")).await, pid_in(&p("c")).await);
            assert!(!alive(b) && !alive(c), "B's and C's children end with them");
            assert!(
                alive(orphan) && alive(setsid),
                "A's children outlive B and C"
            );
            // Cancelling A ends both of its children and retires its cgroup and record.
            assert_eq!(svc.cancel("a", br#"{"grace_s": 0.2}"#, "t").unwrap().0, 202);
            let exit = tokio::time::timeout(Duration::from_secs(20), a.ended())
                .await
                .expect("a ends");
            assert_eq!(exit, json!({"error": "cancelled"}));
            assert!(!alive(orphan) && !alive(setsid));
            assert!(!cg.exists(), "{} removed", cg.display());
            assert!(svc.state.as_ref().unwrap().get("a").is_none());
        });
    }

    /// The server's start (`Service::with_audit`, as `serve` builds it) on a state dir
    /// holding `name` made by `make`, on a thread of its own: its audit lines and the ids it
    /// recovered, or a failure when it has not finished within 60 s (a start that blocks).
    fn start_on(make: impl FnOnce(&Path)) -> (Vec<String>, Vec<String>, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let st = d.path().join("state");
        std::fs::create_dir_all(&st).unwrap();
        make(&st);
        let (tx, rx) = std::sync::mpsc::channel();
        let dir = st.clone();
        std::thread::spawn(move || {
            let lines = Arc::new(Mutex::new(Vec::new()));
            let sink = lines.clone();
            let mut cfg = Config::new(Path::new("/"));
            cfg.state_dir = Some(dir);
            let svc = Service::with_audit(
                cfg,
                true,
                Arc::new(move |l: &str| sink.lock().unwrap().push(l.to_string())),
            )
            .unwrap();
            let recovered = svc.recovered();
            let _ = tx.send((lock(&lines).clone(), recovered));
        });
        let (lines, recovered) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the server's start finished (a record must never block it)");
        // The dir stays for the caller's checks until it is dropped with `d`.
        let kept = d.keep();
        (lines, recovered, kept.join("state"))
    }

    /// The process's peak resident size (`VmHWM`), in KiB.
    fn peak_rss_kib() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap()
    }

    /// A FIFO in the state dir (`<id>.json`) is skipped with a warning naming it: opened
    /// without blocking, it is seen not to be a regular file; the start does not hang.
    #[test]
    fn start_skips_a_fifo_record_without_blocking() {
        let (lines, recovered, dir) = start_on(|st| {
            nix::unistd::mkfifo(&st.join("f.json"), nix::sys::stat::Mode::S_IRWXU).unwrap();
            std::os::unix::fs::symlink("/etc/passwd", st.join("l.json")).unwrap();
        });
        assert!(recovered.is_empty());
        let warnings: Vec<Value> = lines
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .map(|v| v["warning"].clone())
            .collect();
        let mut warnings: Vec<String> = warnings
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .collect();
        warnings.sort();
        assert_eq!(
            warnings,
            [
                format!(
                    "state dir record {}: not a regular file (a fifo): skipped",
                    dir.join("f.json").display()
                ),
                format!(
                    "state dir record {}: a symlink: skipped",
                    dir.join("l.json").display()
                ),
            ]
        );
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    /// The warnings of a start's audit lines, sorted.
    fn warnings_of(lines: &[String]) -> Vec<String> {
        let mut w: Vec<String> = lines
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["warning"].clone())
            .filter_map(|w| w.as_str().map(String::from))
            .collect();
        w.sort();
        w
    }

    /// Device nodes, a socket and a directory named `<id>.json` are skipped naming what
    /// they are, never opened for reading: opening a device has effects of its own (a
    /// watchdog starts counting, a tape rewinds), so only its `O_PATH` handle is `fstat`ed.
    /// (Major 240 has no driver: an open of these nodes would be `ENXIO`.)
    #[test]
    fn start_skips_devices_sockets_and_directories_unopened() {
        use nix::sys::stat::{Mode, SFlag, makedev, mknod};
        let (lines, recovered, dir) = start_on(|st| {
            mknod(
                &st.join("c.json"),
                SFlag::S_IFCHR,
                Mode::S_IRUSR,
                makedev(240, 0),
            )
            .unwrap();
            mknod(
                &st.join("b.json"),
                SFlag::S_IFBLK,
                Mode::S_IRUSR,
                makedev(240, 1),
            )
            .unwrap();
            std::os::unix::net::UnixListener::bind(st.join("s.json")).unwrap();
            std::fs::create_dir(st.join("d.json")).unwrap();
        });
        assert!(recovered.is_empty());
        let at = |n: &str, what: &str| {
            format!(
                "state dir record {}: not a regular file ({what}): skipped",
                dir.join(n).display()
            )
        };
        assert_eq!(
            warnings_of(&lines),
            [
                at("b.json", "a block device"),
                at("c.json", "a character device"),
                at("d.json", "a directory"),
                at("s.json", "a socket"),
            ]
        );
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    /// A record's cgroup is a server's (`<cgroup>/skyhook-serve/<name>`) on a cgroup
    /// filesystem, else the record is skipped with a warning: a plain directory with a FIFO
    /// as its `cgroup.procs` does not block the start, and its list of pids (any process of
    /// the machine) is never signalled; a cgroup not of a server is not either.
    #[test]
    fn start_skips_a_record_whose_cgroup_is_not_a_servers() {
        let me = std::process::id() as i32;
        let (_, start) = proc_stat(me).unwrap();
        let fake = tempfile::tempdir().unwrap();
        let cg = fake.path().join("skyhook-serve/x.1.0");
        std::fs::create_dir_all(&cg).unwrap();
        nix::unistd::mkfifo(&cg.join("cgroup.procs"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let (lines, recovered, dir) = start_on(|st| {
            for (id, cgroup) in [
                ("fifo", cg.to_string_lossy().into_owned()),
                ("other", "/sys/fs/cgroup/system.slice".to_string()),
                (
                    "up",
                    format!("{}/skyhook-serve/../x.1.0", fake.path().display()),
                ),
            ] {
                let rec = json!({"pid": me, "start": start, "cgroup": cgroup, "engine": "ci"});
                std::fs::write(st.join(format!("{id}.json")), rec.to_string()).unwrap();
            }
        });
        assert!(recovered.is_empty(), "{recovered:?}");
        let at = |id: &str, why: String| {
            format!(
                "state dir record {}: {why}: skipped",
                dir.join(format!("{id}.json")).display()
            )
        };
        assert_eq!(
            warnings_of(&lines),
            [
                at(
                    "fifo",
                    format!("its cgroup {} is not on a cgroup filesystem", cg.display())
                ),
                at(
                    "other",
                    "its cgroup /sys/fs/cgroup/system.slice is not a server's (<cgroup>/skyhook-serve/<name>)".into()
                ),
                at(
                    "up",
                    format!(
                        "its cgroup {}/skyhook-serve/../x.1.0 is not a server's (<cgroup>/skyhook-serve/<name>)",
                        fake.path().display()
                    )
                ),
            ]
        );
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    /// A 3 GiB sparse record is refused by its size before any byte is read (the cap is
    /// `state::MAX_RECORD_BYTES`), with a warning naming it and both sizes;
    /// the process's peak memory does not grow by the file's size.
    #[test]
    fn start_refuses_an_oversized_record_unread() {
        let before = peak_rss_kib();
        let (lines, recovered, dir) = start_on(|st| {
            let f = std::fs::File::create(st.join("big.json")).unwrap();
            f.set_len(3 << 30).unwrap();
        });
        let grown_mib = (peak_rss_kib() - before) / 1024;
        assert!(grown_mib < 512, "peak RSS grew by {grown_mib} MiB");
        assert!(recovered.is_empty());
        let warnings: Vec<String> = lines
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["warning"].clone())
            .map(|w| w.as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(
            warnings,
            [format!(
                "state dir record {}: 3221225472 bytes, more than the limit of 65536 bytes: skipped",
                dir.join("big.json").display()
            )]
        );
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }
}
