//! Interrupt markers under `<state root>/interrupts/flags/<SKYHOOK_RESOURCE_ID>/`
//! (contract 6.4, 10.4).
//!
//! `<name>.complete` records a finished interrupt command (`no_op`, `service_restart_1`,
//! `node_restart_0`, ...); its content is the epoch time as Python prints a float, and only
//! its existence is read. `node_restart_0.pending` (the Go rewrite's reboot scheme) holds
//! `boot-id:<id>\n` while a reboot is in flight.

use std::path::{Path, PathBuf};

use super::StateError;
use crate::host::root::{AgentFiles, HostRoot};
use crate::pyfmt;

/// The marker name of the reboot command, whose `.pending` file carries the boot id.
pub const NODE_RESTART: &str = "node_restart_0";

/// `<state root>/interrupts/flags/<resource_id>` (the raw `SKYHOOK_RESOURCE_ID`).
pub fn interrupt_dir(state_root: &Path, resource_id: &str) -> PathBuf {
    state_root
        .join("interrupts")
        .join("flags")
        .join(resource_id)
}

/// `<dir>/<name>.complete`.
pub fn complete_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.complete"))
}

/// `<dir>/node_restart_0.pending`.
pub fn pending_path(dir: &Path) -> PathBuf {
    dir.join(format!("{NODE_RESTART}.pending"))
}

/// Create the interrupt directory (0755) when an interrupt is processed.
///
/// # Errors
/// Directory creation failure.
pub fn ensure_dir(root: &HostRoot, dir: &Path) -> Result<(), StateError> {
    AgentFiles::new(root).create_dir_all(dir, 0o755)?;
    Ok(())
}

/// True when `<dir>/<name>.complete` exists.
///
/// # Errors
/// Resolution failures other than "not found".
pub fn is_complete(root: &HostRoot, dir: &Path, name: &str) -> Result<bool, StateError> {
    Ok(root.exists(&complete_path(dir, name))?)
}

/// Write `<dir>/<name>.complete` atomically with `now_epoch_secs` rendered as Python's
/// `repr(float)` (`1724846400.123456`, `1724846400.0`).
///
/// # Errors
/// A write failure.
pub fn mark_complete(
    root: &HostRoot,
    dir: &Path,
    name: &str,
    now_epoch_secs: f64,
) -> Result<(), StateError> {
    AgentFiles::new(root).write_atomic(
        &complete_path(dir, name),
        pyfmt::float_repr(now_epoch_secs).as_bytes(),
        None,
    )?;
    Ok(())
}

/// The raw content of `node_restart_0.pending` (lossily decoded), `None` when absent.
///
/// # Errors
/// Read failures other than "not found".
pub fn read_pending(root: &HostRoot, dir: &Path) -> Result<Option<String>, StateError> {
    Ok(root
        .read_opt(&pending_path(dir))?
        .map(|b| String::from_utf8_lossy(&b).into_owned()))
}

/// The boot id recorded in a pending file's content (`boot-id:<id>`, surrounding whitespace
/// ignored); `None` when malformed or empty.
pub fn pending_boot_id(content: &str) -> Option<&str> {
    let id = content.trim().strip_prefix("boot-id:")?.trim();
    (!id.is_empty()).then_some(id)
}

/// Write `node_restart_0.pending` atomically with `boot-id:<boot_id>\n`.
///
/// # Errors
/// A write failure.
pub fn write_pending(root: &HostRoot, dir: &Path, boot_id: &str) -> Result<(), StateError> {
    AgentFiles::new(root).write_atomic(
        &pending_path(dir),
        format!("boot-id:{boot_id}\n").as_bytes(),
        None,
    )?;
    Ok(())
}

/// Rename `node_restart_0.pending` to `node_restart_0.complete` (the node rebooted).
///
/// # Errors
/// A rename failure (including a missing pending file).
pub fn pending_to_complete(root: &HostRoot, dir: &Path) -> Result<(), StateError> {
    AgentFiles::new(root).rename(&pending_path(dir), &complete_path(dir, NODE_RESTART))?;
    Ok(())
}

/// Remove `node_restart_0.pending`; `Ok(false)` when it did not exist.
///
/// # Errors
/// Removal failures other than "not found".
pub fn remove_pending(root: &HostRoot, dir: &Path) -> Result<bool, StateError> {
    Ok(AgentFiles::new(root).remove_file(&pending_path(dir))?)
}

/// Remove `<name>.complete` (Python's algorithm deletes it when a command it pre-marked fails).
/// `Ok(false)` when it did not exist.
///
/// # Errors
/// Any removal failure other than "not found".
pub fn remove_complete(root: &HostRoot, dir: &Path, name: &str) -> Result<bool, StateError> {
    Ok(AgentFiles::new(root).remove_file(&complete_path(dir, name))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_and_pending() {
        let d = tempfile::tempdir().unwrap();
        let r = HostRoot::open(d.path()).unwrap();
        let dir = interrupt_dir(Path::new("/st"), "sky-0000-1_demo_1.0.0");
        assert_eq!(dir, Path::new("/st/interrupts/flags/sky-0000-1_demo_1.0.0"));
        let real = d.path().join("st/interrupts/flags/sky-0000-1_demo_1.0.0");
        ensure_dir(&r, &dir).unwrap();
        assert!(real.is_dir());

        assert!(!is_complete(&r, &dir, "no_op").unwrap());
        mark_complete(&r, &dir, "no_op", 1724846400.0).unwrap();
        assert!(is_complete(&r, &dir, "no_op").unwrap());
        assert_eq!(
            std::fs::read_to_string(real.join("no_op.complete")).unwrap(),
            "1724846400.0"
        );
        mark_complete(&r, &dir, "service_restart_1", 1724846400.123456).unwrap();
        assert_eq!(
            std::fs::read_to_string(real.join("service_restart_1.complete")).unwrap(),
            "1724846400.123456"
        );

        assert_eq!(read_pending(&r, &dir).unwrap(), None);
        write_pending(&r, &dir, "3f2a").unwrap();
        let content = read_pending(&r, &dir).unwrap().unwrap();
        assert_eq!(content, "boot-id:3f2a\n");
        assert_eq!(pending_boot_id(&content), Some("3f2a"));
        assert_eq!(pending_boot_id("garbage"), None);
        assert_eq!(pending_boot_id("boot-id:\n"), None);

        pending_to_complete(&r, &dir).unwrap();
        assert!(is_complete(&r, &dir, NODE_RESTART).unwrap());
        assert!(!real.join("node_restart_0.pending").exists());
        assert!(!remove_pending(&r, &dir).unwrap());
        write_pending(&r, &dir, "x").unwrap();
        assert!(remove_pending(&r, &dir).unwrap());
        assert_eq!(read_pending(&r, &dir).unwrap(), None);
    }
}
