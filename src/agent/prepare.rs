//! Host preparation before a mode runs (agent-contract.md section 4): the legacy copy from
//! `SKYHOOK_DATA_DIR`, the `root_dir` overlay, expected configMap files and `COPY_RESOLV`;
//! `skyhook-run --package --apply`'s package copy; and taking the package lock
//! ([`package_lock`]), the last thing before `START`.
//!
//! The overlay, the package copy and the legacy copy are one tree walk ([`copy_onto`])
//! that submits `fs::` effects (directories, files with their mode, then each file's
//! source mtime as an [`Effect::SetMtime`]) to a host session: the preflight's Plan session
//! plans it, and the agent applies it on an Apply session with an undo journal
//! ([`apply_session`]), so the plan shows exactly what the apply does and a walk that fails
//! half-way is undone whole (its error names the path). Every path resolves inside the
//! root mount (`..` and symlinks in the package or on the host never lead outside it).

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::host::effects::effect::Effect;
use crate::host::files::fs as host_fs;
use crate::host::root::{AgentFiles, HostRoot};
use crate::host::{ExecMode, Host, HostOptions, Report};
use crate::process::Cancel;
use crate::state::StateError;
use crate::state::lock::{self, PackageLock};

use super::console::Console;
pub use super::prepare_error::PrepareError;
use super::site::{OverlayEntry, PackageSite};

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
    let label = format!("{}-legacy-copy", label_of(copy_dir));
    apply_session(root, label, "legacy copy", |h| {
        let data = PackageSite::Local {
            dir: data_dir.to_path_buf(),
            configmaps: data_dir.join("configmaps"),
            host_dir: None,
        };
        host_fs::mkdir(h, &copy_dir.to_string_lossy(), Some(source_mode(data_dir)?))
            .map_err(|e| host_err(&e))?;
        copy_onto(h, &data, data_dir, copy_dir, None, Dangling::Fail)?;
        let node_files = Path::new(NODE_FILES_DIR);
        if node_files.is_dir() {
            let files = PackageSite::Local {
                dir: node_files.to_path_buf(),
                configmaps: node_files.join("configmaps"),
                host_dir: None,
            };
            copy_onto(h, &files, node_files, copy_dir, None, Dangling::Fail)?;
        }
        Ok(())
    })?;
    Ok(true)
}

/// Overlay `<copy dir>/root_dir` onto the host root (section 4, item 3.1, Rust \[fix\]):
/// [`copy_onto`] on an Apply session with an undo journal ([`apply_session`]): regular
/// files written with their mode, then given the source's mtime; missing directories
/// created with the source mode; existing directories never changed; source symlinks
/// followed (a dangling one skipped with a warning on stderr). Returns what it did, as the
/// plan lists it (empty without a `root_dir`).
///
/// # Errors
/// [`PrepareError::Apply`] naming the path (nothing of the overlay is left written), or
/// [`PrepareError::Root`] looking up the source.
pub fn overlay(root: &HostRoot, copy_dir: &Path) -> Result<Report, PrepareError> {
    let src = copy_dir.join("root_dir");
    if !root.metadata(&src)?.is_some_and(|m| m.is_dir()) {
        return Ok(Report::new(ExecMode::Apply));
    }
    let site = PackageSite::Copy { root, copy_dir };
    let label = format!("{}-root_dir", label_of(copy_dir));
    let (_, report) = apply_session(root, label, "root_dir overlay", |h| {
        copy_onto(h, &site, &src, Path::new("/"), None, Dangling::Warn)
    })?;
    Ok(report)
}

/// `skyhook-run --package --apply`'s package copy ([`package_copy`]) on an Apply session
/// with an undo journal ([`apply_session`]).
///
/// # Errors
/// [`PrepareError::Apply`] naming the path (the copy dir is then as it was).
pub fn copy_package(root: &HostRoot, site: &PackageSite<'_>) -> Result<(), PrepareError> {
    let label = match site {
        PackageSite::Local {
            host_dir: Some(d), ..
        } => format!("{}-package-copy", label_of(d)),
        _ => return Ok(()),
    };
    apply_session(root, label, "package copy", |h| package_copy(h, site)).map(drop)
}

/// The package copy of a [`PackageSite::Local`] into the root at its `host_dir`, on `h` in
/// any mode: the copy dir removed, made again with DIR's mode and DIR copied into it
/// ([`copy_onto`]), then the configMaps folder into `<host_dir>/configmaps` when it lies
/// elsewhere (`DIR/configmaps` left out then). A dangling symlink in the package fails it.
/// Nothing for another site.
///
/// # Errors
/// A read of the source or a host effect failed (the message names the path).
pub fn package_copy(h: &mut Host, site: &PackageSite<'_>) -> Result<(), String> {
    let PackageSite::Local {
        dir,
        configmaps,
        host_dir: Some(host_dir),
    } = site
    else {
        return Ok(());
    };
    let shown = host_dir.to_string_lossy();
    host_fs::remove_all(h, &shown).map_err(|e| host_err(&e))?;
    host_fs::mkdir(h, &shown, Some(source_mode(dir)?)).map_err(|e| host_err(&e))?;
    let separate = *configmaps != dir.join("configmaps");
    let skip = separate.then_some(OsStr::new("configmaps"));
    copy_onto(h, site, dir, host_dir, skip, Dangling::Fail)?;
    if separate && configmaps.is_dir() {
        let dst = host_dir.join("configmaps");
        host_fs::mkdir(h, &dst.to_string_lossy(), Some(source_mode(configmaps)?))
            .map_err(|e| host_err(&e))?;
        copy_onto(h, site, configmaps, &dst, None, Dangling::Fail)?;
    }
    Ok(())
}

/// What [`copy_onto`] does with a dangling symlink in its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dangling {
    /// Leave it out, silently (the plan of the overlay).
    Skip,
    /// Leave it out with a `WARNING:` line on stderr (the overlay applied).
    Warn,
    /// Fail, naming it (the package and legacy copies).
    Fail,
}

/// The one tree walk of the overlay and the copies, on `h` in any mode: the entries of the
/// folder `src` of `site` (by name, symlinks followed, [`PackageSite::overlay_entries`];
/// `skip` names a top-level entry left out) onto the host folder `dst`: a missing folder
/// made with the source mode (an existing one left as it is) and walked; a regular file
/// written with its mode (`fs::write`, through a destination symlink inside the root), then
/// given the source's mtime ([`Effect::SetMtime`]) when the write changed it or its mtime
/// differs in whole seconds. Returns the number of files.
///
/// # Errors
/// A read of the source, a dangling symlink ([`Dangling::Fail`]) or an effect failed: the
/// message names the path.
pub fn copy_onto(
    h: &mut Host,
    site: &PackageSite<'_>,
    src: &Path,
    dst: &Path,
    skip: Option<&OsStr>,
    dangling: Dangling,
) -> Result<usize, String> {
    let mut copied = 0;
    for (name, entry) in site.overlay_entries(src).map_err(|e| e.to_string())? {
        if skip.is_some_and(|s| s == name) {
            continue;
        }
        let s = src.join(&name);
        let d = dst.join(&name);
        let ds = d.to_string_lossy();
        match entry {
            OverlayEntry::Dangling => match dangling {
                Dangling::Skip => {}
                Dangling::Warn => eprintln!(
                    "WARNING: {} is a dangling symlink in root_dir; {} is not overlaid",
                    s.display(),
                    d.display()
                ),
                Dangling::Fail => {
                    return Err(format!(
                        "{}: a dangling symlink (the copy follows symlinks)",
                        s.display()
                    ));
                }
            },
            OverlayEntry::Dir(mode) => {
                if h.view_stat(&d, true).map_err(|e| host_err(&e))?.is_none() {
                    host_fs::mkdir(h, &ds, Some(mode)).map_err(|e| host_err(&e))?;
                }
                copied += copy_onto(h, site, &s, &d, None, dangling)?;
            }
            OverlayEntry::File(mode, mtime) => {
                let data = site.read_overlay_file(&s).map_err(|e| e.to_string())?;
                let opts = host_fs::WriteOptions {
                    mode: Some(mode),
                    ..Default::default()
                };
                let written =
                    host_fs::write_bytes(h, &ds, &data, &opts).map_err(|e| host_err(&e))?;
                let secs = crate::host::effects::overlay::mtime_secs(mtime);
                let other = h
                    .view_stat(&d, true)
                    .map_err(|e| host_err(&e))?
                    .is_none_or(|st| st.mtime != secs);
                if written || other {
                    h.submit(Effect::SetMtime { path: d, mtime })
                        .map_err(|e| host_err(&e))?;
                }
                copied += 1;
            }
        }
    }
    Ok(copied)
}

/// Run `walk` on a fresh Apply session over `root` whose undo journal is labelled `label`:
/// on success the session ends (its directories synced, the journal deleted) and its report
/// is returned with the walk's value; on failure
/// everything the walk wrote is put back ([`Host::fail_with_report`]) and the error is
/// `what: <message>`, with a `; not undone: <line>` for each change that could not be.
///
/// # Errors
/// [`PrepareError::Apply`]; [`PrepareError::Root`] when the root cannot be reopened.
pub fn apply_session<T>(
    root: &HostRoot,
    label: String,
    what: &'static str,
    walk: impl FnOnce(&mut Host) -> Result<T, String>,
) -> Result<(T, Report), PrepareError> {
    let options = HostOptions {
        undo: Some(label),
        ..HostOptions::default()
    };
    let mut h = Host::new(root.try_clone()?, ExecMode::Apply, options);
    match walk(&mut h) {
        Ok(value) => {
            let (report, ended) = h.finish_with_report();
            ended.map_err(|e| PrepareError::Apply {
                what,
                message: host_err(&e),
            })?;
            Ok((value, report))
        }
        Err(mut message) => {
            let (_, undone, ended) = h.fail_with_report();
            for line in undone.not_undone {
                message.push_str("; not undone: ");
                message.push_str(&line);
            }
            if let Err(e) = ended {
                message.push_str("; ");
                message.push_str(&host_err(&e));
            }
            Err(PrepareError::Apply { what, message })
        }
    }
}

/// A host error (the session's or an area's) as one line, its causes included.
fn host_err(e: &(dyn std::error::Error + 'static)) -> String {
    crate::script::host_api::error_chain(e)
}

/// The permission bits of the folder `dir` on this machine (symlinks followed).
fn source_mode(dir: &Path) -> Result<u32, String> {
    std::fs::metadata(dir)
        .map(|m| m.mode() & 0o7777)
        .map_err(|e| format!("failed to read {}: {e}", dir.display()))
}

/// The last component of a copy dir, for an undo journal's label.
fn label_of(copy_dir: &Path) -> String {
    copy_dir.file_name().map_or_else(
        || "package".to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// `COPY_RESOLV`: copy the agent's `/etc/resolv.conf` over the host's, resolved inside the
/// root. A missing source is not an error (nothing to copy).
///
/// # Errors
/// Reading the source or writing the host file failed.
pub fn copy_resolv(root: &HostRoot, source: &Path) -> Result<(), PrepareError> {
    match std::fs::read(source) {
        Ok(data) => {
            AgentFiles::new(root).write_atomic(Path::new("/etc/resolv.conf"), &data, None)?;
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
        let report = overlay(&root, Path::new("/pkg")).unwrap();
        let writes = report.changes.iter().filter(|c| c.kind == "write");
        assert_eq!(writes.count(), 1);
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

    /// Issue 30.2: a `root_dir` overlay that fails half-way (a file where the host has a
    /// directory) leaves none of its files or directories written and names the path.
    #[test]
    fn an_overlay_failing_half_way_writes_nothing_and_names_the_path() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        // Name order: /aaa/new.conf (a new directory and file), /etc/a.conf, then /etc/b,
        // a file in the overlay where the host has a directory.
        std::fs::create_dir_all(r.join("pkg/root_dir/aaa")).unwrap();
        std::fs::create_dir_all(r.join("pkg/root_dir/etc")).unwrap();
        std::fs::write(r.join("pkg/root_dir/aaa/new.conf"), "n\n").unwrap();
        std::fs::write(r.join("pkg/root_dir/etc/a.conf"), "a=1\n").unwrap();
        std::fs::write(r.join("pkg/root_dir/etc/b"), "b\n").unwrap();
        std::fs::create_dir_all(r.join("etc/b")).unwrap();
        std::fs::write(r.join("etc/a.conf"), "old\n").unwrap();
        let root = HostRoot::open(r).unwrap();
        let e = overlay(&root, Path::new("/pkg")).unwrap_err();
        let message = crate::chain::render(&e);
        assert!(message.contains("/etc/b"), "{message}");
        assert!(
            !r.join("aaa").exists(),
            "/aaa was left by the failed overlay"
        );
        assert_eq!(std::fs::read(r.join("etc/a.conf")).unwrap(), b"old\n");
        assert!(r.join("etc/b").is_dir());
    }

    /// Issue 30.2: the plan of an overlay (the preflight's Plan session) lists exactly the
    /// changes its apply makes (the agent's [`overlay`]), mtimes included, and a second
    /// plan after the apply lists none.
    #[test]
    fn the_plan_of_an_overlay_lists_exactly_what_its_apply_does() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let t0 = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
        let t1 = std::time::UNIX_EPOCH + std::time::Duration::new(1_100_000_000, 5);
        let file = |p: &str, content: &str, mode: u32, mtime: std::time::SystemTime| {
            let p = r.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, content).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            let f = std::fs::File::options().write(true).open(&p).unwrap();
            f.set_modified(mtime).unwrap();
        };
        let dir = |p: &str, mode: u32| {
            std::fs::create_dir_all(r.join(p)).unwrap();
            std::fs::set_permissions(r.join(p), std::fs::Permissions::from_mode(mode)).unwrap();
        };
        dir("etc", 0o755);
        file("etc/same.conf", "same\n", 0o644, t0);
        file("etc/old.conf", "old\n", 0o644, t0);
        file("pkg/root_dir/etc/demo.conf", "k=v\n", 0o640, t1);
        file("pkg/root_dir/etc/same.conf", "same\n", 0o644, t0);
        file("pkg/root_dir/etc/old.conf", "new\n", 0o600, t1);
        file("pkg/root_dir/opt/tool/run.sh", "x\n", 0o755, t1);
        dir("pkg/root_dir/etc", 0o700);
        dir("pkg/root_dir/opt", 0o750);
        dir("pkg/root_dir/opt/tool", 0o755);
        let root = HostRoot::open(r).unwrap();
        let site = PackageSite::Copy {
            root: &root,
            copy_dir: Path::new("/pkg"),
        };
        let plan = |root: &HostRoot| {
            let mut h = Host::new(
                root.try_clone().unwrap(),
                ExecMode::Plan,
                HostOptions::default(),
            );
            let site = PackageSite::Copy {
                root,
                copy_dir: Path::new("/pkg"),
            };
            let src = Path::new("/pkg/root_dir");
            copy_onto(&mut h, &site, src, Path::new("/"), None, Dangling::Skip).unwrap();
            lines(&h.finish().unwrap())
        };
        let planned = plan(&root);
        let applied = lines(&overlay(&root, Path::new("/pkg")).unwrap());
        drop(site);
        assert_eq!(planned, applied);
        let t1_shown = "2004-11-09T11:33:20.000000005Z";
        assert_eq!(
            applied,
            [
                "write: create /etc/demo.conf (mode 0640)".to_string(),
                format!("mtime: set mtime /etc/demo.conf {t1_shown}"),
                "write: update /etc/old.conf (mode 0644 -> 0600)".to_string(),
                format!("mtime: set mtime /etc/old.conf {t1_shown}"),
                "mkdir: create directory /opt (mode 0750)".to_string(),
                "mkdir: create directory /opt/tool (mode 0755)".to_string(),
                "write: create /opt/tool/run.sh (mode 0755)".to_string(),
                format!("mtime: set mtime /opt/tool/run.sh {t1_shown}"),
            ]
        );
        let mode = |p: &str| std::fs::metadata(r.join(p)).unwrap().mode() & 0o7777;
        let mtime = |p: &str| std::fs::metadata(r.join(p)).unwrap().modified().unwrap();
        assert_eq!(
            (mode("etc"), mode("opt"), mode("opt/tool")),
            (0o755, 0o750, 0o755)
        );
        assert_eq!((mode("etc/demo.conf"), mtime("etc/demo.conf")), (0o640, t1));
        assert_eq!((mode("etc/old.conf"), mtime("etc/old.conf")), (0o600, t1));
        assert_eq!(std::fs::read(r.join("etc/old.conf")).unwrap(), b"new\n");
        assert_eq!(mtime("etc/same.conf"), t0);
        assert_eq!(
            (mode("opt/tool/run.sh"), mtime("opt/tool/run.sh")),
            (0o755, t1)
        );
        assert_eq!(plan(&root), Vec::<String>::new());
    }

    /// `<kind> <summary>` of each change of `report`, in order.
    fn lines(report: &crate::host::Report) -> Vec<String> {
        report
            .changes
            .iter()
            .map(|c| format!("{}: {}", c.kind, c.summary))
            .collect()
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
