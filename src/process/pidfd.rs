//! Process descriptors (`pidfd_open(2)`): what the run waits on for the main process.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// A pidfd of `pid` (`pidfd_open(2)`), readable once the process exited; `None` when the
/// process is gone (reaped) or the kernel has no pidfds.
pub(super) fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open(2) with a pid and no flags; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = RawFd::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: a fresh descriptor we own.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// True when the process of pidfd `fd` has exited (it is readable) within `within`.
pub(super) fn exited_within(fd: &OwnedFd, within: std::time::Duration) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(within.as_millis()).unwrap_or(libc::c_int::MAX);
    loop {
        // SAFETY: one valid pollfd.
        match unsafe { libc::poll(&mut p, 1, ms) } {
            -1 if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            n => return n == 1,
        }
    }
}

/// Test helper: true when the process `pid` (decimal text, surrounding whitespace allowed)
/// has exited (a zombie counts), waiting for its pidfd at most 10 s: a `SIGKILL`ed process
/// that is not our child finishes dying asynchronously.
#[cfg(test)]
pub(crate) fn wait_exited(pid: &str) -> bool {
    use std::os::fd::AsRawFd;
    let pid: libc::pid_t = pid.trim().parse().expect("a pid");
    let Some(fd) = pidfd_open(pid) else {
        return true; // ESRCH: reaped already
    };
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, 10_000) == 1 }
}
