//! The broker of a plan's Unix-socket `connect`s: a plan's command reaches no host Unix
//! socket but those allowed (serve's `--plan-allow-socket`, by default the D-Bus system
//! bus under `--root`), and those only as its query user.
//!
//! The sandbox's seccomp filter (`sandbox::key_filter`) lets a command make Unix sockets of
//! `SOCK_STREAM` only (a datagram socket could `sendto` `/dev/log` or journald's socket by
//! address; a stream socket reaches a named socket by `connect` alone: `sendmsg` with an
//! address is `EOPNOTSUPP` on it) and returns every `connect` to the server as a seccomp
//! user notification (`SECCOMP_RET_USER_NOTIF`). Each command installs the filter with
//! `SECCOMP_FILTER_FLAG_NEW_LISTENER` before its `exec` and sends the listener to the
//! plan's broker over the broker's inbox (`SCM_RIGHTS`, `MSG_DONTWAIT`: the child never
//! waits for the server), then closes it.
//!
//! The broker (`broker.rs`, one thread per plan, started with the plan's sandbox in the
//! server's mount namespace, ended and joined with it) polls its inbox and every
//! command's listener, and answers each `connect` itself; nothing is ever let through
//! for the kernel to redo (`SECCOMP_USER_NOTIF_FLAG_CONTINUE` would re-read the address
//! and descriptor the query can change):
//! - it takes the query's socket (`pidfd_getfd`). An IP or netlink socket: the broker
//!   connects that socket itself (it lives in the plan's network namespace) to the address
//!   it copied, and answers the result; but a netlink `connect` to a port or group is
//!   `EPERM`, as the kernel answers a process without `CAP_NET_ADMIN` (it checks the
//!   caller, here the broker's thread with the server's capabilities). A socket of any
//!   other family (`AF_VSOCK`, which no network namespace confines, reaches the
//!   hypervisor) is refused (`EACCES`);
//! - a Unix one: it copies the `sockaddr_un` (`process_vm_readv`), checks the
//!   notification is still live (`SECCOMP_IOCTL_NOTIF_ID_VALID`), resolves the path in the
//!   query's root or working directory (`/proc/PID/root` or `cwd`, opened as root, and
//!   `openat2` with `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`) with the query user's
//!   filesystem credentials (the broker's thread takes its filesystem uid and gid and no
//!   supplementary group for the walk: raw per-thread `setfsuid`/`setfsgid`/`setgroups`,
//!   which clear the thread's filesystem capabilities; a guard's `Drop` restores them), so
//!   the kernel checks every directory's search permission as for the query user: one it
//!   may not search is `EACCES` whatever it holds, and an allowed socket behind one is not
//!   reached. It compares the result's `(dev, ino)` with the
//!   allowed sockets' `stat` taken when the plan started. Anything else (another socket,
//!   an abstract name, a path that is no socket) is refused: `EACCES` ("Permission
//!   denied"), `ECONNREFUSED` for an abstract name, the lookup's own error (`ENOENT`) for
//!   a missing path, and for a file that is no socket what the kernel answers the query
//!   user (`unix_find_bsd`: `EACCES` for a file it may not write, else `ECONNREFUSED`):
//!   the kernel's own answer to a `connect` of a socket of the broker's to that file
//!   (`/proc/self/fd/N` of the descriptor the walk opened), made with the walk's
//!   credentials;
//! - an allowed one: the broker never re-reads the query's path. Its connector (a small
//!   process forked per plan, `connector.rs`, running as the plan's query user) connects
//!   a new socket to the allowed socket it opened at plan start (`/proc/self/fd/N` of an
//!   `O_PATH` descriptor), and the broker puts that socket in place of the query's
//!   (`SECCOMP_IOCTL_NOTIF_ADDFD` with `SECCOMP_ADDFD_FLAG_SETFD`; the query's
//!   `O_NONBLOCK`, close-on-exec, `SO_PASSCRED` and `SO_PASSSEC` kept) and answers `0`.
//!   Whatever the query rewrites in its memory after the `connect` (a TOCTOU race) or
//!   links where, it gets an allowed socket or nothing.
//!   A connection to D-Bus's system bus (an allowed socket named `system_bus_socket`)
//!   goes through the read-only filter (`dbus_filter`): the query gets one end of a
//!   stream pair, the filter the other end and the connector's bus connection.
//!
//! The bus user (serve's `--plan-bus-user`, `Limits::bus_user`; by default `nobody` of
//! the host root's `/etc/passwd`): the reference `dbus-daemon` drops the connection of a
//! uid its user database does not know, which `auto`'s query users are by design. So with
//! a bus user, connections to the system bus are made by a second connector, forked at
//! the plan's first one, running as the bus user (as the query user's: no group, no
//! capability, not dumpable, dying with the broker's thread; it keeps the system bus's
//! descriptor alone, so nothing else of that shared user's is reached through it), and
//! every other allowed socket by the query user's connector, which then keeps no bus
//! descriptor. The query still claims its own uid in `AUTH EXTERNAL`; the filter rewrites
//! a claim of exactly the query user's uid to the bus user's (`dbus_filter::Claim`), so
//! the bus's check against `SO_PEERCRED` (now the bus user's) holds. The bus user is
//! shared by every plan and by the host's own processes of that uid, and `dbus-daemon`
//! counts connections per uid (the system bus's `max_connections_per_user`, 256, and 64
//! unauthenticated connections of every uid together: libdbus's `bus/config-parser.c`), so
//! a plan holds at most `BUS_USER_PER_PLAN` (8) such connections at once and the process
//! `BUS_USER_IN_ALL` (32: 4 default plans of 8, an eighth of the per-uid budget, half the
//! unauthenticated one); past either the `connect` is `ECONNREFUSED` at once, nothing
//! reaches the bus. The filter's thread holds the place (`BusPermit`) while the connection
//! lives, and no longer than the plan: when the broker's thread ends it shuts down every
//! filter of its plan still running (a query's end of the pair can outlive the query, sent
//! over itself and left unread on the filter's end while the filter waits to write). A plan of `--plan-bus-user query` has one connector, as before, and no such
//! bound but the per-plan one below.
//!
//! Why the lookup is the broker thread's and not the connector's: it needs nothing but
//! the walk itself with the query user's ids (no new message between broker and
//! connector, no descriptor of the query's root sent to another process), and the thread
//! does nothing else while it holds them. Why the connection is a process's and not a
//! thread's with per-thread credentials: a daemon learns more of
//! its peer than `SO_PEERCRED`'s uid and gid. journald, logind and polkit look the peer's
//! pid up in `/proc` (its uid, cgroup, command); a thread of the server would give the
//! server's pid, a root process. The connector's pid is a process whose real, effective,
//! saved and filesystem ids are the query user's (the bus user's for the bus connector),
//! with no supplementary group and no capability; it is not dumpable (`ptrace` and `/proc/PID/mem` of it need
//! `CAP_SYS_PTRACE`, so no query reads the copy of the server's memory it was forked
//! with), lives in the server's PID namespace (no query can name it) and dies with the
//! broker's thread (`PR_SET_PDEATHSIG`).
//!
//! Bounds: at most `MAX_CONNECTIONS` connections per plan (then `ECONNREFUSED`),
//! `MAX_ANSWERS` `connect`s looked at (then each is refused unread), and `MAX_LISTENERS`
//! live commands' listeners held (4096; a command's past it is closed on arrival, and
//! every `connect` of that command, of any family, is then the kernel's `ENOSYS` at once:
//! nothing reached, nothing waits); one
//! connection takes at most `CONNECT_WITHIN` (the connector's `SO_SNDTIMEO`; past it the
//! connector is killed and the `connect` refused), so a notification is answered within
//! a few seconds; a listener is dropped once its command and every child of it are gone
//! (`POLLHUP`); a query that dies mid-notification makes `ADDFD` fail, and the
//! connection made for it is closed. On a kernel before 5.9 (no `ADDFD`) or
//! with `--plan-deny-unix-sockets` there is no broker: no command may make a Unix socket.

#[cfg(test)]
mod bound_tests;
mod broker;
#[cfg(test)]
mod bus_attack_tests;
mod connector;
#[cfg(test)]
mod tests;

pub(super) use broker::{Broker, send_listener, start, supported};
pub(super) use connector::{receive_fd, seqpacket_pair};
