//! Apply batching (the session's batch, [`crate::host::effects::session`]) and the spellings of one path: a batch continues
//! only with calls that name the same file, and each call's change names the path as the
//! call spelled it (as without batching).

use std::os::unix::fs::symlink;

use crate::host::ExecMode;
use crate::host::files::fs::{self, LineOptions};
use crate::host::testutil::TestHost;

fn o() -> LineOptions {
    LineOptions::default()
}

/// `summary` of every change, in order.
fn summaries(r: &crate::host::Report) -> Vec<String> {
    r.changes.iter().map(|c| c.summary.clone()).collect()
}

#[test]
fn a_dotdot_through_a_symlink_does_not_continue_the_lexical_files_batch() {
    // `/etc/link/../f` resolves physically (the kernel's `..` after the link): `/opt/f`,
    // while its lexical normal form is `/etc/f`. Batched and unbatched applies must write
    // the same files.
    let mut got = Vec::new();
    for diffs in [true, false] {
        let t = TestHost::new();
        t.file("/etc/f", "x\n");
        t.file("/opt/d/keep", "");
        t.file("/opt/f", "o\n");
        symlink("../opt/d", t.p("/etc/link")).unwrap();
        let mut h = t.host_with(ExecMode::Apply, |o| o.diffs = diffs);
        assert!(fs::ensure_line(&mut h, "/etc/link/../f", "a", &o()).unwrap());
        assert!(fs::ensure_line(&mut h, "/etc/f", "b", &o()).unwrap());
        assert!(fs::ensure_line(&mut h, "/etc/link/../f", "c", &o()).unwrap());
        let r = h.finish().unwrap();
        assert_eq!(t.read("/opt/f"), "o\na\nc\n", "diffs: {diffs}");
        assert_eq!(t.read("/etc/f"), "x\nb\n", "diffs: {diffs}");
        got.push(summaries(&r));
    }
    assert_eq!(got[0], got[1]);
    assert_eq!(
        got[0],
        [
            "update /etc/link/../f",
            "update /etc/f",
            "update /etc/link/../f"
        ]
    );
}

#[test]
fn batched_changes_name_each_calls_spelling_of_the_path() {
    let mut got = Vec::new();
    for diffs in [true, false] {
        let t = TestHost::new();
        t.file("/etc/f", "x\n");
        let mut h = t.host_with(ExecMode::Apply, |o| o.diffs = diffs);
        assert!(fs::ensure_line(&mut h, "/etc/f", "a", &o()).unwrap());
        assert!(fs::ensure_line(&mut h, "/etc//f", "b", &o()).unwrap());
        assert!(fs::ensure_line(&mut h, "/etc/./f", "c", &o()).unwrap());
        assert!(fs::remove_line(&mut h, "/etc/../etc/f", "^a$").unwrap());
        let r = h.finish().unwrap();
        assert_eq!(t.read("/etc/f"), "x\nb\nc\n", "diffs: {diffs}");
        got.push(summaries(&r));
    }
    assert_eq!(got[0], got[1]);
    assert_eq!(
        got[0],
        [
            "update /etc/f",
            "update /etc//f",
            "update /etc/./f",
            "update /etc/../etc/f"
        ]
    );
}

#[test]
fn a_final_slash_does_not_continue_the_files_batch() {
    // `/etc/f/` names a directory: the kernel refuses it for a file (`ENOTDIR`), with or
    // without a batch open on `/etc/f`.
    for diffs in [true, false] {
        let t = TestHost::new();
        t.file("/etc/f", "x\n");
        let mut h = t.host_with(ExecMode::Apply, |o| o.diffs = diffs);
        assert!(fs::ensure_line(&mut h, "/etc/f", "a", &o()).unwrap());
        for bad in ["/etc/f/", "/etc/f/."] {
            let e = fs::ensure_line(&mut h, bad, "b", &o()).unwrap_err();
            assert!(
                crate::chain::render(&e).ends_with("Not a directory (os error 20)"),
                "diffs: {diffs}: {bad}: {e}"
            );
        }
        h.finish().unwrap();
        assert_eq!(t.read("/etc/f"), "x\na\n", "diffs: {diffs}");
    }
}

/// Whether the path lock of host path `key` is free (taken and released at once).
fn lock_free(t: &TestHost, key: &str) -> bool {
    use nix::fcntl::{Flock, FlockArg};
    let lock = crate::host::root::pathlock::lock_file(std::path::Path::new(key));
    match std::fs::File::open(t.p(lock.to_str().unwrap())) {
        Ok(f) => Flock::lock(f, FlockArg::LockExclusiveNonblock).is_ok(),
        Err(_) => true,
    }
}

#[test]
fn a_dotdot_spelling_locks_the_file_it_writes() {
    // The lock of `/etc/link/../f` must be `/opt/f`'s, the file written, so that another
    // process editing `/opt/f` waits for the batch.
    let t = TestHost::new();
    t.file("/etc/f", "x\n");
    t.file("/opt/f", "o\n");
    t.file("/opt/d/keep", "");
    symlink("../opt/d", t.p("/etc/link")).unwrap();
    let mut h = t.host(ExecMode::Apply);
    assert!(fs::ensure_line(&mut h, "/etc/link/../f", "a", &o()).unwrap());
    assert!(!lock_free(&t, "/opt/f"), "the batch holds /opt/f's lock");
    assert!(lock_free(&t, "/etc/f"));
    h.finish().unwrap();
    assert!(lock_free(&t, "/opt/f"));
    assert_eq!(t.read("/opt/f"), "o\na\n");
}
