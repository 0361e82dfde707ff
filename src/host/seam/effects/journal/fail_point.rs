//! A write failure injected into one journal's log (tests): the journal whose name starts
//! with the label given to [`fail_point::set`] writes only `keep` bytes of its record
//! number `nth`, then fails with `ENOSPC`, as a full disk does half-way.
use std::sync::Mutex;

static FAIL: Mutex<Vec<(String, usize, usize)>> = Mutex::new(Vec::new());

/// Make the journal of the step labelled `label` fail record `nth` after `keep` bytes.
pub(crate) fn set(label: &str, nth: usize, keep: usize) {
    FAIL.lock().unwrap().push((label.to_string(), nth, keep));
}

/// The bytes record `nth` of journal `name` may write, once.
pub(super) fn take(name: &str, nth: usize) -> Option<usize> {
    let mut v = FAIL.lock().unwrap();
    let i = v
        .iter()
        .position(|(l, n, _)| name.starts_with(&format!("{l}.")) && *n == nth)?;
    Some(v.remove(i).2)
}

/// A writer that fails with `ENOSPC` past its budget.
pub(super) struct Limited<'a, W> {
    inner: &'a mut W,
    left: Option<usize>,
}

impl<'a, W: std::io::Write> Limited<'a, W> {
    pub(super) fn new(inner: &'a mut W, left: Option<usize>) -> Self {
        Limited { inner, left }
    }
}

impl<W: std::io::Write> std::io::Write for Limited<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.left {
            None => self.inner.write(buf),
            Some(0) => Err(std::io::Error::from_raw_os_error(libc::ENOSPC)),
            Some(n) => {
                let k = self.inner.write(&buf[..buf.len().min(n)])?;
                self.left = Some(n - k);
                Ok(k)
            }
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A named point and the code to run there.
type Hook = (&'static str, Box<dyn FnOnce()>);

thread_local! {
    /// Code to run when this thread reaches a named point ([`at`], [`reach`]).
    static HOOKS: std::cell::RefCell<Vec<Hook>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Run `f` the next time this thread reaches `point` (`remove_journal`: a journal's
/// removal is about to unlink its log; `recover_opened`: a recovery opened a log and is
/// about to try its lock; `hold_dir_opened`: the journals' directory was opened and is
/// about to be locked).
pub(crate) fn at(point: &'static str, f: impl FnOnce() + 'static) {
    HOOKS.with(|h| h.borrow_mut().push((point, Box::new(f))));
}

/// Run the hook this thread set for `point`, once.
pub(super) fn reach(point: &str) {
    let hook = HOOKS.with(|h| {
        let mut h = h.borrow_mut();
        let i = h.iter().position(|(p, _)| *p == point)?;
        Some(h.remove(i).1)
    });
    if let Some(f) = hook {
        f();
    }
}

thread_local! {
    /// The journal `fdatasync`s this thread made ([`super::StepJournal::sync`]), for the
    /// tests that count them.
    pub(crate) static SYNCS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The journal syncs this thread made since the last call.
pub(crate) fn take_syncs() -> usize {
    SYNCS.with(|s| s.replace(0))
}
