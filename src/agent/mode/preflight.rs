//! The preflight of a mode: validate, then plan, before `START` (the agent) or before
//! `skyhook-run --package DIR --apply` copies anything into the root.
//!
//! 1. **Validate.** Every `.rhai` step of the mode (and the package modules it imports) goes
//!    through the static checker of `skyhook-run check` ([`Checker`]); its errors (unknown
//!    functions, modules, option keys, arities) fail the preflight, each printed as
//!    `file:line:col: error: message` of the script as the site names it (the package
//!    directory for `skyhook-run`, the copy dir's host path for the agent).
//!    The check runs on tokio's blocking pool beside the plan's set-up (step 2 up to its
//!    first script), which waits for its verdict: nothing is planned after a failed check.
//! 2. **Plan** (run modes only: `apply`, `config`, `upgrade`, `uninstall`, `post-interrupt`).
//!    The same [`ModeLoop`] as the dry run drives the dry run's planning of each script
//!    (`PreflightRunner`, on tokio's blocking pool) over one host session on the Plan
//!    executor: the `root_dir/` overlay first (not in `uninstall`), then each step
//!    whose flag does not skip it, so later steps see the planned changes of earlier ones.
//!    What only running finds fails the preflight: a missing configMap, an unparsable
//!    configMap or host file, a wrong argument type at a call the run reaches, an interrupt
//!    the Skyhook CR does not declare, `fail()`, an unset `env:` variable.
//!
//! A bash (process) step cannot be planned and nothing is known of what it changes, so the
//! plan stops at the first process step the mode would run: the script steps before it are
//! planned, the ones after it are validated only. (Planning them as if the bash step had
//! changed nothing would refuse packages whose bash step creates what a later script step
//! edits.) A command a script step runs is not run by the plan either: the first later
//! call that reads what it may have touched (a path it names, a missing path) is unknown
//! and ends that step's plan, which is not an error
//! ([`crate::host::HostError::PlanUnknown`]); so is a later call's failure that depends on
//! the host after any command the plan did not run, package and service actions included
//! ([`crate::host::HostError::PlanUnknownFailure`]); and after a package install, removal
//! or upgrade or a command it did not run, a query of package or service state the plan
//! did not plan itself is not run and is unknown
//! ([`crate::host::HostError::PlanUnknownQuery`]). `*-check` modes are validated only: a check
//! changes nothing, its failures are its results.
//!
//! A stop of the run (SIGTERM) aborts the plan at once: the script being planned and any
//! query it runs end, no further step is planned, and the caller ends the run before
//! anything is written. The plan's memory is bounded (the overlay spills planned content
//! past 64 MiB to a temporary file, and no diff is rendered: nobody reads the plan's report,
//! [`crate::host::Host::plan_without_diffs`]). Its cost is logged (`SKYHOOK_LOG=skyhook=info`:
//! `preflight ... check_us total_us query_us cpu_us query_cpu_us`: `query_us` the wall time
//! its queries took, spawn to reap, `query_cpu_us` their CPU) and measured by
//! `benches/preflight_cost.sh`.
//!
//! Nothing is written: flags and history are read, never written; no log file is opened;
//! the Plan executor changes nothing. The preflight runs before the package lock is taken.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::host::Host;
use crate::host::root::HostRoot;
use crate::package::{Mode, Package};
use crate::process::{Cancel, CancelReason};
use crate::script::ScriptOutput;
use crate::script::compile::CompiledScript;
use crate::script::engine::ScriptEngine;
use crate::script::host_api::HostApi;
use crate::script::lint::{Checker, Diagnostic, Severity};
use crate::step::run::{End, ScriptStep};
use crate::step::{SecretSource, StepInvocation, StepProgram, StepResult, StepRunner, StepSpec};

use crate::agent::error::AgentError;
use crate::agent::site::{PackageSite, StepScripts};
use crate::mode::Console;
use crate::mode::Declarations;
use crate::mode::Settings;
use crate::mode::env::{EnvBuilder, lossy_env};
use crate::mode::{Decision, ModeLoop, PackageMode};

/// One mode's preflight (see the module docs).
pub struct Preflight<'a> {
    /// The mode.
    pub mode: Mode,
    /// The package.
    pub package: &'a Package,
    /// Where its files are (scripts, configMaps, `root_dir/`).
    pub site: &'a PackageSite<'a>,
    /// The run's settings (environment, state root, script timeout).
    pub settings: &'a Settings,
    /// The mode's compiled scripts, by step index.
    pub scripts: &'a StepScripts,
    /// The engine the scripts were compiled with (shared with the plan's script threads).
    pub engine: &'a Arc<ScriptEngine>,
    /// The host root: flags and history are read there, the plan session runs over it.
    pub root: &'a HostRoot,
    /// `SKYHOOK_RESOURCE_ID`.
    pub resource_id: &'a str,
    /// What the package's Skyhook CR declares, for the interrupts steps request.
    pub declarations: Declarations,
    /// The run's token: a stop (SIGTERM) aborts the plan at once (it changes nothing, so
    /// there is nothing to let finish); the caller then ends the run before anything is
    /// written.
    pub cancel: &'a Cancel,
}

/// Why a preflight failed: one line per error, `file:line:col: error: message` for the
/// static check, `<step path>: message` or the script's `file:line:col: message` for the
/// plan; and the first step with an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreflightFailure {
    /// The error lines, in step order.
    pub errors: Vec<String>,
    /// `<path> <args>` of the first step with an error (as a `FAILED:` line shows it).
    pub step: String,
    /// That step's exit code in the plan (1 for an error of the static check).
    pub code: i32,
}

impl Preflight<'_> {
    /// Validate, then (run modes) plan. `Ok(None)`: the mode may start; `Ok(Some(_))`: it
    /// must not (nothing was changed).
    ///
    /// The static check runs on tokio's blocking pool while the plan sets up (its session,
    /// the plans of the package copy and of `root_dir/`, the flags, the host modules and its
    /// script thread); no script is planned before the check passed, and the check's failure
    /// is the outcome whatever the plan found, as when the two ran one after the other.
    ///
    /// # Errors
    /// A script cannot be re-read for the check; flags or history cannot be read; the root
    /// cannot be reopened for the plan session.
    pub async fn run(&self) -> Result<Option<PreflightFailure>, AgentError> {
        let started = std::time::Instant::now();
        let cpu = Cpu::now();
        let commands = crate::process::commands_wall_us();
        let check = self.start_check(started)?;
        // Let a signal that arrived meanwhile stop the token before deciding to plan.
        tokio::task::yield_now().await;
        let planned =
            if !self.mode.is_check() && self.mode != Mode::Interrupt && !self.cancel.is_stopped() {
                Some(self.plan_gated(Some(check.verdict.clone())).await)
            } else {
                None
            };
        let (failure, checked) = check.finish(self).await;
        let outcome = match failure {
            Some(f) => Some(f),
            None => planned.transpose()?.flatten(),
        };
        // What the preflight costs, for measuring it against the apply (SKYHOOK_LOG=info):
        // its wall time and CPU, and the parts of each its queries (the commands it ran) took.
        let cpu = Cpu::now().since(&cpu);
        tracing::info!(
            mode = self.mode.as_str(),
            check_us = checked.as_micros(),
            total_us = started.elapsed().as_micros(),
            query_us = crate::process::commands_wall_us().saturating_sub(commands),
            cpu_us = cpu.own + cpu.children,
            query_cpu_us = cpu.children,
            ok = outcome.is_none(),
            "preflight"
        );
        Ok(outcome)
    }

    /// The static check of every script of the mode and the package modules they import
    /// (each finding once, in step order): `Some` when it found errors.
    ///
    /// # Errors
    /// A script cannot be read again.
    pub fn check(&self) -> Result<Option<PreflightFailure>, AgentError> {
        let jobs = self.check_jobs()?;
        if jobs.is_empty() {
            return Ok(None);
        }
        let (found, first) = check_scripts(self.engine, &jobs);
        Ok(self.check_failure(found, first))
    }

    /// The check's inputs: `(step index, script, its source)` in step order (the sources
    /// read again from the site).
    fn check_jobs(&self) -> Result<Vec<(usize, CompiledScript, String)>, AgentError> {
        let mut indexes: Vec<usize> = self.scripts.keys().copied().collect();
        indexes.sort_unstable();
        indexes
            .into_iter()
            .map(|i| {
                let script = self.scripts[&i].clone();
                let source = self.site.read_script(Path::new(script.file()))?;
                Ok((i, script, source))
            })
            .collect()
    }

    /// [`Preflight::check`] started on tokio's blocking pool (sources read here first, so a
    /// read error ends the preflight before anything runs); its verdict is published for the
    /// plan's first script ([`CheckTask`]).
    ///
    /// # Errors
    /// A script cannot be read again.
    fn start_check(&self, started: std::time::Instant) -> Result<CheckTask, AgentError> {
        let (passed, verdict) = tokio::sync::watch::channel(None);
        let jobs = self.check_jobs()?;
        if jobs.is_empty() {
            // Nothing to check: no checker built (its tables cost more than a bash start-up).
            let _ = passed.send(Some(true));
            return Ok(CheckTask {
                handle: None,
                verdict,
            });
        }
        let engine = self.engine.clone();
        let span = tracing::Span::current();
        let handle = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let (found, first) = check_scripts(&engine, &jobs);
            let _ = passed.send(Some(first.is_none()));
            (found, first, started.elapsed())
        });
        Ok(CheckTask {
            handle: Some(handle),
            verdict,
        })
    }

    /// The failure of a check that found `found` (first at step `first`).
    fn check_failure(
        &self,
        found: Vec<Diagnostic>,
        first: Option<usize>,
    ) -> Option<PreflightFailure> {
        let steps = self.package.steps(self.mode);
        first.map(|i| PreflightFailure {
            errors: found.iter().map(ToString::to_string).collect(),
            step: command_line(&steps[i].path, &steps[i].arguments),
            code: 1,
        })
    }

    /// The plan pass: `Some` with the error lines of the failed steps.
    ///
    /// # Errors
    /// Flags, history or the root cannot be read.
    pub async fn plan(&self) -> Result<Option<PreflightFailure>, AgentError> {
        self.plan_gated(None).await
    }

    /// [`Preflight::plan`]; with `verdict`, each script waits for the static check to pass
    /// and is not planned when it failed (the check's failure is then the outcome).
    async fn plan_gated(
        &self,
        verdict: Option<Verdict>,
    ) -> Result<Option<PreflightFailure>, AgentError> {
        // The host modules and the script thread the plan's first script needs, made while
        // the check runs and the session is set up (the apply reuses both).
        let warm = (!self.scripts.is_empty()).then(|| {
            tokio::task::spawn_blocking(|| {
                let _ = crate::step::on_script_thread(crate::script::host_api::prepare_modules);
            })
        });
        let env = lossy_env(&EnvBuilder::from_agent(self.settings).into_vec());
        // Aborted when the run is stopped: ends the script being planned (its evaluation and
        // any query it is running) and starts no further step.
        let plan_cancel = self.cancel.child();
        let spec = StepSpec::builder("apply", false)
            .env(env)
            .configmaps(Some(self.site.shown(&self.site.configmaps_dir())))
            .resource_id(self.resource_id)
            .secrets(SecretSource::FromEnv)
            .cancel(plan_cancel.clone())
            .build();
        let api = spec.session(self.root.try_clone()?);
        // Nobody reads the plan's report: its diffs are not rendered.
        api.with_host(crate::host::Host::plan_without_diffs);
        let output: Arc<dyn ScriptOutput> = api.redacting_output(Arc::new(Discard));
        let mut errors = Vec::new();
        if let Some(Err(message)) = api.with_host(|h| plan_package_copy(h, self.site)) {
            let _ = api.finish();
            return Ok(Some(PreflightFailure {
                errors: vec![format!("package copy: {message}")],
                step: "skyhook_dir/".into(),
                code: 1,
            }));
        }
        if self.mode != Mode::Uninstall {
            let src = self.site.dir().join("root_dir");
            if self.site.is_dir(&src)? {
                let planned = api.with_host(|h| {
                    let r = plan_overlay(h, self.site, &src, Path::new("/"));
                    let (_, deferred) = h.finish_step_with_report();
                    r.and(deferred.map_err(|e| crate::script::host_api::error_chain(&e)))
                });
                if let Some(Err(message)) = planned {
                    let _ = api.finish();
                    return Ok(Some(PreflightFailure {
                        errors: vec![format!("root_dir overlay: {message}")],
                        step: "root_dir/".into(),
                        code: 1,
                    }));
                }
            }
        }
        let runner = PreflightRunner {
            engine: self.engine.clone(),
            api: api.clone(),
            output,
            past_process: AtomicBool::new(false),
            verdict,
            warm: std::sync::Mutex::new(warm),
        };
        let console = Console::null();
        let mode_loop = ModeLoop::new(
            PackageMode {
                mode: self.mode,
                package: self.package,
                site: self.site,
                scripts: self.scripts,
                resource_id: self.resource_id,
                declarations: self.declarations.clone(),
            },
            self.settings,
            self.root,
            &runner,
            &console,
            &plan_cancel,
            None,
        );
        // The scripts run on the blocking pool (PreflightRunner), so this task and the signal
        // handler's keep running: a stop of the run aborts the plan.
        let abort_on_stop = async {
            self.cancel.stopped().await;
            plan_cancel.abort(self.cancel.reason().unwrap_or(CancelReason::Parent));
            std::future::pending::<()>().await;
        };
        let outcome = tokio::select! {
            outcome = mode_loop.run() => outcome?,
            () = abort_on_stop => unreachable!("pending never resolves"),
        };
        let _ = api.finish();
        let steps = self.package.steps(self.mode);
        let mut first = None;
        let mut past_process = false;
        for record in outcome.steps {
            let step = &steps[record.index];
            let script = self.scripts.contains_key(&record.index);
            let error = match record.decision {
                Decision::Ran(r) if !r.ok => Some((
                    r.error.unwrap_or_else(|| {
                        format!(
                            "{}: failed in the plan with exit code {}",
                            step.path, r.code
                        )
                    }),
                    r.code,
                )),
                // An unset `env:` variable of a process step, or of any step after one, is
                // the agent's to report when it gets there (bash steps keep their behaviour).
                Decision::MissingEnv { message } if script && !past_process => Some((message, 1)),
                Decision::Ran(_) | Decision::MissingEnv { .. } => None,
                Decision::Skipped { .. } | Decision::NotRun => continue,
            };
            past_process |= !script;
            if let Some((e, code)) = error {
                first.get_or_insert_with(|| (command_line(&step.path, &record.args), code));
                errors.push(e);
            }
        }
        Ok(first.map(|(step, code)| PreflightFailure { errors, step, code }))
    }
}

/// Start, on tokio's blocking pool, the process's one-time set-up that the first script of
/// a run needs whether or not a preflight plans it: the host modules
/// ([`crate::script::host_api::prepare_modules`]), pathrs' private procfs (a `fsopen` and
/// `fsmount` of a procfs instance, for root-confined reopens) and the CPU feature
/// detection of `memchr` and the standard library (CPUID, which traps to the hypervisor on
/// a virtual machine). The agent starts it as soon as it knows the mode has a `.rhai` step,
/// so it overlaps reading and compiling the package; before, the preflight's plan paid it
/// at its first use, and the apply then found it done. Each part is process-wide and made
/// once (a `OnceLock` whose other users wait for it, or an idempotent cache); nothing waits
/// for this task.
pub fn prepare_process() {
    let span = tracing::Span::current();
    drop(tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        crate::script::host_api::prepare_modules();
        // pathrs caches its procfs handle on first use ([`pathrs::procfs::ProcfsHandle::new`]).
        drop(pathrs::procfs::ProcfsHandle::new());
        // The first `memchr`/`memrchr` of the process detects the CPU's features once.
        std::hint::black_box(memchr::memrchr(b'/', std::hint::black_box(b"/")));
    }));
}

/// The static check's verdict as the plan's scripts wait for it: `None` while it runs,
/// then `Some(passed)`; closed without one when the check panicked.
type Verdict = tokio::sync::watch::Receiver<Option<bool>>;

/// What a static check found: the error findings, the first step with one, and when it
/// ended (since the preflight started).
type Checked = (Vec<Diagnostic>, Option<usize>, std::time::Duration);

/// A static check running on the blocking pool ([`Preflight::start_check`]).
struct CheckTask {
    /// Its result; `None`: nothing to check.
    handle: Option<tokio::task::JoinHandle<Checked>>,
    verdict: Verdict,
}

impl CheckTask {
    /// The check's failure, if any, and when it ended (a check's panic is resumed here, as
    /// when it ran on the calling thread).
    async fn finish(
        self,
        preflight: &Preflight<'_>,
    ) -> (Option<PreflightFailure>, std::time::Duration) {
        let Some(handle) = self.handle else {
            return (None, std::time::Duration::ZERO);
        };
        match handle.await {
            Ok((found, first, took)) => (preflight.check_failure(found, first), took),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => {
                let steps = preflight.package.steps(preflight.mode);
                let i = preflight.scripts.keys().min().copied().unwrap_or(0);
                (
                    Some(PreflightFailure {
                        errors: vec![format!("the static check did not finish: {e}")],
                        step: command_line(&steps[i].path, &steps[i].arguments),
                        code: 1,
                    }),
                    std::time::Duration::ZERO,
                )
            }
        }
    }
}

/// The static check of `jobs` (`(step index, script, source)`, in step order): the error
/// findings, each once, and the first step with one.
fn check_scripts(
    engine: &ScriptEngine,
    jobs: &[(usize, CompiledScript, String)],
) -> (Vec<Diagnostic>, Option<usize>) {
    let checker = Checker::new();
    let mut found: Vec<Diagnostic> = Vec::new();
    let mut first = None;
    for (i, script, source) in jobs {
        for d in checker.check_with_imports(engine, script, source) {
            if d.severity == Severity::Error && !found.contains(&d) {
                first.get_or_insert(*i);
                found.push(d);
            }
        }
    }
    (found, first)
}

impl PreflightFailure {
    /// Print every error line on stderr and the step's `FAILED: <path> <args> <code>` line on
    /// stdout, as for a step that failed; returns the [`AgentError`] the run ends with (its
    /// summary line names the mode).
    pub fn report(self, console: &Console, mode: Mode) -> AgentError {
        for e in &self.errors {
            console.error(e);
        }
        console.say(&format!("FAILED: {} {}", self.step, self.code));
        AgentError::Preflight {
            mode: mode.as_str().to_string(),
            errors: self.errors.len(),
        }
    }
}

/// The CPU time (user + system) the process (`own`) and its waited-for children (the
/// queries a plan runs) have used so far, in microseconds (a failing `getrusage` counts 0):
/// the preflight's is the difference over its run ([`Cpu::since`]), since nothing else of
/// the agent runs meanwhile.
struct Cpu {
    own: u64,
    children: u64,
}

impl Cpu {
    fn now() -> Cpu {
        let of = |who| {
            let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
            // SAFETY: getrusage writes a whole `rusage` into the pointer it is given.
            if unsafe { libc::getrusage(who, u.as_mut_ptr()) } != 0 {
                return 0;
            }
            // SAFETY: initialised by the successful call above (and zeroed before).
            let u = unsafe { u.assume_init() };
            let us = |t: libc::timeval| {
                u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000
                    + u64::try_from(t.tv_usec).unwrap_or(0)
            };
            us(u.ru_utime) + us(u.ru_stime)
        };
        Cpu {
            own: of(libc::RUSAGE_SELF),
            children: of(libc::RUSAGE_CHILDREN),
        }
    }

    /// What was used between `before` and this reading.
    fn since(&self, before: &Cpu) -> Cpu {
        Cpu {
            own: self.own.saturating_sub(before.own),
            children: self.children.saturating_sub(before.children),
        }
    }
}

/// `<path> <args>`, the arguments joined by spaces (as the `FAILED:` line of the mode loop).
fn command_line(path: &str, args: &[String]) -> String {
    format!("{path} {}", args.join(" "))
}

/// Script output of the plan pass: dropped (the apply that follows prints its own).
struct Discard;

impl ScriptOutput for Discard {
    fn stdout(&self, _: &[u8]) {}
    fn stderr(&self, _: &[u8]) {}
}

/// The dry run's [`crate::step::PlanRunner`] up to the first process step (see the module
/// docs); that step and every step after it are listed, not run. Each script is planned on
/// tokio's blocking pool while the mode loop awaits it, so the runtime keeps polling its
/// signal driver and a SIGTERM during the plan is seen at once.
struct PreflightRunner {
    engine: Arc<ScriptEngine>,
    /// The session every step is planned on (one step after the other).
    api: HostApi,
    output: Arc<dyn ScriptOutput>,
    past_process: AtomicBool,
    /// The static check's verdict the scripts wait for ([`Preflight::run`]); `None`: passed.
    verdict: Option<Verdict>,
    /// The warm-up of the host modules and the script thread, awaited before the first
    /// script so that it runs on the pool thread whose script thread was started.
    warm: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl StepRunner for PreflightRunner {
    async fn run(&self, inv: StepInvocation) -> StepResult {
        let exec = inv.spec.exec();
        let StepProgram::Script(script) = inv.program else {
            self.past_process.store(true, Ordering::Relaxed);
            return StepResult {
                ok: true,
                ..StepResult::new(exec)
            };
        };
        if self.past_process.load(Ordering::Relaxed) {
            return StepResult {
                ok: true,
                ..StepResult::new(exec)
            };
        }
        let warm = self.warm.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(warm) = warm {
            let _ = warm.await;
        }
        if let Some(verdict) = &self.verdict {
            let mut verdict = verdict.clone();
            // A failed (or panicked) check: nothing is planned, its failure is the outcome.
            if !matches!(
                verdict.wait_for(Option::is_some).await.as_deref(),
                Ok(Some(true))
            ) {
                self.past_process.store(true, Ordering::Relaxed);
                return StepResult {
                    ok: true,
                    ..StepResult::new(exec)
                };
            }
        }
        let (engine, api, output) = (self.engine.clone(), self.api.clone(), self.output.clone());
        let spec = inv.spec;
        let span = tracing::Span::current();
        let planned = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            ScriptStep {
                engine: &engine,
                script: &script,
                spec: &spec,
                api: &api,
                end: End::Step,
                list_drift: false,
            }
            .run(output)
        })
        .await;
        let mut result = planned.unwrap_or_else(|e| StepResult {
            error: Some(format!("the plan's script runner failed: {e}")),
            ..StepResult::failed(exec, 1)
        });
        // Nothing shows the plan's diffs: a mode of many steps keeps none of them.
        for c in &mut result.report.changes {
            c.diff = None;
        }
        result
    }
}

/// Plan the copy of a local package into the root at its `host_dir`
/// ([`crate::agent::prepare::package_copy`], the code the apply runs), unreported: the copy
/// is the tool's, not the package's change. Nothing for another site.
///
/// # Errors
/// As [`crate::agent::prepare::package_copy`].
pub fn plan_package_copy(h: &mut Host, site: &PackageSite<'_>) -> Result<(), String> {
    let r = crate::agent::prepare::package_copy(h, site);
    let (_, deferred) = h.finish_step_with_report();
    r.and(deferred.map_err(|e| crate::script::host_api::error_chain(&e)))
}

/// Plan the agent's `root_dir/` overlay from `src` of `site` onto `h` at `dst`: the walk
/// the agent applies ([`crate::agent::prepare::copy_onto`], see
/// [`crate::agent::prepare::overlay`]), dangling symlinks skipped.
///
/// # Errors
/// A read of the source or a planned write failed (the message names the path).
pub fn plan_overlay(
    h: &mut Host,
    site: &PackageSite<'_>,
    src: &Path,
    dst: &Path,
) -> Result<(), String> {
    use crate::agent::prepare::{Dangling, copy_onto};
    copy_onto(h, site, src, dst, None, Dangling::Skip).map(drop)
}
