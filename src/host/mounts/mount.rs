//! Filesystems: `mount::` — `/etc/fstab` entries and the host's live mount table.
//!
//! # `/etc/fstab`
//!
//! [`ensure`] keeps exactly ONE fstab(5) line per mount point:
//! `<source> <mount point> <fstype> <options> <dump> <pass>` (single spaces; spaces, tabs,
//! newlines and backslashes in a field written as the octal escapes `\040`, `\011`, `\012`,
//! `\134`). A line of the mount point with other fields is replaced in place (further ones
//! are dropped); every other line, comments and spacing included, is kept byte for byte. A
//! line is compared field by field, so a hand-written line with other spacing, or without
//! the optional dump/pass fields when they are 0, is already in the desired state. The
//! source is written as given (`UUID=...`, `LABEL=...`, `PARTUUID=...`, `/dev/...`,
//! `server:/export`).
//!
//! # The live mount table
//!
//! Mount state is read from `/proc/1/mountinfo` under the host root: the mount namespace of
//! the host's init, not the agent's own (a pod has its own mount namespace). Its format is
//! proc(5)'s `mountinfo`: `id parent major:minor root mount-point options [optional...] -
//! fstype source super-options`, with the same octal escapes. A root without that file
//! (a test or `skyhook-run` root) reads as "nothing mounted". The mount at a path is the
//! last (topmost) entry for it.
//!
//! In plan and check mode a planned `mount`/`umount` is recorded in the session's overlay,
//! so a later [`is_mounted`] in the same session answers as after an apply ([`info`] then
//! shows the planned fstab fields).
//!
//! # Commands
//!
//! Mounting runs `mount <path>`, remounting `mount -o remount <path>` and unmounting
//! `umount <path>` through the command primitive, in the host's mount namespace: when
//! `<root>/proc/1/ns/mnt` names a mount namespace other than the agent's (the agent in a pod
//! with `hostPID` and the host's `/` at its root) and `<root>/proc/1` is the host's init (its
//! root directory, and its namespace's own `/`, are the host root), the command enters it (`setns`, as `nsenter -m -t 1`)
//! and runs there unchrooted, its `/` being the host's; otherwise (no such file, the agent's
//! own namespace, or a `/proc/1` whose root is another tree) it runs chrooted into the host
//! root. Either way the mount point is resolved inside the root. Either way
//! `mount` reads the host's `/etc/fstab` and the mount is the host's, whatever the
//! propagation of the agent's root mount ([`crate::host::root::mount_ns`]).

use std::path::{Path, PathBuf};

use crate::host::Host;
use crate::host::effects::effect::{Effect, MountOp};
use crate::host::root::error::{HostError, Result};

/// A failure of `mount::ensure` of its own; everything else is the session's [`HostError`].
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// What the session failed with.
    #[error(transparent)]
    Host(#[from] HostError),

    /// `mount::ensure` with state `mounted` found the mount point mounted from another
    /// source or with another filesystem type.
    #[error(
        "{} is mounted from {found}, not {wanted}: unmount it first (mount::remove) or change the source",
        path.display()
    )]
    Conflict {
        /// The mount point.
        path: std::path::PathBuf,
        /// The live mount (`/proc/1/mountinfo`): `<source> (<fstype>)`.
        found: String,
        /// What was asked for: `<source> (<fstype>)`.
        wanted: String,
    },

    /// A block device node under the host root's `/dev` (`disk::mkfs`, `raid::create`)
    /// could not be opened or `fstat`ed (other than not existing or leading out of `/dev`).
    #[error("failed to read {}", path.display())]
    Device {
        /// The device's host path.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl crate::host::api::AreaError for MountError {
    /// The live mounts are the host's state.
    fn depends_on_host(&self) -> bool {
        match self {
            MountError::Host(e) => e.depends_on_host(),
            MountError::Conflict { .. } => true,
            // As the former `HostError::AgentFile` it was.
            MountError::Device { .. } => false,
        }
    }
}
crate::host::api::area_error!(MountError);
use crate::host::root::normalize;

/// The host's fstab (a host path).
pub const FSTAB: &str = "/etc/fstab";
/// The mount table of the host's init (a host path).
pub const MOUNTINFO: &str = "/proc/1/mountinfo";

/// Desired state of [`ensure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MountState {
    /// The fstab line is present and the filesystem mounted (the default).
    #[default]
    Mounted,
    /// Only the fstab line (and the mount point directory); the live state is not touched.
    Present,
}

/// What [`ensure`] is asked for (`#{source, fstype, options, state, dump, pass}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    /// The device or remote filesystem, as fstab takes it (`UUID=...`, `/dev/nvme1n1`).
    pub source: String,
    /// Filesystem type (`ext4`, `xfs`, `nfs`, `auto`).
    pub fstype: String,
    /// Mount options, comma-separated (default `defaults`).
    pub options: String,
    /// fstab's fifth field (dump frequency, default 0).
    pub dump: u32,
    /// fstab's sixth field (fsck pass, default 0).
    pub pass: u32,
    /// Desired state.
    pub state: MountState,
}

/// One mounted filesystem (a line of `/proc/1/mountinfo`, escapes decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// The mount point (host path).
    pub mount_point: PathBuf,
    /// The mounted source (`/dev/nvme1n1`, `tmpfs`, `server:/export`).
    pub source: String,
    /// Filesystem type.
    pub fstype: String,
    /// Per-mount options (`rw,relatime`).
    pub options: String,
    /// Per-superblock options (`rw,errors=remount-ro`).
    pub super_options: String,
    /// The root of the mount within its filesystem (`/` unless a bind mount of a subtree).
    pub root: String,
}

/// Decode proc(5)/fstab(5) octal escapes (`\040` → space); anything else stays as is
/// ([`crate::process::cgroup::unescape_octal`], then UTF-8, lossily).
pub fn unescape(s: &str) -> String {
    String::from_utf8_lossy(&crate::process::cgroup::unescape_octal(s)).into_owned()
}

/// Encode a field for fstab: space, tab, newline and backslash as octal escapes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            ' ' => out.push_str("\\040"),
            '\t' => out.push_str("\\011"),
            '\n' => out.push_str("\\012"),
            '\\' => out.push_str("\\134"),
            c => out.push(c),
        }
    }
    out
}

/// Parse `/proc/<pid>/mountinfo` text (proc(5)).
///
/// # Errors
/// A line with fewer than six fields before the `-` separator, or fewer than three after it:
/// `line <n>: <what>`.
pub fn parse_mountinfo(text: &str) -> std::result::Result<Vec<MountEntry>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(' ').filter(|w| !w.is_empty()).collect();
        let sep = f.iter().skip(6).position(|w| *w == "-").map(|p| p + 6);
        let Some(sep) = sep.filter(|&s| f.len() >= s + 3) else {
            return Err(format!(
                "line {}: expected `id parent major:minor root mount-point options [optional...] - fstype source super-options`, got {line:?}",
                i + 1
            ));
        };
        out.push(MountEntry {
            root: unescape(f[3]),
            mount_point: normalize(Path::new(&unescape(f[4]))),
            options: f[5].to_string(),
            fstype: unescape(f[sep + 1]),
            source: unescape(f[sep + 2]),
            super_options: f.get(sep + 3).map_or(String::new(), |s| s.to_string()),
        });
    }
    Ok(out)
}

/// The host's live mount table ([`MOUNTINFO`] under the root; empty when absent).
///
/// # Errors
/// Read failures; a malformed table.
pub fn table(h: &Host) -> Result<Vec<MountEntry>> {
    let Some(b) = h.view_read(Path::new(MOUNTINFO))? else {
        return Ok(Vec::new());
    };
    parse_mountinfo(&String::from_utf8_lossy(&b)).map_err(|m| HostError::Invalid {
        what: "mount table /proc/1/mountinfo",
        message: m,
    })
}

/// A path argument of a query: absolute, normalised.
fn query_point(p: &str) -> Result<PathBuf> {
    Ok(normalize(&crate::host::files::fs::host_path(p)?))
}

/// The mount point argument of a mutation: absolute, normalised, not `/`.
fn mount_point(p: &str) -> Result<PathBuf> {
    let path = query_point(p)?;
    if path == Path::new("/") {
        return Err(HostError::Invalid {
            what: "mount point",
            message: "/ cannot be managed".into(),
        });
    }
    Ok(path)
}

/// The fstab fields of a line (comments and blank lines: `None`).
fn fstab_fields(line: &str) -> Option<Vec<&str>> {
    let t = line.trim_start();
    if t.is_empty() || t.starts_with('#') {
        return None;
    }
    Some(t.split_whitespace().collect())
}

/// The line is an fstab entry for mount point `path`.
fn is_entry_for(line: &str, path: &Path) -> bool {
    fstab_fields(line)
        .and_then(|f| f.get(1).map(|m| normalize(Path::new(&unescape(m))) == path))
        .unwrap_or(false)
}

/// The fields of `line` with dump and pass defaulted to 0, for comparison.
fn normalized_fields(line: &str) -> Vec<String> {
    let mut f: Vec<String> = fstab_fields(line)
        .unwrap_or_default()
        .into_iter()
        .map(String::from)
        .collect();
    while f.len() < 6 {
        f.push("0".into());
    }
    // The mount point compares as a path (`/data/` is `/data`).
    f[1] = escape(&normalize(Path::new(&unescape(&f[1]))).to_string_lossy());
    f
}

/// The fstab line for `path` and `spec`.
pub fn render_line(path: &Path, spec: &MountSpec) -> String {
    format!(
        "{} {} {} {} {} {}",
        escape(&spec.source),
        escape(&path.to_string_lossy()),
        spec.fstype,
        spec.options,
        spec.dump,
        spec.pass
    )
}

/// `text` with exactly one entry for `path`, equal to `line` (`None`: `line` removes
/// them), every other line kept byte for byte. `None` when nothing changes.
fn edit_fstab(text: &str, path: &Path, line: Option<&str>) -> Option<String> {
    let mut out = String::with_capacity(text.len() + 80);
    let mut seen = false;
    let mut changed = false;
    for l in text.split_inclusive('\n') {
        let body = l.strip_suffix('\n').unwrap_or(l);
        if !is_entry_for(body, path) {
            out.push_str(l);
            continue;
        }
        match line {
            Some(want) if !seen => {
                seen = true;
                if normalized_fields(body) == normalized_fields(want) {
                    out.push_str(l);
                } else {
                    out.push_str(want);
                    out.push('\n');
                    changed = true;
                }
            }
            _ => changed = true,
        }
    }
    if let (Some(want), false) = (line, seen) {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(want);
        out.push('\n');
        changed = true;
    }
    changed.then_some(out)
}

/// Rewrite `/etc/fstab` for `path` ([`edit_fstab`]) under its lock; whether it changed.
fn update_fstab(h: &mut Host, path: &Path, line: Option<&str>) -> Result<bool> {
    let fstab = Path::new(FSTAB);
    crate::host::files::fs::edit_with(
        h,
        fstab,
        |h| {
            let cur = match h.view_read(fstab)? {
                Some(b) => String::from_utf8(b).map_err(|_| HostError::NotText {
                    path: fstab.to_path_buf(),
                })?,
                None if line.is_none() => return Ok(None),
                None => String::new(),
            };
            Ok(edit_fstab(&cur, path, line).map(String::into_bytes))
        },
        |_| Ok(()),
    )
}

/// The fstab entry for `path` as the session sees it (source, fstype, options).
fn fstab_entry(h: &Host, path: &Path) -> Result<Option<(String, String, String)>> {
    let Some(b) = h.view_read(Path::new(FSTAB))? else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&b);
    Ok(text.lines().find(|l| is_entry_for(l, path)).map(|l| {
        let f = normalized_fields(l);
        (unescape(&f[0]), f[2].clone(), f[3].clone())
    }))
}

/// The filesystem mounted at `path` (already normalised), as the session sees it: in plan
/// and check mode a planned mount or unmount answers first.
fn current(h: &Host, path: &Path) -> Result<Option<MountEntry>> {
    if let Some(mounted) = h.planned_mount(path) {
        if !mounted {
            return Ok(None);
        }
        let (source, fstype, options) = fstab_entry(h, path)?.unwrap_or_default();
        return Ok(Some(MountEntry {
            mount_point: path.to_path_buf(),
            source,
            fstype,
            options,
            super_options: String::new(),
            root: "/".into(),
        }));
    }
    Ok(table(h)?.into_iter().rev().find(|e| e.mount_point == path))
}

/// The device path a fstab source designates (`UUID=x` → `/dev/disk/by-uuid/x`, ...),
/// `None` for a source that is not a device (`tmpfs`, `server:/export`).
fn device_path(source: &str) -> Option<PathBuf> {
    for (tag, dir) in [
        ("UUID=", "by-uuid"),
        ("LABEL=", "by-label"),
        ("PARTUUID=", "by-partuuid"),
        ("PARTLABEL=", "by-partlabel"),
    ] {
        if let Some(v) = source.strip_prefix(tag) {
            return Some(Path::new("/dev/disk").join(dir).join(v.trim_matches('"')));
        }
    }
    source.starts_with('/').then(|| PathBuf::from(source))
}

/// Whether the live `have` source is the fstab `want` source. A device source is compared
/// by the device it resolves to under the root (symlinks of `/dev/disk/by-*` followed);
/// when either side does not resolve the answer cannot be told and is `true`. Other sources
/// compare as strings.
fn same_source(h: &Host, want: &str, have: &str) -> Result<bool> {
    if want == have {
        return Ok(true);
    }
    let Some(w) = device_path(want) else {
        return Ok(false);
    };
    let wc = h.view_canonical(&w)?;
    let hc = match have.starts_with('/') {
        true => h.view_canonical(Path::new(have))?,
        false => None,
    };
    Ok(match (wc, hc) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    })
}

fn same_fstype(want: &str, have: &str) -> bool {
    want == "auto" || want == have || (want == "nfs" && have == "nfs4")
}

fn check_field(what: &'static str, v: &str, spaces: bool) -> Result<()> {
    let bad = v.is_empty()
        || v.contains(['\n', '\r', '\0'])
        || (!spaces && v.contains(char::is_whitespace));
    if bad {
        return Err(HostError::Invalid {
            what,
            message: format!("{v:?}"),
        });
    }
    Ok(())
}

/// `mount::ensure(path, #{source, fstype, options, state, dump, pass})`: keep exactly one
/// `/etc/fstab` line for mount point `path` (module docs), create the mount point directory
/// (mode 0755) when missing and, for state `mounted`:
///
/// - not mounted: `mount <path>` (a change);
/// - mounted from the same source and fstype: when the fstab line changed in this call,
///   `mount -o remount <path>` so the new options apply (a change); else nothing;
/// - mounted from another source or fstype: [`MountError::Conflict`], before anything
///   is changed (the filesystem is never unmounted implicitly).
///
/// Returns whether anything changed. Apply performs; plan records the fstab diff, the
/// directory and the command (and a later [`is_mounted`] sees the planned mount); check
/// reports each as drift (an unmounted filesystem is drift).
///
/// # Errors
/// Relative path or `/`; an empty source/fstype/options, a source starting with `#`,
/// whitespace in fstype or options, a line break anywhere; fstype `swap` (not supported); a non-directory at `path`; a
/// malformed mount table; [`MountError::Conflict`]; fstab not UTF-8; `mount` failing
/// (apply).
pub fn ensure(h: &mut Host, p: &str, spec: &MountSpec) -> Result<bool, MountError> {
    let path = mount_point(p)?;
    check_field("mount source", &spec.source, true)?;
    if spec.source.starts_with('#') {
        return Err(HostError::Invalid {
            what: "mount source",
            message: format!(
                "{:?} (a source starting with # would make the fstab line a comment)",
                spec.source
            ),
        }
        .into());
    }
    check_field("filesystem type", &spec.fstype, false)?;
    check_field("mount options", &spec.options, false)?;
    if spec.fstype == "swap" {
        return Err(HostError::Invalid {
            what: "filesystem type",
            message: "swap is not supported by mount::ensure".into(),
        }
        .into());
    }
    let live = match spec.state {
        MountState::Mounted => current(h, &path)?,
        MountState::Present => None,
    };
    if let Some(e) = &live
        && !(same_fstype(&spec.fstype, &e.fstype) && same_source(h, &spec.source, &e.source)?)
    {
        return Err(MountError::Conflict {
            path,
            found: format!("{} ({})", e.source, e.fstype),
            wanted: format!("{} ({})", spec.source, spec.fstype),
        });
    }
    let line = render_line(&path, spec);
    let fstab_changed = update_fstab(h, &path, Some(&line))?;
    let dir_changed = crate::host::files::fs::mkdir(h, &path.to_string_lossy(), None)?;
    let op = match (spec.state, &live) {
        (MountState::Present, _) => None,
        (MountState::Mounted, None) => Some(MountOp::Mount),
        (MountState::Mounted, Some(_)) if fstab_changed => Some(MountOp::Remount),
        (MountState::Mounted, Some(_)) => None,
    };
    if let Some(op) = op {
        h.submit(Effect::Mount {
            path: path.clone(),
            op,
        })?;
    } else if spec.state == MountState::Mounted {
        h.note_unchanged();
    }
    Ok(fstab_changed || dir_changed || op.is_some())
}

host_fn! {
    /// Keep exactly one `/etc/fstab` line `<source> <path> <fstype> <options> <dump> <pass>` for
    /// mount point `path` (`#{source, fstype}` required; `options` a string or an array, default
    /// `defaults`; `dump`/`pass` default 0 0; `source` as given: `UUID=...`, `LABEL=...`,
    /// `/dev/...`), replacing another line for it in place and keeping every other line byte for
    /// byte; create the mount point (0755). With `state: "mounted"` (default) run `mount <path>`
    /// when the host's mount table (`/proc/1/mountinfo`) does not list it, or `mount -o remount
    /// <path>` when it is mounted and the fstab line changed; mounted from another source or fstype
    /// is an error (nothing changed). `state: "present"`: fstab and directory only. An unmounted
    /// filesystem is drift.
    #[host(ns = "mount", effects = [Write, Mkdir, Mount], options = MOUNT_KEYS)]
    fn ensure(h: &mut Host, path: S, opts: Map) -> bool {
        let spec = mount_spec(&opts)?;
        Ok(super::ensure(h, &path, &spec)?)
    }
}

/// `mount::remove(path)`: `umount <path>` when mounted, then remove the `/etc/fstab` lines
/// of the mount point (the directory stays). Returns whether anything changed; plan and
/// check record (and a later [`is_mounted`] sees the planned unmount), check reports drift.
///
/// # Errors
/// Relative path or `/`; a malformed mount table; fstab not UTF-8; `umount` failing
/// (apply; the fstab line is then kept).
pub fn remove(h: &mut Host, p: &str) -> Result<bool> {
    let path = mount_point(p)?;
    let unmount = current(h, &path)?.is_some();
    if unmount {
        h.submit(Effect::Mount {
            path: path.clone(),
            op: MountOp::Unmount,
        })?;
    }
    let fstab_changed = update_fstab(h, &path, None)?;
    Ok(unmount || fstab_changed)
}

host_fn! {
    /// `umount <path>` when mounted, then remove the mount point's `/etc/fstab` lines (the
    /// directory stays).
    #[host(ns = "mount", effects = [Write, Mount])]
    fn remove(h: &mut Host, path: S) -> bool {
        Ok(super::remove(h, &path)?)
    }
}

/// `mount::is_mounted(path)`: a filesystem is mounted at `path` (the host's mount table;
/// in plan and check mode after the session's planned mounts and unmounts).
///
/// # Errors
/// Relative path; a malformed mount table; read failures.
pub fn is_mounted(h: &Host, p: &str) -> Result<bool> {
    Ok(current(h, &query_point(p)?)?.is_some())
}

host_fn! {
    /// True when the host's mount table (`/proc/1/mountinfo` under the root; octal escapes such as
    /// `\040` decoded) lists `path`; in a plan also after a planned `mount::ensure`.
    #[host(ns = "mount", effects = ReadsHost)]
    fn is_mounted(h: &mut Host, path: S) -> bool {
        Ok(super::is_mounted(h, &path)?)
    }
}

/// `mount::info(path)`: the filesystem mounted at `path` (topmost), `None` when none. For a
/// mount planned in this session the fields are the fstab line's (`super_options` empty).
///
/// # Errors
/// As [`is_mounted`].
pub fn info(h: &Host, p: &str) -> Result<Option<MountEntry>> {
    current(h, &query_point(p)?)
}

host_fn! {
    /// `#{path, source, fstype, options, super_options, root}` of the filesystem mounted at `path`
    /// (topmost), or `()`; for a planned mount the fstab line's fields.
    #[host(ns = "mount", effects = ReadsHost)]
    fn info(h: &mut Host, path: S) -> rhai::Dynamic {
        Ok(
                super::info(h, &path)?.map_or(Dynamic::UNIT, |e| Dynamic::from_map(entry_map(e)))
            )
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert::{self, check_keys, opt_string};
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Dynamic, ImmutableString as S, Map};
}
use prelude::*;

/// The option keys of `mount::ensure`.
const MOUNT_KEYS: &[&str] = &["source", "fstype", "options", "state", "dump", "pass"];

/// A non-negative integer option (`()` or absent → `default`).
fn opt_u32(m: &Map, key: &str, default: u32) -> Result<u32, String> {
    match m.get(key) {
        None => Ok(default),
        Some(d) if d.is_unit() => Ok(default),
        Some(d) => {
            let v = d
                .as_int()
                .map_err(|t| format!("option {key} must be an int, got {t}"))?;
            u32::try_from(v).map_err(|_| format!("option {key} must be 0 or more, got {v}"))
        }
    }
}

/// `#{source, fstype, options, state, dump, pass}`: `source` and `fstype` required;
/// `options` a string or an array of strings (joined with `,`), default `defaults`; `state`
/// `mounted` (default) or `present`.
fn mount_spec(m: &Map) -> Result<MountSpec, String> {
    check_keys(m, MOUNT_KEYS)?;
    let required = |k: &str| {
        opt_string(m, k)?.ok_or_else(|| format!("option {k} is required (#{{source, fstype}})"))
    };
    let options = mount_options(m)?;
    let state = mount_state(m)?;
    Ok(MountSpec {
        source: required("source")?,
        fstype: required("fstype")?,
        options,
        dump: opt_u32(m, "dump", 0)?,
        pass: opt_u32(m, "pass", 0)?,
        state,
    })
}

/// `options`: a string or an array of strings (joined with `,`), default `defaults`.
pub(crate) fn mount_options(m: &Map) -> Result<String, String> {
    Ok(match m.get("options") {
        None => "defaults".to_string(),
        Some(d) if d.is_unit() => "defaults".to_string(),
        Some(d) if d.is_array() => convert::string_or_array(d, "option options")?.join(","),
        Some(d) => convert::string(d, "option options")?,
    })
}

/// `state`: `mounted` (default) or `present`.
pub(crate) fn mount_state(m: &Map) -> Result<MountState, String> {
    match opt_string(m, "state")?.as_deref() {
        None | Some("mounted") => Ok(MountState::Mounted),
        Some("present") => Ok(MountState::Present),
        Some(other) => Err(format!(
            "option state must be \"mounted\" or \"present\", got {other:?}"
        )),
    }
}

fn entry_map(e: MountEntry) -> Map {
    let mut m = Map::new();
    m.insert(
        "path".into(),
        convert::s(e.mount_point.to_string_lossy().into_owned()),
    );
    m.insert("source".into(), convert::s(e.source));
    m.insert("fstype".into(), convert::s(e.fstype));
    m.insert("options".into(), convert::s(e.options));
    m.insert("super_options".into(), convert::s(e.super_options));
    m.insert("root".into(), convert::s(e.root));
    m
}

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[
    (
        "mount",
        "Filesystems — `mount::`",
        "`/etc/fstab` holds one line per mount point; the live state is the host's mount table, `/proc/1/mountinfo` under the root (the agent's own mount namespace is not the host's; a root without it reads as nothing mounted). `mount`, `mount -o remount` and `umount` run in the host's mount namespace: when `<root>/proc/1/ns/mnt` is another mount namespace than the agent's (a pod with `hostPID`) and `<root>/proc/1` is the host's init (its root directory, and its namespace's own `/`, are the host root: same device and inode), after entering it (as `nsenter -m -t 1`, not chrooted: its `/` is the host's), else chrooted into the root, so a mount point is always resolved inside the root; either way they read the host's fstab and the mount reaches the host, whatever the propagation of the agent's root mount. In a plan, a later `is_mounted` sees an earlier planned mount or unmount. `mount::unit` and `mount::bind` keep systemd mount units instead (`/etc/systemd/system/<name>.mount`, mounted by systemd in the host's mount namespace).",
    ),
    (
        "disk",
        "Block devices — `disk::`",
        "Read as lsblk reads a host, under the root: `/sys/class/block/<name>` (`size` in 512-byte sectors, `dev`, `partition`, `md/`, `device/model`, `device/serial`, NVMe `wwid`), the `/dev/disk/by-id` symlinks, the udev database `/run/udev/data/b<major>:<minor>` (`ID_FS_TYPE`, `ID_FS_UUID`), else the chrooted queries `lsblk --nodeps --noheadings -o FSTYPE <dev>`, `blkid -p -o value -s TYPE <dev>` and `blkid -s UUID -o value <dev>`, and the host's mount table. A device argument is an absolute path under `/dev` (symlinks resolved inside the root). `fs::mkfs` (under `fs::`) makes a filesystem on a device, never over another one without `force`, and never on a device that is not a block device inside the root's `/dev` or is in use. In a plan, an array or filesystem planned earlier in the session is seen by later calls.",
    ),
    (
        "raid",
        "Software RAID — `raid::`",
        "md arrays through mdadm(8), chrooted: an array is named and lives at `/dev/md/<name>`; it is read from sysfs (`md/level`, `md/array_state`, `slaves/`) when the root has it, else from `mdadm --detail`. Creating an array is a command, so a failed step does not undo it (a `not undone:` line).",
    ),
];

host_fns!(ensure, remove, is_mounted, info);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_parse_with_escapes_and_optional_fields() {
        let text = "\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
36 22 259:3 / /mnt/my\\040data rw,noatime shared:5 master:1 - xfs /dev/nvme1n1 rw,attr2
37 22 0:40 /sub /srv/bind rw - tmpfs tmp\\134fs rw,size=1k
";
        let t = parse_mountinfo(text).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(
            t[1],
            MountEntry {
                mount_point: PathBuf::from("/mnt/my data"),
                source: "/dev/nvme1n1".into(),
                fstype: "xfs".into(),
                options: "rw,noatime".into(),
                super_options: "rw,attr2".into(),
                root: "/".into(),
            }
        );
        assert_eq!(t[2].source, "tmp\\fs");
        assert_eq!(t[2].root, "/sub");
        assert_eq!(
            parse_mountinfo("1 2 3 / /x rw ext4 /dev/sda\n").unwrap_err(),
            "line 1: expected `id parent major:minor root mount-point options [optional...] - fstype source super-options`, got \"1 2 3 / /x rw ext4 /dev/sda\""
        );
    }

    #[test]
    fn escapes_round_trip() {
        assert_eq!(escape("/a b\tc\\d"), "/a\\040b\\011c\\134d");
        assert_eq!(unescape("/a\\040b\\011c\\134d"), "/a b\tc\\d");
        // Not an escape: kept.
        assert_eq!(unescape("a\\9b\\04"), "a\\9b\\04");
    }

    #[test]
    fn fstab_edit_keeps_other_lines_byte_for_byte() {
        let text = "# /etc/fstab\n\nUUID=r /   ext4\terrors=remount-ro 0 1\n/dev/sdb  /data xfs defaults 0 0\n#/dev/sdc /data xfs\n/dev/sdd /data ext4 defaults\nproc /proc proc defaults 0 0";
        let p = Path::new("/data");
        let want = "UUID=x /data xfs noatime 0 2";
        assert_eq!(
            edit_fstab(text, p, Some(want)).unwrap(),
            "# /etc/fstab\n\nUUID=r /   ext4\terrors=remount-ro 0 1\nUUID=x /data xfs noatime 0 2\n#/dev/sdc /data xfs\nproc /proc proc defaults 0 0"
        );
        // Same fields with other spacing and default dump/pass: unchanged.
        let text = "/dev/sdb\t/data/  xfs defaults\n";
        assert_eq!(
            edit_fstab(text, p, Some("/dev/sdb /data xfs defaults 0 0")),
            None
        );
        // Appended after a last line without a newline; removed again.
        let text = "a /b c d 0 0";
        let added = edit_fstab(text, p, Some(want)).unwrap();
        assert_eq!(added, "a /b c d 0 0\nUUID=x /data xfs noatime 0 2\n");
        assert_eq!(edit_fstab(&added, p, None).unwrap(), "a /b c d 0 0\n");
        assert_eq!(edit_fstab(text, p, None), None);
        // An escaped mount point matches its path.
        assert!(is_entry_for(
            "/dev/x /my\\040data ext4 defaults",
            Path::new("/my data")
        ));
    }
}
