//! `fs::copy_tree` streams its files: byte-exact copies of files over the whole-file read
//! limit with their modes and owners, the plan's lines for copies (no diff of their content),
//! the undo of a failed step, a source that changed since the copy was decided, and a FIFO
//! given as a copy's source.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::host::effects::effect::Effect;
use crate::host::files::copy_tree::{TreeOptions, copy_tree};
use crate::host::root::HostRoot;
use crate::host::root::digest::sha256_tag;
use crate::host::root::read::MAX_READ_BYTES;
use crate::host::testutil::{TestHost, tree};
use crate::host::{ExecMode, Host, HostOptions};

/// `len` bytes of a pattern that differs from one 64 KiB chunk to the next.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i / 65_536) as u8).wrapping_mul(31) ^ (i as u8) ^ seed)
        .collect()
}

/// An error with its sources, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(&format!(": {c}"));
        cur = c.source();
    }
    s
}

fn set(t: &TestHost, p: &str, mode: u32, uid: u32, gid: u32) {
    std::fs::set_permissions(t.p(p), std::fs::Permissions::from_mode(mode)).unwrap();
    std::os::unix::fs::chown(t.p(p), Some(uid), Some(gid)).unwrap();
}

fn meta(t: &TestHost, p: &str) -> (u32, u32, u32) {
    let m = std::fs::symlink_metadata(t.p(p)).unwrap();
    (m.mode() & 0o7777, m.uid(), m.gid())
}

fn copy(h: &mut Host) -> bool {
    copy_tree(h, "/src", "/dst", &TreeOptions::default()).unwrap()
}

/// A source tree: `/src/big` (3 MiB and a bit, 0640, 1000:1001) and `/src/d/small`.
fn source() -> (TestHost, Vec<u8>) {
    let t = TestHost::new();
    let big = pattern(3 * 1024 * 1024 + 5, 7);
    std::fs::create_dir_all(t.p("/src/d")).unwrap();
    std::fs::write(t.p("/src/big"), &big).unwrap();
    t.file("/src/d/small", "small\n");
    set(&t, "/src/big", 0o640, 1000, 1001);
    (t, big)
}

#[test]
fn plan_lists_each_copy_without_diffing_it_and_apply_copies_byte_exact() {
    let (t, big) = source();
    let before = tree(&t.root);
    let mut h = t.host(ExecMode::Plan);
    assert!(copy(&mut h));
    let r = h.finish().unwrap();
    assert_eq!(tree(&t.root), before, "a plan changed the root");
    let big_change = r.changes.iter().find(|c| c.target == "/dst/big").unwrap();
    assert_eq!(
        (big_change.kind.as_str(), big_change.summary.as_str()),
        ("write", "create /dst/big (mode 0640) (owner 1000:1001)")
    );
    assert_eq!(
        big_change.diff.as_deref(),
        Some(
            "Files /dev/null and b/dst/big differ (copied from /src/big, 3145733 bytes: not diffed)\n"
        )
    );
    assert_eq!(big_change.after, Some(sha256_tag(&big)));
    let lines: Vec<String> = r.changes.iter().map(|c| c.summary.clone()).collect();
    assert_eq!(
        lines,
        [
            "create directory /dst (mode 0755)",
            "create /dst/big (mode 0640) (owner 1000:1001)",
            "create directory /dst/d (mode 0755)",
            "create /dst/d/small (mode 0644) (owner 0:0)",
        ]
    );

    // Each file is one streamed copy, not a write of its content. (The recording double
    // reads the real root, where the directories must then exist.)
    std::fs::create_dir_all(t.p("/dst/d")).unwrap();
    let mut rec = Host::recording(HostRoot::open(&t.root).unwrap(), HostOptions::default());
    assert!(copy(&mut rec));
    let copies: Vec<(String, String)> = rec
        .recorded_effects()
        .iter()
        .filter_map(|e| match e {
            Effect::CopyFile { src, path, .. } => {
                Some((src.display().to_string(), path.display().to_string()))
            }
            Effect::WriteFile { path, .. } => panic!("{} written from memory", path.display()),
            _ => None,
        })
        .collect();
    assert_eq!(
        copies,
        [
            ("/src/big".to_string(), "/dst/big".to_string()),
            ("/src/d/small".to_string(), "/dst/d/small".to_string())
        ]
    );

    let mut h = t.host(ExecMode::Apply);
    assert!(copy(&mut h));
    h.finish().unwrap();
    assert_eq!(std::fs::read(t.p("/dst/big")).unwrap(), big);
    assert_eq!(t.read("/dst/d/small"), "small\n");
    assert_eq!(meta(&t, "/dst/big"), (0o640, 1000, 1001));

    // Copied again: nothing differs.
    let mut h = t.host(ExecMode::Apply);
    assert!(!copy(&mut h));
    assert!(h.finish().unwrap().changes.is_empty());

    // The same content under another mode and owner: a chmod and a chown, no copy.
    set(&t, "/dst/big", 0o600, 0, 0);
    let mut h = t.host(ExecMode::Apply);
    assert!(copy(&mut h));
    let r = h.finish().unwrap();
    assert_eq!(
        r.change_kinds_and_targets(),
        [("chmod", "/dst/big"), ("chown", "/dst/big")]
    );
    assert_eq!(meta(&t, "/dst/big"), (0o640, 1000, 1001));

    // Same size, other content: found by the digests, copied.
    let mut edited = big.clone();
    edited[2 * 1024 * 1024] ^= 1;
    std::fs::write(t.p("/dst/big"), &edited).unwrap();
    let mut h = t.host(ExecMode::Check);
    assert!(copy(&mut h));
    let drift = h.finish().unwrap();
    assert_eq!(drift.changes.len(), 1);
    assert_eq!(drift.changes[0].summary, "update /dst/big");
    assert_eq!(drift.changes[0].before, Some(sha256_tag(&edited)));
    let mut h = t.host(ExecMode::Apply);
    assert!(copy(&mut h));
    h.finish().unwrap();
    assert_eq!(std::fs::read(t.p("/dst/big")).unwrap(), big);
}

#[test]
fn a_file_over_the_whole_read_limit_is_copied() {
    let t = TestHost::new();
    std::fs::create_dir_all(t.p("/src")).unwrap();
    // Sparse: no disk for the source; its copy is read and written through.
    let f = std::fs::File::create(t.p("/src/huge")).unwrap();
    f.set_len(MAX_READ_BYTES + 1).unwrap();
    drop(f);
    let mut h = t.host(ExecMode::Apply);
    assert!(copy(&mut h));
    h.finish().unwrap();
    assert_eq!(
        std::fs::metadata(t.p("/dst/huge")).unwrap().len(),
        MAX_READ_BYTES + 1
    );
}

#[test]
fn a_failed_step_puts_the_previous_files_back() {
    let (t, _) = source();
    std::fs::create_dir_all(t.p("/dst")).unwrap();
    t.file("/dst/big", "the old big\n");
    set(&t, "/dst/big", 0o644, 5, 6);
    std::fs::create_dir_all(t.p("/var/lib/skyhook")).unwrap();
    let before = tree(&t.root);
    let mut h = t.host_with(ExecMode::Apply, |o| o.undo = Some("pkg-apply".into()));
    assert!(copy(&mut h));
    assert_eq!(meta(&t, "/dst/big"), (0o640, 1000, 1001));
    let (_, undone, result) = h.fail_with_report();
    result.unwrap();
    assert!(undone.not_undone.is_empty(), "{:?}", undone.not_undone);
    // The same tree as before (the path locks are the agent's bookkeeping, kept on purpose).
    let without_locks = |mut m: std::collections::BTreeMap<std::path::PathBuf, String>| {
        m.retain(|p, _| !p.starts_with("var/lib/skyhook/.locks"));
        m
    };
    let (after, before) = (without_locks(tree(&t.root)), without_locks(before));
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    assert!(after == before, "a file differs after the undo");
    assert_eq!(t.read("/dst/big"), "the old big\n");
    assert_eq!(meta(&t, "/dst/big"), (0o644, 5, 6));
    assert!(!t.p("/dst/d").exists());
}

#[test]
fn a_source_changed_since_the_copy_was_decided_fails_and_writes_nothing() {
    let (t, big) = source();
    std::fs::create_dir_all(t.p("/dst")).unwrap();
    t.file("/dst/big", "old\n");
    let decided = sha256_tag(&big)["sha256:".len()..].to_string();
    // The source changes after its digest was taken.
    std::fs::write(t.p("/src/big"), pattern(big.len(), 9)).unwrap();
    let mut h = t.host(ExecMode::Apply);
    let e = h
        .submit(Effect::CopyFile {
            src: "/src/big".into(),
            path: "/dst/big".into(),
            sha256: Some(decided.clone()),
            mode: None,
            uid: None,
            gid: None,
        })
        .unwrap_err();
    let e = chain(&e);
    assert!(
        e.contains(&format!(
            "the source /src/big changed since the copy was decided (sha256 {decided}, now "
        )),
        "{e}"
    );
    assert_eq!(t.read("/dst/big"), "old\n");
    let names: Vec<String> = std::fs::read_dir(t.p("/dst"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["big"], "a temporary file was left");
}

#[test]
fn a_fifo_as_a_copy_source_is_refused_without_blocking() {
    let t = TestHost::new();
    std::fs::create_dir_all(t.p("/src")).unwrap();
    let mode = nix::sys::stat::Mode::from_bits_truncate(0o600);
    nix::unistd::mkfifo(&t.p("/src/p"), mode).unwrap();
    let root = t.root.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    // On a thread, so a read that blocked on the FIFO fails the test instead of hanging it.
    std::thread::spawn(move || {
        let mut h = Host::new(
            HostRoot::open(&root).unwrap(),
            ExecMode::Apply,
            HostOptions::default(),
        );
        let r = h.submit(Effect::CopyFile {
            src: "/src/p".into(),
            path: "/dst/p".into(),
            sha256: None,
            mode: None,
            uid: None,
            gid: None,
        });
        let _ = tx.send(r.map(drop).map_err(|e| chain(&e)));
    });
    let r = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the copy of a FIFO blocked");
    let e = r.unwrap_err();
    assert!(
        e.contains("/src/p") && e.contains("not a regular file (a fifo)"),
        "{e}"
    );
    assert!(!Path::new(&t.p("/dst/p")).exists());
}
