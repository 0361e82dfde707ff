//! What the undo journal records: its records ([`Record`]: a file's content, a directory,
//! a symlink, an absent path, a line edit), the before-state of a path, and the line
//! edits an undo takes out again.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::xattr::Xattr;
use crate::host::effects::effect::Effect;
use crate::host::root::error::{HostError, Result};
use crate::host::root::staging::{boot_id, random};
use crate::host::root::{HostRoot, RootError};

/// The directory of the journals (a host path).
pub const DIR: &str = "/var/lib/skyhook/.undo";

/// The name of the log inside a journal's directory.
pub(super) const LOG: &str = "log";

/// A record's first bytes.
pub(super) const MAGIC: &[u8; 4] = b"SKJ2";

/// The fixed part before a record's JSON header: magic, header length, content length.
pub(super) const HEAD: usize = 16;

/// After the content: its SHA-256 and the record's.
pub(super) const TAIL: usize = 64;

/// The largest file whose content the journal reads into memory to record it (1 MiB).
pub(super) const SMALL: u64 = 1 << 20;

/// The largest JSON header read (1 MiB: a path, a symlink target, a line edit's lines).
pub(super) const MAX_META: u32 = 1 << 20;

/// The digest of a path's state: `sha256:<hex>` of a regular file's content, `absent`,
/// `dir`, `symlink:<target>`, `other` (a FIFO, socket or device); `*` in a wrote record:
/// whatever the step wrote (the agent's own records, written outside an effect).
pub(super) type State = String;

pub(super) const ABSENT: &str = "absent";

pub(super) const ANY: &str = "*";

/// One record. Paths are host paths, canonical when recorded (the parent's symlinks
/// resolved inside the root: [`canonical_record`]), so that the replay can follow none.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum Record {
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
pub(super) struct LineEdit {
    pub(super) added: Vec<String>,
    pub(super) removed: Vec<(Option<String>, String)>,
    /// For each added line, how many times the edit's base held it already (absent in
    /// journals written before: taken as 0). The inverse never takes a line below it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) base_counts: Vec<usize>,
}

pub(super) fn jerr(path: &Path, root: &HostRoot, source: std::io::Error) -> HostError {
    HostError::Root(RootError {
        op: "journal",
        path: path.to_path_buf(),
        root: root.mount().to_path_buf(),
        source,
    })
}

/// Whether `effect` changes files or a live sysctl value (what the journal records).
pub(super) fn changes_files(effect: &Effect) -> bool {
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
pub(super) fn boot_ns() -> u64 {
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
pub(super) fn dir_name(label: &str) -> String {
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
pub(super) fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The [`State`] of `path` now (not following a final symlink); a regular file's content
/// streamed through SHA-256.
pub(super) fn state_of(root: &HostRoot, path: &Path) -> Result<State> {
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
pub(super) fn lines_of(text: &[u8]) -> Option<Vec<String>> {
    let s = std::str::from_utf8(text).ok()?;
    Some(s.lines().map(str::to_string).collect())
}

/// The line edit that turns `base` into `after` (both UTF-8, else `None`).
pub(super) fn line_edit(base: &[u8], after: &[u8]) -> Option<LineEdit> {
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
pub(super) fn invert(lines: &mut Vec<String>, edit: &LineEdit) {
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

/// What identifies a content write recorded ahead of its batch (`ahead.rs`): its path as
/// given and the SHA-256 it leaves.
pub(super) type Key = (PathBuf, String);

/// The [`Key`] of a content write whose result is known (`None` for any other effect, and
/// for a copy without its source's digest).
pub(super) fn key(effect: &Effect) -> Option<Key> {
    match effect {
        Effect::WriteFile { path, content, .. } => {
            Some((path.clone(), crate::host::root::digest::sha256_tag(content)))
        }
        Effect::CopyFile {
            path,
            sha256: Some(d),
            ..
        } => Some((path.clone(), format!("sha256:{d}"))),
        _ => None,
    }
}

/// What tells a file changed since it was recorded: device, inode, size, and the change
/// time the kernel sets on any write, rename onto or `chmod` (`None`: absent or unreadable).
pub(super) type Stamp = (u64, u64, u64, i64, i64);

/// The [`Stamp`] of `path` (no final symlink followed).
pub(super) fn stamp_of(
    root: &crate::host::root::HostRoot,
    path: &std::path::Path,
) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = root.symlink_metadata(path).ok()??;
    Some((m.dev(), m.ino(), m.size(), m.ctime(), m.ctime_nsec()))
}
