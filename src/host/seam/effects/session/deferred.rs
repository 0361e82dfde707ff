//! Deferred work: the coalesced daemon-reload, grub and initramfs regenerations, their
//! write-ahead records (written by the executor, `Executor::record_deferred`), and their
//! run at the end of the step.

use super::Host;
use crate::host::effects::effect::{Effect, GrubUpdate, InitramfsTool};
use crate::host::effects::executors::Deferred;
use crate::host::root::deferred::{self, GrubPending};
use crate::host::root::error::Result;

impl Host {
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
    pub(super) fn settle_reload_record(&mut self, ok: bool, was_pending: bool) {
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

    pub(super) fn run_deferred(&mut self) -> Result<()> {
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
    pub(super) fn run_initramfs(&mut self) -> Result<()> {
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
}
