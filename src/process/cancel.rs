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

/// Most idle abort descriptors kept for reuse ([`IDLE_FDS`]).
const IDLE_KEPT: usize = 2;

/// Abort `eventfd`s of dropped tokens that were never aborted (so never written: their
/// counter is 0 and they are not readable), handed to the next token that needs one.
struct IdleFds(Mutex<Vec<OwnedFd>>);

impl IdleFds {
    const fn new() -> Self {
        IdleFds(Mutex::new(Vec::new()))
    }

    /// Keep `fd` of a dropped token at `level` for reuse, if it was never written (below
    /// ABORTED) and fewer than [`IDLE_KEPT`] are kept; otherwise it is closed.
    fn put(&self, fd: OwnedFd, level: u8) {
        if level >= ABORTED {
            return;
        }
        let mut idle = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < IDLE_KEPT {
            idle.push(fd);
        }
    }

    /// An unwritten `eventfd`: a kept one, else a new one (`None` when it cannot be made,
    /// e.g. `EMFILE`).
    fn take(&self) -> Option<OwnedFd> {
        if let Some(fd) = self.0.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            return Some(fd);
        }
        // SAFETY: eventfd(2) with valid flags; the result is checked before use.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        // SAFETY: a fresh descriptor we own.
        (raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw) })
    }
}

/// The process's idle abort descriptors. A run makes a token per step (the step's, and
/// [`run_async`](super::run_async)'s child of it); without this every step made an `eventfd`
/// and closed it at its end.
static IDLE_FDS: IdleFds = IdleFds::new();

impl Drop for Inner {
    fn drop(&mut self) {
        // Only `raise(ABORTED)` and `abort_fd` of an aborted token write the descriptor, both
        // after the level reached ABORTED, and the level never falls: below ABORTED it was
        // never written. Nobody else holds it (`abort_fd` lends it for `&self` only).
        if let Some(Some(fd)) = self.fd.take() {
            IDLE_FDS.put(fd, self.level.load(Ordering::SeqCst));
        }
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
    /// [`Cancel::is_aborted`] between its own events. The descriptor of a token dropped
    /// without an abort is reused by a later token (a few are kept idle), so a run of many
    /// steps does not make one per step.
    pub fn abort_fd(&self) -> Option<BorrowedFd<'_>> {
        let fd = self.0.fd.get_or_init(|| IDLE_FDS.take());
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
    fn idle_fds_keep_only_unwritten_descriptors() {
        let idle = IdleFds::new();
        let a = idle.take().expect("eventfd");
        let a_raw = a.as_raw_fd();
        idle.put(a, STOPPED);
        let again = idle.take().expect("kept");
        assert_eq!(again.as_raw_fd(), a_raw, "a stopped token's fd is reused");
        assert!(!readable(again.as_fd()));
        signal_eventfd(&again);
        idle.put(again, ABORTED);
        assert!(
            idle.0.lock().unwrap().is_empty(),
            "an aborted token's fd is closed"
        );
        let fresh = idle.take().expect("eventfd");
        assert!(!readable(fresh.as_fd()));
        let many: Vec<OwnedFd> = (0..IDLE_KEPT + 2).filter_map(|_| idle.take()).collect();
        assert_eq!(many.len(), IDLE_KEPT + 2);
        for fd in many {
            idle.put(fd, RUNNING);
        }
        assert_eq!(
            idle.0.lock().unwrap().len(),
            IDLE_KEPT,
            "at most IDLE_KEPT are kept"
        );
    }

    #[test]
    fn a_token_after_an_aborted_one_is_not_aborted_and_still_aborts() {
        for _ in 0..3 {
            let gone = Cancel::new();
            assert!(gone.abort_fd().is_some());
            gone.abort(CancelReason::Parent);
            drop(gone);
            let quiet = Cancel::new();
            assert!(quiet.abort_fd().is_some());
            drop(quiet);
        }
        let next = Cancel::new();
        let fd = next.abort_fd().expect("eventfd");
        assert!(!readable(fd), "a new token's fd is not readable");
        next.abort(CancelReason::Remote("r".into()));
        assert!(readable(next.abort_fd().unwrap()));
    }

    /// Aborts its token as soon as the process has started (no sleep, no race with the
    /// spawn); records nothing.
    struct AbortOnStart(Option<Cancel>);

    impl crate::process::Sink for AbortOnStart {
        fn started(&mut self) {
            if let Some(c) = self.0.take() {
                c.abort(CancelReason::Remote("test".into()));
            }
        }
        fn chunk(&mut self, _: crate::process::Stream, _: &[u8]) -> std::ops::ControlFlow<()> {
            std::ops::ControlFlow::Continue(())
        }
    }

    #[test]
    fn reused_descriptors_still_cancel_a_step_and_a_cancelled_step_does_not_poison_the_next() {
        use crate::process::{Options, Outcome, Spec, Status, run_async};
        let spec = |script: &str| Spec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: "/".into(),
            ..Spec::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let run_cancel = Cancel::new();
        let step = |script: &str, abort: bool| {
            let token = run_cancel.child();
            let options = Options {
                cancel: Some(token.clone()),
                term_grace: std::time::Duration::from_secs(5),
                ..Options::default()
            };
            let sink = AbortOnStart(abort.then_some(token));
            rt.block_on(run_async(spec(script), options, sink))
                .0
                .outcome
        };
        // Quiet steps leave their descriptors idle for the next ones.
        for _ in 0..3 {
            assert!(matches!(step("exit 0", false), Outcome::Exited(0)));
        }
        // A step on a reused descriptor is still ended by an abort (SIGTERM to `sleep`).
        match step("exec sleep 30", true) {
            Outcome::Cancelled { reason, status } => {
                assert_eq!(reason, CancelReason::Remote("test".into()));
                assert_eq!(status, Some(Status::Signal(libc::SIGTERM)));
            }
            other => panic!("expected a cancelled step, got {other:?}"),
        }
        // The aborted step's descriptor is not handed on: the next steps run to their end.
        for code in [0, 3] {
            let got = step(&format!("exit {code}"), false);
            assert!(matches!(got, Outcome::Exited(c) if c == code), "{got:?}");
        }
        assert!(!run_cancel.is_stopped(), "a step's abort stays the step's");
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
