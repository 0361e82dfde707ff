//! The undo journal of a `.rhai` step under SIGKILL: the agent runs a package whose step
//! makes ten kinds of file change (writes, a line edit, a drop-in, a directory, a removal,
//! mode and owner, a live sysctl value, a user, an fstab line, a tree removal, a blacklist
//! and a grub drop-in) and then fails, or succeeds. It is SIGKILLed at its K-th `fsync`,
//! `fdatasync` or `rename` (per thread, as strace counts: `inject=SYSCALL:signal=KILL:when=K`,
//! as `kill_anywhere` does), also inside the undo of the failed step. Then the agent is
//! rerun, and the host must equal a clean run's: a failed step leaves every file as it was,
//! a succeeded one as a clean success leaves them; no journal is left.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::json;

use crate::util::*;

const STEP: &str = r#"
fs::write("/etc/new.conf", "new\n");
fs::write("/etc/existing", "changed\n", #{mode: 0o600});
fs::ensure_line("/etc/edit.conf", "b=2");
service::drop_in("containerd", "10-x.conf", "[Service]\nX=1\n");
fs::mkdir("/opt/newdir/sub", 0o700);
fs::remove("/etc/gone");
fs::chmod("/etc/modeme", 0o600);
fs::chown("/etc/modeme", 1, 1);
sysctl::set("vm.swappiness", "10");
user::ensure("gpuops", #{system: true, create_home: false});
mount::ensure("/data", #{source: "UUID=abc", fstype: "ext4", state: "present"});
fs::remove_all("/opt/tree");
kmod::blacklist("nouveau");
grub::set_cmdline("99-x", ["hugepages=4"]);
// A failure only the apply meets (the preflight's plan runs no command): `false` exits 1.
if step.args[0] == "fail" { run(["false"]); }
"#;

/// The first `tool` on `PATH`.
pub(crate) fn which(tool: &str) -> Option<std::path::PathBuf> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file())
}

/// Write a new file at `host` (never through a hard link to the roots' template).
fn put(fr: &FakeRoot, host: &str, content: &str, mode: u32) {
    let _ = std::fs::remove_file(fr.host(host));
    fr.write_mode(host, content, mode);
}

fn package(outcome: &str) -> FakeRoot {
    let mut fr = FakeRoot::new();
    fr.write_config(&config(json!({
        "apply": [step("tune", "tune.rhai", &[outcome])],
        "apply-check": [step("c", "c.sh", &[])],
    })));
    fr.write_step("tune.rhai", STEP);
    fr.write_step("c.sh", "#!/bin/sh\nexit 0\n");
    put(&fr, "/etc/os-release", "ID=ubuntu\nID_LIKE=debian\n", 0o644);
    put(&fr, "/etc/existing", "old\n", 0o640);
    put(&fr, "/etc/edit.conf", "a=1\n", 0o644);
    put(&fr, "/etc/gone", "bye\n", 0o644);
    put(&fr, "/etc/modeme", "m\n", 0o644);
    put(&fr, "/proc/sys/vm/swappiness", "60\n", 0o644);
    put(&fr, "/proc/1/mountinfo", "", 0o644);
    put(
        &fr,
        "/etc/passwd",
        "root:x:0:0:root:/root:/bin/bash\n",
        0o644,
    );
    put(&fr, "/etc/shadow", "root:*:19000:0:99999:7:::\n", 0o640);
    put(&fr, "/etc/group", "root:x:0:\n", 0o644);
    put(&fr, "/etc/gshadow", "root:*::\n", 0o640);
    put(&fr, "/etc/fstab", "/dev/sda1 / ext4 defaults 0 1\n", 0o644);
    put(&fr, "/opt/tree/a", "A\n", 0o644);
    put(&fr, "/opt/tree/b/c", "C\n", 0o600);
    for tool in ["systemctl", "update-grub", "update-initramfs"] {
        fr.write_mode(
            &format!("/t/bin/{tool}"),
            format!("#!/bin/sh\necho \"{tool} $*\" >> /t/calls\n"),
            0o755,
        );
    }
    fr.set_env("PATH", "/t/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    fr
}

/// The host files the step touches (and the journals' and records' directory): path,
/// kind, mode, owner, content.
fn host_state(fr: &FakeRoot) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            if rel.starts_with("var/lib/skyhook/.locks") || rel == "etc/.pwd.lock" {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            let head = format!("{:o} {}:{}", m.mode(), m.uid(), m.gid());
            let desc = if m.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                walk(base, &p, out);
                format!("dir {head}")
            } else {
                let bytes = std::fs::read(&p).unwrap();
                format!("file {head} {}", String::from_utf8_lossy(&bytes))
            };
            out.insert(rel, desc);
        }
    }
    let mut out = BTreeMap::new();
    for d in ["etc", "opt", "proc/sys", "var/lib/skyhook"] {
        walk(fr.root(), &fr.root().join(d), &mut out);
    }
    out
}

/// One line per path whose description differs between `a` and `b` (`path: before -> after`).
pub(crate) fn differences(
    a: &BTreeMap<String, String>,
    b: &BTreeMap<String, String>,
) -> Vec<String> {
    a.keys()
        .chain(b.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{k}: {:?} -> {:?}", a.get(k), b.get(k)))
        .collect()
}

/// The calls a run is killed at: every sync, rename (the journal's move-aside of a removal
/// is a `renameat2`), link (the journal's log, made unnamed, is linked once locked) and
/// unlink (temporary files, the journal's removal, lock files).
pub(crate) const SYSCALLS: [&str; 9] = [
    "fsync",
    "fdatasync",
    "rename",
    "renameat",
    "renameat2",
    "linkat",
    "unlink",
    "unlinkat",
    "rmdir",
];

/// Run the agent on `fr` under strace, SIGKILLed at its `k`-th `syscall` (per thread).
pub(crate) fn killed_at(strace: &Path, fr: &FakeRoot, syscall: &str, k: u32) -> Run {
    let mut cmd = Command::new(strace);
    cmd.args(["-f", "-qq", "-o", "/dev/null", "-e"])
        .arg(format!("trace={syscall}"))
        .arg("-e")
        .arg(format!("inject={syscall}:signal=KILL:when={k}"))
        .args([AGENT, "apply", &fr.root_str(), "/t/pkg"])
        .env_clear()
        .envs(fr.env_vars())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    run_to_end(cmd.spawn().expect("spawn strace"))
}

/// The recovery killed: a failing step is killed at its journal's 10th `fdatasync` (well
/// into its changes), then the next run, which recovers that journal before anything
/// else, is killed at its k-th sync, rename, link or unlink; a last run must leave the
/// host as a clean failing run does.
#[test]
fn sigkill_anywhere_in_the_recovery_then_rerun_leaves_the_host_as_it_was() {
    require_root!();
    let Some(strace) = which("strace") else {
        eprintln!("SKIPPED undo_journal: strace is not installed (.ci/run installs it)");
        return;
    };
    let clean = package("fail");
    let want = host_state(&clean);
    clean.run("apply").code(1);
    assert_eq!(
        differences(&want, &host_state(&clean)),
        Vec::<String>::new()
    );
    let mut kill_points = 0;
    for syscall in ["fsync", "renameat2", "rename", "unlinkat", "rmdir"] {
        // Bounded: the recovery makes fewer than 40 such calls of each kind.
        for k in 1..=40 {
            let fr = package("fail");
            let first = killed_at(&strace, &fr, "fdatasync", 10);
            assert!(!matches!(first.code, 0 | 1), "not killed: {}", first.stderr);
            let second = killed_at(&strace, &fr, syscall, k);
            if second.code == 1 {
                break;
            }
            kill_points += 1;
            let ctx = format!("recovery killed at {syscall} #{k} (status {})", second.code);
            let rerun = fr.run("apply");
            assert_eq!(rerun.code, 1, "{ctx}: rerun: {}", rerun.stderr);
            assert!(
                !rerun.stdout.contains("not undone"),
                "{ctx}: {}",
                rerun.stdout
            );
            let diff = differences(&want, &host_state(&fr));
            assert!(diff.is_empty(), "{ctx}: {diff:#?}\nrerun:\n{}", rerun.all());
        }
    }
    assert!(
        kill_points >= 10,
        "only {kill_points} kill points were reached"
    );
    eprintln!("undo_journal recovery: {kill_points} kill points");
}

fn kill_anywhere(outcome: &str, code: i32) {
    let Some(strace) = which("strace") else {
        skip!("strace is not installed (.ci/run installs it)");
    };
    let clean = package(outcome);
    let original = host_state(&clean);
    clean.run("apply").code(code);
    let want = host_state(&clean);
    if outcome == "fail" {
        assert_eq!(differences(&original, &want), Vec::<String>::new());
    }
    let mut kill_points = 0;
    for syscall in SYSCALLS {
        // Bounded: a run makes fewer than 80 such calls of each kind.
        for k in 1..=80 {
            let fr = package(outcome);
            let killed = killed_at(&strace, &fr, syscall, k);
            if killed.code == code {
                // Fewer than k such calls in a whole run: nothing more to kill at.
                break;
            }
            kill_points += 1;
            let ctx = format!(
                "{outcome}: killed at {syscall} #{k} (status {})",
                killed.code
            );
            let rerun = fr.run("apply");
            assert_eq!(rerun.code, code, "{ctx}: rerun: {}", rerun.stderr);
            if syscall == "fdatasync" {
                // Only the journal's log is fdatasync'ed: the journal exists, and the rerun
                // says it undid it before anything else.
                let first = rerun
                    .stdout
                    .lines()
                    .position(|l| l.contains("left by a step that did not end"));
                let start = rerun.stdout.lines().position(|l| l.contains("tune.rhai"));
                assert!(
                    first.is_some() && first < start,
                    "{ctx}: no undo line before the step: {}\nkilled run:\n{}",
                    rerun.all(),
                    killed.all()
                );
            }
            let got = host_state(&fr);
            let diff = differences(&want, &got);
            assert!(
                diff.is_empty(),
                "{ctx}: differs from a clean run: {diff:#?}\nrerun:\n{}",
                rerun.all()
            );
        }
    }
    assert!(
        kill_points >= 20,
        "only {kill_points} kill points were reached"
    );
    eprintln!("undo_journal {outcome}: {kill_points} kill points");
}

#[test]
fn sigkill_anywhere_in_a_failing_step_then_rerun_leaves_the_host_as_it_was() {
    require_root!();
    kill_anywhere("fail", 1);
}

#[test]
fn sigkill_anywhere_in_a_succeeding_step_then_rerun_equals_a_clean_run() {
    require_root!();
    kill_anywhere("ok", 0);
}
