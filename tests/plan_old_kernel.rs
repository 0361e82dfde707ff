//! A package plan on a kernel before 5.9, run for real: `skyhook-agent serve` started under
//! the `UNAME26` personality (`setarch --uname-2.6`: `uname` then reports 2.6.x, to it and
//! to every command it starts) decides once that it has no socket broker
//! (`sock_broker::supported()`, a process-wide answer: hence the binary, not an in-process
//! server) and takes the fallback: no command of a plan may make a Unix socket.

use serde_json::{Value, json};
use skyhook::remote::Client;

use crate::fleet::{PLAN_TOKEN, start_serve_with, tokens_file};
use crate::plan_attack::{current_rt, host_with, perl_query, plan_body, plan_on, serve_bin_with};

/// `personality(2)`'s `UNAME26` flag (`<linux/personality.h>`): `uname` reports 2.6.x.
const UNAME26: libc::c_ulong = 0x0020000;

/// Perl that prints the kernel release it is told, whether it may make a Unix socket and
/// a Unix socket pair, and its TCP `connect`s on its own loopback (to a listener of its
/// own, then to a closed port).
const QUERY: &str = r#"
    my $u = "\0" x 390;
    syscall(63, $u) == 0 or die "uname: $!\n";
    print "release=" . unpack("x130 Z65", $u) . ";";
    print socket(my $s, 1, 1, 0) ? "unix=made;" : "unix=$!;";
    print socketpair(my $a, my $b, 1, 1, 0) ? "pair=made;" : "pair=$!;";
    my $lo = sub { pack("S n C4 x8", 2, $_[0], 127, 0, 0, 1) };
    socket(my $l, 2, 1, 6) or die "socket: $!\n";
    bind($l, $lo->(0)) or die "bind: $!\n";
    listen($l, 1) or die "listen: $!\n";
    my (undef, $port) = unpack("S n", getsockname($l));
    socket(my $c, 2, 1, 6) or die "socket: $!\n";
    print connect($c, $lo->($port)) ? "tcp=connected;" : "tcp=$!;";
    socket(my $r, 2, 1, 6) or die "socket: $!\n";
    print connect($r, $lo->(1)) ? "closed=connected;" : "closed=$!;";
"#;

/// The part of `lines` from `key=` to the end of the query's output line.
fn from<'a>(lines: &'a str, key: &str) -> &'a str {
    let at = lines
        .find(key)
        .unwrap_or_else(|| panic!("no {key} in {lines}"));
    lines[at..].lines().next().unwrap_or_default()
}

/// Under a 2.6 `uname` serve says at start that a plan's commands may make no Unix
/// socket, and a package plan still plans (its step's planned write is in the plan, the
/// host unchanged): its query is told 2.6, may make no Unix socket (`EPERM`; a socket
/// pair, which reaches nothing, it may, as with the broker), so the allowed D-Bus socket (`/run/dbus/system_bus_socket`, listening, 0777) hears
/// nothing, and its TCP `connect`s on its own loopback get what they get on a serve with
/// the broker (connected; refused on a closed port).
#[test]
fn a_plan_on_a_kernel_before_5_9_plans_and_makes_no_unix_socket() {
    require_root!();
    let fr = host_with(&["perl"]);
    let (_, listener) = crate::util::bus::system_bus_listener(&fr);
    listener.set_nonblocking(true).unwrap();
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let script = format!(
        "{}fs::write(\"/etc/fallback.conf\", \"planned\\n\");\n",
        perl_query(QUERY)
    );
    let body = plan_body("old-kernel", &script);

    let (srv, url, said) = serve_bin_with(fr.root(), &tokens, &[], |c| {
        use std::os::unix::process::CommandExt as _;
        // SAFETY: personality(2) in the child before its exec: one system call.
        unsafe {
            c.pre_exec(|| {
                if libc::personality(UNAME26) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let (exit, lines): (Value, String) = current_rt()
        .block_on(async { plan_on(&Client::new(&url, PLAN_TOKEN).unwrap(), &body).await });
    drop(srv);
    assert!(
        said.iter().any(|l| l.contains(
            "this kernel has no seccomp user notification with ADDFD (Linux >= 5.9): a \
             package plan's commands may make no Unix socket"
        )),
        "serve said at start: {said:#?}"
    );
    assert!(lines.contains("code=0 out=release=2.6."), "{lines}");
    assert!(
        lines.contains("unix=Operation not permitted;pair=made;"),
        "{lines}"
    );
    assert!(
        listener.accept().is_err(),
        "the D-Bus socket heard a query: {lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
    let rendered = exit["rendered"].as_str().unwrap_or_default();
    assert!(rendered.contains("/etc/fallback.conf"), "{rendered}");
    assert!(!fr.exists("/etc/fallback.conf"));

    // The same query on a serve with the broker (this process's: this kernel has it).
    let (_, brokered): (Value, String) = current_rt().block_on(async {
        let cfg = skyhook::serve::Config::new(fr.root());
        let client = Client::new(&start_serve_with(cfg, &tokens).await, PLAN_TOKEN).unwrap();
        plan_on(&client, &body).await
    });
    assert!(
        brokered.contains("unix=made;pair=made;"),
        "with the broker: {brokered}"
    );
    assert_eq!(
        from(&lines, "tcp="),
        from(&brokered, "tcp="),
        "IP sockets with and without the broker"
    );
    assert_eq!(
        from(&lines, "tcp="),
        "tcp=connected;closed=Connection refused; err="
    );
}
