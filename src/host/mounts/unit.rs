//! systemd mount units: `mount::unit`, `mount::bind`, `mount::remove_unit`, `mount::unit_name`.
//!
//! A mount unit is the file `/etc/systemd/system/<name>.mount`, where `<name>` is the mount
//! point escaped as systemd.unit(5) "String Escaping for Inclusion in Unit Names" says for
//! paths (what `systemd-escape --path --suffix=mount` prints; [`unit_name`]). systemd mounts
//! it itself (at boot through `WantedBy=`, now through `systemctl start`), in the host's
//! mount namespace: unlike `mount::ensure`'s `mount`, a unit's mount always reaches the host.
//!
//! [`unit()`] keeps the file with exactly the content [`render`] gives (the same bytes for the
//! same arguments: sections `[Unit]`, `[Mount]`, `[Install]`, keys in a fixed order), creates
//! the mount point, schedules one daemon-reload (run before the next `systemctl` call or at
//! the end of the step, recorded ahead of the write as for `service::drop_in`) and, unless
//! `state: "present"`, enables and starts the unit through `service::` (each only when not
//! already so). A unit file that changed while the unit is active takes effect at its next
//! start: nothing is unmounted implicitly.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::host::Host;
use crate::host::mounts::mount::MountState;
use crate::host::root::error::{HostError, Result};
use crate::host::services::service;

/// Where mount units are written (a host path).
pub const UNIT_DIR: &str = "/etc/systemd/system";

/// Longest unit name systemd accepts, in bytes (`UNIT_NAME_MAX` - 1).
const UNIT_NAME_MAX: usize = 255;

/// What [`unit()`] is asked for (`#{what, type, options, description, requires, after,
/// wanted_by, state}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitSpec {
    /// `What=`: the device, `UUID=...`, remote filesystem or (bind) source directory.
    pub what: String,
    /// `Type=`: filesystem type (`xfs`, `none` for a bind mount).
    pub fstype: String,
    /// `Options=`: comma-separated mount options (default `defaults`).
    pub options: String,
    /// `Description=`; `None`: no such line.
    pub description: Option<String>,
    /// `Requires=`: unit names (no line when empty).
    pub requires: Vec<String>,
    /// `After=`: unit names (no line when empty).
    pub after: Vec<String>,
    /// `WantedBy=` of `[Install]` (default `multi-user.target`).
    pub wanted_by: Vec<String>,
    /// `Mounted` (default): enabled and started; `Present`: the file and mount point only.
    pub state: MountState,
}

impl UnitSpec {
    /// A spec of `what` and `fstype` with the defaults: options `defaults`, no description,
    /// requires or after, wanted by `multi-user.target`, state mounted.
    pub fn new(what: &str, fstype: &str) -> UnitSpec {
        UnitSpec {
            what: what.into(),
            fstype: fstype.into(),
            options: "defaults".into(),
            description: None,
            requires: Vec::new(),
            after: Vec::new(),
            wanted_by: vec!["multi-user.target".into()],
            state: MountState::Mounted,
        }
    }
}

fn invalid(what: &'static str, message: String) -> HostError {
    HostError::Invalid { what, message }
}

/// The mount point's path components, systemd's way: empty and `.` components dropped.
///
/// # Errors
/// A relative path; a `..` component; a NUL or line break.
fn components(p: &str) -> Result<Vec<&str>> {
    crate::host::files::fs::host_path(p)?;
    if p.contains(['\0', '\n', '\r']) {
        return Err(invalid("mount point", format!("{p:?}")));
    }
    let comps: Vec<&str> = p
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if comps.contains(&"..") {
        return Err(invalid(
            "mount point",
            format!("{p:?} has a `..` component (a unit name is made from a normalized path)"),
        ));
    }
    Ok(comps)
}

/// `mount::unit_name(path)`: the unit name of the mount at `path`, as `systemd-escape
/// --path --suffix=mount` prints it: slashes collapsed and stripped at both ends, `.`
/// components dropped, `/` → `-`, a leading `.` and every byte other than ASCII letters,
/// digits, `:`, `_` and `.` → `\xNN` (lowercase hex); `/` alone → `-.mount`.
/// `/mnt/k8s-disks/0` → `mnt-k8s\x2ddisks-0.mount`.
///
/// # Errors
/// A relative path, a `..` component, a NUL or line break; a name over 255 bytes.
pub fn unit_name(p: &str) -> Result<String> {
    let comps = components(p)?;
    if comps.is_empty() {
        return Ok("-.mount".into());
    }
    let joined = comps.join("/");
    let mut out = String::with_capacity(joined.len() + 6);
    for (i, b) in joined.bytes().enumerate() {
        match b {
            b'/' => out.push('-'),
            b'.' if i == 0 => out.push_str("\\x2e"),
            b if b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b'.') => {
                out.push(char::from(b));
            }
            b => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push_str(".mount");
    if out.len() > UNIT_NAME_MAX {
        return Err(invalid(
            "mount point",
            format!(
                "{p:?}: its unit name is {} bytes, systemd takes at most {UNIT_NAME_MAX}",
                out.len()
            ),
        ));
    }
    Ok(out)
}

host_fn! {
    /// The unit name of mount point `path`, as `systemd-escape --path --suffix=mount` prints it
    /// (systemd.unit(5) path escaping: slashes collapsed and stripped, `.` components dropped, `/`
    /// → `-`, a leading `.` and every byte but ASCII letters, digits, `:`, `_`, `.` → `\xNN`):
    /// `/mnt/k8s-disks/0` → `mnt-k8s\x2ddisks-0.mount`, `/` → `-.mount`. A relative path or a `..`
    /// component is an error.
    #[host(ns = "mount", effects = Computes)]
    fn unit_name(_h: &mut Host, path: S) -> String {
        Ok(super::unit_name(&path)?)
    }
}

/// The normalized mount point (`/` joined components) of a mutation: not `/`.
fn mount_point(p: &str) -> Result<PathBuf> {
    let comps = components(p)?;
    if comps.is_empty() {
        return Err(invalid("mount point", "/ cannot be managed".into()));
    }
    Ok(PathBuf::from(format!("/{}", comps.join("/"))))
}

/// The unit file of the mount at `path`: `/etc/systemd/system/<unit_name(path)>`.
///
/// # Errors
/// As [`unit_name`].
pub fn unit_path(p: &str) -> Result<PathBuf> {
    Ok(Path::new(UNIT_DIR).join(unit_name(p)?))
}

/// A value for a unit file line: one line, not continued (no trailing `\`), `%` written
/// `%%` (systemd expands `%` specifiers).
fn value(what: &'static str, v: &str) -> Result<String> {
    if v.is_empty() || v.contains(['\0', '\n', '\r']) || v.ends_with('\\') {
        return Err(invalid(
            what,
            format!("{v:?} (must be one non-empty line, not ending in a backslash)"),
        ));
    }
    Ok(v.replace('%', "%%"))
}

/// A value without whitespace (type, options, unit names).
fn word(what: &'static str, v: &str) -> Result<String> {
    if v.chars().any(char::is_whitespace) {
        return Err(invalid(
            what,
            format!("{v:?} (must not contain whitespace)"),
        ));
    }
    value(what, v)
}

/// A space-separated list of unit names.
fn units(what: &'static str, names: &[String]) -> Result<String> {
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        if n.contains('/') {
            return Err(invalid(what, format!("{n:?} (a unit name has no `/`)")));
        }
        out.push(word(what, n)?);
    }
    Ok(out.join(" "))
}

/// The unit file for the mount at `path` (normalized, as `mount_point` gives it):
///
/// ```text
/// [Unit]
/// Description=<description>      (when given)
/// Requires=<requires...>         (when any)
/// After=<after...>               (when any)
///
/// [Mount]
/// What=<what>
/// Where=<path>
/// Type=<type>
/// Options=<options>
///
/// [Install]
/// WantedBy=<wanted_by...>
/// ```
///
/// # Errors
/// An empty value, a line break or NUL in one, a value ending in `\`; whitespace in type,
/// options or a unit name; `/` in a unit name; no `wanted_by`.
pub fn render(path: &Path, spec: &UnitSpec) -> Result<String> {
    let mut s = String::from("[Unit]\n");
    if let Some(d) = &spec.description {
        s += &format!("Description={}\n", value("mount unit description", d)?);
    }
    if !spec.requires.is_empty() {
        s += &format!("Requires={}\n", units("requires unit", &spec.requires)?);
    }
    if !spec.after.is_empty() {
        s += &format!("After={}\n", units("after unit", &spec.after)?);
    }
    if spec.wanted_by.is_empty() {
        return Err(invalid(
            "wanted_by",
            "no unit given (the mount unit would not start at boot)".into(),
        ));
    }
    let _ = write!(
        s,
        "\n[Mount]\nWhat={}\nWhere={}\nType={}\nOptions={}\n\n[Install]\nWantedBy={}\n",
        value("mount source (what)", &spec.what)?,
        value("mount point", &path.to_string_lossy())?,
        word("filesystem type", &spec.fstype)?,
        word("mount options", &spec.options)?,
        units("wanted_by unit", &spec.wanted_by)?,
    );
    Ok(s)
}

/// `mount::unit(path, spec)`: keep `/etc/systemd/system/<unit_name(path)>` with exactly
/// [`render`]'s content (mode 0644), create the mount point directory (0755) when missing,
/// schedule a daemon-reload when the file changed and, for state `mounted`, `systemctl
/// enable` and `systemctl start` the unit when it is not enabled / not active. Returns
/// whether anything changed. Plan records each change; check reports each as drift (a file
/// that differs, a missing mount point, a unit not enabled or not active).
///
/// # Errors
/// As [`unit_name`] and [`render`]; `/` as the mount point; a non-directory at the mount
/// point; writing the daemon-reload record or the file; `systemctl` failing (apply).
pub fn unit(h: &mut Host, p: &str, spec: &UnitSpec) -> Result<bool> {
    let path = mount_point(p)?;
    let name = unit_name(p)?;
    let content = render(&path, spec)?;
    let file = Path::new(UNIT_DIR).join(&name);
    let file_changed = crate::host::files::fs::put_with(
        h,
        &file,
        content.into_bytes(),
        (Some(0o644), None, None),
        Host::write_ahead_daemon_reload,
    )?;
    if file_changed {
        h.schedule_daemon_reload();
    }
    let dir_changed = crate::host::files::fs::mkdir(h, &path.to_string_lossy(), None)?;
    let (mut enabled, mut started) = (false, false);
    if spec.state == MountState::Mounted {
        enabled = service::enable(h, &name)?;
        started = service::start(h, &name)?;
    }
    Ok(file_changed || dir_changed || enabled || started)
}

host_fn! {
    /// Keep the systemd mount unit of mount point `path`,
    /// `/etc/systemd/system/<mount::unit_name(path)>` (mode 0644), with exactly `[Unit]`
    /// `Description=` `Requires=` `After=` (each only when given), `[Mount]` `What=` `Where=<path>`
    /// `Type=` `Options=`, `[Install]` `WantedBy=` (`#{what, type}` required; `options` a string or
    /// an array, default `defaults`; `requires`/`after`/`wanted_by` a unit name or an array,
    /// `wanted_by` default `multi-user.target`; `%` written `%%`); create the mount point (0755); a
    /// changed file schedules one daemon-reload (before the next `service::` call or at the end of
    /// the step). With `state: "mounted"` (default) `systemctl enable` and `systemctl start` the
    /// unit when it is not enabled / not active; `state: "present"`: file and directory only.
    /// systemd mounts it in the host's mount namespace. A file that differs or a unit not active is
    /// drift; a changed file of an active unit takes effect at its next start.
    #[host(ns = "mount", effects = [Write, Mkdir, DaemonReload, Service], options = UNIT_KEYS)]
    fn unit(h: &mut Host, path: S, opts: Map) -> bool {
        let spec = unit_spec(&opts)?;
        Ok(super::unit(h, &path, &spec)?)
    }
}

/// `mount::bind(src, path, spec)`: [`unit()`] with `What=<src>`, `Type=none` and
/// `Options=bind` (then `spec.options` when not `defaults`: `bind,ro`); `spec.what` and
/// `spec.fstype` are not used. The source directory is not created.
///
/// # Errors
/// A relative `src`; as [`unit()`].
pub fn bind(h: &mut Host, src: &str, p: &str, spec: &UnitSpec) -> Result<bool> {
    crate::host::files::fs::host_path(src)?;
    let options = match spec.options.as_str() {
        "" | "defaults" | "bind" => "bind".to_string(),
        o => format!("bind,{o}"),
    };
    let spec = UnitSpec {
        what: src.into(),
        fstype: "none".into(),
        options,
        ..spec.clone()
    };
    unit(h, p, &spec)
}

host_fn! {
    /// Bind-mount directory `src` at `path` as a systemd mount unit: `mount::unit(path, #{what:
    /// src, type: "none", options: "bind"})` (`src` is not created).
    #[host(ns = "mount", effects = [Write, Mkdir, DaemonReload, Service])]
    fn bind(h: &mut Host, src: S, path: S) -> bool {
        Ok(super::bind(h, &src, &path, &UnitSpec::new("", ""))?)
    }

    /// As `bind`, with `#{unit: true}` (the only kind supported) and `mount::unit`'s `description`,
    /// `requires`, `after`, `wanted_by`, `state`; `options` are added after `bind` (`"ro"` →
    /// `Options=bind,ro`).
    #[overload(options = BIND_KEYS)]
    fn bind_with_opts(h: &mut Host, src: S, path: S, opts: Map) -> bool {
        let spec = bind_spec(&opts)?;
        Ok(super::bind(h, &src, &path, &spec)?)
    }
}

/// `mount::remove_unit(path)`: `systemctl stop` the unit when active, `systemctl disable` it
/// when enabled, remove its file from `/etc/systemd/system` and schedule a daemon-reload
/// (recorded ahead of the removal in apply mode). The mount point directory stays. Returns
/// whether anything changed.
///
/// # Errors
/// As [`unit_name`]; `/`; `systemctl` failing (apply); removal failures.
pub fn remove_unit(h: &mut Host, p: &str) -> Result<bool> {
    mount_point(p)?;
    let name = unit_name(p)?;
    let stopped = service::stop(h, &name)?;
    let disabled = service::disable(h, &name)?;
    let file = Path::new(UNIT_DIR).join(&name);
    let removed = crate::host::files::fs::remove_with(
        h,
        &file.to_string_lossy(),
        Host::write_ahead_daemon_reload,
    )?;
    if removed {
        h.schedule_daemon_reload();
    }
    Ok(stopped || disabled || removed)
}

host_fn! {
    /// `systemctl stop` the mount unit of `path` when active, `systemctl disable` it when enabled,
    /// remove its file from `/etc/systemd/system` and schedule one daemon-reload (the mount point
    /// directory stays).
    #[host(ns = "mount", effects = [Service, Remove, DaemonReload])]
    fn remove_unit(h: &mut Host, path: S) -> bool {
        Ok(super::remove_unit(h, &path)?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert::{self, check_keys, opt_string};
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use crate::host::mounts::mount::mount_options;
    pub(super) use crate::host::mounts::mount::mount_state;
    pub(super) use rhai::{ImmutableString as S, Map};
}
use prelude::*;

/// The option keys of `mount::unit`.
const UNIT_KEYS: &[&str] = &[
    "what",
    "type",
    "options",
    "description",
    "requires",
    "after",
    "wanted_by",
    "state",
];

/// The option keys of `mount::bind`.
const BIND_KEYS: &[&str] = &[
    "unit",
    "options",
    "description",
    "requires",
    "after",
    "wanted_by",
    "state",
];

/// A list of unit names option: a string or an array of strings; absent → `default`.
fn unit_list(m: &Map, key: &str, default: &[&str]) -> Result<Vec<String>, String> {
    match m.get(key) {
        None => Ok(default.iter().map(|s| s.to_string()).collect()),
        Some(d) if d.is_unit() => Ok(default.iter().map(|s| s.to_string()).collect()),
        Some(d) => convert::string_or_array(d, &format!("option {key}")),
    }
}

/// The keys `mount::unit` and `mount::bind` share: `options`, `description`, `requires`,
/// `after`, `wanted_by` (default `multi-user.target`), `state`.
fn unit_spec_common(m: &Map, what: String, fstype: String) -> Result<UnitSpec, String> {
    Ok(UnitSpec {
        what,
        fstype,
        options: mount_options(m)?,
        description: opt_string(m, "description")?,
        requires: unit_list(m, "requires", &[])?,
        after: unit_list(m, "after", &[])?,
        wanted_by: unit_list(m, "wanted_by", &["multi-user.target"])?,
        state: mount_state(m)?,
    })
}

/// `#{what, type, ...}` of `mount::unit`: `what` and `type` required.
fn unit_spec(m: &Map) -> Result<UnitSpec, String> {
    check_keys(m, UNIT_KEYS)?;
    let required = |k: &str| {
        opt_string(m, k)?.ok_or_else(|| format!("option {k} is required (#{{what, type}})"))
    };
    unit_spec_common(m, required("what")?, required("type")?)
}

/// `#{unit, ...}` of `mount::bind`: `unit` must be true (the default).
fn bind_spec(m: &Map) -> Result<UnitSpec, String> {
    check_keys(m, BIND_KEYS)?;
    if !convert::opt_bool(m, "unit", true)? {
        return Err(
            "option unit: false is not supported (a bind mount is kept as a systemd mount unit)"
                .into(),
        );
    }
    unit_spec_common(m, String::new(), String::new())
}

host_fns!(unit, bind, remove_unit, unit_name);
