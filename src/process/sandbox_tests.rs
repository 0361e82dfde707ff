//! Tests of the plan sandbox (`sandbox.rs`): namespaces, limits, procfs, seccomp filter.

use super::*;
use crate::process::seccomp::{SECCOMP_ARCH, SECCOMP_ARG0, SECCOMP_ARG1, SECCOMP_NR};
use crate::process::{Options, Sink, Spec, Stream};
use std::path::Path;

struct Out(Vec<u8>);

impl Sink for Out {
    fn chunk(&mut self, stream: Stream, bytes: &[u8]) -> std::ops::ControlFlow<()> {
        if stream == Stream::Stdout {
            self.0.extend_from_slice(bytes);
        }
        std::ops::ControlFlow::Continue(())
    }
}

/// Gives this thread a filesystem context and mount namespace of its own, as a plan's
/// thread has.
pub(crate) fn unshare_mounts() {
    // SAFETY: unshare on this thread only (its filesystem context and mounts).
    assert_eq!(
        unsafe { libc::unshare(libc::CLONE_FS | libc::CLONE_NEWNS) },
        0,
        "unshare: {}",
        std::io::Error::last_os_error()
    );
}

/// [`unshare_mounts`], then every mount of the new namespace made private (a mount made
/// on this thread reaches no other namespace).
pub(crate) fn private_mounts() {
    unshare_mounts();
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .unwrap();
}

fn sh(script: &str) -> String {
    let spec = Spec {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: "/".into(),
        ..Spec::default()
    };
    let mut out = Out(Vec::new());
    crate::process::run(&spec, &Options::default(), &mut out);
    String::from_utf8_lossy(&out.0).into_owned()
}

/// On a thread with a mount namespace of its own (as a plan's), a command is pid 2 of the
/// sandbox's PID namespace (the init is 1), its parent is outside it, its limits and the
/// namespace's `pid_max` are the sandbox's, and the init brought `lo` up; the same command from
/// another thread is not sandboxed; once the sandbox is dropped, nothing is.
#[test]
fn a_command_of_a_sandboxed_thread_runs_in_its_namespaces_under_its_limits() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let script = "echo $$ $PPID $(ulimit -t) $(ulimit -v) $(cat /proc/sys/kernel/pid_max) \
                  $(readlink /proc/self/ns/ipc)";
    let outside = sh(script);
    let (inside, after) = std::thread::spawn(move || {
        unshare_mounts();
        let limits = Limits {
            memory: 1 << 30,
            cpu_seconds: 7,
            max_pids: 400,
            ..Limits::default()
        };
        let sb = start(&limits).unwrap();
        sb.enter().unwrap();
        assert!(sb.sandbox().pids_capped && sb.sandbox().loopback);
        let inside = sh(script);
        drop(sb);
        assert!(
            current().is_none(),
            "the dropped sandbox is still registered"
        );
        (inside, sh("echo $PPID"))
    })
    .join()
    .unwrap();
    let f: Vec<&str> = inside.split_whitespace().collect();
    assert_eq!(f[..5], ["2", "0", "7", "1048576", "400"], "{inside}");
    let host_ipc = std::fs::read_link("/proc/self/ns/ipc").unwrap();
    assert_ne!(
        Path::new(f[5]),
        host_ipc,
        "the command shares the host's IPC namespace"
    );
    assert_ne!(outside.split_whitespace().nth(1), Some("0"), "{outside}");
    assert_ne!(after.trim(), "0", "a command after the drop was sandboxed");
}

/// A procfs of the host mounted under a root is covered by the sandbox's own: only the
/// init (pid 1) is listed there, the same path outside the thread's namespace is
/// untouched.
#[test]
fn the_sandboxs_procfs_covers_the_hosts_under_a_root() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let at = dir.path().join("root with space");
    std::fs::create_dir_all(at.join("proc")).unwrap();
    let at2 = at.clone();
    let (covered, pids) = std::thread::spawn(move || {
        private_mounts();
        use nix::mount::{MsFlags, mount};
        mount(
            Some("proc"),
            &at2.join("proc"),
            Some("proc"),
            MsFlags::empty(),
            None::<&str>,
        )
        .unwrap();
        let mut sb = start(&Limits::default()).unwrap();
        let covered = sb.mount_proc_under(&at2).unwrap();
        let mut pids: Vec<String> = std::fs::read_dir(at2.join("proc"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .collect();
        pids.sort();
        (covered, pids)
    })
    .join()
    .unwrap();
    assert_eq!((covered, pids), (1, vec!["1".to_string()]));
    assert_eq!(std::fs::read_dir(at.join("proc")).unwrap().count(), 0);
}

#[test]
fn mountinfo_escapes_are_undone() {
    assert_eq!(
        crate::process::cgroup::unescape(r"/tmp/a\040b\011c\134d\0"),
        Path::new("/tmp/a b\tc\\d\\0")
    );
}

/// What `f` returns for a call of `arch`, number `nr` and first two arguments `args` (a
/// classic BPF interpreter of the instructions [`key_filter`] uses).
fn verdict(f: &[libc::sock_filter], arch: u32, nr: u32, args: [u32; 2]) -> u32 {
    let mut pc = 0;
    let mut a = 0u32;
    loop {
        let i = f[pc];
        let code = u32::from(i.code);
        pc += 1;
        if code == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS {
            a = match i.k {
                SECCOMP_NR => nr,
                SECCOMP_ARCH => arch,
                SECCOMP_ARG0 => args[0],
                SECCOMP_ARG1 => args[1],
                k => panic!("a load of offset {k}"),
            };
        } else if code == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K {
            pc += usize::from(if a == i.k { i.jt } else { i.jf });
        } else if code == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K {
            a &= i.k;
        } else if code == libc::BPF_RET | libc::BPF_K {
            return i.k;
        } else {
            panic!("instruction {code:#x}");
        }
    }
}

/// The filter, run on the calls it decides: the keys and `io_uring_setup` refused; brokered,
/// a Unix socket or pair of `SOCK_STREAM` only (flags aside) from the native ABI, none from
/// x32 or i386 (nor i386's `socketcall`), every `connect` to the broker; denied, no
/// `socket(AF_UNIX)` of any ABI, `socketpair` and `connect` left alone; everything else
/// allowed.
#[test]
#[cfg(target_arch = "x86_64")]
fn the_filter_brokers_connect_and_refuses_datagram_unix_sockets() {
    let (allow, eperm, notify) = (
        libc::SECCOMP_RET_ALLOW,
        libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        libc::SECCOMP_RET_USER_NOTIF,
    );
    let (x86_64, i386, x32) = (0xC000_003E, 0x4000_0003, 0x4000_0000);
    let unix = libc::AF_UNIX as u32;
    let inet = libc::AF_INET as u32;
    let (stream, dgram, seqpacket) = (
        libc::SOCK_STREAM as u32,
        libc::SOCK_DGRAM as u32,
        libc::SOCK_SEQPACKET as u32,
    );
    let flags = (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u32;
    let brokered = key_filter(true);
    let denied = key_filter(false);
    let cases: &[(u32, u32, [u32; 2], u32, u32)] = &[
        // arch, nr, args, brokered, denied
        (x86_64, 248, [0, 0], eperm, eperm),
        (x86_64, 425, [0, 0], eperm, eperm),
        (x86_64, x32 | 250, [0, 0], eperm, eperm),
        (x86_64, 41, [unix, stream], allow, eperm),
        (x86_64, 41, [unix, stream | flags], allow, eperm),
        (x86_64, 41, [unix, dgram], eperm, eperm),
        (x86_64, 41, [unix, dgram | flags], eperm, eperm),
        (x86_64, 41, [unix, seqpacket], eperm, eperm),
        (x86_64, 41, [inet, dgram], allow, allow),
        (x86_64, 53, [unix, stream], allow, allow),
        (x86_64, 53, [unix, dgram], eperm, allow),
        (x86_64, 42, [3, 0], notify, allow),
        (x86_64, x32 | 41, [unix, stream], eperm, eperm),
        (x86_64, x32 | 41, [inet, stream], allow, allow),
        (x86_64, x32 | 53, [unix, seqpacket], eperm, allow),
        (x86_64, x32 | 42, [3, 0], notify, allow),
        (x86_64, 0, [0, 0], allow, allow),
        (x86_64, 44, [3, 0], allow, allow),
        (i386, 102, [1, 0], eperm, eperm),
        (i386, 359, [unix, stream], eperm, eperm),
        (i386, 359, [inet, stream], allow, allow),
        (i386, 360, [unix, dgram], eperm, allow),
        (i386, 362, [3, 0], notify, allow),
        (i386, 287, [0, 0], eperm, eperm),
        (i386, 3, [0, 0], allow, allow),
    ];
    for &(arch, nr, args, b, d) in cases {
        let got = (
            verdict(&brokered, arch, nr, args),
            verdict(&denied, arch, nr, args),
        );
        assert_eq!(got, (b, d), "arch {arch:#x} nr {nr:#x} args {args:?}");
    }
}

/// In a sandbox, a command's `add_key` is refused (`EPERM`), and with `unix_sockets`
/// false so is `socket(AF_UNIX)`, while `socket(AF_INET)` is not.
#[test]
#[cfg(target_arch = "x86_64")]
fn a_sandboxed_command_gets_no_key_and_without_unix_sockets_no_unix_socket() {
    if !nix::unistd::geteuid().is_root() || !Path::new("/usr/bin/perl").exists() {
        return;
    }
    let script = r#"/usr/bin/perl -e '
        my ($t, $d, $p) = ("user", "skyhook-sandbox-test", "x");
        my $k = syscall(248, $t, $d, $p, 1, -4);
        print "key=", ($k < 0 ? "$!" : "ADDED"), " ";
        print "unix=", (socket(my $u, 1, 1, 0) ? "MADE" : "$!"), " ";
        print "inet=", (socket(my $i, 2, 1, 0) ? "made" : "$!");'"#;
    let run = |unix_sockets: bool| {
        std::thread::spawn(move || {
            unshare_mounts();
            let sb = start(&Limits {
                unix_sockets,
                ..Limits::default()
            })
            .unwrap();
            sb.enter().unwrap();
            sh(script)
        })
        .join()
        .unwrap()
    };
    assert_eq!(run(true), "key=Operation not permitted unix=MADE inet=made");
    assert_eq!(
        run(false),
        "key=Operation not permitted unix=Operation not permitted inet=made"
    );
}

/// What a sandbox costs a plan: start, enter and drop (kill and reap the init), timed
/// over 20 rounds; printed for docs/fleet.md, bounded loosely.
#[test]
fn starting_and_ending_a_sandbox_is_cheap() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let took = std::thread::spawn(|| {
        unshare_mounts();
        let t = std::time::Instant::now();
        for _ in 0..20 {
            let sb = start(&Limits::default()).unwrap();
            sb.enter().unwrap();
        }
        t.elapsed()
    })
    .join()
    .unwrap();
    eprintln!("20 sandboxes started and ended in {took:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// A sandboxed command runs as the sandbox's query user: real, effective, saved and
/// filesystem ids 2147478690 (`auto`'s first), no supplementary group, no capability, `no_new_privs` set; its
/// standard output reopens by path (`> /dev/stdout`, the pipe handed to the query user);
/// and a set-user-ID-root program, here a copy of `id` mode 4755 on a mount without
/// `nosuid`, gives it no root (without `no_new_privs` it said `euid=0`).
#[test]
fn a_sandboxed_command_runs_as_the_query_user_and_a_setuid_program_gives_it_no_root() {
    if !nix::unistd::geteuid().is_root() || !Path::new("/usr/bin/id").exists() {
        return;
    }
    let out = std::thread::spawn(|| {
        private_mounts();
        use nix::mount::{MsFlags, mount};
        // A tmpfs of this thread's mount namespace, without nosuid, holding the program.
        let dir = tempfile::tempdir().unwrap();
        mount(
            Some("tmpfs"),
            dir.path(),
            Some("tmpfs"),
            MsFlags::empty(),
            Some("mode=0755"),
        )
        .unwrap();
        let id = dir.path().join("suid-id");
        std::fs::copy("/usr/bin/id", &id).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&id, std::fs::Permissions::from_mode(0o4755)).unwrap();
        let sb = start(&Limits::default()).unwrap();
        sb.enter().unwrap();
        let script = format!(
            "grep -E '^(Uid|Gid|Groups|CapEff|NoNewPrivs):' /proc/self/status | tr -s '\\t' ' '; \
             echo reopened > /dev/stdout; echo euid=$({} -u)",
            id.display()
        );
        let out = sh(&script);
        drop(sb);
        let _ = nix::mount::umount2(dir.path(), nix::mount::MntFlags::MNT_DETACH);
        out
    })
    .join()
    .unwrap();
    assert_eq!(
        out,
        "Uid: 2147478690 2147478690 2147478690 2147478690\n\
         Gid: 2147478690 2147478690 2147478690 2147478690\nGroups: \n\
         CapEff: 0000000000000000\nNoNewPrivs: 1\nreopened\neuid=2147478690\n"
    );
}

/// `--plan-query-user`: `UID` is `UID:UID`, `UID:GID` as given; root's user or group,
/// `-1` and anything but numbers are refused, naming why.
#[test]
fn a_query_user_is_numbers_and_never_root() {
    let parse = |s: &str| s.parse::<QueryUser>().map(|u| (u.uid(), u.gid()));
    assert_eq!(parse("65534"), Ok((65534, 65534)));
    assert_eq!(parse("4242:4343"), Ok((4242, 4343)));
    assert_eq!(
        Limits::default().query_user.to_string(),
        "2147478690:2147478690"
    );
    for (bad, why) in [
        ("0", "the user id of plan queries must not be 0"),
        ("0:5", "the user id of plan queries must not be 0"),
        ("5:0", "the group id of plan queries must not be 0"),
        ("4294967295", "4294967295 is no user id"),
        (
            "nobody",
            "\"nobody\": expected auto, UID or UID:GID, numbers",
        ),
        ("5:", "\"5:\": expected auto, UID or UID:GID, numbers"),
        ("-1", "\"-1\": expected auto, UID or UID:GID, numbers"),
    ] {
        let e = parse(bad).unwrap_err();
        assert!(e.starts_with(why), "{bad}: {e}");
    }
    assert_eq!(QueryUser::NOBODY.to_string(), "65534:65534");
}

/// `--plan-query-user auto` (the default) gives plan slot k the user and group
/// 2147478690 + k; `UID[:GID]` is every slot's. Serve refuses `auto` when the host root's
/// user database gives an id of the range to anyone (user, group, subordinate range),
/// naming the file and line, and more slots than the block has.
#[test]
fn auto_gives_each_plan_slot_its_own_query_user_that_no_host_user_has() {
    let auto: QueryUsers = "auto".parse().unwrap();
    assert_eq!(auto, QueryUsers::default());
    assert_eq!(auto.to_string(), "auto");
    let slot = |u: &QueryUsers, k| u.for_slot(k).to_string();
    assert_eq!(
        (slot(&auto, 0), slot(&auto, 3)),
        (
            "2147478690:2147478690".into(),
            "2147478693:2147478693".into()
        )
    );
    let fixed: QueryUsers = "4242:4343".parse().unwrap();
    assert_eq!(
        (slot(&fixed, 0), slot(&fixed, 3)),
        ("4242:4343".into(), "4242:4343".into())
    );
    let passwd = "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n";
    let group = "root:x:0:\nnogroup:x:65534:\n";
    let subuid = "alice:100000:65536\n";
    let check = |u: &QueryUsers, slots, p: &str, g: &str, su: &str, sg: &str| {
        u.check_host(slots, ("P", p), ("G", g), ("SU", su), ("SG", sg))
    };
    assert_eq!(check(&auto, 4, passwd, group, subuid, subuid), Ok(()));
    let e = check(
        &auto,
        4,
        &format!("{passwd}q:x:2147478693:5::/:/bin/sh\n"),
        group,
        "",
        "",
    )
    .unwrap_err();
    assert!(
        e.starts_with(
            "--plan-query-user auto runs plans as ids 2147478690-2147478693 (--max-plans 4), \
             and P line 3 gives a user or its group of them (\"q:x:2147478693:5::/:/bin/sh\")"
        ),
        "{e}"
    );
    // Slot 4 is not used with --max-plans 4.
    assert_eq!(
        check(&auto, 4, "q:x:2147478694:5::/:/bin/sh\n", "", "", ""),
        Ok(())
    );
    let e = check(&auto, 4, passwd, "g:x:2147478691:\n", "", "").unwrap_err();
    assert!(e.contains("G line 1 gives a group of them"), "{e}");
    let e = check(&auto, 4, passwd, group, "", "k:2147352576:131072\n").unwrap_err();
    assert!(e.contains("SG line 1 gives subordinate ids"), "{e}");
    // A fixed user is the admin's choice.
    assert_eq!(
        check(
            &QueryUsers::Fixed(QueryUser::NOBODY),
            4,
            passwd,
            group,
            "",
            ""
        ),
        Ok(())
    );
    let e = check(&auto, 607, "", "", "", "").unwrap_err();
    assert_eq!(
        e,
        "--plan-query-user auto has 606 ids, fewer than --max-plans 607"
    );
    assert_eq!(check(&auto, 606, "", "", "", ""), Ok(()));
}

/// `fs.suid_dumpable` set back when dropped.
struct SuidDumpable(String);

impl Drop for SuidDumpable {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/fs/suid_dumpable", &self.0);
    }
}

/// Between its change of user and its `exec` a command shares the server's memory
/// (`CLONE_VM`), whose dumpable flag the kernel then sets to `fs.suid_dumpable`: with 2 a
/// `SIGQUIT` from a process of the query user dumped the server's memory (its TLS key) to
/// the host's crash handler, with 1 such a process could `ptrace` it. The child makes the
/// memory not dumpable before it becomes the query user wholly, so the server's memory is
/// not dumpable after a sandboxed command, whatever `fs.suid_dumpable` says (here 2).
#[test]
fn a_sandboxed_command_leaves_the_servers_memory_not_dumpable() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let Ok(old) = std::fs::read_to_string("/proc/sys/fs/suid_dumpable") else {
        return;
    };
    if std::fs::write("/proc/sys/fs/suid_dumpable", "2").is_err() {
        return;
    }
    let _restore = SuidDumpable(old);
    // SAFETY: prctl on this process with integer arguments.
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) }, 0);
    let out = std::thread::spawn(|| {
        unshare_mounts();
        let sb = start(&Limits::default()).unwrap();
        sb.enter().unwrap();
        let out = sh("echo ran");
        drop(sb);
        out
    })
    .join()
    .unwrap();
    // SAFETY: prctl on this process with integer arguments.
    let dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
    assert_eq!(
        (out.as_str(), dumpable),
        ("ran\n", 0),
        "the server's memory is dumpable"
    );
}
