//! [`LoneRunner`]: the runner of a lone step whose front end takes its output raw
//! (`skyhook-agent serve`'s `sh` and `rhai` executions): a process step through the process
//! primitive, a `.rhai` step on a session of its own ([`ScriptStep`], ended with the step),
//! both writing the same [`LoneOutput`] and ending in one [`StepResult`].
//!
//! Unlike the agent's runner, output is neither labelled nor written to log files: each read
//! of a pipe (or each `print` of the script) is handed to the output as it came, and the
//! output also learns the process's pid when it is spawned (serve records it for a cancel
//! after a restart).
//!
//! A process step's result: `ran` and `code` the exit code when its main process exited
//! (also after a cancel: how it ended then), `-<signal>` when a signal ended it; when it
//! never ran, `ran` false, code 127 and `error` `spawn failed: <os error>` for a spawn
//! failure, code `-15` and `error` `cancelled` for a cancel before the spawn. A `.rhai`
//! step's is [`ScriptStep::run`]'s, or, when it could not run, `ran` false, code 1 and the
//! reason in `error` (`cannot open host root: ...`, `script runner: ...`).

use std::ffi::OsString;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::host::root::HostRoot;
use crate::process::{self, Status, Stream};
use crate::script::{ScriptEngine, ScriptOutput};

use super::invocation::{StepInvocation, StepProgram, StepResult, StepRunner};
use super::run::{End, ScriptStep};

/// Where a lone step's output goes: raw chunks of stdout and stderr (as a `.rhai` step's
/// [`ScriptOutput`]), and the main process's pid (also its process group id) right after a
/// process step's spawn.
pub trait LoneOutput: ScriptOutput {
    /// The process step's main process was spawned with `pid`; it stays valid (a zombie at
    /// worst) until the run returns.
    fn spawned(&self, pid: i32);
}

/// Runs one lone step (see the module docs); needs a tokio runtime.
pub struct LoneRunner {
    /// The engine a `.rhai` step runs on.
    pub engine: Arc<ScriptEngine>,
    /// The host root (an agent-side path) a `.rhai` step's session opens.
    pub root: PathBuf,
    /// Where the step's output goes.
    pub output: Arc<dyn LoneOutput>,
    /// Time between `SIGTERM` and `SIGKILL` once the step's cancel token is aborted (a
    /// front end that sends the `SIGKILL` itself after its own grace sets an upper bound).
    pub term_grace: Duration,
}

impl StepRunner for LoneRunner {
    async fn run(&self, inv: StepInvocation) -> StepResult {
        match inv.program {
            StepProgram::Process { .. } => self.run_process(inv).await,
            StepProgram::Script(_) => self.run_script(inv).await,
        }
    }
}

/// The primitive's sink: every chunk and the pid to the step's output.
struct RawSink(Arc<dyn LoneOutput>);

impl process::Sink for RawSink {
    fn spawned(&mut self, pid: i32) {
        self.0.spawned(pid);
    }

    fn chunk(&mut self, stream: Stream, bytes: &[u8]) -> ControlFlow<()> {
        match stream {
            Stream::Stdout => self.0.stdout(bytes),
            Stream::Stderr => self.0.stderr(bytes),
        }
        ControlFlow::Continue(())
    }
}

impl LoneRunner {
    async fn run_process(&self, inv: StepInvocation) -> StepResult {
        let exec = inv.spec.exec();
        let StepProgram::Process {
            program,
            cwd,
            chroot,
            ..
        } = inv.program
        else {
            return StepResult::failed(exec, 1);
        };
        let spec = process::Spec {
            program,
            args: inv.args.iter().map(OsString::from).collect(),
            env: inv.env,
            cwd,
            chroot,
            stdin: None,
            keep_fds: inv.keep_fds,
            cgroup: inv.spec.cgroup().map(Path::to_path_buf),
            mount_ns: None,
        };
        let options = process::Options {
            cancel: Some(inv.spec.cancel().clone()),
            term_grace: self.term_grace,
            ..process::Options::default()
        };
        let (report, _) = process::run_async(spec, options, RawSink(self.output.clone())).await;
        let ended = |status: Status| match status {
            Status::Code(c) => c,
            Status::Signal(s) => -s,
        };
        let (ran, code, error) = match report.outcome {
            process::Outcome::Exited(c) => (true, c, None),
            process::Outcome::Signaled(s) => (true, -s, None),
            process::Outcome::SpawnFailed(e) => (false, 127, Some(format!("spawn failed: {e}"))),
            process::Outcome::TimedOut { status } | process::Outcome::SinkStopped { status } => {
                (true, ended(status), None)
            }
            process::Outcome::Cancelled {
                status: Some(status),
                ..
            } => (true, ended(status), None),
            process::Outcome::Cancelled { status: None, .. } => {
                (false, -libc::SIGTERM, Some("cancelled".to_string()))
            }
        };
        StepResult {
            ok: ran && error.is_none() && inv.spec.accepts(code),
            code,
            ran,
            error,
            ..StepResult::new(exec)
        }
    }

    async fn run_script(&self, inv: StepInvocation) -> StepResult {
        let exec = inv.spec.exec();
        let not_run = |error: String| StepResult {
            code: 1,
            error: Some(error),
            ..StepResult::new(exec)
        };
        let StepProgram::Script(script) = inv.program else {
            return StepResult::failed(exec, 1);
        };
        let (engine, root, output) = (self.engine.clone(), self.root.clone(), self.output.clone());
        let spec = inv.spec;
        let ran = tokio::task::spawn_blocking(move || {
            let root = HostRoot::open(&root).map_err(|e| format!("cannot open host root: {e}"))?;
            let api = spec.session(root);
            // The same output as a script's (trait upcasting).
            let output: Arc<dyn ScriptOutput> = output;
            Ok::<_, String>(
                ScriptStep {
                    engine: &engine,
                    script: &script,
                    spec: &spec,
                    api: &api,
                    end: End::Session,
                    list_drift: false,
                }
                .run(output),
            )
        })
        .await;
        match ran {
            Ok(Ok(result)) => result,
            Ok(Err(error)) => not_run(error),
            Err(join) => not_run(format!("script runner: {join}")),
        }
    }
}

#[cfg(test)]
#[path = "lone_tests.rs"]
mod tests;
