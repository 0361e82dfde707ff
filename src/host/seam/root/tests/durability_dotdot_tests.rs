//! `fsync1` ([`crate::host::root::durability`]) and a `..` after a symlink: the directory synced
//! at the end of the step is the one the rename, creation or unlink happened in, which the
//! kernel resolves physically (`/etc/link/../w.conf` with `link -> ../opt/d` is
//! `/opt/w.conf`), not the lexical parent `/etc`.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::host::ExecMode;
use crate::host::files::fs::{self, WriteOptions};
use crate::host::root::HostRoot;
use crate::host::root::durability::DirSyncs;
use crate::host::testutil::TestHost;

fn p(v: &[&str]) -> Vec<PathBuf> {
    v.iter().map(PathBuf::from).collect()
}

#[test]
fn a_dotdot_after_a_symlink_syncs_the_physical_directory() {
    let t = TestHost::new();
    t.file("/opt/d/keep", "");
    t.file("/etc/f", "x\n");
    symlink("../opt/d", t.p("/etc/link")).unwrap();
    let mut h = t.host(ExecMode::Apply);
    assert!(
        fs::write(
            &mut h,
            "/etc/link/../w.conf",
            "w\n",
            &WriteOptions::default()
        )
        .unwrap()
    );
    assert!(fs::remove(&mut h, "/etc/link/../../etc/f").unwrap());
    assert_eq!(t.read("/opt/w.conf"), "w\n");
    assert_eq!(
        h.dir_syncs()
            .resolved(&crate::host::root::HostRoot::open(&t.root).unwrap())
            .unwrap(),
        p(&["/etc", "/opt"]),
        "noted: {:?}",
        h.dir_syncs().pending()
    );
    h.finish().unwrap();
}

#[test]
fn noted_spellings_resolve_to_one_directory_each() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("etc/a")).unwrap();
    std::fs::create_dir_all(dir.path().join("opt/d")).unwrap();
    symlink("../opt/d", dir.path().join("etc/link")).unwrap();
    let root = HostRoot::open(dir.path()).unwrap();
    let d = DirSyncs::default();
    d.add_parent_of(Path::new("/etc/a/x"));
    d.add_parent_of(Path::new("/etc/a/../a/y"));
    d.add_parent_of(Path::new("/etc/link/../z"));
    // A final `..` names the directory itself: its entry is in the directory above.
    d.add_parent_of(Path::new("/etc/link/.."));
    d.add(Path::new("/etc/link/../d/"));
    d.add_parent_of(Path::new("/gone/../gone/z"));
    assert_eq!(
        d.resolved(&root).unwrap(),
        p(&["/", "/etc/a", "/opt", "/opt/d"]),
        "noted: {:?}",
        d.pending()
    );
    d.sync(&root).unwrap();
    assert!(d.pending().is_empty());
}
