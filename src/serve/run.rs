//! Running an admitted execution: its task and its `timeout_s` timer ([`launch`]), the run
//! of a sh command or a Rhai script with its output turned into line events and its exit
//! object, and its cancel ([`terminate`]: TERM to the group, the grace, KILL). What a run
//! needs of the service (its settings, the event rings, the state dir, the audit line, the
//! execution's end) is the [`Ledger`] the service implements.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::config::Config;
use super::event::{Body, Lines};
use super::execution::{Execution, lock};
use super::state::{ProcRecord, StateDir, proc_stat};
use crate::host::ExecMode;
use crate::process::cgroup;
use crate::process::{CancelReason, Outcome, Status};
use crate::script::{CompiledScript, ScriptEngine};

/// Everything a start needs, resolved before anything runs.
pub(super) enum Prepared {
    /// A sh command with its environment, in `workdir` (resolved inside the root: the
    /// directory as the step sees it).
    Sh {
        command: String,
        env: Vec<(String, String)>,
        workdir: PathBuf,
    },
    /// A compiled Rhai script on its executor, with its environment and the secret
    /// coordinates `secret()` may answer.
    Rhai {
        compiled: CompiledScript,
        exec: ExecMode,
        env: Vec<(String, String)>,
        declared: Vec<(String, String, String)>,
    },
}

/// What a run needs of the service ([`super::exec::Service`] implements it).
pub(super) trait Ledger: Send + Sync + 'static {
    /// The settings (`shell`, `root`, `default_grace`).
    fn config(&self) -> &Config;
    /// The script engine Rhai executions run on.
    fn engine(&self) -> &ScriptEngine;
    /// The state dir, where a running execution's process is recorded.
    fn state(&self) -> Option<&StateDir>;
    /// Append one event to `exec`'s ring.
    fn emit(&self, exec: &Execution, body: &Body);
    /// Write one audit line of `fields`.
    fn audit(&self, fields: Value);
    /// `exec` ended with `exit` (the exit event's `extra` fields): its exit event and the
    /// rest of its end.
    fn finish(&self, exec: &Arc<Execution>, exit: Value, extra: Map<String, Value>);
}

/// Run the admitted `exec` as a task: `prepared`, then its end ([`Ledger::finish`]); with a
/// `timeout`, a timer that terminates it then (exit `{"error": "timeout"}`).
pub(super) fn launch<L: Ledger>(
    svc: &Arc<L>,
    exec: &Arc<Execution>,
    prepared: Prepared,
    timeout: Option<Duration>,
) {
    if let Some(t) = timeout {
        let (svc, e) = (Arc::downgrade(svc), Arc::downgrade(exec));
        tokio::spawn(async move {
            tokio::time::sleep(t).await;
            if let (Some(svc), Some(e)) = (svc.upgrade(), e.upgrade())
                && e.exit().is_none()
            {
                e.timed_out.store(true, Ordering::SeqCst);
                terminate(
                    &e,
                    CancelReason::Deadline {
                        what: "timeout_s".into(),
                        secs: t.as_secs_f64(),
                    },
                    svc.config().default_grace,
                );
            }
        });
    }
    let (svc, e) = (svc.clone(), exec.clone());
    tokio::spawn(async move {
        let (exit, extra) = match prepared {
            Prepared::Sh {
                command,
                env,
                workdir,
            } => run_sh(&svc, &e, command, env, workdir).await,
            Prepared::Rhai {
                compiled,
                exec,
                env,
                declared,
            } => run_rhai(&svc, &e, compiled, exec, env, declared).await,
        };
        svc.finish(&e, exit, extra);
    });
}

/// Abort `exec` (TERM to its group now; a Rhai step stops at its next operation) and
/// SIGKILL its group after `grace` if it still runs.
pub(super) fn terminate(exec: &Arc<Execution>, reason: CancelReason, grace: Duration) {
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

async fn run_sh<L: Ledger>(
    svc: &Arc<L>,
    exec: &Arc<Execution>,
    command: String,
    env: Vec<(String, String)>,
    workdir: PathBuf,
) -> (Value, Map<String, Value>) {
    let cfg = svc.config();
    let shell = &cfg.shell;
    let mut args: Vec<OsString> = shell[1..].iter().map(OsString::from).collect();
    args.push(command.into());
    let spec = crate::process::Spec {
        program: PathBuf::from(&shell[0]),
        args,
        env: env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect(),
        cwd: workdir,
        chroot: (!is_slash(&cfg.root)).then(|| cfg.root.clone()),
        stdin: None,
        keep_fds: Vec::new(),
        cgroup: exec.cgroup.clone(),
        mount_ns: None,
    };
    let sink = ShSink {
        svc: svc.clone(),
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

async fn run_rhai<L: Ledger>(
    svc: &Arc<L>,
    exec: &Arc<Execution>,
    compiled: CompiledScript,
    mode: ExecMode,
    env: Vec<(String, String)>,
    declared: Vec<(String, String, String)>,
) -> (Value, Map<String, Value>) {
    // The script runs in this process: the record names it (its pid is no group of the
    // execution's) and the cgroup, whose members a restarted server can still cancel.
    if let (Some(dir), Some(state)) = (&exec.cgroup, svc.state())
        && let Some((_, start)) = proc_stat(std::process::id() as i32)
    {
        let rec = ProcRecord {
            pid: std::process::id() as i32,
            start,
            cgroup: Some(dir.clone()),
            engine: exec.engine.clone(),
        };
        if let Err(e) = state.record(&exec.id, &rec) {
            svc.audit(json!({"id": exec.id, "warning":
                    format!("cannot record the execution in the state dir: {e}")}));
        }
    }
    let out = Arc::new(RhaiSink {
        svc: svc.clone(),
        exec: exec.clone(),
        streams: Mutex::new((Lines::new("stdout"), Lines::new("stderr"))),
    });
    let svc2 = svc.clone();
    let e = exec.clone();
    let o2 = out.clone();
    let ran = tokio::task::spawn_blocking(move || {
        let svc = svc2;
        let root = crate::host::root::HostRoot::open(&svc.config().root)
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
            commands_chrooted: !is_slash(&svc.config().root),
            secrets: crate::step::SecretSource::Declared(declared),
            redactor: Some(e.redactor.clone()),
            cancel: e.cancel.clone(),
            cgroup: e.cgroup.clone(),
            script_timeout: Some(Duration::from_secs(7 * 86400)),
            ..crate::step::StepSpec::default()
        };
        let api = spec.session(root);
        let o = crate::step::ScriptStep {
            engine: svc.engine(),
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
        svc.emit(exec, &Body::Plan(p));
    }
    for a in &o.report.actions {
        let p = json!({"action": a.kind, "path": r.redact(&a.target),
                           "summary": r.redact(&a.summary)});
        svc.emit(exec, &Body::Plan(p));
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

fn status_json(s: Option<Status>) -> Value {
    match s {
        Some(Status::Code(c)) => json!({"code": c}),
        Some(Status::Signal(s)) => json!({"signal": s}),
        None => json!({"error": "cancelled"}),
    }
}

/// True when `p` is the filesystem root (steps there are not chrooted).
fn is_slash(p: &Path) -> bool {
    std::fs::canonicalize(p).is_ok_and(|c| c == Path::new("/"))
}

/// Output of a sh execution: redacted, split into line events.
struct ShSink<L> {
    svc: Arc<L>,
    exec: Arc<Execution>,
    out: Lines,
    err: Lines,
}

impl<L: Ledger> ShSink<L> {
    fn finish(&mut self) {
        let (svc, exec) = (&self.svc, &self.exec);
        for l in [&mut self.out, &mut self.err] {
            l.finish(&mut |b| svc.emit(exec, &b));
        }
    }
}

impl<L: Ledger> crate::process::Sink for ShSink<L> {
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
        if let Some(s) = self.svc.state()
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
struct RhaiSink<L> {
    svc: Arc<L>,
    exec: Arc<Execution>,
    streams: Mutex<(Lines, Lines)>,
}

impl<L: Ledger> RhaiSink<L> {
    fn finish(&self) {
        let mut s = lock(&self.streams);
        let (out, err) = &mut *s;
        for l in [out, err] {
            l.finish(&mut |b| self.svc.emit(&self.exec, &b));
        }
    }
}

impl<L: Ledger> crate::script::ScriptOutput for RhaiSink<L> {
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
