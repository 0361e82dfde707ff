//! A `node_restart` interrupt and the SIGTERM of the node's shutdown (issue 21: upstream's
//! agent exits 143 when the shutdown stops it, and the operator then sees the node fail).
//! The agent exits 0 when the SIGTERM follows the reboot it issued, leaving
//! `node_restart_0.pending` for the run after the boot; a SIGTERM before any reboot was
//! issued is a pod deletion, and the interrupt exits 1 without marker or reboot.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::util::*;

const NODE_RESTART: &str = "eyJ0eXBlIjoibm9kZV9yZXN0YXJ0In0=";
const MARKERS: &str = "/t/state/interrupts/flags/sky-0000-1_demo_1.0.0";
const BOOT_A: &str = "11111111-2222-3333-4444-555555555555";
const BOOT_B: &str = "66666666-7777-8888-9999-000000000000";

/// The children of every thread of `pid` (zombies included: a child is listed until reaped).
fn children(pid: Pid) -> String {
    let mut all = String::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            all.push_str(&std::fs::read_to_string(t.path().join("children")).unwrap_or_default());
        }
    }
    all
}

/// Wait for `child` to exit within 30 s (SIGKILL and panic otherwise); its exit code.
fn wait_exit(child: std::process::Child, what: &str) -> i32 {
    let pid = Pid::from_raw(child.id() as i32);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut child = child;
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(s) => exit_code(s.expect("wait")),
        Err(_) => {
            let _ = kill(pid, Signal::SIGKILL);
            panic!("the agent did not exit after SIGTERM ({what})");
        }
    }
}

fn reboot_root() -> FakeRoot {
    let mut fr = FakeRoot::new();
    fr.interrupt_setup();
    fr.write("/proc/sys/kernel/random/boot_id", format!("{BOOT_A}\n"));
    fr
}

/// `reboot` is issued and returns 0; the shutdown's SIGTERM arrives while the agent waits
/// for it: exit 0, `node_restart_0.pending` holds the boot id, no `.complete` yet. After the
/// boot (a new boot id) the next run completes the interrupt without rebooting again.
#[test]
fn shutdown_sigterm_after_the_reboot_exits_0_with_the_pending_marker() {
    require_root!();
    let fr = reboot_root();
    let r = fr.root_str();
    let mut child = fr.spawn_args(&["interrupt", &r, "/t/pkg", NODE_RESTART]);
    let pid = Pid::from_raw(child.id() as i32);
    let (_, stdout) = line_reader(child.stdout.take().expect("stdout"));
    let (_, stderr) = line_reader(child.stderr.take().expect("stderr"));
    // `reboot` recorded its call and was reaped: the agent now waits for the shutdown.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(fr.calls().is_some_and(|c| c == "reboot \n") && children(pid).trim().is_empty()) {
        if Instant::now() > deadline {
            let _ = kill(pid, Signal::SIGKILL);
            panic!(
                "reboot was not run and reaped within 30 s; calls {:?}",
                fr.calls()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    kill(pid, Signal::SIGTERM).expect("send SIGTERM");
    let code = wait_exit(child, "after the reboot");
    let out = stdout.join().unwrap();
    let err = stderr.join().unwrap();
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        err.lines().any(|l| l
            == "skyhook-agent: received SIGTERM: the running step may finish, no further step will start"),
        "{err}"
    );
    // The SIGTERM came after `reboot` returned, not while it ran.
    assert!(!err.contains("SIGTERM while rebooting"), "{err}");
    assert_eq!(
        fr.read(&format!("{MARKERS}/node_restart_0.pending")),
        format!("boot-id:{BOOT_A}\n")
    );
    assert!(!fr.exists(&format!("{MARKERS}/node_restart_0.complete")));

    // The node came back with a new boot id: the interrupt completes, no second reboot.
    fr.write("/proc/sys/kernel/random/boot_id", format!("{BOOT_B}\n"));
    let again = fr.interrupt(NODE_RESTART);
    again.code(0);
    again.has_line(&format!(
        "node_restart_0 completed: the node rebooted (boot id {BOOT_A} -> {BOOT_B})"
    ));
    assert_eq!(fr.calls().as_deref(), Some("reboot \n"));
    assert!(!fr.exists(&format!("{MARKERS}/node_restart_0.pending")));
    assert!(fr.exists(&format!("{MARKERS}/node_restart_0.complete")));
}

/// A SIGTERM while the interrupt still waits for the package lock (before any reboot was
/// issued) exits 1: no `reboot`, no pending or complete marker.
#[test]
fn sigterm_before_the_reboot_is_issued_exits_1_without_a_marker() {
    use nix::fcntl::{Flock, FlockArg};
    require_root!();
    let fr = reboot_root();
    let lock_file = fr.t("state/locks/demo.lock");
    std::fs::create_dir_all(lock_file.parent().unwrap()).unwrap();
    let held = Flock::lock(
        std::fs::File::create(&lock_file).unwrap(),
        FlockArg::LockExclusive,
    )
    .expect("hold the package lock");
    let r = fr.root_str();
    let mut child = fr.spawn_args(&["interrupt", &r, "/t/pkg", NODE_RESTART]);
    let pid = Pid::from_raw(child.id() as i32);
    let (_, stdout) = line_reader(child.stdout.take().expect("stdout"));
    let (err_lines, stderr) = line_reader(child.stderr.take().expect("stderr"));
    let waiting = format!(
        "WARNING: waiting for the package lock {T}/state/locks/demo.lock (held by another agent)"
    );
    if let Err(e) = await_line(&mut child, &err_lines, &waiting) {
        panic!("{e}");
    }
    kill(pid, Signal::SIGTERM).expect("send SIGTERM");
    let code = wait_exit(child, "waiting for the lock");
    let out = stdout.join().unwrap();
    let err = stderr.join().unwrap();
    drop(held);
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(fr.calls(), None, "reboot was run");
    assert!(!fr.exists(&format!("{MARKERS}/node_restart_0.pending")));
    assert!(!fr.exists(&format!("{MARKERS}/node_restart_0.complete")));
}
