//! Apply-mode batching of line and block edits: one write per file per run of edits, so N
//! edits of one file cost one rewrite (temp file, fsync, rename) instead of N, and the
//! directory one fsync at the step's end. In apply mode (without `--diff`):
//!
//! - the **first** changing call of a file decides under the file's path lock
//!   ([`crate::host::root::pathlock`]) and goes through [`crate::host::Host::submit`] (checks,
//!   summary, `before` hash, the report's change), but its write is *held*: the new content
//!   stays in the session as the file's line view, together with the lock and the file's
//!   [`Stamp`] as read under the lock;
//! - **further** line and block edits of the same file (same lexically normalised host path,
//!   and the same spelling when either has a `..`, which resolves physically after a
//!   symlink) edit that pending view: no `stat`, no lock, no read, no write. Each changing
//!   call still records its own change in the report (summary `update <path>` as the call
//!   spelled it, its script position), so
//!   `Apply: N changed, M unchanged.` and the report's items are those of unbatched edits;
//! - **anything else flushes first**: a line or block edit of another path, every
//!   [`crate::host::Host::submit`] (commands included: a command may read the file), every
//!   [`crate::host::Host::lock_for_update`] (so a session holds at most one path lock, and two agents
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
//! ([`crate::host::effects::executors::Executor::execute_batched`]; the apply executor's
//! atomic write: temp file, fsync, rename, the directory noted for the step's fsync; an
//! existing file keeps mode, owner and extended attributes), the lock is released and the
//! view stays cached with the written file's stamp.
//! The last change of the batch carries the `after` hash of what was written
//! ([`crate::host::effects::hashes`]); a failed flush leaves it without one.
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

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::host::effects::context::Context;
use crate::host::effects::effect::Effect;
use crate::host::effects::executors::Executor;
use crate::host::effects::lines::{Stamp, View};
use crate::host::root::HostRoot;
use crate::host::root::error::{HostError, Result};
use crate::host::root::pathlock::PathLock;

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
