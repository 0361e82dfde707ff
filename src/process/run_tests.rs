use super::*;
use std::ops::ControlFlow;
use std::path::PathBuf;

#[derive(Default)]
struct Collect {
    out: Vec<u8>,
    err: Vec<u8>,
    started: bool,
    flushes: usize,
    /// Stop after this many stdout bytes.
    cap: Option<usize>,
}

impl Sink for Collect {
    fn started(&mut self) {
        self.started = true;
    }
    fn chunk(&mut self, stream: Stream, bytes: &[u8]) -> ControlFlow<()> {
        let v = match stream {
            Stream::Stdout => &mut self.out,
            Stream::Stderr => &mut self.err,
        };
        v.extend_from_slice(bytes);
        match self.cap {
            Some(c) if self.out.len() > c => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        }
    }
    fn flush(&mut self, _: Stream) {
        self.flushes += 1;
    }
}

fn bash(script: &str) -> Spec {
    Spec {
        program: PathBuf::from("/bin/bash"),
        args: vec!["-c".into(), script.into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: PathBuf::from("/"),
        ..Spec::default()
    }
}

fn quick() -> Options {
    Options {
        term_grace: Duration::from_millis(300),
        exit_grace: Duration::from_millis(300),
        ..Options::default()
    }
}

fn go(spec: &Spec, options: &Options) -> (Report, Collect) {
    let mut sink = Collect::default();
    let r = run(spec, options, &mut sink);
    (r, sink)
}

fn gone(pid: &str) -> bool {
    crate::process::wait_exited(pid)
}

#[test]
fn exit_code_and_output() {
    let (r, s) = go(&bash("echo out; echo err >&2; exit 3"), &quick());
    assert!(matches!(r.outcome, Outcome::Exited(3)), "{r:?}");
    assert!(r.drained && r.read_errors.is_empty());
    assert_eq!(s.out, b"out\n");
    assert_eq!(s.err, b"err\n");
    assert!(s.started && s.flushes >= 2);
}

/// The commands' wall clock (what the preflight logs as its queries' `query_us`) counts a
/// command's whole run: a command that runs 50 ms adds at least 50,000 µs (other tests'
/// commands, on other threads, can only add to it).
#[test]
fn the_commands_clock_counts_a_commands_run() {
    let before = commands_wall_us();
    let (r, _) = go(&bash("sleep 0.05"), &quick());
    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
    let added = commands_wall_us() - before;
    assert!(added >= 50_000, "a 50 ms command added {added} µs");
}

#[test]
fn killed_by_a_signal() {
    let (r, _) = go(&bash("kill -KILL $$"), &quick());
    assert!(matches!(r.outcome, Outcome::Signaled(9)), "{r:?}");
}

#[test]
fn spawn_failure() {
    let mut spec = bash("");
    spec.program = PathBuf::from("/nonexistent/prog");
    let (r, s) = go(&spec, &quick());
    assert!(matches!(&r.outcome, Outcome::SpawnFailed(e) if e.kind() == io::ErrorKind::NotFound));
    assert!(!s.started);
    let mut spec = bash("true");
    spec.keep_fds = vec![999_999];
    let (r, _) = go(&spec, &quick());
    assert!(matches!(&r.outcome, Outcome::SpawnFailed(e) if e.raw_os_error() == Some(libc::EBADF)));
}

#[test]
fn timeout_terms_then_kills_a_group_ignoring_term() {
    let d = tempfile::tempdir().unwrap();
    let pidfile = d.path().join("pid");
    let spec = bash(&format!(
        "trap '' TERM; sleep 500 & echo $! > {}; echo begin; wait",
        pidfile.display()
    ));
    let options = Options {
        timeout: Some(Duration::from_millis(200)),
        ..quick()
    };
    let t = Instant::now();
    let (r, s) = go(&spec, &options);
    let took = t.elapsed();
    assert!(
        matches!(
            r.outcome,
            Outcome::TimedOut {
                status: Status::Signal(9)
            }
        ),
        "{r:?}"
    );
    assert!(
        took >= Duration::from_millis(500),
        "{took:?}: no grace after TERM"
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert_eq!(s.out, b"begin\n");
    assert!(gone(&std::fs::read_to_string(&pidfile).unwrap()));
}

#[test]
fn timeout_with_term_ends_at_once() {
    let options = Options {
        timeout: Some(Duration::from_millis(100)),
        term_grace: Duration::from_secs(30),
        ..quick()
    };
    let t = Instant::now();
    let (r, _) = go(&bash("sleep 500"), &options);
    assert!(
        matches!(
            r.outcome,
            Outcome::TimedOut {
                status: Status::Signal(15)
            }
        ),
        "{r:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(20));
}

#[test]
fn abort_from_another_thread_cancels() {
    let cancel = Cancel::new();
    let options = Options {
        cancel: Some(cancel.clone()),
        ..quick()
    };
    let c = cancel.clone();
    let spec = bash("echo go; sleep 500");
    let t = Instant::now();
    let aborter = std::thread::spawn(move || {
        // Abort once the command is running (its output is seen by the sink, below),
        // here simply right away from another thread while run() blocks.
        c.abort(CancelReason::Remote("test".into()));
    });
    let (r, _) = go(&spec, &options);
    aborter.join().unwrap();
    match r.outcome {
        Outcome::Cancelled { reason, .. } => {
            assert_eq!(reason, CancelReason::Remote("test".into()));
        }
        other => panic!("{other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(20));
}

#[test]
fn abort_during_a_long_command() {
    // The sink aborts the token from another thread once the command printed.
    struct AbortOnOutput(Cancel, Vec<u8>);
    impl Sink for AbortOnOutput {
        fn chunk(&mut self, _: Stream, bytes: &[u8]) -> ControlFlow<()> {
            self.1.extend_from_slice(bytes);
            let c = self.0.clone();
            std::thread::spawn(move || c.abort(CancelReason::Signal("SIGTERM")));
            ControlFlow::Continue(())
        }
    }
    let cancel = Cancel::new();
    let options = Options {
        cancel: Some(cancel.clone()),
        ..quick()
    };
    let mut sink = AbortOnOutput(cancel, Vec::new());
    let t = Instant::now();
    let r = run(&bash("echo started; sleep 500"), &options, &mut sink);
    assert!(
        matches!(
            &r.outcome,
            Outcome::Cancelled {
                reason: CancelReason::Signal("SIGTERM"),
                status: Some(Status::Signal(15))
            }
        ),
        "{r:?}"
    );
    assert_eq!(sink.1, b"started\n");
    assert!(t.elapsed() < Duration::from_secs(20));
}

#[test]
fn aborted_before_start_spawns_nothing() {
    let cancel = Cancel::new();
    cancel.abort(CancelReason::Parent);
    let options = Options {
        cancel: Some(cancel),
        ..quick()
    };
    let (r, s) = go(&bash("echo no"), &options);
    assert!(matches!(r.outcome, Outcome::Cancelled { status: None, .. }));
    assert!(!s.started && s.out.is_empty());
}

#[test]
fn stdin_bytes_are_written_without_deadlock() {
    // 1 MiB in, 1 MiB out: more than both pipe buffers.
    let input: Vec<u8> = (0..1024 * 1024).map(|i| b'a' + (i % 26) as u8).collect();
    let mut spec = bash("cat");
    spec.stdin = Some(input.clone());
    let (r, s) = go(&spec, &quick());
    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
    assert_eq!(s.out, input);
    // A process that does not read: no error, no hang.
    let mut spec = bash("exit 0");
    spec.stdin = Some(input);
    let (r, _) = go(&spec, &quick());
    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
    // Default stdin is /dev/null.
    let (_, s) = go(&bash("cat; echo end"), &quick());
    assert_eq!(s.out, b"end\n");
}

#[test]
fn background_child_holding_stdout_does_not_delay_the_end() {
    let d = tempfile::tempdir().unwrap();
    let pidfile = d.path().join("pid");
    // Ignores TERM and keeps stdout open: only the SIGKILL after the grace ends it.
    let spec = bash(&format!(
        "bash -c \"trap '' TERM; sleep 500\" & echo $! > {}; echo main done",
        pidfile.display()
    ));
    let t = Instant::now();
    let (r, s) = go(&spec, &quick());
    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
    assert!(r.drained);
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert_eq!(s.out, b"main done\n");
    assert!(gone(&std::fs::read_to_string(&pidfile).unwrap()));
    // A plain background sleep dies of the SIGTERM at once.
    let t = Instant::now();
    let options = Options {
        exit_grace: Duration::from_secs(60),
        ..quick()
    };
    let (r, _) = go(&bash("sleep 500 & echo x"), &options);
    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}

#[test]
fn sink_stop_bounds_the_capture_of_yes() {
    let mut sink = Collect {
        cap: Some(4 * 1024 * 1024),
        ..Collect::default()
    };
    let r = run(&bash("exec yes"), &quick(), &mut sink);
    assert!(
        matches!(
            r.outcome,
            Outcome::SinkStopped {
                status: Status::Signal(15)
            }
        ),
        "{r:?}"
    );
    // no more chunks after the Break
    assert!(
        sink.out.len() <= 4 * 1024 * 1024 + MAX_READ,
        "{}",
        sink.out.len()
    );
}

#[test]
fn keep_fds_are_inherited() {
    let d = tempfile::tempdir().unwrap();
    let f = std::fs::File::create(d.path().join("f")).unwrap();
    let fd = f.as_raw_fd();
    let mut spec = bash(&format!("echo kept >&{fd}"));
    let (r, s) = go(&spec, &quick());
    assert!(
        matches!(r.outcome, Outcome::Exited(1)),
        "{r:?} {s:?}",
        s = s.err
    );
    spec.keep_fds = vec![fd];
    let (r, _) = go(&spec, &quick());
    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
    assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"kept\n");
}

/// Tells the test once the first chunk arrived.
struct Notify(Option<tokio::sync::oneshot::Sender<()>>);
impl Sink for Notify {
    fn chunk(&mut self, _: Stream, _: &[u8]) -> ControlFlow<()> {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
        ControlFlow::Continue(())
    }
}

#[test]
fn async_entry_and_dropped_future() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let d = tempfile::tempdir().unwrap();
    let pidfile = d.path().join("pid");
    rt.block_on(async {
        let (r, s) = run_async(bash("echo hi"), quick(), Collect::default()).await;
        assert!(matches!(r.outcome, Outcome::Exited(0)));
        assert_eq!(s.out, b"hi\n");
        let spec = bash(&format!(
            "echo $$ > {}; echo up; sleep 500",
            pidfile.display()
        ));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let run = run_async(spec, quick(), Notify(Some(tx)));
        // Dropped once the command printed: the run is aborted on its blocking thread.
        tokio::select! {
            _ = run => panic!("the run ended by itself"),
            _ = rx => {}
        }
    });
    drop(rt); // waits for the blocking task, i.e. for the run to end
    assert!(gone(&std::fs::read_to_string(&pidfile).unwrap()));
}

/// Parse a `/proc/<pid>/status` signal field (hex mask) of `status`.
fn sig_field(status: &str, name: &str) -> u64 {
    let line = status
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("{name} missing in {status}"));
    u64::from_str_radix(line[name.len()..].trim(), 16).unwrap()
}

extern "C" fn ignore_signal(_: libc::c_int) {}

/// The child starts as `std::process::Command` leaves one (spawn.rs module docs), even
/// though it is cloned from a thread that blocks signals and a process that handles and
/// ignores some: an empty mask, no handler, `SIGPIPE` at its default, and a signal this
/// process ignores (`SIGUSR2` here) still ignored across exec.
#[test]
fn the_child_starts_with_default_signals_and_an_empty_mask() {
    // SAFETY: a handler that does nothing for SIGUSR1, which no test sends; SIGUSR2 ignored
    // (process-wide, harmless for other tests); SIGPIPE is ignored by the Rust runtime.
    unsafe {
        libc::signal(
            libc::SIGUSR1,
            ignore_signal as *const () as libc::sighandler_t,
        );
        libc::signal(libc::SIGUSR2, libc::SIG_IGN);
    }
    let mut blocked: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: plain signal set manipulation of this thread.
    unsafe {
        libc::sigemptyset(&mut blocked);
        libc::sigaddset(&mut blocked, libc::SIGTERM);
        libc::sigaddset(&mut blocked, libc::SIGCHLD);
        libc::pthread_sigmask(libc::SIG_BLOCK, &blocked, &mut old);
    }
    let spec = Spec {
        program: PathBuf::from("/bin/cat"),
        args: vec!["/proc/self/status".into()],
        cwd: PathBuf::from("/"),
        ..Spec::default()
    };
    let (r, s) = go(&spec, &quick());
    // SAFETY: restores this thread's mask.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
    let status = String::from_utf8(s.out).unwrap();
    let bit = |sig: libc::c_int| 1u64 << (sig - 1);
    assert_eq!(sig_field(&status, "SigBlk:"), 0, "{status}");
    assert_eq!(sig_field(&status, "SigCgt:"), 0, "{status}");
    let ignored = sig_field(&status, "SigIgn:");
    assert_eq!(ignored & bit(libc::SIGPIPE), 0, "SIGPIPE ignored: {status}");
    assert_ne!(
        ignored & bit(libc::SIGUSR2),
        0,
        "SIGUSR2 not ignored: {status}"
    );
    // The parent's own mask is back as it was.
    let mut now: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: reads this thread's mask.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut now) };
    // SAFETY: `now` was filled above.
    assert_eq!(unsafe { libc::sigismember(&now, libc::SIGTERM) }, 0);
}

/// A program without `/` is searched in the spec's `PATH` as `execvp` does: past a
/// directory without it and past a file that is not executable (`EACCES` remembered),
/// run from the first directory where it can be; `EACCES` is reported over `ENOENT`
/// when nothing runs; `ENOENT` when it is nowhere; `argv[0]` is the name as given.
#[test]
fn programs_are_searched_in_the_specs_path() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let (none, noexec, good) = (d.path().join("a"), d.path().join("b"), d.path().join("c"));
    for dir in [&none, &noexec, &good] {
        std::fs::create_dir(dir).unwrap();
    }
    std::fs::write(noexec.join("prog"), "#!/bin/sh\necho wrong\n").unwrap();
    std::fs::write(good.join("prog"), "#!/bin/sh\necho \"right $0 $1\"\n").unwrap();
    std::fs::set_permissions(noexec.join("prog"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(good.join("prog"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = |dirs: &[&PathBuf]| {
        dirs.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    };
    let spec = |dirs: &[&PathBuf]| Spec {
        program: PathBuf::from("prog"),
        args: vec!["arg".into()],
        env: vec![("PATH".into(), path(dirs).into())],
        cwd: PathBuf::from("/"),
        ..Spec::default()
    };
    let (r, s) = go(&spec(&[&none, &noexec, &good]), &quick());
    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
    assert_eq!(
        String::from_utf8(s.out).unwrap(),
        format!("right {} arg\n", good.join("prog").display())
    );
    // execve needs an execute bit, for root too.
    let (r, _) = go(&spec(&[&none, &noexec]), &quick());
    assert!(
        matches!(&r.outcome, Outcome::SpawnFailed(e) if e.raw_os_error() == Some(libc::EACCES)),
        "{r:?}"
    );
    let (r, _) = go(&spec(&[&none]), &quick());
    assert!(
        matches!(&r.outcome, Outcome::SpawnFailed(e) if e.raw_os_error() == Some(libc::ENOENT)),
        "{r:?}"
    );
}

/// Many spawns from several threads at once (each child shares the agent's memory until
/// its exec): every one runs with its own arguments and output, and a failing one is
/// reaped, leaving no zombie child behind.
#[test]
fn concurrent_spawns_keep_their_own_arguments() {
    // Named threads: a child that never exec'ed keeps the name of the thread it was
    // cloned from, which tells its zombie apart from other tests' children.
    const NAME: &str = "spawn-reap-t";
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::Builder::new()
                .name(NAME.into())
                .spawn(move || {
                    for i in 0..25 {
                        let (r, s) = go(&bash(&format!("echo {t}-{i}")), &quick());
                        assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
                        assert_eq!(s.out, format!("{t}-{i}\n").into_bytes());
                        let mut bad = bash("");
                        bad.program = PathBuf::from(format!("/nonexistent/{t}-{i}"));
                        let (r, _) = go(&bad, &quick());
                        assert!(matches!(r.outcome, Outcome::SpawnFailed(_)), "{r:?}");
                    }
                })
                .unwrap()
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // No failed spawn's child is left unreaped (the exited threads' children were
    // re-parented to the remaining threads of this process).
    let left: Vec<String> = crate::process::reaper::children_of_all_tasks()
        .expect("/proc/self/task/*/children")
        .into_iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter(|stat| stat.contains(&format!("({NAME})")))
        .collect();
    assert!(left.is_empty(), "unreaped children: {left:?}");
}
/// A run in a cgroup of its own ends every process of it, a `setsid` grandchild that
/// left the process group included, without the subreaper (not enabled in unit tests);
/// the same run without the cgroup leaves it running (then the test kills it).
#[test]
fn a_run_in_a_cgroup_ends_its_setsid_grandchild() {
    let root = crate::process::cgroup::Root::detect().expect("a usable cgroup here");
    let dir = root.create("unit-setsid").unwrap();
    // The sleep is in a new session before its pid is printed (through a FIFO, so the
    // main process waits for it).
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("pid");
    let mut spec = bash(&format!(
        "mkfifo {f}; setsid -f sh -c 'echo $$ > {f}; exec sleep 500'; cat {f}",
        f = fifo.display()
    ));
    spec.cgroup = Some(dir.clone());
    let (r, s) = go(&spec, &quick());
    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
    assert!(r.drained, "the sleep held the pipe to the end");
    let pid = String::from_utf8(s.out).unwrap();
    assert!(gone(&pid), "the setsid sleep {pid} outlived its run");
    assert!(crate::process::cgroup::procs(&dir).is_empty());
    crate::process::cgroup::remove(&dir).unwrap();
    assert!(!dir.exists());
    spec.cgroup = None;
    std::fs::remove_file(&fifo).unwrap();
    let (_, s) = go(&spec, &quick());
    let pid = String::from_utf8(s.out).unwrap();
    let pid = pid.trim();
    let alive =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| !st.contains(") Z "));
    // SAFETY: kill(2) on the sleep this test started.
    unsafe { libc::kill(pid.parse().unwrap(), libc::SIGKILL) };
    assert!(
        alive,
        "without a cgroup the setsid sleep is outside the run"
    );
}
