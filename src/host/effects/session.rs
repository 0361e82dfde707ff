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

//!
//! # Batched line edits
//!
//! Apply-mode batching of line and block edits: one write per file per run of edits, so N
//! edits of one file cost one rewrite (temp file, fsync, rename) instead of N, and the
//! directory one fsync at the step's end. In apply mode (without `--diff`):
//!
//! - the **first** changing call of a file decides under the file's path lock
//!   ([`crate::host::root::pathlock`]) and goes through [`crate::host::Host::submit`] (checks,
//!   summary, `before` hash, the report's change), but its write is *held*: the new content
//!   stays in the session as the file's line view, together with the lock and the file's
//!   `Stamp` as read under the lock;
//! - **further** line and block edits of the same file (same lexically normalised host path,
//!   and the same spelling when either has a `..`, which resolves physically after a
//!   symlink) edit that pending view: no `stat`, no lock, no read, no write. Each changing
//!   call still records its own change in the report (summary `update <path>` as the call
//!   spelled it, its script position), so
//!   `Apply: N changed, M unchanged.` and the report's items are those of unbatched edits;
//! - **anything else flushes first**: a line or block edit of another path, every
//!   [`crate::host::Host::submit`] (commands included: a command may read the file), every
//!   `Host::lock_for_update` (so a session holds at most one path lock, and two agents
//!   cannot deadlock), the write-ahead records of deferred work, every read of the host
//!   through the session's view (`view_stat`, `view_read`, `view_list`) or through
//!   [`crate::host::Host::root`], and the end of the session or step (`finish*`, and `Drop`).
//!
//! The **flush** `stat`s the file (still under the lock) and compares its stamp with the one
//! the view was read with: when it moved, a writer that does not take skyhook's path locks
//! (an editor, another tool's `sed -i`) changed the file during the step, and the flush
//! fails with [`HostError::ChangedUnderStep`] naming the file, leaving that writer's content
//! in place. Otherwise the final content is written once, as one
//! [`crate::host::effects::effect::Effect::WriteFile`] handed to the session's executor
//! (`Executor::execute_batched`; the apply executor's
//! atomic write: temp file, fsync, rename, the directory noted for the step's fsync; an
//! existing file keeps mode, owner and extended attributes), the lock is released and the
//! view stays cached with the written file's stamp.
//! The last change of the batch carries the `after` hash of what was written
//! (`effects::hashes`); a failed flush leaves it without one.
//!
//! A flush error is the step's error: reads and effects return it when they trigger the
//! flush (the read or effect is then not done), [`crate::host::Host::root`] (which cannot fail) keeps it
//! for the next fallible call, and `finish*` return it. When a call got it and the script
//! went on (a `try` around an unrelated read), `finish*` still fail, with
//! [`HostError::EditsNotWritten`] naming the file, so no step flag is written for a report
//! whose edits are not on disk. The changes a failed batch recorded
//! stay in the report. A step that fails after some edits still has them written by
//! `finish*`, as if each had been written at once. A SIGKILL before the flush
//! writes nothing of the batch (and no step flag), and the kernel releases the lock, so a
//! rerun converges.
//!
//! Plan and check mode never batch (they write nothing; their reports and overlays are
//! unchanged), nor does apply mode with diffs (`skyhook-run --apply --diff`), whose diffs
//! compare each call's content with the file's.
//!
//! # Line edits
//!
//! The line and block edits of the `fs::` area through the session: one parsed view of a
//! file per session (`effects::lines`), decided again under the path's lock in
//! apply mode, and either batched (apply: one write per run of edits, above) or submitted as one whole-file write.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::host::effects::context::Context;
pub use crate::host::effects::context::HostOptions;
use crate::host::effects::effect::{Effect, EffectClass, GrubUpdate, InitramfsTool};
use crate::host::effects::exec::{CmdOutput, CommandOptions};
use crate::host::effects::executors::apply::Apply;
use crate::host::effects::executors::plan::Plan;
use crate::host::effects::executors::recording::Recording;
use crate::host::effects::executors::{Deferred, Executor};
use crate::host::effects::lines::{Lines, Stamp, View};
pub use crate::host::effects::overlay::Stat;
use crate::host::effects::overlay::normalize;
use crate::host::effects::reads::RootReads;
use crate::host::effects::report::{Action, Change, ExecMode, Item, Journal, Position, Report};
use crate::host::effects::textdiff::Appended;
use crate::host::root::HostRoot;
use crate::host::root::deferred::{self, GrubPending};
use crate::host::root::error::{HostError, Result};
use crate::host::root::pathlock::PathLock;
use crate::redact::Redactor;

/// One step's session over a host root: the view, the executor and the report.
#[derive(Debug)]
pub struct Host {
    /// The root, options and directories to fsync, lent to the executor.
    pub(super) cx: Context,
    /// What becomes of each effect ([`crate::host::effects::executors`]), chosen when the
    /// session is built.
    pub(super) executor: Box<dyn Executor>,
    pub(super) redactor: Redactor,
    /// The report's content hashes, once per file ([`crate::host::effects::hashes`]).
    pub(in crate::host::effects) hashes: crate::host::effects::hashes::ContentHashes,
    /// Parsed views of the files the line and block functions edited, by normalised host
    /// path ([`crate::host::files::fs`]). Any effect clears them ([`Host::submit`]); in apply mode
    /// a view is trusted only while the file's [`crate::host::effects::lines::Stamp`] is unchanged.
    pub(in crate::host::effects) texts:
        std::collections::HashMap<PathBuf, crate::host::effects::lines::View>,
    pub(super) report: Report,
    pub(in crate::host::effects) pending_daemon_reload: bool,
    pub(in crate::host::effects) pending_grub: GrubPending,
    /// A daemon-reload record exists in the root ([`deferred`]).
    pub(super) recorded_reload: bool,
    /// A grub record exists in the root ([`deferred`]).
    pub(super) recorded_grub: bool,
    /// An initramfs regeneration is due at the end of the step ([`crate::host::kernel::kmod`]).
    pub(in crate::host::effects) pending_initramfs: bool,
    /// An initramfs record exists in the root ([`deferred`]).
    pub(super) recorded_initramfs: bool,
    pub(super) finished: bool,
    /// The script position of the host call being served ([`Host::set_position`]).
    pub(super) position: Option<Position>,
    /// The step's ordered list, shared with a recording output ([`Host::journal`]).
    pub(super) journal: Journal,
    /// A package repository changed in this session: the next `pkg::install` refreshes the
    /// index ([`Host::mark_package_index_stale`]).
    pub(in crate::host::effects) package_index_stale: bool,
    /// Set by the line functions for the one write they submit next: what its content adds
    /// to the old ([`crate::host::effects::textdiff::Appended`]); taken by [`Host::submit`].
    pub(in crate::host::effects) appended: Option<crate::host::effects::textdiff::Appended>,
    /// Apply mode: the pending write of batched line edits ((module docs, "Batched line edits")).
    pub(in crate::host::effects) batch: Batch,
    /// Set by the line functions for the one write they submit next: record its change but
    /// hold the write for a batch ((module docs, "Batched line edits")); taken by [`Host::submit`].
    pub(in crate::host::effects) hold_write: bool,
    /// The next [`Host::submit`] of a write is a line or block edit (the undo journal
    /// records its lines: [`Host::next_write_is_line_edit`]).
    pub(in crate::host::effects) line_write: bool,
    /// Every effect submitted, in order, once [`Host::record_effects`] was called: the
    /// recording double tests assert an area's effects with.
    pub(super) recorded: Option<Vec<Effect>>,
    /// Lines saying what this session's start undid ([`Host::recovered`]).
    pub(super) recovered: Vec<String>,
    /// Plan mode: the commands the plan did not run, in order, over all the steps of the
    /// session (a dry run's or the preflight's): later reads of what they may have touched
    /// are unknown ([`Host::check_known`]).
    pub(super) planned_commands: Vec<PlannedCommand>,
    /// Plan mode: the session's first effect the plan recorded without running its program
    /// ([`Effect::runs_program`]: a `run`/`sh` command, a package, service, mount, module,
    /// grub or tuned action): a later call's failure that depends on the host is unknown
    /// ([`Host::unplanned_command`]). Names no path.
    pub(super) first_unplanned: Option<PlannedCommand>,
}

/// A command a plan recorded without running it ([`Host::note_planned_command`]).
#[derive(Debug)]
pub(super) struct PlannedCommand {
    /// The command line, shell-quoted.
    command: String,
    /// Where the script planned it.
    position: Option<Position>,
    /// The absolute paths its arguments and guards name (normalised; a glob cut at its
    /// directory).
    paths: Vec<PathBuf>,
}

/// The absolute paths `words` name: each word split at whitespace and shell punctuation,
/// the pieces that start with `/`, normalised; a piece with a glob character stands for
/// the directory before it (`/etc/x.d/*.conf` names `/etc/x.d`).
fn named_paths<'a>(words: impl IntoIterator<Item = &'a str>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for w in words {
        for piece in w.split(|c: char| c.is_whitespace() || ";|&<>()'\"`=,".contains(c)) {
            if !piece.starts_with('/') {
                continue;
            }
            let piece = match piece.find(['*', '?', '[']) {
                Some(i) => piece[..i].rsplit_once('/').map_or("/", |(d, _)| d),
                None => piece,
            };
            let p = normalize(Path::new(if piece.is_empty() { "/" } else { piece }));
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

impl Host {
    /// fsync the directories the session's effects changed entries in, once each
    /// ([`DirSyncs::sync`](crate::host::root::durability::DirSyncs::sync)): called when a step
    /// ends, before the caller writes its flag.
    ///
    /// # Errors
    /// As `DirSyncs::sync`.
    pub(crate) fn sync_dirs(&self) -> Result<()> {
        Ok(self.cx.dir_syncs.sync(self.host_root())?)
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
            line_write: false,
            recorded: None,
            recovered,
            planned_commands: Vec::new(),
            first_unplanned: None,
        }
    }

    /// What the session's start undid of journals left by steps that did not end
    /// ([`crate::host::effects::journal::recover`]), one line each, to log before the step.
    pub fn recovered(&self) -> &[String] {
        &self.recovered
    }

    /// The first failed write of the step's undo journal (a full disk): the step is
    /// poisoned, whatever the script caught ([`crate::host::effects::journal`]); its runner
    /// fails it and undoes it.
    pub fn journal_failure(&self) -> Option<String> {
        self.executor.journal_failure()
    }

    /// The next write [`Host::submit`]s is a line or block edit of a text file (the
    /// user database's files too): an undo over another writer's later change takes out
    /// just its lines ([`crate::host::effects::journal`]).
    pub(crate) fn next_write_is_line_edit(&mut self) {
        self.line_write = true;
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

    /// The execution mode (effects only: an area asks the session what it needs, never
    /// which mode it is in).
    pub(in crate::host::effects) fn mode(&self) -> ExecMode {
        self.executor.mode()
    }

    /// The host root's read side ([`RootReads`]: no mutating method), for what no effect
    /// plans (device nodes, a file the view located, messages). Pending batched line edits
    /// are written first (the session's batch; a failure is returned by the next fallible
    /// call of the session), so a direct read sees them.
    pub fn root(&self) -> RootReads<'_> {
        self.batch.flush(&self.cx, &*self.executor);
        RootReads::of(&self.cx.root)
    }

    /// The host root itself, for the effects' own reads; pending batched line edits are
    /// written first, as for [`Host::root`].
    pub(in crate::host::effects) fn host_root(&self) -> &HostRoot {
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

    /// The grub work pending at the end of the step (a copy), for a call that merges its
    /// own into it before [`Host::schedule_grub_ahead`].
    pub(crate) fn pending_grub(&self) -> GrubPending {
        self.pending_grub.clone()
    }

    /// Plan mode: `argv` was planned, not run (`run`, `sh`), with `guard_paths` (its
    /// `creates`/`removes` paths): what it changes is unknown, so later reads of what it
    /// may have touched fail with [`HostError::PlanUnknown`] ([`Host::check_known`]).
    /// Nothing in apply and check mode (a check judges the host as it is).
    pub(crate) fn note_planned_command(&mut self, argv: &[String], guard_paths: &[String]) {
        if self.mode() != ExecMode::Plan {
            return;
        }
        let words = argv.iter().chain(guard_paths).map(String::as_str);
        self.planned_commands.push(PlannedCommand {
            command: crate::host::effects::exec::quote_argv(argv),
            position: self.position.clone(),
            paths: named_paths(words),
        });
    }

    /// `Ok` unless a command the plan did not run may have touched `path`
    /// ([`Host::note_planned_command`]): a path at or under one the command names (in its
    /// arguments, a shell script's text included, or its guards); with `listing`, also a
    /// directory above one it names; and any path that does not exist as the session sees
    /// it (a command may have made it, whatever it names).
    ///
    /// # Errors
    /// [`HostError::PlanUnknown`] naming the command; resolution failures.
    pub(crate) fn check_known_as(&self, path: &Path, listing: bool) -> Result<()> {
        if self.planned_commands.is_empty() {
            return Ok(());
        }
        let p = normalize(path);
        let named = self.planned_commands.iter().find(|c| {
            c.paths
                .iter()
                .any(|t| p.starts_with(t) || (listing && t.starts_with(&p)))
        });
        let command = match named {
            Some(c) => c,
            None => {
                let exists = match self.executor.overlay() {
                    Some(o) => o.stat(&self.cx.root, path, true)?.is_some(),
                    None => true,
                };
                if exists {
                    return Ok(());
                }
                &self.planned_commands[0]
            }
        };
        Err(HostError::PlanUnknown {
            path: path.to_path_buf(),
            command: command.command.clone(),
            position: command.position.as_ref().map(ToString::to_string),
        })
    }

    /// Plan mode: the first command the session's plan recorded without running it (its
    /// command line or action summary, and where the script planned it as `file:line`), if
    /// any: a later call failing in a way that depends on the host
    /// ([`HostError::depends_on_host`]) is unknown ([`HostError::PlanUnknownFailure`], made
    /// by the binding layer), since the apply runs the command first.
    pub(crate) fn unplanned_command(&self) -> Option<(&str, Option<String>)> {
        self.first_unplanned.as_ref().map(|c| {
            (
                c.command.as_str(),
                c.position.as_ref().map(ToString::to_string),
            )
        })
    }

    /// [`Host::check_known_as`] for a read of `path` itself (not a listing).
    ///
    /// # Errors
    /// As [`Host::check_known_as`].
    pub(crate) fn check_known(&self, path: &Path) -> Result<()> {
        self.check_known_as(path, false)
    }

    /// List the call `fname` that failed with `e` ([`HostError::PlanUnknown`]) in the step's
    /// ordered list as unknown, at the call's position.
    pub(crate) fn note_unknown(&mut self, fname: &str, e: &HostError) {
        self.journal.push(Item::Unknown {
            summary: format!("{fname}: {e}; the rest of the step is checked statically only"),
            position: self.position.clone(),
        });
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
    pub fn submit(&mut self, mut effect: Effect) -> Result<Option<CmdOutput>> {
        // A stale package index (a changed `pkg::repo`, [`Host::mark_package_index_stale`])
        // is refreshed by the next install; an install that refreshes, or `pkg::update`,
        // leaves it fresh once it succeeded.
        if let Effect::PackageInstall { update, .. } = &mut effect {
            *update |= self.package_index_stale;
        }
        let refreshes = matches!(
            effect,
            Effect::PackageInstall { update: true, .. }
                | Effect::PackageUpgrade { upgrade: false, .. }
        );
        if let Some(r) = &mut self.recorded {
            r.push(effect.clone());
        }
        let appended = self.appended.take();
        let line =
            std::mem::take(&mut self.line_write) && matches!(effect, Effect::WriteFile { .. });
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
            // The line functions' batched write ((module docs, "Batched line edits")).
            None
        } else {
            let r = match line {
                true => self.executor.execute_line_edit(&self.cx, &effect),
                false => self.executor.execute(&self.cx, &effect),
            };
            if reload && self.executor.changes_host() {
                self.settle_reload_record(r.is_ok(), was_pending);
            }
            r?
        };
        if effect.runs_program() && self.first_unplanned.is_none() && self.mode() == ExecMode::Plan
        {
            self.first_unplanned = Some(PlannedCommand {
                command: d.summary.clone(),
                position: self.position.clone(),
                paths: Vec::new(),
            });
        }
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
        if refreshes {
            self.package_index_stale = false;
        }
        Ok(out)
    }

    /// Submit the download `d` ([`Effect::Fetch`]); returns whether it was only planned
    /// (plan and check mode: nothing was requested), for the caller's messages.
    ///
    /// # Errors
    /// As [`Host::submit`].
    pub(crate) fn submit_download(
        &mut self,
        d: crate::host::effects::effect::Download,
    ) -> Result<bool> {
        self.submit(Effect::Fetch(d))?;
        Ok(self.mode() != ExecMode::Apply)
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
        if self
            .executor
            .record_deferred(&self.cx, Deferred::DaemonReload, true)?
        {
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
        let wrote = self
            .executor
            .record_deferred(&self.cx, Deferred::Grub(&pending), true)?;
        let recorded = self.recorded_grub || wrote;
        let prev_recorded = std::mem::replace(&mut self.recorded_grub, recorded);
        let prev = std::mem::replace(&mut self.pending_grub, pending);
        Ok((prev, prev_recorded))
    }

    /// Undo [`Host::schedule_grub_ahead`] after the drop-in write failed: the previous
    /// pending work, and in apply mode the previous record (or none). Best effort.
    pub(crate) fn restore_grub(&mut self, (pending, recorded): (GrubPending, bool)) {
        let undone = if recorded {
            self.executor
                .record_deferred(&self.cx, Deferred::Grub(&pending), false)
        } else {
            self.executor
                .clear_deferred(&self.cx, &deferred::grub_path())
        };
        if matches!(undone, Ok(true)) {
            self.recorded_grub = recorded;
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
        let wrote = self
            .executor
            .record_deferred(&self.cx, Deferred::Initramfs, true)?;
        let prev = (self.pending_initramfs, self.recorded_initramfs);
        self.pending_initramfs = true;
        self.recorded_initramfs = self.recorded_initramfs || wrote;
        Ok(prev)
    }

    /// Undo [`Host::schedule_initramfs_ahead`] after the file write failed: the previous
    /// pending state and, in apply mode, no record when there was none before. Best effort.
    pub(crate) fn restore_initramfs(&mut self, (pending, recorded): (bool, bool)) {
        if !recorded
            && matches!(
                self.executor
                    .clear_deferred(&self.cx, &deferred::initramfs_path()),
                Ok(true)
            )
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
                && matches!(
                    self.executor
                        .clear_deferred(&self.cx, &deferred::daemon_reload_path()),
                    Ok(true)
                )
            {
                self.recorded_reload = false;
            }
        } else if (was_pending || self.recorded_reload)
            && matches!(
                self.executor
                    .record_deferred(&self.cx, Deferred::DaemonReload, false),
                Ok(true)
            )
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
                if r.is_ok() {
                    if self.recorded_grub
                        && matches!(
                            self.executor
                                .clear_deferred(&self.cx, &deferred::grub_path()),
                            Ok(true)
                        )
                    {
                        self.recorded_grub = false;
                    }
                } else if matches!(
                    self.executor
                        .record_deferred(&self.cx, Deferred::Grub(&grub), false),
                    Ok(true)
                ) {
                    self.recorded_grub = true;
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
        if r.is_ok() {
            if self.recorded_initramfs
                && matches!(
                    self.executor
                        .clear_deferred(&self.cx, &deferred::initramfs_path()),
                    Ok(true)
                )
            {
                self.recorded_initramfs = false;
            }
        } else if matches!(
            self.executor
                .record_deferred(&self.cx, Deferred::Initramfs, false),
            Ok(true)
        ) {
            self.recorded_initramfs = true;
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
    pub(crate) fn locked_update<T>(
        &mut self,
        paths: &[&Path],
        lock: ToolLock,
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
        let guard = match lock {
            ToolLock::Pwd => crate::host::root::pwdlock::lock_pwd(&self.cx.root)?,
        };
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
    /// ((module docs, "Batched line edits")), at the current script position. Returns its index.
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
    /// files ((module docs, "Batched line edits")).
    ///
    /// # Errors
    /// A failed flush of the batch; as [`crate::host::effects::exec::exec`].
    pub(crate) fn exec(&self, argv: &[String], opts: &CommandOptions) -> Result<CmdOutput> {
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

/// The lock of a file set's own tools that [`Host::locked_update`] takes after the path
/// locks, in apply mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolLock {
    /// shadow-utils' `/etc/.pwd.lock` ([`crate::host::root::pwdlock`]), for the account
    /// files.
    Pwd,
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

// ---- the batch of line edits ((module docs, "Batched line edits")) ----

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

// ---- line edits through the session's line view ----

/// What [`edit_lines`] did.
pub(crate) enum LineEdit {
    /// The edit is done: whether it changed the file.
    Done(bool),
    /// The lines no longer describe the bytes (a line with a line break in it): the caller
    /// writes `content` whole, comparing bytes, while `lock` (apply mode) is held.
    Irregular {
        /// The new content.
        content: Vec<u8>,
        /// The path's lock, taken for the edit (apply mode).
        lock: Option<PathLock>,
    },
}

/// A read-modify-write of the lines of the text file at `path` through the session's view
/// ([`Host::take_line_view`]). `change` edits the lines in place (given whether the file exists) and
/// returns whether it changed anything; it must return `Err` or `Ok(false)` before
/// touching them. In apply mode a change is made under the path's lock
/// ([`crate::host::root::pathlock`]): the view is checked against the file again under the lock,
/// and when another process changed the file meanwhile it is read again and `change` runs
/// on the fresh lines. The file is written whole (atomically, with a final newline) and the
/// view, now showing what was written, stays cached with the written file's stamp, so a
/// file the session itself wrote is never read back.
pub(crate) fn edit_lines(
    h: &mut Host,
    path: &Path,
    change: impl Fn(&mut Lines, bool) -> Result<bool>,
) -> Result<LineEdit> {
    let key = crate::host::root::normalize(path);
    // Apply mode: a batch of this file's edits is open, or another file's is written first.
    if let Some(changed) = edit_pending(h, path, &key, &change)? {
        return Ok(LineEdit::Done(changed));
    }
    let mut view = h.take_line_view(path, &key)?;
    // What the last rendering (the content the session last wrote here) was, to tell the
    // plan's diff when the change only appended lines ([`Appended`]).
    let mut mark = view.lines.rendered_mark();
    if !change(&mut view.lines, view.exists)? {
        h.texts.insert(key, view);
        h.note_unchanged();
        return Ok(LineEdit::Done(false));
    }
    let lock = h.lock_for_update(path)?;
    if lock.is_some() {
        // Decide again on the file as it is under the lock.
        let now = h.root().metadata(path)?.map(|m| Stamp::of(&m));
        if now != view.stamp {
            view = h.take_line_view(path, &key)?;
            mark = None;
            if !change(&mut view.lines, view.exists)? {
                h.texts.insert(key, view);
                h.note_unchanged();
                return Ok(LineEdit::Done(false));
            }
        }
    }
    if view.lines.irregular() {
        // A line with a line break in it: the lines no longer describe the bytes, so
        // the caller compares bytes as `fs::put` does and keeps no view.
        let content = view.lines.render().to_vec();
        return Ok(LineEdit::Irregular { content, lock });
    }
    let lock = match lock {
        // Apply: record the change now, write once when the batch is flushed.
        Some(lock) if h.batches_line_edits() => {
            h.hold_write = true;
            h.submit(Effect::WriteFile {
                path: path.to_path_buf(),
                content: Default::default(),
                mode: None,
                uid: None,
                gid: None,
            })?;
            begin(h, path, key, view, lock);
            return Ok(LineEdit::Done(true));
        }
        lock => lock,
    };
    let content = view.lines.render();
    if let (Some((old_len, old_lines)), Some((_, now_lines))) = (mark, view.lines.rendered_mark())
        && now_lines > old_lines
    {
        h.appended = Some(Appended {
            path: key.clone(),
            old_len,
            old_lines,
        });
    }
    // `submit` checks the ancestors ([`HostError::BadAncestor`]); the view's read resolved
    // the path already.
    h.next_write_is_line_edit();
    h.submit(Effect::WriteFile {
        path: path.to_path_buf(),
        content,
        mode: None,
        uid: None,
        gid: None,
    })?;
    if lock.is_some() {
        // Still under the lock: the stamp is that of the file just written.
        view.stamp = h.root().metadata(path)?.map(|m| Stamp::of(&m));
    }
    drop(lock);
    view.exists = true;
    h.texts.insert(key, view);
    Ok(LineEdit::Done(true))
}

/// A line or block edit of `path` (lexical normal form `key`) while a batch is open: when
/// the batch is of the same file ([`same_file`]), run `change` on its pending lines and
/// record the call (`Some(changed)`, the change naming `path` as the call spelled it);
/// otherwise settle the batch (flushing the other file's edits) and return `None`: the
/// caller edits as usual.
///
/// # Errors
/// `change`'s error (the batch is unchanged: `change` fails before editing); the flush's.
pub(crate) fn edit_pending(
    h: &mut Host,
    path: &Path,
    key: &Path,
    change: &impl Fn(&mut Lines, bool) -> Result<bool>,
) -> Result<Option<bool>> {
    let st = h.batch.state_mut();
    let Some(p) = st
        .pending
        .as_mut()
        .filter(|p| p.key == key && same_file(&p.path, path))
    else {
        h.settle_batch()?;
        return Ok(None);
    };
    if !change(&mut p.view.lines, p.view.exists)? {
        h.note_unchanged();
        return Ok(Some(false));
    }
    p.edits += 1;
    let irregular = p.view.lines.irregular();
    let effect = Effect::WriteFile {
        path: path.to_path_buf(),
        content: Default::default(),
        mode: None,
        uid: None,
        gid: None,
    };
    // The file exists as far as the session is concerned (the batch's first write creates
    // it): what `describe` says of a write of existing content without attributes.
    let index = h.record_change(Change {
        kind: effect.kind().name().into(),
        target: effect.target(),
        summary: format!("update {}", effect.target()),
        diff: None,
        before: None,
        after: None,
        mkdir: Vec::new(),
        position: None,
    });
    if let Some(p) = h.batch.state_mut().pending.as_mut() {
        p.last_change = index;
        if irregular {
            // A line with a line break: write now and keep no view (as without a batch).
            p.keep_view = false;
        }
    }
    if irregular {
        h.settle_batch()?;
    }
    Ok(Some(true))
}

/// Whether two spellings of one lexical path name the same file without a look at the host:
/// the same bytes, or both plain (`/etc//f`, `/etc/./f` and `/etc/f` resolve alike). Not
/// plain: a `..`, which resolves physically, after the symlinks before it (`/etc/link/../f`
/// with `link -> /opt/d` is `/opt/f`), and a final `/` or `/.`, which makes the kernel
/// require a directory (`/etc/f/` fails with `ENOTDIR`); `Path` equality ignores both.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let plain = |p: &Path| {
        let raw = p.as_os_str().as_bytes();
        !(raw.ends_with(b"/")
            || raw.ends_with(b"/.")
            || p.components().any(|c| c == std::path::Component::ParentDir))
    };
    a.as_os_str() == b.as_os_str() || (plain(a) && plain(b))
}

/// Open a batch after the first changing call of `path` recorded its change with its write
/// held ([`Host::submit`]): `view` (read under `lock`, with the file's stamp then) holds the
/// new lines.
pub(crate) fn begin(h: &mut Host, path: &Path, key: PathBuf, view: View, lock: PathLock) {
    let last_change = h.changed() - 1;
    let stamp = view.stamp;
    let st = h.batch.state_mut();
    debug_assert!(st.pending.is_none());
    st.pending = Some(Pending {
        path: path.to_path_buf(),
        key,
        view: View {
            exists: true,
            ..view
        },
        stamp,
        edits: 1,
        last_change,
        keep_view: true,
        _lock: lock,
    });
}

// ---- the batch of line edits ----

/// The session's pending write of one file and what its last flush left for the session.
/// Behind a mutex because reads through `&Host` flush it (the session stays `Send`).
#[derive(Debug, Default)]
pub(crate) struct Batch(Mutex<State>);

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) pending: Option<Pending>,
    /// The last flush's write, until the session takes it ([`crate::host::Host::settle_batch`]).
    pub(crate) written: Option<Written>,
    /// The file whose flush failed (its last change must not get an `after` hash).
    pub(crate) failed: Option<PathBuf>,
    /// The failed flush's error, until a fallible call returns it.
    pub(crate) error: Option<HostError>,
    /// The first failed flush of the step (file and error text), until the step ends: the
    /// step fails even when a call got `error` and the script went on.
    pub(crate) unwritten: Option<(PathBuf, String)>,
}

/// Edits of one file not written yet.
#[derive(Debug)]
pub(crate) struct Pending {
    /// The host path as the first call gave it (written through it).
    pub(crate) path: PathBuf,
    /// Its lexical normal form (the key of later calls and of the session's views).
    pub(crate) key: PathBuf,
    /// The file's lines with every edit of the batch.
    pub(crate) view: View,
    /// The file's stamp as read under the lock (`None`: it did not exist).
    pub(crate) stamp: Option<Stamp>,
    /// The number of changing calls in the batch.
    pub(crate) edits: usize,
    /// The index of the batch's last change in the report.
    pub(crate) last_change: usize,
    /// Keep the view after the flush (false once a line with a line break was added: the
    /// lines then no longer describe the bytes).
    pub(crate) keep_view: bool,
    /// The file's path lock, held until the flush.
    pub(crate) _lock: PathLock,
}

/// What a successful flush wrote.
#[derive(Debug)]
pub(crate) struct Written {
    pub(crate) key: PathBuf,
    pub(crate) index: usize,
    pub(crate) content: bytes::Bytes,
    pub(crate) view: Option<View>,
}

impl Batch {
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn state_mut(&mut self) -> &mut State {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    /// Write the pending edits, if any, through `executor`; a failure is kept for the next
    /// fallible call.
    pub(crate) fn flush(&self, cx: &Context, executor: &dyn Executor) {
        let mut st = self.state();
        if st.pending.is_some() {
            st.flush(cx, executor);
        }
    }

    /// [`Batch::flush`], then return a failure of this or an earlier flush (once).
    ///
    /// # Errors
    /// [`HostError::ChangedUnderStep`], or the write's failure (it names the file).
    pub(crate) fn flush_checked(&self, cx: &Context, executor: &dyn Executor) -> Result<()> {
        let mut st = self.state();
        if st.pending.is_some() {
            st.flush(cx, executor);
        }
        match st.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl State {
    fn flush(&mut self, cx: &Context, executor: &dyn Executor) {
        let Some(mut p) = self.pending.take() else {
            return;
        };
        match write(cx, executor, &mut p) {
            Ok(content) => {
                self.written = Some(Written {
                    index: p.last_change,
                    content,
                    view: p.keep_view.then_some(p.view),
                    key: p.key,
                });
            }
            Err(e) => {
                if self.unwritten.is_none() {
                    self.unwritten = Some((p.path.clone(), crate::chain::render(&e)));
                }
                self.failed = Some(p.key);
                self.error = Some(e);
            }
        }
        // `p._lock` is released here, after the write.
    }
}

/// The flush's compare and write through `executor` (module docs); returns the bytes
/// written.
fn write(cx: &Context, executor: &dyn Executor, p: &mut Pending) -> Result<bytes::Bytes> {
    let root: &HostRoot = &cx.root;
    let now = root.metadata(&p.path)?.map(|m| Stamp::of(&m));
    if now != p.stamp {
        return Err(HostError::ChangedUnderStep {
            path: p.path.clone(),
            edits: p.edits,
        });
    }
    let content = p.view.lines.render();
    let effect = Effect::WriteFile {
        path: p.path.clone(),
        content: content.clone(),
        mode: None,
        uid: None,
        gid: None,
    };
    executor.execute_batched(cx, &effect)?;
    // Still under the lock: the stamp of the file just written.
    p.view.stamp = root.metadata(&p.path)?.map(|m| Stamp::of(&m));
    p.view.exists = true;
    Ok(content)
}
