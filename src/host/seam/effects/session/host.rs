//! [`Host`]: the session's state (its context, executor, report and pending work), how it is
//! built (one executor chosen once, deferred work left by an earlier session scheduled
//! again) and what it answers about itself.

use super::batch::Batch;
use crate::host::effects::context::Context;
use crate::host::effects::context::HostOptions;
use crate::host::effects::effect::Effect;
use crate::host::effects::executors::Executor;
use crate::host::effects::executors::apply::Apply;
use crate::host::effects::executors::plan::Plan;
use crate::host::effects::executors::recording::Recording;
use crate::host::effects::reads::RootReads;
use crate::host::effects::report::{ExecMode, Journal, Position, Report};
use crate::host::root::HostRoot;
use crate::host::root::deferred::{self, GrubPending};
use crate::redact::Redactor;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A plan's budget of what the server keeps of it: every effect a plan or check session
/// plans counts what serve keeps of it (a write its whole content; every effect its
/// record and the copies of its text in the report, the events and the exit:
/// `Host::charge_planned`), over the sessions a [`super::PlanCarry`] joins (all the steps,
/// modes and packages of one serve plan), and an effect past `limit` fails
/// ([`crate::host::HostError::PlanBudget`]): what a plan holds (in memory or in the view's
/// spill file) stays bounded by it. No limit: unbounded (`skyhook-run`, the agent).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Budget {
    /// Bytes planned so far.
    pub(super) planned: u64,
    /// The budget in bytes.
    pub(super) limit: Option<u64>,
}

/// One step's session over a host root: the view, the executor and the report.
#[derive(Debug)]
pub struct Host {
    /// The root, options and directories to fsync, lent to the executor.
    pub(in crate::host::seam::effects) cx: Context,
    /// What becomes of each effect ([`crate::host::effects::executors`]), chosen when the
    /// session is built.
    pub(in crate::host::seam::effects) executor: Box<dyn Executor>,
    pub(in crate::host::seam::effects) redactor: Redactor,
    /// The report's content hashes, once per file ([`crate::host::effects::hashes`]).
    pub(in crate::host::seam::effects) hashes: crate::host::effects::hashes::ContentHashes,
    /// Parsed views of the files the line and block functions edited, by normalised host
    /// path ([`crate::host::files::fs`]). Any effect clears them ([`Host::submit`]); in apply mode
    /// a view is trusted only while the file's [`crate::host::effects::lines::Stamp`] is unchanged.
    pub(in crate::host::seam::effects) texts:
        std::collections::HashMap<PathBuf, crate::host::effects::lines::View>,
    pub(in crate::host::seam::effects) report: Report,
    pub(in crate::host::seam::effects) pending_daemon_reload: bool,
    pub(in crate::host::seam::effects) pending_grub: GrubPending,
    /// A daemon-reload record exists in the root ([`deferred`]).
    pub(in crate::host::seam::effects) recorded_reload: bool,
    /// A grub record exists in the root ([`deferred`]).
    pub(in crate::host::seam::effects) recorded_grub: bool,
    /// An initramfs regeneration is due at the end of the step ([`crate::host::kernel::kmod`]).
    pub(in crate::host::seam::effects) pending_initramfs: bool,
    /// An initramfs record exists in the root ([`deferred`]).
    pub(in crate::host::seam::effects) recorded_initramfs: bool,
    pub(in crate::host::seam::effects) finished: bool,
    /// The script position of the host call being served ([`Host::set_position`]).
    pub(in crate::host::seam::effects) position: Option<Position>,
    /// The step's ordered list, shared with a recording output ([`Host::journal`]).
    pub(in crate::host::seam::effects) journal: Journal,
    /// A package repository changed in this session: the next `pkg::install` refreshes the
    /// index ([`Host::mark_package_index_stale`]).
    pub(in crate::host::seam::effects) package_index_stale: bool,
    /// Set by the line functions for the one write they submit next: what its content adds
    /// to the old ([`crate::host::effects::textdiff::Appended`]); taken by [`Host::submit`].
    pub(in crate::host::seam::effects) appended: Option<crate::host::effects::textdiff::Appended>,
    /// Apply mode: the pending write of batched line edits ((module docs, "Batched line edits")).
    pub(in crate::host::seam::effects) batch: Batch,
    /// Set by the line functions for the one write they submit next: record its change but
    /// hold the write for a batch ((module docs, "Batched line edits")); taken by [`Host::submit`].
    pub(in crate::host::seam::effects) hold_write: bool,
    /// The next [`Host::submit`] of a write is a line or block edit (the undo journal
    /// records its lines: [`Host::next_write_is_line_edit`]).
    pub(in crate::host::seam::effects) line_write: bool,
    /// Every effect submitted, in order, once [`Host::record_effects`] was called: the
    /// recording double tests assert an area's effects with.
    pub(in crate::host::seam::effects) recorded: Option<Vec<Effect>>,
    /// Lines saying what this session's start undid ([`Host::recovered`]).
    pub(in crate::host::seam::effects) recovered: Vec<String>,
    /// Plan mode: the commands the plan did not run, in order, over all the steps of the
    /// session (a dry run's or the preflight's): later reads of what they may have touched
    /// are unknown ([`Host::check_known`]).
    pub(in crate::host::seam::effects) planned_commands: Vec<PlannedCommand>,
    /// Plan mode: the session's first effects the plan recorded without running their
    /// program, by what that program may change ([`Unplanned`]).
    pub(in crate::host::seam::effects) unplanned: Unplanned,
    /// Plan and check mode: the bytes planned so far and the budget they are held to
    /// ([`Budget`], carried from session to session).
    pub(in crate::host::seam::effects) budget: Budget,
}

impl Host {
    /// A session over `root` in `mode`. Deferred work recorded by an earlier session that
    /// could not run it ([`crate::host::root::deferred`]) is scheduled again: it runs at this
    /// session's end in apply mode, and shows up as an action in plan and check mode.
    pub fn new(root: HostRoot, mode: ExecMode, options: HostOptions) -> Host {
        let executor = executor_for(mode, &options);
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
        options: HostOptions,
    ) -> Host {
        Host::starting(root, executor, options, None)
    }

    /// [`Host::new`] for one of a run's sessions, which share `memo`: what an earlier
    /// session of the run found at its start (no journal to recover, no deferred-work
    /// record) is not read again while this process wrote neither since ([`StartMemo`]).
    pub fn new_in_run(
        root: HostRoot,
        mode: ExecMode,
        options: HostOptions,
        memo: &StartMemo,
    ) -> Host {
        let executor = executor_for(mode, &options);
        Host::starting(root, executor, options, Some(memo))
    }

    /// The session's start: journals recovered (an executor that journals), deferred-work
    /// records read, unless `memo` knows there are none.
    fn starting(
        root: HostRoot,
        executor: Box<dyn Executor>,
        mut options: HostOptions,
        memo: Option<&StartMemo>,
    ) -> Host {
        let mode = executor.mode();
        let redactor = options.redactor.take().unwrap_or_default();
        redactor.add_from_env(&options.env);
        // Counted before reading: a write during the reads makes the memo stale at once.
        let writes = deferred::start_state_writes();
        // A journal left by a step that did not end is undone before this session reads
        // anything (its deferred-work records included).
        let recovered = match executor.journals() {
            true if memo.is_some_and(|m| m.no_journals(writes)) => Vec::new(),
            true => {
                let lines = crate::host::effects::journal::recover(&root).unwrap_or_else(|e| {
                    vec![format!(
                        "not undone: the undo journals under {}: {}",
                        crate::host::effects::journal::DIR,
                        crate::chain::render(&e)
                    )]
                });
                if let Some(m) = memo {
                    m.found_journals(writes, lines.is_empty());
                }
                lines
            }
            false => Vec::new(),
        };
        let ((recorded_reload, grub), recorded_initramfs) =
            if memo.is_some_and(|m| m.no_records(writes)) {
                ((false, None), false)
            } else {
                let found = (deferred::load(&root), deferred::initramfs_recorded(&root));
                if let Some(m) = memo {
                    m.found_records(writes, found == ((false, None), false));
                }
                found
            };
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
            unplanned: Unplanned::default(),
            budget: Default::default(),
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
    pub(in crate::host::seam::effects) fn mode(&self) -> ExecMode {
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
    pub(in crate::host::seam::effects) fn host_root(&self) -> &HostRoot {
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
    /// step ends: `src/host/seam/effects/hashes.rs`).
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

    /// Tighten the session's deadline to `deadline` (the earlier one wins), e.g. to a script
    /// run's deadline, so that the default timeout of every command (scripts' and internal
    /// ones) never outlives the run.
    pub fn limit_deadline(&mut self, deadline: Instant) {
        self.cx.opts.deadline = Some(self.cx.opts.deadline.map_or(deadline, |d| d.min(deadline)));
    }
}

/// The executor of `mode` ([`Host::new`]).
fn executor_for(mode: ExecMode, options: &HostOptions) -> Box<dyn Executor> {
    match (mode, &options.undo) {
        (ExecMode::Apply, Some(label)) => Box::new(Apply::journaled(label)),
        (ExecMode::Apply, None) => Box::new(Apply::default()),
        (ExecMode::Plan | ExecMode::Check, _) => Box::new(Plan::new(mode)),
    }
}

/// What the sessions of one run found at their start, so that the next one need not read
/// it again (issue 31): that the root had no undo journal to recover, and no deferred-work
/// record. Each fact holds while this process wrote no journal and no record since it was
/// seen (the count of `deferred::note_start_state_write`); a session that finds a journal
/// or a record forgets it. Between the agent's sessions under its package lock, only this
/// process writes either (a journal left by another process that died during the run is
/// recovered by the next run, or by a session after this process wrote one).
#[derive(Debug, Default)]
pub struct StartMemo {
    /// The write count when no journal was found.
    no_journals: std::sync::Mutex<Option<u64>>,
    /// The write count when no record was found.
    no_records: std::sync::Mutex<Option<u64>>,
}

impl StartMemo {
    fn get(cell: &std::sync::Mutex<Option<u64>>) -> Option<u64> {
        *cell.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(cell: &std::sync::Mutex<Option<u64>>, writes: u64, none: bool) {
        *cell.lock().unwrap_or_else(|p| p.into_inner()) = none.then_some(writes);
    }

    fn no_journals(&self, writes: u64) -> bool {
        StartMemo::get(&self.no_journals) == Some(writes)
    }

    fn no_records(&self, writes: u64) -> bool {
        StartMemo::get(&self.no_records) == Some(writes)
    }

    fn found_journals(&self, writes: u64, none: bool) {
        StartMemo::set(&self.no_journals, writes, none);
    }

    fn found_records(&self, writes: u64, none: bool) {
        StartMemo::set(&self.no_records, writes, none);
    }
}

/// Plan mode: the first effect of each kind that a session recorded without running its
/// program, each kept once set (names no path). A step's view mark clears the ones set
/// since ([`Unplanned::set`], [`Unplanned::clear_unset`]); a carry takes them all.
#[derive(Debug, Default)]
pub(in crate::host::seam::effects) struct Unplanned {
    /// Any ([`Effect::runs_program`]: a `run`/`sh` command, a package, service, mount,
    /// module, grub or tuned action): a later call's failure that depends on the host is
    /// unknown ([`Host::unplanned_command`]).
    pub(super) any: Option<PlannedCommand>,
    /// One that may install or remove packages, and so enable or start their units
    /// ([`Effect::may_change_packages`]): a later query of package or service state the
    /// plan's model does not answer is unknown ([`Host::exec_state_query`]).
    pub(super) packages: Option<PlannedCommand>,
    /// A package upgrade ([`Effect::upgrades_packages`]): a later query of a package's
    /// version is unknown.
    pub(super) upgrade: Option<PlannedCommand>,
}

impl Unplanned {
    /// Note `effect`, summarised as `summary` and planned at `position`, in each kind it
    /// is the first of.
    pub(super) fn note(&mut self, effect: &Effect, summary: &str, position: &Option<Position>) {
        let kinds = [
            (effect.runs_program(), &mut self.any),
            (effect.may_change_packages(), &mut self.packages),
            (effect.upgrades_packages(), &mut self.upgrade),
        ];
        for (is, first) in kinds {
            if is && first.is_none() {
                *first = Some(PlannedCommand {
                    command: summary.to_string(),
                    position: position.clone(),
                    paths: Vec::new(),
                });
            }
        }
    }

    /// Which kinds are set, for a view mark.
    pub(super) fn set(&self) -> [bool; 3] {
        [&self.any, &self.packages, &self.upgrade].map(Option::is_some)
    }

    /// Clear the kinds that were not set at `mark` ([`Unplanned::set`]).
    pub(super) fn clear_unset(&mut self, mark: [bool; 3]) {
        for (was, first) in
            mark.into_iter()
                .zip([&mut self.any, &mut self.packages, &mut self.upgrade])
        {
            if !was {
                *first = None;
            }
        }
    }
}

/// A command a plan recorded without running it ([`Host::note_planned_command`]).
#[derive(Debug)]
pub(in crate::host::seam::effects) struct PlannedCommand {
    /// The command line, shell-quoted.
    pub(super) command: String,
    /// Where the script planned it.
    pub(super) position: Option<Position>,
    /// The absolute paths its arguments and guards name (normalised; a glob cut at its
    /// directory).
    pub(super) paths: Vec<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testutil::TestHost;

    /// A run's sessions share a [`StartMemo`]: a step that records deferred work is seen by
    /// the next step's session, and once the record is gone the session after that sees
    /// none.
    #[test]
    fn deferred_work_recorded_in_the_run_is_seen_by_the_next_session() {
        let t = TestHost::new();
        let memo = StartMemo::default();
        let session = || {
            let root = HostRoot::open(&t.root).unwrap();
            Host::new_in_run(root, ExecMode::Plan, HostOptions::default(), &memo)
        };
        let first = session();
        assert!(!first.pending_daemon_reload);
        assert!(!first.pending_initramfs);
        deferred::record_daemon_reload(&first.cx.root).unwrap();
        deferred::record_initramfs(&first.cx.root).unwrap();
        let second = session();
        assert!(second.pending_daemon_reload);
        assert!(second.recorded_reload);
        assert!(second.pending_initramfs);
        deferred::clear(&second.cx.root, &deferred::daemon_reload_path()).unwrap();
        deferred::clear(&second.cx.root, &deferred::initramfs_path()).unwrap();
        let third = session();
        assert!(!third.pending_daemon_reload);
        assert!(!third.pending_initramfs);
        assert!(!third.recorded_reload);
    }
}
