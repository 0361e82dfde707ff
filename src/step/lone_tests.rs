//! The lone runner: raw output, the pid, and the result of each way a process step ends.

use std::sync::Mutex;

use super::*;
use crate::host::ExecMode;
use crate::step::StepSpec;
use crate::step::process::tests::block_on;

/// An output that records what it is given.
#[derive(Default)]
struct Recorded {
    out: Mutex<Vec<u8>>,
    err: Mutex<Vec<u8>>,
    pids: Mutex<Vec<i32>>,
    /// Notified at each stdout chunk.
    wrote: tokio::sync::Notify,
}

impl ScriptOutput for Recorded {
    fn stdout(&self, bytes: &[u8]) {
        self.out.lock().unwrap().extend_from_slice(bytes);
        self.wrote.notify_one();
    }
    fn stderr(&self, bytes: &[u8]) {
        self.err.lock().unwrap().extend_from_slice(bytes);
    }
}

impl LoneOutput for Recorded {
    fn spawned(&self, pid: i32) {
        self.pids.lock().unwrap().push(pid);
    }
}

fn runner(output: Arc<Recorded>) -> LoneRunner {
    LoneRunner {
        engine: crate::step::engine(),
        root: PathBuf::from("/"),
        output,
        term_grace: Duration::from_secs(5),
    }
}

fn sh(program: &str, command: &str, spec: StepSpec) -> StepInvocation {
    StepInvocation {
        path: "t".into(),
        program: StepProgram::Process {
            program: program.into(),
            cwd: "/".into(),
            chroot: None,
            shown: program.into(),
        },
        args: vec!["-c".into(), command.into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        spec,
        logs: None,
        preamble: None,
        keep_fds: Vec::new(),
    }
}

#[test]
fn a_process_step_gives_its_output_raw_its_pid_and_its_exit_code() {
    let out = Arc::new(Recorded::default());
    let r = block_on(runner(out.clone()).run(sh(
        "/bin/sh",
        "printf 'a\\377'; echo b >&2; exit 3",
        StepSpec::builder("apply", true).build(),
    )));
    assert_eq!((r.ran, r.code, r.ok, &r.error), (true, 3, false, &None));
    assert_eq!(r.report.mode, ExecMode::Apply);
    assert_eq!(*out.out.lock().unwrap(), b"a\xff");
    assert_eq!(*out.err.lock().unwrap(), b"b\n");
    let pids = out.pids.lock().unwrap().clone();
    assert_eq!(pids.len(), 1);
    assert!(pids[0] > 1, "{pids:?}");
    let r = block_on(runner(out.clone()).run(sh(
        "/bin/sh",
        "true",
        StepSpec::builder("apply", true).build(),
    )));
    assert_eq!((r.ran, r.code, r.ok), (true, 0, true));
}

#[test]
fn a_signal_a_spawn_failure_and_a_cancel_before_the_spawn() {
    let out = Arc::new(Recorded::default());
    let r = block_on(runner(out.clone()).run(sh(
        "/bin/sh",
        "kill -9 $$",
        StepSpec::builder("apply", true).build(),
    )));
    assert_eq!((r.ran, r.code, r.ok), (true, -9, false));
    let r = block_on(runner(out.clone()).run(sh(
        "/nonexistent/sh",
        "true",
        StepSpec::builder("apply", true).build(),
    )));
    assert_eq!(
        (r.ran, r.code, r.error.as_deref()),
        (
            false,
            127,
            Some("spawn failed: No such file or directory (os error 2)")
        )
    );
    let spec = StepSpec::builder("apply", true).build();
    spec.cancel()
        .abort(crate::process::CancelReason::Signal("SIGTERM"));
    let r = block_on(runner(out.clone()).run(sh("/bin/sh", "true", spec)));
    assert_eq!(
        (r.ran, r.code, r.error.as_deref()),
        (false, -15, Some("cancelled"))
    );
}

#[test]
fn a_cancelled_process_step_ends_as_its_main_process_did() {
    let out = Arc::new(Recorded::default());
    let spec = StepSpec::builder("apply", true).build();
    let cancel = spec.cancel().clone();
    let r = block_on(async {
        let run = runner(out.clone());
        let step = run.run(sh(
            "/bin/sh",
            "trap 'exit 7' TERM; echo up; while :; do sleep 0.05; done 2>/dev/null",
            spec,
        ));
        let abort = async {
            // the step prints "up" once its trap is set
            while !out.out.lock().unwrap().starts_with(b"up") {
                out.wrote.notified().await;
            }
            cancel.abort(crate::process::CancelReason::Signal("SIGTERM"));
        };
        let (r, ()) = tokio::join!(step, abort);
        r
    });
    assert_eq!((r.ran, r.code, r.ok), (true, 7, false));
}

#[test]
fn a_script_step_that_cannot_open_its_root_did_not_run() {
    let out = Arc::new(Recorded::default());
    let mut run = runner(out);
    run.root = PathBuf::from("/nonexistent/root");
    let compiled = crate::script::compile_source(
        &run.engine,
        "s.rhai",
        "40 + 2",
        Arc::new(crate::script::ModuleStore::stdlib_only()),
    )
    .unwrap();
    let inv = StepInvocation {
        program: StepProgram::Script(compiled),
        args: Vec::new(),
        ..sh("/bin/sh", "", StepSpec::builder("apply", true).build())
    };
    let r = block_on(run.run(inv));
    assert_eq!((r.ran, r.code), (false, 1));
    assert!(
        r.error
            .as_deref()
            .is_some_and(|e| e.starts_with("cannot open host root: ")),
        "{:?}",
        r.error
    );
}
