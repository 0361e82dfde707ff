//! Block devices: `disk::list`, `disk::info`, `disk::fstype`, `disk::uuid` and the guarded
//! `fs::mkfs`.
//!
//! # Where the answers come from
//!
//! Everything is read under the host root, as lsblk(8) reads a host:
//!
//! - `/sys/class/block/<name>` (kernel `Documentation/ABI/testing/sysfs-block`; on a host
//!   each entry is a symlink into `/sys/devices/...`): `size` in 512-byte sectors, `dev`
//!   (`major:minor`), `partition` for a partition, `md/` for an md array (`md/level`,
//!   `md/array_state`, `slaves/`), `dm/` for device-mapper, `loop/` for a loop device;
//!   the model is `device/model` (a partition's is its disk's), the serial `device/serial`,
//!   else the udev database's `ID_SERIAL_SHORT`, else the NVMe namespace's `wwid`.
//! - `/dev/disk/by-id/*`: the symlinks (`../../nvme1n1`) that resolve to the device.
//! - the udev database `/run/udev/data/b<major>:<minor>` (`E:ID_FS_TYPE=`, `E:ID_FS_UUID=`)
//!   for the filesystem, when it names one; else the filesystem is probed with
//!   `lsblk --nodeps --noheadings -o FSTYPE <dev>`, else `blkid -p -o value -s TYPE <dev>`
//!   (util-linux; both chrooted queries, run in every mode; a program the root lacks is
//!   skipped), and the UUID with `blkid -s UUID -o value <dev>`. lsblk is asked first
//!   because it answers for exactly the device asked (`--nodeps`) from udev or a fresh probe,
//!   while `blkid` without `-p` answers from its cache.
//! - the host's mount table ([`crate::host::mounts::mount::table`]) for the mount points: a
//!   mount whose source resolves to the device, or whose `major:minor` is the device's (a
//!   root filesystem listed as `/dev/root`).
//!
//! A device argument is an absolute path under `/dev` (symlinks such as `/dev/md/kubernetes`
//! or `/dev/disk/by-id/...` are resolved inside the root); anything else is an error naming it.
//!
//! # What is written to
//!
//! `fs::mkfs` and `raid::create` (its members) write only to a device they checked first
//! (`block_node`, `in_use`): the path opened inside the root's `/dev` (a link that leaves
//! `/dev` is refused), a block device by `fstat`, and nothing using it: not mounted, no
//! partition of it mounted, no holder (md, dm), not refused `O_EXCL` by the kernel. The
//! device is the node's `st_rdev` under the name sysfs gives that `major:minor`, whatever
//! the node is called (a `mknod /dev/alias` of a disk is that disk). The mount table is the host's (`<root>/proc/1/mountinfo`, the host init's namespace): the
//! agent's own `/proc/self/mountinfo` is its pod's namespace, which lacks what the host
//! mounted in its own; the `O_EXCL` open covers mounts in any namespace and swap. `force`
//! overrides an existing filesystem only.
//!
//! # Plans
//!
//! In plan and check mode nothing is created, so a later call of the same session answers
//! from the session's planned changes: an array [`crate::host::mounts::raid::create`] planned
//! exists (and has no filesystem), and a device `fs::mkfs` planned has that filesystem.
//! These are read from the session's report, which holds one step's changes: in a package
//! dry run a later step does not see an array an earlier step planned.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::host::Host;
use crate::host::effects::effect::Effect;
use crate::host::effects::exec::{CommandOptions, Guard};
use crate::host::mounts::mount::MountError;
use crate::host::root::error::{HostError, Result};
use crate::host::root::normalize;

/// The block device directory of sysfs (a host path).
pub const SYS_BLOCK: &str = "/sys/class/block";
/// The persistent names by hardware id (a host path).
pub const BY_ID: &str = "/dev/disk/by-id";
/// The udev database (a host path): `b<major>:<minor>` per block device.
pub const UDEV_DATA: &str = "/run/udev/data";

/// One block device (`disk::list()`, `disk::info(dev)`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlockDevice {
    /// The kernel name (`nvme1n1`, `md127`).
    pub name: String,
    /// The device path: `/dev/<name>`, or for `disk::info` the path given resolved inside the root.
    pub path: String,
    /// `disk`, `part`, `md`, `dm`, `loop` or `rom`.
    pub kind: String,
    /// Size in bytes (sysfs `size` × 512); 0 when unknown.
    pub size: u64,
    /// The model (`Amazon EC2 NVMe Instance Storage`); empty when unknown.
    pub model: String,
    /// The serial number; empty when unknown.
    pub serial: String,
    /// The `/dev/disk/by-id/*` links that resolve to the device, sorted.
    pub by_id: Vec<String>,
    /// The filesystem type (`xfs`), empty when none.
    pub fstype: String,
    /// The filesystem UUID, empty when none.
    pub uuid: String,
    /// Where the device is mounted (the host's mount table), in table order.
    pub mountpoints: Vec<String>,
}

/// What `fs::mkfs` is asked for (`#{options, force}`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MkfsSpec {
    /// Arguments passed to `mkfs.<fstype>` before the device (`["-f", "-l", "su=8b"]`).
    pub options: Vec<String>,
    /// Make the filesystem also when another one is on the device.
    pub force: bool,
}

/// [`HostError::Invalid`], as the caller's error.
fn invalid<E: From<HostError>>(what: &'static str, message: String) -> E {
    E::from(HostError::Invalid { what, message })
}

/// A device argument: an absolute path under `/dev`, normalised, without whitespace.
///
/// # Errors
/// A relative path; a path not under `/dev`; whitespace or control characters.
pub fn device_arg(p: &str) -> Result<PathBuf> {
    let path = normalize(&crate::host::files::fs::host_path(p)?);
    if !path.starts_with("/dev") || path == Path::new("/dev") {
        return Err(invalid(
            "device",
            format!("{p:?} is not a device path under /dev"),
        ));
    }
    if p.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(
            "device",
            format!("{p:?} contains whitespace or control characters"),
        ));
    }
    Ok(path)
}

/// A sysfs attribute, trimmed; `None` when absent or unreadable (sysfs answers some reads
/// with an I/O error).
fn attr(h: &Host, path: &Path) -> Option<String> {
    let b = h.view_read(path).ok().flatten()?;
    Some(String::from_utf8_lossy(&b).trim().to_string())
}

fn exists(h: &Host, path: &Path) -> bool {
    h.view_stat(path, true).ok().flatten().is_some()
}

/// The `E:KEY=value` entries of a udev database record.
fn udev_record(h: &Host, dev: &str) -> BTreeMap<String, String> {
    let path = Path::new(UDEV_DATA).join(format!("b{dev}"));
    let Some(text) = attr(h, &path) else {
        return BTreeMap::new();
    };
    text.lines()
        .filter_map(|l| l.strip_prefix("E:")?.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Run a read-only query; `None` when the root has no such program.
fn query(h: &mut Host, argv: &[&str]) -> Result<Option<(i32, String)>> {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    let opts = CommandOptions {
        read_only: true,
        ..CommandOptions::default()
    };
    match crate::host::system::cmd::run(h, &argv, &opts) {
        Ok(o) => Ok(Some((o.code, o.stdout))),
        Err(HostError::ProgramNotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What the session has planned (plan and check mode): the summaries of its decided
/// commands, `raid <path> level <l> from [<devs>]` and `mkfs <fstype> on <path>`.
fn planned(h: &Host, prefix: &str) -> Vec<String> {
    h.planned_guarded_commands()
        .filter_map(|s| s.strip_prefix(prefix))
        .map(|rest| rest.split_once(": ").map_or(rest, |(w, _)| w).to_string())
        .collect()
}

/// The filesystem type a planned `fs::mkfs` of `dev` makes (the latest), in plan and check mode.
fn planned_fstype(h: &Host, dev: &Path) -> Option<String> {
    let want = dev.to_string_lossy();
    planned(h, "mkfs ").into_iter().rev().find_map(|rest| {
        let (fstype, on) = rest.split_once(" on ")?;
        let on = on.split(' ').next()?;
        (on == want).then(|| fstype.to_string())
    })
}

/// The level and members of a planned `raid::create` of `/dev/md/<name>` at `dev`.
pub(crate) fn planned_array(h: &Host, dev: &Path) -> Option<(String, Vec<String>)> {
    let want = format!("{} level ", dev.to_string_lossy());
    planned(h, "raid ").into_iter().rev().find_map(|rest| {
        let rest = rest.strip_prefix(&want)?;
        let (level, devs) = rest.split_once(" from [")?;
        let devs = devs.strip_suffix(']')?;
        Some((
            level.to_string(),
            devs.split(", ").map(String::from).collect(),
        ))
    })
}

/// The device at `dev` exists, on the host or in the session's plan.
pub(crate) fn device_exists(h: &Host, dev: &Path) -> bool {
    exists(h, dev) || planned_array(h, dev).is_some()
}

/// The session's view of the device at `dev`: resolved inside the root (symlinks followed),
/// `None` when absent. A device planned by `raid::create` resolves to itself.
fn resolve(h: &Host, dev: &Path) -> Result<Option<PathBuf>> {
    match h.view_canonical(dev)? {
        Some(p) => Ok(Some(p)),
        None if planned_array(h, dev).is_some() => Ok(Some(dev.to_path_buf())),
        None => Ok(None),
    }
}

/// The shared reads of one call: by-id links and mount points by resolved device path.
struct Known {
    by_id: BTreeMap<PathBuf, Vec<String>>,
    /// Per mount: the source resolved (`None` when it does not resolve, as `/dev/root`),
    /// its `major:minor`, the mount point.
    mounts: Vec<(Option<PathBuf>, String, String)>,
}

impl Known {
    fn read(h: &Host) -> Result<Known> {
        let mut by_id: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
        for (name, _) in h.view_list(Path::new(BY_ID))?.unwrap_or_default() {
            let link = Path::new(BY_ID).join(&name);
            if h.view_readlink(&link)?.is_none() {
                continue;
            }
            if let Some(target) = h.view_canonical(&link)? {
                by_id
                    .entry(target)
                    .or_default()
                    .push(link.to_string_lossy().into_owned());
            }
        }
        let table = crate::host::mounts::mount::table(h)?;
        // The table parsed without its third field: the lines it came from, in order.
        let text = match h.view_read(Path::new(crate::host::mounts::mount::MOUNTINFO))? {
            Some(b) => String::from_utf8_lossy(&b).into_owned(),
            None => String::new(),
        };
        let ids = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.split(' ').filter(|w| !w.is_empty()).nth(2).unwrap_or(""));
        let mut mounts = Vec::new();
        for (e, id) in table.into_iter().zip(ids) {
            let source = match e.source.starts_with("/dev/") {
                true => h.view_canonical(Path::new(&e.source))?,
                false => None,
            };
            mounts.push((
                source,
                id.to_string(),
                e.mount_point.to_string_lossy().into_owned(),
            ));
        }
        Ok(Known { by_id, mounts })
    }

    /// Where `dev` (resolved; sysfs `major:minor` `id`, empty when unknown) is mounted: a
    /// mount whose source resolves to it, or whose device number is its (a root filesystem
    /// shown as `/dev/root`).
    fn mountpoints(&self, dev: &Path, id: &str) -> Vec<String> {
        self.mounts
            .iter()
            .filter(|(d, i, _)| d.as_deref() == Some(dev) || (!id.is_empty() && i == id))
            .map(|(_, _, m)| m.clone())
            .collect()
    }
}

/// The kind of the device whose sysfs directory is `sys` (lsblk's TYPE, `md` for any array).
fn kind_of(h: &Host, name: &str, sys: &Path) -> &'static str {
    if exists(h, &sys.join("partition")) {
        "part"
    } else if exists(h, &sys.join("md")) {
        "md"
    } else if exists(h, &sys.join("dm")) {
        "dm"
    } else if exists(h, &sys.join("loop")) || name.starts_with("loop") {
        "loop"
    } else if name.starts_with("sr") {
        "rom"
    } else {
        "disk"
    }
}

/// The filesystem type and UUID of `dev`: planned, udev, lsblk, blkid (module docs).
fn probe(h: &mut Host, dev: &Path, udev: &BTreeMap<String, String>) -> Result<(String, String)> {
    if let Some(t) = planned_fstype(h, dev) {
        return Ok((t, String::new()));
    }
    if planned_array(h, dev).is_some() && !exists(h, dev) {
        return Ok((String::new(), String::new()));
    }
    let d = dev.to_string_lossy().into_owned();
    let fstype = match udev.get("ID_FS_TYPE").filter(|t| !t.is_empty()) {
        Some(t) => t.clone(),
        None => probe_fstype(h, &d)?,
    };
    if fstype.is_empty() {
        return Ok((fstype, String::new()));
    }
    let uuid = match udev.get("ID_FS_UUID").filter(|u| !u.is_empty()) {
        Some(u) => u.clone(),
        None => match query(h, &["blkid", "-s", "UUID", "-o", "value", &d])? {
            Some((0, out)) => out.trim().to_string(),
            _ => String::new(),
        },
    };
    Ok((fstype, uuid))
}

fn probe_fstype(h: &mut Host, dev: &str) -> Result<String> {
    if let Some((0, out)) = query(
        h,
        &["lsblk", "--nodeps", "--noheadings", "-o", "FSTYPE", dev],
    )? {
        return Ok(out.lines().next().unwrap_or("").trim().to_string());
    }
    Ok(
        match query(h, &["blkid", "-p", "-o", "value", "-s", "TYPE", dev])? {
            Some((0, out)) => out.lines().next().unwrap_or("").trim().to_string(),
            _ => String::new(),
        },
    )
}

/// The device `path` (resolved, `/dev/...`) with sysfs directory `/sys/class/block/<name>`
/// when the root has one.
fn describe(h: &mut Host, known: &Known, path: &Path, shown: String) -> Result<BlockDevice> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sys = Path::new(SYS_BLOCK).join(&name);
    let has_sys = exists(h, &sys);
    let (kind, size, dev) = if has_sys {
        let sectors = attr(h, &sys.join("size")).and_then(|s| s.parse::<u64>().ok());
        (
            kind_of(h, &name, &sys).to_string(),
            sectors.unwrap_or(0).saturating_mul(512),
            attr(h, &sys.join("dev")).unwrap_or_default(),
        )
    } else {
        let md = path.starts_with("/dev/md") || planned_array(h, Path::new(&shown)).is_some();
        (if md { "md" } else { "disk" }.to_string(), 0, String::new())
    };
    let udev = if dev.is_empty() {
        BTreeMap::new()
    } else {
        udev_record(h, &dev)
    };
    // A partition's model and serial are its disk's: the parent directory in /sys/devices.
    let hw = if kind == "part" {
        h.view_canonical(&sys)?
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| sys.clone())
    } else {
        sys.clone()
    };
    let model = attr(h, &hw.join("device/model")).unwrap_or_default();
    let serial = attr(h, &hw.join("device/serial"))
        .filter(|s| !s.is_empty())
        .or_else(|| udev.get("ID_SERIAL_SHORT").cloned())
        .or_else(|| attr(h, &hw.join("wwid")))
        .unwrap_or_default();
    let (fstype, uuid) = probe(h, path, &udev)?;
    Ok(BlockDevice {
        name,
        path: shown,
        kind,
        size,
        model,
        serial,
        by_id: known.by_id.get(path).cloned().unwrap_or_default(),
        fstype,
        uuid,
        mountpoints: known.mountpoints(path, &dev),
    })
}

/// `disk::list()`: every block device of `/sys/class/block` (sorted by name), each as
/// [`BlockDevice`] with path `/dev/<name>`. Empty when the root has no sysfs.
///
/// # Errors
/// Read failures of the directories; a malformed mount table; a probe that cannot run.
pub fn list(h: &mut Host) -> Result<Vec<BlockDevice>> {
    let names = h.view_list(Path::new(SYS_BLOCK))?.unwrap_or_default();
    let known = Known::read(h)?;
    let mut out = Vec::with_capacity(names.len());
    for (name, _) in names {
        let path = Path::new("/dev").join(&name);
        let shown = path.to_string_lossy().into_owned();
        out.push(describe(h, &known, &path, shown)?);
    }
    Ok(out)
}

host_fn! {
    /// Every block device of `/sys/class/block`, sorted by name: `#{name, path, kind, size, model,
    /// serial, by_id, fstype, uuid, mountpoints}` (`path` `/dev/<name>`; `kind` `disk`, `part`,
    /// `md`, `dm`, `loop` or `rom`; `size` in bytes; `by_id` the `/dev/disk/by-id/*` links to it;
    /// `fstype`/`uuid` `""` when none; `mountpoints` from the host's mount table). `[]` when the
    /// root has no sysfs.
    #[host(ns = "disk", effects = RunsReadOnly)]
    fn list(h: &mut Host) -> rhai::Dynamic as "Array" {
        Ok(Dynamic::from_array(
                super::list(h)?.into_iter().map(device_map).collect()
            ))
    }
}

/// `disk::info(dev)`: the device at `dev` (symlinks resolved inside the root) as
/// [`BlockDevice`] (path: the resolved path), `None` when nothing is there. A device without
/// a sysfs entry (a test root) has size 0 and kind `md` under `/dev/md`, else `disk`.
///
/// # Errors
/// A bad device path ([`device_arg`]); read failures; a probe that cannot run.
pub fn info(h: &mut Host, dev: &str) -> Result<Option<BlockDevice>> {
    let path = device_arg(dev)?;
    let Some(resolved) = resolve(h, &path)? else {
        return Ok(None);
    };
    let known = Known::read(h)?;
    let shown = resolved.to_string_lossy().into_owned();
    describe(h, &known, &resolved, shown).map(Some)
}

host_fn! {
    /// The map of `disk::list` for the device at `dev` (symlinks such as `/dev/md/kubernetes` or
    /// `/dev/disk/by-id/...` resolved inside the root; `path` is the resolved path), or `()` when
    /// nothing is there. Without a sysfs entry `size` is 0 and `kind` `md` under `/dev/md`, else
    /// `disk`. A path outside `/dev` is an error.
    #[host(ns = "disk", effects = RunsReadOnly)]
    fn info(h: &mut Host, dev: S) -> rhai::Dynamic {
        Ok(super::info(h, &dev)?.map_or(Dynamic::UNIT, device_map))
    }
}

/// `disk::fstype(dev)`: the filesystem type on `dev` (`xfs`), empty when none.
///
/// # Errors
/// A bad device path; `dev` does not exist (named); a probe that cannot run.
pub fn fstype(h: &mut Host, dev: &str) -> Result<String> {
    let path = device_arg(dev)?;
    let resolved = resolve(h, &path)?.ok_or(HostError::NotFound { path: path.clone() })?;
    let udev = udev_of(h, &resolved);
    Ok(probe(h, &resolved, &udev)?.0)
}

host_fn! {
    /// The filesystem type on `dev` (`"xfs"`), `""` when none: the udev database, else `lsblk`,
    /// else `blkid -p`; in a plan, the type a planned `fs::mkfs` makes. A missing device is an
    /// error.
    #[host(ns = "disk", effects = RunsReadOnly)]
    fn fstype(h: &mut Host, dev: S) -> String {
        Ok(super::fstype(h, &dev)?)
    }
}

/// `disk::uuid(dev)`: the UUID of the filesystem on `dev`, empty when none (or planned).
///
/// # Errors
/// As [`fstype`].
pub fn uuid(h: &mut Host, dev: &str) -> Result<String> {
    let path = device_arg(dev)?;
    let resolved = resolve(h, &path)?.ok_or(HostError::NotFound { path: path.clone() })?;
    let udev = udev_of(h, &resolved);
    Ok(probe(h, &resolved, &udev)?.1)
}

host_fn! {
    /// The UUID of the filesystem on `dev` (for `UUID=...` in fstab or a mount unit), `""` when
    /// none or only planned: the udev database, else `blkid -s UUID -o value <dev>`. A missing
    /// device is an error.
    #[host(ns = "disk", effects = RunsReadOnly)]
    fn uuid(h: &mut Host, dev: S) -> String {
        Ok(super::uuid(h, &dev)?)
    }
}

/// The udev record of the resolved device `dev` (through its sysfs `dev`), empty when none.
fn udev_of(h: &Host, dev: &Path) -> BTreeMap<String, String> {
    match sys_dev(h, dev) {
        Some(d) => udev_record(h, &d),
        None => BTreeMap::new(),
    }
}

/// The sysfs `major:minor` of the resolved device `dev`.
fn sys_dev(h: &Host, dev: &Path) -> Option<String> {
    attr(h, &Path::new(SYS_BLOCK).join(dev.file_name()?).join("dev"))
}

/// The device node at `dev` (a [`device_arg`] path), opened `O_PATH` inside the root's
/// `/dev`: `/dev` through the root (confined), then the rest of the path beneath it
/// (`openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`), so `/dev/disk/by-id/x ->
/// ../../nvme1n1` and `/dev/md/x -> ../md127` resolve while a link that leaves `/dev`
/// (`/dev/sdx -> /var/lib/disk.img`) does not. It must be a block device (`fstat`).
///
/// # Errors
/// [`HostError::Invalid`] naming `shown` (the path as given): it leads out of `/dev`, does
/// not exist, is not a block device (naming what it is); other open failures.
pub(crate) fn block_node(h: &Host, dev: &Path, shown: &str) -> Result<std::fs::File, MountError> {
    use std::os::unix::fs::FileTypeExt;
    let rel = dev.strip_prefix("/dev").unwrap_or(dev);
    let dir = h.root().open_read(Path::new("/dev"))?;
    let node = match crate::host::root::open_beneath_at(dir, rel, libc::O_PATH) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            return Err(invalid(
                "device",
                format!("{shown} leads out of /dev (a symlink to outside it)"),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(invalid("device", format!("{shown} does not exist")));
        }
        Err(source) => {
            return Err(MountError::Device {
                path: h.root().display_path(dev),
                source,
            });
        }
    };
    let ft = node
        .metadata()
        .map_err(|source| MountError::Device {
            path: h.root().display_path(dev),
            source,
        })?
        .file_type();
    if !ft.is_block_device() {
        let what = match ft.is_file() {
            true => "a regular file",
            false => crate::host::root::kind_name(ft),
        };
        return Err(invalid(
            "device",
            format!("{shown} is not a block device ({what})"),
        ));
    }
    Ok(node)
}

/// Why the block device `node` (at the resolved path `dev`) must not be written, or `None`
/// when nothing uses it: it is mounted, one of its partitions (`/sys/class/block/<dev>/<p>`
/// with a `partition` file) is mounted, a holder of it or of a partition
/// (`/sys/class/block/<x>/holders/*`: an md array, a device-mapper device) exists, or the
/// kernel refuses it exclusive access (`open(O_EXCL)` is `EBUSY`: mounted in any mount
/// namespace, swap, claimed by md/dm). Mounts are the host's mount table
/// (`<root>/proc/1/mountinfo`, the host init's namespace, [`crate::host::mounts::mount::table`]):
/// in the agent's pod its own `/proc/self/mountinfo` is the pod's namespace, which lacks
/// mounts the host made in its own. A fake node (no such device: `ENXIO`) or no right to
/// open it gives no answer from the kernel.
///
/// The answer reads like `is mounted at /data`, `has partition /dev/sdb1 mounted at /data`,
/// `is held by /dev/md127`.
///
/// # Errors
/// A malformed mount table; read failures.
pub(crate) fn in_use(
    h: &Host,
    dev: &Path,
    node: &std::fs::File,
) -> Result<Option<String>, MountError> {
    let known = Known::read(h)?;
    let given = dev
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The device is the node's `major:minor`, not its name: a node made under another name
    // (`mknod /dev/alias b 259 0`) is looked up by the kernel's name for that number.
    let (name, id) = match kernel_device(h, dev, node)? {
        Some(found) => found,
        None => (given.clone(), sys_dev(h, dev).unwrap_or_default()),
    };
    let mut at = known.mountpoints(dev, &id);
    if name != given {
        for m in known.mountpoints(&Path::new("/dev").join(&name), &id) {
            if !at.contains(&m) {
                at.push(m);
            }
        }
    }
    if !at.is_empty() {
        return Ok(Some(format!("is mounted at {}", at.join(", "))));
    }
    let sys = Path::new(SYS_BLOCK).join(&name);
    let holders = |h: &Host, sys: &Path| -> Result<Vec<String>> {
        let mut names: Vec<String> = h
            .view_list(&sys.join("holders"))?
            .unwrap_or_default()
            .into_iter()
            .map(|(n, _)| format!("/dev/{n}"))
            .collect();
        names.sort();
        Ok(names)
    };
    let mut parts: Vec<String> = h
        .view_list(&sys)?
        .unwrap_or_default()
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| exists(h, &sys.join(n).join("partition")))
        .collect();
    parts.sort();
    for p in &parts {
        let id = attr(h, &sys.join(p).join("dev")).unwrap_or_default();
        let at = known.mountpoints(&Path::new("/dev").join(p), &id);
        if !at.is_empty() {
            return Ok(Some(format!(
                "has partition /dev/{p} mounted at {}",
                at.join(", ")
            )));
        }
        if let Some(holder) = holders(h, &sys.join(p))?.first() {
            return Ok(Some(format!("has partition /dev/{p} held by {holder}")));
        }
    }
    if let Some(holder) = holders(h, &sys)?.first() {
        return Ok(Some(format!("is held by {holder}")));
    }
    if exclusive_busy(node) {
        return Ok(Some(
            "is in use (the kernel refuses exclusive access: mounted, swap, or held by md/dm)"
                .into(),
        ));
    }
    Ok(None)
}

/// The kernel's name and `major:minor` of the block device at `dev` open as `node` (its `st_rdev`),
/// from the sysfs entry `/sys/class/block/<name>` whose `dev` is that number; `None` when
/// no entry has it (no such device: opening it is `ENXIO`).
///
/// # Errors
/// `node` cannot be `fstat`ed; sysfs cannot be listed.
fn kernel_device(
    h: &Host,
    dev: &Path,
    node: &std::fs::File,
) -> Result<Option<(String, String)>, MountError> {
    use std::os::unix::fs::MetadataExt;
    let rdev = node
        .metadata()
        .map_err(|source| MountError::Device {
            path: h.root().display_path(dev),
            source,
        })?
        .rdev();
    let id = format!("{}:{}", libc::major(rdev), libc::minor(rdev));
    let sys = Path::new(SYS_BLOCK);
    for (n, _) in h.view_list(sys)?.unwrap_or_default() {
        if attr(h, &sys.join(&n).join("dev")).as_deref() == Some(id.as_str()) {
            return Ok(Some((n, id)));
        }
    }
    Ok(None)
}

/// True when the kernel refuses the block device `node` exclusive access (`open(2)` of it
/// with `O_EXCL`, through `/proc/self/fd`, fails with `EBUSY`); the open is closed at once.
fn exclusive_busy(node: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let fd = format!("/proc/self/fd/{}", node.as_raw_fd());
    let r = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(fd);
    matches!(r, Err(e) if e.raw_os_error() == Some(libc::EBUSY))
}

/// `fs::mkfs(dev, fstype, #{options, force})`: make a `fstype` filesystem on `dev` unless
/// it already has one: the same type there → unchanged (false); another type → an error
/// naming both, unless `force` (then `options` must hold the tool's own overwrite flag,
/// `-f` for `mkfs.xfs`, `-F` for `mkfs.ext4`); none → `mkfs.<fstype> <options...> <dev>`
/// (true). A change: run in apply, recorded in plan (`mkfs xfs on /dev/md/x: mkfs.xfs ...`),
/// drift in a check; a command, so not undone by the journal.
///
/// Before anything else `dev` must be a block device inside the root's `/dev` that nothing
/// uses: not mounted, no partition of it mounted, no md/dm holder, not refused exclusive
/// access by the kernel (`in_use`). `force` never overrides that, only an existing
/// filesystem.
///
/// # Errors
/// A bad device path; a fstype other than letters, digits and `_`; `dev` does not exist,
/// leads out of `/dev` or is not a block device; `dev` in use (named: the partition and
/// its mount point, the holder); another filesystem without `force`; `mkfs.<fstype>`
/// failing (apply).
pub fn mkfs(h: &mut Host, dev: &str, fs_type: &str, spec: &MkfsSpec) -> Result<bool, MountError> {
    let path = device_arg(dev)?;
    if fs_type.is_empty()
        || !fs_type
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(invalid(
            "filesystem type",
            format!("{fs_type:?} (letters, digits and _ only, e.g. \"xfs\")"),
        ));
    }
    let Some(resolved) = resolve(h, &path)? else {
        return Err(invalid(
            "device",
            format!("{} does not exist", path.display()),
        ));
    };
    // A device only planned (an array of this plan) has no node yet: nothing uses it.
    if exists(h, &path) {
        let node = block_node(h, &path, dev)?;
        if let Some(why) = in_use(h, &resolved, &node)? {
            return Err(invalid(
                "device",
                format!(
                    "{} {why} (a filesystem is never made on a device in use, not even with force)",
                    path.display()
                ),
            ));
        }
    }
    let udev = udev_of(h, &resolved);
    let (current, _) = probe(h, &resolved, &udev)?;
    if current == fs_type {
        h.note_unchanged();
        return Ok(false);
    }
    if !current.is_empty() && !spec.force {
        return Err(invalid(
            "device",
            format!(
                "{} already has a filesystem: {current}, not {fs_type} (force: true replaces it)",
                path.display()
            ),
        ));
    }
    // The resolved path, by which a later call of a plan finds it (`planned_fstype`).
    let mut what = format!("mkfs {fs_type} on {}", resolved.display());
    if !current.is_empty() {
        what.push_str(&format!(" (replacing {current})"));
    }
    let mut argv = vec![format!("mkfs.{fs_type}")];
    argv.extend(spec.options.iter().cloned());
    argv.push(path.to_string_lossy().into_owned());
    h.submit(Effect::GuardedCommand {
        argv,
        opts: CommandOptions {
            check: true,
            guards: vec![Guard::Decided(what)],
            ..CommandOptions::default()
        },
    })?;
    Ok(true)
}

host_fn! {
    /// Make a `fstype` filesystem on `dev`, guarded: the same type already there: unchanged;
    /// another filesystem there: an error naming both unless `force: true` (then `options` carries
    /// the tool's own overwrite flag, `-f` for xfs); none: `mkfs.<fstype> <options...> <dev>` (a
    /// change, `mkfs xfs on /dev/...` in the plan, drift in a check; a command, not undone). `dev`
    /// must be a block device inside the root's `/dev` (a link out of `/dev` or to a regular file
    /// is an error naming it) that nothing uses: mounted, a partition of it mounted (the host's
    /// mount table), held by an md/dm device (`/sys/class/block/<dev>/holders`), or refused
    /// exclusive access by the kernel (`O_EXCL`: swap, a mount in any namespace) is an error naming
    /// the partition and its mount point or the holder; `force` never overrides that, only another
    /// filesystem. A missing device is an error.
    #[host(ns = "fs", effects = [GuardedCommand], options = MKFS_KEYS)]
    fn mkfs(h: &mut Host, dev: S, fstype: S, opts: Map) -> bool {
        let spec = mkfs_spec(&opts)?;
        Ok(super::mkfs(h, &dev, &fstype, &spec)?)
    }

    /// `fs::mkfs(dev, fstype, #{})`: no options, never over another filesystem.
    #[overload]
    fn mkfs_without_opts(h: &mut Host, dev: S, fstype: S) -> bool {
        Ok(super::mkfs(h, &dev, &fstype, &MkfsSpec::default())?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert::{self, check_keys};
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Dynamic, ImmutableString as S, Map};
}
use prelude::*;

/// The option keys of `fs::mkfs`.
const MKFS_KEYS: &[&str] = &["options", "force"];

fn device_map(d: BlockDevice) -> Dynamic {
    let mut m = Map::new();
    m.insert("name".into(), convert::s(d.name));
    m.insert("path".into(), convert::s(d.path));
    m.insert("kind".into(), convert::s(d.kind));
    m.insert(
        "size".into(),
        Dynamic::from(i64::try_from(d.size).unwrap_or(i64::MAX)),
    );
    m.insert("model".into(), convert::s(d.model));
    m.insert("serial".into(), convert::s(d.serial));
    m.insert("by_id".into(), Dynamic::from_array(convert::array(d.by_id)));
    m.insert("fstype".into(), convert::s(d.fstype));
    m.insert("uuid".into(), convert::s(d.uuid));
    m.insert(
        "mountpoints".into(),
        Dynamic::from_array(convert::array(d.mountpoints)),
    );
    Dynamic::from_map(m)
}

/// `#{options, force}`: `options` an array of strings (or one string, one argument).
fn mkfs_spec(m: &Map) -> Result<MkfsSpec, String> {
    check_keys(m, MKFS_KEYS)?;
    let options = match m.get("options") {
        None => Vec::new(),
        Some(d) if d.is_unit() => Vec::new(),
        Some(d) => convert::string_or_array(d, "option options")?,
    };
    Ok(MkfsSpec {
        options,
        force: convert::opt_bool(m, "force", false)?,
    })
}

host_fns!(list, info, fstype, uuid, mkfs);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_paths_must_be_under_dev() {
        assert_eq!(
            device_arg("/dev/md/../nvme1n1").unwrap(),
            PathBuf::from("/dev/nvme1n1")
        );
        for bad in ["/etc/passwd", "/dev", "/dev/../etc/x", "/devices/x"] {
            let e = device_arg(bad).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("invalid device: {bad:?} is not a device path under /dev")
            );
        }
        assert!(matches!(
            device_arg("dev/sda"),
            Err(HostError::RelativePath { .. })
        ));
        assert_eq!(
            device_arg("/dev/a b").unwrap_err().to_string(),
            "invalid device: \"/dev/a b\" contains whitespace or control characters"
        );
    }
}
