//! The undo journal of a step: the before-state of every file the apply executor changes,
//! and what the step wrote there, kept durably inside the host root so that a failed step
//! (or one the agent did not live to end) can be put back without undoing anyone else's
//! change.
//!
//! Before the apply executor performs a file effect (a write, batched or not, a removal, a
//! directory, a tree removal, a mode or owner change, a symlink, a download's file) or sets
//! a live sysctl value, it records the path's state once per step (the first before-state
//! wins): existence and kind, the content of a regular file, mode, owner, extended
//! attributes, a symlink's target, the previous sysctl value. Each directory the step
//! creates and each path it creates beneath one is recorded absent (no content; an entry
//! beneath a created directory synced with the next record that is, not before its
//! effect: lost to a crash, the entry is left with its directory); an existing path beneath a created directory records
//! nothing. The undo removes the step's entries, then a created directory only if it is
//! empty then: else it is left, with a `<dir> holds entries this step did not make` line.
//!
//! Before every content write (and a removal of a path it wrote) it also records a
//! *wrote* record: the SHA-256 of the file as it is then (`base`, read under the path lock
//! the edit holds, [`crate::host::root::pathlock`]) and of what the step writes (`after`);
//! for a content write the mode, uid and gid the write leaves; for a line or block edit
//! (the session's line batch, the user database) also the edit's lines added and removed.
//!
//! A removed file, symlink, FIFO, socket or device, and a removed tree, is *moved aside*:
//! renamed into the journal's directory (no copy, no space needed, no size limit) and
//! renamed back by the undo. Where the rename crosses filesystems (`EXDEV`: the removed path
//! is on another filesystem than `/var/lib/skyhook`), a regular file's content is copied
//! into the log instead, a FIFO or device is recorded as what it is (made again with
//! `mknod`), and a socket as a socket (not made again: its server makes it).
//!
//! | file | content |
//! |---|---|
//! | `/var/lib/skyhook/.undo/<package>-<step>.<boot id, 8 hex>-<16 random hex>/log` | records (below) |
//! | `/var/lib/skyhook/.undo/<...>/<n>` | a path the step removed, moved aside |
//!
//! A record is `SKJ2`, the JSON header's length (u32 LE), the content's length (u64 LE),
//! the JSON header, the content, the content's SHA-256 and the SHA-256 of everything before
//! the content plus the content's digest: it is whole or it is not used. The first record
//! is the journal's start (boot id, boot-time clock, wall clock, pid), which orders
//! recovery. The log is made unnamed (`O_TMPFILE`), locked (`flock`), given its start
//! record and only then linked into place, so no recovery ever sees a live step's log
//! unlocked. Each effect's records are appended and the log fsynced (`fdatasync`) once
//! before the effect is performed. A journal write that fails (a full disk) is cut back to
//! its last whole record and *poisons* the step: every later effect and the step's end
//! fail with it, whatever the script caught, and the step is undone.
//!
//! Every recorded path is canonical (its parent's symlinks resolved inside the root when
//! recorded, the path lock's key), and the replay follows no symlink below the root (a
//! clone of the root with `/` confined, `RESOLVE_NO_SYMLINKS`: the kernel holds the line):
//! a symlink on the way now was swapped in since the step wrote, and the record is left,
//! with a `<path>: a symlink on the way since this step wrote it` line.
//!
//! When the step ends: on success (after its writes are durable) the journal is deleted
//! (moved-aside paths with it); on failure it is replayed backwards, the restored
//! directories fsynced, then deleted. A file is put back whole only while it holds exactly
//! what the step wrote there (its digest, compared under the path's lock, and for the user
//! database under `/etc/.pwd.lock` too, which `useradd` takes): when another
//! writer changed it since (its content, or the mode or owner the step left), a line or
//! block edit is undone alone (mode and owner left as they are now) on the file as it is now
//! (the step's added lines removed, its removed lines put back after the line they
//! followed), and any other change is left, with a `<path> changed by another writer since
//! this step wrote it` line; a moved-aside path comes back only where nothing is now. The
//! replay reads record by record and stops at the first record that is not whole (cut
//! short, checksum mismatch): it never reads across a record boundary, and says from which
//! byte the journal could not be read. [`recover`] replays every journal no live process
//! holds, newest first (by the start records): a step cut short by SIGKILL is undone by the
//! next run before it does anything else. Content is streamed in both directions (never
//! held in memory whole), except a line edit's file, which is text the session held anyway.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::host::effects::effect::Effect;
use crate::host::root::durability::DirSyncs;
use crate::host::root::error::{HostError, Result};
use crate::host::root::staging::{boot_id, random};
use crate::host::root::undo_ops::Node;
use crate::host::root::{DirSync, EntryKind, HostRoot, RootError, normalize};

/// The directory of the journals (a host path).
pub const DIR: &str = "/var/lib/skyhook/.undo";

/// The name of the log inside a journal's directory.
const LOG: &str = "log";

/// A record's first bytes.
const MAGIC: &[u8; 4] = b"SKJ2";
/// The fixed part before a record's JSON header: magic, header length, content length.
const HEAD: usize = 16;
/// After the content: its SHA-256 and the record's.
const TAIL: usize = 64;
/// The largest file whose content the journal reads into memory to record it (1 MiB).
const SMALL: u64 = 1 << 20;
/// The largest JSON header read (1 MiB: a path, a symlink target, a line edit's lines).
const MAX_META: u32 = 1 << 20;

/// The digest of a path's state: `sha256:<hex>` of a regular file's content, `absent`,
/// `dir`, `symlink:<target>`, `other` (a FIFO, socket or device); `*` in a wrote record:
/// whatever the step wrote (the agent's own records, written outside an effect).
type State = String;

const ABSENT: &str = "absent";
const ANY: &str = "*";

/// One record. Paths are host paths, canonical when recorded (the parent's symlinks
/// resolved inside the root: [`canonical_record`]), so that the replay can follow none.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Record {
    /// The journal's start: orders recovery (newest first).
    Start {
        boot_id: String,
        /// `CLOCK_BOOTTIME` in nanoseconds (comparable within one boot).
        boot_ns: u64,
        /// Wall clock, nanoseconds since the epoch (across boots).
        wall_ns: u64,
        pid: u32,
    },
    /// Nothing was there: undo removes what is (if it is what the step wrote).
    Absent { path: PathBuf },
    /// A regular file; its content is the record's content.
    File {
        path: PathBuf,
        mode: u32,
        uid: u32,
        gid: u32,
        xattrs: Vec<Xattr>,
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
    /// A removed path (anything but a mount point), renamed to `stash` in the journal's
    /// directory.
    Moved { path: PathBuf, stash: String },
    /// A FIFO, socket or device removed across filesystems: recorded as what it was.
    Special {
        path: PathBuf,
        /// `fifo`, `socket`, `char` or `block`.
        node: String,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
    },
    /// The step is about to change `path`'s content from `base` to `after` ([`State`]).
    Wrote {
        path: PathBuf,
        base: State,
        after: State,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lines: Option<LineEdit>,
        /// The mode (permission bits), uid and gid the step leaves on the file (a content
        /// write; absent in other records and in journals written before: not checked).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        meta: Option<(u32, u32, u32)>,
    },
}

/// A line or block edit: lines added (in order) and removed (each with the line it
/// followed, `None` at the top).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct LineEdit {
    added: Vec<String>,
    removed: Vec<(Option<String>, String)>,
    /// For each added line, how many times the edit's base held it already (absent in
    /// journals written before: taken as 0). The inverse never takes a line below it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    base_counts: Vec<usize>,
}

/// An extended attribute: its name and its value in base64.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
    name: String,
    /// The open, locked log; `None` until the first record.
    log: Option<File>,
    /// The log's length in whole records (a failed append is cut back to it).
    len: u64,
    /// Records appended since the last `fdatasync`.
    unsynced: bool,
    /// Paths recorded (normalised host paths; sysctl paths too).
    seen: HashSet<PathBuf>,
    /// Paths recorded as absent: nothing beneath them needs a record.
    created: Vec<PathBuf>,
    /// Directories the journal itself created above its own (outermost first), removed with
    /// it when empty.
    made_dirs: Vec<PathBuf>,
    /// Records written (the start record not counted).
    records: usize,
    /// Of those, absent records of paths beneath a directory the step created: not
    /// synced before their effect (`fdatasync`ed with the next record that is). Lost to a
    /// crash, the entry is left with its directory and a line, never another's removed.
    lazy: usize,
    /// Paths moved aside so far (the next stash's name).
    stashes: u64,
    /// The first journal write that failed: the step is poisoned (module docs).
    failed: Option<String>,
    /// The content of the small file [`StepJournal::record_path`] recorded last, for the
    /// line edit that follows.
    last_read: Option<(PathBuf, Vec<u8>)>,
    /// The mode, uid and gid the content write being recorded leaves, for its wrote record.
    next_meta: Option<(u32, u32, u32)>,
}

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
            | Effect::SetMtime { .. }
            | Effect::Sysctl { .. }
    )
}

/// `CLOCK_BOOTTIME` in nanoseconds.
fn boot_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// A journal directory name from `label` (`<package>-<step>`): characters outside
/// `[A-Za-z0-9._-]` become `_`; the boot id's first 8 digits and a random part make it
/// unique across processes, pid namespaces and boots.
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
    let boot = boot_id();
    format!("{clean}.{}-{:016x}", &boot[..boot.len().min(8)], random())
}

/// Lowercase hex of `d`.
fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The [`State`] of `path` now (not following a final symlink); a regular file's content
/// streamed through SHA-256.
fn state_of(root: &HostRoot, path: &Path) -> Result<State> {
    let Some(m) = root.symlink_metadata(path)? else {
        return Ok(ABSENT.into());
    };
    let ft = m.file_type();
    Ok(if ft.is_file() {
        let mut f = root.open_regular(path)?;
        let (_, d) =
            crate::host::root::digest::sha256_stream(&mut f).map_err(|e| jerr(path, root, e))?;
        format!("sha256:{d}")
    } else if ft.is_dir() {
        "dir".into()
    } else if ft.is_symlink() {
        format!("symlink:{}", root.read_link(path)?.display())
    } else {
        "other".into()
    })
}

/// The lines of `text` (without their line breaks); `None` when it is not UTF-8.
fn lines_of(text: &[u8]) -> Option<Vec<String>> {
    let s = std::str::from_utf8(text).ok()?;
    Some(s.lines().map(str::to_string).collect())
}

/// The line edit that turns `base` into `after` (both UTF-8, else `None`).
fn line_edit(base: &[u8], after: &[u8]) -> Option<LineEdit> {
    let old = lines_of(base)?;
    let new = lines_of(after)?;
    let mut edit = LineEdit::default();
    for op in similar::capture_diff_slices(similar::Algorithm::Myers, &old, &new) {
        let (o, olen, n, nlen) = match op {
            similar::DiffOp::Equal { .. } => continue,
            similar::DiffOp::Delete {
                old_index, old_len, ..
            } => (old_index, old_len, 0, 0),
            similar::DiffOp::Insert {
                new_index, new_len, ..
            } => (0, 0, new_index, new_len),
            similar::DiffOp::Replace {
                old_index,
                old_len,
                new_index,
                new_len,
            } => (old_index, old_len, new_index, new_len),
        };
        for i in o..o + olen {
            let prev = i.checked_sub(1).map(|p| old[p].clone());
            edit.removed.push((prev, old[i].clone()));
        }
        edit.added.extend(new[n..n + nlen].iter().cloned());
    }
    edit.base_counts = edit
        .added
        .iter()
        .map(|a| old.iter().filter(|l| *l == a).count())
        .collect();
    Some(edit)
}

/// Undo `edit` on `lines` (the file as it is now): each added line taken out (its last
/// occurrence, as many times as it was added, but never below the number of copies the
/// edit's base held: those were not the step's), each removed line that is not there put
/// back after the last occurrence of the line it followed (at the top for `None`, at the
/// end when that line is gone).
fn invert(lines: &mut Vec<String>, edit: &LineEdit) {
    for (k, line) in edit.added.iter().enumerate().rev() {
        let had = edit.base_counts.get(k).copied().unwrap_or(0);
        if lines.iter().filter(|l| *l == line).count() <= had {
            continue;
        }
        if let Some(i) = lines.iter().rposition(|l| l == line) {
            lines.remove(i);
        }
    }
    for (prev, line) in &edit.removed {
        if lines.contains(line) {
            continue;
        }
        let at = match prev {
            None => 0,
            Some(p) => lines
                .iter()
                .rposition(|l| l == p)
                .map_or(lines.len(), |i| i + 1),
        };
        lines.insert(at, line.clone());
    }
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
        }
    }

    fn dir(&self) -> PathBuf {
        Path::new(DIR).join(&self.name)
    }

    /// The first journal write that failed (module docs: the step is poisoned).
    pub(crate) fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    fn poisoned(&self) -> HostError {
        HostError::JournalFailed {
            message: self.failed.clone().unwrap_or_default(),
        }
    }

    /// Whether `p` (normalised) needs no record: under the journals' directory, or
    /// recorded already.
    fn covered(&self, p: &Path) -> bool {
        p.starts_with(DIR) || self.seen.contains(p)
    }

    /// Whether `p` is strictly beneath a path the step created (or is one, when `or_self`).
    fn beneath_created(&self, p: &Path) -> bool {
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
        if !changes_files(effect) {
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

    fn record(&mut self, root: &HostRoot, effect: &Effect, line_edit: bool) -> Result<Before> {
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
    fn record_write(
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

    fn wrote(
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
    fn record_removal(&mut self, root: &HostRoot, path: &Path) -> Result<Before> {
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
            // A directory the step recorded (or made): its entries need their own records.
            if m.is_dir() {
                self.record_tree(root, path)?;
            }
            return Ok(Before::Perform);
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
    fn record_creating(&mut self, root: &HostRoot, path: &Path) -> Result<Option<State>> {
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
    fn record_path(&mut self, root: &HostRoot, path: &Path) -> Result<Option<State>> {
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
    fn record_tree(&mut self, root: &HostRoot, path: &Path) -> Result<()> {
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
    fn open(&mut self, root: &HostRoot) -> Result<()> {
        if self.log.is_some() {
            return Ok(());
        }
        let dir = self.dir();
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
    fn append(
        &mut self,
        root: &HostRoot,
        rec: &Record,
        content: Option<(&mut dyn Read, u64)>,
    ) -> Result<[u8; 32]> {
        let d = self.append_counted(root, rec, content, true)?;
        self.records += 1;
        Ok(d)
    }

    fn append_counted(
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
    fn poison(&mut self, e: HostError) -> HostError {
        if let Some(log) = &self.log {
            let _ = log.set_len(self.len);
            let _ = log.sync_data();
        }
        self.failed = Some(crate::chain::render(&e));
        self.poisoned()
    }

    /// `fdatasync` the log when records were appended since the last one.
    fn sync(&mut self, root: &HostRoot) -> Result<()> {
        if !self.unsynced {
            return Ok(());
        }
        let log_path = self.dir().join(LOG);
        let log = self.log.as_ref().expect("records appended");
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
        if self.log.take().is_none() {
            return Ok(());
        }
        self.records = 0;
        remove_journal(root, &self.dir(), &self.made_dirs, false)
    }

    /// The step failed: replay the journal backwards, fsync, delete it. Returns one line
    /// per record that could not be put back (`<path>: <error>`, `<path> changed by
    /// another writer ...`).
    ///
    /// # Errors
    /// Reading the log (then nothing is deleted: the next run's [`recover`] tries again).
    pub(crate) fn undo(&mut self, root: &HostRoot) -> Result<Vec<String>> {
        let Some(log) = self.log.take() else {
            return Ok(Vec::new());
        };
        let log_path = self.dir().join(LOG);
        // The log was opened write-only: read it through a new descriptor.
        let reader = root.open_read(&log_path)?;
        let failed = replay(root, reader, &self.dir())?;
        drop(log);
        self.records = 0;
        remove_journal(root, &self.dir(), &self.made_dirs, false)?;
        Ok(failed)
    }
}

/// Write one record (module docs) to `w`: returns its length and its content's SHA-256.
///
/// # Errors
/// Write failures of `w`; `content` yielding fewer bytes than its length (changed while
/// journaled).
fn write_record(
    w: &mut dyn Write,
    rec: &Record,
    content: Option<(&mut dyn Read, u64)>,
) -> std::io::Result<(u64, [u8; 32])> {
    let meta = serde_json::to_vec(rec).map_err(std::io::Error::other)?;
    let len = content.as_ref().map_or(0, |(_, n)| *n);
    let mut head = Vec::with_capacity(HEAD + meta.len() + TAIL);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    head.extend_from_slice(&len.to_le_bytes());
    head.extend_from_slice(&meta);
    let data_digest: [u8; 32] = match content {
        None => Sha256::digest([]).into(),
        Some((src, n)) => {
            w.write_all(&head)?;
            head.clear();
            let mut h = HashingWriter {
                inner: &mut *w,
                hash: Sha256::new(),
            };
            let copied = std::io::copy(&mut src.take(n), &mut h)?;
            if copied != n {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("changed while journaled: {copied} of {n} bytes read"),
                ));
            }
            h.hash.finalize().into()
        }
    };
    let mut all = Sha256::new();
    all.update(MAGIC);
    all.update((meta.len() as u32).to_le_bytes());
    all.update(len.to_le_bytes());
    all.update(&meta);
    all.update(data_digest);
    head.extend_from_slice(&data_digest);
    head.extend_from_slice(&all.finalize());
    w.write_all(&head)?;
    Ok(((HEAD + meta.len() + TAIL) as u64 + len, data_digest))
}

/// A writer that hashes what it passes on.
struct HashingWriter<'a> {
    inner: &'a mut dyn Write,
    hash: Sha256,
}

impl Write for HashingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// One whole record read back: where its content is and its digest.
#[derive(Debug)]
struct Entry {
    rec: Record,
    /// Where the record starts and ends in the log.
    start: u64,
    end: u64,
    /// The content's offset in the log and its length.
    offset: u64,
    len: u64,
    /// The content's SHA-256.
    digest: [u8; 32],
}

/// Where and why a log stops being readable.
#[derive(Debug, PartialEq, Eq)]
pub struct Damage {
    /// The byte offset of the first record not whole.
    pub offset: u64,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Read the whole records of a log of `total` bytes from `r`, in order, each checked
/// (length, checksum) before it is used; stops at the first one that is not whole and
/// says where. Never reads past a record's declared end into the next one.
fn read_entries<R: Read>(r: &mut R, total: u64) -> (Vec<Entry>, Option<Damage>) {
    let mut out = Vec::new();
    let mut pos = 0u64;
    // Bounded by `total`: every record advances `pos` by at least HEAD + TAIL bytes.
    while pos < total {
        match read_entry(r, pos, total) {
            Ok((entry, next)) => {
                out.push(entry);
                pos = next;
            }
            Err(why) => {
                return (out, Some(Damage { offset: pos, why }));
            }
        }
    }
    (out, None)
}

/// One record at `pos` (its end no further than `total`); the record and the offset after
/// it.
fn read_entry<R: Read>(
    r: &mut R,
    pos: u64,
    total: u64,
) -> std::result::Result<(Entry, u64), &'static str> {
    let left = total - pos;
    if left < (HEAD + TAIL) as u64 {
        return Err("cut short");
    }
    let mut head = [0u8; HEAD];
    r.read_exact(&mut head).map_err(|_| "cut short")?;
    if &head[..4] != MAGIC {
        return Err("not a record");
    }
    let meta_len = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
    let data_len = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
    if meta_len > MAX_META {
        return Err("header too long");
    }
    let size = (HEAD as u64 + TAIL as u64 + u64::from(meta_len))
        .checked_add(data_len)
        .ok_or("cut short")?;
    if size > left {
        return Err("cut short");
    }
    let mut meta = vec![0u8; meta_len as usize];
    r.read_exact(&mut meta).map_err(|_| "cut short")?;
    let mut h = Sha256::new();
    let copied = std::io::copy(&mut (&mut *r).take(data_len), &mut HashSink(&mut h))
        .map_err(|_| "cut short")?;
    if copied != data_len {
        return Err("cut short");
    }
    let digest: [u8; 32] = h.finalize().into();
    let mut tail = [0u8; TAIL];
    r.read_exact(&mut tail).map_err(|_| "cut short")?;
    let mut all = Sha256::new();
    all.update(head);
    all.update(&meta);
    all.update(digest);
    let all: [u8; 32] = all.finalize().into();
    if tail[..32] != digest || tail[32..] != all {
        return Err("checksum mismatch");
    }
    let rec: Record = serde_json::from_slice(&meta).map_err(|_| "unknown record")?;
    let offset = pos + HEAD as u64 + u64::from(meta_len);
    Ok((
        Entry {
            rec,
            start: pos,
            end: pos + size,
            offset,
            len: data_len,
            digest,
        },
        pos + size,
    ))
}

/// A `Write` that only hashes.
struct HashSink<'a>(&'a mut Sha256);

impl Write for HashSink<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The whole records of a log held in memory, as byte ranges, and where it stops being
/// readable: the journal parser the fuzz target drives (`tests/fuzz`). Each range starts
/// where the previous one ended and lies within `bytes`; each record's checksums matched.
#[doc(hidden)]
pub fn parse_log(bytes: &[u8]) -> (Vec<std::ops::Range<u64>>, Option<Damage>) {
    let mut cur = std::io::Cursor::new(bytes);
    let (entries, damage) = read_entries(&mut cur, bytes.len() as u64);
    (
        entries.into_iter().map(|e| e.start..e.end).collect(),
        damage,
    )
}

/// Remove a journal's directory (the log and what it moved aside), fsync its parent; then,
/// holding the journals' directory exclusively (unless `held`: the caller holds it), that
/// directory and the ones the journal created above it when empty.
fn remove_journal(root: &HostRoot, dir: &Path, made: &[PathBuf], held: bool) -> Result<()> {
    root.remove_file(&dir.join(LOG))?;
    root.remove_all(dir)?;
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
/// journal and links its log, exclusive for a recovery's scan and for removing the
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

/// The whole records of the log `f` (module docs), and where it stops being readable.
fn entries_of(root: &HostRoot, f: &File, log_path: &Path) -> Result<(Vec<Entry>, Option<Damage>)> {
    let total = f.metadata().map_err(|e| jerr(log_path, root, e))?.len();
    let mut r = BufReader::new(f);
    let legacy = r.fill_buf().map_err(|e| jerr(log_path, root, e))?.first() == Some(&b'{');
    Ok(match legacy {
        true => read_legacy(&mut r, total),
        false => read_entries(&mut r, total),
    })
}

/// The records of a journal an agent before issue 28 left (a JSON line per record, a file's
/// content after its line; no checksums): read up to the first line that does not parse
/// or a content cut short, each file and absent record followed by a wrote record of
/// unknown content (`*`: put back whole, as that agent's undo did).
fn read_legacy<R: std::io::BufRead>(r: &mut R, total: u64) -> (Vec<Entry>, Option<Damage>) {
    let mut out = Vec::new();
    let mut pos = 0u64;
    let mut line = Vec::new();
    // Bounded by `total`: every record advances `pos` by at least one byte.
    while pos < total {
        line.clear();
        let Ok(n) = r.read_until(b'\n', &mut line) else {
            break;
        };
        if n == 0 || line.last() != Some(&b'\n') {
            return (
                out,
                Some(Damage {
                    offset: pos,
                    why: "cut short",
                }),
            );
        }
        let start = pos;
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&line) else {
            return (
                out,
                Some(Damage {
                    offset: pos,
                    why: "not a record",
                }),
            );
        };
        let len = v
            .get("len")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        let Ok(rec) = serde_json::from_value::<Record>(v) else {
            return (
                out,
                Some(Damage {
                    offset: pos,
                    why: "unknown record",
                }),
            );
        };
        let offset = pos + n as u64;
        if len > total - offset {
            return (
                out,
                Some(Damage {
                    offset: pos,
                    why: "cut short",
                }),
            );
        }
        let mut h = Sha256::new();
        if std::io::copy(&mut (&mut *r).take(len), &mut HashSink(&mut h)).ok() != Some(len) {
            return (
                out,
                Some(Damage {
                    offset: pos,
                    why: "cut short",
                }),
            );
        }
        pos = offset + len;
        let wrote = match &rec {
            Record::File { path, .. } | Record::Absent { path } => Some(path.clone()),
            _ => None,
        };
        out.push(Entry {
            rec,
            start,
            end: pos,
            offset,
            len,
            digest: h.finalize().into(),
        });
        if let Some(path) = wrote {
            out.push(Entry {
                rec: Record::Wrote {
                    path,
                    base: ANY.into(),
                    after: ANY.into(),
                    lines: None,
                    meta: None,
                },
                start: pos,
                end: pos,
                offset: pos,
                len: 0,
                digest: [0; 32],
            });
        }
    }
    (out, None)
}

/// Whether two [`State`]s agree (`*`, whatever the step wrote, agrees with any).
fn agrees(a: &str, b: &str) -> bool {
    a == b || a == ANY || b == ANY
}

/// Replay the log `reader` of the journal in `jdir` backwards (module docs). Returns one
/// line per record that could not be put back, and one for a log that stops being
/// readable before its end.
fn replay(root: &HostRoot, reader: File, jdir: &Path) -> Result<Vec<String>> {
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
fn canonical_record(root: &HostRoot, rec: &Record) -> Option<Record> {
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
fn symlink_on_the_way(root: &HostRoot, path: &Path) -> Result<bool> {
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

fn rec_path(rec: &Record) -> &Path {
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
fn lock_key(root: &HostRoot, path: &Path) -> PathBuf {
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
fn is_user_db(path: &Path) -> bool {
    crate::host::root::pwdlock::is_user_db(path)
}

/// Put back the state record `e` whose path the step then wrote as `writes` say, under
/// the path's lock (principle: never over a change the step did not make). `Ok(Some)`:
/// a line saying what was left.
fn restore_checked(
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
    let mut chain = true;
    let mut prev = before.as_str();
    let mut last_base = before.as_str();
    for w in writes {
        if let Record::Wrote { base, after, .. } = w {
            chain &= agrees(base, prev);
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

/// Remove whatever is at `path` (a tree too) unless it is of kind `keep`.
fn clear(root: &HostRoot, path: &Path, keep: Option<&str>, syncs: &DirSyncs) -> Result<()> {
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
fn make_parents(root: &HostRoot, path: &Path, syncs: &DirSyncs) -> Result<()> {
    if let Some(parent) = path.parent() {
        for d in root.create_dir_all(parent, crate::host::root::PARENT_DIR_MODE)? {
            syncs.add_parent_of(&d);
        }
    }
    Ok(())
}

/// Put `rec`'s state back as it was (content at `offset` in `log`).
fn restore(
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
    // its locked log, so a missing or unlocked log is an abandoned journal.
    let Some(_guard) = hold_dir(root, LockOp::Exclusive)? else {
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
        let f = root.open_regular(&log_path)?;
        if lock(&f, LockOp::TryExclusive).is_err() {
            // A live step's journal.
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
    let mut lines = skipped;
    for (_, name, jdir, f, count) in found {
        let log_path = jdir.join(LOG);
        let failed = replay(root, root.open_regular(&log_path)?, &jdir)?;
        lines.push(format!(
            "undid {count} file change record(s) of {}, left by a step that did not end",
            name.to_string_lossy()
        ));
        lines.extend(failed.into_iter().map(|l| format!("not undone: {l}")));
        drop(f);
        remove_journal(root, &jdir, &[], true)?;
    }
    // Journals that were never linked (a step killed before its first record, or while
    // its journal was being deleted) leave nothing behind either.
    // (A journal's removal above removed the directory already when it was the last.)
    if root.read_dir(dir).is_ok_and(|d| d.is_empty()) && root.remove_dir(dir).unwrap_or(false) {
        root.sync_dir_checked(dir.parent().unwrap_or(Path::new("/")))?;
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

    /// Fault 4: a journal's name does not depend on the process id (two agents that are
    /// pid 1 in their pods used to pick the same name): it carries the boot id and a
    /// random part, so names never repeat.
    #[test]
    fn journal_names_are_unique_across_pid_namespaces() {
        let pid = std::process::id();
        let names: HashSet<String> = (0..1000).map(|_| dir_name("pkg-step")).collect();
        assert_eq!(names.len(), 1000);
        for n in names.iter().take(5) {
            assert!(!n.contains(&format!(".{pid}.")), "{n}");
            assert!(n.starts_with("pkg-step."), "{n}");
        }
    }

    /// Principle 2: a record is whole or not used. Three records; a byte of the second's
    /// content flipped, then the log cut inside the third: the reader returns the first
    /// only and says where it stopped, never reading the second's declared content as
    /// anything else.
    #[test]
    fn the_reader_stops_at_the_first_record_that_is_not_whole() {
        let mut log = Vec::new();
        let recs = [
            Record::Absent { path: "/a".into() },
            Record::Sysctl {
                path: "/proc/sys/x".into(),
                value: "1".into(),
            },
            Record::Absent { path: "/c".into() },
        ];
        let mut ends = Vec::new();
        for r in &recs {
            write_record(&mut log, r, None).unwrap();
            ends.push(log.len() as u64);
        }
        let (ranges, damage) = parse_log(&log);
        assert_eq!(ranges, vec![0..ends[0], ends[0]..ends[1], ends[1]..ends[2]]);
        assert_eq!(damage, None);
        // A flipped byte in the second record's header.
        let mut bad = log.clone();
        bad[ends[0] as usize + HEAD + 3] ^= 1;
        let (ranges, damage) = parse_log(&bad);
        assert_eq!(ranges, vec![0..ends[0]]);
        assert_eq!(
            damage,
            Some(Damage {
                offset: ends[0],
                why: "checksum mismatch"
            })
        );
        // Cut inside the third.
        let (ranges, damage) = parse_log(&log[..log.len() - 5]);
        assert_eq!(ranges.len(), 2);
        assert_eq!(
            damage,
            Some(Damage {
                offset: ends[1],
                why: "cut short"
            })
        );
        // A length that points past the end is cut short, not read across.
        let mut long = log.clone();
        long[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(parse_log(&long).0, Vec::<std::ops::Range<u64>>::new());
    }

    /// Principle 1 for line edits: the inverse of a step's edit takes out its lines and
    /// puts back what it removed, on the file as another writer left it.
    #[test]
    fn a_line_edit_is_undone_alone_on_the_file_as_it_is_now() {
        let edit = line_edit(b"a=1\nold=1\nz=9\n", b"a=1\nnew=2\nz=9\nmine=1\n").unwrap();
        let mut now: Vec<String> = ["a=1", "new=2", "z=9", "mine=1", "theirs=1"]
            .map(String::from)
            .to_vec();
        invert(&mut now, &edit);
        assert_eq!(now, ["a=1", "old=1", "z=9", "theirs=1"]);
    }

    /// Attack on principle 1: the step appended a line the file held already (`x=1`);
    /// another writer then removed the step's copy. The inverse must not take out the copy
    /// that was there before the step: it used to remove the last occurrence whatever the
    /// count, deleting a line the step never added.
    #[test]
    fn an_inverse_never_takes_out_a_line_that_was_there_before_the_step() {
        let edit = line_edit(b"x=1\nb=0\n", b"x=1\nb=0\nx=1\n").unwrap();
        let mut now: Vec<String> = ["x=1", "b=0", "theirs=1"].map(String::from).to_vec();
        invert(&mut now, &edit);
        assert_eq!(now, ["x=1", "b=0", "theirs=1"]);
        // Another writer added the same line too: one copy (theirs) stays besides the
        // one that was there before.
        let mut now: Vec<String> = ["x=1", "b=0", "x=1", "x=1"].map(String::from).to_vec();
        invert(&mut now, &edit);
        assert_eq!(now, ["x=1", "b=0", "x=1"]);
    }

    /// Attack on principle 2: a journal whose records are whole (valid length and
    /// checksums) but whose `moved` record names a stash outside its directory
    /// (`../../../../etc/shadow`). The recovery must not rename that path into place: a
    /// stash is one plain name in the journal's directory.
    #[test]
    fn a_moved_record_whose_stash_leaves_the_journal_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = HostRoot::open(tmp.path()).unwrap();
        root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
        root.write_atomic(Path::new("/etc/shadow"), b"root:*:1::::::\n", Some(0o600))
            .unwrap();
        let jdir = Path::new(DIR).join("pkg-step.1.0");
        root.create_dir_all(&jdir, 0o700).unwrap();
        let mut log = Vec::new();
        let recs = [
            Record::Start {
                boot_id: "x".into(),
                boot_ns: 1,
                wall_ns: 1,
                pid: 1,
            },
            Record::Moved {
                path: "/etc/stolen".into(),
                stash: "../../../../etc/shadow".into(),
            },
        ];
        for r in &recs {
            write_record(&mut log, r, None).unwrap();
        }
        root.write_atomic(&jdir.join(LOG), &log, Some(0o600))
            .unwrap();
        let lines = recover(&root).unwrap();
        assert!(
            root.exists(Path::new("/etc/shadow")).unwrap(),
            "the recovery moved /etc/shadow: {lines:?}"
        );
        assert!(!root.exists(Path::new("/etc/stolen")).unwrap());
        assert!(
            lines
                .iter()
                .any(|l| l.contains("/etc/stolen") && l.contains("stash")),
            "{lines:?}"
        );
    }

    /// Attack on principle 1 with `useradd` on the node: it takes only the shadow-utils
    /// lock (`fcntl` on `/etc/.pwd.lock`), not the agent's path locks. A step's undo of its
    /// `/etc/passwd` edit must wait for that lock as the edit did, else `useradd`'s write
    /// can land between the undo's digest and its rename and be lost. A forked child holds
    /// the lock, the undo starts, the child appends its user and releases: the child's user
    /// survives, the step's is gone.
    #[test]
    fn the_undo_of_the_user_database_waits_for_the_shadow_utils_lock() {
        use std::os::unix::ffi::OsStrExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = HostRoot::open(tmp.path()).unwrap();
        root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
        let passwd = Path::new(crate::host::root::pwdlock::PASSWD);
        root.write_atomic(passwd, b"root:x:0:0::/root:/bin/sh\n", Some(0o644))
            .unwrap();
        root.write_atomic(Path::new("/etc/.pwd.lock"), b"", Some(0o600))
            .unwrap();
        let content: bytes::Bytes =
            "root:x:0:0::/root:/bin/sh\nstep:x:999:999::/:/bin/false\n".into();
        let mut j = StepJournal::new("pkg-user");
        let effect = Effect::WriteFile {
            path: passwd.to_path_buf(),
            content: content.clone(),
            mode: None,
            uid: None,
            gid: None,
        };
        assert_eq!(j.before(&root, &effect, true).unwrap(), Before::Perform);
        root.write_atomic(passwd, &content, Some(0o644)).unwrap();

        let lock_path = tmp.path().join("etc/.pwd.lock");
        let ino = std::fs::metadata(&lock_path).unwrap().ino();
        let cpath = std::ffi::CString::new(lock_path.as_os_str().as_bytes()).unwrap();
        let cpasswd =
            std::ffi::CString::new(tmp.path().join("etc/passwd").as_os_str().as_bytes()).unwrap();
        let line = b"useradd:x:1001:1001::/:/bin/sh\n";
        let (locked_r, locked_w) = nix::unistd::pipe().unwrap();
        let (go_r, go_w) = nix::unistd::pipe().unwrap();
        // SAFETY: the child calls only async-signal-safe functions, then `_exit`.
        let child = match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => unsafe {
                let fd = libc::open(cpath.as_ptr(), libc::O_RDWR);
                let mut fl: libc::flock = std::mem::zeroed();
                fl.l_type = libc::F_WRLCK as libc::c_short;
                fl.l_whence = libc::SEEK_SET as libc::c_short;
                let ok = fd >= 0 && libc::fcntl(fd, libc::F_SETLKW, &fl) == 0;
                libc::write(locked_w.as_raw_fd(), b"1".as_ptr().cast(), 1);
                let mut b = 0u8;
                libc::read(go_r.as_raw_fd(), (&raw mut b).cast(), 1);
                let p = libc::open(cpasswd.as_ptr(), libc::O_WRONLY | libc::O_APPEND);
                let w = libc::write(p, line.as_ptr().cast(), line.len());
                libc::_exit(if ok && w == line.len() as isize { 0 } else { 1 })
            },
            nix::unistd::ForkResult::Parent { child } => child,
        };
        let mut b = [0u8; 1];
        assert_eq!(nix::unistd::read(&locked_r, &mut b).unwrap(), 1);
        let undoing = {
            let root = root.try_clone().unwrap();
            std::thread::spawn(move || j.undo(&root).unwrap())
        };
        // Until the undo waits on the lock (a POSIX `->` waiter in /proc/locks), at most
        // 10 s, or until it ended without waiting.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let waiter = format!(":{ino} ");
        let mut waited = false;
        while !waited && std::time::Instant::now() < deadline && !undoing.is_finished() {
            let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
            waited = locks
                .lines()
                .any(|l| l.contains("-> POSIX") && l.contains(&waiter));
            std::thread::yield_now();
        }
        nix::unistd::write(&go_w, b"1").unwrap();
        let status = nix::sys::wait::waitpid(child, None).unwrap();
        let lines = undoing.join().unwrap();
        assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0));
        assert!(
            waited,
            "the undo of /etc/passwd did not wait for /etc/.pwd.lock held by another process"
        );
        assert_eq!(lines, Vec::<String>::new());
        assert_eq!(
            root.read(passwd).unwrap(),
            b"root:x:0:0::/root:/bin/sh\nuseradd:x:1001:1001::/:/bin/sh\n"
        );
    }

    /// Attack on principle 1: the step writes a file whole; another writer then changes
    /// only its mode (the content is still what the step wrote). The digest compares the
    /// content only, so the undo puts back the old file with the old mode: the other
    /// writer's `chmod` is lost, and nothing says so.
    #[test]
    fn an_undo_keeps_a_mode_another_writer_set_on_the_steps_content() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = HostRoot::open(tmp.path()).unwrap();
        root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
        let f = Path::new("/etc/f");
        root.write_atomic(f, b"old\n", Some(0o644)).unwrap();
        let mut j = StepJournal::new("pkg-mode");
        let effect = Effect::WriteFile {
            path: f.to_path_buf(),
            content: "new\n".into(),
            mode: None,
            uid: None,
            gid: None,
        };
        assert_eq!(j.before(&root, &effect, false).unwrap(), Before::Perform);
        root.write_atomic(f, b"new\n", Some(0o644)).unwrap();
        std::fs::set_permissions(
            tmp.path().join("etc/f"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let lines = j.undo(&root).unwrap();
        let mode = std::fs::metadata(tmp.path().join("etc/f"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(
            mode, 0o600,
            "the other writer's chmod was undone: {lines:?}"
        );
        assert_eq!(root.read(f).unwrap(), b"new\n");
        assert_eq!(
            lines,
            ["/etc/f changed by another writer since this step wrote it"]
        );
    }

    /// A line edit's undo on content whose mode another writer changed since: the edit's
    /// inverse is applied to the content, and the mode is left as the other writer set it.
    #[test]
    fn a_line_edits_undo_keeps_a_mode_another_writer_set() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = HostRoot::open(tmp.path()).unwrap();
        root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
        let f = Path::new("/etc/f");
        root.write_atomic(f, b"a\n", Some(0o644)).unwrap();
        let mut j = StepJournal::new("pkg-mode-lines");
        let effect = Effect::WriteFile {
            path: f.to_path_buf(),
            content: "a\nmine\n".into(),
            mode: None,
            uid: None,
            gid: None,
        };
        assert_eq!(j.before(&root, &effect, true).unwrap(), Before::Perform);
        root.write_atomic(f, b"a\nmine\n", None).unwrap();
        let real = tmp.path().join("etc/f");
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
        let lines = j.undo(&root).unwrap();
        assert!(lines.is_empty(), "{lines:?}");
        assert_eq!(root.read(f).unwrap(), b"a\n");
        let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640);
    }

    /// The replay follows no symlink (principle 3), yet a step that wrote through a host
    /// symlink that was already there (`/var/run -> ../run`, `/lib -> usr/lib`) is undone:
    /// its records hold the canonical path.
    #[test]
    fn a_write_through_a_host_symlink_that_was_there_is_undone() {
        let tmp = tempfile::tempdir().unwrap();
        let root = HostRoot::open(tmp.path()).unwrap();
        root.create_dir_all(Path::new("/run"), 0o755).unwrap();
        root.create_dir_all(Path::new("/var"), 0o755).unwrap();
        root.create_dir_all(Path::new("/usr/lib"), 0o755).unwrap();
        root.symlink(Path::new("../run"), Path::new("/var/run"))
            .unwrap();
        root.symlink(Path::new("usr/lib"), Path::new("/lib"))
            .unwrap();
        root.write_atomic(Path::new("/lib/old.conf"), b"old\n", Some(0o644))
            .unwrap();
        let mut j = StepJournal::new("pkg-links");
        for (p, c) in [("/var/run/x.pid", "1\n"), ("/lib/old.conf", "new\n")] {
            let effect = Effect::WriteFile {
                path: p.into(),
                content: c.into(),
                mode: None,
                uid: None,
                gid: None,
            };
            assert_eq!(j.before(&root, &effect, false).unwrap(), Before::Perform);
            root.write_atomic(Path::new(p), c.as_bytes(), Some(0o644))
                .unwrap();
        }
        let lines = j.undo(&root).unwrap();
        assert!(lines.is_empty(), "{lines:?}");
        assert!(!root.exists(Path::new("/run/x.pid")).unwrap());
        assert_eq!(root.read(Path::new("/usr/lib/old.conf")).unwrap(), b"old\n");
    }

    /// Attack on principle 1 with a symlink: the step makes `/etc/l` a link (replacing
    /// one) and `/etc/m` (new); another writer then replaces each with a regular file of
    /// its own. The undo used to put the old link back (and remove the new one) whatever
    /// was there now, deleting the other writer's files: a symlink's undo is now checked
    /// against the link the step made, like a file's.
    #[test]
    fn a_symlinks_undo_keeps_a_file_another_writer_put_there() {
        let tmp = tempfile::tempdir().unwrap();
        let root = HostRoot::open(tmp.path()).unwrap();
        root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
        let (l, m) = (Path::new("/etc/l"), Path::new("/etc/m"));
        root.symlink(Path::new("a"), l).unwrap();
        let mut j = StepJournal::new("pkg-link");
        for link in [l, m] {
            let effect = Effect::Symlink {
                target: "b".into(),
                link: link.to_path_buf(),
            };
            assert_eq!(j.before(&root, &effect, false).unwrap(), Before::Perform);
            let _ = root.remove_file(link);
            root.symlink(Path::new("b"), link).unwrap();
        }
        // The other writer (the step's links are gone, files in their place).
        for link in [l, m] {
            root.remove_file(link).unwrap();
            root.write_atomic(link, b"theirs\n", Some(0o644)).unwrap();
        }
        let lines = j.undo(&root).unwrap();
        assert_eq!(root.read(l).unwrap(), b"theirs\n", "{lines:?}");
        assert_eq!(root.read(m).unwrap(), b"theirs\n", "{lines:?}");
        assert_eq!(
            lines,
            [
                "/etc/m changed by another writer since this step wrote it",
                "/etc/l changed by another writer since this step wrote it"
            ]
        );
        // Nobody else changed them: the undo puts the old link back and removes the new.
        let mut j = StepJournal::new("pkg-link");
        root.remove_file(l).unwrap();
        root.remove_file(m).unwrap();
        root.symlink(Path::new("a"), l).unwrap();
        for link in [l, m] {
            let effect = Effect::Symlink {
                target: "b".into(),
                link: link.to_path_buf(),
            };
            j.before(&root, &effect, false).unwrap();
            let _ = root.remove_file(link);
            root.symlink(Path::new("b"), link).unwrap();
        }
        assert_eq!(j.undo(&root).unwrap(), Vec::<String>::new());
        assert_eq!(root.read_link(l).unwrap(), Path::new("a"));
        assert!(root.symlink_metadata(m).unwrap().is_none());
    }

    /// Attack on principle 2: a journal's `log` that is a FIFO or a symlink (to a file of
    /// JSON lines another user wrote) when the recovery runs. The recovery used to open it
    /// blocking and following the link: a FIFO hung the agent's start, a link was replayed.
    /// Now a log that is not a regular file is left, named, and the other journals are
    /// recovered.
    #[test]
    fn a_journal_log_that_is_a_fifo_or_a_symlink_is_left_and_named() {
        let tmp = tempfile::tempdir().unwrap();
        let root = HostRoot::open(tmp.path()).unwrap();
        root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
        root.create_dir_all(Path::new("/tmp"), 0o1777).unwrap();
        // A legacy journal another user could write, which would remove /etc/victim.
        root.write_atomic(Path::new("/etc/victim"), b"keep\n", Some(0o644))
            .unwrap();
        root.write_atomic(
            Path::new("/tmp/evil"),
            b"{\"kind\":\"absent\",\"path\":\"/etc/victim\"}\n",
            Some(0o666),
        )
        .unwrap();
        let fifo_dir = Path::new(DIR).join("a-fifo.1.0");
        let link_dir = Path::new(DIR).join("b-link.1.0");
        root.create_dir_all(&fifo_dir, 0o700).unwrap();
        root.create_dir_all(&link_dir, 0o700).unwrap();
        let fifo = tmp
            .path()
            .join(fifo_dir.strip_prefix("/").unwrap())
            .join(LOG);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        root.symlink(Path::new("/tmp/evil"), &link_dir.join(LOG))
            .unwrap();
        let recovering = {
            let root = root.try_clone().unwrap();
            std::thread::spawn(move || recover(&root))
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !recovering.is_finished() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        let hung = !recovering.is_finished();
        if hung {
            // Unblock the reader: a writer opens and closes the FIFO.
            drop(std::fs::OpenOptions::new().write(true).open(&fifo));
        }
        let lines = recovering.join().unwrap();
        assert!(!hung, "the recovery hung on a FIFO as a journal's log");
        let lines = lines.unwrap();
        assert_eq!(
            root.read(Path::new("/etc/victim")).unwrap(),
            b"keep\n",
            "{lines:?}"
        );
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines.iter().all(|l| l.contains("not a regular file")),
            "{lines:?}"
        );
    }

    /// A journal an agent before issue 28 left (JSON lines, a file's content after its
    /// line) is still undone by the recovery: the file put back, the created one removed.
    #[test]
    fn a_journal_of_the_previous_format_is_recovered() {
        let tmp = tempfile::tempdir().unwrap();
        let root = HostRoot::open(tmp.path()).unwrap();
        root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
        root.write_atomic(Path::new("/etc/f"), b"new\n", Some(0o644))
            .unwrap();
        root.write_atomic(Path::new("/etc/made"), b"x\n", Some(0o644))
            .unwrap();
        let jdir = Path::new(DIR).join("pkg-step.1.0");
        root.create_dir_all(&jdir, 0o700).unwrap();
        let log = concat!(
            "{\"kind\":\"file\",\"path\":\"/etc/f\",\"mode\":420,\"uid\":0,\"gid\":0,\"xattrs\":[],\"len\":4}\n",
            "old\n",
            "{\"kind\":\"absent\",\"path\":\"/etc/made\"}\n",
        );
        root.write_atomic(&jdir.join(LOG), log.as_bytes(), Some(0o600))
            .unwrap();
        let lines = recover(&root).unwrap();
        assert_eq!(
            lines,
            ["undid 2 file change record(s) of pkg-step.1.0, left by a step that did not end"]
        );
        assert_eq!(root.read(Path::new("/etc/f")).unwrap(), b"old\n");
        assert!(!root.exists(Path::new("/etc/made")).unwrap());
    }
}
