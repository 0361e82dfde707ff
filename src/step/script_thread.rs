//! The threads scripts run on: long-lived, each with a [`SCRIPT_STACK_BYTES`] stack, fed
//! jobs over a channel, so a step costs no thread start ([`on_script_thread`]).
//!
//! A caller takes an idle thread (or starts one when none is idle: concurrent runs, as in
//! `serve`, each get their own), hands it the job and blocks until the job's result comes
//! back; the thread then waits for the next job. At most [`MAX_IDLE`] threads wait; a
//! thread beyond that ends after its job. A job's panic is caught on the thread
//! (`catch_unwind`), which stays usable.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel, sync_channel};

use super::run::SCRIPT_STACK_BYTES;

/// How many script threads wait for work at most (the agent runs one script at a time and
/// keeps one; `serve` keeps up to this many for its concurrent runs).
pub const MAX_IDLE: usize = 4;

type Job = Box<dyn FnOnce() + Send>;

/// An idle script thread: the sending end of its job channel (dropping it ends the thread).
struct ScriptThread {
    jobs: Sender<Job>,
}

/// A set of script threads: the idle ones, and how many were started.
pub struct ScriptThreads {
    idle: Mutex<Vec<ScriptThread>>,
    started: AtomicUsize,
}

/// The process's script threads.
static THREADS: ScriptThreads = ScriptThreads::new();

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
    THREADS.run(job)
}

impl ScriptThreads {
    /// No threads yet.
    pub const fn new() -> ScriptThreads {
        ScriptThreads {
            idle: Mutex::new(Vec::new()),
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
        let mut thread = match self.idle().pop() {
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
        let mut idle = self.idle();
        if idle.len() < MAX_IDLE {
            idle.push(thread);
        }
        result
    }

    /// The idle threads (a panic cannot poison the list: nothing panics while it is held).
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<ScriptThread>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Start a script thread: it runs the jobs sent to it until its channel closes.
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

    /// Concurrent callers each get a thread of their own; at most [`MAX_IDLE`] stay.
    #[test]
    fn concurrent_jobs_get_threads_of_their_own() {
        let threads = std::sync::Arc::new(ScriptThreads::new());
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(MAX_IDLE + 2));
        let callers: Vec<_> = (0..MAX_IDLE + 2)
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
        assert_eq!(ids.len(), MAX_IDLE + 2);
        assert_eq!(threads.started(), MAX_IDLE + 2);
        assert_eq!(threads.idle().len(), MAX_IDLE);
    }
}
