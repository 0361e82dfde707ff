//! The one mode loop (agent-contract.md sections 7-8): the flag decision,
//! `OVERLAY_ALWAYS_RUN_STEP`, `env:` substitution, the reserved step variables, the step
//! invocation, check summaries and history — for the agent and for `skyhook-run --package`
//! alike.
//!
//! [`ModeLoop`] decides and a [`StepRunner`] runs. The agent ([`ModeRun`]) drives it with
//! [`AgentRunner`] and a writable [`StateView`]; the dry run
//! ([`crate::local::PackageRun::plan`]) drives the very same loop with
//! [`PlanRunner`](crate::step::PlanRunner) (bash steps "would run", `.rhai` steps on the
//! Plan executor) and a read-only view (flags read, never written), a [`Console::null`], and
//! turns the returned [`StepRecord`]s into its plan.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::host::effects::effect::InterruptRequest;
use crate::host::root::HostRoot;
use crate::logs::sink::Label;
use crate::package::{self, Mode, Package, Step};
use crate::process::Cancel;
use crate::pyfmt;
use crate::redact::Redactor;
use crate::state::{flags, history};
use crate::step::invocation::ConsoleStreams;
use crate::step::{AgentRunner, ProcessRunner, ScriptRunner, StepInvocation, StepProgram};
use crate::step::{StepResult, StepRunner, StepSpec};

use super::console::Console;
use super::coverage::{self, Declarations};
use super::env::{EnvBuilder, lossy_env};
use super::error::AgentError;
use super::settings::{ResourceId, Settings};
use super::site::{PackageSite, StepScripts};
use super::{prepare, step_logs};

pub mod preflight;

/// The on-host state as the loop sees it: flags, check results, history. Read-write for
/// the agent; read-only for a dry run (every write is skipped, reads are real).
#[derive(Debug, Clone, Copy)]
pub struct StateView<'a> {
    /// The host root.
    pub root: &'a HostRoot,
    /// `SKYHOOK_ROOT_DIR` (a host path).
    pub state_root: &'a Path,
    /// False: writes are skipped.
    pub writable: bool,
}

impl StateView<'_> {
    fn flag(&self, pkg: &Package, step: &Step) -> PathBuf {
        flags::flag_path(
            self.state_root,
            &pkg.package_name,
            &pkg.package_version,
            step,
        )
    }

    /// The previous version for the upgrade modes (from the history file) and the
    /// messages reading it produced.
    /// Read-only views never create the history directory nor move a corrupt file.
    fn previous(&self, pkg: &Package) -> Result<history::HistoryRead, AgentError> {
        let read = if self.writable {
            history::read_previous
        } else {
            history::peek_previous
        };
        Ok(read(self.root, self.state_root, &pkg.package_name)?)
    }
}

/// How the loop treats interrupts that script steps request.
#[derive(Debug, Clone)]
pub struct InterruptPolicy {
    /// What the package's Skyhook CR declares (node metadata, or `--skyhook-cr`).
    pub declarations: Declarations,
    /// Record a requested reboot's boot id for `post-interrupt-check` (the agent).
    pub record: bool,
}

/// What the loop decided for one step.
#[derive(Debug)]
pub enum Decision {
    /// The runner ran it (or, in a dry run, listed it: `result.ran` is false).
    Ran(StepResult),
    /// Skipped: its flag exists (a host path).
    Skipped {
        /// The flag file.
        flag: PathBuf,
    },
    /// Failed before running: an `env:` argument's variable is unset (the agent's message,
    /// one line per missing name, joined by `; `).
    MissingEnv {
        /// The message.
        message: String,
    },
    /// Not reached: an earlier step failed, or the run was stopped before it.
    NotRun,
}

/// One step of the mode and what happened to it.
#[derive(Debug)]
pub struct StepRecord {
    /// The step's index in the mode.
    pub index: usize,
    /// Its arguments: after `env:` substitution and upgrade versions when it ran, as
    /// configured otherwise.
    pub args: Vec<String>,
    /// The decision.
    pub decision: Decision,
}

impl StepRecord {
    /// False for a failed step (runner failure or a missing `env:` variable).
    pub fn ok(&self) -> bool {
        match &self.decision {
            Decision::Ran(r) => r.ok,
            Decision::MissingEnv { .. } => false,
            Decision::Skipped { .. } | Decision::NotRun => true,
        }
    }
}

/// How a mode ended.
#[derive(Debug)]
pub struct ModeOutcome {
    /// Exit 0.
    pub ok: bool,
    /// Every step of the mode, in order.
    pub steps: Vec<StepRecord>,
}

/// One mode of one package, decided by the rules and executed by `runner`.
pub struct ModeLoop<'a, R> {
    /// The mode.
    pub mode: Mode,
    /// The package.
    pub package: &'a Package,
    /// Where its files are.
    pub site: &'a PackageSite<'a>,
    /// The run's settings (environment, `OVERLAY_ALWAYS_RUN_STEP`, log root, limits).
    pub settings: &'a Settings,
    /// Flags, check results and history.
    pub state: StateView<'a>,
    /// The mode's compiled scripts, by step index.
    pub scripts: &'a StepScripts,
    /// Runs each step.
    pub runner: &'a R,
    /// The agent's own lines.
    pub console: &'a Console,
    /// Stop (SIGTERM: no further step) and abort (the running step ends).
    pub cancel: &'a Cancel,
    /// `SKYHOOK_RESOURCE_ID` as given.
    pub resource_id: &'a str,
    /// Script steps in run modes change the host (the agent) or plan (a dry run);
    /// `*-check` modes always check ([`crate::step::exec_mode`]).
    pub apply: bool,
    /// Write step logs (the agent, when `SKYHOOK_AGENT_WRITE_LOGS` is on).
    pub write_logs: bool,
    /// Where script steps read node metadata (`<copy dir>/node-metadata`, agent-side).
    pub node_metadata_dir: Option<PathBuf>,
    /// Judges interrupts requested by script steps against what the Skyhook CR declares
    /// (see [`super::coverage`]); `None` does not judge them.
    pub interrupts: Option<InterruptPolicy>,
    /// Descriptors every step process inherits (the package lock).
    pub keep_fds: Vec<RawFd>,
    /// Keeps the package lock's path locked; a lost lock fails the run after the step that
    /// was running (its flag written). `None`: no lock (dry runs).
    pub lock_keeper: Option<&'a crate::state::lock::LockKeeper>,
    /// The run's step logs, each log directory listed once per run (start with
    /// `LogIndex::default()`).
    pub logs: crate::logs::retention::LogIndex,
    /// The directories the run's steps touch (flags, logs), each resolved once per run
    /// (start with `RunDirs::default()`).
    pub dirs: crate::host::root::run_dirs::RunDirs,
}

impl<R: StepRunner> ModeLoop<'_, R> {
    /// Run the mode's steps (run modes) or checks (`*-check` modes). `START` is the
    /// caller's (it comes before the loop, after the lock).
    ///
    /// # Errors
    /// State reads and writes (flags, history, check results) and log-file creation;
    /// a failing step is `Ok` with `ok == false`.
    pub async fn run(&self) -> Result<ModeOutcome, AgentError> {
        if self.mode.is_check() {
            self.run_checks().await
        } else {
            self.run_steps().await
        }
    }

    fn versions(&self) -> Result<Option<(String, String)>, AgentError> {
        if !matches!(self.mode, Mode::Upgrade | Mode::UpgradeCheck) {
            return Ok(None);
        }
        let read = self.state.previous(self.package)?;
        for m in &read.messages {
            self.console.say(m);
        }
        Ok(Some((read.previous, self.package.package_version.clone())))
    }

    fn stopped_before(&self, step: &Step) -> bool {
        if !self.cancel.is_stopped() {
            return false;
        }
        let why = self
            .cancel
            .reason()
            .map_or_else(|| "stopped".to_string(), |r| r.to_string());
        self.console
            .warn(&format!("stopping before {}: {why}", step.path));
        true
    }

    /// The flag decision (section 7): `Some(flag)` when the step is skipped.
    fn skip_flag(&self, step: &Step) -> Result<Option<PathBuf>, AgentError> {
        let flag = self.state.flag(self.package, step);
        if !self.dirs.exists(self.state.root, &flag)? {
            tracing::debug!(step = %step.path, flag = %flag.display(), "no flag: the step runs");
            return Ok(None);
        }
        tracing::debug!(step = %step.path, flag = %flag.display(), mode = self.mode.as_str(), "flag exists");
        let shown = self.state.root.display_path(&flag);
        if self.settings.always_run_step {
            self.console.say(&format!(
                "WARNING: {} exists for {} but OVERLAY_ALWAYS_RUN_STEP flag is set so running anyway.",
                shown.display(),
                step.path
            ));
            Ok(None)
        } else if matches!(self.mode, Mode::Config | Mode::Uninstall | Mode::Upgrade) {
            self.console.say(
                "Flag exists but CONFIG, UNINSTALL, and UPGRADE mode don't support idempotence so running step anyway.",
            );
            Ok(None)
        } else if step.idempotence {
            self.console
                .say("Flag exists but idempotence is Idempotence.Disabled so running step.");
            Ok(None)
        } else {
            self.console.say(&format!(
                "Skipping {} because {} exists.",
                step.path,
                shown.display()
            ));
            Ok(Some(flag))
        }
    }

    async fn run_steps(&self) -> Result<ModeOutcome, AgentError> {
        let steps = self.package.steps(self.mode);
        let mut records = Vec::with_capacity(steps.len());
        let mut ok = true;
        for (index, step) in steps.iter().enumerate() {
            // Let a pending signal delivery run before deciding (section 11).
            tokio::task::yield_now().await;
            if !ok || self.stopped_before(step) {
                ok = false;
                records.push(not_run(index, step));
                continue;
            }
            let versions = self.versions()?;
            if let Some(flag) = self.skip_flag(step)? {
                records.push(StepRecord {
                    index,
                    args: step.arguments.clone(),
                    decision: Decision::Skipped { flag },
                });
                continue;
            }
            let record = self.execute(index, step, versions.as_ref()).await?;
            if !record.ok() {
                ok = false;
                records.push(record);
                continue;
            }
            if let Decision::Ran(r) = &record.decision
                && r.ran
                && self.state.writable
            {
                let flag = self.state.flag(self.package, step);
                flags::write_flag_in(
                    &self.dirs,
                    self.state.root,
                    &flag,
                    step,
                    crate::clock::now_local(),
                )?;
            }
            records.push(record);
            if let Some(keeper) = self.lock_keeper {
                keeper.check()?;
            }
        }
        Ok(ModeOutcome { ok, steps: records })
    }

    async fn run_checks(&self) -> Result<ModeOutcome, AgentError> {
        let steps = self.package.steps(self.mode);
        let root = self.state.root;
        let state = self.state.state_root;
        let write = self.state.writable;
        let mut records = Vec::with_capacity(steps.len());
        if self.mode == Mode::PostInterruptCheck
            && let Some(message) = self.reboot_pending()?
        {
            self.console
                .error(&format!("post-interrupt-check: {message}"));
            return Ok(ModeOutcome {
                ok: false,
                steps: steps
                    .iter()
                    .enumerate()
                    .map(|(i, s)| not_run(i, s))
                    .collect(),
            });
        }
        if steps.is_empty() {
            self.console.warn(&format!(
                "There are no {} steps defined. This will be ran as a no-op.",
                self.mode.as_str()
            ));
        } else {
            if write {
                flags::clear_all_checked(root, state, self.mode)?;
            }
            let mut stopped = false;
            for (index, step) in steps.iter().enumerate() {
                tokio::task::yield_now().await;
                if stopped || self.stopped_before(step) {
                    stopped = true;
                    records.push(not_run(index, step));
                    continue;
                }
                let versions = self.versions()?;
                records.push(self.execute(index, step, versions.as_ref()).await?);
                if let Some(keeper) = self.lock_keeper {
                    keeper.check()?;
                }
            }
            if stopped {
                return Ok(ModeOutcome {
                    ok: false,
                    steps: records,
                });
            }
            let results: Vec<(String, bool)> = steps
                .iter()
                .zip(&records)
                .map(|(s, r)| (s.path.clone(), !r.ok()))
                .collect();
            if write {
                flags::write_check_results(root, state, &results)?;
            }
            if results.iter().any(|(_, failed)| *failed) {
                return Ok(ModeOutcome {
                    ok: false,
                    steps: records,
                });
            }
        }
        if write {
            // History first, the success marker last: a failed history write never leaves
            // `<mode>_ALL_CHECKED` behind.
            let now = crate::clock::now_utc();
            let pkg = self.package;
            let record = |version: &str| -> Result<(), AgentError> {
                for m in history::record(root, state, &pkg.package_name, version, now)? {
                    self.console.say(&m);
                }
                Ok(())
            };
            match self.mode {
                Mode::ApplyCheck | Mode::UpgradeCheck => record(&pkg.package_version)?,
                Mode::UninstallCheck => {
                    record("uninstalled")?;
                    flags::remove_package_flags(root, state, pkg)?;
                }
                _ => {}
            }
            if self.mode == Mode::PostInterruptCheck {
                root.remove_file(&coverage::reboot_record(state, &pkg.package_name))?;
            }
            if !steps.is_empty() {
                flags::set_all_checked(root, state, self.mode)?;
            }
        }
        Ok(ModeOutcome {
            ok: true,
            steps: records,
        })
    }

    /// Resolve and run one step (section 8): header, `env:` substitution, chmod, the
    /// environment and context, log files, the runner, the result line, log retention.
    async fn execute(
        &self,
        index: usize,
        step: &Step,
        versions: Option<&(String, String)>,
    ) -> Result<StepRecord, AgentError> {
        let mut shown_args = step.arguments.clone();
        if let (true, Some((prev, cur))) = (step.upgrade_step, versions) {
            shown_args.push(prev.clone());
            shown_args.push(cur.clone());
        }
        self.console.say(&format!(
            "{} {} {} {} {} {}",
            self.mode.as_str(),
            step.path,
            pyfmt::repr_str_list(&shown_args),
            pyfmt::repr_codes(&step.returncodes),
            step.idempotence_label(),
            if step.on_host { "True" } else { "False" }
        ));

        // env: substitution from the run's environment (8.1)
        let mut args: Vec<String> = Vec::with_capacity(shown_args.len());
        let mut missing = Vec::new();
        for a in &step.arguments {
            match a.strip_prefix("env:") {
                Some(name) => match self.settings.var(name) {
                    Some(v) => args.push(v.to_string_lossy().into_owned()),
                    None => missing.push(name.to_string()),
                },
                None => args.push(a.clone()),
            }
        }
        if !missing.is_empty() {
            let lines: Vec<String> = missing
                .iter()
                .map(|name| {
                    format!(
                        "{}: Expected environment variable did not exist: {name}",
                        step.path
                    )
                })
                .collect();
            for l in &lines {
                self.console.say(l);
            }
            return Ok(StepRecord {
                index,
                args: step.arguments.clone(),
                decision: Decision::MissingEnv {
                    message: lines.join("; "),
                },
            });
        }
        if let (true, Some((prev, cur))) = (step.upgrade_step, versions) {
            args.push(prev.clone());
            args.push(cur.clone());
        }

        let program = match self.scripts.get(&index) {
            Some(script) => StepProgram::Script(script.clone()),
            None => {
                if self.state.writable {
                    self.make_executable(&self.site.step_root().join(&step.path))?;
                }
                self.site.process(step)
            }
        };

        let (step_root_v, skyhook_dir_v) = self.site.reserved_dirs(step.on_host);
        let mut env = EnvBuilder::from_agent(self.settings);
        for (k, v) in &step.env {
            env.set(k, v);
        }
        if let Some((prev, cur)) = versions {
            env.set("PREVIOUS_VERSION", prev);
            env.set("CURRENT_VERSION", cur);
        }
        env.set("STEP_ROOT", &step_root_v);
        env.set("SKYHOOK_DIR", &skyhook_dir_v);
        let env = env.into_vec();
        let text_env = lossy_env(&env);
        let redactor = Redactor::from_env(&text_env);
        let spec = StepSpec::builder(self.mode.as_str(), self.apply)
            .step(step.name.clone(), args.clone())
            .package(
                self.package.package_name.clone(),
                self.package.package_version.clone(),
                versions.map(|(p, _)| p.clone()),
            )
            .dirs(
                skyhook_dir_v.display().to_string(),
                step_root_v.display().to_string(),
            )
            .resource_id(self.resource_id)
            .env(text_env)
            .configmaps(Some(self.site.shown(&self.site.configmaps_dir())))
            .node_metadata(self.node_metadata_dir.clone())
            .commands_chrooted(step.on_host)
            .deadline(std::time::Instant::now() + self.settings.script_timeout)
            .script_timeout(self.settings.script_timeout)
            .returncodes(
                step.returncodes
                    .iter()
                    .filter_map(|c| i32::try_from(c.value).ok())
                    .collect(),
            )
            .redactor(redactor)
            .cancel(self.cancel.child())
            .diffs(self.settings.diffs)
            .build();
        let log_dir = self
            .settings
            .log_root
            .join(&self.package.package_name)
            .join(&self.package.package_version);
        let (logs, previous_logs) = step_logs::open_indexed(
            self.state.root,
            &self.dirs,
            &self.logs,
            self.write_logs,
            &log_dir,
            &step.path,
        )?;
        let invocation = StepInvocation {
            path: step.path.clone(),
            program,
            args: args.clone(),
            env,
            spec,
            logs,
            preamble: None,
            keep_fds: self.keep_fds.clone(),
        };
        let kind = if matches!(invocation.program, StepProgram::Script(_)) {
            "rhai"
        } else {
            "process"
        };
        let span = tracing::info_span!("step", path = %step.path, index, kind);
        let mut result =
            tracing::Instrument::instrument(self.runner.run(invocation), span.clone()).await;
        tracing::debug!(parent: &span, ok = result.ok, status = result.code, ran = result.ran, "step ended");
        if result.ran && result.ok && !result.interrupts.is_empty() {
            self.judge_interrupts(step, &mut result)?;
        }
        if result.ran {
            let joined = args.join(" ");
            if result.ok {
                self.console
                    .say(&format!("SUCEEDED: {} {joined}", step.path));
            } else {
                self.console
                    .say(&format!("FAILED: {} {joined} {}", step.path, result.code));
            }
        }
        if self.write_logs {
            step_logs::prune_in(
                self.state.root,
                &self.dirs,
                self.console,
                &step.path,
                &previous_logs,
            );
        }
        Ok(StepRecord {
            index,
            args,
            decision: Decision::Ran(result),
        })
    }

    /// Judge the interrupts a succeeded step requested (see [`super::coverage`]): covered
    /// ones are said to be the operator's; an uncovered one fails the step with the CR lines
    /// to add; without node metadata a warning. Nothing is ever interrupted here. A covered
    /// (or unjudged) reboot is recorded with the boot id for `post-interrupt-check`.
    fn judge_interrupts(&self, step: &Step, result: &mut StepResult) -> Result<(), AgentError> {
        let Some(policy) = &self.interrupts else {
            return Ok(());
        };
        let pkg = &self.package.package_name;
        // The name the CR gives the package, for the lines to add to it.
        let cr_name = coverage::lookup_names(self.resource_id, pkg).remove(0);
        let mut uncovered = Vec::new();
        let mut notes = Vec::new();
        for request in &result.interrupts {
            let name = coverage::request_name(request);
            match &policy.declarations {
                Declarations::Known(Some(d)) => match d.covering(request) {
                    Some(how) => {
                        let line = format!(
                            "{}: requested interrupt {name} is declared in the Skyhook CR ({how}): the operator runs it in its interrupt stage",
                            step.path
                        );
                        self.console.say(&line);
                        notes.push(line);
                    }
                    None => uncovered.push(request),
                },
                Declarations::Known(None) => uncovered.push(request),
                Declarations::Unknown => self.console.warn(&format!(
                    "{}: requested interrupt {name} cannot be checked (no node metadata packages.json): the agent never interrupts the node itself; declare it in the package's Skyhook CR",
                    step.path
                )),
            }
        }
        if !uncovered.is_empty() {
            // Where the script requested it (`file:line`), else the step's path.
            let at = |r: &InterruptRequest| {
                let report = &result.report;
                report
                    .items
                    .iter()
                    .find_map(|item| match item {
                        crate::host::effects::report::Item::Interrupt {
                            index,
                            position: Some(p),
                        } if report.interrupts.get(*index) == Some(r) => Some(p.to_string()),
                        _ => None,
                    })
                    .unwrap_or_else(|| step.path.clone())
            };
            let lines: Vec<String> = uncovered
                .iter()
                .map(|r| {
                    format!(
                        "{}: requested interrupt {} is not declared for package {cr_name} in the Skyhook CR, so the operator would not drain the node for it; nothing was interrupted. Add to spec.packages.{cr_name}: {}",
                        at(r),
                        coverage::request_name(r),
                        coverage::cr_lines(r)
                    )
                })
                .collect();
            for l in &lines {
                self.console.error(l);
            }
            result.ok = false;
            result.code = 1;
            result.error = Some(lines.join("; "));
            return Ok(());
        }
        result.notes.extend(notes);
        if policy.record
            && self.state.writable
            && result.interrupts.contains(&InterruptRequest::Reboot)
            && let Some(boot) = coverage::boot_id(self.state.root)
        {
            self.state.root.write_atomic(
                &coverage::reboot_record(self.state.state_root, pkg),
                format!("{boot}\n").as_bytes(),
                Some(0o644),
            )?;
        }
        Ok(())
    }

    /// `post-interrupt-check` after a requested reboot: `Some(message)` while the node still
    /// runs the boot id recorded when the reboot was requested.
    fn reboot_pending(&self) -> Result<Option<String>, AgentError> {
        let record = coverage::reboot_record(self.state.state_root, &self.package.package_name);
        let Some(bytes) = self.state.root.read_opt(&record)? else {
            return Ok(None);
        };
        let recorded = String::from_utf8_lossy(&bytes).trim().to_string();
        match coverage::boot_id(self.state.root) {
            Some(now) if now == recorded => Ok(Some(format!(
                "the requested reboot has not happened: the node still runs boot {now}, as when a step of {} requested it ({})",
                self.package.package_name,
                self.state.root.display_path(&record).display()
            ))),
            _ => Ok(None),
        }
    }

    /// Add the execute bits (8.2): `mode | 0o111` on the permission bits, dropping
    /// set-uid/set-gid/sticky when a chmod is needed \[fix\]. Follows symlinks inside the root.
    fn make_executable(&self, host: &Path) -> Result<(), AgentError> {
        let PackageSite::Copy { root, .. } = self.site else {
            return Ok(());
        };
        if let Some(m) = root.metadata(host)? {
            let mode = m.mode() & 0o7777;
            if mode & 0o111 != 0o111 {
                root.set_mode(host, (mode & 0o777) | 0o111)?;
            }
        }
        Ok(())
    }
}

/// `stopping before the first step: SIGTERM received during the preflight` when `cancel`
/// was stopped (the warning a run stopped during the preflight ends with), else `None`.
pub(crate) fn stopped_during_preflight(cancel: &Cancel) -> Option<String> {
    cancel.is_stopped().then(|| {
        let why = cancel
            .reason()
            .map_or_else(|| "stopped".to_string(), |r| r.to_string());
        format!("stopping before the first step: {why} during the preflight")
    })
}

fn not_run(index: usize, step: &Step) -> StepRecord {
    StepRecord {
        index,
        args: step.arguments.clone(),
        decision: Decision::NotRun,
    }
}

/// Undo the journals of `.rhai` steps that did not end ([`crate::host::effects::journal::recover`])
/// and remove the staging directories of `fs::extract` calls that did not end
/// ([`crate::host::files::archive::sweep_staging`]), one line each on `console`; a failure is
/// a warning, not a failed run.
pub fn recover_journals(root: &crate::host::root::HostRoot, console: &Console) {
    match crate::host::effects::journal::recover(root) {
        Ok(lines) => lines.iter().for_each(|l| console.say(l)),
        Err(e) => console.warn(&format!("not undone: {}", crate::chain::render(&e))),
    }
    match crate::host::files::archive::sweep_staging(root) {
        Ok(lines) => lines.iter().for_each(|l| console.say(l)),
        Err(e) => console.warn(&crate::chain::render(&e)),
    }
}

/// Load and validate `config.json` and the step files of `site` (section 4 item 2, 5).
/// Returns the package and the loader's warnings (already trimmed).
///
/// # Errors
/// Unreadable or invalid config, missing step files.
pub fn load_package(site: &PackageSite<'_>) -> Result<(Package, Vec<String>), AgentError> {
    let config = site.config_path();
    let shown = site.shown(&config);
    let bytes = site.read(&config)?;
    let loaded = package::load::parse(&shown, &bytes)?;
    let step_root = site.step_root();
    let lookup_error = std::cell::RefCell::new(None);
    package::load::check_step_files(&shown, &loaded.package, |p| {
        match site.is_file(&step_root.join(p)) {
            Ok(b) => b,
            Err(e) => {
                lookup_error.borrow_mut().get_or_insert(e);
                false
            }
        }
    })?;
    if let Some(e) = lookup_error.into_inner() {
        return Err(e);
    }
    let warnings = loaded
        .warnings
        .iter()
        .map(|w| w.trim_start().to_string())
        .collect();
    Ok((loaded.package, warnings))
}

impl ConsoleStreams for Console {
    fn writer(&self, label: Label) -> Box<dyn std::io::Write + Send> {
        Console::writer(self, label)
    }
    fn error_line(&self, line: &str) {
        self.error(line);
    }
}

/// Everything one agent mode run needs.
pub struct ModeRun<'a> {
    /// The host root.
    pub root: &'a HostRoot,
    /// Agent settings.
    pub settings: &'a Settings,
    /// The resource id.
    pub id: &'a ResourceId,
    /// The copy dir (host path).
    pub copy_dir: &'a Path,
    /// The mode.
    pub mode: Mode,
    /// Stop requests (SIGTERM).
    pub cancel: &'a Cancel,
    /// The agent's console.
    pub console: &'a Console,
    /// What the Skyhook CR declares; `None`: the copy dir's node metadata
    /// (`node-metadata/packages.json`).
    pub declarations: Option<Declarations>,
    /// Run the [`Preflight`](preflight::Preflight) before the lock and `START`
    /// (false: the caller has run it already, e.g. on the package directory the copy was
    /// made from).
    pub preflight: bool,
}

impl ModeRun<'_> {
    /// Run the mode end to end ([`ModeRun::run_recorded`]). Returns true when the mode
    /// succeeded (exit 0).
    ///
    /// # Errors
    /// Preparation and state failures (exit 1). Step failures are `Ok(false)`.
    pub async fn run(&self) -> Result<bool, AgentError> {
        Ok(self.run_recorded().await?.is_some_and(|o| o.ok))
    }

    /// Run the mode end to end: legacy copy, load, compile, expected files, undo of the
    /// journals a killed step left, preflight (validate, plan), lock, overlay, `START`, then
    /// the [`ModeLoop`]. Returns what happened to each step, or `None` when
    /// the run stopped while waiting for the package lock (a failure: exit 1).
    ///
    /// # Errors
    /// Preparation and state failures (exit 1). Step failures are `Ok` with `ok == false`.
    pub async fn run_recorded(&self) -> Result<Option<ModeOutcome>, AgentError> {
        prepare::legacy_copy(self.root, self.copy_dir, &self.settings.data_dir)?;
        let site = PackageSite::Copy {
            root: self.root,
            copy_dir: self.copy_dir,
        };
        let (pkg, warnings) = load_package(&site)?;
        for w in &warnings {
            self.console.warn(w);
        }
        for (mode, steps) in &pkg.modes {
            for s in steps.iter().filter(|s| !s.on_host) {
                self.console.warn(&format!(
                    "step {} ({}) has on_host: false: it runs in the agent's filesystem with the host under {}, not chrooted into the host",
                    s.path,
                    mode.as_str(),
                    self.root.mount().display()
                ));
            }
        }
        let engine = crate::step::engine();
        let scripts = site.compile_mode_scripts(&engine, &pkg, self.mode)?;
        let declarations = match &self.declarations {
            Some(d) => d.clone(),
            None => Declarations::from_node_metadata(
                self.root,
                self.copy_dir,
                &coverage::lookup_names(&self.id.raw, &pkg.package_name),
            )
            .map_err(AgentError::NodeMetadata)?,
        };
        let overlays = !matches!(self.mode, Mode::Uninstall | Mode::UninstallCheck);
        if overlays {
            site.check_expected_files(&pkg.expected_config_files)?;
        }
        // A `.rhai` step cut short (SIGKILL) left its undo journal: its files are put back
        // before anything else, the preflight's plan included (it would plan against a
        // half-changed host). Each journal is locked by its live step, so this needs no
        // package lock.
        recover_journals(self.root, self.console);
        if self.preflight {
            let preflight = preflight::Preflight {
                mode: self.mode,
                package: &pkg,
                site: &site,
                settings: self.settings,
                scripts: &scripts,
                engine: &engine,
                root: self.root,
                resource_id: &self.id.raw,
                declarations: declarations.clone(),
                cancel: self.cancel,
            };
            let failure = preflight.run().await?;
            // A stop (SIGTERM) during the preflight ends the run before anything is written
            // (no lock, overlay, `START`, flag or history); the plan it aborted may have
            // failed the step being planned: not the package's fault.
            if let Some(why) = stopped_during_preflight(self.cancel) {
                self.console.warn(&why);
                return Ok(None);
            }
            if let Some(failure) = failure {
                return Err(failure.report(self.console, self.mode));
            }
        }
        let Some(lock) = prepare::package_lock(
            self.root,
            &self.settings.state_root,
            &pkg.package_name,
            self.cancel,
            self.console,
        )
        .await?
        else {
            return Ok(None);
        };
        crate::state::check_not_dangling(
            self.root,
            &flags::flags_dir(&self.settings.state_root),
            "flags directory",
        )?;
        if self.settings.write_logs {
            let log_dir = self
                .settings
                .log_root
                .join(&pkg.package_name)
                .join(&pkg.package_version);
            crate::state::check_not_dangling(self.root, &log_dir, "log directory")?;
        }
        // The overlay changes host files a running holder's steps may read: only under the lock.
        if overlays {
            prepare::overlay(self.root, self.copy_dir)?;
        }
        let keeper = crate::state::lock::LockKeeper::start(self.root, &lock)?;
        flags::write_start(self.root, &self.settings.state_root)?;
        let console: Arc<dyn ConsoleStreams> = Arc::new(self.console.clone());
        let runner = AgentRunner {
            process: ProcessRunner::new(self.settings.buffer_limit)
                .with_log_format(self.settings.log_format),
            script: ScriptRunner {
                engine,
                root: self.root.mount().to_path_buf(),
                opened: self.root.try_clone().ok().map(Arc::new),
                log_format: self.settings.log_format,
            },
            console,
        };
        let span = tracing::info_span!(
            "mode",
            mode = self.mode.as_str(),
            package = %pkg.package_name,
            version = %pkg.package_version
        );
        let mode_loop = ModeLoop {
            mode: self.mode,
            package: &pkg,
            site: &site,
            settings: self.settings,
            state: StateView {
                root: self.root,
                state_root: &self.settings.state_root,
                writable: true,
            },
            scripts: &scripts,
            runner: &runner,
            console: self.console,
            cancel: self.cancel,
            resource_id: &self.id.raw,
            apply: true,
            write_logs: self.settings.write_logs,
            node_metadata_dir: Some(self.root.display_path(&self.copy_dir.join("node-metadata"))),
            interrupts: Some(InterruptPolicy {
                declarations,
                record: true,
            }),
            keep_fds: vec![lock.as_raw_fd()],
            lock_keeper: Some(&keeper),
            logs: crate::logs::retention::LogIndex::default(),
            dirs: crate::host::root::run_dirs::RunDirs::default(),
        };
        let outcome = tracing::Instrument::instrument(mode_loop.run(), span).await?;
        keeper.stop()?;
        drop(lock);
        Ok(Some(outcome))
    }
}
