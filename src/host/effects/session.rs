//! [`Host`]: one step's session over the host root, and its executor.
//!
//! A `Host` is created per step with an [`ExecMode`], which picks its executor once
//! (`effects/executors`). API functions (`fs::write`, `service::start`, ...)
//! read through the session's *view* and hand every mutation to [`Host::submit`] as an
//! [`Effect`]; the session validates it, describes it for the report, and hands it to the
//! executor:
//!
//! - **Apply**: performs the effect;
//! - **Plan**: records the effect in the executor's read overlay, so later reads in the same
//!   session see the planned file contents, removals, service and package states; file
//!   contents get a unified diff; commands that are not read-only are recorded as actions
//!   and return a planned result;
//! - **Check**: records exactly like Plan; the report's changes are the drift;
//! - **Recording** ([`Host::recording`], for tests): performs nothing, keeps every effect.
//!
//! # Deferred work and `finish`
//!
//! A changed systemd drop-in schedules one `systemctl daemon-reload` (coalesced), run before
//! the next `service::` call or at the end of the step; a changed grub drop-in schedules one
//! grub regeneration at the end, a changed `kmod::` blacklist or options file one initramfs
//! regeneration ([`crate::host::kernel::kmod`]). [`Host::finish`] runs what is pending and returns the
//! [`Report`]. A failed step ends with [`Host::fail_with_report`] instead (below). As a
//! safety net, dropping a `Host` without ending it runs pending work too (errors are then
//! lost), so an early `?` return cannot lose it.
//!
//! # A failed step
//!
//! An apply session built with [`HostOptions::undo`] keeps an undo journal of the step's
//! files ([`crate::host::effects::journal`], in the apply executor; the deferred-work
//! records below are journaled too). [`Host::fail_with_report`] writes what is batched,
//! drops the deferred work (its cause, the drop-in, is put back), replays the journal and
//! returns, besides the report, what it could not undo ([`Undone`]): the commands,
//! package, service, module, mount, grub and initramfs work that already ran, and any file
//! that could not be restored. Without a journal (plan, check, or no label) it is
//! [`Host::finish_with_report`]: the deferred work runs, also for a failed step. On success
//! the journal is deleted once the step's directories are synced.
//!
//! In apply mode deferred work is recorded inside the host root before the drop-in that
//! causes it is written, and the record is removed only after the work succeeded; a record
//! left by a failure or a crash is scheduled again by the next session
//! ([`crate::host::root::deferred`]), so the work is never lost even though the drop-in is already
//! in place. The report lists every action
//! that ran, the deferred ones included, also when the deferred work failed
//! ([`Host::finish_with_report`]).
//!
//! # Durability of the step's file changes
//!
//! In apply mode every file the executor writes is fsynced before its rename, and the
//! directories in which it renamed, created or unlinked entries are fsynced once each when
//! the step ends ([`Host::finish`], [`Host::finish_with_report`], [`Host::finish_step`],
//! [`Host::finish_step_with_report`], and `Drop`), after the deferred work and before the
//! caller writes the step's flag; a failing directory fsync is the step's error. Policy and
//! reasoning: [`crate::host::root::durability`].
//!
//! # Validation before the executor
//!
//! [`Host::submit`] validates an effect the same way in every mode before handing it to the
//! executor, so that a plan never promises what an apply refuses: a file, directory or
//! symlink cannot be created beneath an existing non-directory or a dangling symlink
//! ([`HostError::BadAncestor`]), and `/` itself cannot be removed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::host::effects::context::Context;
pub use crate::host::effects::context::HostOptions;
use crate::host::effects::effect::{Effect, EffectClass, GrubUpdate, InitramfsTool};
use crate::host::effects::exec::{CmdOutput, RunOptions};
use crate::host::effects::executors::Executor;
use crate::host::effects::executors::apply::Apply;
use crate::host::effects::executors::plan::Plan;
use crate::host::effects::executors::recording::Recording;
use crate::host::effects::lines::{Lines, Stamp, View};
pub use crate::host::effects::overlay::Stat;
use crate::host::effects::overlay::{normalize, root_stat};
use crate::host::effects::report::{Action, Change, ExecMode, Item, Journal, Position, Report};
use crate::host::root::deferred::{self, GrubPending};
use crate::host::root::error::{HostError, Result};
use crate::host::root::read::MAX_READ_BYTES;
use crate::host::root::{EntryKind, HostRoot};
use crate::redact::Redactor;

/// What [`Host::view_for_digest`] found at a path.
#[derive(Debug)]
pub(crate) enum ViewedFile {
    /// A planned download: its SHA-256 digest (64 lowercase hex digits), `None` when the
    /// download is not pinned (its digest is unknown until applied).
    Digest(Option<String>),
    /// A planned file: its content.
    Content(bytes::Bytes),
    /// Nothing planned: the host path to open under the root.
    Open(PathBuf),
}

/// One step's session over a host root: the view, the executor and the report.
#[derive(Debug)]
pub struct Host {
    /// The root, options and directories to fsync, lent to the executor.
    cx: Context,
    /// What becomes of each effect ([`crate::host::effects::executors`]), chosen when the
    /// session is built.
    executor: Box<dyn Executor>,
    redactor: Redactor,
    /// The report's content hashes, once per file ([`crate::host::effects::hashes`]).
    pub(crate) hashes: crate::host::effects::hashes::ContentHashes,
    /// Parsed views of the files the line and block functions edited, by normalised host
    /// path ([`crate::host::files::fs`]). Any effect clears them ([`Host::submit`]); in apply mode
    /// a view is trusted only while the file's [`crate::host::effects::lines::Stamp`] is unchanged.
    pub(crate) texts: std::collections::HashMap<PathBuf, crate::host::effects::lines::View>,
    report: Report,
    pub(crate) pending_daemon_reload: bool,
    pub(crate) pending_grub: GrubPending,
    /// A daemon-reload record exists in the root ([`deferred`]).
    recorded_reload: bool,
    /// A grub record exists in the root ([`deferred`]).
    recorded_grub: bool,
    /// An initramfs regeneration is due at the end of the step ([`crate::host::kernel::kmod`]).
    pub(crate) pending_initramfs: bool,
    /// An initramfs record exists in the root ([`deferred`]).
    recorded_initramfs: bool,
    finished: bool,
    /// The script position of the host call being served ([`Host::set_position`]).
    position: Option<Position>,
    /// The step's ordered list, shared with a recording output ([`Host::journal`]).
    journal: Journal,
    /// A package repository changed in this session: the next `pkg::install` refreshes the
    /// index ([`Host::mark_package_index_stale`]).
    pub(crate) package_index_stale: bool,
    /// Set by the line functions for the one write they submit next: what its content adds
    /// to the old ([`crate::host::effects::textdiff::Appended`]); taken by [`Host::submit`].
    pub(crate) appended: Option<crate::host::effects::textdiff::Appended>,
    /// Apply mode: the pending write of batched line edits ([`crate::host::effects::batch`]).
    pub(crate) batch: crate::host::effects::batch::Batch,
    /// Set by the line functions for the one write they submit next: record its change but
    /// hold the write for a batch ([`crate::host::effects::batch`]); taken by [`Host::submit`].
    pub(crate) hold_write: bool,
    /// Every effect submitted, in order, once [`Host::record_effects`] was called: the
    /// recording double tests assert an area's effects with.
    recorded: Option<Vec<Effect>>,
    /// Lines saying what this session's start undid ([`Host::recovered`]).
    recovered: Vec<String>,
}

impl Host {
    /// fsync the directories the session's effects changed entries in, once each
    /// ([`DirSyncs::sync`](crate::host::root::durability::DirSyncs::sync)): called when a step
    /// ends, before the caller writes its flag.
    ///
    /// # Errors
    /// As `DirSyncs::sync`.
    pub(crate) fn sync_dirs(&self) -> Result<()> {
        Ok(self.cx.dir_syncs.sync(self.root())?)
    }

    /// A session over `root` in `mode`. Deferred work recorded by an earlier session that
    /// could not run it ([`crate::host::root::deferred`]) is scheduled again: it runs at this
    /// session's end in apply mode, and shows up as an action in plan and check mode.
    pub fn new(root: HostRoot, mode: ExecMode, options: HostOptions) -> Host {
        let executor: Box<dyn Executor> = match (mode, &options.undo) {
            (ExecMode::Apply, Some(label)) => Box::new(Apply::journaled(label)),
            (ExecMode::Apply, None) => Box::new(Apply::default()),
            (ExecMode::Plan | ExecMode::Check, _) => Box::new(Plan::new(mode)),
        };
        Host::with_executor(root, executor, options)
    }

    /// A session over `root` whose executor is the recording double (`Recording`): nothing
    /// on the host changes (no locks, batches or deferred-work records either), reads go to
    /// the real root, [`Host::recorded_effects`] lists every effect submitted. It reports as
    /// apply mode.
    pub fn recording(root: HostRoot, options: HostOptions) -> Host {
        Host::with_executor(root, Box::new(Recording::default()), options)
    }

    /// A session over `root` with `executor` (module docs of
    /// [`crate::host::effects::executors`]); deferred work is scheduled again as in
    /// [`Host::new`].
    pub(crate) fn with_executor(
        root: HostRoot,
        executor: Box<dyn Executor>,
        mut options: HostOptions,
    ) -> Host {
        let mode = executor.mode();
        let redactor = options.redactor.take().unwrap_or_default();
        redactor.add_from_env(&options.env);
        // A journal left by a step that did not end is undone before this session reads
        // anything (its deferred-work records included).
        let recovered = match executor.journals() {
            true => crate::host::effects::journal::recover(&root).unwrap_or_else(|e| {
                vec![format!(
                    "not undone: the undo journals under {}: {}",
                    crate::host::effects::journal::DIR,
                    crate::chain::render(&e)
                )]
            }),
            false => Vec::new(),
        };
        let (recorded_reload, grub) = deferred::load(&root);
        let recorded_initramfs = deferred::initramfs_recorded(&root);
        Host {
            cx: Context::new(root, options),
            executor,
            redactor,
            texts: std::collections::HashMap::new(),
            hashes: Default::default(),
            report: Report::new(mode),
            pending_daemon_reload: recorded_reload,
            recorded_grub: grub.is_some(),
            pending_grub: grub.unwrap_or_default(),
            recorded_reload,
            pending_initramfs: recorded_initramfs,
            recorded_initramfs,
            finished: false,
            position: None,
            journal: Journal::default(),
            package_index_stale: false,
            appended: None,
            batch: Default::default(),
            hold_write: false,
            recorded: None,
            recovered,
        }
    }

    /// What the session's start undid of journals left by steps that did not end
    /// ([`crate::host::effects::journal::recover`]), one line each, to log before the step.
    pub fn recovered(&self) -> &[String] {
        &self.recovered
    }

    /// Record every effect submitted from now on ([`Host::recorded_effects`]), in addition
    /// to executing it as the mode says (in plan mode nothing on the host changes, and later
    /// reads of the session see the recorded effects through the read view).
    pub fn record_effects(&mut self) {
        self.recorded.get_or_insert_with(Vec::new);
    }

    /// The effects submitted, in order: all of them in a [`Host::recording`] session, else
    /// those since [`Host::record_effects`] (empty when not recording).
    pub fn recorded_effects(&self) -> &[Effect] {
        self.executor
            .recorded()
            .or(self.recorded.as_deref())
            .unwrap_or_default()
    }

    /// The execution mode.
    pub fn mode(&self) -> ExecMode {
        self.executor.mode()
    }

    /// The host root, for reading or writing it directly. Pending batched line edits are
    /// written first (`host::effects::batch`; a failure is returned by the next fallible
    /// call of the session), so a direct read sees them.
    pub fn root(&self) -> &HostRoot {
        self.batch.flush(&self.cx, &*self.executor);
        &self.cx.root
    }

    /// The directories whose entries the session's effects changed, fsynced when the step
    /// ends ([`crate::host::root::durability`]).
    #[cfg(test)]
    pub(crate) fn dir_syncs(&self) -> &crate::host::root::durability::DirSyncs {
        &self.cx.dir_syncs
    }

    /// The session's options.
    pub fn options(&self) -> &HostOptions {
        &self.cx.opts
    }

    /// The shared redactor (every secret read in this session is in it).
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// `env(name)`: the step environment's value (last definition wins).
    pub fn env(&self, name: &str) -> Option<String> {
        self.cx
            .opts
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    /// `changed()`: how many changes this session has made (or planned) so far.
    pub fn changed(&self) -> usize {
        self.report.changes.len()
    }

    /// The report so far (without the `after` hashes, which are set when the session or
    /// step ends: `src/host/hashes.rs`).
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// What remains of the deadline (zero when passed), `None` without a deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.cx.remaining()
    }

    /// Set the script position of the host call being served (the binding layer sets it
    /// before each call and clears it after): effects submitted meanwhile carry it.
    pub fn set_position(&mut self, position: Option<Position>) {
        self.position = position;
    }

    /// The step's ordered list (changes, actions, interrupts as they are submitted). Give a
    /// clone to a recording output so script output lands in it in order; the report gets
    /// the items when the step ends ([`Report::items`]).
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Mark the package index stale (a repository definition or key changed): the next
    /// `pkg::install` of this session that installs something refreshes it first
    /// (`apt-get update`, `dnf makecache`, ...), in every mode.
    pub fn mark_package_index_stale(&mut self) {
        self.package_index_stale = true;
    }

    /// Count a mutating call that found the desired state already in place.
    pub fn note_unchanged(&mut self) {
        self.report.unchanged += 1;
    }

    /// Hand one effect to the executor (see the module docs). Returns the command output for
    /// [`Effect::Command`] (planned in plan/check mode), `None` otherwise.
    ///
    /// # Errors
    /// In apply mode, whatever performing it fails with; in plan/check mode, failures to
    /// read the current state for the diff.
    pub fn submit(&mut self, effect: Effect) -> Result<Option<CmdOutput>> {
        if let Some(r) = &mut self.recorded {
            r.push(effect.clone());
        }
        let appended = self.appended.take();
        let hold =
            std::mem::take(&mut self.hold_write) && matches!(effect, Effect::WriteFile { .. });
        self.settle_batch()?;
        // Whatever the effect is, the line views may no longer show the files (the line
        // functions put back the view of the file they wrote).
        self.texts.clear();
        if let Effect::Interrupt(i) = effect {
            self.executor
                .execute(&self.cx, &Effect::Interrupt(i.clone()))?;
            self.journal.push(Item::Interrupt {
                index: self.report.interrupts.len(),
                position: self.position.clone(),
            });
            self.report.interrupts.push(i);
            return Ok(None);
        }
        self.validate(&effect)?;
        // A daemon-reload (explicit or scheduled) satisfies a scheduled one.
        let reload = matches!(effect, Effect::DaemonReload);
        let was_pending = reload && std::mem::take(&mut self.pending_daemon_reload);
        let with_diff = self.renders_diffs();
        let d = self.describe(&effect, with_diff, appended.as_ref())?;
        let before = self.hash_before(&effect)?;
        let out = if hold {
            // The line functions' batched write ([`crate::host::effects::batch`]).
            None
        } else {
            let r = self.executor.execute(&self.cx, &effect);
            if reload && self.executor.changes_host() {
                self.settle_reload_record(r.is_ok(), was_pending);
            }
            r?
        };
        let position = self.position.clone();
        match effect.class() {
            EffectClass::Change => {
                let index = self.report.changes.len();
                self.journal.push(Item::Change(index));
                self.report.changes.push(Change {
                    kind: effect.kind().name().into(),
                    target: effect.target(),
                    summary: d.summary,
                    diff: d.diff,
                    before,
                    after: d.after,
                    mkdir: d.mkdir,
                    position,
                });
                // `after` is filled when the report is taken ([`crate::host::effects::hashes`]).
                self.hashes.note(index, effect);
            }
            EffectClass::Action => {
                self.journal.push(Item::Action(self.report.actions.len()));
                self.report.actions.push(Action {
                    kind: effect.kind().name().into(),
                    target: effect.target(),
                    summary: d.summary,
                    position,
                });
            }
            EffectClass::Interrupt => {}
        }
        Ok(out)
    }

    /// Schedule one (coalesced) `systemctl daemon-reload`.
    pub fn schedule_daemon_reload(&mut self) {
        self.pending_daemon_reload = true;
    }

    /// Write-ahead for a drop-in change: in apply mode, make the daemon-reload record durable
    /// ([`deferred::record_daemon_reload`]: atomic write, fsync) before the drop-in is
    /// written. It is removed once a reload of this (or a later) session succeeded. Written
    /// for every change, so a record another session removed meanwhile is put back. Nothing
    /// in plan and check mode.
    ///
    /// # Errors
    /// Creating the directory or writing the record failed (the drop-in must then not be
    /// written).
    pub(crate) fn write_ahead_daemon_reload(&mut self) -> Result<()> {
        self.settle_batch()?;
        if self.executor.changes_host() {
            self.executor
                .journal_path(&self.cx, &deferred::daemon_reload_path())?;
            deferred::record_daemon_reload(&self.cx.root)?;
            self.recorded_reload = true;
        }
        Ok(())
    }

    /// Write-ahead for a grub drop-in change: make `pending` the session's pending grub work
    /// and, in apply mode, the content of the grub record (durable before the drop-in is
    /// written; removed once the regeneration succeeded). Returns what to give
    /// [`Host::restore_grub`] when the drop-in write then fails.
    ///
    /// # Errors
    /// Writing the record failed (nothing is changed then).
    pub(crate) fn schedule_grub_ahead(
        &mut self,
        pending: GrubPending,
    ) -> Result<(GrubPending, bool)> {
        self.settle_batch()?;
        if self.executor.changes_host() {
            self.executor
                .journal_path(&self.cx, &deferred::grub_path())?;
            deferred::record_grub(&self.cx.root, &pending)?;
        }
        let recorded = self.recorded_grub || self.executor.changes_host();
        let prev_recorded = std::mem::replace(&mut self.recorded_grub, recorded);
        let prev = std::mem::replace(&mut self.pending_grub, pending);
        Ok((prev, prev_recorded))
    }

    /// Undo [`Host::schedule_grub_ahead`] after the drop-in write failed: the previous
    /// pending work, and in apply mode the previous record (or none). Best effort.
    pub(crate) fn restore_grub(&mut self, (pending, recorded): (GrubPending, bool)) {
        if self.executor.changes_host() {
            let undone = if recorded {
                deferred::record_grub(&self.cx.root, &pending)
            } else {
                deferred::clear(&self.cx.root, &deferred::grub_path())
            };
            if undone.is_ok() {
                self.recorded_grub = recorded;
            }
        }
        self.pending_grub = pending;
    }

    /// Write-ahead for a `kmod::` blacklist or options file change: schedule one initramfs
    /// regeneration at the end of the step and, in apply mode, make the initramfs record
    /// durable ([`deferred::record_initramfs`]) before the file is written. Returns what to
    /// give [`Host::restore_initramfs`] when the write then fails.
    ///
    /// # Errors
    /// Writing the record failed (nothing is scheduled then; the file must not be written).
    pub(crate) fn schedule_initramfs_ahead(&mut self) -> Result<(bool, bool)> {
        self.settle_batch()?;
        if self.executor.changes_host() {
            self.executor
                .journal_path(&self.cx, &deferred::initramfs_path())?;
            deferred::record_initramfs(&self.cx.root)?;
        }
        let prev = (self.pending_initramfs, self.recorded_initramfs);
        self.pending_initramfs = true;
        self.recorded_initramfs = self.recorded_initramfs || self.executor.changes_host();
        Ok(prev)
    }

    /// Undo [`Host::schedule_initramfs_ahead`] after the file write failed: the previous
    /// pending state and, in apply mode, no record when there was none before. Best effort.
    pub(crate) fn restore_initramfs(&mut self, (pending, recorded): (bool, bool)) {
        if self.executor.changes_host()
            && !recorded
            && deferred::clear(&self.cx.root, &deferred::initramfs_path()).is_ok()
        {
            self.recorded_initramfs = false;
        }
        self.pending_initramfs = pending;
    }

    /// Run a scheduled daemon-reload now (before a `service::` call).
    ///
    /// # Errors
    /// The reload's failure (it is then no longer pending in this session; in apply mode it
    /// is recorded for the next one, see [`crate::host::root::deferred`]).
    pub fn flush_daemon_reload(&mut self) -> Result<()> {
        if self.pending_daemon_reload {
            self.submit(Effect::DaemonReload)?;
        }
        Ok(())
    }

    /// After a daemon-reload ran in apply mode: drop the record when it succeeded, record it
    /// when a scheduled (or recorded) one failed.
    fn settle_reload_record(&mut self, ok: bool, was_pending: bool) {
        if ok {
            if self.recorded_reload
                && deferred::clear(&self.cx.root, &deferred::daemon_reload_path()).is_ok()
            {
                self.recorded_reload = false;
            }
        } else if (was_pending || self.recorded_reload)
            && deferred::record_daemon_reload(&self.cx.root).is_ok()
        {
            self.recorded_reload = true;
        }
    }

    fn run_deferred(&mut self) -> Result<()> {
        let reload = self.flush_daemon_reload();
        let grub = std::mem::take(&mut self.pending_grub);
        let effect = if !grub.add.is_empty() || !grub.remove.is_empty() {
            Some(GrubUpdate::Grubby {
                add: grub.add.clone(),
                remove: grub.remove.clone(),
            })
        } else if grub.regenerate {
            Some(GrubUpdate::UpdateGrub)
        } else {
            None
        };
        let grub_result = match effect {
            Some(g) => {
                let r = self.submit(Effect::GrubUpdate(g)).map(|_| ());
                if self.executor.changes_host() {
                    if r.is_ok() {
                        if self.recorded_grub
                            && deferred::clear(&self.cx.root, &deferred::grub_path()).is_ok()
                        {
                            self.recorded_grub = false;
                        }
                    } else if deferred::record_grub(&self.cx.root, &grub).is_ok() {
                        self.recorded_grub = true;
                    }
                }
                r
            }
            None => Ok(()),
        };
        reload.and(grub_result).and(self.run_initramfs())
    }

    /// The deferred initramfs regeneration ([`crate::host::kernel::kmod`]): `dracut -f` on the rhel
    /// and fedora families, else `update-initramfs -u`; the record is dropped once it
    /// succeeded, kept (or written) when it failed.
    fn run_initramfs(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.pending_initramfs) {
            return Ok(());
        }
        let r = crate::host::effects::os_release::release_with(|p| self.view_read(p))
            .map(|r| crate::host::effects::os_release::family_from(&r))
            .map(|f| InitramfsTool::for_family(&f))
            .and_then(|tool| self.submit(Effect::InitramfsUpdate(tool)).map(|_| ()));
        if self.executor.changes_host() {
            if r.is_ok() {
                if self.recorded_initramfs
                    && deferred::clear(&self.cx.root, &deferred::initramfs_path()).is_ok()
                {
                    self.recorded_initramfs = false;
                }
            } else if deferred::record_initramfs(&self.cx.root).is_ok() {
                self.recorded_initramfs = true;
            }
        }
        r
    }

    /// End the session: run pending deferred work (daemon-reload, grub and initramfs
    /// regeneration) and return the report. Call it whether the step succeeded or not.
    ///
    /// # Errors
    /// The first failure of the deferred work (the rest is still attempted). Use
    /// [`Host::finish_with_report`] to keep the report then.
    pub fn finish(self) -> Result<Report> {
        let (report, result) = self.finish_with_report();
        result.map(|()| report)
    }

    /// [`Host::finish`] that returns the report also when the deferred work failed: it lists
    /// every action that ran, the deferred ones that succeeded included.
    pub fn finish_with_report(mut self) -> (Report, Result<()>) {
        self.finished = true;
        let flushed = self.settle_batch_at_step_end();
        let result = flushed.and(self.run_deferred()).and(self.sync_dirs());
        let result = result.and_then(|()| self.executor.commit_step(&self.cx));
        let fresh = Report::new(self.mode());
        let mut report = std::mem::replace(&mut self.report, fresh);
        self.hashes.fill(&mut report.changes, &self.redactor);
        report.items = self.journal.take();
        (report, result)
    }

    /// End one step of a session that serves several steps (`skyhook-run --package` in a
    /// dry run): run pending deferred work and return this step's report, leaving a fresh
    /// report for the next step. The plan overlay is kept, so later steps see the planned
    /// effects of earlier ones. The deadline is cleared: the next run sets its own
    /// ([`Host::limit_deadline`]).
    ///
    /// # Errors
    /// The first failure of the deferred work (use [`Host::finish_step_with_report`] to keep
    /// the step's report then).
    pub fn finish_step(&mut self) -> Result<Report> {
        let (report, result) = self.finish_step_with_report();
        result.map(|()| report)
    }

    /// [`Host::finish_step`] that returns the step's report also when the deferred work
    /// failed (as [`Host::finish_with_report`]).
    pub fn finish_step_with_report(&mut self) -> (Report, Result<()>) {
        let flushed = self.settle_batch_at_step_end();
        let deferred = flushed.and(self.run_deferred()).and(self.sync_dirs());
        let deferred = deferred.and_then(|()| self.executor.commit_step(&self.cx));
        let fresh = Report::new(self.mode());
        let mut report = std::mem::replace(&mut self.report, fresh);
        self.hashes.fill(&mut report.changes, &self.redactor);
        report.items = self.journal.take();
        self.cx.opts.deadline = None;
        (report, deferred)
    }

    /// End a failed step's session (module docs, "A failed step"): with an undo journal,
    /// the step's files are put back and its deferred work is not run; without one
    /// (plan, check, an apply session without [`HostOptions::undo`]) exactly
    /// [`Host::finish_with_report`].
    pub fn fail_with_report(mut self) -> (Report, Undone, Result<()>) {
        if !self.executor.journals() {
            let (report, result) = self.finish_with_report();
            return (report, Undone::default(), result);
        }
        self.finished = true;
        let (undone, result) = self.undo_step();
        let fresh = Report::new(self.mode());
        let mut report = std::mem::replace(&mut self.report, fresh);
        self.hashes.fill(&mut report.changes, &self.redactor);
        report.items = self.journal.take();
        let undone = Undone {
            not_undone: not_undoable(&report).into_iter().chain(undone).collect(),
        };
        (report, undone, result)
    }

    /// [`Host::fail_with_report`] for one step of a session that serves several
    /// ([`Host::finish_step_with_report`]).
    pub fn fail_step_with_report(&mut self) -> (Report, Undone, Result<()>) {
        if !self.executor.journals() {
            let (report, result) = self.finish_step_with_report();
            return (report, Undone::default(), result);
        }
        let (undone, result) = self.undo_step();
        let fresh = Report::new(self.mode());
        let mut report = std::mem::replace(&mut self.report, fresh);
        self.hashes.fill(&mut report.changes, &self.redactor);
        report.items = self.journal.take();
        self.cx.opts.deadline = None;
        let undone = Undone {
            not_undone: not_undoable(&report).into_iter().chain(undone).collect(),
        };
        (report, undone, result)
    }

    /// Write what is batched (so the journal holds its before-state), drop the deferred
    /// work, replay the journal. Returns the files that could not be put back, and the
    /// first failure of the batch's write, the directory fsyncs or the journal.
    fn undo_step(&mut self) -> (Vec<String>, Result<()>) {
        // A batch that fails to write changed nothing; its error is reported as at the end
        // of any step.
        let settled = self.settle_batch_at_step_end();
        self.pending_daemon_reload = false;
        self.pending_grub = GrubPending::default();
        self.pending_initramfs = false;
        let synced = self.sync_dirs();
        match self.executor.undo(&self.cx) {
            Ok(failed) => (failed, settled.and(synced)),
            Err(e) => (Vec::new(), settled.and(synced).and(Err(e))),
        }
    }

    /// The checks of an effect that do not depend on the mode (module docs).
    fn validate(&self, effect: &Effect) -> Result<()> {
        match effect {
            Effect::WriteFile { path, .. }
            | Effect::CopyFile { path, .. }
            | Effect::Symlink { link: path, .. } => self.check_ancestors(path, path),
            Effect::Mkdir { path, .. } => {
                self.check_ancestors(path, path)?;
                if self.view_stat(path, true)?.is_none() {
                    self.check_not_dangling(path, path)?;
                }
                Ok(())
            }
            Effect::RemoveAll { path } | Effect::RemoveFile { path }
                if normalize(path) == Path::new("/") =>
            {
                Err(HostError::Invalid {
                    what: "path argument",
                    message: format!(
                        "{} path is /",
                        if matches!(effect, Effect::RemoveAll { .. }) {
                            "remove all"
                        } else {
                            "remove"
                        }
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    /// Every existing ancestor of `path` (as the session sees it) must be a directory; the
    /// first missing one ends the check (the rest will be created). Creating functions call
    /// it before reading `path` itself, whose resolution would fail with a less helpful
    /// "not a directory".
    ///
    /// # Errors
    /// [`HostError::BadAncestor`]; resolution failures.
    pub(crate) fn check_creatable(&self, path: &Path) -> Result<()> {
        self.check_ancestors(path, path)
    }

    fn check_ancestors(&self, path: &Path, reported: &Path) -> Result<()> {
        let norm = normalize(path);
        let ancestors: Vec<&Path> = norm.ancestors().skip(1).collect();
        for anc in ancestors.into_iter().rev() {
            match self.view_stat(anc, true)? {
                Some(s) if s.kind == "dir" => {}
                Some(_) => {
                    return Err(HostError::BadAncestor {
                        path: reported.to_path_buf(),
                        ancestor: anc.to_path_buf(),
                        reason: "exists and is not a directory".into(),
                    });
                }
                None => return self.check_not_dangling(anc, reported),
            }
        }
        Ok(())
    }

    /// `p` (missing when followed) must not be a dangling symlink.
    fn check_not_dangling(&self, p: &Path, reported: &Path) -> Result<()> {
        if self
            .view_stat(p, false)?
            .is_some_and(|s| s.kind == "symlink")
        {
            let target = self
                .view_readlink(p)?
                .map_or_else(String::new, |t| format!(" {}", t.display()));
            return Err(HostError::BadAncestor {
                path: reported.to_path_buf(),
                ancestor: p.to_path_buf(),
                reason: format!("is a dangling symlink (its target{target} does not exist)"),
            });
        }
        Ok(())
    }

    // ---- the view: reads that see planned effects in plan/check mode ----

    /// Metadata of `path` as the session sees it; `follow` follows a final symlink.
    pub(crate) fn view_stat(&self, path: &Path, follow: bool) -> Result<Option<Stat>> {
        self.batch.flush_checked(&self.cx, &*self.executor)?;
        match self.executor.overlay() {
            Some(overlay) => overlay.stat(&self.cx.root, path, follow),
            None => root_stat(&self.cx.root, path, follow),
        }
    }

    /// The session's view of the text file at `path` (module [`crate::host::effects::lines`]), taken out
    /// of the session's cache when it still shows the file, else read and parsed. In apply mode
    /// the file is `stat`ed first and a cached view is used only when its [`Stamp`] equals the
    /// file's, so a change by another process (or a command of this step) is always seen; in
    /// plan and check mode a cached view is valid until the session's next effect (which clears
    /// the cache), and a file is read through the overlay.
    ///
    /// # Errors
    /// A directory at `path`; [`HostError::NotText`]; resolution or read failures.
    pub(crate) fn take_line_view(&mut self, path: &Path, key: &Path) -> Result<View> {
        if self.plans() {
            if let Some(v) = self.texts.remove(key) {
                return Ok(v);
            }
            let content = self.view_read(path)?;
            let exists = content.is_some();
            let lines = Lines::parse(crate::host::root::read::text(
                path,
                content.unwrap_or_default(),
            )?);
            return Ok(View {
                exists,
                lines,
                stamp: None,
            });
        }
        let stamp = match self.root().metadata(path)? {
            None => None,
            Some(m) if m.is_dir() => {
                return Err(HostError::WrongKind {
                    path: path.to_path_buf(),
                    what: "is a directory",
                });
            }
            Some(m) => {
                crate::host::root::read::check_regular(path, &m)?;
                Some(Stamp::of(&m))
            }
        };
        if let Some(v) = self.texts.remove(key)
            && v.stamp == stamp
            && v.exists == stamp.is_some()
        {
            return Ok(v);
        }
        // Read after the stat: content newer than the stamp only causes a re-read next time. Read
        // as `read_whole` does: a regular file, non-blocking, at most `MAX_READ_BYTES`.
        let content = match stamp {
            None => None,
            Some(_) => Some(self.root().read_regular(path, MAX_READ_BYTES)?),
        };
        let exists = content.is_some();
        Ok(View {
            exists,
            lines: Lines::parse(crate::host::root::read::text(
                path,
                content.unwrap_or_default(),
            )?),
            stamp,
        })
    }

    /// Whether the session renders the diffs of its changes: plan and check mode, and apply
    /// with [`HostOptions::diffs`].
    pub(crate) fn renders_diffs(&self) -> bool {
        self.plans() || self.cx.opts.diffs
    }

    /// Whether the session's executor plans (plan and check mode): its reads see the
    /// effects through the executor's overlay.
    pub(crate) fn plans(&self) -> bool {
        self.executor.overlay().is_some()
    }

    /// The executor's read overlay (plan and check mode); `None` when reads go to the real
    /// root.
    pub(crate) fn overlay(&self) -> Option<&crate::host::effects::overlay::Overlay> {
        self.executor.overlay()
    }

    /// Where the read view finds the content of the regular file at `path` for a digest: in
    /// plan and check mode a planned download gives its digest and a planned file its
    /// content; otherwise the host path to open under the root (the overlay's resolved key
    /// in plan and check mode, `path` itself in apply).
    ///
    /// # Errors
    /// Resolving the path through the planned symlinks.
    pub(crate) fn view_for_digest(&self, path: &Path) -> Result<ViewedFile> {
        let Some(overlay) = self.executor.overlay() else {
            return Ok(ViewedFile::Open(path.to_path_buf()));
        };
        self.batch.flush_checked(&self.cx, &*self.executor)?;
        let key = overlay.key(&self.cx.root, path, true)?;
        Ok(match overlay.lookup(&key) {
            Some(crate::host::effects::overlay::Node::Download { sha256, .. }) => {
                ViewedFile::Digest(sha256.clone())
            }
            Some(crate::host::effects::overlay::Node::File { content, .. }) => {
                ViewedFile::Content(content.clone())
            }
            _ => ViewedFile::Open(key),
        })
    }

    /// The SHA-256 (64 lowercase hex digits) of the regular file at `path` as the session
    /// sees it, streamed from the root (never read whole); `None` when there is no regular
    /// file there or its digest is unknown (a download the plan only plans, unpinned).
    ///
    /// # Errors
    /// Resolution or read failures; a FIFO or device at `path` (not opened for reading).
    pub(crate) fn view_digest(&self, path: &Path) -> Result<Option<String>> {
        if self.view_stat(path, true)?.is_none_or(|s| s.kind != "file") {
            return Ok(None);
        }
        Ok(match self.view_for_digest(path)? {
            ViewedFile::Digest(d) => d,
            ViewedFile::Content(c) => Some(crate::host::root::digest::sha256_tag(&c)[7..].into()),
            ViewedFile::Open(key) => {
                let mut f = self.cx.root.open_regular(&key)?;
                let (_, d) = crate::host::root::digest::sha256_stream(&mut f).map_err(|e| {
                    crate::host::root::RootError {
                        op: "read",
                        path: path.to_path_buf(),
                        root: self.cx.root.mount().to_path_buf(),
                        source: e,
                    }
                })?;
                Some(d)
            }
        })
    }

    /// The read view of a unit's state (active, enabled) as earlier effects of this session
    /// planned it; `(None, None)` in apply mode, where the host itself answers.
    pub(crate) fn planned_service(&self, name: &str) -> (Option<bool>, Option<bool>) {
        self.executor
            .overlay()
            .and_then(|o| o.services.get(name).copied())
            .unwrap_or_default()
    }

    /// The read view of a package's presence (`name` as given to `pkg::install` or
    /// `pkg::remove`) as earlier effects of this session planned it; `None` in apply mode or
    /// when nothing was planned.
    pub(crate) fn planned_package(&self, name: &str) -> Option<bool> {
        self.executor
            .overlay()
            .and_then(|o| o.packages.get(name).copied())
    }

    /// The read view of a package hold as earlier effects of this session planned it; `None`
    /// in apply mode or when nothing was planned.
    pub(crate) fn planned_hold(&self, name: &str) -> Option<bool> {
        self.executor
            .overlay()
            .and_then(|o| o.holds.get(name).copied())
    }

    /// Whether an earlier effect of this session planned to load kernel module `name` (as
    /// the kernel names it, `-` read as `_`); always false in apply mode.
    pub(crate) fn planned_module_load(&self, name: &str) -> bool {
        self.executor
            .overlay()
            .is_some_and(|o| o.modules.contains(name))
    }

    /// The read view of a mount point (normalised host path) as earlier effects of this
    /// session planned it: mounted (`true`) or unmounted; `None` in apply mode or when
    /// nothing was planned.
    pub(crate) fn planned_mount(&self, path: &Path) -> Option<bool> {
        self.executor
            .overlay()
            .and_then(|o| o.mounts.get(path).copied())
    }

    /// Content of the file at `path` (following symlinks); `None` when absent. A file on disk
    /// is read with [`crate::host::root::read::read_whole`]: regular files of at most
    /// [`crate::host::root::read::MAX_READ_BYTES`] only.
    ///
    /// # Errors
    /// [`HostError::WrongKind`] for a directory; [`HostError::NotRegular`],
    /// [`HostError::FileTooLarge`]; resolution or read failures.
    pub(crate) fn view_read(&self, path: &Path) -> Result<Option<Vec<u8>>> {
        self.batch.flush_checked(&self.cx, &*self.executor)?;
        match self.executor.overlay() {
            Some(overlay) => overlay.read(&self.cx.root, path),
            None => crate::host::root::read::read_whole(&self.cx.root, path, path),
        }
    }

    /// Entries of directory `dir` (name, kind), sorted by name; `None` when absent.
    pub(crate) fn view_list(&self, dir: &Path) -> Result<Option<Vec<(String, EntryKind)>>> {
        self.batch.flush_checked(&self.cx, &*self.executor)?;
        let overlay = self.executor.overlay();
        let key = match overlay {
            Some(o) => o.key(&self.cx.root, dir, true)?,
            None => dir.to_path_buf(),
        };
        let stat = self.view_stat(&key, true)?;
        match stat {
            None => return Ok(None),
            Some(s) if s.kind != "dir" => {
                return Err(HostError::WrongKind {
                    path: dir.to_path_buf(),
                    what: "is not a directory",
                });
            }
            Some(_) => {}
        }
        let mut out: BTreeMap<String, EntryKind> = BTreeMap::new();
        let fresh = overlay.is_some_and(|o| o.is_fresh_dir(&key));
        if !fresh
            && let Some(m) = self.cx.root.metadata(&key)?
            && m.is_dir()
        {
            for e in self.cx.root.read_dir(&key)? {
                out.insert(e.name.to_string_lossy().into_owned(), e.kind);
            }
        }
        if let Some(o) = overlay {
            out.retain(|name, _| o.lookup(&key.join(name)).is_none_or(|n| !n.is_absent()));
            for (name, kind) in o.children(&key) {
                out.insert(name, kind);
            }
        }
        Ok(Some(out.into_iter().collect()))
    }

    /// The content of symlink `path` as the session sees it; `None` when it is not a symlink.
    ///
    /// # Errors
    /// Resolution or read failures.
    pub(crate) fn view_readlink(&self, path: &Path) -> Result<Option<PathBuf>> {
        if let Some(overlay) = self.executor.overlay() {
            self.batch.flush_checked(&self.cx, &*self.executor)?;
            return overlay.readlink(&self.cx.root, path);
        }
        let root = self.root();
        match root.symlink_metadata(path)? {
            Some(m) if m.file_type().is_symlink() => Ok(Some(root.read_link(path)?)),
            _ => Ok(None),
        }
    }

    /// In apply mode, take the cross-process lock of the file at `path` for a
    /// read-compare-write ([`crate::host::root::pathlock`]); the caller must read the current
    /// content only after this returns. `None` in plan and check mode (nothing is written,
    /// and the overlay is private to the session); there the lock directory the apply would
    /// create is planned instead ([`crate::host::effects::overlay::Overlay::plan_lock_dir`]), so later reads agree.
    ///
    /// # Errors
    /// Creating, opening or locking the lock file.
    pub(crate) fn lock_for_update(
        &mut self,
        path: &Path,
    ) -> Result<Option<crate::host::root::pathlock::PathLock>> {
        // At most one path lock per session: a batch's lock is released first.
        self.settle_batch()?;
        if !self.executor.changes_host() {
            if let Some(overlay) = self.executor.overlay_mut() {
                overlay.plan_lock_dir(&self.cx.root)?;
            }
            return Ok(None);
        }
        let key = self.lock_key(path);
        Ok(Some(crate::host::root::pathlock::lock(
            &self.cx.root,
            &key,
        )?))
    }

    /// Run `update`, a read-modify-write of the files at `paths` through the session, where
    /// the apply executor holds the paths' locks ([`Host::lock_for_update`], in order) and
    /// then `lock`'s guard (a lock of the files' own tools, such as `/etc/.pwd.lock`) across
    /// it, released in the reverse order; `update` is told `true`, so it reads the files
    /// again under the locks. In plan and check mode nothing is locked: the lock directory
    /// the apply would create is planned and `update` is told `false` (what it read before
    /// still holds).
    ///
    /// # Errors
    /// Taking a lock; whatever `update` fails with.
    pub(crate) fn locked_update<G, T>(
        &mut self,
        paths: &[&Path],
        lock: impl FnOnce(&HostRoot) -> Result<G>,
        update: impl FnOnce(&mut Host, bool) -> Result<T>,
    ) -> Result<T> {
        if !self.executor.changes_host() {
            if let Some(overlay) = self.executor.overlay_mut() {
                overlay.plan_lock_dir(&self.cx.root)?;
            }
            return update(self, false);
        }
        let mut held = Vec::new();
        for p in paths {
            if let Some(l) = self.lock_for_update(p)? {
                held.push(l);
            }
        }
        let guard = lock(&self.cx.root)?;
        let r = update(self, true);
        drop(guard);
        drop(held);
        r
    }

    /// The path a lock of `path` is keyed by: the canonical parent directory plus the final
    /// name, following a final symlink (at most 40 hops) the same way. Never the canonical
    /// form of the file itself: resolving an open file's path races with the rename of a
    /// concurrent writer (the kernel then reports the replaced inode as `... (deleted)`),
    /// while directories are not replaced. A path that does not resolve is keyed by what
    /// resolved of it; the read or write that follows reports the real error.
    fn lock_key(&self, path: &Path) -> PathBuf {
        // A `..` resolves physically (after a symlink before it): start from the real parent.
        let mut cur = match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) if path.components().any(|c| c.as_os_str() == "..") => {
                match self.cx.root.canonical(parent) {
                    Ok(Some(d)) => d.join(name),
                    _ => normalize(path),
                }
            }
            _ => normalize(path),
        };
        for _ in 0..40 {
            let (Some(parent), Some(name)) = (cur.parent(), cur.file_name()) else {
                return cur;
            };
            let dir = match self.cx.root.canonical(parent) {
                Ok(Some(d)) => d,
                _ => parent.to_path_buf(),
            };
            let at = dir.join(name);
            match self.cx.root.symlink_metadata(&at) {
                Ok(Some(m)) if m.file_type().is_symlink() => match self.cx.root.read_link(&at) {
                    // An absolute target is a host path (chroot semantics): `join` keeps it.
                    Ok(target) => cur = normalize(&dir.join(target)),
                    Err(_) => return at,
                },
                _ => return at,
            }
        }
        cur
    }

    /// Record a change that is not submitted: one more call of a batched line edit
    /// ([`crate::host::effects::batch`]), at the current script position. Returns its index.
    pub(crate) fn record_change(&mut self, change: Change) -> usize {
        let index = self.report.changes.len();
        self.journal.push(Item::Change(index));
        self.report.changes.push(Change {
            position: self.position.clone(),
            ..change
        });
        index
    }

    /// Run a command now, in every mode (queries, guards, and what the apply executor
    /// runs): pending batched line edits are written first, since the command may read their
    /// files ([`crate::host::effects::batch`]).
    ///
    /// # Errors
    /// A failed flush of the batch; as [`crate::host::effects::exec::exec`].
    pub(crate) fn exec(&self, argv: &[String], opts: &RunOptions) -> Result<CmdOutput> {
        self.flush_batch()?;
        crate::host::effects::exec::exec(&self.cx, argv, opts)
    }

    /// Tighten the session's deadline to `deadline` (the earlier one wins), e.g. to a script
    /// run's deadline, so that the default timeout of every command (scripts' and internal
    /// ones) never outlives the run.
    pub fn limit_deadline(&mut self, deadline: Instant) {
        self.cx.opts.deadline = Some(self.cx.opts.deadline.map_or(deadline, |d| d.min(deadline)));
    }
}

/// What a failed step left on the host ([`Host::fail_with_report`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Undone {
    /// One line per change the undo journal cannot put back, in the step's order: the
    /// commands that ran, packages installed, removed, held or released, services started,
    /// stopped or restarted, modules loaded, mounts, grub and initramfs regenerations that
    /// already ran; then each journaled file that could not be restored (`<path>:
    /// <error>`).
    pub not_undone: Vec<String>,
}

/// The report's changes and actions that are not files (module docs of
/// [`crate::host::effects::journal`]): their summaries, in the step's order.
/// The report kinds of the changes a failed step's undo journal puts back (files and live
/// sysctl values); every other change or action of the step is "not undone".
pub const UNDONE_KINDS: [&str; 9] = [
    "write",
    "remove",
    "mkdir",
    "remove_all",
    "chmod",
    "chown",
    "symlink",
    "sysctl",
    "fetch",
];

fn not_undoable(report: &Report) -> Vec<String> {
    use crate::host::effects::report::Item;
    let mut out = Vec::new();
    for item in &report.items {
        let (kind, summary) = match item {
            Item::Change(i) => match report.changes.get(*i) {
                Some(c) => (c.kind.as_str(), &c.summary),
                None => continue,
            },
            Item::Action(i) => match report.actions.get(*i) {
                Some(a) => (a.kind.as_str(), &a.summary),
                None => continue,
            },
            _ => continue,
        };
        if !UNDONE_KINDS.contains(&kind) {
            out.push(summary.clone());
        }
    }
    out
}

// ---- the batch of line edits ([`crate::host::effects::batch`]) ----

impl Host {
    /// Whether a changing line edit's write is held in a batch: apply mode without diffs.
    pub(crate) fn batches_line_edits(&self) -> bool {
        self.executor.changes_host() && !self.options().diffs
    }

    /// Write the pending edits (module docs) before something that reads the host outside
    /// the session's view (a command).
    ///
    /// # Errors
    /// A failure of this or an earlier flush (once), as [`Host::settle_batch`].
    pub(crate) fn flush_batch(&self) -> Result<()> {
        self.batch.flush_checked(&self.cx, &*self.executor)
    }

    /// Flush the pending edits (module docs) and take what the flush left: the written
    /// content becomes its file's `after` hash, the view goes back to the session's views.
    ///
    /// # Errors
    /// A failure of this or an earlier flush (once): [`HostError::ChangedUnderStep`] or the
    /// write's error.
    pub(crate) fn settle_batch(&mut self) -> Result<()> {
        // `root()` flushes.
        let _ = self.root();
        let st = self.batch.state_mut();
        if let Some(w) = st.written.take() {
            self.hashes
                .set_last_write(w.key.clone(), w.index, w.content);
            if let Some(view) = w.view {
                self.texts.insert(w.key, view);
            }
        }
        if let Some(key) = st.failed.take() {
            self.hashes.forget_last_write(&key);
        }
        match st.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// [`Host::settle_batch`] at the end of a step (`finish*`): also fails when a flush of
    /// this step failed and its error was already returned to the call that triggered it
    /// ([`HostError::EditsNotWritten`]), so a step whose report lists unwritten edits never
    /// ends as done. Forgets the step's failures either way.
    ///
    /// # Errors
    /// [`Host::settle_batch`]'s, else [`HostError::EditsNotWritten`].
    pub(crate) fn settle_batch_at_step_end(&mut self) -> Result<()> {
        let settled = self.settle_batch();
        let unwritten = self.batch.state_mut().unwritten.take();
        settled?;
        match unwritten {
            Some((path, message)) => Err(HostError::EditsNotWritten { path, message }),
            None => Ok(()),
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if !self.finished {
            self.finished = true;
            // Never lose batched line edits, a scheduled daemon-reload or grub regeneration,
            // even when the caller returned early with `?`. Errors cannot be reported from
            // here.
            let _ = self.settle_batch();
            let _ = self.run_deferred();
            if self.sync_dirs().is_ok() {
                let _ = self.executor.commit_step(&self.cx);
            }
        }
    }
}
