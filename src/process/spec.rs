//! [`Spec`]: what a run starts (everything the process sees), and [`Options`]: how it is
//! bounded.

use std::ffi::OsString;
use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::cancel::Cancel;

/// Largest single read from a pipe, in bytes (the default pipe capacity, 64 KiB).
pub const MAX_READ: usize = 64 * 1024;

/// `PATH` for a step or command whose environment has none (agent-contract.md 8.3): the one
/// definition, re-exported where steps and host commands are built.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What to run: everything the process sees.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// Path of the executable as seen by the process (inside the chroot if any); without a
    /// `/` it is looked up in the `PATH` of [`Spec::env`].
    pub program: PathBuf,
    /// `argv[1..]` (`argv[0]` is `program`).
    pub args: Vec<OsString>,
    /// The complete environment: nothing of this process's is inherited.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory as seen by the process (after the chroot).
    pub cwd: PathBuf,
    /// Directory (as seen by this process) to chroot into; `None`: no chroot.
    pub chroot: Option<PathBuf>,
    /// Bytes written to the process's stdin, then closed; `None`: stdin is `/dev/null`.
    /// Written as the process reads them (no deadlock with a process that writes first);
    /// a process that exits without reading them all is not an error.
    pub stdin: Option<Vec<u8>>,
    /// Descriptors of this process that the child inherits (their `FD_CLOEXEC` is cleared
    /// in the child only). Must be open; must not be 0, 1 or 2.
    pub keep_fds: Vec<RawFd>,
    /// A cgroup directory (see `cgroup`) the process joins before `exec`; the run then
    /// ends its members instead of the adopted descendants. `None`: the process group and
    /// the subreaper sweep are the boundary.
    pub cgroup: Option<PathBuf>,
    /// A mount namespace (an open `/proc/<pid>/ns/mnt`, or a bind mount of one) the process
    /// enters before the chroot and `exec`, so what it mounts is mounted there. `None`: the
    /// namespace of the spawning thread.
    pub mount_ns: Option<Arc<OwnedFd>>,
}

/// How a run is bounded; [`Default`]: no timeout, no token, 10 s grace periods, 64 KiB
/// reads.
#[derive(Debug, Clone)]
pub struct Options {
    /// End the run (`SIGTERM`, [`Options::term_grace`], `SIGKILL`) when the main process
    /// runs longer than this; `None`: no limit.
    pub timeout: Option<Duration>,
    /// End the run the same way once this token is aborted ([`Cancel::abort`]; a
    /// [`Cancel::stop`] does not end a running process).
    pub cancel: Option<Cancel>,
    /// Time between `SIGTERM` and `SIGKILL` after a timeout, an abort or a sink's stop.
    pub term_grace: Duration,
    /// Time between `SIGTERM` to what is left of the step and `SIGKILL`, after the main
    /// process exited, while output is still drained (cut short by end of file on both
    /// pipes).
    pub exit_grace: Duration,
    /// Largest single read, in bytes; clamped to `1..=`[`MAX_READ`].
    pub read_size: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: None,
            cancel: None,
            term_grace: Duration::from_secs(10),
            exit_grace: Duration::from_secs(10),
            read_size: MAX_READ,
        }
    }
}
