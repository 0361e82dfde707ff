//! Apply-mode batching of line and block edits: one write per file per run of edits
//! (issue 13).
//!
//! Without batching every changing `fs::ensure_line`, `fs::remove_line`, `fs::ensure_block`
//! and `fs::remove_block` call rewrote its whole file atomically (temp file, fsync, rename,
//! directory fsync) under the file's path lock: N edits of one file were N rewrites,
//! O(N × size) bytes and 2N fsyncs. Now, in apply mode (without `--diff`):
//!
//! - the **first** changing call of a file decides under the file's path lock
//!   ([`crate::host::root::pathlock`]) exactly as before and goes through [`Host::submit`] (checks,
//!   summary, `before` hash, the report's change), but its write is *held*: the new content
//!   stays in the session as the file's line view, together with the lock and the file's
//!   [`Stamp`] as read under the lock;
//! - **further** line and block edits of the same file (same lexically normalised host path,
//!   and the same spelling when either has a `..`, which resolves physically after a
//!   symlink) edit that pending view: no `stat`, no lock, no read, no write. Each changing
//!   call still records its own change in the report (summary `update <path>` as the call
//!   spelled it, its script position), so
//!   `Apply: N changed, M unchanged.` and the report's items are what they were;
//! - **anything else flushes first**: a line or block edit of another path, every
//!   [`Host::submit`] (commands included: a command may read the file), every
//!   [`Host::lock_for_update`] (so a session holds at most one path lock, and two agents
//!   cannot deadlock), the write-ahead records of deferred work, every read of the host
//!   through the session's view (`view_stat`, `view_read`, `view_list`) or through
//!   [`Host::root`], and the end of the session or step (`finish*`, and `Drop`).
//!
//! The **flush** `stat`s the file (still under the lock) and compares its stamp with the one
//! the view was read with: when it moved, a writer that does not take skyhook's path locks
//! (an editor, another tool's `sed -i`) changed the file during the step, and the flush
//! fails with [`HostError::ChangedUnderStep`] naming the file, leaving that writer's content
//! in place. Otherwise the final content is written once, with the same atomic write as an
//! [`Effect::WriteFile`] of the apply executor (`HostRoot::write_atomic_owned`: temp file,
//! fsync, rename, directory fsync; an existing file keeps mode, owner and extended
//! attributes), the lock is released and the view stays cached with the written file's stamp.
//! The last change of the batch carries the `after` hash of what was written
//! ([`crate::host::effects::hashes`]); a failed flush leaves it without one.
//!
//! A flush error is the step's error: reads and effects return it when they trigger the
//! flush (the read or effect is then not done), [`Host::root`] (which cannot fail) keeps it
//! for the next fallible call, and `finish*` return it. When a call got it and the script
//! went on (a `try` around an unrelated read), `finish*` still fail, with
//! [`HostError::EditsNotWritten`] naming the file, so no step flag is written for a report
//! whose edits are not on disk. The changes a failed batch recorded
//! stay in the report. A step that fails after some edits still has them written by
//! `finish*` (as before batching, when each was written at once). A SIGKILL before the flush
//! writes nothing of the batch (and no step flag), and the kernel releases the lock, so a
//! rerun converges.
//!
//! Plan and check mode never batch (they write nothing; their reports and overlays are
//! unchanged), nor does apply mode with diffs (`skyhook-run --apply --diff`), whose diffs
//! compare each call's content with the file's.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::host::Host;
use crate::host::effects::effect::Effect;
use crate::host::effects::lines::{Lines, Stamp, View};
use crate::host::effects::report::{Change, ExecMode};
use crate::host::root::HostRoot;
use crate::host::root::error::{HostError, Result};
use crate::host::root::pathlock::PathLock;

/// The session's pending write of one file and what its last flush left for the session.
/// Behind a mutex because reads through `&Host` flush it (the session stays `Send`).
#[derive(Debug, Default)]
pub(crate) struct Batch(Mutex<State>);

#[derive(Debug, Default)]
struct State {
    pending: Option<Pending>,
    /// The last flush's write, until the session takes it ([`Host::settle_batch`]).
    written: Option<Written>,
    /// The file whose flush failed (its last change must not get an `after` hash).
    failed: Option<PathBuf>,
    /// The failed flush's error, until a fallible call returns it.
    error: Option<HostError>,
    /// The first failed flush of the step (file and error text), until the step ends: the
    /// step fails even when a call got `error` and the script went on.
    unwritten: Option<(PathBuf, String)>,
}

/// Edits of one file not written yet.
#[derive(Debug)]
struct Pending {
    /// The host path as the first call gave it (written through it).
    path: PathBuf,
    /// Its lexical normal form (the key of later calls and of the session's views).
    key: PathBuf,
    /// The file's lines with every edit of the batch.
    view: View,
    /// The file's stamp as read under the lock (`None`: it did not exist).
    stamp: Option<Stamp>,
    /// The number of changing calls in the batch.
    edits: usize,
    /// The index of the batch's last change in the report.
    last_change: usize,
    /// Keep the view after the flush (false once a line with a line break was added: the
    /// lines then no longer describe the bytes).
    keep_view: bool,
    /// The file's path lock, held until the flush.
    _lock: PathLock,
}

/// What a successful flush wrote.
#[derive(Debug)]
struct Written {
    key: PathBuf,
    index: usize,
    content: bytes::Bytes,
    view: Option<View>,
}

impl Batch {
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn state_mut(&mut self) -> &mut State {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    /// Write the pending edits, if any; a failure is kept for the next fallible call.
    pub(crate) fn flush(&self, root: &HostRoot) {
        let mut st = self.state();
        if st.pending.is_some() {
            st.flush(root);
        }
    }

    /// [`Batch::flush`], then return a failure of this or an earlier flush (once).
    ///
    /// # Errors
    /// [`HostError::ChangedUnderStep`], or the write's failure (it names the file).
    pub(crate) fn flush_checked(&self, root: &HostRoot) -> Result<()> {
        let mut st = self.state();
        if st.pending.is_some() {
            st.flush(root);
        }
        match st.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl State {
    fn flush(&mut self, root: &HostRoot) {
        let Some(mut p) = self.pending.take() else {
            return;
        };
        match write(root, &mut p) {
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

/// The flush's compare and write (module docs); returns the bytes written.
fn write(root: &HostRoot, p: &mut Pending) -> Result<bytes::Bytes> {
    let now = root.metadata(&p.path)?.map(|m| Stamp::of(&m));
    if now != p.stamp {
        return Err(HostError::ChangedUnderStep {
            path: p.path.clone(),
            edits: p.edits,
        });
    }
    let content = p.view.lines.render();
    root.write_atomic_owned(&p.path, &content, None, None, None)?;
    // Still under the lock: the stamp of the file just written.
    p.view.stamp = root.metadata(&p.path)?.map(|m| Stamp::of(&m));
    p.view.exists = true;
    Ok(content)
}

impl Host {
    /// Whether a changing line edit's write is held in a batch: apply mode without diffs.
    pub(crate) fn batches_line_edits(&self) -> bool {
        self.mode() == ExecMode::Apply && !self.options().diffs
    }

    /// Write the pending edits (module docs) before something that reads the host outside
    /// the session's view (a command).
    ///
    /// # Errors
    /// A failure of this or an earlier flush (once), as [`Host::settle_batch`].
    pub(crate) fn flush_batch(&self) -> Result<()> {
        self.batch.flush_checked(self.root())
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
}

impl Host {
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
        kind: effect.kind().into(),
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
