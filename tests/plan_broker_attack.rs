//! Attacks on the plan sandbox's socket broker (`src/process/sock_broker/`): a query's
//! `connect`s are answered by the server's broker thread (root, with the server's
//! capabilities) and its connector (the query user). Each test is one attack; a defence
//! that held is a passing test, a hole is `#[ignore = "known hole: ..."]` with the line it
//! fails with.

use serde_json::{Value, json};
use skyhook::remote::Client;

use crate::fleet::{PLAN_TOKEN, start_serve_with, tokens_file};
use crate::plan_attack::{current_rt, host_with, perl_query, plan_body, plan_on, plan_with};
use crate::util::FakeRoot;
use crate::util::bus::{system_bus_listener, world_writable_listener};

/// A throwaway host root with `perl` and a `/dev/null` device.
fn host() -> FakeRoot {
    host_with(&["perl"])
}

/// Plan a package whose query is `perl -e code` on a fresh `serve` of configuration `cfg`.
fn plan_perl(cfg: skyhook::serve::Config, id: &str, code: &str) -> (Value, String) {
    plan_with(cfg, &plan_body(id, &perl_query(code)))
}

/// A daemon's Unix socket at `path` of the host root (mode 0777, not allowed), nonblocking.
fn daemon(fr: &FakeRoot, path: &str) -> std::os::unix::net::UnixListener {
    let (_, l) = world_writable_listener(fr, path);
    l.set_nonblocking(true).unwrap();
    l
}

/// A netlink socket's `connect` to a port (`nl_pid`) or multicast group (`nl_groups`) is
/// the kernel's `EPERM` for a process without `CAP_NET_ADMIN` in the socket's network
/// namespace's user namespace (`netlink_connect`: `netlink_allowed` checks the *calling*
/// task). The broker makes every non-Unix `connect` itself, on its thread, which has the
/// server's capabilities: the unprivileged query's netlink socket gets connected, and
/// `send` without an address then goes to that port or group (`netlink_sendmsg` checks
/// only an explicit address), which the query user may not do.
#[test]
fn a_plan_querys_netlink_connect_to_a_port_or_group_is_refused_as_for_its_user() {
    require_root!();
    let fr = host();
    let code = r#"
        for my $c (["pid", 1, 0], ["groups", 0, 1], ["none", 0, 0]) {
            socket(my $s, 16, 3, 0) or die "socket: $!\n";
            my $r = connect($s, pack("S S L L", 16, 0, $c->[1], $c->[2]));
            print "$c->[0]=" . ($r ? "connected" : "$!") . ";";
        }
    "#;
    let (exit, lines) = plan_perl(skyhook::serve::Config::new(fr.root()), "netlink", code);
    assert!(
        lines
            .contains("pid=Operation not permitted;groups=Operation not permitted;none=connected;"),
        "a query's netlink connect was made with the server's capabilities: {lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// The broker resolved a query's socket path as root (`openat2` from `/proc/PID/root`), so
/// its answer said what a directory the query user cannot search holds: a file that is
/// no socket `ECONNREFUSED`, a missing name `ENOENT`, a socket `EACCES`. The kernel
/// answers the query user `EACCES` for each (no search permission on `/secret`, 0700); the
/// broker now looks up with the query user's filesystem credentials. Before, it failed
/// with `a query learnt what /secret (0700) holds: code=0 out=present=Connection refused;
/// absent=No such file or directory; sock=Permission denied;`.
#[test]
fn a_plan_query_cannot_learn_what_a_root_only_directory_holds_by_connect() {
    require_root!();
    let fr = host();
    let secret = fr.host("/secret");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(secret.join("present"), "key").unwrap();
    let _l = daemon(&fr, "/secret/sock");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let code = r#"
        for my $n ("present", "absent", "sock") {
            socket(my $s, 1, 1, 0) or die "socket: $!\n";
            my $r = connect($s, pack("S a108", 1, "/secret/$n"));
            print "$n=" . ($r ? "connected" : "$!") . "; ";
        }
    "#;
    let (exit, lines) = plan_perl(skyhook::serve::Config::new(fr.root()), "oracle", code);
    assert!(
        lines.contains(
            "present=Permission denied; absent=Permission denied; sock=Permission denied;"
        ),
        "a query learnt what /secret (0700) holds: {lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// A path that is no socket gets what the kernel's `connect` answers the query user
/// (`unix_find_bsd`: write permission first, then not a socket), on the plan's read-only
/// view of the host root: `EACCES` for a file or directory it may not write, `ECONNREFUSED`
/// for one it may (a read-only mount is not the kernel's concern there: no `EROFS`).
/// Before, the broker answered `ECONNREFUSED` for all four, so a query learnt a file's
/// kind where the kernel says only "Permission denied".
#[test]
fn a_plan_querys_connect_to_a_path_that_is_no_socket_is_answered_as_the_kernel_does() {
    require_root!();
    let fr = host();
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &str, m: u32| {
        std::fs::set_permissions(fr.host(p), std::fs::Permissions::from_mode(m)).unwrap();
    };
    std::fs::create_dir_all(fr.host("/srv/dir")).unwrap();
    std::fs::create_dir_all(fr.host("/srv/open")).unwrap();
    std::fs::write(fr.host("/srv/ro"), "x").unwrap();
    std::fs::write(fr.host("/srv/rw"), "x").unwrap();
    mode("/srv", 0o755);
    mode("/srv/ro", 0o644);
    mode("/srv/rw", 0o666);
    mode("/srv/dir", 0o755);
    mode("/srv/open", 0o777);
    let code = r#"
        for my $n ("ro", "rw", "dir", "open") {
            socket(my $s, 1, 1, 0) or die "socket: $!\n";
            my $r = connect($s, pack("S a108", 1, "/srv/$n"));
            print "$n=" . ($r ? "connected" : "$!") . ";";
        }
    "#;
    let (exit, lines) = plan_perl(skyhook::serve::Config::new(fr.root()), "nosock", code);
    assert!(
        lines.contains(
            "ro=Permission denied;rw=Connection refused;dir=Permission denied;\
             open=Connection refused;"
        ),
        "{lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// An allowed socket in a directory the query user may not search (`/secret`, 0700) is
/// out of its reach, as the kernel would have it: the broker compared `(dev, ino)` after a
/// lookup as root and its connector connected through the descriptor opened at plan
/// start, so the query got the daemon through `/secret` (failed before with `a query
/// reached /secret/bus.sock through a directory it cannot search: code=0
/// out=sock=connected;link=connected; err=`).
/// The same socket through a symlink in a searchable directory is refused too: the link's
/// target is walked as the query user.
#[test]
fn a_plan_query_cannot_reach_an_allowed_socket_through_a_directory_it_cannot_search() {
    require_root!();
    let fr = host();
    let l = daemon(&fr, "/secret/bus.sock");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(fr.host("/secret"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir_all(fr.host("/run")).unwrap();
    std::os::unix::fs::symlink("/secret/bus.sock", fr.host("/run/link.sock")).unwrap();
    let code = r#"
        for my $n ("sock", "link") {
            socket(my $s, 1, 1, 0) or die "socket: $!\n";
            my $p = $n eq "sock" ? "/secret/bus.sock" : "/run/link.sock";
            my $r = connect($s, pack("S a108", 1, $p));
            print "$n=" . ($r ? "connected" : "$!") . ";";
        }
    "#;
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.sandbox.allow_sockets = vec![fr.host("/secret/bus.sock")];
    let (exit, lines) = plan_perl(cfg, "unsearchable", code);
    assert!(
        lines.contains("sock=Permission denied;link=Permission denied;"),
        "a query reached /secret/bus.sock through a directory it cannot search: {lines}"
    );
    assert!(l.accept().is_err(), "the daemon heard a query: {lines}");
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// A query stacks its own seccomp filter that returns `SECCOMP_RET_USER_NOTIF` with a
/// listener of its own: had the kernel taken it, every `connect` would go to the newest
/// filter's listener (the query's), which could answer `SECCOMP_USER_NOTIF_FLAG_CONTINUE`
/// and so let the kernel connect anywhere, the broker never asked. The kernel refuses a
/// second listener in a filter chain whose listener is still held (the broker holds it):
/// `EBUSY`, and the host daemon hears nothing.
#[test]
fn a_plan_query_cannot_stack_its_own_listener_in_front_of_the_broker() {
    require_root!();
    let fr = host();
    let l = daemon(&fr, "/run/daemon.sock");
    // seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, prog): one
    // instruction, `ret SECCOMP_RET_USER_NOTIF`.
    let code = r#"
        my $filter = pack("S C C L", 6, 0, 0, 0x7fc00000);
        my $prog = pack("S x6 P", 1, $filter);
        my $r = syscall(317, 1, 8, $prog);
        print "seccomp=" . ($r >= 0 ? "listener $r" : "$!") . ";";
        socket(my $s, 1, 1, 0) or die "socket: $!\n";
        my $c = connect($s, pack("S a108", 1, "/run/daemon.sock"));
        print "connect=" . ($c ? "connected" : "$!") . ";";
    "#;
    let (exit, lines) = plan_perl(skyhook::serve::Config::new(fr.root()), "listener", code);
    assert!(
        l.accept().is_err(),
        "the query reached /run/daemon.sock: {lines}"
    );
    assert!(
        lines.contains("seccomp=Device or resource busy;connect=Permission denied;"),
        "{lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// Odd addresses and other ways to a named socket, each answered as the kernel would and
/// none reaching the (not allowed) daemon: a family-only address (`EINVAL`), a 108-byte
/// path with no NUL (the name is its 108 bytes: `ENOENT`), an address longer than
/// `sockaddr_un` (`EINVAL`), an abstract name (`ECONNREFUSED`), `sendto` with an address
/// on a stream socket (`EOPNOTSUPP`), x32's `connect` (this kernel: `ENOSYS`, or brokered
/// like the native one), `io_uring_setup` (`EPERM`: `IORING_OP_CONNECT` would pass no
/// filter), `connect` on a pipe (`ENOTSOCK`) and on a closed descriptor (`EBADF`).
#[test]
fn odd_addresses_and_other_ways_to_a_socket_reach_nothing() {
    require_root!();
    let fr = host();
    let l = daemon(&fr, "/run/daemon.sock");
    let long = "x".repeat(108);
    let code = r#"
        sub try { my ($n, $r) = @_; print "$n=" . ($r ? "ok" : "$!") . ";"; }
        socket(my $s, 1, 1, 0) or die;
        try("family", connect($s, pack("S", 1)));
        try("nonul", connect($s, pack("S a108", 1, "LONG")));
        try("long", connect($s, pack("S a200", 1, "/run/daemon.sock")));
        try("abstract", connect($s, pack("S a108", 1, "\0daemon")));
        try("sendto", send($s, "evil", 0, pack("S a108", 1, "/run/daemon.sock")));
        my $a = pack("S a108", 1, "/run/daemon.sock");
        try("x32", syscall(0x40000000 | 42, fileno($s), $a, length($a)) == 0);
        my $params = "\0" x 120;
        try("uring", syscall(425, 8, $params) >= 0);
        pipe(my $r, my $w) or die;
        try("pipe", syscall(42, fileno($r), $a, length($a)) == 0);
        try("badfd", syscall(42, 999, $a, length($a)) == 0);
        try("real", connect($s, $a));
    "#
    .replace("LONG", &long);
    let (exit, lines) = plan_perl(skyhook::serve::Config::new(fr.root()), "odd", &code);
    assert!(
        l.accept().is_err(),
        "the query reached /run/daemon.sock: {lines}"
    );
    assert!(
        lines.contains(
            "family=Invalid argument;nonul=No such file or directory;long=Invalid argument;\
             abstract=Connection refused;sendto=Operation not supported;"
        ),
        "{lines}"
    );
    assert!(
        lines.contains(";x32=Function not implemented;")
            || lines.contains(";x32=Permission denied;"),
        "{lines}"
    );
    assert!(
        lines.contains(
            "uring=Operation not permitted;pipe=Socket operation on non-socket;\
             badfd=Bad file descriptor;real=Permission denied;"
        ),
        "{lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// One plan floods its broker past `MAX_ANSWERS` (100,000 `connect`s looked at) from 8
/// processes at once while a second plan runs on the same server: the flooding plan's
/// `connect`s are refused unread from the 100,001st on (`ECONNREFUSED`, not before), and
/// the other plan's broker is its own: its `connect` is answered as usual (`EACCES`).
#[test]
fn a_plan_flooding_its_broker_leaves_another_plans_broker_alone() {
    require_root!();
    let fr = host();
    let l = daemon(&fr, "/run/daemon.sock");
    let flood = r#"
        my $a = pack("S a108", 1, "/run/daemon.sock");
        my @kids;
        for my $k (1 .. 8) {
            my $pid = fork();
            if ($pid == 0) {
                socket(my $s, 1, 1, 0) or die;
                my $n = 0;
                while ($n < 20000) { $n++; connect($s, $a) and die "connected\n"; last if $! == 111; }
                exit($n < 20000 ? 1 : 0);
            }
            push @kids, $pid;
        }
        my $refused = 0;
        for my $p (@kids) { waitpid($p, 0); $refused += ($? >> 8) == 1; }
        socket(my $s, 1, 1, 0) or die;
        connect($s, $a);
        print "refused_children=$refused; after=$!;";
    "#;
    let other = r#"
        socket(my $s, 1, 1, 0) or die;
        connect($s, pack("S a108", 1, "/run/daemon.sock"));
        print "other=$!;";
    "#;
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let started = std::time::Instant::now();
    let ((fexit, flines), (oexit, olines)) = current_rt().block_on(async {
        let url = start_serve_with(skyhook::serve::Config::new(fr.root()), &tokens).await;
        let client = Client::new(&url, PLAN_TOKEN).unwrap();
        let a = plan_body("flood", &perl_query(flood));
        let b = plan_body("other", &perl_query(other));
        tokio::join!(plan_on(&client, &a), plan_on(&client, &b))
    });
    assert!(l.accept().is_err(), "a query reached /run/daemon.sock");
    // 8 × 20,000 = 160,000 tries: the bound (100,000) is met by every child.
    assert!(
        flines.contains("refused_children=8; after=Connection refused;"),
        "{flines}"
    );
    assert!(olines.contains("other=Permission denied;"), "{olines}");
    assert_eq!(fexit["exit"], json!({"code": 0}), "{fexit:#}");
    assert_eq!(oexit["exit"], json!({"code": 0}), "{oexit:#}");
    assert!(started.elapsed() < std::time::Duration::from_secs(120));
}

/// An allowed socket whose daemon never accepts (its backlog full) stalls the connector:
/// each of the plan's `connect`s to it waits the connector's `SO_SNDTIMEO` (2 s) and fails
/// (`EAGAIN`, as a blocking `connect` with that timeout would); a second plan on the same server is
/// answered meanwhile (its broker is its own) and ends well before the stalled one.
#[test]
fn an_allowed_socket_that_never_accepts_stalls_only_its_own_plan() {
    require_root!();
    let fr = host();
    let (path, _listener) = world_writable_listener(&fr, "/run/slow.sock");
    // Fill the backlog from here: nonblocking connects until one would block.
    let mut fill = Vec::new();
    for _ in 0..10_000 {
        // SAFETY: socket(2) and connect(2) with a sockaddr_un of ours.
        let fd = unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        assert!(fd >= 0);
        // SAFETY: a descriptor just made, owned by nobody else.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        a.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in a.sun_path.iter_mut().zip(path.to_str().unwrap().bytes()) {
            *d = s as libc::c_char;
        }
        use std::os::fd::AsRawFd as _;
        // SAFETY: connect with the address above.
        let r = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&raw const a).cast(),
                std::mem::size_of_val(&a) as libc::socklen_t,
            )
        };
        if r != 0 {
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EAGAIN)
            );
            break;
        }
        fill.push(fd);
    }
    let stalled = r#"
        my $t = time;
        for my $i (1 .. 3) {
            socket(my $s, 1, 1, 0) or die;
            my $r = connect($s, pack("S a108", 1, "/run/slow.sock"));
            print "try$i=" . ($r ? "connected" : "$!") . ";";
        }
    "#;
    let other = r#"
        socket(my $s, 1, 1, 0) or die;
        connect($s, pack("S a108", 1, "/run/other.sock"));
        print "other=$!;";
    "#;
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.sandbox.allow_sockets = vec![path.clone()];
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let (((sexit, slines), stime), ((oexit, olines), otime)) = current_rt().block_on(async {
        let url = start_serve_with(cfg, &tokens).await;
        let client = Client::new(&url, PLAN_TOKEN).unwrap();
        let a = plan_body("stalled", &perl_query(stalled));
        let b = plan_body("other", &perl_query(other));
        let timed = |body: Value| {
            let client = &client;
            async move {
                let t = std::time::Instant::now();
                let r = plan_on(client, &body).await;
                (r, t.elapsed())
            }
        };
        tokio::join!(timed(a), timed(b))
    });
    drop(fill);
    assert!(
        slines.contains("try1=Resource temporarily unavailable;try2=Resource temporarily unavailable;try3=Resource temporarily unavailable;"),
        "{slines}"
    );
    assert!(
        olines.contains("other=No such file or directory;"),
        "{olines}"
    );
    assert_eq!(sexit["exit"], json!({"code": 0}), "{sexit:#}");
    assert_eq!(oexit["exit"], json!({"code": 0}), "{oexit:#}");
    // Three stalls of at least the connector's 2 s each, at most its 3 s bound and a margin.
    assert!(
        stime >= std::time::Duration::from_secs(6) && stime < std::time::Duration::from_secs(30),
        "the stalled plan took {stime:?}"
    );
    assert!(
        otime + std::time::Duration::from_secs(3) < stime,
        "the other plan took {otime:?}, the stalled one {stime:?}"
    );
}

/// A query connects to the (allowed) D-Bus system bus and ends without a word: the read-only
/// filter's connection to the bus is closed when the plan ends (the bus reads end of file),
/// so no filter thread nor bus connection is left behind in the server.
#[test]
fn a_system_bus_connection_ends_with_its_plan() {
    require_root!();
    let fr = host();
    let (path, listener) = system_bus_listener(&fr);
    let code = r#"
        socket(my $s, 1, 1, 0) or die;
        my $r = connect($s, pack("S a108", 1, "/run/dbus/system_bus_socket"));
        print "bus=" . ($r ? "connected" : "$!") . ";";
    "#;
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.sandbox.allow_sockets = vec![path.clone()];
    let (exit, lines) = plan_perl(cfg, "bus", code);
    assert!(lines.contains("bus=connected;"), "{lines}");
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
    listener.set_nonblocking(true).unwrap();
    let (mut conn, _) = listener
        .accept()
        .unwrap_or_else(|e| panic!("no bus connection was made ({e}): {lines}"));
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    use std::io::Read as _;
    let mut got = Vec::new();
    let r = conn.read_to_end(&mut got);
    assert!(
        r.is_ok(),
        "the bus connection outlived its plan: {r:?} after {got:?}"
    );
}

/// Other names for a socket, and the server's own port: a magic link (`/proc/PID/fd/N` of
/// an `O_PATH` descriptor of the allowed socket, `/proc/PID/root/...`; `/proc/self` names
/// the broker's thread, no process of the plan's `/proc`: `ENOENT`) is refused
/// (`ELOOP`: the broker resolves with `RESOLVE_NO_MAGICLINKS`); the query can make no link
/// (its root is read-only, `/tmp` included: no hard link to give the allowed socket's inode
/// another name, none needed); a host symlink to the daemon's socket is followed and
/// refused (`EACCES`); a
/// `connect` on a connected socket is `EISCONN`; a TCP `connect` to the server's own
/// loopback port, made by the broker with the query's socket, stays in the plan's network
/// namespace (`ECONNREFUSED`). The daemon hears nothing.
#[test]
fn magic_links_symlinks_and_the_servers_port_reach_nothing() {
    require_root!();
    let fr = host();
    let l = daemon(&fr, "/run/daemon.sock");
    let (allowed, allowed_l) = world_writable_listener(&fr, "/run/allowed.sock");
    std::os::unix::fs::symlink("/run/daemon.sock", fr.host("/run/link")).unwrap();
    let _proc = crate::plan_escape::HostProc::mount(&fr);
    let code = r#"
        sub try { my ($n, $r) = @_; print "$n=" . ($r ? "ok" : "$!") . ";"; }
        sub un { pack("S a108", 1, $_[0]) }
        sysopen(my $p, "/run/allowed.sock", 010000000) or die "O_PATH: $!\n";
        my $n = fileno($p);
        socket(my $s, 1, 1, 0) or die;
        try("fd", connect($s, un("/proc/$$/fd/$n")));
        try("root", connect($s, un("/proc/$$/root/run/daemon.sock")));
        try("mkdir", mkdir("/tmp/broker-attack"));
        try("symlink", connect($s, un("/run/link")));
        socketpair(my $x, my $y, 1, 1, 0) or die;
        try("paired", connect($x, un("/run/allowed.sock")));
        socket(my $t, 2, 1, 0) or die;
        try("tcp", connect($t, pack("S n C4 x8", 2, PORT, 127, 0, 0, 1)));
        try("allowed", connect($s, un("/run/allowed.sock")));
    "#;
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.sandbox.allow_sockets = vec![allowed.clone()];
    let (exit, lines) = current_rt().block_on(async {
        let url = start_serve_with(cfg, &tokens).await;
        let port = url
            .rsplit(':')
            .next()
            .unwrap()
            .trim_end_matches('/')
            .to_string();
        let client = Client::new(&url, PLAN_TOKEN).unwrap();
        let code = code.replace("PORT", &port);
        plan_on(&client, &plan_body("names", &perl_query(&code))).await
    });
    assert!(
        l.accept().is_err(),
        "the query reached /run/daemon.sock: {lines}"
    );
    assert!(
        lines.contains(
            "fd=Too many levels of symbolic links;root=Too many levels of symbolic links;\
             mkdir=Read-only file system;symlink=Permission denied;paired=Transport endpoint is already connected;\
             tcp=Connection refused;allowed=ok;"
        ),
        "{lines}"
    );
    allowed_l.set_nonblocking(true).unwrap();
    assert!(allowed_l.accept().is_ok(), "{lines}");
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// The broker's inbox (its sending end is in each command until `exec`) and the command's
/// own listener are gone from the command once it runs: had either stayed open, a query
/// could send the broker descriptors of its choosing as listeners (an always-readable one
/// keeps the broker's thread spinning; 4096 fill its listener table) or answer its own
/// `connect`s. A query sees only its standard descriptors (0, 1, 2) and the one `perl`
/// opens to list them.
#[test]
fn a_plan_query_holds_neither_the_brokers_inbox_nor_its_listener() {
    require_root!();
    let fr = host();
    let _proc = crate::plan_escape::HostProc::mount(&fr);
    let code = r#"
        opendir(my $d, "/proc/$$/fd") or die "opendir: $!\n";
        my $mine = fileno($d);
        my @fds = sort { $a <=> $b } grep { /^\d+$/ && $_ != $mine } readdir($d);
        print "fds=" . join(",", map { $_ . ":" . (readlink("/proc/$$/fd/$_") =~ s/:.*//r) } @fds) . ";";
    "#;
    let (exit, lines) = plan_perl(skyhook::serve::Config::new(fr.root()), "fds", code);
    assert!(lines.contains("fds=0:"), "{lines}");
    let listed = lines
        .split("fds=")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .unwrap_or_default();
    let numbers: Vec<&str> = listed
        .split(',')
        .map(|f| f.split(':').next().unwrap())
        .collect();
    assert_eq!(numbers, ["0", "1", "2"], "{lines}");
    assert!(
        !listed.contains("socket") && !listed.contains("anon_inode"),
        "{lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// The connector (the process of the query user that connects to the allowed sockets) is
/// the peer the daemon sees (`SO_PEERCRED`'s pid); once the plan has ended it is gone and
/// reaped: no process of it outlives the plan, not even a zombie.
#[test]
fn the_connector_ends_with_its_plan() {
    require_root!();
    let fr = host();
    let (path, listener) = world_writable_listener(&fr, "/run/allowed.sock");
    let code = r#"
        socket(my $s, 1, 1, 0) or die;
        my $r = connect($s, pack("S a108", 1, "/run/allowed.sock"));
        print "allowed=" . ($r ? "connected" : "$!") . ";";
    "#;
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.sandbox.allow_sockets = vec![path.clone()];
    let (exit, lines) = plan_perl(cfg, "connector", code);
    assert!(lines.contains("allowed=connected;"), "{lines}");
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
    listener.set_nonblocking(true).unwrap();
    let (conn, _) = listener.accept().unwrap();
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    use std::os::fd::AsRawFd as _;
    // SAFETY: getsockopt(SO_PEERCRED) into a ucred of the size given.
    let r = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    assert_eq!(cred.uid, 2147478690, "{lines}");
    assert!(
        crate::plan_attack::exits_within(cred.pid, 0),
        "the connector (pid {}) outlived its plan",
        cred.pid
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", cred.pid)).unwrap_or_default();
    assert!(
        !status.contains("State:\tZ"),
        "the connector (pid {}) is an unreaped zombie",
        cred.pid
    );
}

/// A vsock socket is confined by no network namespace: its `connect` (to the local CID 1
/// here; on a VM, CID 2 is the hypervisor's services) left the plan's sandbox, made by
/// the broker on the query's behalf. The broker connects only IP and netlink sockets
/// (which live in the plan's network namespace) and Unix ones it brokers; any other
/// family is `EACCES`.
#[test]
fn a_plan_querys_vsock_connect_is_refused() {
    require_root!();
    let fr = host();
    let code = r#"
        socket(my $s, 40, 1, 0) or do { print "vsock=no socket: $!;"; exit 0 };
        my $r = connect($s, pack("S S L L x4", 40, 0, 4242, 1));
        print "vsock=" . ($r ? "connected" : "$!") . ";";
    "#;
    let (exit, lines) = plan_perl(skyhook::serve::Config::new(fr.root()), "vsock", code);
    assert!(
        lines.contains("vsock=Permission denied;")
            || lines.contains("vsock=no socket: Address family not supported by protocol;"),
        "a query's vsock connect was made: {lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// A query opens 300 connections to an allowed socket and keeps them: the broker makes
/// 256 (its `MAX_CONNECTIONS` per plan) and refuses the rest (`ECONNREFUSED`), so a plan
/// holds at most that many of the server's descriptors and the daemon's connections.
#[test]
fn a_plans_connections_to_an_allowed_socket_are_bounded() {
    require_root!();
    let fr = host();
    let (path, listener) = world_writable_listener(&fr, "/run/allowed.sock");
    // Accept (so no backlog fills) until the test's own connection, made after the plan.
    let acceptor = std::thread::spawn(move || {
        let mut n = 0usize;
        for c in listener.incoming() {
            let c = c.unwrap();
            let mut cred = libc::ucred {
                pid: 0,
                uid: 0,
                gid: 0,
            };
            let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
            use std::os::fd::AsRawFd as _;
            // SAFETY: getsockopt(SO_PEERCRED) into a ucred of the size given.
            unsafe {
                libc::getsockopt(
                    c.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_PEERCRED,
                    (&raw mut cred).cast(),
                    &mut len,
                )
            };
            if cred.pid == std::process::id() as i32 {
                return n;
            }
            n += 1;
        }
        n
    });
    let code = r#"
        my (@open, $refused);
        for my $i (1 .. 300) {
            socket(my $s, 1, 1, 0) or die "socket: $!\n";
            if (connect($s, pack("S a108", 1, "/run/allowed.sock"))) { push @open, $s; }
            else { $refused //= "$!"; }
        }
        print "connected=" . scalar(@open) . "; refused=$refused;";
    "#;
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.sandbox.allow_sockets = vec![path.clone()];
    let (exit, lines) = plan_perl(cfg, "many", code);
    let _wake = std::os::unix::net::UnixStream::connect(&path).unwrap();
    let accepted = acceptor.join().unwrap();
    assert!(
        lines.contains("connected=256; refused=Connection refused;"),
        "{lines}"
    );
    assert_eq!(accepted, 256, "{lines}");
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}
