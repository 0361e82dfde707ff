//! Nothing outlives a step: this process as a child subreaper, and the registry of the main
//! processes [`crate::process::run`](fn@crate::process::run) is running.
//!
//! With `prctl(PR_SET_CHILD_SUBREAPER)` ([`enable_subreaper`], called by the binaries at
//! start, never implicitly), a process whose parent dies is re-parented to this process
//! instead of init, including one that called `setsid` or `nohup`. Such an *adopted*
//! descendant is a child of this process that the primitive did not spawn: every child
//! that is not in the registry of live main processes. Ending a run signals the adopted
//! descendants with the run's process group (`SIGTERM`, then `SIGKILL`), and after a run
//! they are killed and reaped, looping until none is left (killing one can orphan more).
//! The main processes of other runs in progress are never touched; their adopted
//! descendants are (they cannot be told apart), which only matters for concurrent runs,
//! unless those runs have a cgroup of their own ([`super::cgroup`]): its live members are
//! never swept by another run.
//!
//! Adopted children are listed from `/proc/self/task/<pid>/children` (the main thread's: an
//! orphan is re-parented to the subreaper's first live thread), or, when the kernel lacks
//! `CONFIG_PROC_CHILDREN`, by scanning `/proc/*/stat` for a parent pid equal to ours.

use std::collections::BTreeSet;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Pids of main processes spawned by the primitive and not reaped yet.
static LIVE: Mutex<BTreeSet<libc::pid_t>> = Mutex::new(BTreeSet::new());

/// Make this process a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER, 1)`) and have every
/// later run kill and reap the descendants it adopts. Call it once at the start of a binary
/// (before any thread spawns processes); library code never enables it.
///
/// # Errors
/// The `prctl` error (e.g. `EINVAL` on a kernel older than 3.4); the subreaper is then not
/// enabled and orphans go to init.
pub fn enable_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)?;
    ENABLED.store(true, Ordering::SeqCst);
    Ok(())
}

/// True once [`enable_subreaper`] succeeded in this process.
pub fn subreaper_enabled() -> bool {
    ENABLED.load(Ordering::SeqCst)
}

/// The registry of live main processes. Held across a spawn (so a concurrent sweep cannot
/// mistake a child that is not registered yet for an adopted one) and across the reap of a
/// main process (so its pid cannot be reused and registered by another run before it is
/// removed).
pub(super) fn registry() -> MutexGuard<'static, BTreeSet<libc::pid_t>> {
    match LIVE.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Adopted children of this process: those of its main thread, from
/// `/proc/self/task/<pid>/children`; `None` when unavailable.
///
/// The kernel re-parents an orphan to the first live thread of the subreaper
/// (`find_new_reaper` → `find_alive_thread`, which walks the thread list from the group
/// leader), i.e. to the main thread while the process runs; the other threads' children
/// are the main processes they spawned, which are registered and never adopted. One file
/// read instead of one per thread keeps the sweep cheap (it runs twice per process run).
fn children_from_tasks() -> Option<Vec<libc::pid_t>> {
    // SAFETY: getpid(2) has no preconditions.
    let me = unsafe { libc::getpid() };
    let text = std::fs::read_to_string(format!("/proc/self/task/{me}/children")).ok()?;
    Some(
        text.split_whitespace()
            .filter_map(|p| p.parse::<libc::pid_t>().ok())
            .collect(),
    )
}

/// Children of every thread of this process, from `/proc/self/task/*/children`; `None` when
/// unavailable.
#[cfg(test)]
pub(super) fn children_of_all_tasks() -> Option<Vec<libc::pid_t>> {
    let mut pids = Vec::new();
    let mut any = false;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        any = true;
        pids.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<libc::pid_t>().ok()),
        );
    }
    any.then_some(pids)
}

/// Children of this process from the parent field of every `/proc/<pid>/stat`.
fn children_from_stat() -> Vec<libc::pid_t> {
    // SAFETY: getpid(2) has no preconditions.
    let me = unsafe { libc::getpid() };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| stat_ppid(&s))
                == Some(me)
        })
        .collect()
}

/// The parent pid (field 4) of a `/proc/<pid>/stat` line; the command (field 2) may contain
/// spaces and parentheses, so fields are counted after its last `)`.
fn stat_ppid(stat: &str) -> Option<libc::pid_t> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Adopted descendants: children that are not live main processes, nor live members of the
/// cgroup of a run in progress (that run ends them itself, see [`super::cgroup`]). Call
/// with the registry held.
fn adopted(live: &BTreeSet<libc::pid_t>) -> Vec<libc::pid_t> {
    let mut pids = children_from_tasks().unwrap_or_else(children_from_stat);
    pids.sort_unstable();
    pids.dedup();
    pids.retain(|p| !live.contains(p));
    if !pids.is_empty() {
        let bounded = super::cgroup::members_of_active();
        pids.retain(|p| !bounded.contains(p));
    }
    pids
}

/// Reap every adopted child that has exited already (`WNOHANG`), whoever's orphan it was:
/// a dead process is no one's to keep (nothing when the subreaper is not enabled). Returns
/// how many were reaped.
pub(super) fn reap_exited_adopted() -> usize {
    if !subreaper_enabled() {
        return 0;
    }
    let live = registry();
    let mut reaped = 0;
    for pid in adopted(&live) {
        if let Ok(s) = nix::sys::wait::waitpid(
            Pid::from_raw(pid),
            Some(nix::sys::wait::WaitPidFlag::WNOHANG),
        ) && s != nix::sys::wait::WaitStatus::StillAlive
        {
            reaped += 1;
        }
    }
    reaped
}

/// True when the subreaper is enabled and this process has no adopted descendant (one read
/// of `/proc/self/task/<pid>/children`, under the registry lock).
///
/// Asked once the main process of a run has exited (it is a zombie, not reaped yet): the
/// kernel re-parents the exiting process's children to the subreaper before the exit can be
/// seen (pidfd readable, `waitid`), so every live descendant of it is, or descends from, an
/// adopted child. None adopted therefore means its process group holds nothing but the
/// zombie leader (the group was made by `setpgid(0, 0)` in the agent's session; only a
/// process of that session, i.e. of another run, could join it), and the run skips
/// `SIGTERM`, `SIGKILL` and the sweeps. False when the subreaper is not enabled (nothing
/// can be proven then) or any child that is not a live main process exists.
pub(super) fn nothing_adopted() -> bool {
    if !subreaper_enabled() {
        return false;
    }
    let live = registry();
    adopted(&live).is_empty()
}

/// Send `sig` to every adopted descendant (nothing when the subreaper is not enabled).
pub(super) fn signal_adopted(sig: Signal) {
    if !subreaper_enabled() {
        return;
    }
    let live = registry();
    for pid in adopted(&live) {
        let _ = kill(Pid::from_raw(pid), sig);
    }
}

/// `SIGKILL` and reap every adopted descendant, until none is left (nothing when the
/// subreaper is not enabled). Returns how many were reaped.
pub(super) fn kill_and_reap_adopted() -> usize {
    if !subreaper_enabled() {
        return 0;
    }
    let mut reaped = 0;
    loop {
        let pids = {
            let live = registry();
            let pids = adopted(&live);
            for &pid in &pids {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            pids
        };
        if pids.is_empty() {
            return reaped;
        }
        for pid in pids {
            // SIGKILLed: the wait is short. ECHILD (another sweep reaped it) is fine.
            loop {
                match nix::sys::wait::waitpid(Pid::from_raw(pid), None) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    Ok(_) => reaped += 1,
                    Err(_) => {}
                }
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ppid_is_read_after_the_command() {
        assert_eq!(stat_ppid("42 (a) b) c) S 7 42 42 0"), Some(7));
        assert_eq!(stat_ppid("1 (init) S 0 1 1"), Some(0));
        assert_eq!(stat_ppid("garbage"), None);
    }

    #[test]
    fn children_are_listed() {
        let mut c = std::process::Command::new("/bin/sh")
            .args(["-c", "read x"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = c.id() as libc::pid_t;
        if let Some(t) = children_of_all_tasks() {
            assert!(t.contains(&pid), "{t:?} lacks {pid}");
        }
        assert!(children_from_stat().contains(&pid));
        drop(c.stdin.take());
        c.wait().unwrap();
    }
}
