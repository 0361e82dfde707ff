//! Cancellation as a value: [`Cancel`], passed down from whoever may stop a run (the agent's
//! SIGTERM handler, a remote cancel, a step's deadline) to whatever runs (the mode loop, the
//! process primitive, a `.rhai` step's `on_progress` hook).
//!
//! A token has two levels, because the contract has two kinds of stop:
//!
//! - [`Cancel::stop`]: finish what is running, start nothing new. The agent's SIGTERM is a
//!   stop (agent-contract.md section 11: the package's `gracefulShutdown` is the time the
//!   running step has to finish; the kubelet SIGKILLs after it).
//! - [`Cancel::abort`]: end what is running now. A process gets `SIGTERM` to its group, a
//!   grace period while its output is still drained, then `SIGKILL`; a `.rhai` step stops at
//!   its next operation or command. Remote cancels and deadlines abort. An abort is also a
//!   stop.
//!
//! Tokens form a tree: [`Cancel::child`] gives a token that is stopped or aborted with its
//! parent but can be aborted alone (one step's deadline aborts that step, not the run).
//!
//! Waiting: async code awaits [`Cancel::stopped`] / [`Cancel::aborted`]; blocking code that
//! `poll(2)`s includes [`Cancel::abort_fd`], an `eventfd` that becomes readable (and stays
//! readable) once the token is aborted. Nothing sleeps or polls a flag on a timer.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::sync::Notify;

/// Why a token was stopped or aborted (the first reason given wins).
#[derive(Debug, Clone, PartialEq)]
pub enum CancelReason {
    /// A signal to this process (`SIGTERM`, `SIGINT`).
    Signal(&'static str),
    /// A deadline passed (what it was, e.g. `SKYHOOK_SCRIPT_TIMEOUT`, and its length in
    /// seconds).
    Deadline {
        /// The setting the deadline comes from.
        what: String,
        /// Its length in seconds.
        secs: f64,
    },
    /// A remote client asked (its engine name or request id).
    Remote(String),
    /// The parent token was cancelled without a reason of its own (not produced by this
    /// module's API: every cancel gives a reason, which children inherit).
    Parent,
}

impl std::fmt::Display for CancelReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CancelReason::Signal(s) => write!(f, "{s} received"),
            CancelReason::Deadline { what, secs } => write!(f, "deadline of {secs}s ({what})"),
            CancelReason::Remote(who) => write!(f, "cancelled by {who}"),
            CancelReason::Parent => f.write_str("the run was cancelled"),
        }
    }
}

const RUNNING: u8 = 0;
const STOPPED: u8 = 1;
const ABORTED: u8 = 2;

struct Inner {
    level: AtomicU8,
    reason: OnceLock<CancelReason>,
    notify: Notify,
    /// Readable once aborted; made on first use of [`Cancel::abort_fd`].
    fd: OnceLock<Option<OwnedFd>>,
    children: Mutex<Vec<Weak<Inner>>>,
}

impl Inner {
    fn new() -> Self {
        Inner {
            level: AtomicU8::new(RUNNING),
            reason: OnceLock::new(),
            notify: Notify::new(),
            fd: OnceLock::new(),
            children: Mutex::new(Vec::new()),
        }
    }

    /// Raise the level to at least `level`; true when it rose.
    fn raise(&self, level: u8, reason: CancelReason) -> bool {
        let prev = self.level.fetch_max(level, Ordering::SeqCst);
        if prev >= level {
            return false;
        }
        let _ = self.reason.set(reason);
        if level == ABORTED
            && let Some(Some(fd)) = self.fd.get()
        {
            signal_eventfd(fd);
        }
        self.notify.notify_waiters();
        let children = match self.children.lock() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        };
        for child in children.iter().filter_map(Weak::upgrade) {
            child.raise(level, reason_of(self));
        }
        true
    }
}

/// The reason `inner` was cancelled with (what its children inherit).
fn reason_of(inner: &Inner) -> CancelReason {
    inner.reason.get().cloned().unwrap_or(CancelReason::Parent)
}

fn signal_eventfd(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64 to an eventfd we own.
    unsafe {
        libc::write(
            fd.as_raw_fd(),
            (&raw const one).cast::<libc::c_void>(),
            std::mem::size_of::<u64>(),
        );
    }
}

/// A cancellation token (see the module docs). Cloning shares the token.
#[derive(Clone)]
pub struct Cancel(Arc<Inner>);

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancel")
            .field("stopped", &self.is_stopped())
            .field("aborted", &self.is_aborted())
            .field("reason", &self.reason())
            .finish()
    }
}

impl Default for Cancel {
    fn default() -> Self {
        Self::new()
    }
}

impl Cancel {
    /// A token nobody has cancelled yet.
    pub fn new() -> Self {
        Cancel(Arc::new(Inner::new()))
    }

    /// A token cancelled with `self` (at the same level, with `self`'s reason)
    /// that can also be cancelled alone. Already cancelled if `self` is.
    pub fn child(&self) -> Cancel {
        let child = Cancel::new();
        {
            let mut children = match self.0.children.lock() {
                Ok(c) => c,
                Err(p) => p.into_inner(),
            };
            children.retain(|w| w.strong_count() > 0);
            children.push(Arc::downgrade(&child.0));
        }
        // After registering, so a concurrent cancel of the parent is not missed.
        let level = self.0.level.load(Ordering::SeqCst);
        if level != RUNNING {
            child.0.raise(level, reason_of(&self.0));
        }
        child
    }

    /// Finish what runs, start nothing new. Returns true when this call stopped the token.
    pub fn stop(&self, reason: CancelReason) -> bool {
        self.0.raise(STOPPED, reason)
    }

    /// End what runs now (implies [`Cancel::stop`]). Returns true when this call aborted
    /// the token.
    pub fn abort(&self, reason: CancelReason) -> bool {
        self.0.raise(ABORTED, reason)
    }

    /// True once stopped or aborted: start nothing new.
    pub fn is_stopped(&self) -> bool {
        self.0.level.load(Ordering::SeqCst) >= STOPPED
    }

    /// True once aborted: end what runs.
    pub fn is_aborted(&self) -> bool {
        self.0.level.load(Ordering::SeqCst) >= ABORTED
    }

    /// The first reason given, once stopped or aborted.
    pub fn reason(&self) -> Option<CancelReason> {
        self.0.reason.get().cloned()
    }

    async fn wait_for(&self, level: u8) {
        loop {
            let notified = self.0.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.0.level.load(Ordering::SeqCst) >= level {
                return;
            }
            notified.await;
        }
    }

    /// Resolves once the token is stopped or aborted (at once if it already is).
    pub async fn stopped(&self) {
        self.wait_for(STOPPED).await;
    }

    /// Resolves once the token is aborted (at once if it already is).
    pub async fn aborted(&self) {
        self.wait_for(ABORTED).await;
    }

    /// An `eventfd` that is readable (`POLLIN`) from the moment the token is aborted, for
    /// blocking code that waits with `poll(2)`. Never read it: it stays readable. `None` when
    /// the descriptor cannot be made (`EMFILE`); such a caller must fall back on
    /// [`Cancel::is_aborted`] between its own events.
    pub fn abort_fd(&self) -> Option<BorrowedFd<'_>> {
        let fd = self.0.fd.get_or_init(|| {
            // SAFETY: eventfd(2) with valid flags; the result is checked before use.
            let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            // SAFETY: a fresh descriptor we own.
            (raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw) })
        });
        let fd = fd.as_ref()?;
        // An abort that happened before the descriptor existed.
        if self.is_aborted() {
            signal_eventfd(fd);
        }
        Some(fd.as_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(fd: BorrowedFd<'_>) -> bool {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 1 && p.revents & libc::POLLIN != 0
    }

    #[test]
    fn levels_and_first_reason() {
        let c = Cancel::new();
        assert!(!c.is_stopped() && !c.is_aborted() && c.reason().is_none());
        assert!(c.stop(CancelReason::Signal("SIGTERM")));
        assert!(c.is_stopped() && !c.is_aborted());
        assert!(!c.stop(CancelReason::Remote("x".into())), "already stopped");
        assert!(c.abort(CancelReason::Remote("engine-a".into())));
        assert!(c.is_aborted());
        assert_eq!(c.reason(), Some(CancelReason::Signal("SIGTERM")));
    }

    #[test]
    fn children_follow_the_parent_not_the_other_way() {
        let parent = Cancel::new();
        let a = parent.child();
        let b = parent.child();
        assert!(a.abort(CancelReason::Deadline {
            what: "SKYHOOK_SCRIPT_TIMEOUT".into(),
            secs: 1.0
        }));
        assert!(a.is_aborted() && !b.is_stopped() && !parent.is_stopped());
        parent.stop(CancelReason::Signal("SIGTERM"));
        assert!(b.is_stopped() && !b.is_aborted());
        assert_eq!(b.reason(), Some(CancelReason::Signal("SIGTERM")));
        parent.abort(CancelReason::Signal("SIGTERM"));
        assert!(b.is_aborted());
        // a child made after the cancel starts cancelled
        let late = parent.child();
        assert!(late.is_aborted());
    }

    #[test]
    fn abort_fd_becomes_readable_and_stays() {
        let c = Cancel::new();
        let fd = c.abort_fd().expect("eventfd");
        assert!(!readable(fd));
        c.stop(CancelReason::Signal("SIGTERM"));
        assert!(!readable(c.abort_fd().unwrap()), "a stop is not an abort");
        c.abort(CancelReason::Remote("r".into()));
        assert!(readable(c.abort_fd().unwrap()));
        assert!(readable(c.abort_fd().unwrap()));
        // aborted before the fd existed
        let d = Cancel::new();
        d.abort(CancelReason::Parent);
        assert!(readable(d.abort_fd().unwrap()));
    }

    #[test]
    fn async_waiters_wake() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let c = Cancel::new();
            let w = c.clone();
            let waiter = tokio::spawn(async move {
                w.stopped().await;
                let stopped_only = !w.is_aborted();
                w.aborted().await;
                stopped_only
            });
            tokio::task::yield_now().await;
            c.stop(CancelReason::Signal("SIGTERM"));
            tokio::task::yield_now().await;
            c.abort(CancelReason::Signal("SIGTERM"));
            assert!(waiter.await.unwrap());
        });
    }
}
