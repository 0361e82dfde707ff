//! Tests of [`HostRoot`]'s reads and writes.

use super::*;
use std::ffi::OsString;
use std::fs::Permissions;
use std::io::{self};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn root() -> (tempfile::TempDir, HostRoot) {
    let d = tempfile::tempdir().unwrap();
    let r = HostRoot::open(d.path()).unwrap();
    (d, r)
}

#[test]
fn write_atomic_creates_parents_and_content() {
    let (d, r) = root();
    r.write_atomic(Path::new("/a/b/c.txt"), b"hello", None)
        .unwrap();
    assert_eq!(std::fs::read(d.path().join("a/b/c.txt")).unwrap(), b"hello");
    let m = std::fs::metadata(d.path().join("a/b/c.txt")).unwrap();
    assert_eq!(m.mode() & 0o777, 0o644);
    // no temp file left behind
    assert_eq!(std::fs::read_dir(d.path().join("a/b")).unwrap().count(), 1);
}

#[test]
fn write_atomic_accepts_255_byte_names() {
    // regression: the temporary name used to embed the destination name and overflowed
    let (d, r) = root();
    let name = "f".repeat(255);
    r.write_atomic(&Path::new("/").join(&name), b"x", None)
        .unwrap();
    assert_eq!(std::fs::read(d.path().join(&name)).unwrap(), b"x");
}

#[test]
fn write_atomic_keeps_existing_mode() {
    let (d, r) = root();
    std::fs::write(d.path().join("f"), "old").unwrap();
    std::fs::set_permissions(d.path().join("f"), Permissions::from_mode(0o600)).unwrap();
    r.write_atomic(Path::new("/f"), b"new", None).unwrap();
    let m = std::fs::metadata(d.path().join("f")).unwrap();
    assert_eq!(m.mode() & 0o777, 0o600);
    assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"new");
}

#[test]
fn absolute_symlink_stays_inside_root() {
    let outside = tempfile::tempdir().unwrap();
    let (d, r) = root();
    let sentinel = outside.path().join("victim");
    std::os::unix::fs::symlink(&sentinel, d.path().join("link")).unwrap();
    r.write_atomic(Path::new("/link"), b"x", None).unwrap();
    assert!(!sentinel.exists(), "write escaped the root");
    // the link stays, its target was created inside the root
    assert!(
        std::fs::symlink_metadata(d.path().join("link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let inside = d.path().join(sentinel.strip_prefix("/").unwrap());
    assert_eq!(std::fs::read(inside).unwrap(), b"x");
}

#[test]
fn dotdot_cannot_climb() {
    let (d, r) = root();
    r.write_atomic(Path::new("/../../../etc-escape-test"), b"x", None)
        .unwrap();
    assert!(d.path().join("etc-escape-test").exists());
    assert!(!Path::new("/etc-escape-test").exists());
}

#[test]
fn relative_paths_are_refused() {
    let (_d, r) = root();
    let e = r.write_atomic(Path::new("rel/x"), b"x", None).unwrap_err();
    assert!(
        e.to_string().contains("paths must be absolute")
            || e.source.to_string().contains("absolute")
    );
}

#[test]
fn create_new_is_exclusive() {
    let (_d, r) = root();
    r.create_new(Path::new("/logs/x.log"), 0o644).unwrap();
    let e = r.create_new(Path::new("/logs/x.log"), 0o644).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
}

#[test]
fn read_dir_sorted_and_remove() {
    let (_d, r) = root();
    r.write_atomic(Path::new("/d/b"), b"", None).unwrap();
    r.write_atomic(Path::new("/d/a"), b"", None).unwrap();
    let names: Vec<_> = r
        .read_dir(Path::new("/d"))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec![OsString::from("a"), OsString::from("b")]);
    assert!(r.remove_file(Path::new("/d/a")).unwrap());
    assert!(!r.remove_file(Path::new("/d/a")).unwrap());
    assert_eq!(r.read_opt(Path::new("/d/a")).unwrap(), None);
}

/// A missing path is absent (`Ok(None)`, not-found errors) without pathrs' error path, and a
/// path below a symlink leading out of the root is resolved inside it: absent there even
/// when its target exists outside; below a confined directory a symlink on the way is still
/// refused (`ELOOP`), not taken for absent.
#[test]
fn a_missing_path_below_a_symlink_leading_out_is_absent_inside_the_root() {
    let (d, r) = root();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("present"), b"outside").unwrap();
    std::os::unix::fs::symlink(outside.path(), d.path().join("abs")).unwrap();
    std::os::unix::fs::symlink("../../../../../..", d.path().join("up")).unwrap();
    let rel = outside.path().strip_prefix("/").unwrap();
    for host in [
        Path::new("/abs/present"),
        Path::new("/abs/missing"),
        &Path::new("/up").join(rel).join("present"),
        Path::new("/nothing/here"),
    ] {
        assert!(r.metadata(host).unwrap().is_none(), "{}", host.display());
        assert!(
            r.symlink_metadata(host).unwrap().is_none(),
            "{}",
            host.display()
        );
        assert!(!r.exists(host).unwrap(), "{}", host.display());
        assert_eq!(r.read_opt(host).unwrap(), None, "{}", host.display());
        let e = r.read(host).unwrap_err();
        assert!(e.is_not_found(), "{e}");
        assert_eq!(e.source.raw_os_error(), Some(libc::ENOENT));
        assert_eq!(
            e.to_string(),
            format!(
                "failed to read {} under host root {}",
                host.display(),
                d.path().display()
            )
        );
    }
    // The same spelling where the target exists inside the root: found there.
    let inside = d.path().join(rel);
    std::fs::create_dir_all(&inside).unwrap();
    std::fs::write(inside.join("present"), b"inside").unwrap();
    assert_eq!(r.read(Path::new("/abs/present")).unwrap(), b"inside");
    // Below a confined directory a symlink is not followed, missing target or not.
    std::fs::create_dir_all(d.path().join("dest/in")).unwrap();
    std::os::unix::fs::symlink("in", d.path().join("dest/lnk")).unwrap();
    std::os::unix::fs::symlink(outside.path(), d.path().join("dest/out")).unwrap();
    let _guard = r.confine(Path::new("/dest")).unwrap();
    for host in [
        "/dest/lnk/missing",
        "/dest/out/missing",
        "/dest/out/present",
    ] {
        let e = r.metadata(Path::new(host)).unwrap_err();
        assert!(!e.is_not_found(), "{host}: {e}");
        let e = crate::chain::render(&e);
        assert!(e.contains("a symlink on the way below /dest, where"), "{e}");
    }
    assert!(r.metadata(Path::new("/dest/in/missing")).unwrap().is_none());
}
