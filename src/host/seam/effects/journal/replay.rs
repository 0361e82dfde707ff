//! The undo: replaying a journal's records in reverse through [`HostRoot`] (following no
//! symlink below the root, keeping another writer's later changes), and the recovery of
//! journals left by steps that did not end ([`recover`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::dir::{LockOp, hold_dir, lock, remove_journal};
use super::log::{Entry, entries_of};
use super::records::{
    ABSENT, ANY, DIR, LOG, LineEdit, Record, State, hex, invert, jerr, lines_of, state_of,
};
use super::xattr::set_xattrs;
use crate::host::root::durability::DirSyncs;
use crate::host::root::error::{HostError, Result};
use crate::host::root::staging::boot_id;
use crate::host::root::undo_ops::Node;
use crate::host::root::{DirSync, EntryKind, HostRoot};

/// Whether two [`State`]s agree (`*`, whatever the step wrote, agrees with any).
pub(super) fn agrees(a: &str, b: &str) -> bool {
    a == b || a == ANY || b == ANY
}

/// Replay the log `reader` of the journal in `jdir` backwards (module docs). Returns one
/// line per record that could not be put back, and one for a log that stops being
/// readable before its end.
pub(super) fn replay(root: &HostRoot, reader: File, jdir: &Path) -> Result<Vec<String>> {
    // The replay follows no symlink below the root (principle 3): a clone of the root
    // with `/` confined (`RESOLVE_NO_SYMLINKS`, the kernel holding the line), the agent's
    // own state directory confined first, as it is found (resolved inside the root).
    let confined = root.try_clone()?;
    let state_dir = Path::new(DIR).parent().unwrap_or(Path::new("/"));
    let _state = confined.confine(state_dir)?;
    let _all = confined.confine(Path::new("/"))?;
    let root = &confined;
    let log_path = jdir.join(LOG);
    let (entries, damage) = entries_of(root, &reader, &log_path)?;
    let mut log = reader;
    // Each wrote record belongs to the path's latest state record before it.
    let mut writes: Vec<Vec<usize>> = (0..entries.len()).map(|_| Vec::new()).collect();
    let mut state_of_path: HashMap<&Path, usize> = HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        match &e.rec {
            Record::Start { .. } => {}
            Record::Wrote { path, .. } => {
                if let Some(&s) = state_of_path.get(path.as_path()) {
                    writes[s].push(i);
                }
            }
            rec => {
                state_of_path.insert(rec_path(rec), i);
            }
        }
    }
    let syncs = DirSyncs::default();
    let mut failed = Vec::new();
    if let Some(d) = &damage {
        failed.push(format!(
            "{}: the undo journal is not readable from byte {} ({}): what the step changed after that is not undone",
            log_path.display(),
            d.offset,
            d.why
        ));
    }
    for (i, e) in entries.iter().enumerate().rev() {
        if matches!(e.rec, Record::Start { .. } | Record::Wrote { .. }) {
            continue;
        }
        let w: Vec<&Record> = writes[i].iter().map(|&k| &entries[k].rec).collect();
        match restore_checked(root, e, &w, &mut log, jdir, &syncs) {
            Ok(None) => {}
            Ok(Some(line)) => failed.push(line),
            Err(err) => failed.push(format!(
                "{}: {}",
                rec_path(&e.rec).display(),
                crate::chain::render(&err)
            )),
        }
    }
    if let Err(e) = syncs.sync(root) {
        failed.push(crate::chain::render(&e));
    }
    Ok(failed)
}

/// `rec` with its path made canonical (its parent's symlinks resolved inside the root, as
/// the path lock's key is: [`lock_key`]), or `None` when it is already (or has no parent
/// yet, or is a sysctl). The replay follows no symlink: one on the way when the step
/// wrote (`/var/run -> /run`) is resolved here, so only one swapped in since stops it.
pub(super) fn canonical_record(root: &HostRoot, rec: &Record) -> Option<Record> {
    if matches!(rec, Record::Start { .. } | Record::Sysctl { .. }) {
        return None;
    }
    let path = rec_path(rec);
    let canon = lock_key(root, path);
    if canon == path {
        return None;
    }
    let mut rec = rec.clone();
    match &mut rec {
        Record::Start { .. } | Record::Sysctl { .. } => {}
        Record::Absent { path }
        | Record::File { path, .. }
        | Record::Dir { path, .. }
        | Record::Symlink { path, .. }
        | Record::Moved { path, .. }
        | Record::Special { path, .. }
        | Record::Wrote { path, .. } => *path = canon,
    }
    Some(rec)
}

/// Whether a symlink is on the way to `path` (one of its ancestors, below the root, is a
/// symlink now). The replay follows none ([`replay`]): one there now was swapped in since
/// the step wrote, as its records are canonical.
pub(super) fn symlink_on_the_way(root: &HostRoot, path: &Path) -> Result<bool> {
    let mut cur = PathBuf::from("/");
    let Some(parent) = path.parent() else {
        return Ok(false);
    };
    for c in parent.components().skip(1) {
        cur.push(c);
        match root.symlink_metadata(&cur)? {
            Some(m) if m.file_type().is_symlink() => return Ok(true),
            Some(_) => {}
            None => return Ok(false),
        }
    }
    Ok(false)
}

pub(super) fn rec_path(rec: &Record) -> &Path {
    match rec {
        Record::Start { .. } => Path::new(DIR),
        Record::Absent { path }
        | Record::File { path, .. }
        | Record::Dir { path, .. }
        | Record::Symlink { path, .. }
        | Record::Sysctl { path, .. }
        | Record::Moved { path, .. }
        | Record::Special { path, .. }
        | Record::Wrote { path, .. } => path,
    }
}

/// The path lock's key of the host path `path` (its parent's canonical form plus its
/// name), as the session takes it for an edit.
pub(super) fn lock_key(root: &HostRoot, path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => match root.canonical(parent) {
            Ok(Some(d)) => d.join(name),
            _ => path.to_path_buf(),
        },
        _ => path.to_path_buf(),
    }
}

/// Whether `path` is one of the user database's files, which `useradd` and friends edit
/// under `/etc/.pwd.lock` only.
pub(super) fn is_user_db(path: &Path) -> bool {
    crate::host::root::pwdlock::is_user_db(path)
}

/// Put back the state record `e` whose path the step then wrote as `writes` say, under
/// the path's lock (principle: never over a change the step did not make). `Ok(Some)`:
/// a line saying what was left.
pub(super) fn restore_checked(
    root: &HostRoot,
    e: &Entry,
    writes: &[&Record],
    log: &mut File,
    jdir: &Path,
    syncs: &DirSyncs,
) -> Result<Option<String>> {
    let path = rec_path(&e.rec);
    if symlink_on_the_way(root, path)? {
        return Ok(Some(format!(
            "{}: a symlink on the way since this step wrote it",
            path.display()
        )));
    }
    let file_like = matches!(
        e.rec,
        Record::Absent { .. }
            | Record::File { .. }
            | Record::Moved { .. }
            | Record::Special { .. }
            | Record::Symlink { .. }
    );
    if !file_like {
        restore(root, &e.rec, log, (e.offset, e.len), jdir, syncs)?;
        return Ok(None);
    }
    let _lock = crate::host::root::pathlock::lock(root, &lock_key(root, path))?;
    // The user database's own tools (`useradd`) take only the shadow-utils lock: held
    // after the path lock, in the order an edit takes them (`session::edit_lines`).
    let _pwd = if is_user_db(path) {
        Some(crate::host::root::pwdlock::lock_pwd(root).map_err(HostError::Root)?)
    } else {
        None
    };
    let now = state_of(root, path)?;
    if matches!(e.rec, Record::Absent { .. }) && now == "dir" {
        // A directory the step created: its own entries are undone already (recorded
        // after it, replayed before it); removed only if nothing else is left in it.
        // A temporary a write of the step's left when its process was killed is the
        // step's too: removed with it.
        let mut left = 0;
        for d in root.read_dir(path)? {
            match d.name.to_str() {
                Some(name)
                    if d.kind == EntryKind::File && crate::host::root::is_stale_tmp(name) =>
                {
                    root.remove_file(&path.join(name))?;
                }
                _ => left += 1,
            }
        }
        if left > 0 {
            return Ok(Some(format!(
                "{} holds entries this step did not make",
                path.display()
            )));
        }
        root.remove_dir(path)?;
        syncs.add_parent_of(path);
        return Ok(None);
    }
    if let Record::Moved { stash, .. } = &e.rec {
        // A stash is a number named by this journal: never a path out of its directory.
        if stash.is_empty() || !stash.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(Some(format!(
                "{}: its moved-aside stash {stash:?} is not a name in the journal's directory",
                path.display()
            )));
        }
        if root.symlink_metadata(&jdir.join(stash))?.is_none() {
            // Put back already (an undo cut short), or never moved.
            return Ok(None);
        }
        if now != ABSENT {
            return Ok(Some(format!(
                "{} changed by another writer since this step removed it",
                path.display()
            )));
        }
        restore(root, &e.rec, log, (e.offset, e.len), jdir, syncs)?;
        return Ok(None);
    }
    let before: State = match &e.rec {
        Record::Absent { .. } => ABSENT.into(),
        Record::File { .. } => format!("sha256:{}", hex(&e.digest)),
        Record::Symlink { target, .. } => format!("symlink:{}", target.display()),
        _ => "other".into(),
    };
    if now == before && as_recorded(root, path, &e.rec)? {
        // Never written (a record ahead of a batch that failed before it), or written back
        // as it was: nothing to put back, so no new inode and no free space needed.
        return Ok(None);
    }
    let mut chain = true;
    let mut prev = before.as_str();
    let mut last_base = before.as_str();
    for w in writes {
        if let Record::Wrote { base, after, .. } = w {
            // A write whose base is the previous write's base: that previous write did not
            // land (it failed after its record, or was recorded ahead of a batch that failed
            // before it), and the step went on from the state before it.
            chain &= agrees(base, prev) || agrees(base, last_base);
            last_base = base;
            prev = after;
        }
    }
    let expected = prev;
    // The mode and owner the step's last content write left, when recorded: another
    // writer's `chmod`/`chown` on the step's content is a change the undo keeps.
    let left_meta = match writes.last() {
        Some(Record::Wrote { meta, .. }) => *meta,
        _ => None,
    };
    let meta_changed = match left_meta {
        Some((mode, uid, gid)) if now != before && now.starts_with("sha256:") => root
            .symlink_metadata(path)?
            .is_some_and(|m| m.mode() & 0o7777 != mode || m.uid() != uid || m.gid() != gid),
        _ => false,
    };
    if writes.is_empty() {
        if let Record::File { mode, uid, gid, .. } = &e.rec
            && now != before
            && now.starts_with("sha256:")
        {
            // Only the mode or owner was the step's (a chmod, chown): put those back on
            // the content another writer left.
            root.set_owner(path, Some(*uid), Some(*gid))?;
            root.set_mode(path, *mode)?;
            return Ok(None);
        }
        restore(root, &e.rec, log, (e.offset, e.len), jdir, syncs)?;
        return Ok(None);
    }
    // The file holds what the step wrote, what it was before the step's last write (which
    // did not land), or what it was before the step (put back by an undo cut short).
    if !meta_changed && (now == before || (chain && (agrees(&now, expected) || now == last_base))) {
        restore(root, &e.rec, log, (e.offset, e.len), jdir, syncs)?;
        return Ok(None);
    }
    let edits: Option<Vec<&LineEdit>> = writes
        .iter()
        .map(|w| match w {
            Record::Wrote { lines, .. } => lines.as_ref(),
            _ => None,
        })
        .collect();
    if let Some(edits) = edits
        && now.starts_with("sha256:")
    {
        let text = root.read_regular(path, crate::host::root::read::MAX_READ_BYTES)?;
        if let Some(mut lines) = lines_of(&text) {
            for edit in edits.iter().rev() {
                invert(&mut lines, edit);
            }
            if lines.is_empty() && matches!(e.rec, Record::Absent { .. }) {
                root.remove_file(path)?;
                syncs.add_parent_of(path);
                return Ok(None);
            }
            let mut out = lines.join("\n").into_bytes();
            if !out.is_empty() {
                out.push(b'\n');
            }
            let add = |d: &Path| syncs.add(d);
            root.write_atomic_synced(path, None, None, None, DirSync::Defer(&add), |f| {
                f.write_all(&out)
            })?;
            return Ok(None);
        }
    }
    Ok(Some(format!(
        "{} changed by another writer since this step wrote it",
        path.display()
    )))
}

/// Whether the regular file at `path` has the mode, owner and extended attributes of file
/// record `rec` (its content compared by the caller); `false` for any other record.
fn as_recorded(root: &HostRoot, path: &Path, rec: &Record) -> Result<bool> {
    let Record::File {
        mode,
        uid,
        gid,
        xattrs,
        ..
    } = rec
    else {
        return Ok(false);
    };
    match root.symlink_metadata(path)? {
        Some(m)
            if m.is_file() && m.mode() & 0o7777 == *mode && m.uid() == *uid && m.gid() == *gid => {}
        _ => return Ok(false),
    }
    let f = root.open_regular(path)?;
    let now = super::xattr::read_xattrs(&f).map_err(|e| jerr(path, root, e))?;
    let key = |x: &super::xattr::Xattr| (x.name.clone(), x.value.clone());
    let mut now: Vec<_> = now.iter().map(key).collect();
    let mut was: Vec<_> = xattrs.iter().map(key).collect();
    now.sort();
    was.sort();
    Ok(now == was)
}

/// Remove whatever is at `path` (a tree too) unless it is of kind `keep`.
pub(super) fn clear(
    root: &HostRoot,
    path: &Path,
    keep: Option<&str>,
    syncs: &DirSyncs,
) -> Result<()> {
    let Some(m) = root.symlink_metadata(path)? else {
        return Ok(());
    };
    let ft = m.file_type();
    let kept = match keep {
        Some("file") => ft.is_file(),
        Some("dir") => ft.is_dir(),
        _ => false,
    };
    if kept {
        return Ok(());
    }
    if ft.is_dir() {
        root.remove_all(path)?;
    } else {
        root.remove_file(path)?;
    }
    syncs.add_parent_of(path);
    Ok(())
}

/// Make `path`'s missing parents (0755), noting them for the step's fsync.
pub(super) fn make_parents(root: &HostRoot, path: &Path, syncs: &DirSyncs) -> Result<()> {
    if let Some(parent) = path.parent() {
        for d in root.create_dir_all(parent, crate::host::root::PARENT_DIR_MODE)? {
            syncs.add_parent_of(&d);
        }
    }
    Ok(())
}

/// Put `rec`'s state back as it was (content at `offset` in `log`).
pub(super) fn restore(
    root: &HostRoot,
    rec: &Record,
    log: &mut File,
    (offset, len): (u64, u64),
    jdir: &Path,
    syncs: &DirSyncs,
) -> Result<()> {
    match rec {
        Record::Start { .. } | Record::Wrote { .. } => Ok(()),
        Record::Absent { path } => clear(root, path, None, syncs),
        Record::Moved { path, stash } => {
            let from = jdir.join(stash);
            if root.symlink_metadata(&from)?.is_none() {
                // The rename never happened (or crossed filesystems: other records hold it).
                return Ok(());
            }
            clear(root, path, None, syncs)?;
            make_parents(root, path, syncs)?;
            root.rename_noreplace(&from, path)?;
            syncs.add_parent_of(path);
            syncs.add(jdir);
            Ok(())
        }
        Record::Special {
            path,
            node,
            mode,
            uid,
            gid,
            rdev,
        } => {
            let kind = match node.as_str() {
                "fifo" => Node::Fifo,
                "char" => Node::Char,
                "block" => Node::Block,
                _ => {
                    return Err(jerr(
                        path,
                        root,
                        std::io::Error::other(format!(
                            "was a {node}, which cannot be made again (its server makes it)"
                        )),
                    ));
                }
            };
            clear(root, path, None, syncs)?;
            make_parents(root, path, syncs)?;
            root.make_node(path, kind, *mode, *rdev)?;
            root.set_owner(path, Some(*uid), Some(*gid))?;
            syncs.add_parent_of(path);
            Ok(())
        }
        Record::File {
            path,
            mode,
            uid,
            gid,
            xattrs,
        } => {
            clear(root, path, Some("file"), syncs)?;
            make_parents(root, path, syncs)?;
            log.seek(SeekFrom::Start(offset))
                .map_err(|e| jerr(path, root, e))?;
            let add = |d: &Path| syncs.add(d);
            root.write_atomic_synced(
                path,
                Some(*mode),
                Some(*uid),
                Some(*gid),
                DirSync::Defer(&add),
                |f| {
                    crate::host::root::reserve(f, len)?;
                    let n = std::io::copy(&mut (&mut *log).take(len), f)?;
                    if n == len {
                        Ok(())
                    } else {
                        Err(std::io::ErrorKind::UnexpectedEof.into())
                    }
                },
            )?;
            let f = root.open_read(path)?;
            set_xattrs(&f, xattrs).map_err(|e| jerr(path, root, e))?;
            f.sync_all().map_err(|e| jerr(path, root, e))?;
            Ok(())
        }
        Record::Dir {
            path,
            mode,
            uid,
            gid,
            xattrs,
        } => {
            clear(root, path, Some("dir"), syncs)?;
            for d in root.create_dir_all(path, *mode)? {
                syncs.add_parent_of(&d);
            }
            root.set_owner(path, Some(*uid), Some(*gid))?;
            root.set_mode(path, *mode)?;
            let f = root.open_read(path)?;
            set_xattrs(&f, xattrs).map_err(|e| jerr(path, root, e))?;
            f.sync_all().map_err(|e| jerr(path, root, e))?;
            Ok(())
        }
        Record::Symlink { path, target } => {
            if root
                .symlink_metadata(path)?
                .is_some_and(|m| m.file_type().is_symlink())
                && root.read_link(path)? == *target
            {
                return Ok(());
            }
            clear(root, path, None, syncs)?;
            make_parents(root, path, syncs)?;
            root.symlink(target, path)?;
            syncs.add_parent_of(path);
            Ok(())
        }
        Record::Sysctl { path, value } => {
            root.write_in_place(path, format!("{value}\n").as_bytes())?;
            Ok(())
        }
    }
}

/// Replay and delete every journal under [`DIR`] that no live process holds (a step cut
/// short by SIGKILL, or one whose undo could not finish), newest first: the current boot's
/// by their boot-time clock, then earlier boots' by wall clock (the start records; a
/// journal without one comes last). Returns one line per journal replayed (`undid <n> file
/// change record(s) of <name>, left by a step that did not end`) and one per record that
/// could not be put back.
///
/// # Errors
/// Listing the journals' directory, opening or reading a log.
pub fn recover(root: &HostRoot) -> Result<Vec<String>> {
    let dir = Path::new(DIR);
    // Held exclusively for the scan: no step is between making its journal and linking
    // its locked log, so a missing or unlocked log is an abandoned journal. Not while
    // replaying (the logs found stay locked instead, until removed): a replay waits for
    // files' path locks, and a step holding one may be making its journal, which waits for
    // this directory (two agents hung, each waiting for the other).
    let Some(guard) = hold_dir(root, LockOp::Exclusive)? else {
        return Ok(Vec::new());
    };
    let this_boot = boot_id();
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for e in root.read_dir(dir)? {
        if e.kind != EntryKind::Dir {
            continue;
        }
        let jdir = dir.join(&e.name);
        let log_path = jdir.join(LOG);
        let Some(m) = root.symlink_metadata(&log_path)? else {
            // Created but never linked: nothing was changed.
            let _ = root.remove_all(&jdir);
            continue;
        };
        if !m.is_file() {
            // Never the agent's (a log is a regular file it made): not opened, which could
            // block (a FIFO) or read another file (a symlink); left for the operator.
            skipped.push(format!(
                "not undone: {}: not a regular file, left as it is",
                log_path.display()
            ));
            continue;
        }
        let f = match root.open_regular(&log_path) {
            Ok(f) => f,
            // Its step ended meanwhile and removed it.
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e.into()),
        };
        #[cfg(test)]
        super::fail_point::reach("recover_opened");
        if lock(&f, LockOp::TryExclusive).is_err() {
            // A live step's journal.
            continue;
        }
        if !root.names(&log_path, &f).unwrap_or(false) {
            // Its step ended between our open and our lock: it removed the log (still
            // holding its lock) before letting go. Not abandoned.
            continue;
        }
        let (entries, _) = entries_of(root, &f, &log_path)?;
        // Newest first: (this boot, boot clock) or (earlier boot, wall clock).
        let key = entries.iter().find_map(|x| match &x.rec {
            Record::Start {
                boot_id,
                boot_ns,
                wall_ns,
                ..
            } => Some(if *boot_id == this_boot {
                (2u8, *boot_ns)
            } else {
                (1u8, *wall_ns)
            }),
            _ => None,
        });
        let count = entries
            .iter()
            .filter(|x| !matches!(x.rec, Record::Start { .. } | Record::Wrote { .. }))
            .count();
        found.push((key.unwrap_or((0, 0)), e.name, jdir, f, count));
    }
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    drop(guard);
    let mut lines = skipped;
    for (_, name, jdir, f, count) in found {
        let log_path = jdir.join(LOG);
        let failed = replay(root, root.open_regular(&log_path)?, &jdir)?;
        lines.push(format!(
            "undid {count} file change record(s) of {}, left by a step that did not end",
            name.to_string_lossy()
        ));
        lines.extend(failed.into_iter().map(|l| format!("not undone: {l}")));
        // Locked until removed: another recovery must not replay it again.
        remove_journal(root, &jdir, &[])?;
        drop(f);
    }
    // Journals that were never linked (a step killed before its first record, or while
    // its journal was being deleted) leave nothing behind either.
    // (A journal's removal above removed the directory already when it was the last.)
    let Some(_guard) = hold_dir(root, LockOp::Exclusive)? else {
        return Ok(lines);
    };
    if root.read_dir(dir).is_ok_and(|d| d.is_empty()) && root.remove_dir(dir).unwrap_or(false) {
        root.sync_dir_checked(dir.parent().unwrap_or(Path::new("/")))?;
    }
    Ok(lines)
}
