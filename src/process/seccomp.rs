//! The seccomp filter of a plan's commands (classic BPF, built by hand) and its
//! installation in the spawned child; see [`key_filter`] for what it refuses and what it
//! sends to the plan's broker (`sock_broker`).

use std::io;
use std::os::fd::RawFd;

/// Where the kernel puts a syscall's number, architecture and first two arguments (their
/// low 32 bits, little-endian) in `seccomp_data`.
pub(super) const SECCOMP_NR: u32 = 0;
pub(super) const SECCOMP_ARCH: u32 = 4;
pub(super) const SECCOMP_ARG0: u32 = 16;
pub(super) const SECCOMP_ARG1: u32 = 24;

/// The numbers of an architecture a process of this machine may use (`AUDIT_ARCH_*`) that
/// the filter looks at.
#[derive(Debug)]
struct Arch {
    /// `AUDIT_ARCH_*`.
    pub arch: u32,
    /// Always refused: the key management calls (`add_key`, `request_key`, `keyctl`: the
    /// keyrings are not namespaced, so root's user keyring is the host root's, and
    /// `request_key` runs the host's `/sbin/request-key` upcall) and `io_uring_setup` (its
    /// operations pass no seccomp filter, `IORING_OP_SOCKET` and `IORING_OP_CONNECT`
    /// included, and it is the kernel's largest attack surface open to an unprivileged
    /// user, which the query user is).
    pub keys: &'static [u32],
    /// `socket` of the native ABI: a Unix socket only of `SOCK_STREAM` (brokered).
    pub socket: &'static [u32],
    /// `socket` of a compat ABI (x32, i386, arm): never a Unix socket.
    pub compat_socket: &'static [u32],
    /// `socketpair`: a Unix pair only of `SOCK_STREAM` (brokered; any in deny mode).
    pub socketpair: &'static [u32],
    /// `connect`: sent to the server's broker (brokered; allowed in deny mode).
    pub connect: &'static [u32],
    /// i386's `socketcall` (its arguments are behind a pointer): always refused.
    pub socketcall: &'static [u32],
}

#[cfg(target_arch = "x86_64")]
const X32: u32 = 0x4000_0000;
#[cfg(target_arch = "x86_64")]
const ARCHES: &[Arch] = &[
    // x86_64, and the x32 ABI (the same architecture, numbers with bit 30 set)
    Arch {
        arch: 0xC000_003E,
        keys: &[
            248,
            249,
            250,
            425,
            X32 | 248,
            X32 | 249,
            X32 | 250,
            X32 | 425,
        ],
        socket: &[41],
        compat_socket: &[X32 | 41],
        socketpair: &[53, X32 | 53],
        connect: &[42, X32 | 42],
        socketcall: &[],
    },
    // i386
    Arch {
        arch: 0x4000_0003,
        keys: &[286, 287, 288, 425],
        socket: &[],
        compat_socket: &[359],
        socketpair: &[360],
        connect: &[362],
        socketcall: &[102],
    },
];
#[cfg(target_arch = "aarch64")]
const ARCHES: &[Arch] = &[
    // aarch64
    Arch {
        arch: 0xC000_00B7,
        keys: &[217, 218, 219, 425],
        socket: &[198],
        compat_socket: &[],
        socketpair: &[199],
        connect: &[203],
        socketcall: &[],
    },
    // arm (EABI)
    Arch {
        arch: 0x4000_0028,
        keys: &[309, 310, 311, 425],
        socket: &[],
        compat_socket: &[281],
        socketpair: &[288],
        connect: &[283],
        socketcall: &[],
    },
];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ARCHES: &[Arch] = &[];

/// What the filter does with one system call number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// `EPERM`.
    Refuse,
    /// `EPERM` when the first argument is `AF_UNIX`.
    RefuseUnix,
    /// `EPERM` when the first argument is `AF_UNIX` and the second, without
    /// `SOCK_NONBLOCK | SOCK_CLOEXEC`, is not `SOCK_STREAM`.
    RefuseUnixNotStream,
    /// `SECCOMP_RET_USER_NOTIF`: the broker answers.
    Notify,
}

/// Where a jump of the filter goes.
#[derive(Debug, Clone, Copy)]
enum To {
    /// The next instruction (offset 0).
    Next,
    /// Past this many instructions.
    Skip(usize),
    /// The architecture block after this one.
    NextArch,
    Allow,
    Deny,
    Notify,
}

/// The classic BPF seccomp program of a plan's commands: per architecture of [`ARCHES`],
/// its keys and `io_uring_setup` `EPERM`, and
/// - `brokered` (the default): `socket` and `socketpair` make a Unix socket of
///   `SOCK_STREAM` only (a datagram or seqpacket one, which could `sendto` a named socket
///   such as `/dev/log`, is `EPERM`), a compat ABI's `socket` (x32, i386, arm) none,
///   i386's `socketcall` is `EPERM`, and every `connect` goes to the server's broker
///   (`SECCOMP_RET_USER_NOTIF`; see `sock_broker`): a stream socket reaches a named
///   socket by `connect` only (`sendmsg` with an address is `EOPNOTSUPP` on it);
/// - not `brokered` (`--plan-deny-unix-sockets`, or no broker on this kernel): no
///   `socket(AF_UNIX)` of any ABI, nor `socketcall`; `socketpair` (which reaches nothing)
///   and `connect` are left alone.
///
/// Every other call is allowed. Per architecture: load it, skip the block if it differs,
/// load the number, then one rule per number (a match that needs an argument loads it and
/// ends at allow, deny or notify). Hand-made rather than with a crate: `seccompiler` kills
/// a process of another architecture (a 32-bit binary) outright, and has no user
/// notification.
pub(super) fn key_filter(brokered: bool) -> Vec<libc::sock_filter> {
    let ld = |k: u32| {
        (
            libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
            k,
            To::Next,
            To::Next,
        )
    };
    let jeq = |k: u32, t: To, f: To| (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, k, t, f);
    let mut blocks: Vec<Vec<(u32, u32, To, To)>> = Vec::new();
    for a in ARCHES {
        let mut rules: Vec<(u32, Rule)> = a.keys.iter().map(|&n| (n, Rule::Refuse)).collect();
        let socket = |n: &u32| (*n, Rule::RefuseUnixNotStream);
        if brokered {
            rules.extend(a.socket.iter().map(socket));
            rules.extend(a.compat_socket.iter().map(|&n| (n, Rule::RefuseUnix)));
            rules.extend(a.socketpair.iter().map(socket));
            rules.extend(a.connect.iter().map(|&n| (n, Rule::Notify)));
        } else {
            let all = a.socket.iter().chain(a.compat_socket);
            rules.extend(all.map(|&n| (n, Rule::RefuseUnix)));
        }
        rules.extend(a.socketcall.iter().map(|&n| (n, Rule::Refuse)));
        let mut b = vec![
            ld(SECCOMP_ARCH),
            jeq(a.arch, To::Next, To::NextArch),
            ld(SECCOMP_NR),
        ];
        let unix = libc::AF_UNIX as u32;
        for (nr, rule) in rules {
            match rule {
                Rule::Refuse => b.push(jeq(nr, To::Deny, To::Next)),
                Rule::Notify => b.push(jeq(nr, To::Notify, To::Next)),
                Rule::RefuseUnix => {
                    b.push(jeq(nr, To::Next, To::Skip(2)));
                    b.push(ld(SECCOMP_ARG0));
                    b.push(jeq(unix, To::Deny, To::Allow));
                }
                Rule::RefuseUnixNotStream => {
                    let flags = (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u32;
                    b.push(jeq(nr, To::Next, To::Skip(5)));
                    b.push(ld(SECCOMP_ARG0));
                    b.push(jeq(unix, To::Next, To::Allow));
                    b.push(ld(SECCOMP_ARG1));
                    b.push((
                        libc::BPF_ALU | libc::BPF_AND | libc::BPF_K,
                        !flags,
                        To::Next,
                        To::Next,
                    ));
                    b.push(jeq(libc::SOCK_STREAM as u32, To::Allow, To::Deny));
                }
            }
        }
        blocks.push(b);
    }
    let len = blocks.iter().map(Vec::len).sum::<usize>() + 3;
    let (allow, deny, notify) = (len - 3, len - 2, len - 1);
    let mut f = Vec::with_capacity(len);
    for b in blocks {
        let end = f.len() + b.len();
        for (code, k, jt, jf) in b {
            let at = f.len();
            let off = |to: To| {
                let target = match to {
                    To::Next => at + 1,
                    To::Skip(n) => at + 1 + n,
                    To::NextArch => end,
                    To::Allow => allow,
                    To::Deny => deny,
                    To::Notify => notify,
                };
                u8::try_from(target - at - 1).expect("a seccomp jump of at most 255")
            };
            f.push(libc::sock_filter {
                code: code as u16,
                jt: off(jt),
                jf: off(jf),
                k,
            });
        }
    }
    for ret in [
        libc::SECCOMP_RET_ALLOW,
        libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        libc::SECCOMP_RET_USER_NOTIF,
    ] {
        f.push(libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: ret,
        });
    }
    debug_assert_eq!(f.len(), len);
    f
}

/// Install `prog` as the calling process's seccomp filter (the spawned child, after
/// `sandbox::become_query_user` set `no_new_privs`, which lets a process without `CAP_SYS_ADMIN`
/// install one; before `exec`; system calls only). The `errno` if it failed.
/// With `listener`, the filter is installed with `SECCOMP_FILTER_FLAG_NEW_LISTENER` and
/// the listener's descriptor (close-on-exec) is returned; else 0.
pub(super) fn install_filter(prog: &libc::sock_fprog, listener: bool) -> Result<RawFd, i32> {
    let flags = if listener {
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
    } else {
        0
    };
    // SAFETY: seccomp(SET_MODE_FILTER) with a program that outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            prog as *const libc::sock_fprog,
        )
    };
    if r >= 0 {
        Ok(r as RawFd)
    } else {
        Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL))
    }
}
