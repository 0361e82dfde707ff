//! Tests of the broker: a sandboxed command (the plan's query user, the plan's filter) on
//! this machine's root, against Unix sockets the test listens on.

use std::io::Read as _;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use crate::process::sandbox::{self, Limits, QueryUsers};
use crate::process::{Options, Sink, Spec, Stream};

/// A command's standard output, and its standard error.
pub(super) struct Out(Vec<u8>, Vec<u8>);

impl Sink for Out {
    fn chunk(&mut self, stream: Stream, bytes: &[u8]) -> std::ops::ControlFlow<()> {
        match stream {
            Stream::Stdout => self.0.extend_from_slice(bytes),
            Stream::Stderr => self.1.extend_from_slice(bytes),
        }
        std::ops::ControlFlow::Continue(())
    }
}

/// `program args` in a sandbox of `limits` (on a thread with a mount namespace of its own,
/// as a plan's): its standard output. The sandbox, its broker and connector end before
/// this returns.
pub(super) fn sandboxed(limits: Limits, program: &str, args: &[&str]) -> String {
    sandboxed_both(limits, program, args).0
}

/// [`sandboxed`]'s standard output and standard error.
pub(super) fn sandboxed_both(limits: Limits, program: &str, args: &[&str]) -> (String, String) {
    let spec = Spec {
        program: program.into(),
        args: args.iter().map(Into::into).collect(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: "/".into(),
        ..Spec::default()
    };
    std::thread::spawn(move || {
        crate::process::sandbox::tests::unshare_mounts();
        let sb = sandbox::start(&limits).unwrap();
        sb.enter().unwrap();
        assert_eq!(sb.sandbox().sockets_brokered(), limits.unix_sockets);
        let mut out = Out(Vec::new(), Vec::new());
        crate::process::run(&spec, &Options::default(), &mut out);
        drop(sb);
        (
            String::from_utf8_lossy(&out.0).into_owned(),
            String::from_utf8_lossy(&out.1).into_owned(),
        )
    })
    .join()
    .unwrap()
}

/// Perl `code` with `args` in a sandbox of `limits`, as [`sandboxed`]: its standard output.
fn perl(limits: Limits, code: &str, args: &[&str]) -> String {
    let mut all = vec!["-e", code];
    all.extend_from_slice(args);
    sandboxed(limits, "/usr/bin/perl", &all)
}

/// Where the test can run ([`runnable`]): a fresh directory ([`dir`]) and a socket `name`
/// listening in it ([`listening`]); None (the test returns) elsewhere.
pub(super) fn listening_in(
    writable: bool,
    name: &str,
) -> Option<(tempfile::TempDir, PathBuf, UnixListener)> {
    if !runnable() {
        return None;
    }
    let d = dir(writable);
    let (path, l) = listening(d.path(), name);
    Some((d, path, l))
}

/// This process's pid (the server's, as a peer would see it).
pub(super) fn server_pid() -> i32 {
    // SAFETY: getpid(2) has no preconditions.
    unsafe { libc::getpid() }
}

/// The plan is over: the connector `pid` that was a listener's peer (`what` names it) is
/// not the server, and is gone (reaped: no zombie, no orphan).
pub(super) fn assert_connector_gone(pid: i32, what: &str) {
    assert_ne!(pid, server_pid(), "the peer of the {what} is the server");
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the {what} {pid} outlived its plan"
    );
}

/// The lines of `/proc/<pid>/status` that start with one of `keys`, each with its blanks
/// squeezed to one space.
pub(super) fn proc_status(pid: i32, keys: &[&str]) -> Vec<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .filter(|l| keys.iter().any(|k| l.starts_with(k)))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// A directory the query user may enter (0755; 0777 with `writable`) and a Unix stream
/// socket listening in it, mode 0777 (as D-Bus's and journald's are 0666).
pub(super) fn listening(dir: &Path, name: &str) -> (PathBuf, UnixListener) {
    let path = dir.join(name);
    let l = UnixListener::bind(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
    l.set_nonblocking(true).unwrap();
    (path, l)
}

pub(super) fn dir(writable: bool) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let mode = if writable { 0o777 } else { 0o755 };
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    d
}

pub(super) fn runnable() -> bool {
    nix::unistd::geteuid().is_root() && Path::new("/usr/bin/perl").exists() && super::supported()
}

pub(super) fn allowing(paths: &[&Path]) -> Limits {
    Limits {
        allow_sockets: paths.iter().map(|p| p.to_path_buf()).collect(),
        ..Limits::default()
    }
}

/// Every connection waiting on `l`.
pub(super) fn accepted(l: &UnixListener) -> Vec<UnixStream> {
    std::iter::from_fn(|| l.accept().ok().map(|(c, _)| c)).collect()
}

/// A connection of `l` (non-blocking) once one comes within `ms` milliseconds (`poll`).
pub(super) fn accept_within(l: &UnixListener, ms: i32) -> Option<UnixStream> {
    let mut p = libc::pollfd {
        fd: l.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) on one pollfd of ours.
    unsafe { libc::poll(&mut p, 1, ms) };
    l.accept().ok().map(|(c, _)| c)
}

pub(super) fn peer(c: &UnixStream) -> libc::ucred {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt(SO_PEERCRED) into a ucred of the size given.
    let r = unsafe {
        libc::getsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    cred
}

/// A query's `connect` to a world-writable socket that is not allowed is refused
/// (`EACCES`, the broker's answer) and the listener sees no connection; so are an
/// abstract name (`ECONNREFUSED`) and a path that is no socket (`/etc/passwd`, root's
/// 0644: `EACCES`, as the kernel answers a user who may not write it).
#[test]
fn a_query_cannot_connect_to_a_world_writable_socket_that_is_not_allowed() {
    let Some((d, path, l)) = listening_in(false, "open.sock") else {
        return;
    };
    let (allowed, _al) = listening(d.path(), "allowed.sock");
    let code = r#"
        for my $p (@ARGV) {
            $p =~ s/^@/\0/;
            socket(my $s, 1, 1, 0) or die "socket: $!\n";
            print connect($s, pack("S a108", 1, $p)) ? "connected " : "$! ";
        }"#;
    let out = perl(
        allowing(&[&allowed]),
        code,
        &[path.to_str().unwrap(), "@abstract", "/etc/passwd"],
    );
    assert_eq!(
        out, "Permission denied Connection refused Permission denied ",
        "the query's connects"
    );
    assert_eq!(accepted(&l).len(), 0, "the listener took a connection");
}

/// An allowed socket: the query connects by its path, by a relative path and through a
/// symlink the query made, blocking and non-blocking; each connection's peer is the query
/// user (uid and gid, no supplementary group, a pid whose `/proc` status says that uid:
/// the connector's), not root; the query's socket keeps `O_NONBLOCK` and close-on-exec;
/// the connector is gone once the plan is.
#[test]
fn an_allowed_socket_is_reached_as_the_query_user() {
    let Some((d, path, l)) = listening_in(true, "bus.sock") else {
        return;
    };
    let code = r#"
        use Fcntl;
        my ($p, $dir) = @ARGV;
        socket(my $a, 1, 1, 0) or die "socket: $!\n";
        print connect($a, pack("S a108", 1, $p)) ? "blocking " : "blocking:$! ";
        socket(my $b, 1, 1 | 2048, 0) or die "socket: $!\n";
        print connect($b, pack("S a108", 1, $p)) ? "nonblocking " : "nonblocking:$! ";
        my $fl = fcntl($b, F_GETFL, 0);
        my $fd = fcntl($b, F_GETFD, 0);
        print "nb=", ($fl & O_NONBLOCK ? 1 : 0), " cloexec=", ($fd & FD_CLOEXEC ? 1 : 0), " ";
        chdir $dir or die "chdir: $!\n";
        socket(my $c, 1, 1, 0) or die "socket: $!\n";
        print connect($c, pack("S a108", 1, "bus.sock")) ? "relative " : "relative:$! ";
        symlink($p, "link") or die "symlink: $!\n";
        socket(my $e, 1, 1, 0) or die "socket: $!\n";
        print connect($e, pack("S a108", 1, "$dir/link")) ? "symlink" : "symlink:$!";
        syswrite($_, "hello") for ($a, $b, $c, $e);
    "#;
    let limits = Limits {
        query_user: QueryUsers::Auto.for_slot(3),
        ..allowing(&[&path])
    };
    let out = perl(
        limits,
        code,
        &[path.to_str().unwrap(), d.path().to_str().unwrap()],
    );
    assert_eq!(
        out, "blocking nonblocking nb=1 cloexec=1 relative symlink",
        "the query's connects"
    );
    let conns = accepted(&l);
    assert_eq!(conns.len(), 4, "connections to the allowed socket");
    let query = sandbox::AUTO_BASE + 3;
    for mut c in conns {
        let cred = peer(&c);
        assert_eq!(
            (cred.uid, cred.gid),
            (query, query),
            "the daemon saw the query as uid {} gid {}",
            cred.uid,
            cred.gid
        );
        assert_connector_gone(cred.pid, "connector");
        let mut got = String::new();
        c.set_nonblocking(false).unwrap();
        c.read_to_string(&mut got).unwrap();
        assert_eq!(got, "hello");
    }
}

/// The connector is the query user through and through: what `/proc` says of the peer's
/// pid while the plan runs (real, effective, saved and filesystem ids; groups; not root).
#[test]
fn the_connectors_proc_status_is_the_query_users() {
    let Some((_d, path, l)) = listening_in(false, "bus.sock") else {
        return;
    };
    let l2 = l.try_clone().unwrap();
    let status = std::thread::spawn(move || {
        let c = accept_within(&l2, 10_000)?;
        let status = proc_status(peer(&c).pid, &["Uid:", "Gid:", "Groups:", "CapEff:"]);
        Some(status.join("\n"))
    });
    let code = r#"
        socket(my $s, 1, 1, 0) or die "socket: $!\n";
        connect($s, pack("S a108", 1, $ARGV[0])) or die "connect: $!\n";
        sysread($s, my $x, 1);
        print "done";"#;
    let out = perl(allowing(&[&path]), code, &[path.to_str().unwrap()]);
    let q = sandbox::AUTO_BASE;
    assert_eq!(
        status.join().unwrap().unwrap_or_default(),
        format!("Uid: {q} {q} {q} {q}\nGid: {q} {q} {q} {q}\nGroups:\nCapEff: 0000000000000000")
    );
    assert_eq!(out, "done");
}

/// No datagram or seqpacket Unix socket (a datagram one could `sendto` `/dev/log` or
/// journald's socket by address): `socket` and `socketpair` of those types are `EPERM`,
/// stream ones are made (flags aside); a stream socket cannot send to an address
/// (`sendmsg` with `msg_name` unconnected: `EOPNOTSUPP`, the kernel's); a world-writable
/// datagram socket hears nothing.
#[test]
fn a_query_gets_no_datagram_unix_socket_and_a_stream_socket_sends_to_no_address() {
    if !runnable() {
        return;
    }
    let d = dir(false);
    let log = d.path().join("log");
    let dgram = UnixDatagram::bind(&log).unwrap();
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o777)).unwrap();
    dgram.set_nonblocking(true).unwrap();
    let code = r#"
        my $to = pack("S a108", 1, $ARGV[0]);
        print "dgram=", (socket(my $d, 1, 2, 0) ? (send($d, "<13>evil", 0, $to) ? "SENT" : "made") : "$!"), " ";
        print "seqpacket=", (socket(my $q, 1, 5, 0) ? "MADE" : "$!"), " ";
        print "pair-dgram=", (socketpair(my $x, my $y, 1, 2, 0) ? "MADE" : "$!"), " ";
        print "pair-stream=", (socketpair(my $u, my $v, 1, 1, 0) ? "made" : "$!"), " ";
        print "stream-flags=", (socket(my $f, 1, 1 | 2048 | 524288, 0) ? "made" : "$!"), " ";
        socket(my $s, 1, 1, 0) or die "socket: $!\n";
        print "sendto=", (defined(send($s, "<13>evil", 0, $to)) ? "SENT" : "$!");
    "#;
    let out = perl(Limits::default(), code, &[log.to_str().unwrap()]);
    assert_eq!(
        out,
        "dgram=Operation not permitted seqpacket=Operation not permitted \
         pair-dgram=Operation not permitted pair-stream=made stream-flags=made \
         sendto=Operation not supported"
    );
    let mut buf = [0u8; 64];
    assert!(
        dgram.recv(&mut buf).is_err(),
        "the datagram socket heard the query"
    );
}

/// A query's own TCP connection on its loopback still works (a `connect` of a socket that
/// is not Unix is made by the broker on the query's socket, in the plan's network
/// namespace).
#[test]
fn a_querys_tcp_connect_on_its_own_loopback_works() {
    if !runnable() {
        return;
    }
    let code = r#"
        use Socket;
        socket(my $l, PF_INET, SOCK_STREAM, 0) or die "socket: $!\n";
        bind($l, pack_sockaddr_in(0, inet_aton("127.0.0.1"))) or die "bind: $!\n";
        listen($l, 1) or die "listen: $!\n";
        my ($port) = unpack_sockaddr_in(getsockname($l));
        socket(my $c, PF_INET, SOCK_STREAM, 0) or die "socket: $!\n";
        print connect($c, pack_sockaddr_in($port, inet_aton("127.0.0.1"))) ? "tcp=connected " : "tcp=$! ";
        socket(my $r, PF_INET, SOCK_STREAM, 0) or die "socket: $!\n";
        print connect($r, pack_sockaddr_in(1, inet_aton("127.0.0.1"))) ? "closed-port=CONNECTED" : "closed-port=$!";
    "#;
    assert_eq!(
        perl(Limits::default(), code, &[]),
        "tcp=connected closed-port=Connection refused"
    );
}

/// `--plan-deny-unix-sockets` still denies all, an allowed socket included: no Unix socket
/// is made (`EPERM`), nothing reaches the listener.
#[test]
fn with_unix_sockets_denied_an_allowed_socket_is_not_reached() {
    let Some((_d, path, l)) = listening_in(false, "bus.sock") else {
        return;
    };
    let limits = Limits {
        unix_sockets: false,
        ..allowing(&[&path])
    };
    let code = r#"
        print socket(my $s, 1, 1, 0) ? (connect($s, pack("S a108", 1, $ARGV[0])) ? "CONNECTED" : "$!") : "socket: $!";"#;
    let out = perl(limits, code, &[path.to_str().unwrap()]);
    assert_eq!(out, "socket: Operation not permitted");
    assert_eq!(accepted(&l).len(), 0);
}

/// The race: while the query's main thread `connect`s again and again, a second thread
/// rewrites the `sockaddr` between an allowed socket's path and a world-writable one's
/// (the broker reads the address after the `connect` was issued), and a third flips a
/// symlink in a writable directory between the two: some connects reach the allowed
/// socket (as the query user), none the other. (Where the kernel made the `connect`, a
/// rewrite between its check and its use would reach the other.)
#[test]
fn a_query_rewriting_its_address_or_a_symlink_reaches_no_other_socket() {
    if !Path::new("/usr/bin/cc").exists() {
        return;
    }
    let Some((d, allowed, al)) = listening_in(true, "bus.sock") else {
        return;
    };
    let (other, ol) = listening(d.path(), "evil.sock");
    let src = d.path().join("race.c");
    std::fs::write(&src, RACE_C).unwrap();
    let bin = d.path().join("race");
    let cc = std::process::Command::new("/usr/bin/cc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    // Drain the allowed socket's backlog while the query runs.
    let al2 = al.try_clone().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let drain = std::thread::spawn(move || {
        let mut n = 0;
        while !stop2.load(std::sync::atomic::Ordering::SeqCst) {
            if let Some(c) = accept_within(&al2, 50) {
                assert_eq!(peer(&c).uid, sandbox::AUTO_BASE);
                n += 1;
            }
        }
        n + accepted(&al2).len()
    });
    let link = d.path().join("link");
    let out = sandboxed(
        allowing(&[&allowed]),
        bin.to_str().unwrap(),
        &[
            allowed.to_str().unwrap(),
            other.to_str().unwrap(),
            link.to_str().unwrap(),
        ],
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let reached = drain.join().unwrap();
    eprintln!("the racing query: {out}; {reached} reached the allowed socket");
    assert_eq!(
        accepted(&ol).len(),
        0,
        "a racing query reached {}: {out}",
        other.display()
    );
    let ok: usize = out
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("ok="))
        .map(|n| n.parse::<usize>().unwrap())
        .sum();
    assert_eq!(ok, reached, "{out}: {reached} reached the allowed socket");
}

/// A private `dbus-daemon` of the test's in `d`, a system bus (`<type>system</type>`, the
/// reference daemon's system-bus checks) listening on `d/system_bus_socket` (the name the
/// broker filters), every user allowed; `None` (skipped, or failed under
/// `SKYHOOK_REQUIRE_ALL=1`) without `dbus-daemon`, `dbus-send` and `busctl`. The daemon is
/// killed when the [`Bus`] is dropped.
pub(super) fn system_bus(d: &Path) -> Option<Bus> {
    for tool in [
        "/usr/bin/dbus-daemon",
        "/usr/bin/dbus-send",
        "/usr/bin/busctl",
    ] {
        if !Path::new(tool).exists() {
            crate::host::testutil::skip(&format!(
                "{tool} is not installed (Debian: dbus-daemon, dbus-bin, systemd)"
            ));
            return None;
        }
    }
    let sock = d.join("system_bus_socket");
    let config = d.join("bus.conf");
    std::fs::write(
        &config,
        format!(
            r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
            sock.display()
        ),
    )
    .unwrap();
    let mut daemon = std::process::Command::new("/usr/bin/dbus-daemon")
        .arg(format!("--config-file={}", config.display()))
        .args(["--nofork", "--print-address"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The daemon prints its address once it listens.
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(daemon.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("unix:path="), "dbus-daemon: {line:?}");
    Some(Bus { daemon, sock })
}

/// A running [`system_bus`]: the daemon (killed and reaped on drop) and its socket.
pub(super) struct Bus {
    daemon: std::process::Child,
    pub(super) sock: PathBuf,
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// Where the test can run ([`runnable`], [`system_bus`]): a directory and a system bus
/// listening in it.
pub(super) fn test_bus() -> Option<(tempfile::TempDir, Bus)> {
    if !runnable() {
        return None;
    }
    let d = dir(false);
    let bus = system_bus(d.path())?;
    Some((d, bus))
}

/// `dbus-send`'s arguments for the bus's `GetId` on `sock`.
fn get_id(sock: &Path) -> Vec<String> {
    [
        format!("--bus=unix:path={}", sock.display()),
        "--print-reply".into(),
        "--dest=org.freedesktop.DBus".into(),
        "/org/freedesktop/DBus".into(),
        "org.freedesktop.DBus.GetId".into(),
    ]
    .into()
}

/// A real `dbus-daemon` (a system bus of the test's, on a socket named as the system bus's
/// is) allowed: a query's `dbus-send` connects through the broker, authenticates
/// (`EXTERNAL`: the uid it claims, its own, must be the connection's `SO_PEERCRED` uid,
/// the connector's) and gets its reply through the read-only filter (the socket is named
/// `system_bus_socket`), which refuses `StartServiceByName`; the same bus not allowed is
/// refused. The query user here is `nobody` (65534), also the bus user: no claim is
/// rewritten.
#[test]
fn a_query_talks_to_an_allowed_dbus_daemon_as_itself() {
    let Some((_d, bus)) = test_bus() else {
        return;
    };
    let sock = &bus.sock;
    let args = get_id(sock);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let nobody = Limits {
        query_user: sandbox::QueryUser::NOBODY,
        ..allowing(&[sock])
    };
    let (allowed, why) = sandboxed_both(nobody.clone(), "/usr/bin/dbus-send", &args);
    let (refused, said) = sandboxed_both(Limits::default(), "/usr/bin/dbus-send", &args);
    // A call that is no read: the bus would answer it (ServiceUnknown); the filter refuses.
    let start = [
        args[0],
        "--print-reply",
        "--dest=org.freedesktop.DBus",
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus.StartServiceByName",
        "string:org.example.Evil",
        "uint32:0",
    ];
    let (_, started) = sandboxed_both(nobody, "/usr/bin/dbus-send", &start);
    drop(bus);
    eprintln!("dbus-send through the broker: {}", allowed.trim());
    assert!(
        allowed.contains("method return") && allowed.contains("string \""),
        "{allowed} {why}"
    );
    assert_eq!(refused, "", "the bus answered a query it was not allowed");
    assert!(said.contains("Permission denied"), "{said}");
    assert!(
        started.contains("org.freedesktop.DBus.Error.AccessDenied"),
        "the filter let StartServiceByName through: {started}"
    );
}

/// The query user is `auto`'s (an id no user database knows, which the reference
/// `dbus-daemon` drops): the bus connection is made by a connector of the bus user
/// (`nobody`, the library's default as serve's), the filter rewrites the query's
/// `AUTH EXTERNAL` claim of its own uid to the bus user's, and `dbus-send` (libdbus: the
/// claim in `AUTH EXTERNAL <hex>`) gets its `GetId` reply; so does `busctl` (sd-bus: a bare
/// `AUTH EXTERNAL`, then an empty `DATA`, the bus taking the peer's uid).
#[test]
fn a_query_of_an_auto_user_reaches_the_reference_dbus_daemon_as_the_bus_user() {
    let Some((_d, bus)) = test_bus() else {
        return;
    };
    let sock = &bus.sock;
    let limits = Limits {
        query_user: QueryUsers::Auto.for_slot(5),
        ..allowing(&[sock])
    };
    let args = get_id(sock);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (got, why) = sandboxed_both(limits.clone(), "/usr/bin/dbus-send", &args);
    let address = format!("--address=unix:path={}", sock.display());
    let (sd, sd_why) = sandboxed_both(
        limits,
        "/usr/bin/busctl",
        &[
            &address,
            "call",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "GetId",
        ],
    );
    drop(bus);
    assert!(
        got.contains("method return") && got.contains("string \""),
        "dbus-send as query user {}: {got:?} {why:?}",
        sandbox::AUTO_BASE + 5
    );
    assert!(sd.starts_with("s \""), "busctl: {sd:?} {sd_why:?}");
}

/// The bus user is shared (by every plan, and by the host's own processes of that uid,
/// which `dbus-daemon` counts together, `max_connections_per_user`): a plan holds at most
/// [`super::connector::BUS_USER_PER_PLAN`] bus connections at once; the next `connect` is
/// refused at once (`ECONNREFUSED`) without reaching the bus. Each connection that reached
/// it is the bus user's (`SO_PEERCRED` 65534), made by a process that is not the server
/// and is gone once the plan is.
#[test]
fn a_plan_holds_no_more_bus_connections_than_its_bound() {
    let Some((_d, sock, l)) = listening_in(false, "system_bus_socket") else {
        return;
    };
    let code = r#"
        my @held;
        for my $i (1 .. $ARGV[1]) {
            socket(my $s, 1, 1, 0) or die "socket: $!\n";
            print connect($s, pack("S a108", 1, $ARGV[0])) ? "ok " : "$! ";
            push @held, $s;
        }"#;
    let bound = 8;
    let out = perl(
        allowing(&[&sock]),
        code,
        &[sock.to_str().unwrap(), &(bound + 1).to_string()],
    );
    assert_eq!(
        out,
        format!("{}Connection refused ", "ok ".repeat(bound)),
        "{} connects to the system bus held at once",
        bound + 1
    );
    let conns = accepted(&l);
    assert_eq!(conns.len(), bound, "connections that reached the bus");
    for c in &conns {
        let cred = peer(c);
        assert_eq!((cred.uid, cred.gid), (65534, 65534), "the bus's peer");
        assert_connector_gone(cred.pid, "bus connector");
    }
}

/// The bus user's permits: a plan holds at most its bound, the process at most its own
/// over every plan (a plan refused there keeps no place of its own), and each comes back
/// when dropped.
#[test]
fn bus_user_permits_are_bounded_per_plan_and_in_the_process() {
    use super::connector::{Budget, BusPermit};
    static ALL: Budget = Budget::new(3);
    let (a, b) = (
        std::sync::Arc::new(Budget::new(2)),
        std::sync::Arc::new(Budget::new(2)),
    );
    let a1 = BusPermit::take(&a, &ALL).expect("a's first");
    let _a2 = BusPermit::take(&a, &ALL).expect("a's second");
    assert!(
        BusPermit::take(&a, &ALL).is_none(),
        "a's third (its plan's bound)"
    );
    let _b1 = BusPermit::take(&b, &ALL).expect("b's first");
    assert!(
        BusPermit::take(&b, &ALL).is_none(),
        "b's second (the process's bound)"
    );
    drop(a1);
    let _b2 = BusPermit::take(&b, &ALL).expect("b's second once a's first is gone");
    assert!(
        BusPermit::take(&a, &ALL).is_none(),
        "the process is full again"
    );
}

/// The racing query: argv 1 the allowed socket, 2 the other, 3 a symlink path in a
/// writable directory. 100 connects by a rewritten address, then 100 through the flipping
/// symlink (together under the broker's 256 connections); prints `ok=N refused=M` for
/// each.
const RACE_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
static struct sockaddr_un addr;
static const char *a, *b, *link_path;
static volatile int stop;
static void *rewrite(void *x) {
    (void)x;
    while (!stop) {
        strcpy(addr.sun_path, b);
        for (volatile int i = 0; i < 2000; i++) {}
        strcpy(addr.sun_path, a);
        for (volatile int i = 0; i < 2000; i++) {}
    }
    return 0;
}
static void *flip(void *x) {
    char tmp[200];
    (void)x;
    snprintf(tmp, sizeof tmp, "%s.tmp", link_path);
    while (!stop) {
        unlink(tmp); symlink(b, tmp); rename(tmp, link_path);
        unlink(tmp); symlink(a, tmp); rename(tmp, link_path);
    }
    return 0;
}
static void round_of(void *(*racer)(void *), const char *start) {
    pthread_t t;
    int ok = 0, no = 0;
    strcpy(addr.sun_path, start);
    stop = 0;
    pthread_create(&t, 0, racer, 0);
    for (int i = 0; i < 100; i++) {
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&addr, sizeof addr) == 0) ok++; else no++;
        close(s);
    }
    stop = 1;
    pthread_join(t, 0);
    printf("ok=%d refused=%d ", ok, no);
}
int main(int argc, char **argv) {
    if (argc < 4) return 2;
    a = argv[1]; b = argv[2]; link_path = argv[3];
    addr.sun_family = AF_UNIX;
    round_of(rewrite, a);
    symlink(a, link_path);
    round_of(flip, link_path);
    return 0;
}
"#;
