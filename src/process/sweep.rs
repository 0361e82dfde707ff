//! Ending what is left in a run's cgroup: `SIGKILL` to every member, round after round until
//! the cgroup is empty, reaping the adopted children of this process as they exit (a member
//! re-parented to the subreaper is ours to reap). It joins [`super::cgroup`] (the members)
//! and [`super::reaper`] (the adopted children), which know nothing of each other's sweeps.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{cgroup, reaper};

/// Rounds of [`kill_all`] before it gives up (a fork bomb outrunning the kills).
const KILL_ROUNDS: usize = 1000;

/// `SIGKILL` every member of `dir` until none is left (through `cgroup.kill` when present),
/// reaping the adopted children of this process that exited, for at most `within`. True
/// when the cgroup is empty.
pub fn kill_all(dir: &Path, within: Duration) -> bool {
    let until = Instant::now() + within;
    let has_kill = dir.join("cgroup.kill").exists();
    for _ in 0..KILL_ROUNDS {
        let pids = cgroup::procs(dir);
        if pids.is_empty() {
            reaper::reap_exited_adopted();
            return true;
        }
        let fds: Vec<OwnedFd> = pids.iter().filter_map(|&p| super::pidfd_open(p)).collect();
        if !(has_kill && std::fs::write(dir.join("cgroup.kill"), "1").is_ok()) {
            for &p in &pids {
                let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
            }
        }
        let done = cgroup::wait_fds(&fds, until);
        reaper::reap_exited_adopted();
        if !done {
            return cgroup::procs(dir).is_empty();
        }
    }
    cgroup::procs(dir).is_empty()
}
