//! The undo journal's records ahead of a batch (issue 31) under SIGKILL: a `.rhai` step
//! copies a tree over existing files (`fs::copy_tree`, one new subdirectory), extracts a
//! tar over existing files (`fs::extract`), changes a directory's mode and removes it
//! (moved aside, its mode put back from the earlier record), then fails. The agent is
//! SIGKILLed at its K-th sync, rename, link or unlink (strace
//! `inject=SYSCALL:signal=KILL:when=K`, as `undo_journal` does), the undo of the failed
//! step included, and then the recovery of a step killed late is killed anywhere too. A
//! rerun must leave every file as it was: all-or-nothing for files, no journal left.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::json;

use crate::undo_journal::{SYSCALLS, differences, killed_at, which};
use crate::util::*;

const STEP: &str = r#"
fs::copy_tree("/srv/src", "/opt/dst");
fs::extract("/srv/a.tar", "/opt/x");
fs::chmod("/opt/tree", 0o700);
fs::remove_all("/opt/tree");
if step.args[0] == "fail" { run(["false"]); }
"#;

fn tar() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, body) in [("f1", "new 1\n"), ("f2", "new 2\n"), ("dir/f3", "new 3\n")] {
        let mut hd = tar::Header::new_gnu();
        hd.set_path(name).unwrap();
        hd.set_mode(0o644);
        hd.set_size(body.len() as u64);
        hd.set_cksum();
        b.append(&hd, body.as_bytes()).unwrap();
    }
    b.into_inner().unwrap()
}

fn package(outcome: &str) -> FakeRoot {
    let fr = FakeRoot::new();
    fr.write_config(&config(json!({
        "apply": [step("batch", "batch.rhai", &[outcome])],
        "apply-check": [step("c", "c.sh", &[])],
    })));
    fr.write_step("batch.rhai", STEP);
    fr.write_step("c.sh", "#!/bin/sh\nexit 0\n");
    fr.write_mode("/etc/os-release", "ID=ubuntu\n", 0o644);
    for f in ["a", "b", "c"] {
        fr.write_mode(&format!("/srv/src/{f}"), format!("new {f}\n"), 0o644);
        fr.write_mode(&format!("/opt/dst/{f}"), format!("old {f}\n"), 0o600);
    }
    fr.write_mode("/srv/src/sub/d", "new d\n", 0o644);
    fr.write("/srv/a.tar", tar());
    fr.write_mode("/opt/x/f1", "old 1\n", 0o640);
    fr.write_mode("/opt/x/f2", "old 2\n", 0o640);
    fr.write_mode("/opt/tree/a", "A\n", 0o644);
    fr.write_mode("/opt/tree/b/c", "C\n", 0o600);
    fr
}

/// Every entry below `/opt` and the journals' directory: kind, mode, owner, content.
fn host_state(fr: &FakeRoot) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            if rel.starts_with("var/lib/skyhook/.locks") {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            let head = format!("{:o} {}:{}", m.mode(), m.uid(), m.gid());
            let desc = if m.is_dir() {
                walk(base, &p, out);
                format!("dir {head}")
            } else {
                let bytes = std::fs::read(&p).unwrap_or_default();
                format!("file {head} {}", String::from_utf8_lossy(&bytes))
            };
            out.insert(rel, desc);
        }
    }
    let mut out = BTreeMap::new();
    for d in ["opt", "var/lib/skyhook/.undo"] {
        walk(fr.root(), &fr.root().join(d), &mut out);
    }
    out
}

/// SIGKILL at every sync, rename, link and unlink of a failing step of batches (and of
/// its undo), then a rerun: the host as it was.
#[test]
fn sigkill_anywhere_in_a_failing_batch_step_then_rerun_leaves_the_files_as_they_were() {
    require_root!();
    let Some(strace) = which("strace") else {
        skip!("strace is not installed (.ci/run installs it)");
    };
    let clean = package("fail");
    let want = host_state(&clean);
    let run = clean.run("apply");
    assert_eq!(run.code, 1, "{}", run.all());
    assert_eq!(
        differences(&want, &host_state(&clean)),
        Vec::<String>::new()
    );
    let ok = package("ok");
    let run = ok.run("apply");
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(ok.read("/opt/dst/sub/d"), "new d\n");
    assert_eq!(ok.read("/opt/x/dir/f3"), "new 3\n");
    assert!(!ok.exists("/opt/tree"));
    let mut kill_points = 0;
    for syscall in SYSCALLS {
        // Bounded: a run makes fewer than 60 such calls of each kind.
        for k in 1..=60 {
            let fr = package("fail");
            let killed = killed_at(&strace, &fr, syscall, k);
            if killed.code == 1 {
                break;
            }
            kill_points += 1;
            let ctx = format!("killed at {syscall} #{k} (status {})", killed.code);
            let rerun = fr.run("apply");
            assert_eq!(rerun.code, 1, "{ctx}: rerun: {}", rerun.all());
            assert!(
                !rerun.stdout.contains("not undone"),
                "{ctx}: {}",
                rerun.all()
            );
            let diff = differences(&want, &host_state(&fr));
            assert!(diff.is_empty(), "{ctx}: {diff:#?}\nrerun:\n{}", rerun.all());
        }
    }
    assert!(kill_points >= 20, "only {kill_points} kill points");
    eprintln!("undo_journal_batch: {kill_points} kill points");
}

/// A failing step of batches killed at its move-aside of the removed directory (its
/// `renameat2`, after the copies and the extract), then its recovery killed at every
/// sync, rename and unlink, then a last run: the host as it was.
#[test]
fn sigkill_anywhere_in_the_recovery_of_a_batch_step_then_rerun_leaves_the_files_as_they_were() {
    require_root!();
    let Some(strace) = which("strace") else {
        skip!("strace is not installed (.ci/run installs it)");
    };
    let want = host_state(&package("fail"));
    let mut kill_points = 0;
    for syscall in ["fsync", "renameat2", "rename", "unlinkat", "rmdir"] {
        for k in 1..=40 {
            let fr = package("fail");
            let first = killed_at(&strace, &fr, "renameat2", 1);
            assert!(!matches!(first.code, 0 | 1), "not killed: {}", first.all());
            assert_eq!(fr.read("/opt/dst/a"), "new a\n", "killed before the copies");
            let second = killed_at(&strace, &fr, syscall, k);
            if second.code == 1 {
                break;
            }
            kill_points += 1;
            let ctx = format!("recovery killed at {syscall} #{k} (status {})", second.code);
            let rerun = fr.run("apply");
            assert_eq!(rerun.code, 1, "{ctx}: rerun: {}", rerun.all());
            assert!(
                !rerun.stdout.contains("not undone"),
                "{ctx}: {}",
                rerun.all()
            );
            let diff = differences(&want, &host_state(&fr));
            assert!(diff.is_empty(), "{ctx}: {diff:#?}\nrerun:\n{}", rerun.all());
        }
    }
    assert!(kill_points >= 10, "only {kill_points} kill points");
    eprintln!("undo_journal_batch recovery: {kill_points} kill points");
}
