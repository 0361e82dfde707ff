//! Running an admitted execution: its task and its `timeout_s` timer ([`launch`]), its
//! step run through `step/` (the [`LoneRunner`], from one [`StepInvocation`] made by
//! [`invocation`] around the one [`StepSpec`] of [`step_spec`]) with its output turned into
//! line events, its exit object derived from the one [`StepResult`] ([`exit_of`]), and its
//! cancel ([`terminate`]: TERM to the group, the grace, KILL). What a run needs of the
//! service (its settings, the event rings, the state dir, the audit line, the execution's
//! end) is the [`Ledger`] the service implements.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::config::Config;
use super::event::{Body, Extra, Lines};
use super::execution::{Execution, lock};
use super::request::Kind;
use super::state::{ProcRecord, StateDir, proc_stat};
use crate::host::ExecMode;
use crate::process::CancelReason;
use crate::process::cgroup;
use crate::script::{CompiledScript, ScriptEngine};
use crate::step::{
    LoneOutput, LoneRunner, SecretSource, StepInvocation, StepProgram, StepResult, StepRunner,
    StepSpec,
};

/// Everything a start needs, resolved before anything runs.
pub(super) struct Prepared {
    /// What runs.
    pub(super) program: Program,
    /// The step's environment: `PATH`, the request's `env`, the secrets
    /// ([`super::request::environment`]).
    pub(super) env: Vec<(String, String)>,
    /// The secret coordinates a Rhai `secret()` may answer, with their values.
    pub(super) declared: Vec<(String, String, String)>,
}

/// What an execution runs.
pub(super) enum Program {
    /// A sh command, run by the service's shell in `workdir` (resolved inside the root: the
    /// directory as the step sees it).
    Sh { command: String, workdir: PathBuf },
    /// A compiled Rhai script on its executor.
    Rhai {
        compiled: CompiledScript,
        exec: ExecMode,
    },
}

/// What an admitted execution does: a step, or a read-only package plan
/// ([`super::plan`]), which is no step (it plans every mode of a package).
pub(super) enum Work {
    /// A `sh` or `rhai` step.
    Step(Prepared),
    /// A `package_plan`.
    Plan(Box<super::plan::PlanJob>),
}

/// What a run needs of the service ([`super::exec::Service`] implements it).
pub(super) trait Ledger: Send + Sync + 'static {
    /// The settings (`shell`, `root`, `default_grace`).
    fn config(&self) -> &Config;
    /// The script engine Rhai executions run on.
    fn engine(&self) -> &Arc<ScriptEngine>;
    /// The script engine package plans run on (`--plan-max-operations`).
    fn plan_engine(&self) -> &Arc<ScriptEngine>;
    /// The state dir, where a running execution's process is recorded.
    fn state(&self) -> Option<&StateDir>;
    /// Append one event to `exec`'s ring.
    fn emit(&self, exec: &Execution, body: &Body);
    /// Write one audit line of `fields`.
    fn audit(&self, fields: Value);
    /// `exec` ended with `exit` (the exit event's `extra` fields): its exit event and the
    /// rest of its end.
    fn finish(&self, exec: &Arc<Execution>, exit: Value, extra: Extra);
}

/// Run the admitted `exec` as a task: `prepared`, then its end ([`Ledger::finish`]); with a
/// `timeout`, a timer that terminates it then (exit `{"error": "timeout"}`).
pub(super) fn launch<L: Ledger>(
    svc: &Arc<L>,
    exec: &Arc<Execution>,
    work: Work,
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
        let (exit, extra) = match work {
            Work::Step(prepared) => run(&svc, &e, prepared).await,
            Work::Plan(job) => run_plan(&svc, &e, *job).await,
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

/// The one [`StepSpec`] of an execution: named and identified by its id, on `mode`'s
/// executor (a check in mode `apply-check`, else `apply`), with its environment, its
/// commands chrooted unless the root is `/`, only the declared secrets, its redactor,
/// cancel token and cgroup, and a week as the script's limit (`timeout_s` is the
/// service's own timer).
fn step_spec(
    exec: &Execution,
    mode: ExecMode,
    env: Vec<(String, String)>,
    declared: Vec<(String, String, String)>,
    chrooted: bool,
) -> StepSpec {
    let step_mode = if mode == ExecMode::Check {
        "apply-check"
    } else {
        "apply"
    };
    StepSpec::builder(step_mode, mode == ExecMode::Apply)
        .step(exec.id.clone(), Vec::new())
        .resource_id(exec.id.clone())
        .env(env)
        // serve's steps have no node order.
        .node_order(None)
        .commands_chrooted(chrooted)
        .secrets(SecretSource::Declared(declared))
        .redactor(exec.redactor.clone())
        .cancel(exec.cancel.clone())
        .cgroup(exec.cgroup.clone())
        .script_timeout(Duration::from_secs(7 * 86400))
        .build()
}

/// The step `prepared` is, for `exec`: a sh command as a process step (`cfg.shell`'s first
/// word the program, the rest and the command its arguments, chrooted into `cfg.root`
/// unless it is `/`) on the Apply executor; a Rhai script as a script step on its own.
fn invocation(cfg: &Config, exec: &Execution, prepared: Prepared) -> StepInvocation {
    let chrooted = !is_slash(&cfg.root);
    let Prepared {
        program,
        env,
        declared,
    } = prepared;
    let (path, program, args, mode) = match program {
        Program::Sh { command, workdir } => {
            let shell = PathBuf::from(&cfg.shell[0]);
            let mut args = cfg.shell[1..].to_vec();
            args.push(command);
            let program = StepProgram::Process {
                program: shell.clone(),
                cwd: workdir,
                chroot: chrooted.then(|| cfg.root.clone()),
                shown: shell,
            };
            (exec.id.clone(), program, args, ExecMode::Apply)
        }
        Program::Rhai { compiled, exec } => (
            compiled.file().to_string(),
            StepProgram::Script(compiled),
            Vec::new(),
            exec,
        ),
    };
    StepInvocation {
        path,
        program,
        args,
        env: env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect(),
        spec: step_spec(exec, mode, env, declared, chrooted),
        logs: None,
        preamble: None,
        keep_fds: Vec::new(),
    }
}

/// Run `exec`'s step through `step/` and make its exit object and the exit event's extra
/// fields (a Rhai step's `report` and `rendered`, after its plan events).
async fn run<L: Ledger>(svc: &Arc<L>, exec: &Arc<Execution>, prepared: Prepared) -> (Value, Extra) {
    if exec.kind == Kind::Rhai {
        record_server(svc, exec);
    }
    let output = Arc::new(ExecOutput {
        svc: svc.clone(),
        exec: exec.clone(),
        streams: Mutex::new((Lines::new("stdout"), Lines::new("stderr"))),
    });
    let runner = LoneRunner {
        engine: svc.engine().clone(),
        root: svc.config().root.clone(),
        output: output.clone(),
        // Our own timer sends the SIGKILL after the grace a cancel asks for; this is the
        // upper bound.
        term_grace: Duration::from_secs(3600),
    };
    let result = runner.run(invocation(svc.config(), exec, prepared)).await;
    output.finish();
    let mut extra = Map::new();
    if exec.kind == Kind::Rhai && result.ran {
        for p in plan_events(&result, exec) {
            svc.emit(exec, &Body::Plan(p));
        }
        let r = &exec.redactor;
        extra.insert("report".into(), result.to_json(r));
        extra.insert("rendered".into(), result.report.render_text(r).into());
    }
    (exit_of(exec, &result), extra.into())
}

/// Plan `job` read-only ([`super::plan::run`]), its events into `exec`'s ring; the exit
/// `{"error": "timeout"}` after its `timeout_s`.
async fn run_plan<L: Ledger>(
    svc: &Arc<L>,
    exec: &Arc<Execution>,
    job: super::plan::PlanJob,
) -> (Value, Extra) {
    let (s, x) = (svc.clone(), exec.clone());
    let emit: super::plan::Emit = Arc::new(move |b| s.emit(&x, &b));
    let root = svc.config().root.clone();
    let engine = svc.plan_engine().clone();
    let (exit, extra) = super::plan::run(job, root, engine, emit, exec.cancel.clone()).await;
    if exec.timed_out.load(Ordering::SeqCst) {
        return (json!({"error": "timeout"}), extra);
    }
    (exit, extra)
}

/// A Rhai execution's script runs in this process: the state dir's record names it (its
/// pid is no group of the execution's) and the cgroup, whose members a restarted server
/// can still cancel.
fn record_server<L: Ledger>(svc: &Arc<L>, exec: &Execution) {
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
}

/// A Rhai step's plan events: its changes (`"drift": true` in a check), then its actions,
/// redacted.
fn plan_events(result: &StepResult, exec: &Execution) -> Vec<Value> {
    let r = &exec.redactor;
    let drift = result.report.mode == ExecMode::Check;
    let mut events = Vec::new();
    for c in &result.report.changes {
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
        events.push(p);
    }
    for a in &result.report.actions {
        events.push(json!({"action": a.kind, "path": r.redact(&a.target),
                           "summary": r.redact(&a.summary)}));
    }
    events
}

/// The exit object of `exec` from its step's `result`: `{"error": "timeout"}` after its
/// `timeout_s`; `{"error": ...}` for a step that never ran (`spawn failed: ...`,
/// `cancelled`, `cannot open host root: ...`); for a sh step `{"signal": N}` when a signal
/// ended it, else `{"code": N}`; for a Rhai step `{"error": "cancelled"}` when a cancel
/// stopped it, else `{"code": N}` ([`StepResult::status`]) with the script's `error` when
/// it failed. Every text redacted.
fn exit_of(exec: &Execution, result: &StepResult) -> Value {
    let r = &exec.redactor;
    let error = result.error.as_deref().map(|e| r.redact(e).into_owned());
    if exec.timed_out.load(Ordering::SeqCst) {
        return json!({"error": "timeout"});
    }
    if !result.ran {
        return json!({ "error": error.unwrap_or_default() });
    }
    match (exec.kind, error) {
        (Kind::Sh, _) if result.code < 0 => json!({"signal": -result.code}),
        (Kind::Sh, _) => json!({"code": result.code}),
        // A package plan is no step (`run_plan`); it would end as an in-process one.
        (Kind::Rhai | Kind::PackagePlan, Some(_)) if exec.cancel.is_aborted() => {
            json!({"error": "cancelled"})
        }
        (Kind::Rhai | Kind::PackagePlan, Some(e)) => {
            json!({"code": result.status(), "error": e})
        }
        (Kind::Rhai | Kind::PackagePlan, None) => json!({"code": result.status()}),
    }
}

/// True when `p` is the filesystem root (steps there are not chrooted).
fn is_slash(p: &Path) -> bool {
    std::fs::canonicalize(p).is_ok_and(|c| c == Path::new("/"))
}

/// Output of an execution (a process's reads; a script's `print`, `debug`, `log::` and
/// error): redacted, split into line events; a process's pid recorded.
struct ExecOutput<L> {
    svc: Arc<L>,
    exec: Arc<Execution>,
    streams: Mutex<(Lines, Lines)>,
}

impl<L: Ledger> ExecOutput<L> {
    /// Both streams ended: their held-back bytes and last lines as events.
    fn finish(&self) {
        let mut s = lock(&self.streams);
        let (out, err) = &mut *s;
        for l in [out, err] {
            l.finish(&mut |b| self.svc.emit(&self.exec, &b));
        }
    }
}

impl<L: Ledger> crate::script::ScriptOutput for ExecOutput<L> {
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

impl<L: Ledger> LoneOutput for ExecOutput<L> {
    /// The process record (pid == pgid, its start time, the cgroup), kept for a cancel's
    /// SIGKILL and written to the state dir for a cancel after a restart.
    fn spawned(&self, pid: i32) {
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
}
