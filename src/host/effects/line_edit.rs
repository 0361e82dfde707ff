//! The line and block edits of the `fs::` area through the session: one parsed view of a
//! file per session ([`crate::host::effects::lines`]), decided again under the path's lock in
//! apply mode, and either batched (apply: one write per run of edits,
//! [`crate::host::effects::batch`]) or submitted as one whole-file write.

use std::path::Path;

use crate::host::effects::effect::Effect;
use crate::host::effects::lines::{Lines, Stamp};
use crate::host::effects::session::Host;
use crate::host::effects::textdiff::Appended;
use crate::host::root::error::Result;
use crate::host::root::pathlock::PathLock;

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
    let key = crate::host::effects::plan::normalize(path);
    // Apply mode: a batch of this file's edits is open, or another file's is written first.
    if let Some(changed) = crate::host::effects::batch::edit_pending(h, path, &key, &change)? {
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
            crate::host::effects::batch::begin(h, path, key, view, lock);
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
