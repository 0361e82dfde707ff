//! Attacks on the plan query user (issue 32, merge of branch `sock`): every command of a
//! `package_plan` runs in the plan's sandbox as an unprivileged query user (by default one
//! of its own for each running plan, 2147478690 + its slot), no groups, no capabilities, `no_new_privs`. A hostile package's queries try
//! what an unprivileged process on the node could: descriptors left open by the server, the
//! plan's root-owned init, capabilities regained in a user namespace, io_uring and BPF,
//! processes that outlive the plan, another plan's processes (the same uid), and host
//! sockets the query user may write.
//!
//! Tests marked `#[ignore = "known hole: ..."]` reproduce an attack that succeeds on main
//! (their failure line is in the report of the branch that added them).

use serde_json::{Value, json};
use skyhook::remote::Client;

use crate::fleet::{PLAN_TOKEN, start_serve_with, tokens_file};
use crate::plan_attack::{
    host_with, left_running, perl_query, pids_of, plan_body, plan_on, plan_with,
};
use crate::plan_escape::HostProc;
use crate::util::FakeRoot;

/// A host root with `perl` and `sleep`, `/dev/null` and the host's `/proc` mounted in it.
fn host() -> (FakeRoot, HostProc) {
    let fr = host_with(&["perl", "sleep"]);
    let p = HostProc::mount(&fr);
    (fr, p)
}

/// Plan a package whose query is `perl -e code` on a fresh `serve` over `fr`.
fn plan_perl(fr: &FakeRoot, id: &str, code: &str) -> (Value, String) {
    plan_with(
        skyhook::serve::Config::new(fr.root()),
        &plan_body(id, &perl_query(code)),
    )
}

/// A descriptor the server holds without close-on-exec (one it inherited from whatever
/// started it: a launcher's pipe, a socket-activation socket, a log file; here a host file
/// outside the root that the test process opens without `O_CLOEXEC`) was inherited by every
/// query: the query, through it, truncated and wrote a host file outside the read-only root
/// (`RLIMIT_FSIZE` 0 stops only growth). A command of a plan now starts with descriptors 0,
/// 1 and 2 only.
#[test]
#[cfg(target_arch = "x86_64")]
fn a_descriptor_the_server_left_inheritable_does_not_reach_a_query() {
    require_root!();
    let (fr, _proc) = host();
    let out = tempfile::Builder::new()
        .prefix("plan-query-attack-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let precious = out.path().join("precious");
    std::fs::write(&precious, "precious\n").unwrap();
    let c = std::ffi::CString::new(precious.to_str().unwrap()).unwrap();
    // SAFETY: open of a C path; the descriptor is closed below.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR) };
    assert!(fd > 2, "{}", std::io::Error::last_os_error());
    let code = r#"
        my $got = syscall(77, FD, 0) == 0 ? "TRUNCATED" : "$!";
        opendir(my $d, "/proc/self/fd") or die "fd: $!\n";
        my @fds = sort { $a <=> $b } grep { /^\d+$/ && $_ != fileno($d) } readdir($d);
        print "fds=" . join(",", @fds) . " leaked=$got";
    "#
    .replace("FD", &fd.to_string());
    let (exit, lines) = plan_perl(&fr, "leaked-fd", code.as_str());
    // SAFETY: the descriptor opened above.
    unsafe { libc::close(fd) };
    assert_eq!(
        std::fs::read_to_string(&precious).unwrap(),
        "precious\n",
        "a plan's query changed a host file through descriptor {fd} of the server: {lines}"
    );
    assert!(
        lines.contains("out=fds=0,1,2 leaked=Bad file descriptor"),
        "{lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// What the query user cannot do to the plan's own init (root, pid 1 of the plan's PID
/// namespace) and to the kernel: signal or ptrace the init, open its environment, working
/// directory or memory; make a user namespace (to regain capabilities there: refused, the
/// query is chrooted), a BPF map; see any process but the init and itself.
#[test]
#[cfg(target_arch = "x86_64")]
fn a_plan_query_cannot_touch_its_init_or_regain_capabilities() {
    require_root!();
    let (fr, _proc) = host();
    let code = r#"
        my @r;
        if (open(my $s, "<", "/proc/self/status")) {
            for (<$s>) { push @r, "$1=$2" if /^(CapPrm|CapEff|CapAmb|NoNewPrivs|Groups):\s*(.*?)\s*$/ }
        }
        push @r, "kill1=" . (kill(0, 1) ? "SIGNALLED" : "$!");
        push @r, "ptrace1=" . (syscall(101, 16, 1, 0, 0) == 0 ? "ATTACHED" : "$!");
        push @r, "environ1=" . (open(my $e, "<", "/proc/1/environ") ? "OPENED" : "$!");
        push @r, "cwd1=" . (opendir(my $c, "/proc/1/cwd/") ? "OPENED" : "$!");
        push @r, "mem1=" . (open(my $m, "<", "/proc/1/mem") ? "OPENED" : "$!");
        push @r, "userns=" . (syscall(272, 0x10000000) == 0 ? "MADE" : "$!");
        my $a = pack("LLLL", 2, 4, 4, 1) . ("\0" x 64);
        push @r, "bpf=" . (syscall(321, 0, $a, length($a)) >= 0 ? "MADE" : "$!");
        opendir(my $pd, "/proc");
        push @r, "procs=" . join(",", sort { $a <=> $b } grep { /^\d+$/ } readdir($pd));
        print join(" ", @r);
    "#;
    let (exit, lines) = plan_perl(&fr, "init", code);
    assert!(
        lines.contains(
            "out=Groups= CapPrm=0000000000000000 CapEff=0000000000000000 \
             CapAmb=0000000000000000 NoNewPrivs=1 kill1=Operation not permitted \
             ptrace1=Operation not permitted environ1=Permission denied \
             cwd1=Permission denied mem1=Permission denied userns=Operation not permitted \
             bpf=Operation not permitted procs=1,2 err="
        ),
        "{lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// A query that leaves a daemon (fork, `setsid`, fork again, the parent exits at once,
/// output closed) does not leave it running on the host as the query user after the plan:
/// it is in the plan's PID namespace, which dies with the plan's init.
#[test]
fn a_daemon_left_by_a_query_does_not_outlive_the_plan() {
    require_root!();
    let (fr, _proc) = host();
    let argv = ["sleep", "3600.0719"];
    let code = r#"
        defined(my $p = fork) or die "fork: $!\n";
        if ($p == 0) {
            syscall(112) >= 0 or die "setsid: $!\n";
            close(STDIN); close(STDOUT); close(STDERR);
            exec("sleep", "3600.0719") if fork == 0;
            exit 0;
        }
        waitpid($p, 0);
        print "detached";
    "#;
    let (exit, lines) = plan_perl(&fr, "daemon", code);
    assert!(lines.contains("out=detached"), "{lines}");
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
    assert_eq!(
        left_running(&argv),
        Vec::<i32>::new(),
        "a plan's daemon outlived the plan: {lines}"
    );
}

/// Two plans at once run their queries as the same query user (65534), but each in its own
/// PID namespace: plan B's query, `kill(-1, SIGKILL)` (every process the caller may signal)
/// and a `kill`/`pidfd_open` of plan A's running query by its host pid, reaches nothing of
/// plan A, whose query runs to its end.
#[test]
#[cfg(target_arch = "x86_64")]
fn a_plan_query_cannot_signal_another_plans_query_of_the_same_user() {
    require_root!();
    let (fr, _proc) = host();
    let argv = ["sleep", "3.0823"];
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let a_body = plan_body(
        "plan-a",
        "let r = query([\"sleep\", \"3.0823\"]);\nprint(\"a code=\" + r.code);\n",
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ((a_exit, a_lines), (b_exit, b_lines)) = rt.block_on(async {
        let url = start_serve_with(skyhook::serve::Config::new(fr.root()), &tokens).await;
        let a = Client::new(&url, PLAN_TOKEN).unwrap();
        let b = Client::new(&url, PLAN_TOKEN).unwrap();
        let run = |client: Client, body: Value| async move { plan_on(&client, &body).await };
        let attack = async {
            // Plan A's query is running (10 s at most for it to show).
            let mut pid = None;
            for _ in 0..200 {
                pid = pids_of(&argv).first().copied();
                if pid.is_some() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            let pid = pid.expect("plan A's query never started");
            let code = r#"
                my @r;
                push @r, "all=" . kill(9, -1);
                push @r, "pid=" . (kill(9, PID) ? "KILLED" : "$!");
                push @r, "pidfd=" . (syscall(434, PID, 0) >= 0 ? "OPENED" : "$!");
                print join(" ", @r);
            "#
            .replace("PID", &pid.to_string());
            run(b, plan_body("plan-b", &perl_query(&code))).await
        };
        tokio::join!(run(a, a_body), attack)
    });
    assert!(
        b_lines.contains("out=all=0 pid=No such process pidfd=No such process"),
        "{b_lines}"
    );
    assert_eq!(b_exit["exit"], json!({"code": 0}), "{b_exit:#}");
    assert!(
        a_lines.contains("a code=0\n"),
        "plan B's query killed plan A's: {a_lines}\n{b_lines}"
    );
    assert_eq!(a_exit["exit"], json!({"code": 0}), "{a_exit:#}");
}

/// A daemon listening on `/run/exporter/control.sock` of the host root, owned by
/// 65534:65534 and mode 0600 (only its own user may write it), and a plan whose query
/// connects and writes a request: what the daemon received (if anything), the exit and the
/// lines.
fn nobody_socket_attack(
    cfg: skyhook::serve::Config,
    fr: &FakeRoot,
) -> (Option<String>, Value, String) {
    crate::plan_escape::socket_attack(
        cfg,
        fr,
        "/run/exporter/control.sock",
        Some(65534),
        "reload /etc/evil.conf",
    )
}

/// A daemon of the node running as 65534 (`nobody`: exporters, `dnsmasq`, pods run as
/// 65534 with a hostPath socket), listening on a Unix socket of the host root only its own
/// user may write: a query, being that user to the kernel when the default query user was
/// 65534, connected and sent it a request. By default (`--plan-query-user auto`) a plan's
/// query user is one no host user has: the kernel refuses the `connect`.
#[test]
fn a_plan_query_cannot_reach_a_socket_of_a_daemon_running_as_the_default_query_user() {
    require_root!();
    let (fr, _proc) = host();
    let (got, exit, lines) = nobody_socket_attack(skyhook::serve::Config::new(fr.root()), &fr);
    assert_eq!(
        got, None,
        "a plan's query reached the socket of a daemon running as 65534: {lines}"
    );
    assert!(lines.contains("err=connect: Permission denied"), "{lines}");
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// The same daemon, with a fixed `--plan-query-user 2147483646` (one no host user has):
/// the kernel refuses the query's `connect`.
#[test]
fn with_an_unused_query_user_a_plan_query_cannot_reach_a_socket_of_a_daemon_running_as_65534() {
    require_root!();
    let (fr, _proc) = host();
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.query_users = skyhook::process::sandbox::QueryUsers::Fixed(
        skyhook::process::sandbox::QueryUser::new(2147483646, 2147483646).unwrap(),
    );
    let (got, exit, lines) = nobody_socket_attack(cfg, &fr);
    assert_eq!(got, None, "{lines}");
    assert!(lines.contains("err=connect: Permission denied"), "{lines}");
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// What `inotify_init1` says as a process of uid 65534 on the host (a daemon of the node
/// running as `nobody`): `MADE`, or the error.
fn host_nobody_inotify() -> String {
    use std::os::unix::process::CommandExt as _;
    let out = std::process::Command::new("perl")
        .args(["-e", r#"print syscall(294, 0) >= 0 ? "MADE" : "$!""#])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The kernel counts some resources per user, for every process of that uid on the host
/// and in every plan: inotify instances (`fs.inotify.max_user_instances`, 128 by default),
/// pipe buffer pages, `RLIMIT_NPROC`'s processes. A query took every inotify instance of
/// its uid, 65534 for every plan, and held them (exec'ed into a `sleep`): while it ran,
/// another plan's query and every daemon of the node running as `nobody` got `EMFILE` from
/// `inotify_init` (a config watcher fails to start, a `tail -f` falls back to polling).
/// By default each running plan now has a uid of its own, which no host process has: what
/// plan A's query exhausts is plan A's alone.
#[test]
#[cfg(target_arch = "x86_64")]
fn a_plan_query_cannot_exhaust_what_the_kernel_counts_per_user() {
    require_root!();
    let (fr, _proc) = host();
    let argv = ["sleep", "4.1137"];
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let hog = r#"
        my $n = 0;
        $n++ while syscall(294, 0) >= 0;
        exec("sleep", "4.1137");
    "#;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let before = host_nobody_inotify();
    let ((a_exit, _), (during, (b_exit, b_lines))) = rt.block_on(async {
        let url = start_serve_with(skyhook::serve::Config::new(fr.root()), &tokens).await;
        let a = Client::new(&url, PLAN_TOKEN).unwrap();
        let b = Client::new(&url, PLAN_TOKEN).unwrap();
        let run = |client: Client, body: Value| async move { plan_on(&client, &body).await };
        let other = async {
            // Plan A's query holds its instances once it is the `sleep` (10 s at most).
            for _ in 0..200 {
                if !pids_of(&argv).is_empty() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            assert!(!pids_of(&argv).is_empty(), "plan A's query never started");
            let during = host_nobody_inotify();
            let code = r#"print syscall(294, 0) >= 0 ? "MADE" : "$!""#;
            (during, run(b, plan_body("plan-b", &perl_query(code))).await)
        };
        tokio::join!(run(a, plan_body("plan-a", &perl_query(hog))), other)
    });
    assert_eq!(before, "MADE");
    assert_eq!(
        (during.as_str(), b_lines.contains("out=MADE")),
        ("MADE", true),
        "a plan's query took every inotify instance of uid 65534 from the host and from \
         another plan: {b_lines}"
    );
    assert_eq!(b_exit["exit"], json!({"code": 0}), "{b_exit:#}");
    assert_eq!(a_exit["exit"], json!({"code": 0}), "{a_exit:#}");
}

/// `io_uring_setup` is open to any unprivileged user, and so was to a query (it made a
/// ring): its operations pass no seccomp filter, and io_uring has been the kernel's most
/// frequent source of privilege escalations reachable by an unprivileged user, the last
/// line between a query user and the host. The plan's filter now refuses it (`EPERM`)
/// whatever `--plan-deny-unix-sockets` says, as container runtimes' default profiles do.
#[test]
#[cfg(target_arch = "x86_64")]
fn a_plan_query_gets_no_io_uring() {
    require_root!();
    let (fr, _proc) = host();
    let code = r#"
        my $params = "\0" x 120;
        my $fd = syscall(425, 8, $params);
        print "uring=" . ($fd >= 0 ? "MADE" : "$!");
    "#;
    let (exit, lines) = plan_perl(&fr, "uring", code);
    assert!(
        lines.contains("out=uring=Operation not permitted err="),
        "{lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}
