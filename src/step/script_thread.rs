//! The threads scripts run on: long-lived, each with a [`SCRIPT_STACK_BYTES`] stack, fed
//! jobs over a channel, so a step costs no thread start ([`on_script_thread`]).
//!
//! Each calling thread has its own script thread, started from it on its first job (so it
//! inherits the caller's mount namespace, fs context and capability bounding set, as a
//! thread started per job did: `serve`'s package plan leaves the server's namespace on a
//! fresh thread of its own before its first script, and every command its scripts fork is
//! inside it). The caller hands the job over and blocks until its result comes back; the
//! script thread then waits for the caller's next job, and ends with the caller (its
//! channel closes). A job's panic is caught on the script thread (`catch_unwind`), which
//! stays usable. A thread that changes its namespace must do so before its first script.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel, sync_channel};

/// Stack of the thread a script runs on. Rhai's evaluator recurses per call level and per
/// expression level; with the limits in `crate::script::Limits` a debug build
/// needs a few MiB at most. The memory is reserved, not committed, so the margin is free.
pub const SCRIPT_STACK_BYTES: usize = 64 * 1024 * 1024;

type Job = Box<dyn FnOnce() + Send>;

/// A script thread: the sending end of its job channel (dropping it ends the thread).
struct ScriptThread {
    jobs: Sender<Job>,
}

/// A caller's script thread, while it waits for a job, and how many were started.
pub struct ScriptThreads {
    idle: Mutex<Option<ScriptThread>>,
    started: AtomicUsize,
}

thread_local! {
    /// The calling thread's own script thread ([`on_script_thread`]).
    static OWN: ScriptThreads = const { ScriptThreads::new() };
}

/// Why [`on_script_thread`] has no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadError {
    /// The job panicked: the panic's message (`unknown panic` when it is not text).
    Panicked(String),
    /// No script thread could be started (the OS error).
    Start(String),
}

/// Run `job` on a script thread and return its result; the calling thread blocks until
/// then.
///
/// # Errors
/// [`ThreadError::Panicked`] with the panic's message when `job` panicked (the panic hook
/// has printed it, as for any thread); [`ThreadError::Start`] when no thread could be
/// started.
pub fn on_script_thread<R: Send + 'static>(
    job: impl FnOnce() -> R + Send + 'static,
) -> Result<R, ThreadError> {
    OWN.with(|own| own.run(job))
}

impl ScriptThreads {
    /// No thread yet.
    pub const fn new() -> ScriptThreads {
        ScriptThreads {
            idle: Mutex::new(None),
            started: AtomicUsize::new(0),
        }
    }

    /// How many threads were started so far.
    #[cfg(test)]
    pub fn started(&self) -> usize {
        self.started.load(Ordering::Relaxed)
    }

    /// [`on_script_thread`] on these threads.
    ///
    /// # Errors
    /// As [`on_script_thread`].
    pub fn run<R: Send + 'static>(
        &self,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, ThreadError> {
        let (tx, rx) = sync_channel(1);
        let job: Job = Box::new(move || {
            let result = catch_unwind(AssertUnwindSafe(job)).map_err(|panic| {
                ThreadError::Panicked(
                    panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".to_string()),
                )
            });
            let _ = tx.send(result);
        });
        let taken = self.idle().take();
        let mut thread = match taken {
            Some(t) => t,
            None => self.start()?,
        };
        if let Err(back) = thread.jobs.send(job) {
            // An idle thread ends only by an abort, which ends the process too; start another.
            thread = self.start()?;
            thread
                .jobs
                .send(back.0)
                .map_err(|_| ThreadError::Start("the script thread ended at once".into()))?;
        }
        let result = rx
            .recv()
            .unwrap_or_else(|_| Err(ThreadError::Panicked("the script thread ended".into())));
        // Kept for the next job (another thread started meanwhile, on concurrent use of one
        // `ScriptThreads`, ends with its channel).
        self.idle().get_or_insert(thread);
        result
    }

    /// The waiting thread (a panic cannot poison it: nothing panics while it is held).
    fn idle(&self) -> std::sync::MutexGuard<'_, Option<ScriptThread>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Start a script thread from the calling thread (whose namespaces it inherits): it runs
    /// the jobs sent to it until its channel closes.
    fn start(&self) -> Result<ScriptThread, ThreadError> {
        let (jobs, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name("skyhook-script".to_string())
            .stack_size(SCRIPT_STACK_BYTES)
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .map_err(|e| ThreadError::Start(e.to_string()))?;
        self.started.fetch_add(1, Ordering::Relaxed);
        Ok(ScriptThread { jobs })
    }
}

impl Default for ScriptThreads {
    fn default() -> Self {
        ScriptThreads::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Jobs in sequence run on one thread, started once, with the deep stack's name; a
    /// panicking job gives its message and leaves the thread usable for the next job.
    #[test]
    fn one_thread_serves_jobs_in_sequence_and_survives_a_panic() {
        let threads = ScriptThreads::new();
        let id = || {
            let t = std::thread::current();
            (t.id(), t.name().map(str::to_string))
        };
        let first = threads.run(id).unwrap();
        assert_eq!(first.1.as_deref(), Some("skyhook-script"));
        assert_ne!(first.0, std::thread::current().id());
        let panicked = threads.run(|| -> i32 { panic!("boom {}", 7) });
        assert_eq!(panicked, Err(ThreadError::Panicked("boom 7".into())));
        assert_eq!(threads.run(|| "static text").unwrap(), "static text");
        for _ in 0..3 {
            assert_eq!(threads.run(id).unwrap(), first);
        }
        assert_eq!(threads.started(), 1);
    }

    /// A job runs in its caller's mount namespace (and with its capabilities): `serve`'s
    /// package plan leaves the server's namespace on its own thread and relies on every
    /// command its scripts run being forked inside it.
    #[test]
    fn a_job_runs_in_its_callers_mount_namespace() {
        fn ns() -> std::path::PathBuf {
            std::fs::read_link("/proc/thread-self/ns/mnt").unwrap()
        }
        // Another caller's script thread, started in the server's namespace.
        std::thread::spawn(|| on_script_thread(|| ()).unwrap())
            .join()
            .unwrap();
        std::thread::spawn(move || {
            // SAFETY: unshare changes only this thread's fs context and mount namespace.
            if unsafe { libc::unshare(libc::CLONE_FS | libc::CLONE_NEWNS) } != 0 {
                eprintln!("skipped: unshare needs root");
                return;
            }
            let mine = ns();
            for _ in 0..2 {
                assert_eq!(on_script_thread(ns).unwrap(), mine);
            }
        })
        .join()
        .unwrap();
    }

    /// Concurrent jobs on one `ScriptThreads` each get a thread; one stays for the next job.
    #[test]
    fn concurrent_jobs_get_threads_of_their_own() {
        const N: usize = 4;
        let threads = std::sync::Arc::new(ScriptThreads::new());
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(N));
        let callers: Vec<_> = (0..N)
            .map(|_| {
                let (threads, barrier) = (threads.clone(), barrier.clone());
                std::thread::spawn(move || {
                    // Every job waits for all the others: they run at once.
                    threads.run(move || {
                        barrier.wait();
                        std::thread::current().id()
                    })
                })
            })
            .collect();
        let mut ids: Vec<_> = callers
            .into_iter()
            .map(|c| format!("{:?}", c.join().unwrap().unwrap()))
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), N);
        assert_eq!(threads.started(), N);
        assert!(threads.idle().is_some());
    }
}
