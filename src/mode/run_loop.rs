//! [`ModeLoop`]: one mode of one package, decided by the rules and executed by a
//! [`StepRunner`]; made by [`ModeLoop::new`] alone, for a dry run or (with [`Applying`])
//! for the agent.
//!
//! The agent (`crate::agent::mode::ModeRun`) drives it with the agent's runner, a writable
//! [`StateView`], step logs and the package lock; the dry run (`crate::local::PackageRun::plan`)
//! and the agent's preflight drive the very same loop with a plan runner (bash steps "would
//! run", `.rhai` steps on the Plan executor), a read-only view (flags read, never written)
//! and a [`Console::null`], and turn the returned [`StepRecord`]s into their plan.

use std::os::fd::RawFd;
use std::path::PathBuf;

use crate::host::root::run_dirs::RunDirs;
use crate::host::root::{AgentFiles, HostRoot};
use crate::logs::retention::LogIndex;
use crate::package::{Mode, Package, Step};
use crate::process::Cancel;
use crate::state::lock::LockKeeper;
use crate::state::{flags, history};
use crate::step::StepRunner;

use super::console::Console;
use super::coverage::{self, Declarations};
use super::error::ModeError;
use super::record::{Decision, ModeOutcome, StepRecord, not_run};
use super::settings::Settings;
use super::site::{StepScripts, StepSite};
use super::state::StateView;

/// How the loop treats interrupts that script steps request.
#[derive(Debug, Clone)]
pub struct InterruptPolicy {
    /// What the package's Skyhook CR declares (node metadata, or `--skyhook-cr`).
    pub declarations: Declarations,
    /// Record a requested reboot's boot id for `post-interrupt-check` (the agent).
    pub record: bool,
}

/// What a mode loop runs: one mode of one package.
pub struct PackageMode<'a> {
    /// The mode.
    pub mode: Mode,
    /// The package.
    pub package: &'a Package,
    /// Where its files are.
    pub site: &'a dyn StepSite,
    /// The mode's compiled scripts, by step index.
    pub scripts: &'a StepScripts,
    /// `SKYHOOK_RESOURCE_ID` as given.
    pub resource_id: &'a str,
    /// What the package's Skyhook CR declares (node metadata, or `--skyhook-cr`): the
    /// interrupts script steps request are judged against it.
    pub declarations: Declarations,
}

/// What makes a loop the agent's run rather than a dry run: it changes the host.
pub struct Applying<'a> {
    /// Keeps the package lock's path locked; a lost lock fails the run after the step that
    /// was running (its flag written).
    pub lock_keeper: &'a LockKeeper,
    /// The package lock's descriptor, inherited by every step process.
    pub lock_fd: RawFd,
    /// Where script steps read node metadata (`<copy dir>/node-metadata`, agent-side).
    pub node_metadata_dir: PathBuf,
}

/// One mode of one package, decided by the rules and executed by `runner`.
pub struct ModeLoop<'a, R> {
    /// The mode.
    pub(super) mode: Mode,
    /// The package.
    pub(super) package: &'a Package,
    /// Where its files are.
    pub(super) site: &'a dyn StepSite,
    /// The run's settings (environment, `OVERLAY_ALWAYS_RUN_STEP`, log root, limits).
    pub(super) settings: &'a Settings,
    /// Flags, check results and history.
    pub(super) state: StateView<'a>,
    /// The mode's compiled scripts, by step index.
    pub(super) scripts: &'a StepScripts,
    /// Runs each step.
    pub(super) runner: &'a R,
    /// The agent's own lines.
    pub(super) console: &'a Console,
    /// Stop (SIGTERM: no further step) and abort (the running step ends).
    pub(super) cancel: &'a Cancel,
    /// `SKYHOOK_RESOURCE_ID` as given.
    pub(super) resource_id: &'a str,
    /// Script steps in run modes change the host (the agent) or plan (a dry run);
    /// `*-check` modes always check ([`crate::step::exec_mode`]).
    pub(super) apply: bool,
    /// Write step logs (the agent, when `SKYHOOK_AGENT_WRITE_LOGS` is on).
    pub(super) write_logs: bool,
    /// Where script steps read node metadata; `None`: empty maps (dry runs).
    pub(super) node_metadata_dir: Option<PathBuf>,
    /// Judges interrupts requested by script steps against what the Skyhook CR declares.
    pub(super) interrupts: InterruptPolicy,
    /// Descriptors every step process inherits (the package lock).
    pub(super) keep_fds: Vec<RawFd>,
    /// The package lock's keeper; `None`: no lock (dry runs).
    pub(super) lock_keeper: Option<&'a LockKeeper>,
    /// The run's step logs, each log directory listed once per run.
    pub(super) logs: LogIndex,
    /// The directories the run's steps touch (flags, logs), each resolved once per run.
    pub(super) dirs: RunDirs,
}

impl<'a, R: StepRunner> ModeLoop<'a, R> {
    /// The loop of `what` with `settings` (flags, history and check results under its
    /// `state_root` on `root`), steps run by `runner`, the agent's lines on `console`,
    /// stopped by `cancel`. Without `applying` a dry run: script steps plan, state is read
    /// and never written, no log files, no lock, no node metadata, a requested reboot is
    /// not recorded. With it the agent's run: script steps apply, state is written, logs
    /// as `settings` says, the lock kept and inherited, a requested reboot recorded for
    /// `post-interrupt-check`.
    pub fn new(
        what: PackageMode<'a>,
        settings: &'a Settings,
        root: &'a HostRoot,
        runner: &'a R,
        console: &'a Console,
        cancel: &'a Cancel,
        applying: Option<Applying<'a>>,
    ) -> Self {
        let apply = applying.is_some();
        let (lock_keeper, keep_fds, node_metadata_dir) = match applying {
            Some(a) => (
                Some(a.lock_keeper),
                vec![a.lock_fd],
                Some(a.node_metadata_dir),
            ),
            None => (None, Vec::new(), None),
        };
        ModeLoop {
            mode: what.mode,
            package: what.package,
            site: what.site,
            settings,
            state: StateView {
                root,
                state_root: &settings.state_root,
                writable: apply,
            },
            scripts: what.scripts,
            runner,
            console,
            cancel,
            resource_id: what.resource_id,
            apply,
            write_logs: apply && settings.write_logs,
            node_metadata_dir,
            interrupts: InterruptPolicy {
                declarations: what.declarations,
                record: apply,
            },
            keep_fds,
            lock_keeper,
            logs: LogIndex::default(),
            dirs: RunDirs::default(),
        }
    }
}

impl<R: StepRunner> ModeLoop<'_, R> {
    /// Run the mode's steps (run modes) or checks (`*-check` modes). `START` is the
    /// caller's (it comes before the loop, after the lock).
    ///
    /// # Errors
    /// State reads and writes (flags, history, check results) and log-file creation;
    /// a failing step is `Ok` with `ok == false`.
    pub async fn run(&self) -> Result<ModeOutcome, ModeError> {
        if self.mode.is_check() {
            self.run_checks().await
        } else {
            self.run_steps().await
        }
    }

    fn versions(&self) -> Result<Option<(String, String)>, ModeError> {
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
    fn skip_flag(&self, step: &Step) -> Result<Option<PathBuf>, ModeError> {
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

    async fn run_steps(&self) -> Result<ModeOutcome, ModeError> {
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
            if let Some(keeper) = self.lock_keeper {
                keeper.arm()?;
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

    async fn run_checks(&self) -> Result<ModeOutcome, ModeError> {
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
                if let Some(keeper) = self.lock_keeper {
                    keeper.arm()?;
                }
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
            let record = |version: &str| -> Result<(), ModeError> {
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
                AgentFiles::new(root)
                    .remove_file(&coverage::reboot_record(state, &pkg.package_name))?;
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
}
