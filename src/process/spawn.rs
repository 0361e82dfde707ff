//! Fork and exec of a [`Spec`] (see the module docs of [`crate::process`] for what the child
//! does before `exec`).

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;

use super::Spec;

/// The shell a script without an interpreter line is run with (as `execvp` does).
const FALLBACK_SHELL: &str = "/bin/sh";

/// A spawned main process: its pid and this side of its pipes.
pub(super) struct Spawned {
    pub pid: libc::pid_t,
    pub stdin: Option<OwnedFd>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("path contains a NUL byte: {}", p.display()),
        )
    })
}

/// Fork and exec `program args...` with the spec's environment, root, cwd and descriptors.
fn spawn_one(spec: &Spec, program: &Path, args: &[OsString]) -> io::Result<Spawned> {
    let root = spec.chroot.as_deref().map(cstring).transpose()?;
    let cwd = cstring(&spec.cwd)?;
    let keep: Vec<RawFd> = spec.keep_fds.clone();
    // SAFETY: getpid(2) has no preconditions.
    let parent = unsafe { libc::getpid() };
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let hook = move || -> io::Result<()> {
        // Only async-signal-safe calls (prctl, getppid, fcntl, chroot, chdir, errno) and no
        // allocation: everything was prepared before the fork.
        // SAFETY: prctl(2) with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: getppid(2) has no preconditions.
        if unsafe { libc::getppid() } != parent {
            // The forking thread's process died before the prctl: nobody will wait for us.
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        for &fd in &keep {
            // SAFETY: fcntl(2) on an integer descriptor; an invalid one gives EBADF.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            // SAFETY: as above.
            if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        if let Some(root) = &root {
            // SAFETY: a valid NUL-terminated path prepared before the fork.
            if unsafe { libc::chroot(root.as_ptr()) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: as above.
        if unsafe { libc::chdir(cwd.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the hook only makes async-signal-safe calls and allocates nothing.
    unsafe {
        cmd.pre_exec(hook);
    }
    let mut child = cmd.spawn()?;
    let pid = libc::pid_t::try_from(child.id()).map_err(|_| io::Error::other("bad pid"))?;
    let stdin = child.stdin.take().map(OwnedFd::from);
    let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(io::Error::other("spawned process has no pipes"));
    };
    // Dropping `child` neither waits nor kills: the caller owns the pid now.
    Ok(Spawned {
        pid,
        stdin,
        stdout: OwnedFd::from(out),
        stderr: OwnedFd::from(err),
    })
}

/// Spawn the spec, retrying a file without an interpreter line with `/bin/sh`.
pub(super) fn spawn(spec: &Spec) -> io::Result<Spawned> {
    match spawn_one(spec, &spec.program, &spec.args) {
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {
            let mut args = Vec::with_capacity(spec.args.len() + 1);
            args.push(spec.program.clone().into_os_string());
            args.extend(spec.args.iter().cloned());
            spawn_one(spec, Path::new(FALLBACK_SHELL), &args)
        }
        other => other,
    }
}
