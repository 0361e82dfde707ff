//! Crash safety (issue 8): faults injected into real `skyhook-run --apply` and
//! `skyhook-agent` processes.
//!
//! - deferred work is recorded ahead of the drop-in write: an agent SIGKILLed between the
//!   drop-in and its daemon-reload or grub regeneration leaves the record, and the rerun runs
//!   the work exactly once and removes it;
//! - concurrent read-modify-writes of one host file by two processes lose no update;
//! - an agent waiting for the package lock ends on SIGTERM, with exit 1 and no `START`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::util::{
    AGENT, FakeRoot, T, await_line, config, exit_code, line_reader, run_to_end, step,
};

const SKYHOOK_RUN: &str = env!("CARGO_BIN_EXE_skyhook-run");

/// `skyhook-run SCRIPT --root ROOT --apply --env K=V...` with a known environment.
fn skyhook_run(script: &Path, root: &Path, env: &[&str]) -> Command {
    let mut c = Command::new(SKYHOOK_RUN);
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .arg(script)
        .arg("--root")
        .arg(root)
        .arg("--apply")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for e in env {
        c.arg("--env").arg(e);
    }
    c
}

/// A directory on a tmpfs when `/dev/shm` is one (thousands of fsyncs stay cheap), else in
/// the target dir.
fn fast_tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let base: PathBuf = if shm.is_dir() {
        shm.into()
    } else {
        env!("CARGO_TARGET_TMPDIR").into()
    };
    tempfile::Builder::new()
        .prefix("skyhook-crash-")
        .tempdir_in(base)
        .expect("tempdir")
}

/// Two `skyhook-run --apply` processes at once, each adding 200 blocks and 200 lines of its
/// own to the same file, 20 rounds on a fresh file: every block and line of both is there
/// at the end of every round (without the path lock, a round loses dozens).
#[test]
fn concurrent_ensure_block_and_line_lose_no_update() {
    let dir = fast_tempdir();
    let script = dir.path().join("edit.rhai");
    std::fs::write(
        &script,
        "let who = env(\"WHO\");\n\
         for i in 0..200 {\n\
           fs::ensure_block(\"/etc/shared.conf\", `${who}-${i}`, `${who}=${i}`);\n\
           fs::ensure_line(\"/etc/shared.conf\", `${who} line ${i}`);\n\
         }\n",
    )
    .unwrap();
    for round in 0..20 {
        let root = dir.path().join(format!("root{round}"));
        std::fs::create_dir_all(root.join("etc")).unwrap();
        let a = skyhook_run(&script, &root, &["WHO=a"]).spawn().unwrap();
        let b = skyhook_run(&script, &root, &["WHO=b"]).spawn().unwrap();
        for (who, child) in [("a", a), ("b", b)] {
            let run = run_to_end(child);
            assert_eq!(run.code, 0, "round {round} {who}: {}", run.stderr);
            assert!(
                run.stdout.ends_with("Apply: 400 changed, 0 unchanged.\n"),
                "round {round} {who}: {}",
                run.stdout
            );
        }
        let text = std::fs::read_to_string(root.join("etc/shared.conf")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2 * 200 * 4, "round {round}");
        for who in ["a", "b"] {
            for i in 0..200 {
                let begin = format!("# BEGIN skyhook {who}-{i}");
                let at = lines.iter().position(|l| *l == begin);
                let at = at.unwrap_or_else(|| panic!("round {round}: block {who}-{i} lost"));
                assert_eq!(
                    lines[at + 1..at + 3],
                    [format!("{who}={i}"), format!("# END skyhook {who}-{i}")],
                    "round {round}"
                );
                let line = format!("{who} line {i}");
                assert!(
                    lines.contains(&line.as_str()),
                    "round {round}: {line:?} lost"
                );
            }
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
}

/// A recording stub `$T/bin/<name>` that SIGKILLs the agent (`$AGENT_PID`) the first time it
/// is called with exactly the arguments `$KILL_AT` names (`<name> <args>`), then exits 0.
fn killing_stub(fr: &FakeRoot, name: &str) {
    fr.write_mode(
        &format!("{T}/bin/{name}"),
        format!(
            "#!/bin/sh\necho \"{name} $*\" >> {T}/calls\n\
             if [ \"$KILL_AT\" = \"{name} $*\" ] && [ ! -e {T}/killed ]; then\n\
               : > {T}/killed\n  kill -9 \"$AGENT_PID\"\nfi\nexit 0\n"
        ),
        0o755,
    );
}

/// `skyhook-run --apply` of `script` against `fr`, with `AGENT_PID` set to its own pid (the
/// shell that execs it passes `$$`).
fn apply_with_pid(fr: &FakeRoot, script: &Path, kill_at: &str) -> crate::util::Run {
    let child = Command::new("sh")
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .arg("-c")
        .arg("exec \"$@\" --env \"AGENT_PID=$$\"")
        .arg("sh")
        .arg(SKYHOOK_RUN)
        .arg(script)
        .arg("--root")
        .arg(fr.root())
        .arg("--apply")
        .arg("--env")
        .arg(format!("PATH={T}/bin:/usr/bin:/bin"))
        .arg("--env")
        .arg(format!("KILL_AT={kill_at}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn skyhook-run");
    run_to_end(child)
}

/// SIGKILL of a real `skyhook-run --apply` at three points between writing a drop-in and
/// finishing its deferred work: right after the systemd drop-in (in a command the script
/// runs next), inside the `systemctl daemon-reload` itself, and inside `update-grub` after a
/// grub drop-in. Each time the record is left with the step's undo journal; the rerun first
/// undoes the killed step's files (the drop-in and the record go), then writes the drop-in
/// again and runs the work exactly once and removes the record, and a third run runs
/// nothing.
#[test]
fn sigkill_between_a_drop_in_and_its_deferred_work_loses_nothing() {
    require_root!();
    let cases = [
        (
            "after the drop-in",
            "service::drop_in(\"x\", \"a.conf\", \"[Service]\\nX=1\\n\");\nrun([\"marker\"]);\n",
            "marker ",
            "systemctl daemon-reload",
            "daemon-reload.json",
        ),
        (
            "in the reload",
            "service::drop_in(\"x\", \"a.conf\", \"[Service]\\nX=1\\n\");\n",
            "systemctl daemon-reload",
            "systemctl daemon-reload",
            "daemon-reload.json",
        ),
        (
            "in update-grub",
            "grub::set_cmdline(\"99-x\", [\"a=1\"]);\n",
            "update-grub ",
            "update-grub ",
            "grub.json",
        ),
    ];
    for (point, body, kill_at, work, record) in cases {
        let fr = FakeRoot::new();
        fr.write("/etc/os-release", "ID=ubuntu\n");
        for stub in ["marker", "systemctl", "update-grub"] {
            killing_stub(&fr, stub);
        }
        let script = fr.t("step.rhai");
        std::fs::write(&script, body).unwrap();
        let record = format!("/var/lib/skyhook/.deferred/{record}");
        let count = |fr: &FakeRoot| {
            fr.read_opt(&format!("{T}/calls"))
                .unwrap_or_default()
                .lines()
                .filter(|l| *l == work)
                .count()
        };

        let run = apply_with_pid(&fr, &script, kill_at);
        assert_eq!(run.code, -9, "{point}: not killed: {}", run.stderr);
        assert!(fr.exists(&format!("{T}/killed")), "{point}");
        assert!(fr.exists(&record), "{point}: no record after the kill");
        let before = count(&fr);
        assert!(before <= 1, "{point}");

        let run = apply_with_pid(&fr, &script, kill_at);
        assert_eq!(run.code, 0, "{point}: {}{}", run.stdout, run.stderr);
        assert!(
            run.stderr.contains("left by a step that did not end"),
            "{point}: the rerun did not undo the killed step: {}",
            run.stderr
        );
        assert!(
            run.stdout.contains("1 changed"),
            "{point}: the rerun did not write the drop-in again: {}",
            run.stdout
        );
        assert_eq!(count(&fr), before + 1, "{point}: not exactly once");
        assert!(!fr.exists(&record), "{point}: record left");

        let run = apply_with_pid(&fr, &script, kill_at);
        assert_eq!(run.code, 0, "{point}: {}", run.stderr);
        assert_eq!(count(&fr), before + 1, "{point}: ran again");
    }
}

/// An agent blocked on the package lock (held here, by the test) ends on SIGTERM: it says it
/// waits, then, after the signal, exits 1 with the stopping warning, without writing
/// `START` or running a step. With the lock free again the same mode runs normally.
#[test]
fn sigterm_while_waiting_for_the_package_lock_exits_1_without_start() {
    use nix::fcntl::{Flock, FlockArg};
    use nix::sys::signal::{Signal, kill};
    use std::time::Duration;
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    let lock_file = fr.t("state/locks/demo.lock");
    std::fs::create_dir_all(lock_file.parent().unwrap()).unwrap();
    let held = Flock::lock(
        std::fs::File::create(&lock_file).unwrap(),
        FlockArg::LockExclusive,
    )
    .expect("hold the package lock");

    let mut child = fr.spawn("apply");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (_, stdout) = line_reader(child.stdout.take().expect("stdout"));
    let (err_lines, stderr) = line_reader(child.stderr.take().expect("stderr"));
    let waiting = format!(
        "WARNING: waiting for the package lock {T}/state/locks/demo.lock (held by another agent)"
    );
    if let Err(e) = await_line(&mut child, &err_lines, &waiting) {
        panic!(
            "{e}; stdout:\n{}\nstderr:\n{}",
            stdout.join().unwrap(),
            stderr.join().unwrap()
        );
    }
    kill(pid, Signal::SIGTERM).expect("send SIGTERM");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(s) => s.expect("wait"),
        Err(_) => {
            let _ = kill(pid, Signal::SIGKILL);
            panic!("the agent still waits for the lock after SIGTERM");
        }
    };
    let out = stdout.join().unwrap();
    let err = stderr.join().unwrap();
    assert_eq!(exit_code(status), 1, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        err.lines().any(|l| l
            == "WARNING: stopping before the first step: SIGTERM received while waiting for the package lock"),
        "{err}"
    );
    assert!(!fr.flag("START").exists(), "START written");
    assert!(!out.contains("foo a b"), "a step ran: {out}");
    drop(held);

    let run = fr.run("apply");
    run.code(0);
    assert!(fr.flag("START").exists());
    assert!(
        !run.stderr.contains("waiting for the package lock"),
        "{}",
        run.stderr
    );
}

/// Two real agents at once on two tuning-shaped `.rhai` packages (`tune-a`, `tune-b`): each
/// writes its own limits file and containerd drop-in, and edits the shared files the public
/// tuning package edits on every node: 20 managed blocks each in one shared limits file and
/// the `pam_limits` line in `/etc/pam.d/common-session`, 20 rounds. Every block of both
/// packages is present, the pam line once, and each agent's daemon-reload ran.
#[test]
fn two_agents_on_tuning_shaped_packages_keep_each_others_edits() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_mode(
        &format!("{T}/bin/systemctl"),
        format!("#!/bin/sh\necho \"systemctl $*\" >> {T}/calls\n"),
        0o755,
    );
    fr.write(
        "/etc/pam.d/common-session",
        "session required pam_unix.so\n",
    );
    let body = "let pkg = env(\"SKYHOOK_PACKAGE\");\n\
                fs::write(`/etc/security/limits.d/999-${pkg}.conf`, \"* hard nofile 1048576\\n\");\n\
                service::drop_in(\"containerd\", `999-${pkg}.conf`, \"[Service]\\nLimitNOFILE=1048576\\n\");\n\
                for i in 0..20 {\n\
                  fs::ensure_block(\"/etc/security/limits.conf\", `${pkg}-${i}`, `* hard nproc ${i}`);\n\
                }\n\
                fs::ensure_line(\"/etc/pam.d/common-session\", \"session required pam_limits.so\");\n";
    for pkg in ["tune-a", "tune-b"] {
        let mut s = step("apply", "apply.rhai", &[]);
        s["env"] = serde_json::json!({ "SKYHOOK_PACKAGE": pkg });
        let mut cfg = config(serde_json::json!({
            "apply": [s.clone()], "apply-check": [s.clone()],
            "config": [s.clone()], "config-check": [s],
        }));
        cfg["package_name"] = pkg.into();
        fr.write(
            &format!("{T}/{pkg}/config.json"),
            serde_json::to_vec_pretty(&cfg).unwrap(),
        );
        fr.write_mode(&format!("{T}/{pkg}/skyhook_dir/apply.rhai"), body, 0o755);
    }
    let spawn = |pkg: &str| {
        Command::new(AGENT)
            .args([
                OsStr::new("config"),
                fr.root().as_os_str(),
                OsStr::new(&format!("{T}/{pkg}")),
            ])
            .env_clear()
            .envs(fr.env_vars())
            .env("SKYHOOK_RESOURCE_ID", format!("sky-0000-1_{pkg}_1.0.0"))
            .env("PATH", format!("{T}/bin:/usr/bin:/bin"))
            .current_dir(fr.root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the agent")
    };
    for round in 0..20 {
        let _ = std::fs::remove_file(fr.host("/etc/security/limits.conf"));
        for f in [
            "/etc/security/limits.d",
            "/etc/systemd/system/containerd.service.d",
        ] {
            let _ = std::fs::remove_dir_all(fr.host(f));
        }
        fr.write(
            "/etc/pam.d/common-session",
            "session required pam_unix.so\n",
        );
        let _ = std::fs::remove_file(fr.t("calls"));
        let a = spawn("tune-a");
        let b = spawn("tune-b");
        for (pkg, child) in [("tune-a", a), ("tune-b", b)] {
            let run = run_to_end(child);
            assert_eq!(
                run.code, 0,
                "round {round} {pkg}: {}{}",
                run.stdout, run.stderr
            );
        }
        let limits = fr.read("/etc/security/limits.conf");
        for pkg in ["tune-a", "tune-b"] {
            for i in 0..20 {
                assert!(
                    limits.contains(&format!(
                        "# BEGIN skyhook {pkg}-{i}\n* hard nproc {i}\n# END skyhook {pkg}-{i}\n"
                    )),
                    "round {round}: block {pkg}-{i} lost"
                );
            }
            assert!(fr.exists(&format!("/etc/security/limits.d/999-{pkg}.conf")));
            assert!(fr.exists(&format!(
                "/etc/systemd/system/containerd.service.d/999-{pkg}.conf"
            )));
        }
        assert_eq!(limits.lines().count(), 2 * 20 * 3, "round {round}");
        assert_eq!(
            fr.read("/etc/pam.d/common-session"),
            "session required pam_unix.so\nsession required pam_limits.so\n",
            "round {round}"
        );
        let calls = fr.read(&format!("{T}/calls"));
        assert_eq!(
            calls
                .lines()
                .filter(|l| *l == "systemctl daemon-reload")
                .count(),
            2,
            "round {round}: {calls}"
        );
        assert!(!fr.exists("/var/lib/skyhook/.deferred/daemon-reload.json"));
    }
}

/// `strace` from `PATH`, `None` when it is not installed.
fn strace() -> Option<PathBuf> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join("strace"))
        .find(|p| p.is_file())
}

/// 100 `fs::ensure_line` calls into one file in one `skyhook-run --apply` are one atomic
/// write (src/host/batch.rs): `strace -f -e trace=rename,renameat,renameat2` of the run
/// shows exactly one rename onto `f.conf`, and one onto `g.conf`, whose edit ends the batch
/// before it; the report still has one change per changing call.
#[test]
fn a_hundred_line_edits_of_one_file_are_one_rename() {
    let Some(strace) = strace() else {
        skip!("strace is not installed (.ci/run installs it)");
    };
    let dir = fast_tempdir();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    let script = dir.path().join("l.rhai");
    std::fs::write(
        &script,
        "for i in 0..100 { fs::ensure_line(\"/etc/f.conf\", `line ${i}`); }\n\
         fs::ensure_line(\"/etc/f.conf\", \"line 7\");\n\
         fs::ensure_line(\"/etc/g.conf\", \"g\");\n",
    )
    .unwrap();
    let out = dir.path().join("strace.out");
    let run = skyhook_run(&script, &root, &[]);
    let mut cmd = Command::new(&strace);
    cmd.args(["-f", "-qq", "-e", "trace=rename,renameat,renameat2", "-o"])
        .arg(&out)
        .arg(run.get_program())
        .args(run.get_args())
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let r = run_to_end(cmd.spawn().expect("spawn strace"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.ends_with("Apply: 101 changed, 1 unchanged.\n"),
        "{}",
        r.stdout
    );
    let want: String = (0..100).map(|i| format!("line {i}\n")).collect();
    assert_eq!(
        std::fs::read_to_string(root.join("etc/f.conf")).unwrap(),
        want
    );
    assert_eq!(
        std::fs::read_to_string(root.join("etc/g.conf")).unwrap(),
        "g\n"
    );
    // The target of each rename: the last quoted argument.
    let trace = std::fs::read_to_string(&out).unwrap();
    let targets: Vec<&str> = trace
        .lines()
        .filter(|l| l.contains("rename"))
        .map(|l| l.rsplit('"').nth(1).unwrap_or(l))
        .collect();
    assert_eq!(targets, ["f.conf", "g.conf"], "{trace}");
}

/// A script that fails after line edits has them undone like every file change of a
/// failed step (they are written, then put back), and its error is the run's.
#[test]
fn a_failing_script_has_its_batched_line_edits_undone() {
    let dir = fast_tempdir();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/f.conf"), "a\n").unwrap();
    let script = dir.path().join("fail.rhai");
    std::fs::write(
        &script,
        "fs::ensure_line(\"/etc/f.conf\", \"b\");\n\
         fs::ensure_block(\"/etc/f.conf\", \"x\", \"c\");\n\
         throw \"boom\";\n",
    )
    .unwrap();
    let r = run_to_end(skyhook_run(&script, &root, &[]).spawn().unwrap());
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("boom"), "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(root.join("etc/f.conf")).unwrap(),
        "a\n"
    );
}
