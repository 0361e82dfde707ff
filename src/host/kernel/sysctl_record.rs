//! The values `sysctl::set(key, value, #{record: true})` found before a package first
//! changed them, so that an uninstall can put them back (`sysctl::restore(key)`,
//! `sysctl::restore_all()`).
//!
//! One file per package in the agent's state directory in the root:
//! `<SKYHOOK_ROOT_DIR>/sysctl-restore/<package>.conf` (`SKYHOOK_ROOT_DIR` from the step's
//! environment, `/etc/skyhook` by default), one `key = value` line per key, sorted. The
//! package is the one of `SKYHOOK_RESOURCE_ID` (`<id>_<package>_<version>`, between the first
//! and the last `_`, so the record survives upgrades); a step without a resource id
//! (`skyhook-run SCRIPT`) uses the record `unnamed`. The first change of a key adds its line
//! and later changes keep it; a restore sets the recorded value and drops the line (the file
//! when it is the last), so a reinstall records afresh. The record is written through the
//! session like any file: a plan lists it, a check reports it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::host::Host;
use crate::host::effects::effect::{Effect, sysctl_proc_path};
use crate::host::root::error::{HostError, Result};

/// A failure of a `sysctl::` function of its own; everything else is the session's
/// [`HostError`]. Here, not in [`crate::host::kernel::tuning`] (which re-exports it):
/// `tuning` calls this file, so this file may not import `tuning`.
#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    /// What the session failed with.
    #[error(transparent)]
    Host(#[from] HostError),

    /// A sysctl key has no `/proc/sys` entry under the root.
    #[error("unknown sysctl key {key:?} (no {})", path.display())]
    Unknown {
        /// The key as given.
        key: String,
        /// The host path looked up.
        path: PathBuf,
    },
}

impl crate::host::api::AreaError for SysctlError {
    /// A missing entry is the host's state (a command the plan did not run, `modprobe`,
    /// may create it).
    fn depends_on_host(&self) -> bool {
        match self {
            SysctlError::Host(e) => e.depends_on_host(),
            SysctlError::Unknown { .. } => true,
        }
    }
}
crate::host::api::area_error!(SysctlError);

/// The state directory when the step's environment has no `SKYHOOK_ROOT_DIR`.
pub const DEFAULT_STATE_DIR: &str = "/etc/skyhook";

/// The record's name for a step without a `SKYHOOK_RESOURCE_ID`.
pub const UNNAMED: &str = "unnamed";

/// The package part of a resource id (`<id>_<package>_<version>`), when it has one that is
/// a single file name.
fn package_of(resource_id: &str) -> Option<&str> {
    let (_, rest) = resource_id.split_once('_')?;
    let (pkg, _) = rest.rsplit_once('_')?;
    (!pkg.is_empty() && pkg != "." && pkg != ".." && !pkg.contains(['/', '\0'])).then_some(pkg)
}

/// The host path of this session's record.
pub fn path(h: &Host) -> PathBuf {
    let dir = h
        .env("SKYHOOK_ROOT_DIR")
        .filter(|d| d.starts_with('/'))
        .unwrap_or_else(|| DEFAULT_STATE_DIR.to_string());
    let pkg = package_of(&h.options().resource_id).unwrap_or(UNNAMED);
    PathBuf::from(dir)
        .join("sysctl-restore")
        .join(format!("{pkg}.conf"))
}

/// The record as the session sees it (empty when there is none).
///
/// # Errors
/// Read failures.
pub fn read(h: &Host) -> Result<BTreeMap<String, String>> {
    let text = h.view_read(&path(h))?.unwrap_or_default();
    Ok(String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect())
}

/// Write the record (remove it when empty).
fn write(h: &mut Host, rec: &BTreeMap<String, String>) -> Result<bool> {
    let p = path(h);
    if rec.is_empty() {
        return crate::host::files::fs::remove(h, &p.display().to_string());
    }
    let text: String = rec.iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
    crate::host::files::fs::put(h, &p, text.into_bytes(), Some(0o644), None, None)
}

/// Before `key` changes from `before`: add its line unless the record has one.
///
/// # Errors
/// Reading or writing the record.
pub fn note_first_change(h: &mut Host, key: &str, before: &str) -> Result<()> {
    let mut rec = read(h)?;
    if !rec.contains_key(key) {
        rec.insert(key.to_string(), before.to_string());
        write(h, &rec)?;
    }
    Ok(())
}

/// `sysctl::restore(key)`: set `key` to its recorded value (when it differs) and drop its
/// line. False when nothing was recorded for it.
///
/// # Errors
/// Reading or writing the record; [`SysctlError::Unknown`]: the key has no `/proc/sys` entry
/// any more.
pub fn restore(h: &mut Host, key: &str) -> Result<bool, SysctlError> {
    let mut rec = read(h)?;
    let Some(value) = rec.remove(key) else {
        h.note_unchanged();
        return Ok(false);
    };
    set_live(h, key, &value)?;
    write(h, &rec)?;
    Ok(true)
}

host_fn! {
    /// Set `key` back to the value recorded by `set(.., #{record: true})` and drop it from the
    /// package's record (the file when it was the last); false when nothing is recorded for it.
    #[host(ns = "sysctl", effects = [Sysctl, Write, Remove])]
    fn restore(h: &mut Host, key: S) -> bool {
        Ok(super::restore(h, &key)?)
    }
}

/// `sysctl::restore_all()`: [`restore`] every recorded key of the package.
///
/// # Errors
/// As [`restore`]; nothing is restored after the first failure.
pub fn restore_all(h: &mut Host) -> Result<bool, SysctlError> {
    let rec = read(h)?;
    if rec.is_empty() {
        h.note_unchanged();
        return Ok(false);
    }
    for (k, v) in &rec {
        set_live(h, k, v)?;
    }
    write(h, &BTreeMap::new())?;
    Ok(true)
}

host_fn! {
    /// `restore` every key in the package's record, then remove the record (an uninstall's one
    /// call); false when there is none.
    #[host(ns = "sysctl", effects = [Sysctl, Remove])]
    fn restore_all(h: &mut Host) -> bool {
        Ok(super::restore_all(h)?)
    }
}

/// The live value of `key` brought to `value` without touching the record (read here, not
/// through `tuning::sysctl`, which calls this module).
fn set_live(h: &mut Host, key: &str, value: &str) -> Result<bool, SysctlError> {
    let path = sysctl_proc_path(key)?;
    let cur = h
        .view_read(&path)?
        .map(|b| String::from_utf8_lossy(&b).trim().to_string());
    let norm = |v: &str| v.split_whitespace().collect::<Vec<_>>().join(" ");
    match cur {
        None => Err(SysctlError::Unknown {
            key: key.into(),
            path,
        }),
        Some(c) if norm(&c) == norm(value) => Ok(false),
        Some(_) => {
            h.submit(Effect::Sysctl {
                key: key.into(),
                value: value.trim().into(),
            })?;
            Ok(true)
        }
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::ImmutableString as S;
}
use prelude::*;

host_fns!(restore, restore_all);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_of_resource_ids() {
        assert_eq!(package_of("gpu-init-x-3_tuning_1.1.4"), Some("tuning"));
        assert_eq!(package_of("a_nvidia-tuned_0.2.0"), Some("nvidia-tuned"));
        assert_eq!(package_of(""), None);
        assert_eq!(package_of("a_b"), None);
        assert_eq!(package_of("a__1"), None);
        assert_eq!(package_of("a_../x_1"), None);
    }
}
