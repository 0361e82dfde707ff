//! The one interface of the executors ([`Executor`]) and the deferred-work records a
//! session asks them to write ([`Deferred`]).

use crate::host::effects::context::Context;
use crate::host::effects::effect::Effect;
use crate::host::effects::exec::CmdOutput;
use crate::host::effects::overlay::Overlay;
use crate::host::effects::report::ExecMode;
use crate::host::root::error::{HostError, Result};

/// A deferred-work record ([`crate::host::root::deferred`]) the session asks its executor
/// to write.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Deferred<'a> {
    /// A due `systemctl daemon-reload`.
    DaemonReload,
    /// The grub work due.
    Grub(&'a crate::host::root::deferred::GrubPending),
    /// A due initramfs regeneration.
    Initramfs,
}

impl Deferred<'_> {
    /// The record's host path.
    pub(crate) fn path(&self) -> std::path::PathBuf {
        use crate::host::root::deferred;
        match self {
            Deferred::DaemonReload => deferred::daemon_reload_path(),
            Deferred::Grub(_) => deferred::grub_path(),
            Deferred::Initramfs => deferred::initramfs_path(),
        }
    }
}

/// What a session does with its effects.
pub(crate) trait Executor: std::fmt::Debug + Send {
    /// The mode the session reports as ([`crate::host::Report::mode`]).
    fn mode(&self) -> ExecMode;

    /// Carry out one effect the session validated and will report. Returns the output of
    /// [`Effect::Command`] and [`Effect::GuardedCommand`] (a planned output when nothing
    /// ran), `None` for other effects.
    ///
    /// # Errors
    /// Whatever performing the effect fails with; reading the state a record needs.
    fn execute(&mut self, cx: &Context, effect: &Effect) -> Result<Option<CmdOutput>>;

    /// Carry out the [`Effect::WriteFile`] of a batch of line edits
    /// (the session's batch, [`crate::host::effects::session`]). Takes `&self` because any read of the session
    /// (through `&Host`) flushes the batch. Only an executor that [`Executor::changes_host`]
    /// is given one; the others refuse it.
    ///
    /// # Errors
    /// As [`Executor::execute`]; [`HostError::Invalid`] from an executor that does not
    /// batch.
    fn execute_batched(&self, _cx: &Context, _effect: &Effect) -> Result<()> {
        Err(HostError::Invalid {
            what: "executor",
            message: format!("{:?} executor does not batch line edits", self.mode()),
        })
    }

    /// Whether effects change the host: only then does the session take cross-process
    /// locks, batch line edits and write deferred-work records into the root.
    fn changes_host(&self) -> bool {
        false
    }

    /// The read overlay the session's reads go through; `None`: reads go to the real root.
    fn overlay(&self) -> Option<&Overlay> {
        None
    }

    /// The overlay, to plan what the session changes outside an effect (the lock
    /// directory).
    fn overlay_mut(&mut self) -> Option<&mut Overlay> {
        None
    }

    /// The effects recorded, in order; `None` for an executor that keeps none.
    fn recorded(&self) -> Option<&[Effect]> {
        None
    }

    /// Whether the executor keeps an undo journal of the step's files
    /// ([`crate::host::effects::journal`]): only then does a failed step end with
    /// [`Executor::undo`] instead of its deferred work.
    fn journals(&self) -> bool {
        false
    }

    /// [`Executor::execute`] for a line or block edit's write of a whole file (the undo
    /// journal records the edit's lines, so that an undo can take out just the edit).
    ///
    /// # Errors
    /// As [`Executor::execute`].
    fn execute_line_edit(
        &mut self,
        cx: &Context,
        effect: &Effect,
    ) -> Result<Option<crate::host::effects::exec::CmdOutput>> {
        self.execute(cx, effect)
    }

    /// The first failed write of the undo journal: the step is poisoned (every later
    /// effect and its end fail, [`crate::host::effects::journal`]).
    fn journal_failure(&self) -> Option<String> {
        None
    }

    /// Record ahead, in the undo journal, the content writes `effects` the session is about
    /// to submit in this order, synced once ([`crate::host::effects::journal`]).
    ///
    /// # Errors
    /// A poisoned journal or a failed journal write.
    fn journal_ahead(&self, _cx: &Context, _effects: &[Effect]) -> Result<()> {
        Ok(())
    }

    /// Record the before-state of `path`, which the session is about to change outside an
    /// effect (a deferred-work record), in the undo journal.
    ///
    /// # Errors
    /// Reading the state or writing the journal (the change must then not be made).
    fn journal_path(&self, _cx: &Context, _path: &std::path::Path) -> Result<()> {
        Ok(())
    }

    /// Write the deferred-work record `record` into the root (durable: atomic write, fsync;
    /// [`crate::host::root::deferred`]), its before-state first in the undo journal when
    /// `journal` (a write-ahead, before the change that makes the work due). Returns whether
    /// it was written: only an executor that [`Executor::changes_host`] writes one.
    ///
    /// # Errors
    /// The journal, creating the directory or writing the record (the change must then not
    /// be made).
    fn record_deferred(
        &self,
        _cx: &Context,
        _record: Deferred<'_>,
        _journal: bool,
    ) -> Result<bool> {
        Ok(false)
    }

    /// Remove the deferred-work record at `path` (its work succeeded, or a write-ahead is
    /// taken back); absent is fine. Returns whether this executor removes records (only one
    /// that [`Executor::changes_host`]).
    ///
    /// # Errors
    /// The removal failed.
    fn clear_deferred(&self, _cx: &Context, _path: &std::path::Path) -> Result<bool> {
        Ok(false)
    }

    /// The step succeeded and its writes are durable: drop the undo journal.
    ///
    /// # Errors
    /// Removing the journal.
    fn commit_step(&mut self, _cx: &Context) -> Result<()> {
        Ok(())
    }

    /// The step failed: put the journaled files back and drop the journal. Returns one
    /// line per file that could not be put back.
    ///
    /// # Errors
    /// Reading the journal (it is then left for the next run's recovery).
    fn undo(&mut self, _cx: &Context) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
}
