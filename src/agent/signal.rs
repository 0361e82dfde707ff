//! SIGTERM/SIGINT handling (agent-contract.md section 11).
//!
//! The handler only records the request: the running step is not signalled (the package's
//! `gracefulShutdown` is the time it has to finish; the kubelet SIGKILLs after that). The mode
//! loop checks [`Shutdown::requested`] before each step. Steps run in their own process group,
//! so a terminal's Ctrl-C does not reach them either.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Notify;

/// A shared "stop before the next step" request.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    flag: Arc<AtomicBool>,
    notify: Arc<Notify>,
}

impl Shutdown {
    /// A request that is never set by a signal (for tests and embedding).
    pub fn new() -> Self {
        Self::default()
    }

    /// Install SIGTERM and SIGINT handlers that set the request. Must be called inside a
    /// tokio runtime with signal support enabled.
    ///
    /// # Errors
    /// When the handlers cannot be registered.
    pub fn install() -> std::io::Result<Self> {
        let me = Self::new();
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let task = me.clone();
        tokio::spawn(async move {
            loop {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                eprintln!(
                    "skyhook-agent: received {name}: the running step may finish, no further step will start"
                );
                task.request();
            }
        });
        Ok(me)
    }

    /// Record a stop request and wake waiters.
    pub fn request(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// True once a stop was requested.
    pub fn requested(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Wait until a stop is requested (returns at once if it already was).
    pub async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.requested() {
                return;
            }
            notified.await;
        }
    }

    /// Let pending signal deliveries run, then report whether a stop was requested.
    pub async fn check(&self) -> bool {
        tokio::task::yield_now().await;
        self.requested()
    }
}
