//! Host preparation before a mode runs (agent-contract.md section 4): the legacy copy from
//! `SKYHOOK_DATA_DIR`, the `root_dir` overlay, expected configMap files and `COPY_RESOLV`;
//! and taking the package lock ([`package_lock`]), the last thing before `START`.
//!
//! Every write goes through [`HostRoot`], so `..` and symlinks in the package or on the host
//! never lead outside the root mount.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::host::root::{EntryKind, HostRoot, RootError};
use crate::process::Cancel;
use crate::state::StateError;
use crate::state::lock::{self, PackageLock};

use super::console::Console;

/// Take the package lock of `pkg` (`<state root>/locks/<pkg>.lock`) before a mode or an
/// interrupt runs: at once when it is free; otherwise print
/// `WARNING: waiting for the package lock <host path> (held by another agent)` on stderr and
/// wait until it is free or `cancel` is stopped (the agent's SIGTERM). On a stop print
/// `WARNING: stopping before the first step: <reason> while waiting for the package lock`
/// and return `Ok(None)`: the caller then exits 1 without writing `START` or anything else.
///
/// # Errors
/// Creating, opening or locking the lock file ([`lock::lock_package_cancellable`]).
pub async fn package_lock(
    root: &HostRoot,
    state_root: &Path,
    pkg: &str,
    cancel: &Cancel,
    console: &Console,
) -> Result<Option<PackageLock>, StateError> {
    let held = lock::lock_package_cancellable(root, state_root, pkg, cancel, |p| {
        console.warn(&format!(
            "waiting for the package lock {} (held by another agent)",
            p.display()
        ));
    })
    .await?;
    if held.is_none() {
        let why = cancel
            .reason()
            .map_or_else(|| "stopped".to_string(), |r| r.to_string());
        console.warn(&format!(
            "stopping before the first step: {why} while waiting for the package lock"
        ));
    }
    Ok(held)
}

/// The container path whose contents the legacy copy adds after `SKYHOOK_DATA_DIR`.
pub const NODE_FILES_DIR: &str = "/etc/nvidia-bootstrap/node-files";

/// A failure while preparing the host.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The legacy copy source does not exist.
    #[error(
        "copy dir {} does not exist on the host and SKYHOOK_DATA_DIR {} does not exist to copy it from",
        copy_dir.display(), data_dir.display()
    )]
    MissingDataDir {
        /// The host copy dir.
        copy_dir: PathBuf,
        /// The agent-side source.
        data_dir: PathBuf,
    },
    /// Reading the agent-side source failed.
    #[error("failed to read {}", path.display())]
    ReadSource {
        /// The agent-side path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A host operation failed.
    #[error(transparent)]
    Root(#[from] RootError),
    /// An expected configMap file is missing (Python's message).
    #[error("Expected config file {name} not found in configmaps directory.")]
    ExpectedConfigFile {
        /// The missing name.
        name: String,
    },
}

/// Copy the agent-side tree `src` into the host directory `dst` under `root` — the one tree
/// copier (the legacy copy, `skyhook-run --package --apply`'s package copy): directories
/// created when missing with the source mode (existing ones left as they are), files
/// replaced atomically with the source mode and mtime, symlinks in the source followed,
/// entries in name order; `skip` names a top-level entry of `src` left out.
///
/// # Errors
/// [`PrepareError::ReadSource`] for the source, [`PrepareError::Root`] for the host side.
pub fn copy_tree(
    root: &HostRoot,
    src: &Path,
    dst: &Path,
    skip: Option<&std::ffi::OsStr>,
) -> Result<(), PrepareError> {
    let read_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PrepareError::ReadSource { path, source }
    };
    let meta = std::fs::metadata(src).map_err(read_err(src))?;
    if meta.is_dir() {
        if root.metadata(dst)?.is_none() {
            root.create_dir_all(dst, meta.mode() & 0o7777)?;
        }
        let mut entries: Vec<_> = std::fs::read_dir(src)
            .map_err(read_err(src))?
            .collect::<Result<_, _>>()
            .map_err(read_err(src))?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            if skip.is_some_and(|s| s == e.file_name()) {
                continue;
            }
            copy_tree(root, &e.path(), &dst.join(e.file_name()), None)?;
        }
    } else {
        let data = std::fs::read(src).map_err(read_err(src))?;
        root.write_atomic(dst, &data, Some(meta.mode() & 0o7777))?;
        if let Ok(m) = meta.modified() {
            root.set_mtime(dst, m)?;
        }
    }
    Ok(())
}

/// Legacy copy (section 4, item 1): when the host copy dir does not exist, copy
/// `SKYHOOK_DATA_DIR` into it, then the contents of [`NODE_FILES_DIR`] if present.
/// Returns whether a copy happened.
///
/// # Errors
/// [`PrepareError::MissingDataDir`] (nothing is created then), or a copy failure.
pub fn legacy_copy(
    root: &HostRoot,
    copy_dir: &Path,
    data_dir: &Path,
) -> Result<bool, PrepareError> {
    if root.metadata(copy_dir)?.is_some() {
        return Ok(false);
    }
    if !data_dir.is_dir() {
        return Err(PrepareError::MissingDataDir {
            copy_dir: copy_dir.to_path_buf(),
            data_dir: data_dir.to_path_buf(),
        });
    }
    copy_tree(root, data_dir, copy_dir, None)?;
    let node_files = Path::new(NODE_FILES_DIR);
    if node_files.is_dir() {
        copy_tree(root, node_files, copy_dir, None)?;
    }
    Ok(true)
}

/// Require every `expected_config_files` name under `<copy dir>/configmaps/`.
///
/// # Errors
/// [`PrepareError::ExpectedConfigFile`] for the first missing name.
pub fn check_expected_files(
    root: &HostRoot,
    copy_dir: &Path,
    names: &[String],
) -> Result<(), PrepareError> {
    for name in names {
        if !root.exists(&copy_dir.join("configmaps").join(name))? {
            return Err(PrepareError::ExpectedConfigFile { name: name.clone() });
        }
    }
    Ok(())
}

/// Overlay `<copy dir>/root_dir` onto the host root (section 4, item 3.1, Rust \[fix\]):
/// regular files copied with mode and mtime, replaced atomically (through a destination
/// symlink, its target inside the root); missing directories created with the source mode;
/// existing directories never changed; source symlinks followed. Returns the number of
/// files copied.
///
/// # Errors
/// Any read or write failure.
pub fn overlay(root: &HostRoot, copy_dir: &Path) -> Result<usize, PrepareError> {
    let src = copy_dir.join("root_dir");
    match root.metadata(&src)? {
        Some(m) if m.is_dir() => overlay_dir(root, &src, Path::new("/")),
        _ => Ok(0),
    }
}

fn overlay_dir(root: &HostRoot, src: &Path, dst: &Path) -> Result<usize, PrepareError> {
    let mut copied = 0;
    for entry in root.read_dir(src)? {
        let s = src.join(&entry.name);
        let d = dst.join(&entry.name);
        let Some(meta) = root.metadata(&s)? else {
            // A dangling symlink in the source: nothing to copy, but say so.
            eprintln!(
                "WARNING: {} is a dangling symlink in root_dir; {} is not overlaid",
                s.display(),
                d.display()
            );
            continue;
        };
        if meta.is_dir() {
            if root.metadata(&d)?.is_none() {
                root.create_dir_all(&d, meta.mode() & 0o7777)?;
            }
            copied += overlay_dir(root, &s, &d)?;
        } else if entry.kind != EntryKind::Other && meta.is_file() {
            let data = root.read(&s)?;
            root.write_atomic(&d, &data, Some(meta.mode() & 0o7777))?;
            if let Ok(m) = meta.modified() {
                root.set_mtime(&d, m)?;
            }
            copied += 1;
        }
    }
    Ok(copied)
}

/// `COPY_RESOLV`: copy the agent's `/etc/resolv.conf` over the host's, resolved inside the
/// root. A missing source is not an error (nothing to copy).
///
/// # Errors
/// Reading the source or writing the host file failed.
pub fn copy_resolv(root: &HostRoot, source: &Path) -> Result<(), PrepareError> {
    match std::fs::read(source) {
        Ok(data) => {
            root.write_atomic(Path::new("/etc/resolv.conf"), &data, None)?;
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source_err) => Err(PrepareError::ReadSource {
            path: source.to_path_buf(),
            source: source_err,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn overlay_keeps_existing_dir_modes_and_copies_files() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("pkg/root_dir/etc/new")).unwrap();
        std::fs::create_dir_all(r.join("etc")).unwrap();
        std::fs::set_permissions(r.join("etc"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(
            r.join("pkg/root_dir/etc"),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        std::fs::set_permissions(
            r.join("pkg/root_dir/etc/new"),
            std::fs::Permissions::from_mode(0o750),
        )
        .unwrap();
        std::fs::write(r.join("pkg/root_dir/etc/demo.conf"), "k=v\n").unwrap();
        std::fs::set_permissions(
            r.join("pkg/root_dir/etc/demo.conf"),
            std::fs::Permissions::from_mode(0o640),
        )
        .unwrap();
        let root = HostRoot::open(r).unwrap();
        assert_eq!(overlay(&root, Path::new("/pkg")).unwrap(), 1);
        assert_eq!(std::fs::read(r.join("etc/demo.conf")).unwrap(), b"k=v\n");
        let mode = |p: &str| std::fs::metadata(r.join(p)).unwrap().mode() & 0o7777;
        assert_eq!(mode("etc/demo.conf"), 0o640);
        assert_eq!(mode("etc"), 0o755);
        assert_eq!(mode("etc/new"), 0o750);
        let src_m = std::fs::metadata(r.join("pkg/root_dir/etc/demo.conf"))
            .unwrap()
            .mtime();
        assert_eq!(
            std::fs::metadata(r.join("etc/demo.conf")).unwrap().mtime(),
            src_m
        );
    }

    #[test]
    fn legacy_copy_missing_source_creates_nothing() {
        let d = tempfile::tempdir().unwrap();
        let root = HostRoot::open(d.path()).unwrap();
        let e = legacy_copy(&root, Path::new("/t/pkg2"), &d.path().join("missing")).unwrap_err();
        assert!(matches!(e, PrepareError::MissingDataDir { .. }));
        assert!(!d.path().join("t").exists());
    }

    #[test]
    fn legacy_copy_copies_tree() {
        let d = tempfile::tempdir().unwrap();
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("skyhook_dir")).unwrap();
        std::fs::write(src.path().join("config.json"), "{}").unwrap();
        std::fs::write(src.path().join("skyhook_dir/a.sh"), "x").unwrap();
        let root = HostRoot::open(d.path()).unwrap();
        assert!(legacy_copy(&root, Path::new("/t/pkg"), src.path()).unwrap());
        assert_eq!(
            std::fs::read(d.path().join("t/pkg/config.json")).unwrap(),
            b"{}"
        );
        assert_eq!(
            std::fs::read(d.path().join("t/pkg/skyhook_dir/a.sh")).unwrap(),
            b"x"
        );
        assert!(!legacy_copy(&root, Path::new("/t/pkg"), src.path()).unwrap());
    }
}
