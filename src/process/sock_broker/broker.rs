//! The broker's thread: it receives each command's listener and answers every `connect`
//! (see the module docs).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use super::connector::{
    Allowed, BUS_USER_PER_PLAN, Budget, BusPermit, CONNECT_WITHIN, Connector, IN_ALL, allowed,
    proc_fd_address, receive_fd, seqpacket_pair,
};
use crate::process::sandbox::QueryUser;

/// Most connections to allowed sockets a plan's broker makes; later `connect`s are
/// `ECONNREFUSED`.
pub(crate) const MAX_CONNECTIONS: usize = 256;

/// Most `connect`s a plan's broker looks at (reads, resolves, connects); past it every
/// `connect` of the plan is refused (`ECONNREFUSED`) unread, so a query looping on
/// `connect` costs the server's thread two `ioctl`s a call.
const MAX_ANSWERS: usize = 100_000;

/// Most listeners a broker holds at once (one per live command of the plan, a command
/// being live while any process of it is: at most `--plan-pids` of them). A command's
/// listener past it is closed when it arrives: the kernel then answers each `connect` of
/// that command (Unix, IP, any family) `ENOSYS` at once (a filter whose listener is
/// gone), so it reaches nothing and never waits; the place is taken again once every
/// process of a held command is gone.
const MAX_LISTENERS: usize = 4096;

/// True when this kernel has what the broker needs: seccomp user notification with
/// `SECCOMP_IOCTL_NOTIF_ADDFD` (Linux ≥ 5.9; `pidfd_getfd` is 5.6). Read once (`uname`).
pub(crate) fn supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        nix::sys::utsname::uname().is_ok_and(|u| {
            let release = u.release().to_string_lossy().into_owned();
            let mut n = release
                .split(|c: char| !c.is_ascii_digit())
                .map(|x| x.parse::<u32>().unwrap_or(0));
            (n.next().unwrap_or(0), n.next().unwrap_or(0)) >= (5, 9)
        })
    })
}

/// A plan's broker: its inbox, and its thread (stopped and joined when dropped).
#[derive(Debug)]
pub(crate) struct Broker {
    /// The sending end of the inbox (`SOCK_SEQPACKET`): a command sends its listener here.
    inbox: OwnedFd,
    /// An eventfd the thread polls: written, it ends.
    stop: OwnedFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Broker {
    /// A descriptor of the inbox's sending end (for the sandbox, whose commands send to it).
    ///
    /// # Errors
    /// `dup` failed.
    pub(crate) fn inbox(&self) -> io::Result<OwnedFd> {
        self.inbox.try_clone()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // SAFETY: write(2) of 8 bytes to an eventfd we own.
        unsafe { libc::write(self.stop.as_raw_fd(), (&1u64 as *const u64).cast(), 8) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Start a plan's broker: `paths` are the allowed sockets (server paths), `user` the plan's
/// query user, `bus_user` who connects to the system bus for it (`None`: `user`). Call it
/// where the server's mount namespace and capabilities still are (the plan's thread before
/// it leaves them): the thread inherits both.
///
/// # Errors
/// The inbox, the eventfd or the thread could not be made.
pub(crate) fn start(
    paths: &[PathBuf],
    user: QueryUser,
    bus_user: Option<QueryUser>,
) -> io::Result<Broker> {
    start_bounded(paths, user, bus_user, MAX_LISTENERS)
}

/// [`start`] with a bound of `max_listeners` listeners held at once (a plan's:
/// [`MAX_LISTENERS`]).
///
/// # Errors
/// As [`start`]'s.
pub(super) fn start_bounded(
    paths: &[PathBuf],
    user: QueryUser,
    bus_user: Option<QueryUser>,
    max_listeners: usize,
) -> io::Result<Broker> {
    let (receive, send) = seqpacket_pair()?;
    // SAFETY: eventfd(2) makes a new descriptor.
    let stop = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if stop < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just made, owned by nobody else.
    let stop = unsafe { OwnedFd::from_raw_fd(stop) };
    let stop2 = stop.try_clone()?;
    let state = State {
        allowed: allowed(paths),
        user,
        connector: None,
        bus: bus_user.map(|user| BusSide {
            user,
            connector: None,
            budget: std::sync::Arc::new(Budget::new(BUS_USER_PER_PLAN)),
        }),
        connections: 0,
        answers: 0,
        max_listeners,
        filters: Vec::new(),
    };
    let thread = std::thread::Builder::new()
        .name("plan-sockets".into())
        .spawn(move || run(&receive, &stop2, state))?;
    Ok(Broker {
        inbox: send,
        stop,
        thread: Some(thread),
    })
}

/// Send `listener` to the broker's `inbox` (the spawned child, before `exec`: system calls
/// only; `MSG_DONTWAIT`, so the child never waits for the server). The `errno` if it
/// failed (the command then does not run).
pub(crate) fn send_listener(inbox: RawFd, listener: RawFd) -> Result<(), i32> {
    let mut byte = 0u8;
    let mut iov = libc::iovec {
        iov_base: (&raw mut byte).cast(),
        iov_len: 1,
    };
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; the control buffer holds one descriptor's message; the
    // pointers are to this stack frame's buffers, live for the call.
    let r = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as _;
        let c = libc::CMSG_FIRSTHDR(&raw const msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), listener);
        libc::sendmsg(
            inbox,
            &raw const msg,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if r == 1 {
        Ok(())
    } else {
        Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    }
}

/// What the broker's thread keeps.
struct State {
    allowed: Vec<Allowed>,
    user: QueryUser,
    /// Forked at the first connection to an allowed socket; again after one failed.
    connector: Option<Connector>,
    /// Who connects to the system bus, when not the query user.
    bus: Option<BusSide>,
    connections: usize,
    /// `connect`s looked at.
    answers: usize,
    /// Most listeners held at once ([`MAX_LISTENERS`]).
    max_listeners: usize,
    /// The plan's D-Bus filters still running: each one's thread and descriptors of its
    /// two sockets (its end of the query's stream pair, the bus connection), shut down
    /// when the broker's thread ends.
    filters: Vec<(
        std::thread::JoinHandle<()>,
        [std::os::unix::net::UnixStream; 2],
    )>,
}

impl Drop for State {
    /// The plan is over: every filter of its still running ends (both its sockets shut
    /// down, so a write it is blocked in fails and its reads end, the bus's reply awaited
    /// in SASL included), with the bus connection and the bus user's place it holds. A
    /// query's end of the pair can outlive every process of the plan (sent over itself,
    /// in flight on the filter's unread end), so the query's exit alone does not end them.
    fn drop(&mut self) {
        for end in self.filters.iter().flat_map(|(_, ends)| ends) {
            let _ = end.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The system bus's connections of a plan whose bus user is not its query user.
struct BusSide {
    user: QueryUser,
    /// Of the bus user, forked at the plan's first connection to the system bus.
    connector: Option<Connector>,
    /// The plan's live connections made as the bus user.
    budget: std::sync::Arc<Budget>,
}

/// Every allowed socket (a connector's `pick`).
fn pick_any(_: &Allowed) -> bool {
    true
}

/// The allowed sockets that are no system bus.
fn pick_other(a: &Allowed) -> bool {
    !a.system_bus
}

/// The system bus's.
fn pick_bus(a: &Allowed) -> bool {
    a.system_bus
}

/// A connection to `allowed[at]` made by the connector in `slot` (forked as `user`, with
/// the sockets `pick` takes, on first use; killed and forked again after it failed). The
/// `errno` if none.
fn connect_by(
    slot: &mut Option<Connector>,
    allowed: &[Allowed],
    user: QueryUser,
    pick: fn(&Allowed) -> bool,
    at: usize,
) -> Result<OwnedFd, i32> {
    if slot.is_none() {
        *slot = Some(
            Connector::start(allowed, user, pick)
                .map_err(|e| e.raw_os_error().unwrap_or(libc::ECONNREFUSED))?,
        );
    }
    let connector = slot.as_mut().ok_or(libc::ECONNREFUSED)?;
    match connector.connect(at) {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e),
        Err(_) => {
            // It timed out or died: dropped (killed and reaped), forked anew next time.
            *slot = None;
            Err(libc::ECONNREFUSED)
        }
    }
}

/// The thread: poll `stop`, `inbox` and every listener; answer each notification.
fn run(inbox: &OwnedFd, stop: &OwnedFd, mut state: State) {
    let mut listeners: Vec<OwnedFd> = Vec::new();
    loop {
        let mut fds: Vec<libc::pollfd> = [stop, inbox]
            .into_iter()
            .chain(listeners.iter())
            .map(|fd| libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: poll(2) on the array just built.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if fds[0].revents != 0 {
            return;
        }
        let mut gone = Vec::new();
        for (i, l) in listeners.iter().enumerate() {
            let r = fds[2 + i].revents;
            if r & libc::POLLIN != 0 {
                state.answer(l);
            } else if r & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                // Every process of that command is gone.
                gone.push(i);
            }
        }
        for i in gone.into_iter().rev() {
            listeners.swap_remove(i);
        }
        if fds[1].revents != 0 {
            while let Ok((1.., fd)) = receive_fd(inbox.as_raw_fd(), &mut [0u8; 1], false) {
                if let Some(fd) = fd
                    && listeners.len() < state.max_listeners
                {
                    listeners.push(fd);
                }
            }
        }
    }
}

/// How the broker answers one `connect`.
enum Answer {
    /// Fails with this `errno`.
    Errno(i32),
    /// Returns 0: the broker connected the query's own (non-Unix) socket.
    Done,
    /// Returns 0 once this socket is in place of the query's descriptor, close-on-exec or
    /// not as the query's was.
    Socket(OwnedFd, bool),
}

/// `errno` of the last failed call.
fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `getsockopt` of an `int` option; `None` when it failed.
fn sockopt(fd: RawFd, level: i32, name: i32) -> Option<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into an int of the size given.
    let r = unsafe { libc::getsockopt(fd, level, name, (&raw mut v).cast(), &mut len) };
    (r == 0).then_some(v)
}

/// A pidfd of the process of thread `tid` (`pidfd_open` takes a process's pid; a thread's
/// is looked up in `/proc/TID/status`).
fn pidfd_of(tid: u32) -> Result<OwnedFd, i32> {
    let open = |pid: u32| {
        // SAFETY: pidfd_open(2) makes a new descriptor or fails.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            Err(errno())
        } else {
            // SAFETY: a descriptor just made, owned by nobody else.
            Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
        }
    };
    match open(tid) {
        Err(libc::EINVAL) => {
            let status =
                std::fs::read_to_string(format!("/proc/{tid}/status")).map_err(|_| libc::ESRCH)?;
            let tgid = status
                .lines()
                .find_map(|l| l.strip_prefix("Tgid:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
                .ok_or(libc::ESRCH)?;
            open(tgid)
        }
        other => other,
    }
}

/// `openat2`'s `struct open_how`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_IN_ROOT: u64 = 0x10;

/// The calling thread's filesystem credentials while it looks a query's path up: its
/// filesystem uid and gid the query user's, no supplementary group (raw system calls: they
/// change this thread only, where glibc's `setgroups` would change every thread). A
/// filesystem uid leaving 0 clears `CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`
/// and the other filesystem capabilities from the thread's effective set, so the kernel
/// checks each directory's search permission as for the query user; dropped, the thread's
/// own ids, groups and (from its permitted set) capabilities are back.
struct AsQueryUser {
    fsuid: u32,
    fsgid: u32,
    groups: Vec<libc::gid_t>,
}

/// The filesystem capabilities a filesystem uid of 0 gives (`capabilities(7)`): none may be
/// in the thread's effective set while it looks up as the query user.
/// (`CAP_CHOWN` 0, `CAP_DAC_OVERRIDE` 1, `CAP_DAC_READ_SEARCH` 2, `CAP_FOWNER` 3,
/// `CAP_FSETID` 4.)
const FS_CAPS: u32 = 0b1_1111;

impl AsQueryUser {
    /// Become `user` for the filesystem on this thread. `EACCES` if this thread's
    /// groups cannot be read or it cannot change (then nothing changed), or it kept a
    /// filesystem capability (a server with `SECBIT_NO_SETUID_FIXUP`): the lookup is then
    /// refused rather than made with more than the query user's rights.
    fn become_(user: QueryUser) -> Result<AsQueryUser, i32> {
        // SAFETY: getgroups(2) with a count of 0 returns the count; then into a buffer of
        // that many gids.
        let groups = unsafe {
            let n = libc::getgroups(0, std::ptr::null_mut());
            let mut g = vec![0 as libc::gid_t; usize::try_from(n).map_err(|_| libc::EACCES)?];
            let m = libc::getgroups(n, g.as_mut_ptr());
            g.truncate(usize::try_from(m).map_err(|_| libc::EACCES)?);
            g
        };
        // SAFETY: setfsuid/setfsgid(2) with -1 change nothing and return the current id.
        let (fsuid, fsgid) = unsafe {
            (
                libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32,
                libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32,
            )
        };
        let guard = AsQueryUser {
            fsuid,
            fsgid,
            groups,
        };
        // SAFETY: raw setgroups/setfsgid/setfsuid(2) of this thread's credentials only.
        let ok = unsafe {
            libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) == 0 && {
                libc::syscall(libc::SYS_setfsgid, user.gid());
                libc::syscall(libc::SYS_setfsuid, user.uid());
                libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32 == user.gid()
                    && libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32 == user.uid()
            }
        };
        if !ok || effective_caps().is_none_or(|c| c & FS_CAPS != 0) {
            return Err(libc::EACCES); // `guard` drops: the thread's own credentials back
        }
        Ok(guard)
    }
}

impl Drop for AsQueryUser {
    fn drop(&mut self) {
        // SAFETY: raw setfsuid/setfsgid/setgroups(2) back to this thread's own values (its
        // real ids are root's and it keeps CAP_SETUID and CAP_SETGID, so each may be set).
        let back = unsafe {
            libc::syscall(libc::SYS_setfsuid, self.fsuid);
            libc::syscall(libc::SYS_setfsgid, self.fsgid);
            libc::syscall(libc::SYS_setgroups, self.groups.len(), self.groups.as_ptr()) == 0
                && libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32 == self.fsuid
                && libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32 == self.fsgid
        };
        // Not back: the thread has less than its own rights (a query user's filesystem
        // access), never more; the broker's thread then ends (its listeners close, later
        // `connect`s fail) rather than run as a mix. Not reached while unwinding: nothing
        // between `become_` and this drop panics.
        assert!(
            back,
            "the plan's socket broker could not take its credentials back"
        );
    }
}

/// The calling thread's effective capabilities (the low 32), `None` if `capget` failed.
fn effective_caps() -> Option<u32> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,               // this thread
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget(2) of this thread into a version 3 header and two data structs.
    let r = unsafe { libc::syscall(libc::SYS_capget, &raw mut header, data.as_mut_ptr()) };
    (r == 0).then_some(data[0].effective)
}

/// `stat` of `path` as process `pid` resolves it, with the query user's filesystem
/// credentials (`AsQueryUser`): an absolute path under its root, a relative one under its
/// working directory (`..` stops there), symlinks inside them, no magic link; a directory
/// the query user may not search is `EACCES`, as the kernel answers it. The lookup's
/// `errno` if it fails; for a file that is no socket, the kernel's answer to the query
/// user ([`refusal_of`]: `EACCES` if it may not write it, else `ECONNREFUSED`).
fn stat_in(pid: u32, path: &[u8], user: QueryUser) -> Result<libc::stat, i32> {
    let base = if path.first() == Some(&b'/') {
        "root"
    } else {
        "cwd"
    };
    let base = std::ffi::CString::new(format!("/proc/{pid}/{base}")).map_err(|_| libc::EINVAL)?;
    let path = std::ffi::CString::new(path).map_err(|_| libc::EINVAL)?;
    // SAFETY: open(2) of a C path; the result is ours.
    let dir = unsafe {
        libc::open(
            base.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return Err(errno());
    }
    // SAFETY: a descriptor just made, owned by nobody else.
    let dir = unsafe { OwnedFd::from_raw_fd(dir) };
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    // The query's root or cwd was opened as root (`/proc/PID/root` needs a ptrace
    // check); the walk from it is the query user's.
    let as_user = AsQueryUser::become_(user)?;
    // SAFETY: openat2(2) with a C path and an open_how of the size given.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &raw const how,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(errno()); // `as_user` drops after the errno is read
    }
    // SAFETY: a descriptor just made, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    // SAFETY: fstat into a stat buffer of ours.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(errno());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(refusal_of(&fd));
    }
    drop(as_user);
    Ok(st)
}

/// What the kernel's `connect` answers the query user for `file`, a file that is no
/// socket (`unix_find_bsd`: after the lookup, write permission on the file, its error
/// (`EACCES`; `EROFS` on a read-only file system, `EPERM` for an immutable file), then
/// `ECONNREFUSED`): the kernel's own answer to a `connect` of a new socket of the broker's
/// to that file (`/proc/self/fd/N`), made on the calling thread, which holds the query
/// user's filesystem credentials ([`AsQueryUser`]). A file that is no socket is never
/// connected to; `ECONNREFUSED` if the socket cannot be made.
fn refusal_of(file: &OwnedFd) -> i32 {
    // SAFETY: socket(2) makes a new descriptor or fails.
    let s = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return libc::ECONNREFUSED;
    }
    // SAFETY: a descriptor just made, owned by nobody else.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    let (addr, len) = proc_fd_address(file.as_raw_fd());
    // SAFETY: connect(2) of a socket we own to an address of ours of the length given.
    let r = unsafe { libc::connect(s.as_raw_fd(), (&raw const addr).cast(), len) };
    match r {
        0 => libc::ECONNREFUSED, // not reached: the file is no socket
        _ => errno(),
    }
}

/// Whether descriptor `fd` of process `pid` is close-on-exec (`/proc/PID/fdinfo/FD`'s
/// `flags`, octal, carry `O_CLOEXEC` from the descriptor table).
fn cloexec_in(pid: u32, fd: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))
        .ok()
        .and_then(|s| {
            let f = s.lines().find_map(|l| l.strip_prefix("flags:"))?;
            u64::from_str_radix(f.trim(), 8).ok()
        })
        .is_some_and(|f| f & libc::O_CLOEXEC as u64 != 0)
}

impl State {
    /// Receive one notification from `listener` and answer it.
    fn answer(&mut self, listener: &OwnedFd) {
        let l = listener.as_raw_fd();
        // SAFETY: the kernel requires a zeroed buffer for SECCOMP_IOCTL_NOTIF_RECV.
        let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: ioctl on a listener we own with a buffer of the kernel's size.
        if unsafe { libc::ioctl(l, libc::SECCOMP_IOCTL_NOTIF_RECV, &raw mut req) } != 0 {
            return; // the query was interrupted or died: nothing to answer
        }
        let mut resp = libc::seccomp_notif_resp {
            id: req.id,
            val: 0,
            error: 0,
            flags: 0,
        };
        match self.decide(l, &req) {
            Answer::Errno(e) => resp.error = -e,
            Answer::Done => {}
            Answer::Socket(sock, cloexec) => {
                let add = libc::seccomp_notif_addfd {
                    id: req.id,
                    flags: libc::SECCOMP_ADDFD_FLAG_SETFD as u32,
                    srcfd: sock.as_raw_fd() as u32,
                    newfd: req.data.args[0] as u32, // the query's descriptor (int)
                    newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
                };
                // SAFETY: ioctl on a listener we own with an addfd of the kernel's layout.
                if unsafe { libc::ioctl(l, libc::SECCOMP_IOCTL_NOTIF_ADDFD, &raw const add) } < 0 {
                    // ENOENT: the query died meanwhile; `sock` closes here either way.
                    resp.error = -errno();
                }
            }
        }
        // SAFETY: ioctl on a listener we own with a response of the kernel's layout; it fails
        // (ENOENT) when the query is gone, which leaves nothing to do.
        unsafe { libc::ioctl(l, libc::SECCOMP_IOCTL_NOTIF_SEND, &raw const resp) };
    }

    /// What to answer `connect(fd, addr, len)` of notification `req` (see the module docs).
    fn decide(&mut self, listener: RawFd, req: &libc::seccomp_notif) -> Answer {
        self.answers += 1;
        if self.answers > MAX_ANSWERS {
            return Answer::Errno(libc::ECONNREFUSED);
        }
        let id = req.id;
        // SAFETY: ioctl on a listener we own with the notification's id.
        let live =
            || unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &id) } == 0;
        // `connect(int fd, const struct sockaddr *addr, socklen_t len)`: the kernel reads
        // the low 32 bits of the descriptor and the length, so does the broker.
        let (fd, addr, len) = (
            req.data.args[0] as u32 as i32,
            req.data.args[1],
            req.data.args[2] as u32 as i32,
        );
        if fd < 0 {
            return Answer::Errno(libc::EBADF);
        }
        let Ok(pidfd) = pidfd_of(req.pid) else {
            return Answer::Errno(libc::ECONNREFUSED);
        };
        if !live() {
            return Answer::Errno(libc::ECONNREFUSED);
        }
        // SAFETY: pidfd_getfd(2) of the query's descriptor (a copy, close-on-exec).
        let sock = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
        if sock < 0 {
            return Answer::Errno(errno());
        }
        // SAFETY: a descriptor just made, owned by nobody else.
        let sock = unsafe { OwnedFd::from_raw_fd(sock as RawFd) };
        let mut buf = [0u8; std::mem::size_of::<libc::sockaddr_storage>()];
        let Ok(len) = usize::try_from(len) else {
            return Answer::Errno(libc::EINVAL);
        };
        if len > buf.len() {
            return Answer::Errno(libc::EINVAL);
        }
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: process_vm_readv into our buffer of `len` bytes; the remote side is only
        // read by the kernel, which checks it.
        let read =
            unsafe { libc::process_vm_readv(req.pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if len > 0 && read != len as isize {
            return Answer::Errno(libc::EFAULT);
        }
        if !live() {
            return Answer::Errno(libc::ECONNREFUSED);
        }
        let s = sock.as_raw_fd();
        match sockopt(s, libc::SOL_SOCKET, libc::SO_DOMAIN) {
            Some(libc::AF_UNIX) => {}
            // No socket (`getsockopt` failed): what `connect` answers.
            None => return Answer::Errno(libc::ENOTSOCK),
            Some(libc::AF_NETLINK) if netlink_peer(&buf[..len]) => {
                // The kernel checks the *calling* task's `CAP_NET_ADMIN` for a netlink
                // `connect` to a port or group (`netlink_allowed`): this thread has the
                // server's, the query user has none.
                return Answer::Errno(libc::EPERM);
            }
            // IP sockets live in the plan's network namespace; netlink ones too.
            Some(libc::AF_INET | libc::AF_INET6 | libc::AF_NETLINK) => {
                return connect_other(&sock, &buf[..len]);
            }
            // Any other family (vsock, which no network namespace confines, reaches the
            // hypervisor; others may check the caller's credentials, this thread's root):
            // refused.
            _ => return Answer::Errno(libc::EACCES),
        }
        if sockopt(s, libc::SOL_SOCKET, libc::SO_TYPE) != Some(libc::SOCK_STREAM) {
            return Answer::Errno(libc::EACCES);
        }
        // SAFETY: getpeername into a sockaddr_storage-sized buffer of ours.
        let connected = unsafe {
            let mut peer: libc::sockaddr_storage = std::mem::zeroed();
            let mut plen = std::mem::size_of_val(&peer) as libc::socklen_t;
            libc::getpeername(s, (&raw mut peer).cast(), &mut plen) == 0
        };
        if connected {
            return Answer::Errno(libc::EISCONN);
        }
        let family = std::mem::size_of::<libc::sa_family_t>();
        if len < family || u16::from_ne_bytes([buf[0], buf[1]]) != libc::AF_UNIX as u16 {
            return Answer::Errno(libc::EINVAL);
        }
        let path = &buf[family..len];
        if path.first() == Some(&0) {
            // an abstract name (the plan's network namespace has only its own)
            return Answer::Errno(libc::ECONNREFUSED);
        }
        let path = &path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())];
        if path.is_empty() {
            return Answer::Errno(libc::EINVAL);
        }
        let st = match stat_in(req.pid, path, self.user) {
            Ok(st) => st,
            Err(e) => return Answer::Errno(e),
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Answer::Errno(libc::ECONNREFUSED);
        }
        let Some(at) = self
            .allowed
            .iter()
            .position(|a| (a.dev, a.ino) == (st.st_dev, st.st_ino))
        else {
            return Answer::Errno(libc::EACCES);
        };
        if !live() {
            return Answer::Errno(libc::ECONNREFUSED);
        }
        if self.connections >= MAX_CONNECTIONS {
            return Answer::Errno(libc::ECONNREFUSED);
        }
        self.connections += 1;
        let conn = match self.connect_allowed(at) {
            Ok(c) => c,
            Err(e) => return Answer::Errno(e),
        };
        // The query's O_NONBLOCK (a status flag of its socket) and credential options.
        // SAFETY: fcntl on descriptors we own.
        unsafe {
            let fl = libc::fcntl(s, libc::F_GETFL);
            if fl >= 0 && fl & libc::O_NONBLOCK != 0 {
                let mine = libc::fcntl(conn.as_raw_fd(), libc::F_GETFL);
                libc::fcntl(conn.as_raw_fd(), libc::F_SETFL, mine | libc::O_NONBLOCK);
            }
        }
        for opt in [libc::SO_PASSCRED, libc::SO_PASSSEC] {
            if let Some(v @ 1..) = sockopt(s, libc::SOL_SOCKET, opt) {
                // SAFETY: setsockopt of an int option on a socket we own.
                unsafe {
                    libc::setsockopt(
                        conn.as_raw_fd(),
                        libc::SOL_SOCKET,
                        opt,
                        (&raw const v).cast(),
                        std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                    )
                };
            }
        }
        Answer::Socket(conn, cloexec_in(req.pid, fd))
    }

    /// A connection to allowed socket `at`: to the system bus with a bus user, made by the
    /// bus user's connector under the plan's and the process's bounds (`ECONNREFUSED` past
    /// them, nothing connected); any other by the query user's. The `errno` if none.
    fn connect_allowed(&mut self, at: usize) -> Result<OwnedFd, i32> {
        let system_bus = self.allowed[at].system_bus;
        let (conn, as_bus_user) = match &mut self.bus {
            Some(side) if system_bus => {
                let permit = BusPermit::take(&side.budget, &IN_ALL).ok_or(libc::ECONNREFUSED)?;
                let conn = connect_by(&mut side.connector, &self.allowed, side.user, pick_bus, at)?;
                let claim = crate::process::dbus_filter::Claim {
                    query: self.user.uid(),
                    bus: side.user.uid(),
                };
                (conn, Some((claim, permit)))
            }
            Some(_) => (
                connect_by(
                    &mut self.connector,
                    &self.allowed,
                    self.user,
                    pick_other,
                    at,
                )?,
                None,
            ),
            None => (
                connect_by(&mut self.connector, &self.allowed, self.user, pick_any, at)?,
                None,
            ),
        };
        if !system_bus {
            return Ok(conn);
        }
        // A connection to the D-Bus system bus goes through the read-only filter: the query
        // gets one end of a stream pair, the filter the other and the bus connection (its
        // thread ends when either side closes, and gives the bus user's permit back then).
        use crate::process::dbus_filter;
        use std::os::unix::net::UnixStream;
        let errno = |e: io::Error| e.raw_os_error().unwrap_or(libc::ECONNREFUSED);
        let (query, filter) = UnixStream::pair().map_err(errno)?;
        let bus = UnixStream::from(conn);
        let kept = [
            filter.try_clone().map_err(errno)?,
            bus.try_clone().map_err(errno)?,
        ];
        let thread = match as_bus_user {
            Some((claim, permit)) => dbus_filter::spawn_as(filter, bus, claim, permit),
            None => dbus_filter::spawn(filter, bus),
        }
        .map_err(errno)?;
        self.filters.retain(|(t, _)| !t.is_finished());
        self.filters.push((thread, kept));
        Ok(OwnedFd::from(query))
    }
}

/// Whether `addr` is a `sockaddr_nl` naming a port (`nl_pid`) or multicast groups
/// (`nl_groups`), which only a process with `CAP_NET_ADMIN` may `connect` to.
fn netlink_peer(addr: &[u8]) -> bool {
    addr.len() >= 12
        && u16::from_ne_bytes([addr[0], addr[1]]) == libc::AF_NETLINK as u16
        && addr[4..12].iter().any(|&b| b != 0)
}

/// Connect the query's own non-Unix socket (it lives in the plan's network namespace) to
/// the address copied from its memory, as `connect` would: a blocking socket waits at most
/// [`CONNECT_WITHIN`] (then `ETIMEDOUT`), a non-blocking one gets `EINPROGRESS`.
fn connect_other(sock: &OwnedFd, addr: &[u8]) -> Answer {
    let s = sock.as_raw_fd();
    // SAFETY: fcntl, connect, poll and getsockopt on a descriptor we own, with the copied
    // address of its length and buffers of ours.
    unsafe {
        let fl = libc::fcntl(s, libc::F_GETFL);
        let blocking = fl >= 0 && fl & libc::O_NONBLOCK == 0;
        if blocking {
            libc::fcntl(s, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        let r = libc::connect(s, addr.as_ptr().cast(), addr.len() as libc::socklen_t);
        let mut e = if r == 0 { 0 } else { errno() };
        if blocking && e == libc::EINPROGRESS {
            let mut p = libc::pollfd {
                fd: s,
                events: libc::POLLOUT,
                revents: 0,
            };
            e = match libc::poll(&mut p, 1, CONNECT_WITHIN.as_millis() as libc::c_int) {
                1 => sockopt(s, libc::SOL_SOCKET, libc::SO_ERROR).unwrap_or(libc::EIO),
                _ => libc::ETIMEDOUT,
            };
        }
        if blocking {
            libc::fcntl(s, libc::F_SETFL, fl);
        }
        if e == 0 {
            Answer::Done
        } else {
            Answer::Errno(e)
        }
    }
}

#[cfg(test)]
mod credential_tests {
    use super::{AsQueryUser, FS_CAPS, effective_caps};
    use crate::process::sandbox::QueryUser;

    /// This thread's filesystem uid and gid, and its supplementary groups.
    fn fs_ids() -> (u32, u32, Vec<libc::gid_t>) {
        // SAFETY: setfsuid/setfsgid(2) with -1 change nothing; getgroups into a buffer of
        // the size given.
        unsafe {
            let mut g = vec![0; 256];
            let n = libc::getgroups(256, g.as_mut_ptr());
            g.truncate(usize::try_from(n).unwrap());
            (
                libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32,
                libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32,
                g,
            )
        }
    }

    /// While the guard lives the thread is the query user for the filesystem (no group,
    /// no filesystem capability; a 0700 directory of root's is `EACCES`), and dropped it
    /// has its own ids, groups and capabilities back; another thread never changed.
    #[test]
    fn the_lookup_credentials_are_the_query_users_and_come_back() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let secret = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(secret.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let main_ids = fs_ids();
        std::thread::scope(|s| {
            s.spawn(|| {
                let before = (fs_ids(), effective_caps().unwrap());
                assert_eq!(before.0.0, 0);
                let guard = AsQueryUser::become_(QueryUser::NOBODY).unwrap();
                let (uid, gid, groups) = fs_ids();
                assert_eq!(
                    (uid, gid, groups),
                    (QueryUser::NOBODY.uid(), QueryUser::NOBODY.gid(), vec![])
                );
                assert_eq!(effective_caps().unwrap() & FS_CAPS, 0);
                let err = std::fs::read_dir(secret.path()).unwrap_err();
                assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err}");
                drop(guard);
                assert_eq!((fs_ids(), effective_caps().unwrap()), before);
                std::fs::read_dir(secret.path()).unwrap();
            });
        });
        assert_eq!(fs_ids(), main_ids);
    }
}
