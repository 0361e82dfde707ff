//! Durable write-ahead records of deferred work, so that a crash cannot lose it.
//!
//! A changed systemd drop-in schedules a `systemctl daemon-reload`, a changed grub drop-in a
//! grub regeneration (`update-grub`, or `grubby --args/--remove-args` on rhel and fedora);
//! both run once at the end of the step ([`crate::host::Host::finish`]). Once the drop-in is
//! written, a rerun of the script finds nothing to change and would never schedule the work
//! again: not when the work failed (the program is missing, it exits non-zero), and not when
//! the agent died (SIGKILL, OOM, node power loss) between the write and the work. So in
//! apply mode the work is recorded inside the host root *before* the drop-in is written or
//! removed (write-ahead), and the record is removed only after the work succeeded:
//!
//! | record | content |
//! |---|---|
//! | `/var/lib/skyhook/.deferred/daemon-reload.json` | `{"action":"daemon_reload"}` |
//! | `/var/lib/skyhook/.deferred/grub.json` | `{"action":"grub_update","regenerate":true,"add":[...],"remove":[...]}` |
//! | `/var/lib/skyhook/.deferred/initramfs.json` | `{"action":"initramfs_update"}` (a `kmod::` blacklist or options file changed; `update-initramfs -u` or `dracut -f`, chosen from the os family when it runs) |
//!
//! (`regenerate`: `update-grub` is due; `add`/`remove`: grubby arguments still to add or
//! take away.) The directory name starts with `.`, so it can never be a Skyhook's state
//! directory (`/var/lib/skyhook/<skyhook name>`). Records are written atomically (temporary
//! file, fsync, rename, directory fsync; mode 0600) before every drop-in change, the grub
//! record holding all the session's pending grub work merged (a drop-in write that then
//! fails puts the previous record back). A crash anywhere between the record and the
//! removal leaves the record; the work may then run once more than needed, never less.
//!
//! Every new session reads the records ([`load`]) and schedules what they hold, as if a
//! drop-in of the session had changed: in apply mode the work runs at the session's end (or,
//! for the daemon-reload, before its first `service::` call) and the record is removed once
//! it succeeded; in plan and check mode it shows up as an action (never drift). A record
//! that cannot be written ahead fails the drop-in call (the drop-in is left unwritten);
//! recording a failure after the work ran is best effort (the record normally exists
//! already).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::host::root::HostRoot;

/// The directory of the records (a host path).
pub const DIR: &str = "/var/lib/skyhook/.deferred";

/// The daemon-reload record.
pub fn daemon_reload_path() -> PathBuf {
    Path::new(DIR).join("daemon-reload.json")
}

/// The grub record.
pub fn grub_path() -> PathBuf {
    Path::new(DIR).join("grub.json")
}

/// Grub work still due: the content of the grub record, and the session's pending grub work.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrubPending {
    /// `update-grub` needed (debian and other families).
    #[serde(default)]
    pub regenerate: bool,
    /// grubby `--args` to add (rhel, fedora).
    #[serde(default)]
    pub add: Vec<String>,
    /// grubby `--remove-args` (rhel, fedora).
    #[serde(default)]
    pub remove: Vec<String>,
}

impl GrubPending {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        !self.regenerate && self.add.is_empty() && self.remove.is_empty()
    }
}

#[derive(Serialize, Deserialize)]
struct GrubRecord {
    action: String,
    #[serde(flatten)]
    pending: GrubPending,
}

/// What the records of `root` hold: whether a daemon-reload is due, and the grub work due
/// (`None` without a grub record). An unreadable or malformed grub record is left alone and
/// reads as `None`; a daemon-reload record counts whatever its content.
pub fn load(root: &HostRoot) -> (bool, Option<GrubPending>) {
    let reload = matches!(root.symlink_metadata(&daemon_reload_path()), Ok(Some(_)));
    let grub = root
        .read_opt(&grub_path())
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice::<GrubRecord>(&b).ok())
        .map(|r| r.pending);
    (reload, grub)
}

/// How many times this process wrote what a session reads at its start: a deferred-work
/// record (here) or an undo journal (the journal, when it opens one). A run remembers that
/// it found neither only while this count is unchanged
/// ([`crate::host::effects::session::StartMemo`]).
static START_STATE_WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Count a write of what a session reads at its start (see [`start_state_writes`]); called
/// before the write.
pub(in crate::host::seam) fn note_start_state_write() {
    START_STATE_WRITES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// How many writes [`note_start_state_write`] counted so far in this process.
pub(in crate::host::seam) fn start_state_writes() -> u64 {
    START_STATE_WRITES.load(std::sync::atomic::Ordering::SeqCst)
}

fn write(root: &HostRoot, path: &Path, data: &[u8]) -> crate::host::root::Result<()> {
    note_start_state_write();
    root.create_dir_all(Path::new(DIR), 0o755)?;
    root.write_atomic(path, data, Some(0o600))
}

/// Record a due daemon-reload.
///
/// # Errors
/// Creating the directory or writing the record failed.
pub(in crate::host::seam) fn record_daemon_reload(
    root: &HostRoot,
) -> crate::host::root::Result<()> {
    write(
        root,
        &daemon_reload_path(),
        b"{\"action\":\"daemon_reload\"}\n",
    )
}

/// Record the grub work due (replacing an older record).
///
/// # Errors
/// Creating the directory or writing the record failed.
pub(in crate::host::seam) fn record_grub(
    root: &HostRoot,
    pending: &GrubPending,
) -> crate::host::root::Result<()> {
    let rec = GrubRecord {
        action: "grub_update".into(),
        pending: pending.clone(),
    };
    let mut data = serde_json::to_vec(&rec).unwrap_or_default();
    data.push(b'\n');
    write(root, &grub_path(), &data)
}

/// Remove a record after its work succeeded (absent is fine).
///
/// # Errors
/// The removal failed.
pub(in crate::host::seam) fn clear(root: &HostRoot, path: &Path) -> crate::host::root::Result<()> {
    root.remove_file(path).map(|_| ())
}

/// The initramfs record.
pub fn initramfs_path() -> PathBuf {
    Path::new(DIR).join("initramfs.json")
}

/// Whether `root` holds an initramfs record (whatever its content).
pub fn initramfs_recorded(root: &HostRoot) -> bool {
    matches!(root.symlink_metadata(&initramfs_path()), Ok(Some(_)))
}

/// Record a due initramfs regeneration.
///
/// # Errors
/// Creating the directory or writing the record failed.
pub(in crate::host::seam) fn record_initramfs(root: &HostRoot) -> crate::host::root::Result<()> {
    write(
        root,
        &initramfs_path(),
        b"{\"action\":\"initramfs_update\"}\n",
    )
}
