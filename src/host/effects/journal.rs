//! The undo journal of a step: the before-state of every file the apply executor changes,
//! kept durably inside the host root so that a failed step (or one the agent did not live
//! to end) can be put back.
//!
//! Before the apply executor performs a file effect (a write, batched or not, a removal, a
//! directory, a tree removal, a mode or owner change, a symlink, a download's file) or sets
//! a live sysctl value, it records the path's state once per step (the first before-state
//! wins): existence and kind, the content of a regular file, mode, owner, extended
//! attributes, a symlink's target, the previous sysctl value; for a tree removal, every
//! entry below it. A path beneath one the step created records nothing (removing the
//! created ancestor removes it).
//!
//! | file | content |
//! |---|---|
//! | `/var/lib/skyhook/.undo/<package>-<step>.<pid>.<n>/log` | records, each one JSON line (`{"kind":"file",...,"len":N}`) followed by `N` bytes of content |
//!
//! Each record is appended and the log fsynced (`fdatasync`) before the effect is
//! performed; the log's directory is fsynced once, when it is created. A record cut short
//! by a crash ends the log: its effect was never performed. The session's process holds an
//! exclusive `flock` on the log while the step runs, so a recovery leaves a live step's
//! journal alone.
//!
//! When the step ends: on success (after its writes are durable) the journal is deleted;
//! on failure it is replayed backwards (content, mode, owner, extended attributes,
//! existence, sysctl values), the restored directories fsynced, then deleted.
//! [`recover`] replays every journal no live process holds: a step cut short by SIGKILL is
//! undone by the next run before it does anything else. Content is streamed in both
//! directions (never held in memory whole).

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::host::effects::effect::Effect;
use crate::host::root::durability::DirSyncs;
use crate::host::root::error::{HostError, Result};
use crate::host::root::{DirSync, EntryKind, HostRoot, RootError, normalize};

/// The directory of the journals (a host path).
pub const DIR: &str = "/var/lib/skyhook/.undo";

/// The name of the log inside a journal's directory.
const LOG: &str = "log";

/// One before-state. Paths are host paths.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Record {
    /// Nothing was there: undo removes what is.
    Absent { path: PathBuf },
    /// A regular file; its `len` bytes of content follow the record's line.
    File {
        path: PathBuf,
        mode: u32,
        uid: u32,
        gid: u32,
        xattrs: Vec<Xattr>,
        len: u64,
    },
    /// A directory (its entries have records of their own when they change).
    Dir {
        path: PathBuf,
        mode: u32,
        uid: u32,
        gid: u32,
        xattrs: Vec<Xattr>,
    },
    /// A symbolic link.
    Symlink { path: PathBuf, target: PathBuf },
    /// A live sysctl value (`/proc/sys/...`), as read.
    Sysctl { path: PathBuf, value: String },
}

/// An extended attribute: its name and its value in base64.
#[derive(Debug, Serialize, Deserialize)]
struct Xattr {
    name: String,
    value: String,
}

fn jerr(path: &Path, root: &HostRoot, source: std::io::Error) -> HostError {
    HostError::Root(RootError {
        op: "journal",
        path: path.to_path_buf(),
        root: root.mount().to_path_buf(),
        source,
    })
}

/// One step's journal (module docs): created with the first record.
#[derive(Debug)]
pub(crate) struct StepJournal {
    /// The journal's directory name under [`DIR`].
    name: String,
    /// The open, locked log; `None` until the first record.
    log: Option<File>,
    /// Paths recorded (normalised host paths; sysctl paths too).
    seen: HashSet<PathBuf>,
    /// Paths recorded as absent: nothing beneath them needs a record.
    created: Vec<PathBuf>,
    /// Directories the journal itself created above its own (outermost first), removed with
    /// it when empty.
    made_dirs: Vec<PathBuf>,
    /// Records written.
    records: usize,
}

static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Whether `effect` changes files or a live sysctl value (what the journal records).
fn changes_files(effect: &Effect) -> bool {
    matches!(
        effect,
        Effect::WriteFile { .. }
            | Effect::CopyFile { .. }
            | Effect::Fetch(_)
            | Effect::Mkdir { .. }
            | Effect::Symlink { .. }
            | Effect::RemoveFile { .. }
            | Effect::RemoveAll { .. }
            | Effect::Chmod { .. }
            | Effect::Chown { .. }
            | Effect::Sysctl { .. }
    )
}

/// A journal directory name from `label` (`<package>-<step>`): characters outside
/// `[A-Za-z0-9._-]` become `_`; the process id and a counter make it unique.
fn dir_name(label: &str) -> String {
    let clean: String = label
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{clean}.{}.{n}", std::process::id())
}

impl StepJournal {
    /// A journal for the step labelled `label`; nothing is written before the first record.
    pub(crate) fn new(label: &str) -> StepJournal {
        StepJournal {
            name: dir_name(label),
            log: None,
            seen: HashSet::new(),
            created: Vec::new(),
            made_dirs: Vec::new(),
            records: 0,
        }
    }

    fn dir(&self) -> PathBuf {
        Path::new(DIR).join(&self.name)
    }

    /// Whether `p` (normalised) needs no record: under the journals' directory, recorded
    /// already, or beneath a path the step created.
    fn covered(&self, p: &Path) -> bool {
        p.starts_with(DIR) || self.seen.contains(p) || self.created.iter().any(|c| p.starts_with(c))
    }

    /// Record what `effect` is about to change (module docs); nothing for effects that
    /// change no file.
    ///
    /// # Errors
    /// Reading the before-state or writing the log (the effect must then not be performed).
    pub(crate) fn before(&mut self, root: &HostRoot, effect: &Effect) -> Result<()> {
        if changes_files(effect) {
            // The journal's own directories exist before any before-state is taken, so
            // none of them is recorded as created by the step (and removed by its undo).
            self.open(root)?;
        }
        match effect {
            Effect::WriteFile { path, .. } | Effect::CopyFile { path, .. } => {
                let target = root.write_target(path)?;
                self.record_creating(root, &target)
            }
            Effect::Fetch(d) => {
                let target = root.write_target(&d.path)?;
                self.record_creating(root, &target)
            }
            Effect::Mkdir { path, .. } => self.record_creating(root, path),
            Effect::Symlink { link, .. } => self.record_creating(root, link),
            Effect::RemoveFile { path } => self.record_path(root, &normalize(path)),
            Effect::RemoveAll { path } => self.record_tree(root, &normalize(path)),
            Effect::Chmod { path, .. } | Effect::Chown { path, .. } => {
                match root.canonical(path)? {
                    Some(p) => self.record_path(root, &p),
                    None => Ok(()),
                }
            }
            Effect::Sysctl { key, .. } => {
                let path = crate::host::effects::effect::sysctl_proc_path(key)?;
                if self.seen.contains(&path) {
                    return Ok(());
                }
                let value = match root.read_opt(&path)? {
                    Some(v) => String::from_utf8_lossy(&v).trim_end().to_string(),
                    None => return Ok(()),
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
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Record the state of `path` itself (no final symlink followed), without it
    /// (`path` and the entries below): [`StepJournal::before`] for a removal.
    pub(crate) fn before_path(&mut self, root: &HostRoot, path: &Path) -> Result<()> {
        self.open(root)?;
        self.record_creating(root, &normalize(path))
    }

    /// For an effect that may create `path` and its parents: the first missing ancestor is
    /// recorded absent; when they all exist, `path`'s state.
    fn record_creating(&mut self, root: &HostRoot, path: &Path) -> Result<()> {
        let path = normalize(path);
        if self.covered(&path) {
            return Ok(());
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
                // A recorded ancestor that existed: look further down.
                if self.created.iter().any(|c| anc.starts_with(c)) {
                    return Ok(());
                }
                continue;
            }
            if root.symlink_metadata(anc)?.is_none() {
                return self.record_path(root, anc);
            }
        }
        self.record_path(root, &path)
    }

    /// Record `path`'s state (not following a final symlink), once.
    fn record_path(&mut self, root: &HostRoot, path: &Path) -> Result<()> {
        if self.covered(path) {
            return Ok(());
        }
        let Some(m) = root.symlink_metadata(path)? else {
            self.append(
                root,
                &Record::Absent {
                    path: path.to_path_buf(),
                },
                None,
            )?;
            self.seen.insert(path.to_path_buf());
            self.created.push(path.to_path_buf());
            return Ok(());
        };
        let ft = m.file_type();
        if ft.is_symlink() {
            let target = root.read_link(path)?;
            let rec = Record::Symlink {
                path: path.to_path_buf(),
                target,
            };
            self.append(root, &rec, None)?;
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
        } else if ft.is_file() {
            let mut f = root.open_regular(path)?;
            let fm = f.metadata().map_err(|e| jerr(path, root, e))?;
            let rec = Record::File {
                path: path.to_path_buf(),
                mode: fm.mode() & 0o7777,
                uid: fm.uid(),
                gid: fm.gid(),
                xattrs: read_xattrs(&f).map_err(|e| jerr(path, root, e))?,
                len: fm.len(),
            };
            self.append(root, &rec, Some(&mut f))?;
        } else {
            return Err(HostError::Invalid {
                what: "undo journal",
                message: format!(
                    "{} is a fifo, socket or device: its removal could not be undone",
                    path.display()
                ),
            });
        }
        self.seen.insert(path.to_path_buf());
        Ok(())
    }

    /// Record a tree about to be removed: every entry, children before their directory,
    /// so the backwards replay makes a directory before what it holds.
    fn record_tree(&mut self, root: &HostRoot, path: &Path) -> Result<()> {
        if self.covered(path) {
            return Ok(());
        }
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
        // `order` holds each directory before its subdirectories' entries: reverse the
        // directories' positions by recording deepest first.
        order.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for p in order {
            self.record_path(root, &p)?;
        }
        Ok(())
    }

    /// Open the log (first record): make the directory, create and lock the log, fsync
    /// the directories created. The journals' directory is held shared meanwhile (see
    /// [`hold_dir`]), so no recovery or cleanup takes the new journal for an abandoned one.
    fn open(&mut self, root: &HostRoot) -> Result<&mut File> {
        if self.log.is_none() {
            let dir = self.dir();
            let (above, _guard) = hold_dir_created(root)?;
            let made = root.create_dir_all(&dir, 0o700)?;
            let log_path = dir.join(LOG);
            let f = root.create_new(&log_path, 0o600)?;
            lock(&f, LockOp::Exclusive).map_err(|e| jerr(&log_path, root, e))?;
            root.sync_dir_checked(&dir)?;
            for d in above.iter().chain(&made) {
                root.sync_dir_checked(d.parent().unwrap_or(Path::new("/")))?;
            }
            self.made_dirs = above.into_iter().filter(|d| !d.starts_with(DIR)).collect();
            self.log = Some(f);
        }
        Ok(self.log.as_mut().expect("opened above"))
    }

    /// Append `rec` (and `content`'s `len` bytes for a file) and fsync the log.
    fn append(&mut self, root: &HostRoot, rec: &Record, content: Option<&mut File>) -> Result<()> {
        let log_path = self.dir().join(LOG);
        let mut line = serde_json::to_vec(rec).map_err(|e| HostError::Invalid {
            what: "undo journal record",
            message: e.to_string(),
        })?;
        line.push(b'\n');
        #[cfg(test)]
        let fail = fail_point::take(&self.name, self.records);
        let log = self.open(root)?;
        #[cfg(test)]
        let log = &mut fail_point::Limited::new(log, fail);
        let io = |e| jerr(&log_path, root, e);
        log.write_all(&line).map_err(io)?;
        if let (Some(src), Record::File { len, path, .. }) = (content, rec) {
            let copied = std::io::copy(&mut src.take(*len), log).map_err(io)?;
            if copied != *len {
                return Err(jerr(
                    path,
                    root,
                    std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("changed while journaled: {copied} of {len} bytes read"),
                    ),
                ));
            }
        }
        #[cfg(test)]
        let log = log.inner();
        log.sync_data().map_err(io)?;
        self.records += 1;
        Ok(())
    }

    /// The step succeeded and its writes are durable: delete the journal.
    ///
    /// # Errors
    /// Removing the log or its directory.
    pub(crate) fn commit(&mut self, root: &HostRoot) -> Result<()> {
        if self.log.take().is_none() {
            return Ok(());
        }
        self.records = 0;
        remove_journal(root, &self.dir(), &self.made_dirs, false)
    }

    /// The step failed: replay the journal backwards, fsync, delete it. Returns one line
    /// per record that could not be put back (`<path>: <error>`).
    ///
    /// # Errors
    /// Reading the log (then nothing is deleted: the next run's [`recover`] tries again).
    pub(crate) fn undo(&mut self, root: &HostRoot) -> Result<Vec<String>> {
        let Some(mut log) = self.log.take() else {
            return Ok(Vec::new());
        };
        let log_path = self.dir().join(LOG);
        log.seek(SeekFrom::Start(0))
            .map_err(|e| jerr(&log_path, root, e))?;
        // The log was opened write-only: read it through a new descriptor.
        let reader = root.open_read(&log_path)?;
        let failed = replay(root, reader, &log_path)?;
        drop(log);
        self.records = 0;
        remove_journal(root, &self.dir(), &self.made_dirs, false)?;
        Ok(failed)
    }
}

/// Remove a journal's log and directory, fsync its parent; then, holding the journals'
/// directory exclusively (unless `held`: the caller holds it), that directory and the ones
/// the journal created above it when empty.
fn remove_journal(root: &HostRoot, dir: &Path, made: &[PathBuf], held: bool) -> Result<()> {
    root.remove_file(&dir.join(LOG))?;
    root.remove_dir(dir)?;
    let guard = if held {
        None
    } else {
        hold_dir(root, LockOp::Exclusive)?
    };
    if held || guard.is_some() {
        let _ = root.remove_dir(Path::new(DIR));
        for d in made.iter().rev() {
            if root.remove_dir(d).is_err() {
                break;
            }
        }
    }
    drop(guard);
    root.sync_dir_checked(Path::new(DIR).parent().unwrap_or(Path::new("/")))?;
    if root.symlink_metadata(Path::new(DIR))?.is_some() {
        root.sync_dir_checked(Path::new(DIR))?;
    }
    Ok(())
}

/// How [`lock`] takes an `flock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LockOp {
    /// Shared, waiting for it.
    Shared,
    /// Exclusive, waiting for it.
    Exclusive,
    /// Exclusive, or `WouldBlock` at once when another holds it.
    TryExclusive,
}

/// The journals' directory [`DIR`], open and `flock`ed: shared by a step while it makes its
/// journal and locks its log, exclusive for a recovery's scan and for removing the
/// directory. Under the exclusive lock, a journal whose log is missing or unlocked was left
/// by a process that is gone. `None` when the directory does not exist.
///
/// # Errors
/// Opening the directory, or `flock`.
fn hold_dir(root: &HostRoot, op: LockOp) -> Result<Option<File>> {
    let dir = Path::new(DIR);
    if root.symlink_metadata(dir)?.is_none() {
        return Ok(None);
    }
    let f = match root.open_read(dir) {
        Ok(f) => f,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    lock(&f, op).map_err(|e| jerr(dir, root, e))?;
    Ok(Some(f))
}

/// Create [`DIR`] (returning the directories made) and hold it shared. A cleanup that
/// removed the directory between its creation and the lock is seen (the held directory is
/// no longer the one at the path) and the creation retried, at most 16 times.
///
/// # Errors
/// Creating or opening the directory; the race lost 16 times in a row.
fn hold_dir_created(root: &HostRoot) -> Result<(Vec<PathBuf>, File)> {
    let dir = Path::new(DIR);
    let mut made = Vec::new();
    for _ in 0..16 {
        match root.create_dir_all(dir, 0o700) {
            Ok(m) => made.extend(m),
            // An ancestor removed by another agent's cleanup while it was being made.
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e.into()),
        }
        let Some(f) = hold_dir(root, LockOp::Shared)? else {
            continue;
        };
        let held = f.metadata().map_err(|e| jerr(dir, root, e))?;
        match root.symlink_metadata(dir)? {
            Some(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                return Ok((made, f));
            }
            _ => continue,
        }
    }
    Err(jerr(
        dir,
        root,
        std::io::Error::other("removed by another agent's cleanup 16 times in a row"),
    ))
}

/// `flock` `f` as `op` says.
fn lock(f: &File, op: LockOp) -> std::io::Result<()> {
    let op = match op {
        LockOp::Shared => libc::LOCK_SH,
        LockOp::Exclusive => libc::LOCK_EX,
        LockOp::TryExclusive => libc::LOCK_EX | libc::LOCK_NB,
    };
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), op) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn read_records(
    root: &HostRoot,
    reader: &mut BufReader<File>,
    log_path: &Path,
) -> Result<Vec<(Record, u64)>> {
    let mut out = Vec::new();
    let total = reader
        .get_ref()
        .metadata()
        .map_err(|e| jerr(log_path, root, e))?
        .len();
    let mut pos = 0u64;
    // Bounded by the log's size: every record advances `pos` by at least one byte.
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| jerr(log_path, root, e))?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        pos += n as u64;
        let Ok(rec) = serde_json::from_slice::<Record>(&line) else {
            break;
        };
        let len = match &rec {
            Record::File { len, .. } => *len,
            _ => 0,
        };
        if pos + len > total {
            // Cut short by a crash: its effect was never performed.
            break;
        }
        out.push((rec, pos));
        reader
            .seek_relative(len as i64)
            .map_err(|e| jerr(log_path, root, e))?;
        pos += len;
    }
    Ok(out)
}

/// Replay a log backwards (module docs). Returns one line per record that failed.
fn replay(root: &HostRoot, reader: File, log_path: &Path) -> Result<Vec<String>> {
    let mut reader = BufReader::new(reader);
    let records = read_records(root, &mut reader, log_path)?;
    let mut file = reader.into_inner();
    let syncs = DirSyncs::default();
    let mut failed = Vec::new();
    for (rec, offset) in records.iter().rev() {
        if let Err(e) = restore(root, rec, &mut file, *offset, &syncs) {
            failed.push(format!(
                "{}: {}",
                rec_path(rec).display(),
                crate::chain::render(&e)
            ));
        }
    }
    if let Err(e) = syncs.sync(root) {
        failed.push(crate::chain::render(&e));
    }
    Ok(failed)
}

fn rec_path(rec: &Record) -> &Path {
    match rec {
        Record::Absent { path }
        | Record::File { path, .. }
        | Record::Dir { path, .. }
        | Record::Symlink { path, .. }
        | Record::Sysctl { path, .. } => path,
    }
}

/// Remove whatever is at `path` (a tree too) unless it is of kind `keep`.
fn clear(root: &HostRoot, path: &Path, keep: Option<&str>, syncs: &DirSyncs) -> Result<()> {
    let Some(m) = root.symlink_metadata(path)? else {
        return Ok(());
    };
    let ft = m.file_type();
    let kind = crate::host::root::kind_name(ft);
    if keep == Some(kind) {
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

fn restore(
    root: &HostRoot,
    rec: &Record,
    log: &mut File,
    offset: u64,
    syncs: &DirSyncs,
) -> Result<()> {
    match rec {
        Record::Absent { path } => clear(root, path, None, syncs),
        Record::File {
            path,
            mode,
            uid,
            gid,
            xattrs,
            len,
        } => {
            clear(root, path, Some("file"), syncs)?;
            if let Some(parent) = path.parent() {
                for d in root.create_dir_all(parent, crate::host::root::PARENT_DIR_MODE)? {
                    syncs.add_parent_of(&d);
                }
            }
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
                    let n = std::io::copy(&mut (&mut *log).take(*len), f)?;
                    if n == *len {
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
            if let Some(parent) = path.parent() {
                for d in root.create_dir_all(parent, crate::host::root::PARENT_DIR_MODE)? {
                    syncs.add_parent_of(&d);
                }
            }
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

/// The extended attributes of an open file (none where the filesystem has none).
fn read_xattrs(f: &File) -> std::io::Result<Vec<Xattr>> {
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    for name in list_xattrs(fd)? {
        let Ok(cname) = std::ffi::CString::new(name.clone()) else {
            continue;
        };
        // SAFETY: size query with a null buffer.
        let len = unsafe { libc::fgetxattr(fd, cname.as_ptr(), std::ptr::null_mut(), 0) };
        if len < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut value = vec![0u8; len as usize];
        // SAFETY: the buffer is `value.len()` bytes long.
        let len =
            unsafe { libc::fgetxattr(fd, cname.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        if len < 0 {
            return Err(std::io::Error::last_os_error());
        }
        value.truncate(len as usize);
        out.push(Xattr {
            name: String::from_utf8_lossy(&name).into_owned(),
            value: base64::engine::general_purpose::STANDARD.encode(&value),
        });
    }
    Ok(out)
}

fn list_xattrs(fd: std::os::fd::RawFd) -> std::io::Result<Vec<Vec<u8>>> {
    // SAFETY: a null buffer with size 0 asks for the needed size.
    let size = unsafe { libc::flistxattr(fd, std::ptr::null_mut(), 0) };
    if size < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOTSUP) => Ok(Vec::new()),
            _ => Err(e),
        };
    }
    let mut names = vec![0u8; size as usize];
    // SAFETY: the buffer is `names.len()` bytes long.
    let size = unsafe { libc::flistxattr(fd, names.as_mut_ptr().cast(), names.len()) };
    if size < 0 {
        return Err(std::io::Error::last_os_error());
    }
    names.truncate(size as usize);
    Ok(names
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// Make `f`'s extended attributes exactly `want`: others removed, these set.
fn set_xattrs(f: &File, want: &[Xattr]) -> std::io::Result<()> {
    let fd = f.as_raw_fd();
    for name in list_xattrs(fd)? {
        if want.iter().any(|x| x.name.as_bytes() == name) {
            continue;
        }
        let Ok(cname) = std::ffi::CString::new(name) else {
            continue;
        };
        // SAFETY: a valid NUL-terminated name on a descriptor we own.
        if unsafe { libc::fremovexattr(fd, cname.as_ptr()) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    for x in want {
        let Ok(cname) = std::ffi::CString::new(x.name.as_bytes()) else {
            continue;
        };
        let value = base64::engine::general_purpose::STANDARD
            .decode(&x.value)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        // SAFETY: name and value are valid for the given lengths.
        let r =
            unsafe { libc::fsetxattr(fd, cname.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOTSUP) {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Replay and delete every journal under [`DIR`] that no live process holds (a step cut
/// short by SIGKILL, or one whose undo could not finish). Returns one line per journal
/// replayed (`undid <n> file changes of <name>, left by a step that did not end`) and one
/// per record that could not be put back.
///
/// # Errors
/// Listing the journals' directory, opening or reading a log.
pub fn recover(root: &HostRoot) -> Result<Vec<String>> {
    let dir = Path::new(DIR);
    // Held exclusively for the scan: no step is between making its journal and locking
    // its log, so an unlocked or missing log is an abandoned journal.
    let Some(_guard) = hold_dir(root, LockOp::Exclusive)? else {
        return Ok(Vec::new());
    };
    let mut lines = Vec::new();
    for e in root.read_dir(dir)? {
        if e.kind != EntryKind::Dir {
            continue;
        }
        let jdir = dir.join(&e.name);
        let log_path = jdir.join(LOG);
        if root.symlink_metadata(&log_path)?.is_none() {
            // Created but never written: nothing was changed.
            let _ = root.remove_dir(&jdir);
            continue;
        }
        let f = root.open_read(&log_path)?;
        if lock(&f, LockOp::TryExclusive).is_err() {
            // A live step's journal.
            continue;
        }
        let count = {
            let mut r = BufReader::new(root.open_read(&log_path)?);
            read_records(root, &mut r, &log_path)?.len()
        };
        let failed = replay(root, root.open_read(&log_path)?, &log_path)?;
        lines.push(format!(
            "undid {count} file change record(s) of {}, left by a step that did not end",
            e.name.to_string_lossy()
        ));
        lines.extend(failed.into_iter().map(|l| format!("not undone: {l}")));
        drop(f);
        remove_journal(root, &jdir, &[], true)?;
    }
    Ok(lines)
}

/// A write failure injected into one journal's log (tests): the journal whose name starts
/// with the label given to [`fail_point::set`] writes only `keep` bytes of its record
/// number `nth`, then fails with `ENOSPC`, as a full disk does half-way.
#[cfg(test)]
pub(crate) mod fail_point {
    use std::sync::Mutex;

    static FAIL: Mutex<Vec<(String, usize, usize)>> = Mutex::new(Vec::new());

    /// Make the journal of the step labelled `label` fail record `nth` after `keep` bytes.
    pub(crate) fn set(label: &str, nth: usize, keep: usize) {
        FAIL.lock().unwrap().push((label.to_string(), nth, keep));
    }

    /// The bytes record `nth` of journal `name` may write, once.
    pub(super) fn take(name: &str, nth: usize) -> Option<usize> {
        let mut v = FAIL.lock().unwrap();
        let i = v
            .iter()
            .position(|(l, n, _)| name.starts_with(&format!("{l}.")) && *n == nth)?;
        Some(v.remove(i).2)
    }

    /// A writer that fails with `ENOSPC` past its budget.
    pub(super) struct Limited<'a, W> {
        inner: &'a mut W,
        left: Option<usize>,
    }

    impl<'a, W: std::io::Write> Limited<'a, W> {
        pub(super) fn new(inner: &'a mut W, left: Option<usize>) -> Self {
            Limited { inner, left }
        }
        pub(super) fn inner(&mut self) -> &mut W {
            self.inner
        }
    }

    impl<W: std::io::Write> std::io::Write for Limited<'_, W> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            match self.left {
                None => self.inner.write(buf),
                Some(0) => Err(std::io::Error::from_raw_os_error(libc::ENOSPC)),
                Some(n) => {
                    let k = self.inner.write(&buf[..buf.len().min(n)])?;
                    self.left = Some(n - k);
                    Ok(k)
                }
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.inner.flush()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recovery that starts while a step is between making its journal directory and
    /// locking its log waits for the step, then leaves its journal alone. It used to take
    /// the fresh directory for an abandoned one and remove it under the step, whose next
    /// write then failed (`No such file`), seen with two agents at once.
    #[test]
    fn a_recovery_waits_for_a_journal_being_made_and_leaves_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = HostRoot::open(tmp.path()).unwrap();
        let (_, guard) = hold_dir_created(&root).unwrap();
        let jdir = Path::new(DIR).join("pkg-apply.1.0");
        root.create_dir_all(&jdir, 0o700).unwrap();
        let ino = root
            .symlink_metadata(Path::new(DIR))
            .unwrap()
            .unwrap()
            .ino();

        let recovering = {
            let root = root.try_clone().unwrap();
            std::thread::spawn(move || recover(&root).unwrap())
        };
        // Until the recovery waits on the directory's lock (a `->` waiter in /proc/locks),
        // at most 10 s; the assertions below fail if it never does.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let waiter = format!(":{ino} ");
        let mut waited = false;
        while !waited && std::time::Instant::now() < deadline && !recovering.is_finished() {
            let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
            waited = locks
                .lines()
                .any(|l| l.contains("-> FLOCK") && l.contains(&waiter));
            std::thread::yield_now();
        }
        assert!(
            root.symlink_metadata(&jdir).unwrap().is_some(),
            "the recovery removed the journal being made"
        );
        let log = root.create_new(&jdir.join(LOG), 0o600).unwrap();
        lock(&log, LockOp::Exclusive).unwrap();
        drop(guard);

        let lines = recovering.join().unwrap();
        assert!(
            waited,
            "the recovery did not wait for the step making its journal"
        );
        assert_eq!(lines, Vec::<String>::new());
        assert!(root.symlink_metadata(&jdir.join(LOG)).unwrap().is_some());
    }
}
