use super::*;
use crate::host::root::HostRoot;
use crate::logs::sink::open_step_logs;
use crate::process::{CancelReason, Outcome, Report};
use chrono::Timelike;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A console that records what it is given.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }
}

fn fixed_clock() -> NaiveDateTime {
    chrono::NaiveDate::from_ymd_opt(2025, 1, 2)
        .unwrap()
        .and_hms_micro_opt(13, 45, 1, 123_456)
        .unwrap()
}

const TS: &str = "2025-01-02T13:45:01.123456";

/// `f` run to its end on a current-thread runtime, within 60 s.
pub(crate) fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            // A broken run hangs instead of failing; bound it generously.
            tokio::time::timeout(Duration::from_secs(60), f)
                .await
                .expect("run did not finish within 60 s")
        })
}

fn sh(script: &str) -> process::Spec {
    process::Spec {
        program: PathBuf::from("/bin/sh"),
        args: vec!["-c".into(), script.into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: PathBuf::from("/"),
        ..process::Spec::default()
    }
}

struct Run {
    report: Report,
    output_errors: Vec<LogError>,
    out: Vec<u8>,
    err: Vec<u8>,
}

fn run(limit: usize, spec: &process::Spec, logs: Option<StepLogFiles>) -> Run {
    run_timed(limit, spec, logs, None, None)
}

/// [`run`] with a timeout and a preamble.
fn run_timed(
    limit: usize,
    spec: &process::Spec,
    logs: Option<StepLogFiles>,
    timeout: Option<Duration>,
    preamble: Option<Vec<u8>>,
) -> Run {
    let (out, err) = (Capture::default(), Capture::default());
    let options = RelayOptions {
        stdout: Some(Box::new(out.clone())),
        stderr: Some(Box::new(err.clone())),
        clock: fixed_clock,
        term_grace: Duration::from_millis(200),
        timeout,
        preamble,
        ..RelayOptions::default()
    };
    let (report, output_errors) = block_on(ProcessRunner::new(limit).run_with(spec, logs, options));
    Run {
        report,
        output_errors,
        out: out.bytes(),
        err: err.bytes(),
    }
}

fn tmp_logs() -> (tempfile::TempDir, HostRoot, StepLogFiles) {
    let d = tempfile::tempdir().unwrap();
    let root = HostRoot::open(d.path()).unwrap();
    let start = chrono::DateTime::from_timestamp(1_735_825_501, 0).unwrap();
    let logs = open_step_logs(&root, Path::new("/log/demo/1.0.0"), "foo.sh", start).unwrap();
    (d, root, logs)
}

fn read_log(d: &tempfile::TempDir, host: &Path) -> Vec<u8> {
    std::fs::read(d.path().join(host.strip_prefix("/").unwrap())).unwrap()
}

#[test]
fn case_29_lines_labels_and_files() {
    let (d, _root, logs) = tmp_logs();
    let (out_path, err_path) = (logs.out_path.clone(), logs.err_path.clone());
    let r = run(
        8192,
        &sh("printf 'one\\ntwo\\n'; printf 'e1\\n' >&2"),
        Some(logs),
    );
    assert!(matches!(r.report.outcome, Outcome::Exited(0)));
    assert!(r.output_errors.is_empty());
    let expected_out = format!("[out]{TS} one\n[out]{TS} two\n[out]{TS} ");
    let expected_err = format!("[err]{TS} e1\n[err]{TS} ");
    assert_eq!(String::from_utf8(r.out).unwrap(), expected_out);
    assert_eq!(String::from_utf8(r.err).unwrap(), expected_err);
    assert_eq!(read_log(&d, &out_path), expected_out.as_bytes());
    assert_eq!(read_log(&d, &err_path), expected_err.as_bytes());
}

#[test]
fn case_30_silent_step_leaves_empty_files() {
    let (d, _root, logs) = tmp_logs();
    let (out_path, err_path) = (logs.out_path.clone(), logs.err_path.clone());
    let r = run(8192, &sh("true"), Some(logs));
    assert!(matches!(r.report.outcome, Outcome::Exited(0)));
    assert_eq!(r.out, b"");
    assert_eq!(r.err, b"");
    assert_eq!(read_log(&d, &out_path), b"");
    assert_eq!(read_log(&d, &err_path), b"");
}

#[test]
fn case_33_limit_four_long_lines() {
    let r = run(
        4,
        &sh("for c in a b c; do printf \"%01000d\\n\" 0 | tr 0 $c; done"),
        None,
    );
    let mut expected = String::new();
    for c in ["a", "b", "c"] {
        expected += &format!("[out]{TS} {}\n", c.repeat(1000));
    }
    expected += &format!("[out]{TS} ");
    assert_eq!(String::from_utf8(r.out).unwrap(), expected);
}

#[test]
fn preamble_precedes_output_on_console_and_file() {
    let (d, _root, logs) = tmp_logs();
    let out_path = logs.out_path.clone();
    let spec = sh("echo x");
    let preamble = Some(b"systemctl restart containerd\n".to_vec());
    let r = run_timed(8192, &spec, Some(logs), None, preamble);
    let expected = format!("systemctl restart containerd\n[out]{TS} x\n[out]{TS} ");
    assert_eq!(String::from_utf8(r.out).unwrap(), expected);
    assert_eq!(read_log(&d, &out_path), expected.as_bytes());
}

#[test]
fn environment_is_complete_and_cwd_applies() {
    let d = tempfile::tempdir().unwrap();
    let mut spec = sh("echo \"$FOO|${HOME-unset}|$(pwd)\"");
    spec.env.push(("FOO".into(), "bar\nbaz".into()));
    spec.cwd = d.path().to_path_buf();
    let r = run(8192, &spec, None);
    let expected = format!(
        "[out]{TS} bar\n[out]{TS} baz|unset|{}\n[out]{TS} ",
        d.path().display()
    );
    assert_eq!(String::from_utf8(r.out).unwrap(), expected);
}

#[test]
fn exit_code_is_kept() {
    let r = run(8192, &sh("exit 7"), None);
    assert!(matches!(r.report.outcome, Outcome::Exited(7)));
    assert_eq!(r.report.outcome.display_status(), 7);
    assert!(r.report.outcome.succeeded_with(|c| c == 7 || c == 0));
    assert!(!r.report.outcome.succeeded_with(|c| c == 0));
}

#[test]
fn killed_by_signal() {
    let r = run(8192, &sh("kill -9 $$"), None);
    assert!(matches!(r.report.outcome, Outcome::Signaled(9)));
    assert_eq!(r.report.outcome.display_status(), -9);
    assert!(!r.report.outcome.succeeded_with(|_| true));
}

#[test]
fn missing_program_fails_to_spawn() {
    let mut spec = sh("");
    spec.program = PathBuf::from("/nonexistent/skyhook-step");
    let r = run(8192, &spec, None);
    match &r.report.outcome {
        Outcome::SpawnFailed(e) => assert_eq!(e.kind(), io::ErrorKind::NotFound),
        other => panic!("expected SpawnFailed, got {other:?}"),
    }
    assert_eq!(r.report.outcome.display_status(), 127);
    assert!(!r.report.outcome.succeeded_with(|_| true));
}

#[test]
fn bad_cwd_fails_to_spawn() {
    let mut spec = sh("true");
    spec.cwd = PathBuf::from("/nonexistent/skyhook-cwd");
    let r = run(8192, &spec, None);
    assert!(
        matches!(&r.report.outcome, Outcome::SpawnFailed(e) if e.kind() == io::ErrorKind::NotFound)
    );
}

#[test]
fn script_without_shebang_runs_with_sh() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let script = d.path().join("noshebang");
    std::fs::write(&script, "echo \"via sh $1\"\nexit 3\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut spec = sh("");
    spec.program = script;
    spec.args = vec!["x".into()];
    let r = run(8192, &spec, None);
    assert!(matches!(r.report.outcome, Outcome::Exited(3)));
    assert_eq!(
        String::from_utf8(r.out).unwrap(),
        format!("[out]{TS} via sh x\n[out]{TS} ")
    );
}

#[test]
fn background_child_does_not_hang_the_run() {
    // `sleep` inherits both pipes; without the group kill the run would last 1000 s.
    let r = run(8192, &sh("sleep 1000 & echo started"), None);
    assert!(matches!(r.report.outcome, Outcome::Exited(0)));
    assert!(r.report.drained);
    assert_eq!(
        String::from_utf8(r.out).unwrap(),
        format!("[out]{TS} started\n[out]{TS} ")
    );
}

#[test]
fn timeout_terminates_the_group() {
    let spec = sh("echo begin; sleep 1000; echo never");
    let r = run_timed(8192, &spec, None, Some(Duration::from_millis(100)), None);
    assert!(matches!(r.report.outcome, Outcome::TimedOut { .. }));
    assert_eq!(r.report.outcome.display_status(), 124);
    assert_eq!(
        String::from_utf8(r.out).unwrap(),
        format!("[out]{TS} begin\n[out]{TS} ")
    );
}

#[test]
fn timeout_kills_a_group_ignoring_term() {
    let spec = sh("trap '' TERM; sleep 1000; echo never");
    let r = run_timed(8192, &spec, None, Some(Duration::from_millis(100)), None);
    assert!(matches!(r.report.outcome, Outcome::TimedOut { .. }));
    assert_eq!(r.out, b"");
}

#[test]
fn cancelled_run_kills_the_group() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // The child opens the fifo for writing, then blocks forever; the test reads the
    // fifo after cancelling: EOF proves every writer (the group) is dead.
    let spec = sh(&format!("exec 3>{}; sleep 1000", fifo.display()));
    let fifo2 = fifo.clone();
    let eof = block_on(async move {
        let runner = ProcessRunner::new(8192);
        let options = RelayOptions {
            stdout: Some(Box::new(Capture::default())),
            stderr: Some(Box::new(Capture::default())),
            ..RelayOptions::default()
        };
        let reader = tokio::task::spawn_blocking(move || std::fs::File::open(fifo2));
        let run = runner.run_with(&spec, None, options);
        tokio::select! {
            _ = run => panic!("run ended by itself"),
            f = reader => {
                // The writer is open: cancel the run by dropping its future (end of select).
                let mut f = f.unwrap().unwrap();
                // Read after the select has dropped (cancelled) the run.
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let _ = tx.send(io::Read::read_to_end(&mut f, &mut buf).map(|_| buf));
                });
                rx
            }
        }
    })
    .recv_timeout(Duration::from_secs(30))
    .expect("a process of the cancelled run still holds the fifo open")
    .unwrap();
    assert_eq!(eof, b"");
}

#[test]
fn aborted_token_cancels_the_run() {
    let cancel = Cancel::new();
    let c = cancel.clone();
    let spec = sh("echo begin; sleep 1000; echo never");
    let report = block_on(async move {
        let (out, err) = (Capture::default(), Capture::default());
        let options = RelayOptions {
            stdout: Some(Box::new(out)),
            stderr: Some(Box::new(err)),
            clock: fixed_clock,
            term_grace: Duration::from_millis(200),
            cancel: Some(cancel),
            ..RelayOptions::default()
        };
        let runner = ProcessRunner::new(8192);
        let run = runner.run_with(&spec, None, options);
        let abort = async {
            c.abort(CancelReason::Remote("engine-a".into()));
        };
        let ((report, _), ()) = tokio::join!(run, abort);
        report
    });
    match &report.outcome {
        Outcome::Cancelled { reason, .. } => {
            assert_eq!(reason, &CancelReason::Remote("engine-a".into()));
        }
        other => panic!("expected Cancelled, got {other:?}"),
    }
    assert_eq!(report.outcome.display_status(), -15);
    assert!(!report.outcome.succeeded_with(|_| true));
}

static TICKS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// A clock advancing one microsecond per reading.
fn ticking_clock() -> NaiveDateTime {
    let t = TICKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    fixed_clock().with_nanosecond(t * 1_000).unwrap()
}

#[test]
fn large_output_batches_keep_per_chunk_timestamps_and_identical_bytes() {
    let (d, _root, logs) = tmp_logs();
    let out_path = logs.out_path.clone();
    let (console, err) = (Capture::default(), Capture::default());
    let options = RelayOptions {
        stdout: Some(Box::new(console.clone())),
        stderr: Some(Box::new(err.clone())),
        clock: ticking_clock,
        ..RelayOptions::default()
    };
    // 20000 numbered lines of 80 bytes, read 4096 bytes at a time.
    let spec = sh("i=0; while [ $i -lt 20000 ]; do printf '%079d\\n' $i; i=$((i+1)); done");
    let (report, _) = block_on(ProcessRunner::new(4096).run_with(&spec, Some(logs), options));
    assert!(matches!(report.outcome, Outcome::Exited(0)));
    let bytes = console.bytes();
    assert_eq!(read_log(&d, &out_path), bytes);
    let text = String::from_utf8(bytes).unwrap();
    let lines: Vec<&str> = text.split('\n').collect();
    assert_eq!(lines.len(), 20001);
    let mut last = String::new();
    for (i, line) in lines.iter().enumerate() {
        let rest = line.strip_prefix("[out]2025-01-02T13:45:01.").unwrap();
        let (micros, body) = rest.split_at(6);
        assert!(micros.chars().all(|c| c.is_ascii_digit()), "{line}");
        assert!(micros >= last.as_str(), "timestamps go back at line {i}");
        last = micros.to_string();
        let expected = if i < 20000 {
            format!(" {i:079}")
        } else {
            " ".into()
        };
        assert_eq!(body, expected);
    }
    // more than one chunk, so more than one timestamp
    assert_ne!(last, lines[0][25..31]);
}

/// Copy `/bin/sh` and the libraries `ldd` lists into `dir`, at the same paths.
fn populate_chroot(dir: &Path) {
    let sh = std::fs::canonicalize("/bin/sh").unwrap();
    let ldd = std::process::Command::new("ldd").arg(&sh).output().unwrap();
    let mut files = vec![(sh, PathBuf::from("/bin/sh"))];
    for line in String::from_utf8(ldd.stdout).unwrap().lines() {
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.trim(),
            None => line.trim(),
        };
        let path = path.split(" (").next().unwrap_or("").trim();
        if path.starts_with('/') {
            files.push((PathBuf::from(path), PathBuf::from(path)));
        }
    }
    for (src, dst) in files {
        let target = dir.join(dst.strip_prefix("/").unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&src, &target).unwrap();
    }
}

#[test]
fn chroot_runs_inside_the_directory() {
    if !nix::unistd::geteuid().is_root() {
        crate::host::testutil::skip("chroot needs root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    populate_chroot(d.path());
    std::fs::create_dir_all(d.path().join("work")).unwrap();
    std::fs::write(d.path().join("only-in-chroot"), "").unwrap();
    let mut spec = sh("test -e /only-in-chroot && echo inside; cd . && echo \"$PWD\"");
    spec.chroot = Some(d.path().to_path_buf());
    spec.cwd = PathBuf::from("/work");
    let r = run(8192, &spec, None);
    assert!(
        matches!(r.report.outcome, Outcome::Exited(0)),
        "{:?}",
        r.report
    );
    assert_eq!(
        String::from_utf8(r.out).unwrap(),
        format!("[out]{TS} inside\n[out]{TS} /work\n[out]{TS} ")
    );
}
