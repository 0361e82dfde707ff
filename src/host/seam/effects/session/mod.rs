//! [`Host`]: one step's session over the host root, and its executor.
//!
//! A `Host` is created per step with an `ExecMode`, which picks its executor once
//! (`effects/executors`). API functions (`fs::write`, `service::start`, ...)
//! read through the session's *view* and hand every mutation to [`Host::submit`] as an
//! `Effect`; the session validates it, describes it for the report, and hands it to the
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
//! `Report`. A failed step ends with [`Host::fail_with_report`] instead (below). As a
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
//! (`HostError::BadAncestor`), and `/` itself cannot be removed.

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
//! fails with `HostError::ChangedUnderStep` naming the file, leaving that writer's content
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
//! `HostError::EditsNotWritten` naming the file, so no step flag is written for a report
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

mod batch;
mod carry;
mod deferred;
mod end;
mod host;
mod line_edits;
mod locks;
#[cfg(test)]
mod lookup_budget_tests;
mod planned;
mod step_view;
mod submit;

pub use crate::host::effects::context::HostOptions;
pub use crate::host::effects::overlay::Stat;
pub use carry::PlanCarry;
pub use end::{UNDONE_KINDS, Undone};
pub use host::{Host, StartMemo};
pub(crate) use line_edits::{LineEdit, edit_lines};
pub use locks::ToolLock;
pub(crate) use planned::StateRead;
pub use step_view::ViewMark;
