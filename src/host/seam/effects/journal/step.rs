//! [`StepJournal`]: one step's undo journal, kept by the apply executor: the before-state of
//! each path the step changes, recorded before the change, and its commit or undo.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::dir::{LockOp, hold_dir_created, lock, remove_journal};
#[cfg(test)]
use super::fail_point;
use super::log::write_record;
use super::records::{
    ABSENT, ANY, DIR, Key, LOG, LineEdit, Record, SMALL, Stamp, State, boot_ns, changes_files,
    dir_name, hex, jerr, key, line_edit, stamp_of, state_of,
};
use super::replay::{canonical_record, replay};
use super::xattr::read_xattrs;
use crate::host::effects::effect::Effect;
use crate::host::root::error::{HostError, Result};
use crate::host::root::staging::boot_id;
use crate::host::root::{EntryKind, HostRoot, normalize};

/// What [`StepJournal::before`] leaves to the executor.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Before {
    /// Perform the effect.
    Perform,
    /// The journal made the change itself (a removal moved aside): do not perform it.
    Done,
}

/// One step's journal (module docs): created with the first record.
#[derive(Debug)]
pub(crate) struct StepJournal {
    /// The journal's directory name under [`DIR`].
    pub(super) name: String,
    /// The open, locked log; `None` until the first record.
    pub(super) log: Option<File>,
    /// The log's length in whole records (a failed append is cut back to it).
    pub(super) len: u64,
    /// Records appended since the last `fdatasync`.
    pub(super) unsynced: bool,
    /// Paths recorded (normalised host paths; sysctl paths too).
    pub(super) seen: HashSet<PathBuf>,
    /// Paths recorded as absent: nothing beneath them needs a record.
    pub(super) created: Vec<PathBuf>,
    /// Directories the journal itself created above its own (outermost first), removed with
    /// it when empty.
    pub(super) made_dirs: Vec<PathBuf>,
    /// Records written (the start record not counted).
    pub(super) records: usize,
    /// Of those, absent records of paths beneath a directory the step created: not
    /// synced before their effect (`fdatasync`ed with the next record that is). Lost to a
    /// crash, the entry is left with its directory and a line, never another's removed.
    pub(super) lazy: usize,
    /// Paths moved aside so far (the next stash's name).
    pub(super) stashes: u64,
    /// The first journal write that failed: the step is poisoned (module docs).
    pub(super) failed: Option<String>,
    /// The content of the small file [`StepJournal::record_path`] recorded last, for the
    /// line edit that follows.
    pub(super) last_read: Option<(PathBuf, Vec<u8>)>,
    /// The mode, uid and gid the content write being recorded leaves, for its wrote record.
    pub(super) next_meta: Option<(u32, u32, u32)>,
    /// Content writes recorded ahead of their batch, not performed yet (`ahead.rs`): the
    /// path written (normalised) and its stamp when recorded.
    pub(super) ahead: HashMap<Key, (PathBuf, Option<Stamp>)>,
}

impl StepJournal {
    /// A journal for the step labelled `label`; nothing is written before the first record.
    pub(crate) fn new(label: &str) -> StepJournal {
        StepJournal {
            name: dir_name(label),
            log: None,
            len: 0,
            unsynced: false,
            seen: HashSet::new(),
            created: Vec::new(),
            made_dirs: Vec::new(),
            records: 0,
            lazy: 0,
            stashes: 0,
            failed: None,
            last_read: None,
            next_meta: None,
            ahead: HashMap::new(),
        }
    }

    pub(super) fn dir(&self) -> PathBuf {
        Path::new(DIR).join(&self.name)
    }

    /// The first journal write that failed (module docs: the step is poisoned).
    pub(crate) fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    pub(super) fn poisoned(&self) -> HostError {
        HostError::JournalFailed {
            message: self.failed.clone().unwrap_or_default(),
        }
    }

    /// Whether `effect` was recorded ahead of its batch (`ahead.rs`): then it is taken off
    /// the batch and needs no record now.
    /// A content write or removal the batch does not hold ends the batch: the records left
    /// ahead are of writes that will not come (the call failed before them), and a later
    /// write of one of their paths needs its own record. A path whose stamp changed since
    /// its record ahead (another writer's edit meanwhile) is recorded again, whole.
    pub(super) fn take_ahead(&mut self, root: &HostRoot, effect: &Effect) -> bool {
        if self.ahead.is_empty() {
            return false;
        }
        if let Some(k) = key(effect)
            && let Some((target, stamp)) = self.ahead.remove(&k)
        {
            if stamp_of(root, &target) == stamp {
                return true;
            }
            self.seen.remove(&target);
            return false;
        }
        if matches!(
            effect,
            Effect::WriteFile { .. }
                | Effect::CopyFile { .. }
                | Effect::Fetch(_)
                | Effect::RemoveFile { .. }
                | Effect::RemoveAll { .. }
        ) {
            self.ahead.clear();
        }
        false
    }

    /// Whether `p` (normalised) needs no record: under the journals' directory, or
    /// recorded already.
    pub(super) fn covered(&self, p: &Path) -> bool {
        p.starts_with(DIR) || self.seen.contains(p)
    }

    /// Whether `p` is strictly beneath a path the step created (or is one, when `or_self`).
    pub(super) fn beneath_created(&self, p: &Path) -> bool {
        self.created.iter().any(|c| p.starts_with(c) && p != c)
    }

    /// Record what `effect` is about to change (module docs) and fsync the log; nothing for
    /// effects that change no file. `line_edit`: the write is a line or block edit, whose
    /// lines are recorded too. Returns whether the executor still performs the effect.
    ///
    /// # Errors
    /// A failed journal write earlier in the step ([`HostError::JournalFailed`], for every
    /// effect); reading the before-state or writing the log (the effect must then not be
    /// performed; a failed write poisons the step).
    pub(crate) fn before(
        &mut self,
        root: &HostRoot,
        effect: &Effect,
        line_edit: bool,
    ) -> Result<Before> {
        if self.failed.is_some() {
            return Err(self.poisoned());
        }
        // A line edit is no write of a batch: it only ends one (`take_ahead`).
        let ahead = changes_files(effect) && self.take_ahead(root, effect) && !line_edit;
        if !changes_files(effect) || ahead {
            return Ok(Before::Perform);
        }
        // The journal's own directories exist before any before-state is taken, so
        // none of them is recorded as created by the step (and removed by its undo).
        self.open(root)?;
        let (records, lazy) = (self.records, self.lazy);
        let r = self.record(root, effect, line_edit);
        let only_lazy = r.is_ok() && self.records - records == self.lazy - lazy;
        let synced = if only_lazy { Ok(()) } else { self.sync(root) };
        let r = r?;
        synced?;
        Ok(r)
    }

    pub(super) fn record(
        &mut self,
        root: &HostRoot,
        effect: &Effect,
        line_edit: bool,
    ) -> Result<Before> {
        self.last_read = None;
        self.next_meta = None;
        match effect {
            Effect::WriteFile {
                path,
                content,
                mode,
                uid,
                gid,
            } => {
                let target = normalize(&root.write_target(path)?);
                let after = crate::host::root::digest::sha256_tag(content);
                // What the write leaves ([`HostRoot::write_atomic`]): the given mode and
                // owner, else the file's own, else 0644 and the agent's.
                let (m0, u0, g0) = match root.symlink_metadata(&target)? {
                    Some(m) if m.is_file() => (m.mode() & 0o7777, m.uid(), m.gid()),
                    _ => (
                        0o644,
                        nix::unistd::geteuid().as_raw(),
                        nix::unistd::getegid().as_raw(),
                    ),
                };
                self.next_meta = Some((mode.unwrap_or(m0), uid.unwrap_or(u0), gid.unwrap_or(g0)));
                let r = self.record_write(root, &target, after, line_edit.then_some(&content[..]));
                self.next_meta = None;
                r?;
            }
            Effect::CopyFile {
                path, src, sha256, ..
            } => {
                let target = normalize(&root.write_target(path)?);
                let after = match sha256 {
                    Some(d) => format!("sha256:{d}"),
                    None => state_of(root, src)?,
                };
                self.record_write(root, &target, after, None)?;
            }
            Effect::Fetch(d) => {
                let target = normalize(&root.write_target(&d.path)?);
                let after = d
                    .sha256
                    .as_ref()
                    .map_or_else(|| ANY.to_string(), |s| format!("sha256:{s}"));
                self.record_write(root, &target, after, None)?;
            }
            Effect::Mkdir { path, .. } => {
                self.record_creating(root, path)?;
            }
            Effect::Symlink { link, target } => {
                // The link made, as a wrote record: its undo is checked like a file's.
                let link = normalize(link);
                let fresh = self.record_creating(root, &link)?;
                if !self.beneath_created(&link) && !link.starts_with(DIR) {
                    let base = match fresh {
                        Some(s) => s,
                        None => state_of(root, &link)?,
                    };
                    let after = format!("symlink:{}", target.display());
                    self.wrote(root, &link, base, after, None)?;
                }
            }
            Effect::RemoveFile { path } => return self.record_removal(root, &normalize(path)),
            Effect::RemoveAll { path } => return self.record_removal(root, &normalize(path)),
            Effect::Chmod { path, .. }
            | Effect::Chown { path, .. }
            | Effect::SetMtime { path, .. } => {
                if let Some(p) = root.canonical(path)? {
                    self.record_path(root, &p)?;
                }
            }
            Effect::Sysctl { key, .. } => {
                let path = crate::host::effects::effect::sysctl_proc_path(key)?;
                if self.seen.contains(&path) {
                    return Ok(Before::Perform);
                }
                let value = match root.read_opt(&path)? {
                    Some(v) => String::from_utf8_lossy(&v).trim_end().to_string(),
                    None => return Ok(Before::Perform),
                };
                self.append(
                    root,
                    &Record::Sysctl {
                        path: path.clone(),
                        value,
                    },
                    None,
                )?;
                self.seen.insert(path);
            }
            _ => {}
        }
        Ok(Before::Perform)
    }

    /// Record the state of `path` itself (no final symlink followed), without it
    /// (`path` and the entries below), and that the step rewrites it outside an effect
    /// (a deferred-work record: put back whole).
    pub(crate) fn before_path(&mut self, root: &HostRoot, path: &Path) -> Result<()> {
        if self.failed.is_some() {
            return Err(self.poisoned());
        }
        self.open(root)?;
        let path = normalize(path);
        let r = match self.record_creating(root, &path) {
            Ok(Some(_)) => self.wrote(root, &path, ANY.into(), ANY.into(), None),
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        let synced = self.sync(root);
        r?;
        synced
    }

    /// Before a content write of `target` (normalised): its state once, then a wrote
    /// record (module docs) unless `target` is beneath a path the step created.
    pub(super) fn record_write(
        &mut self,
        root: &HostRoot,
        target: &Path,
        after: State,
        content: Option<&[u8]>,
    ) -> Result<()> {
        let fresh = self.record_creating(root, target)?;
        if self.beneath_created(target) || target.starts_with(DIR) {
            return Ok(());
        }
        let (base, lines) = match content {
            Some(new) => {
                // A line edit's file is text the session held whole: its text as just
                // recorded, else read again here, under the edit's lock.
                let kept = self
                    .last_read
                    .take()
                    .filter(|(p, _)| p == target && fresh.is_some());
                let old = match kept {
                    Some((_, text)) => Some(text),
                    None => match root.symlink_metadata(target)? {
                        Some(m) if m.is_file() => Some(
                            root.read_regular(target, crate::host::root::read::MAX_READ_BYTES)?,
                        ),
                        _ => None,
                    },
                };
                let base = match (&old, fresh) {
                    (_, Some(s)) => s,
                    (Some(o), None) => crate::host::root::digest::sha256_tag(o),
                    (None, None) => state_of(root, target)?,
                };
                (base, line_edit(old.as_deref().unwrap_or_default(), new))
            }
            None => match fresh {
                Some(s) => (s, None),
                None => (state_of(root, target)?, None),
            },
        };
        self.wrote(root, target, base, after, lines)
    }

    pub(super) fn wrote(
        &mut self,
        root: &HostRoot,
        path: &Path,
        base: State,
        after: State,
        lines: Option<LineEdit>,
    ) -> Result<()> {
        let meta = self.next_meta.take();
        self.append(
            root,
            &Record::Wrote {
                path: path.to_path_buf(),
                base,
                after,
                lines,
                meta,
            },
            None,
        )
        .map(drop)
    }

    /// Before a removal of `path` (normalised): a path the step created or recorded needs
    /// only a wrote record (it ends absent); any other is moved aside into the journal
    /// (module docs), or recorded whole where the rename crosses filesystems.
    pub(super) fn record_removal(&mut self, root: &HostRoot, path: &Path) -> Result<Before> {
        if path.starts_with(DIR) || self.beneath_created(path) {
            return Ok(Before::Perform);
        }
        let Some(m) = root.symlink_metadata(path)? else {
            return Ok(Before::Perform);
        };
        if self.seen.contains(path) {
            if m.is_file() || m.file_type().is_symlink() {
                let base = state_of(root, path)?;
                self.wrote(root, path, base, ABSENT.into(), None)?;
                return Ok(Before::Perform);
            }
            // A directory the step made: its entries need their own records (the undo
            // removes the step's, leaves another writer's). One the step found (its mode or
            // owner recorded) is moved aside below, as one not recorded: no entry's content
            // is copied; the undo renames it back, then puts its attributes back.
            if !m.is_dir() {
                return Ok(Before::Perform);
            }
            if self.created.iter().any(|c| c == path) {
                self.record_tree(root, path)?;
                return Ok(Before::Perform);
            }
        }
        if m.is_dir() {
            // `remove_all` refuses mount points below: so does the move.
            root.remove_all_check(path)?;
        }
        let stash = self.stashes.to_string();
        self.stashes += 1;
        let to = self.dir().join(&stash);
        self.append(
            root,
            &Record::Moved {
                path: path.to_path_buf(),
                stash,
            },
            None,
        )?;
        // The record is durable before the rename.
        self.sync(root)?;
        match root.rename_noreplace(path, &to) {
            Ok(()) => {
                // A later write of the path records it (absent) again.
                self.seen.remove(path);
                Ok(Before::Done)
            }
            Err(e) if e.kind() == std::io::ErrorKind::CrossesDevices => {
                // Another filesystem: record what it is (the moved record finds no stash).
                if m.is_dir() {
                    self.record_tree(root, path)?;
                } else {
                    self.record_path(root, path)?;
                    self.wrote(root, path, ANY.into(), ABSENT.into(), None)?;
                }
                Ok(Before::Perform)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// For an effect that may create `path` and its parents: each missing ancestor is
    /// recorded absent (so the undo of a created directory knows every entry the step
    /// made in it), then `path`'s state. Returns `path`'s [`State`]
    /// when it was recorded now.
    pub(super) fn record_creating(
        &mut self,
        root: &HostRoot,
        path: &Path,
    ) -> Result<Option<State>> {
        let path = normalize(path);
        if self.covered(&path) {
            return Ok(None);
        }
        // The common case first: the parent exists (one lookup instead of one per ancestor).
        if let Some(parent) = path.parent()
            && (self.seen.contains(parent) || root.symlink_metadata(parent)?.is_some())
        {
            return self.record_path(root, &path);
        }
        let ancestors: Vec<&Path> = path.ancestors().skip(1).collect();
        for anc in ancestors.into_iter().rev() {
            if anc == Path::new("/") {
                continue;
            }
            if self.covered(anc) {
                continue;
            }
            if root.symlink_metadata(anc)?.is_none() {
                self.record_path(root, anc)?;
            }
        }
        self.record_path(root, &path)
    }

    /// Record `path`'s state (not following a final symlink), once. Returns its
    /// [`State`] when recorded now.
    pub(super) fn record_path(&mut self, root: &HostRoot, path: &Path) -> Result<Option<State>> {
        if self.covered(path) {
            return Ok(None);
        }
        let m = root.symlink_metadata(path)?;
        if m.is_some() && self.beneath_created(path) {
            // In a directory the step created: the step's own (recorded when made) or
            // another writer's, which the undo leaves.
            return Ok(None);
        }
        let Some(m) = m else {
            self.append(
                root,
                &Record::Absent {
                    path: path.to_path_buf(),
                },
                None,
            )?;
            if self.beneath_created(path) {
                self.lazy += 1;
            }
            self.seen.insert(path.to_path_buf());
            self.created.push(path.to_path_buf());
            return Ok(Some(ABSENT.into()));
        };
        let ft = m.file_type();
        let state = if ft.is_symlink() {
            let target = root.read_link(path)?;
            let state = format!("symlink:{}", target.display());
            let rec = Record::Symlink {
                path: path.to_path_buf(),
                target,
            };
            self.append(root, &rec, None)?;
            state
        } else if ft.is_dir() {
            let f = root.open_read(path)?;
            let rec = Record::Dir {
                path: path.to_path_buf(),
                mode: m.mode() & 0o7777,
                uid: m.uid(),
                gid: m.gid(),
                xattrs: read_xattrs(&f).map_err(|e| jerr(path, root, e))?,
            };
            self.append(root, &rec, None)?;
            "dir".into()
        } else if ft.is_file() {
            let mut f = root.open_regular(path)?;
            let fm = f.metadata().map_err(|e| jerr(path, root, e))?;
            let rec = Record::File {
                path: path.to_path_buf(),
                mode: fm.mode() & 0o7777,
                uid: fm.uid(),
                gid: fm.gid(),
                xattrs: read_xattrs(&f).map_err(|e| jerr(path, root, e))?,
            };
            // A small file is read once: the line edit about to be recorded needs its
            // text too ([`StepJournal::record_write`]).
            let d = if fm.len() <= SMALL {
                let mut buf = Vec::with_capacity(fm.len() as usize);
                (&mut f)
                    .take(fm.len())
                    .read_to_end(&mut buf)
                    .map_err(|e| jerr(path, root, e))?;
                let d = self.append(root, &rec, Some((&mut &buf[..], fm.len())))?;
                self.last_read = Some((path.to_path_buf(), buf));
                d
            } else {
                self.append(root, &rec, Some((&mut f, fm.len())))?
            };
            format!("sha256:{}", hex(&d))
        } else {
            let node = if ft.is_fifo() {
                "fifo"
            } else if ft.is_socket() {
                "socket"
            } else if ft.is_char_device() {
                "char"
            } else {
                "block"
            };
            let rec = Record::Special {
                path: path.to_path_buf(),
                node: node.into(),
                mode: m.mode() & 0o7777,
                uid: m.uid(),
                gid: m.gid(),
                rdev: m.rdev(),
            };
            self.append(root, &rec, None)?;
            "other".into()
        };
        self.seen.insert(path.to_path_buf());
        Ok(Some(state))
    }

    /// Record a tree about to be removed (across filesystems: no move): every entry,
    /// children before their directory, so the backwards replay makes a directory before
    /// what it holds.
    pub(super) fn record_tree(&mut self, root: &HostRoot, path: &Path) -> Result<()> {
        // Bounded by the tree (each entry once); depth-first with an explicit stack.
        let mut order = Vec::new();
        let mut stack = vec![path.to_path_buf()];
        while let Some(p) = stack.pop() {
            let is_dir = root
                .symlink_metadata(&p)?
                .is_some_and(|m| m.file_type().is_dir());
            if is_dir {
                for e in root.read_dir(&p)? {
                    let child = p.join(&e.name);
                    if e.kind == EntryKind::Dir {
                        stack.push(child);
                    } else {
                        order.push(child);
                    }
                }
            }
            order.push(p);
        }
        order.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for p in order {
            if !self.covered(&p) {
                self.record_path(root, &p)?;
                if root.symlink_metadata(&p)?.is_some_and(|m| !m.is_dir()) {
                    self.wrote(root, &p, ANY.into(), ABSENT.into(), None)?;
                }
            }
        }
        Ok(())
    }

    /// Open the log (first record): make the directory, create the log unnamed
    /// (`O_TMPFILE`), lock it, write the start record, link it into place, fsync the
    /// directories created. The journals' directory is held shared meanwhile (see
    /// [`hold_dir`]), so no recovery or cleanup takes the new journal for an abandoned one.
    pub(super) fn open(&mut self, root: &HostRoot) -> Result<()> {
        if self.log.is_some() {
            return Ok(());
        }
        let dir = self.dir();
        // A session of this run starting after this one recovers journals again.
        crate::host::root::deferred::note_start_state_write();
        let (above, _guard) = hold_dir_created(root)?;
        let made = root.create_dir_all(&dir, 0o700)?;
        let (f, dfd) = root.create_unnamed(&dir, 0o600)?;
        let log_path = dir.join(LOG);
        lock(&f, LockOp::Exclusive).map_err(|e| jerr(&log_path, root, e))?;
        self.log = Some(f);
        self.len = 0;
        let start = Record::Start {
            boot_id: boot_id(),
            boot_ns: boot_ns(),
            wall_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            pid: std::process::id(),
        };
        let linked = self
            .append_counted(root, &start, None, false)
            .and_then(|_| {
                let f = self.log.as_ref().expect("set above");
                root.link_unnamed(f, &dfd, &dir, std::ffi::OsStr::new(LOG))
                    .map_err(HostError::from)
            });
        if let Err(e) = linked {
            self.log = None;
            let _ = root.remove_dir(&dir);
            return Err(e);
        }
        root.sync_dir_checked(&dir)?;
        for d in above.iter().chain(&made) {
            root.sync_dir_checked(d.parent().unwrap_or(Path::new("/")))?;
        }
        self.made_dirs = above.into_iter().filter(|d| !d.starts_with(DIR)).collect();
        Ok(())
    }

    /// Append `rec` (and `content`'s bytes for a file) to the log; not synced
    /// ([`StepJournal::sync`]). Returns the content's SHA-256. A failure cuts the log back
    /// to its whole records and poisons the step.
    pub(super) fn append(
        &mut self,
        root: &HostRoot,
        rec: &Record,
        content: Option<(&mut dyn Read, u64)>,
    ) -> Result<[u8; 32]> {
        let d = self.append_counted(root, rec, content, true)?;
        self.records += 1;
        Ok(d)
    }

    pub(super) fn append_counted(
        &mut self,
        root: &HostRoot,
        rec: &Record,
        content: Option<(&mut dyn Read, u64)>,
        inject: bool,
    ) -> Result<[u8; 32]> {
        if self.failed.is_some() {
            return Err(self.poisoned());
        }
        let log_path = self.dir().join(LOG);
        #[cfg(test)]
        let fail = match inject {
            true => fail_point::take(&self.name, self.records),
            false => None,
        };
        #[cfg(not(test))]
        let _ = inject;
        let canon = canonical_record(root, rec);
        let rec = canon.as_ref().unwrap_or(rec);
        let log = self.log.as_mut().expect("opened by the caller");
        #[cfg(test)]
        let log = &mut fail_point::Limited::new(log, fail);
        let r = write_record(log, rec, content);
        match r {
            Ok((n, d)) => {
                self.len += n;
                self.unsynced = true;
                Ok(d)
            }
            Err(e) => {
                let e = jerr(&log_path, root, e);
                Err(self.poison(e))
            }
        }
    }

    /// A journal write failed: cut the log back to its whole records, keep `e` as the
    /// step's poison (module docs) and return it.
    pub(super) fn poison(&mut self, e: HostError) -> HostError {
        if let Some(log) = &self.log {
            let _ = log.set_len(self.len);
            let _ = log.sync_data();
        }
        self.failed = Some(crate::chain::render(&e));
        self.poisoned()
    }

    /// `fdatasync` the log when records were appended since the last one.
    pub(super) fn sync(&mut self, root: &HostRoot) -> Result<()> {
        if !self.unsynced {
            return Ok(());
        }
        let log_path = self.dir().join(LOG);
        let log = self.log.as_ref().expect("records appended");
        #[cfg(test)]
        fail_point::SYNCS.with(|s| s.set(s.get() + 1));
        match log.sync_data() {
            Ok(()) => {
                self.unsynced = false;
                Ok(())
            }
            Err(e) => {
                let e = jerr(&log_path, root, e);
                Err(self.poison(e))
            }
        }
    }

    /// The step succeeded and its writes are durable: delete the journal (and what it
    /// moved aside). A poisoned journal is undone instead, and the step fails.
    ///
    /// # Errors
    /// [`HostError::JournalFailed`] (after the undo); removing the journal.
    pub(crate) fn commit(&mut self, root: &HostRoot) -> Result<()> {
        if self.failed.is_some() {
            let lines = self.undo(root)?;
            let mut message = self.failed.clone().unwrap_or_default();
            for l in lines {
                message.push_str("\nnot undone: ");
                message.push_str(&l);
            }
            return Err(HostError::JournalFailed { message });
        }
        self.ahead.clear();
        // The log's descriptor (its `flock`) is held until the journal is gone: a
        // recovery that finds the log unlocked takes it for an abandoned step's and
        // undoes the step that just succeeded.
        let Some(log) = self.log.take() else {
            return Ok(());
        };
        self.records = 0;
        let removed = remove_journal(root, &self.dir(), &self.made_dirs);
        drop(log);
        removed
    }

    /// The step failed: replay the journal backwards, fsync, delete it. Returns one line
    /// per record that could not be put back (`<path>: <error>`, `<path> changed by
    /// another writer ...`).
    ///
    /// # Errors
    /// Reading the log (then nothing is deleted: the next run's [`recover`] tries again).
    pub(crate) fn undo(&mut self, root: &HostRoot) -> Result<Vec<String>> {
        self.ahead.clear();
        let Some(log) = self.log.take() else {
            return Ok(Vec::new());
        };
        let log_path = self.dir().join(LOG);
        // The log was opened write-only: read it through a new descriptor.
        let reader = root.open_read(&log_path)?;
        let failed = replay(root, reader, &self.dir())?;
        self.records = 0;
        // Locked until removed, as in `commit`: a recovery must not replay it again.
        let removed = remove_journal(root, &self.dir(), &self.made_dirs);
        drop(log);
        removed?;
        Ok(failed)
    }
}
