//! The connector: a small process of the plan's query user (or, for the system bus, of the
//! bus user) that connects to the allowed sockets for the broker (why a process: the module
//! docs); and the bound of connections made as the shared bus user.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub(super) use crate::process::dbus_filter::Budget;
use crate::process::sandbox::QueryUser;

/// How long one connection may take: the connector's `SO_SNDTIMEO` is 2 s of it, a
/// non-Unix `connect` the broker makes for a query is given all of it.
pub(super) const CONNECT_WITHIN: Duration = Duration::from_secs(3);

/// An allowed socket, opened when the plan started.
#[derive(Debug)]
pub(super) struct Allowed {
    /// `O_PATH` of the socket file: the connector connects through `/proc/self/fd/N`.
    pub fd: OwnedFd,
    pub dev: u64,
    pub ino: u64,
    /// Its name is `system_bus_socket` (D-Bus's system bus: its connections go through
    /// `dbus_filter`).
    pub system_bus: bool,
}

/// `paths` opened (`O_PATH`) and `stat`ed; a path missing or not a socket is left out.
pub(super) fn allowed(paths: &[PathBuf]) -> Vec<Allowed> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _};
    paths
        .iter()
        .filter_map(|p| {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH)
                .open(p)
                .ok()?;
            let m = f.metadata().ok()?;
            m.file_type().is_socket().then(|| Allowed {
                dev: m.dev(),
                ino: m.ino(),
                fd: OwnedFd::from(f),
                system_bus: p.file_name() == Some("system_bus_socket".as_ref()),
            })
        })
        .take(usize::from(u8::MAX))
        .collect()
}

/// A `SOCK_SEQPACKET` Unix pair, both ends close-on-exec (the init's report; the socket
/// broker's inbox and its connector's channel).
pub(in crate::process) fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut pair = [0 as libc::c_int; 2];
    // SAFETY: socketpair(2) writes two descriptors into the array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) })
}

/// Receive one message on `sock` and the first descriptor sent with it (`SCM_RIGHTS`, made
/// close-on-exec; any other is closed): the message's length (up to `buf`'s, 0 when the peer
/// is gone) and the descriptor, if any. With `wait` false, `MSG_DONTWAIT`. The socket
/// broker's inbox and connector channel, the sandbox init's report.
///
/// # Errors
/// `recvmsg`'s (`EAGAIN` when `wait` is false and nothing is there); `EINTR` is retried.
pub(in crate::process) fn receive_fd(
    sock: RawFd,
    buf: &mut [u8],
    wait: bool,
) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; every pointer set is to a live local buffer.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    let flags = libc::MSG_CMSG_CLOEXEC | if wait { 0 } else { libc::MSG_DONTWAIT };
    let n = loop {
        // SAFETY: recvmsg into the buffers described by msg.
        let n = unsafe { libc::recvmsg(sock, &raw mut msg, flags) };
        if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break n;
        }
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fd = None;
    // SAFETY: walking the control messages recvmsg wrote into `control`; each descriptor
    // is new and ours (every one but the first is closed).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<libc::c_int>();
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<libc::c_int>();
                for i in 0..count {
                    let got = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    if fd.is_none() {
                        fd = Some(got);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&raw const msg, c);
        }
    }
    Ok((n as usize, fd))
}

/// The connector's `SO_SNDTIMEO` while it connects (a Unix `connect` waits that long for
/// room in a full backlog, then fails with `EAGAIN`).
const SEND_TIMEOUT: libc::timeval = libc::timeval {
    tv_sec: 2,
    tv_usec: 0,
};

/// Most connections to the system bus one plan holds at once as the bus user (module docs:
/// why 8 and [`BUS_USER_IN_ALL`]).
pub(super) const BUS_USER_PER_PLAN: usize = 8;

/// Most connections to the system bus the process holds at once as the bus user, over
/// every plan.
pub(super) const BUS_USER_IN_ALL: usize = 32;

/// The process's bus-user connections ([`BUS_USER_IN_ALL`]).
pub(super) static IN_ALL: Budget = Budget::new(BUS_USER_IN_ALL);

/// One live connection to the system bus made as the bus user, counted in its plan's
/// budget and the process's; given back when dropped (the D-Bus filter's thread holds it
/// for as long as the connection lives).
#[derive(Debug)]
pub(super) struct BusPermit {
    plan: Arc<Budget>,
    all: &'static Budget,
}

impl BusPermit {
    /// A place in `plan` and in `all`; `None` when either is full (nothing taken).
    pub(super) fn take(plan: &Arc<Budget>, all: &'static Budget) -> Option<BusPermit> {
        if !plan.take() {
            return None;
        }
        if !all.take() {
            plan.give_back();
            return None;
        }
        Some(BusPermit {
            plan: plan.clone(),
            all,
        })
    }
}

impl Drop for BusPermit {
    fn drop(&mut self) {
        self.plan.give_back();
        self.all.give_back();
    }
}

/// A running connector: its pid (our child) and our end of its channel.
#[derive(Debug)]
pub(super) struct Connector {
    pid: libc::pid_t,
    chan: OwnedFd,
}

impl Connector {
    /// Fork the connector from the calling thread (it dies with the thread): it keeps
    /// only its end of the channel and the `O_PATH` descriptors of the allowed sockets
    /// `pick` takes (it refuses the others, `ECONNREFUSED`), and becomes `user`.
    ///
    /// # Errors
    /// The channel or the fork failed.
    pub(super) fn start(
        allowed: &[Allowed],
        user: QueryUser,
        pick: fn(&Allowed) -> bool,
    ) -> io::Result<Connector> {
        // Everything the child uses is made before the fork: the addresses
        // (`/proc/self/fd/N` of each allowed socket picked) and the descriptors it keeps.
        let addrs: Vec<Option<(libc::sockaddr_un, libc::socklen_t)>> = allowed
            .iter()
            .map(|a| pick(a).then(|| proc_fd_address(a.fd.as_raw_fd())))
            .collect();
        let (mine, theirs) = seqpacket_pair()?;
        let mut keep: Vec<RawFd> = allowed
            .iter()
            .filter(|a| pick(a))
            .map(|a| a.fd.as_raw_fd())
            .collect();
        keep.push(theirs.as_raw_fd());
        keep.sort_unstable();
        // SAFETY: getpid(2) has no preconditions.
        let parent = unsafe { libc::getpid() };
        let mut live = crate::process::reaper::registry();
        // Every signal blocked around the fork: the child keeps that mask, so no handler of
        // the server's runs in it (SIGKILL still ends it).
        let old = nix::sys::signal::SigSet::all()
            .thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_SETMASK)
            .map_err(io::Error::from)?;
        // SAFETY: a fork (no CLONE_VM, no stack given): the child runs `child_main`, which
        // makes only system calls on data prepared above and never returns.
        let pid =
            unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0) };
        if pid == 0 {
            child_main(theirs.as_raw_fd(), &keep, &addrs, user, parent);
        }
        let failed = (pid < 0).then(io::Error::last_os_error);
        let _ = old.thread_set_mask();
        if let Some(e) = failed {
            return Err(e);
        }
        let pid = pid as libc::pid_t;
        live.insert(pid);
        Ok(Connector { pid, chan: mine })
    }

    /// Connect to allowed socket `at`: `Ok(Ok(socket))`, `Ok(Err(errno))` of the
    /// connector's `connect`, or `Err` when the connector did not answer within
    /// [`CONNECT_WITHIN`] or is gone (drop it).
    pub(super) fn connect(&mut self, at: usize) -> io::Result<Result<OwnedFd, i32>> {
        let byte = u8::try_from(at).map_err(|_| io::Error::other("no such allowed socket"))?;
        // SAFETY: send(2) of one byte of ours.
        let sent = unsafe {
            libc::send(
                self.chan.as_raw_fd(),
                (&raw const byte).cast(),
                1,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if sent != 1 {
            return Err(io::Error::last_os_error());
        }
        let deadline = std::time::Instant::now() + CONNECT_WITHIN;
        loop {
            let mut p = libc::pollfd {
                fd: self.chan.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            // SAFETY: poll(2) on one pollfd of ours.
            let n = unsafe { libc::poll(&mut p, 1, left.as_millis() as libc::c_int) };
            if n == 1 {
                break;
            }
            if n == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return Err(io::Error::from(io::ErrorKind::TimedOut));
            }
        }
        let mut reply = [0u8; 4];
        match receive_fd(self.chan.as_raw_fd(), &mut reply, false) {
            Ok((4, fd)) => match (i32::from_ne_bytes(reply), fd) {
                (0, Some(fd)) => Ok(Ok(fd)),
                (0, None) => Err(io::Error::other("the connector sent no socket")),
                (e, _) => Ok(Err(e)),
            },
            _ => Err(io::Error::other("the connector is gone")),
        }
    }
}

impl Drop for Connector {
    fn drop(&mut self) {
        let mut live = crate::process::reaper::registry();
        // SAFETY: kill and reap our own child (a zombie until reaped: its pid is not reused).
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            while libc::waitpid(self.pid, std::ptr::null_mut(), 0) < 0
                && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
            {}
        }
        live.remove(&self.pid);
    }
}

/// A `sockaddr_un` of `/proc/self/fd/FD` and its length.
pub(super) fn proc_fd_address(fd: RawFd) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: sockaddr_un is plain data.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let path = format!("/proc/self/fd/{fd}");
    for (d, s) in a.sun_path.iter_mut().zip(path.bytes()) {
        *d = s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + path.len() + 1;
    (a, len as libc::socklen_t)
}

/// The connector (a forked child: system calls only, nothing allocated, never returns):
/// dies with the broker's thread, closes every descriptor but `keep`, becomes `user` (no
/// supplementary group, every id, raw system calls: glibc's wrappers would signal threads
/// this copy does not have), not dumpable, `no_new_privs`; then for each index byte
/// received on `chan` connects a new stream socket to `addrs[index]` (`ECONNREFUSED` when
/// there is none) and sends back the `errno` (4 bytes) with the socket when it is 0.
fn child_main(
    chan: RawFd,
    keep: &[RawFd],
    addrs: &[Option<(libc::sockaddr_un, libc::socklen_t)>],
    user: QueryUser,
    parent: libc::pid_t,
) -> ! {
    let quit = || -> ! {
        // SAFETY: exit_group(2) ends this process.
        unsafe { libc::syscall(libc::SYS_exit_group, 1) };
        unreachable!("exit_group returned")
    };
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    // SAFETY (every block below): plain system calls on integers and on buffers of this
    // (copied) address space.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0
            || libc::getppid() != parent
        {
            quit();
        }
        let mut from = 0u32;
        for &k in keep {
            let k = k as u32;
            if k > from {
                libc::syscall(libc::SYS_close_range, from, k - 1, 0u32);
            }
            from = k + 1;
        }
        libc::syscall(libc::SYS_close_range, from, u32::MAX, 0u32);
        let (uid, gid) = (user.uid(), user.gid());
        if libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) != 0
            || libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0
            || libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0
            || libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            // a change of ids clears the parent-death signal
            || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0
            || libc::getppid() != parent
        {
            quit();
        }
        loop {
            let mut at = 0u8;
            let n = libc::recv(chan, (&raw mut at).cast(), 1, 0);
            if n == 0 || (n < 0 && errno() != libc::EINTR) {
                quit();
            }
            if n < 0 {
                continue;
            }
            let mut err: i32 = libc::ECONNREFUSED;
            let s = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            if s < 0 {
                err = errno();
            } else if let Some(Some((addr, len))) = addrs.get(usize::from(at)) {
                let tv = |t: &libc::timeval| {
                    libc::setsockopt(
                        s,
                        libc::SOL_SOCKET,
                        libc::SO_SNDTIMEO,
                        (t as *const libc::timeval).cast(),
                        std::mem::size_of::<libc::timeval>() as libc::socklen_t,
                    )
                };
                tv(&SEND_TIMEOUT);
                err = if libc::connect(s, (addr as *const libc::sockaddr_un).cast(), *len) == 0 {
                    0
                } else {
                    errno()
                };
                tv(&libc::timeval {
                    tv_sec: 0,
                    tv_usec: 0,
                });
            }
            let mut iov = libc::iovec {
                iov_base: (&raw mut err).cast(),
                iov_len: 4,
            };
            let mut control = [0u64; 4];
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &raw mut iov;
            msg.msg_iovlen = 1;
            if err == 0 {
                msg.msg_control = control.as_mut_ptr().cast();
                msg.msg_controllen =
                    libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as _;
                let c = libc::CMSG_FIRSTHDR(&raw const msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), s);
            }
            libc::sendmsg(chan, &raw const msg, libc::MSG_NOSIGNAL);
            if s >= 0 {
                libc::close(s);
            }
        }
    }
}
