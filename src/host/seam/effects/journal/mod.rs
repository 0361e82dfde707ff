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
//! A removed file, symlink, FIFO, socket or device, and a removed tree (one whose mode or
//! owner the step changed first too), is *moved aside*: renamed into the journal's
//! directory (no copy, no space needed, no size limit) and renamed back by the undo; the
//! journal deletes it at the step's end with one walk (it was checked for mounts before the
//! move). A tree the step made itself is recorded entry by entry (no content: the step's
//! entries are removed by the undo). Where the rename crosses filesystems (`EXDEV`: the removed path
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
//! before the effect is performed; a call that knows its content writes ahead
//! (`fs::extract`, `fs::copy_tree`) has all their records appended and synced once before
//! the first (`ahead.rs`). A journal write that fails (a full disk) is cut back to
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
//! directories fsynced, then deleted. Either way the log stays locked until it is deleted,
//! and a recovery that gets the lock of a log no longer linked where it found it leaves
//! it: a recovery never takes an ending step's journal for an abandoned one. A file is put back whole only while it holds exactly
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

mod ahead;
#[cfg(test)]
mod attack_tests;
mod dir;
#[cfg(test)]
pub(crate) mod fail_point;
#[cfg(test)]
mod journal_tests;
mod log;
mod records;
mod replay;
mod step;
mod xattr;

#[allow(unused_imports)]
use {dir::*, log::*, records::*, replay::*, step::*, xattr::*};

pub use log::{Damage, parse_log};
pub use records::DIR;
pub use replay::recover;
pub(crate) use step::{Before, StepJournal};
