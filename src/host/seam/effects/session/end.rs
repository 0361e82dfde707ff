//! The ends of a step: [`Host::finish`] and [`Host::fail_with_report`] and their per-step
//! forms, one tail ([`Host::end_step`]) for all, and the `Drop` safety net.

use super::Host;
use crate::host::effects::report::Report;
use crate::host::root::deferred::GrubPending;
use crate::host::root::error::Result;

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

/// The report kinds of the changes a failed step's undo journal puts back (files and live
/// sysctl values); every other change or action of the step is "not undone".
pub const UNDONE_KINDS: [&str; 10] = [
    "write",
    "remove",
    "mkdir",
    "remove_all",
    "chmod",
    "chown",
    "mtime",
    "symlink",
    "sysctl",
    "fetch",
];

/// The report's changes and actions that are not files (module docs of
/// [`crate::host::effects::journal`]): their summaries, in the step's order.
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

/// How a step ends ([`Host::end_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// `finish*`: the deferred work runs.
    Finish,
    /// `fail*`: with an undo journal the step's files are put back instead.
    Fail,
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
        let (report, _, result) = self.end_step(End::Finish, false);
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
        let (report, _, result) = self.end_step(End::Finish, true);
        (report, result)
    }

    /// End a failed step's session (module docs, "A failed step"): with an undo journal,
    /// the step's files are put back and its deferred work is not run; without one
    /// (plan, check, an apply session without [`HostOptions::undo`]) exactly
    /// [`Host::finish_with_report`].
    ///
    /// [`HostOptions::undo`]: crate::host::HostOptions::undo
    pub fn fail_with_report(mut self) -> (Report, Undone, Result<()>) {
        self.finished = true;
        self.end_step(End::Fail, false)
    }

    /// [`Host::fail_with_report`] for one step of a session that serves several
    /// ([`Host::finish_step_with_report`]).
    pub fn fail_step_with_report(&mut self) -> (Report, Undone, Result<()>) {
        self.end_step(End::Fail, true)
    }

    /// The one tail of every end of a step. A finish, or a failure without an undo journal:
    /// the batch is written, the deferred work runs, the step's directories are synced and
    /// its journal dropped. A failure with a journal: [`Host::undo_step`]. Then the step's
    /// report is taken (its `after` hashes filled, its ordered items attached) and a fresh
    /// one left; `next_step` clears the deadline for the session's next step.
    fn end_step(&mut self, end: End, next_step: bool) -> (Report, Undone, Result<()>) {
        let undo = end == End::Fail && self.executor.journals();
        let (not_restored, result) = match undo {
            true => self.undo_step(),
            false => {
                let flushed = self.settle_batch_at_step_end();
                let result = flushed.and(self.run_deferred()).and(self.sync_dirs());
                let result = result.and_then(|()| self.executor.commit_step(&self.cx));
                (Vec::new(), result)
            }
        };
        let fresh = Report::new(self.mode());
        let mut report = std::mem::replace(&mut self.report, fresh);
        self.hashes.fill(&mut report.changes, &self.redactor);
        report.items = self.journal.take();
        let result = result.and(self.charge_output(&report.items));
        if next_step {
            self.cx.opts.deadline = None;
        }
        let undone = match undo {
            true => Undone {
                not_undone: not_undoable(&report)
                    .into_iter()
                    .chain(not_restored)
                    .collect(),
            },
            false => Undone::default(),
        };
        (report, undone, result)
    }

    /// Write what is batched (so the journal holds its before-state), drop the deferred
    /// work, replay the journal. Returns the files that could not be put back, and the
    /// first failure of the batch's write, the directory fsyncs or the journal.
    pub(super) fn undo_step(&mut self) -> (Vec<String>, Result<()>) {
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
