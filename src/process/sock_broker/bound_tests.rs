//! Tests of the broker's edges: its listener bound (the command past it) and a path that
//! is no socket (answered as the kernel answers the query user).

use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};

use super::tests::{accepted, dir, listening, runnable, sandboxed};
use crate::process::sandbox::{Limits, QueryUser};

/// Perl that `connect`s a stream Unix socket to each path of `@ARGV` and prints the
/// outcome of each (`connected` or the error), space-separated.
const CONNECT_EACH: &str = r#"
    for my $p (@ARGV) {
        socket(my $s, 1, 1, 0) or die "socket: $!\n";
        print connect($s, pack("S a108", 1, $p)) ? "connected " : "$! ";
    }"#;

/// The kernel's `connect` to a path that is no socket (`unix_find_bsd`): the lookup, then
/// write permission on the file (`EACCES` for one the user may not write), then
/// `ECONNREFUSED`. A query's `connect` through the broker gets what the same `connect`
/// made by the query user with no broker gets, in both orders: a file and a directory it
/// may not write (`EACCES`), a file and a directory it may (`ECONNREFUSED`). Before, the
/// broker answered `ECONNREFUSED` for all four.
#[test]
fn a_path_that_is_no_socket_is_answered_as_the_kernel_answers_the_query_user() {
    if !runnable() {
        return;
    }
    let d = dir(false);
    let mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    let paths: Vec<String> = [
        ("ro", 0o644),
        ("rw", 0o666),
        ("dir", 0o755),
        ("open", 0o777),
    ]
    .into_iter()
    .map(|(name, m)| {
        let p = d.path().join(name);
        if name.ends_with("dir") || name == "open" {
            std::fs::create_dir(&p).unwrap();
        } else {
            std::fs::write(&p, "x").unwrap();
        }
        mode(&p, m);
        p.to_str().unwrap().to_owned()
    })
    .collect();
    let args: Vec<&str> = ["-e", CONNECT_EACH]
        .into_iter()
        .chain(paths.iter().map(String::as_str))
        .collect();
    let limits = Limits::default();
    let user = limits.query_user;
    let brokered = sandboxed(limits, "/usr/bin/perl", &args);
    let kernel = Command::new("/usr/bin/perl")
        .args(&args)
        .uid(user.uid())
        .gid(user.gid())
        .output()
        .unwrap();
    let kernel = String::from_utf8_lossy(&kernel.stdout).into_owned();
    assert_eq!(
        kernel,
        "Permission denied Connection refused Permission denied Connection refused ",
        "the kernel's own answers to uid {}",
        user.uid()
    );
    assert_eq!(brokered, kernel, "the broker's answers and the kernel's");
}

/// A command (`perl -e code args`) whose `connect`s go to `broker`'s listener as a plan's
/// do: before its `exec` it installs the brokered filter with a listener and sends that to
/// the broker's inbox (as `spawn` does). Standard input and output piped.
fn brokered_command(broker: &super::Broker, code: &str, args: &[&str]) -> Child {
    let inbox = broker.inbox().unwrap();
    let filter = crate::process::seccomp::key_filter(true);
    let mut c = Command::new("/usr/bin/perl");
    c.arg("-e")
        .arg(code)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    // SAFETY: the closure makes system calls only (the filter program points into the
    // vector moved into it, live for the call).
    unsafe {
        c.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr().cast_mut(),
            };
            let listener = crate::process::seccomp::install_filter(&prog, true)
                .map_err(std::io::Error::from_raw_os_error)?;
            let sent = super::send_listener(inbox.as_raw_fd(), listener);
            libc::close(listener);
            sent.map_err(std::io::Error::from_raw_os_error)
        });
    }
    c.spawn().unwrap()
}

/// A command's whole standard output once it has ended.
fn finished(mut c: Child) -> String {
    drop(c.stdin.take());
    let mut out = String::new();
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    c.wait().unwrap();
    out
}

/// A broker holding its bound of listeners (2 here; `MAX_LISTENERS` in a plan) drops the
/// next command's listener: that command's every `connect` is the kernel's `ENOSYS` (a
/// filter whose listener is closed), at once, and reaches nothing, an allowed socket and
/// a TCP listener included (a command within the bound reaches both). The live commands
/// keep their answers; once one is gone its place is taken by the next command.
#[test]
fn a_command_past_the_brokers_listener_bound_reaches_nothing_and_never_waits() {
    if !runnable() {
        return;
    }
    let started = std::time::Instant::now();
    let d = dir(false);
    let (allowed, al) = listening(d.path(), "allowed.sock");
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let port = tcp.local_addr().unwrap().port().to_string();
    let broker =
        super::broker::start_bounded(std::slice::from_ref(&allowed), QueryUser::NOBODY, None, 2)
            .unwrap();
    // Connects to a missing path (answered by the broker: ENOENT), prints, waits for its
    // standard input to close.
    let waiting = r#"
        $| = 1;
        socket(my $s, 1, 1, 0) or die;
        print connect($s, pack("S a108", 1, "/nonexistent/x")) ? "connected" : "$!";
        print "\n";
        <STDIN>;"#;
    // Connects to the allowed socket and to the TCP listener, prints both.
    let both = r#"
        use Socket;
        socket(my $s, 1, 1, 0) or die;
        print connect($s, pack("S a108", 1, $ARGV[0])) ? "unix=connected " : "unix=$! ";
        socket(my $t, PF_INET, SOCK_STREAM, 0) or die;
        print connect($t, pack_sockaddr_in($ARGV[1], inet_aton("127.0.0.1"))) ? "tcp=connected" : "tcp=$!";"#;
    // The command's first line (a byte at a time: the rest comes at its end).
    let line = |c: &mut Child| {
        let out = c.stdout.as_mut().unwrap();
        let mut b = Vec::new();
        let mut byte = [0u8; 1];
        while b.len() < 256 && !b.ends_with(b"\n") && out.read(&mut byte).unwrap() == 1 {
            b.push(byte[0]);
        }
        String::from_utf8_lossy(&b).into_owned()
    };
    let mut first = brokered_command(&broker, waiting, &[]);
    let mut second = brokered_command(&broker, waiting, &[]);
    assert_eq!(line(&mut first), "No such file or directory\n");
    assert_eq!(line(&mut second), "No such file or directory\n");
    let args = [allowed.to_str().unwrap(), port.as_str()];
    let past = finished(brokered_command(&broker, both, &args));
    assert_eq!(
        past, "unix=Function not implemented tcp=Function not implemented",
        "the command past the bound"
    );
    assert_eq!(accepted(&al).len(), 0, "the allowed socket heard it");
    assert!(tcp.accept().is_err(), "the TCP listener heard it");
    // The first command ends: its listener hangs up and its place is free.
    first.stdin.take().unwrap().write_all(b"\n").unwrap();
    finished(first);
    let next = finished(brokered_command(&broker, both, &args));
    assert_eq!(next, "unix=connected tcp=connected", "the next command");
    assert_eq!(accepted(&al).len(), 1);
    assert!(tcp.accept().is_ok());
    finished(second);
    drop(broker);
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}
