//! The mode loop driven in-process: cancellation reaches a running bash step, a `.rhai` step
//! in a loop and a `run()` of a long command; each ends promptly, fails with its reason, and
//! no later step starts.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::mode::ModeRun;
use crate::host::root::HostRoot;
use crate::host::testutil::TestHost;
use crate::mode::console::Console;
use crate::mode::settings::{ResourceId, Settings};
use crate::package::Mode;
use crate::process::{Cancel, CancelReason};

/// A console writer that aborts `cancel` once the output it was given contains `marker`.
struct AbortOn {
    seen: Arc<Mutex<Vec<u8>>>,
    marker: &'static str,
    cancel: Cancel,
}

impl Write for AbortOn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let mut seen = self.seen.lock().unwrap();
        seen.extend_from_slice(b);
        if String::from_utf8_lossy(&seen).contains(self.marker) {
            self.cancel
                .abort(CancelReason::Remote("test-engine".into()));
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Run `apply` of a package whose first step is `first` (path, body) and whose second step
/// would write `/t/second-ran`; the console aborts the run's token when the first step
/// prints `STARTED`. Returns (ok, stdout, stderr, host).
fn run_cancelled(first: (&str, &str)) -> (bool, String, String, TestHost) {
    let t = TestHost::new();
    t.install_sh();
    let (path, body) = first;
    write_package(
        &t,
        json!({
            "apply": [step_json("first", path), step_json("second", "second.sh")],
            "apply-check": [step_json("c", "check.sh")]
        }),
    );
    t.file(&format!("/pkg/skyhook_dir/{path}"), body);
    t.file(
        "/pkg/skyhook_dir/second.sh",
        "#!/bin/sh\necho x > /t/second-ran\n",
    );
    t.file("/pkg/skyhook_dir/check.sh", "#!/bin/sh\nexit 0\n");
    blocking_fifo(&t);
    let (out, err) = (Arc::default(), Arc::default());
    let ok = run_mode_aborting_on(&t, Mode::Apply, &Cancel::new(), "STARTED", &out, &err).unwrap();
    (ok, text(&out), text(&err), t)
}

/// What a console stream captured, as text.
fn text(b: &Arc<Mutex<Vec<u8>>>) -> String {
    String::from_utf8_lossy(&b.lock().unwrap()).into_owned()
}

/// A step `name` at `path` of a package's config: no arguments, return code 0, on the
/// host, not idempotent.
fn step_json(name: &str, path: &str) -> serde_json::Value {
    json!({"name": name, "path": path, "arguments": [], "returncodes": [0],
           "on_host": true, "idempotence": false, "upgrade_step": false})
}

/// The config of package `demo` 1.0.0 with `modes` (mode to steps).
fn package_config(modes: serde_json::Value) -> serde_json::Value {
    json!({
        "schema_version": "v1", "package_name": "demo", "package_version": "1.0.0",
        "expected_config_files": [],
        "modes": modes
    })
}

/// [`package_config`] at `/pkg` of `t`.
fn write_package(t: &TestHost, modes: serde_json::Value) {
    t.file("/pkg/config.json", &package_config(modes).to_string());
}

/// A FIFO at `/t/fifo` of `t`, which a step reads to block until it is cancelled.
fn blocking_fifo(t: &TestHost) {
    std::fs::create_dir_all(t.p("/t")).unwrap();
    nix::unistd::mkfifo(
        &t.p("/t/fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
}

#[test]
fn cancel_ends_a_running_bash_step() {
    let (ok, out, _err, t) = run_cancelled((
        "long.sh",
        "#!/bin/sh\necho STARTED\nread x < /t/fifo\necho never > /t/after\n",
    ));
    assert!(!ok);
    assert!(out.contains("FAILED: long.sh  -15"), "{out}");
    assert!(!t.p("/t/after").exists());
    assert!(!t.p("/t/second-ran").exists(), "no later step starts");
    assert!(!t.p("/state/flags/demo/1.0.0").join("long.sh").exists());
}

#[test]
fn cancel_ends_a_rhai_step_in_a_loop() {
    // The preflight plans the step first: it spins only in the apply.
    let (ok, out, err, t) = run_cancelled((
        "spin.rhai",
        "print(\"STARTED\");\nif !step.dry_run { loop {} }\n",
    ));
    assert!(!ok);
    assert!(out.contains("FAILED: spin.rhai  1"), "{out}");
    assert!(err.contains("step cancelled"), "{err}");
    assert!(!t.p("/t/second-ran").exists());
}

#[test]
fn cancel_ends_a_run_of_a_long_command() {
    let (ok, out, err, t) = run_cancelled((
        "cmd.rhai",
        "print(\"STARTED\");\nrun([\"/bin/sh\", \"-c\", \"read x < /t/fifo\"], #{check: true});\n",
    ));
    assert!(!ok);
    assert!(out.contains("FAILED: cmd.rhai  1"), "{out}");
    assert!(err.contains("cancelled by test-engine"), "{err}");
    assert!(!t.p("/t/second-ran").exists());
}

/// A package of one step `s` (`path`, `body`) in every mode used here, at `/pkg` in a new
/// test host.
fn one_step_host(path: &str, body: &str) -> TestHost {
    let t = TestHost::new();
    let step = step_json("s", path);
    write_package(&t, json!({"apply": [step.clone()], "apply-check": [step]}));
    t.file(&format!("/pkg/skyhook_dir/{path}"), body);
    t
}

/// Run `mode` of the package at `/pkg` of `t` (state `/state`, logs `/log`) to its end;
/// returns (ok, stdout, stderr).
fn run_mode(t: &TestHost, mode: Mode, cancel: &Cancel) -> (bool, String, String) {
    let (ok, out, err) = try_run_mode(t, mode, cancel);
    (ok.unwrap(), out, err)
}

/// [`run_mode`] keeping the run's error.
fn try_run_mode(
    t: &TestHost,
    mode: Mode,
    cancel: &Cancel,
) -> (Result<bool, super::error::AgentError>, String, String) {
    let (out, err) = (Arc::default(), Arc::default());
    let ok = try_run_mode_into(t, mode, cancel, &out, &err);
    (ok, text(&out), text(&err))
}

/// [`try_run_mode`] writing the console's stdout and stderr into `out` and `err` as it runs.
fn try_run_mode_into(
    t: &TestHost,
    mode: Mode,
    cancel: &Cancel,
    out: &Arc<Mutex<Vec<u8>>>,
    err: &Arc<Mutex<Vec<u8>>>,
) -> Result<bool, super::error::AgentError> {
    run_mode_aborting_on(t, mode, cancel, "\u{0}never", out, err)
}

/// [`try_run_mode_into`] whose console aborts `cancel` once the agent printed `marker`.
fn run_mode_aborting_on(
    t: &TestHost,
    mode: Mode,
    cancel: &Cancel,
    marker: &'static str,
    out: &Arc<Mutex<Vec<u8>>>,
    err: &Arc<Mutex<Vec<u8>>>,
) -> Result<bool, super::error::AgentError> {
    let settings = Settings::from_env(
        [
            ("SKYHOOK_ROOT_DIR", "/state"),
            ("SKYHOOK_LOG_DIR", "/log"),
            ("PATH", "/bin"),
        ]
        .map(|(k, v)| (k.into(), v.into())),
    )
    .unwrap();
    let root = HostRoot::open(&t.root).unwrap();
    let id = ResourceId::parse("sky-1_demo_1.0.0").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let writer = |seen: &Arc<Mutex<Vec<u8>>>| {
        Box::new(AbortOn {
            seen: seen.clone(),
            marker,
            cancel: cancel.clone(),
        })
    };
    let console = Console::with_writers(writer(out), writer(err));
    rt.block_on(
        ModeRun {
            root: &root,
            settings: &settings,
            id: &id,
            copy_dir: Path::new("/pkg"),
            mode,
            cancel,
            console: &console,
            declarations: None,
            preflight: true,
        }
        .run(),
    )
}

/// A wall clock before 1970 or in the year 300000 runs the steps: flags, log names, history
/// and output timestamps use that time, or the nearest bound of years 1..=9999, instead of
/// panicking.
#[test]
fn a_clock_out_of_range_runs_the_steps_with_clamped_timestamps() {
    use std::time::{Duration, UNIX_EPOCH};
    let year: u64 = 365 * 86_400;
    let cases = [
        (
            UNIX_EPOCH - Duration::from_secs(5 * year),
            chrono::DateTime::from_timestamp(-5 * 365 * 86_400, 0).unwrap(),
        ),
        (
            UNIX_EPOCH + Duration::from_secs(298_030 * year),
            crate::clock::latest(),
        ),
    ];
    for (now, expect) in cases {
        let t = one_step_host("s.sh", "#!/bin/sh\necho hello\n");
        t.install_sh();
        crate::clock::set_for_test(Some(now));
        let apply = run_mode(&t, Mode::Apply, &Cancel::new());
        let check = run_mode(&t, Mode::ApplyCheck, &Cancel::new());
        crate::clock::set_for_test(None);
        let (ok, out, err) = apply;
        assert!(ok, "{out}\n{err}");
        assert!(check.0, "{}\n{}", check.1, check.2);
        let local = crate::pyfmt::isoformat(crate::clock::local_from(expect));
        assert_eq!(
            t.read("/state/flags/demo/1.0.0/s.sh_W11fWzBd"),
            format!("last_run: {local}\nstep_always_runs: False")
        );
        let ts = crate::logs::sink::file_timestamp(&expect);
        let logs: Vec<String> = std::fs::read_dir(t.p("/log/demo/1.0.0"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(logs.contains(&format!("s.sh-{ts}.log")), "{logs:?}");
        let history = t.read("/state/history/demo.json");
        let entry = crate::state::history::entry_time(expect);
        assert!(history.contains(&entry), "{history}");
    }
}

/// The `root_dir` overlay is written only once the package lock is held: an agent waiting for
/// the lock (here stopped while waiting) leaves the host files of the running holder as they
/// are; once the lock is free, the overlay is applied.
#[test]
fn the_root_dir_overlay_waits_for_the_package_lock() {
    let t = one_step_host("s.rhai", "print(\"ran\");\n");
    t.file("/pkg/root_dir/etc/demo.conf", "v2\n");
    t.file("/etc/demo.conf", "v1\n");
    let root = HostRoot::open(&t.root).unwrap();
    let held = crate::state::lock::lock_package(&root, Path::new("/state"), "demo").unwrap();
    // Stopped once it waits (a stop before would end the run in the preflight).
    let (out, err) = (Arc::default(), Arc::default());
    let ok = run_mode_aborting_on(
        &t,
        Mode::Apply,
        &Cancel::new(),
        "waiting for the package lock",
        &out,
        &err,
    )
    .unwrap();
    let err = text(&err);
    assert!(!ok);
    assert!(
        err.contains("waiting for the package lock /state/locks/demo.lock"),
        "{err}"
    );
    assert_eq!(t.read("/etc/demo.conf"), "v1\n", "written under the holder");
    drop(held);
    let (ok, _, err) = run_mode(&t, Mode::Apply, &Cancel::new());
    assert!(ok, "{err}");
    assert_eq!(t.read("/etc/demo.conf"), "v2\n");
}

/// A stop (SIGTERM) before or during the preflight ends the run before anything is
/// written: exit 1 with the stop warning, and no lock, overlay, `START`, flag, history or
/// log; the step does not run.
#[test]
fn a_stop_during_the_preflight_writes_nothing() {
    // regression: the preflight ignored the stop; the lock, the overlay and START were
    // written before the mode loop stopped before the step
    let t = one_step_host("s.rhai", "fs::write(\"/etc/ran.conf\", \"x\");\n");
    t.file("/pkg/root_dir/etc/demo.conf", "v2\n");
    let stopped = Cancel::new();
    stopped.stop(CancelReason::Signal("SIGTERM"));
    let (ok, out, err) = run_mode(&t, Mode::Apply, &stopped);
    assert!(!ok);
    assert!(
        err.contains(
            "WARNING: stopping before the first step: SIGTERM received during the preflight"
        ),
        "{err}"
    );
    assert!(!out.contains("apply s.rhai"), "{out}");
    for written in ["/state", "/log", "/etc/demo.conf", "/etc/ran.conf"] {
        assert!(!t.p(written).exists(), "{written} was written");
    }
}

/// The static check runs beside the plan's set-up (issue 31), but no script is planned
/// before it passed: a mode whose script the check refuses runs none of its queries, prints
/// the check's error only, and writes nothing.
#[test]
fn a_script_the_check_refuses_is_not_planned() {
    let t = one_step_host(
        "s.rhai",
        "query([\"sh\", \"-c\", \"echo x > /t/queried\"]);\nfs::ensure_blok(\"/etc/x\", \"b\", \"c\");\n",
    );
    t.install_sh();
    std::fs::create_dir_all(t.p("/t")).unwrap();
    let (ok, out, err) = try_run_mode(&t, Mode::Apply, &Cancel::new());
    assert!(ok.is_err(), "{out}{err}");
    assert!(
        err.contains("error: unknown function fs::ensure_blok"),
        "{err}"
    );
    assert_eq!(err.matches("error:").count(), 1, "{err}");
    assert!(out.contains("FAILED: s.rhai  1"), "{out}");
    assert!(
        !t.p("/t/queried").exists(),
        "the plan ran the script's query"
    );
    for written in ["/state", "/log"] {
        assert!(!t.p(written).exists(), "{written} was written");
    }
}

/// `skyhook-agent validate` refuses a check step whose path would forge a `check_results`
/// line, naming the step and the character, and exits 1.
#[test]
fn validate_names_a_control_character_in_a_step_path() {
    let d = tempfile::tempdir().unwrap();
    let cfg = package_config(json!({
        "apply": [step_json("s", "s.sh")],
        "apply-check": [step_json("s", "c.sh\nother.sh True")]
    }));
    std::fs::write(d.path().join("config.json"), cfg.to_string()).unwrap();
    let err = Arc::new(Mutex::new(Vec::new()));
    let console = Console::with_writers(
        Box::new(std::io::sink()),
        Box::new(AbortOn {
            seen: err.clone(),
            marker: "\u{0}never",
            cancel: Cancel::new(),
        }),
    );
    let valid = super::validate(&d.path().join("config.json"), &console);
    let err = text(&err);
    assert!(!valid);
    assert!(
        err.contains(
            "step \"c.sh\\nother.sh True\" of mode apply-check: path: contains the control character U+000A"
        ),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A flags or log directory that is a dangling symlink stops the run before `START` with an
/// error naming the link (not "File exists", nor 3,600 log names tried).
#[test]
fn a_dangling_flags_or_log_directory_is_named_before_start() {
    for (link, target, what) in [
        (
            "/state/flags",
            "/gone/flags",
            "flags directory /state/flags",
        ),
        ("/log/demo", "/gone/logs", "log directory /log/demo/1.0.0"),
    ] {
        let t = one_step_host("s.rhai", "print(\"ran\");\n");
        std::fs::create_dir_all(t.p(link).parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, t.p(link)).unwrap();
        let (res, _, _) = try_run_mode(&t, Mode::Apply, &Cancel::new());
        let e = res.unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "the {what} cannot be used: {link} is a dangling symlink (to {target}); create its target or remove the link"
            )
        );
        assert!(!t.p("/state/flags/START").exists());
        assert!(!t.p("/gone").exists());
    }
}

/// Poll `cond` until it holds or `secs` seconds pass; its last value.
fn wait_until(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    cond()
}

/// The package lock file removed (a cleanup), or replaced by a rename onto its path, while
/// agent A runs a step: agent B, started afterwards, waits for A instead of locking the new
/// file and running its step beside A; once A ends, B runs. The step appends `start`, waits
/// on a FIFO, then appends `end`: overlapping runs would log `start` twice in a row.
#[test]
fn a_removed_or_replaced_lock_file_does_not_let_a_second_agent_run_beside_the_holder() {
    use std::os::unix::fs::OpenOptionsExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    for replace in [false, true] {
        let t = one_step_host(
            "s.sh",
            "#!/bin/sh\necho start >> /t/log\nread x < /t/fifo\necho end >> /t/log\n",
        );
        // Idempotence disabled: B runs the step again although A's flag exists.
        let config = t.read("/pkg/config.json");
        t.file(
            "/pkg/config.json",
            &config.replace("\"idempotence\":false", "\"idempotence\":true"),
        );
        t.install_sh();
        blocking_fifo(&t);
        let log = || std::fs::read_to_string(t.p("/t/log")).unwrap_or_default();
        let starts = || log().matches("start").count();
        let root = HostRoot::open(&t.root).unwrap();
        let lock = Path::new("/state/locks/demo.lock");
        let (a_err, b_err) = (Arc::default(), Arc::default());
        let (go, done) = (AtomicBool::new(false), AtomicBool::new(false));
        let (a_started, restored, b_waited, a, b) = std::thread::scope(|s| {
            // Once `go`, every reader of the FIFO is released (bounded: 60 s).
            s.spawn(|| {
                let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
                while !done.load(Ordering::SeqCst) && std::time::Instant::now() < end {
                    if go.load(Ordering::SeqCst)
                        && let Ok(mut f) = std::fs::OpenOptions::new()
                            .write(true)
                            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
                            .open(t.p("/t/fifo"))
                    {
                        let _ = f.write_all(b"\n");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            });
            let a = s.spawn(|| {
                try_run_mode_into(&t, Mode::Apply, &Cancel::new(), &Arc::default(), &a_err)
            });
            let a_started = wait_until(20, || starts() == 1);
            if replace {
                t.file("/t/other.lock", "");
                std::fs::rename(t.p("/t/other.lock"), t.p("/state/locks/demo.lock")).unwrap();
            } else {
                std::fs::remove_file(t.p("/state/locks/demo.lock")).unwrap();
            }
            // A locks the file now at the path (a flock on its inode in /proc/locks).
            let restored = wait_until(5, || {
                crate::state::lock::holder_pid(lock, &root) == Some(std::process::id())
            });
            let b = s.spawn(|| {
                try_run_mode_into(&t, Mode::Apply, &Cancel::new(), &Arc::default(), &b_err)
            });
            let waiting = || {
                String::from_utf8_lossy(&b_err.lock().unwrap())
                    .contains("waiting for the package lock /state/locks/demo.lock")
            };
            let b_waited = wait_until(20, || waiting() || starts() > 1) && starts() == 1;
            go.store(true, Ordering::SeqCst);
            let a = a.join().unwrap();
            let b = b.join().unwrap();
            done.store(true, Ordering::SeqCst);
            (a_started, restored, b_waited, a, b)
        });
        assert!(a_started, "A's step did not start");
        assert!(
            restored,
            "replace={replace}: A did not re-take the lock path"
        );
        assert!(b_waited, "replace={replace}: B ran beside A: {:?}", log());
        assert!(a.unwrap(), "A failed");
        assert!(b.unwrap(), "B failed");
        assert_eq!(log(), "start\nend\nstart\nend\n", "replace={replace}");
    }
}

/// The lock path taken by another holder while a step runs (a file it had locked renamed onto
/// the path): the running step finishes and its flag is written, no further step starts, and
/// the run fails naming the lock path.
#[test]
fn a_lost_package_lock_fails_the_run_after_the_running_step() {
    use std::os::unix::fs::OpenOptionsExt;
    let t = TestHost::new();
    t.install_sh();
    write_package(
        &t,
        json!({
            "apply": [step_json("first", "first.sh"), step_json("second", "second.sh")],
            "apply-check": [step_json("c", "second.sh")]
        }),
    );
    t.file(
        "/pkg/skyhook_dir/first.sh",
        "#!/bin/sh\necho start >> /t/log\nread x < /t/fifo\n",
    );
    t.file(
        "/pkg/skyhook_dir/second.sh",
        "#!/bin/sh\necho second >> /t/log\n",
    );
    blocking_fifo(&t);
    let root = HostRoot::open(&t.root).unwrap();
    let (res, started) = std::thread::scope(|s| {
        let a = s.spawn(|| try_run_mode(&t, Mode::Apply, &Cancel::new()).0);
        let started = wait_until(20, || {
            std::fs::read_to_string(t.p("/t/log")).is_ok_and(|l| l == "start\n")
        });
        let other = crate::state::lock::lock_package(&root, Path::new("/state"), "other").unwrap();
        // The holder's attempt on the renamed file ends with its close: seen, the step is
        // released (the holder records the loss before the step could end and be checked).
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        let watch = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).unwrap();
        watch
            .add_watch(
                &t.p("/state/locks/other.lock"),
                AddWatchFlags::IN_CLOSE_NOWRITE,
            )
            .unwrap();
        std::fs::rename(
            t.p("/state/locks/other.lock"),
            t.p("/state/locks/demo.lock"),
        )
        .unwrap();
        let tried = wait_until(20, || watch.read_events().is_ok_and(|e| !e.is_empty()));
        let released = tried
            && wait_until(20, || {
                std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
                    .open(t.p("/t/fifo"))
                    .and_then(|mut f| f.write_all(b"\n"))
                    .is_ok()
            });
        let res = a.join().unwrap();
        drop(other);
        (res, started && released)
    });
    assert!(started);
    let e = res.unwrap_err().to_string();
    assert!(
        e.starts_with("lost the package lock /state/locks/demo.lock: the lock file was removed or replaced while this agent held it, and another agent (pid "),
        "{e}"
    );
    let flags: Vec<String> = std::fs::read_dir(t.p("/state/flags/demo/1.0.0"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        flags.len() == 1 && flags[0].starts_with("first.sh_"),
        "{flags:?}"
    );
    assert_eq!(t.read("/t/log"), "start\n", "the second step did not start");
}
