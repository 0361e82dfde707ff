//! The batch of line edits (module docs of `session`, "Batched line edits"): the pending
//! edit, its flush through the executor, and what a flush leaves for the session.

use crate::host::effects::context::Context;
use crate::host::effects::effect::Effect;
use crate::host::effects::executors::Executor;
use crate::host::effects::lines::{Stamp, View};
use crate::host::root::HostRoot;
use crate::host::root::error::{HostError, Result};
use crate::host::root::pathlock::PathLock;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

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
