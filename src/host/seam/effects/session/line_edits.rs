//! The line and block edits of the `fs::` area through the session: one parsed view of a
//! file per session (`effects::lines`), decided again under the path's lock in apply mode,
//! and either batched (apply) or submitted as one whole-file write.

use super::Host;
use super::batch::Pending;
use crate::host::effects::effect::Effect;
use crate::host::effects::lines::{Lines, Stamp, View};
use crate::host::effects::report::Change;
use crate::host::effects::textdiff::Appended;
use crate::host::root::error::HostError;
use crate::host::root::error::Result;
use crate::host::root::pathlock::PathLock;
use std::path::{Path, PathBuf};

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

// ---- the session and its batch ----

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
