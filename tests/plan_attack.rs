//! Attacks on `serve`'s read-only `package_plan` (docs/fleet.md, "It writes nothing to the
//! host"): a hostile package whose queries try to leave the read-only host root, each run
//! against an in-process `serve` on loopback over a throwaway root, with every file of that
//! root held byte for byte and markers outside it checked.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use skyhook::process::Cancel;
use skyhook::remote::Client;

use crate::util::{FakeRoot, tree};

use crate::fleet::{PLAN_TOKEN, RUN_TOKEN, start_serve, start_serve_with, tokens_file};

/// Every event of `body` planned by `client`: the line events' text and the plan events,
/// and the exit event.
pub(crate) async fn plan_events(client: &Client, body: &Value) -> (Value, String, Vec<Value>) {
    let (mut lines, mut plans) = (String::new(), Vec::new());
    let exit = client
        .execute(body, &Cancel::new(), &mut |e| {
            if let Some(t) = e.get("line").and_then(Value::as_str) {
                lines.push_str(t);
                lines.push('\n');
            }
            if let Some(p) = e.get("plan") {
                plans.push(p.clone());
            }
        })
        .await
        .unwrap();
    (exit, lines, plans)
}

/// `body` POSTed to `/v1/executions` by `client` (an execution started, or refused): the
/// status and the JSON answer.
pub(crate) async fn post_start(client: &Client, body: &Value) -> (u16, Value) {
    client
        .call(
            hyper::Method::POST,
            "/v1/executions",
            Some(body.to_string().into_bytes()),
        )
        .await
        .unwrap()
}

/// Step execution `r1`, `sh` running `echo hi`, started by `client` (a `run` engine's): its
/// exit event.
pub(crate) async fn run_echo_hi(client: &Client) -> Value {
    client
        .execute(
            &json!({"id": "r1", "kind": "sh", "command": "echo hi"}),
            &Cancel::new(),
            &mut |_| {},
        )
        .await
        .unwrap()
}

/// The line events of `body` planned by `client`, and its exit event.
pub(crate) async fn plan_on(client: &Client, body: &Value) -> (Value, String) {
    let (exit, lines, _) = plan_events(client, body).await;
    (exit, lines)
}

pub(crate) fn current_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A step of config.json named `name` running `skyhook_dir/<name>.rhai`.
pub(crate) fn plan_step(name: &str) -> Value {
    json!({"name": name, "path": format!("{name}.rhai"), "arguments": [], "returncodes": [0],
           "on_host": true, "idempotence": false, "upgrade_step": false})
}

/// A `package_plan` start of package `evil` 1.0.0 whose one apply step is `script`.
pub(crate) fn plan_body(id: &str, script: &str) -> Value {
    json!({"id": id, "kind": "package_plan", "timeout_s": 60,
           "package": {
             "config": {"schema_version": "v1", "root_dir": "/", "expected_config_files": [],
                        "package_name": "evil", "package_version": "1.0.0",
                        "modes": {"apply": [{"name": "evil", "path": "evil.rhai",
                            "arguments": [], "returncodes": [0], "on_host": true,
                            "idempotence": false, "upgrade_step": false}],
                                  "apply-check": [{"name": "evil_check", "path": "check.sh",
                            "arguments": [], "returncodes": [0], "on_host": true,
                            "idempotence": false, "upgrade_step": false}]}},
             "files": {"skyhook_dir/evil.rhai": script,
                       "skyhook_dir/check.sh": "#!/bin/sh\nexit 0\n"}}})
}

/// Rhai that runs `perl -e CODE` as a query and prints what it said (and its code).
pub(crate) fn perl_query(code: &str) -> String {
    format!(
        "let r = query([\"perl\", \"-e\", {code:?}]);\nprint(\"code=\" + r.code + \" out=\" + r.stdout + \" err=\" + r.stderr);\n"
    )
}

/// Plan `body` on a fresh `serve` over `root`: the exit event and the line events' text.
fn plan(root: &Path, body: &Value) -> (Value, String) {
    plan_with(skyhook::serve::Config::new(root), body)
}

/// [`plan`] on a fresh `serve` of configuration `cfg`, with a plan token.
pub(crate) fn plan_with(cfg: skyhook::serve::Config, body: &Value) -> (Value, String) {
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    current_rt().block_on(async {
        let client = Client::new(&start_serve_with(cfg, &tokens).await, PLAN_TOKEN).unwrap();
        plan_on(&client, body).await
    })
}

/// A throwaway host root with `perl`, `unshare`, `nsenter`, `mount`, `chroot` (and the
/// template's tools) and a `/dev/null` device.
fn host() -> FakeRoot {
    host_with(&["perl", "unshare", "nsenter", "mount", "chroot"])
}

/// A throwaway host root with `tools` (and the template's) and a `/dev/null` device.
pub(crate) fn host_with(tools: &[&str]) -> FakeRoot {
    let fr = FakeRoot::with_tools(tools);
    let null = fr.host("/dev/null");
    std::fs::create_dir_all(null.parent().unwrap()).unwrap();
    nix::sys::stat::mknod(
        &null,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
    fr
}

/// A marker path outside the host root, on the server's own (writable) filesystem.
fn outside() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::Builder::new()
        .prefix("plan-attack-outside-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let m = d.path().join("owned");
    (d, m)
}

/// The classic chroot escape from a query: `chroot("tmp")` without a `chdir`, `..` up past
/// the old root, `chroot(".")`: the command is then at the plan namespace's `/`, the
/// server's own filesystem, writable. It must stay inside the read-only host root.
#[test]
fn a_plan_query_cannot_chroot_out_of_the_read_only_root() {
    require_root!();
    let fr = host();
    let (_keep, marker) = outside();
    let before = tree(fr.root());
    let code = format!(
        "chroot(\"tmp\") or die \"chroot: $!\\n\"; chdir(\"..\") for 1..64; \
         chroot(\".\") or die \"chroot2: $!\\n\"; \
         if (open(my $s, \"<\", \"/proc/self/status\")) {{ print grep {{ /^Cap(Eff|Bnd)/ }} <$s>; }} \
         open(my $f, \">\", \"{}\") or die \"open: $!\\n\"; print $f \"owned\"; close $f;",
        marker.display()
    );
    let (exit, lines) = plan(fr.root(), &plan_body("escape", &perl_query(&code)));
    eprintln!("{lines}");
    assert!(
        !marker.exists(),
        "a plan's query escaped the chroot and wrote {}: {lines}",
        marker.display()
    );
    assert!(
        lines.contains("chroot: Operation not permitted"),
        "{lines}\n{exit:#}"
    );
    assert_eq!(tree(fr.root()), before);
}

/// Pids of processes whose command line is exactly `argv` (read from /proc, bounded).
pub(crate) fn pids_of(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// True when process `pid` ends (or is gone) within `ms` milliseconds (its pidfd polled).
pub(crate) fn exits_within(pid: i32, ms: i32) -> bool {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: pidfd_open with a pid and no flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return true;
    }
    // SAFETY: a new fd owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

/// The processes of command line `argv` still running after 5 s each (killed processes are
/// awaited: their pidfd turns readable); each is then SIGKILLed, the test's own cleanup of
/// what a plan left behind.
pub(crate) fn left_running(argv: &[&str]) -> Vec<i32> {
    let left: Vec<i32> = pids_of(argv)
        .into_iter()
        .filter(|&p| !exits_within(p, 5000))
        .collect();
    for p in &left {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), nix::sys::signal::SIGKILL);
    }
    left
}

/// A plan whose query never ends (`sleep 3600`) is ended by `timeout_s`: the exit says
/// `timeout` at once, and nothing the plan started outlives it (its command is killed, so
/// the plan's thread ends too rather than holding a thread and a process per request).
#[test]
fn a_plan_ended_by_its_timeout_leaves_no_command_running() {
    require_root!();
    let fr = host();
    let before = tree(fr.root());
    let argv = ["sleep", "3600.0417"];
    let mut body = plan_body(
        "forever",
        "query([\"sleep\", \"3600.0417\"]);\nprint(\"the query returned\");\n",
    );
    body["timeout_s"] = json!(1);
    let (exit, lines) = plan(fr.root(), &body);
    assert_eq!(exit["exit"], json!({"error": "timeout"}), "{exit:#}");
    let left = left_running(&argv);
    assert_eq!(
        left,
        Vec::<i32>::new(),
        "the plan's query outlived its timeout: {lines}"
    );
    assert_eq!(tree(fr.root()), before);
}

/// Every attack of a hostile package at once, in two plans running together on one server,
/// each trying to write into the other's package directory: the host root is held byte for
/// byte (content, mode, owner, mtime), nothing appears outside it, and each plan still
/// reports its plan. Bad package paths are refused (400) before anything is unpacked.
#[test]
fn a_hostile_package_changes_no_host_file_byte_for_byte() {
    require_root!();
    let fr = host();
    fr.write("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n");
    let (_keep, marker) = outside();
    let before = tree(fr.root());
    let tmp = std::env::temp_dir();
    let escape = format!(
        "chroot(\"tmp\") or die \"chroot: $!\\n\"; chdir(\"..\") for 1..64; chroot(\".\") or die; \
         opendir(my $t, \"{0}\") or die; for my $n (readdir $t) {{ \
           next unless $n =~ /^skyhook-package-plan-/; \
           if (open(my $f, \">\", \"{0}/$n/package/skyhook_dir/evil.rhai\")) {{ \
             print $f \"fs::write(\\\"/etc/x\\\", \\\"x\\\");\"; }} }} \
         open(my $f, \">\", \"{1}\") or die; print $f \"owned\";",
        tmp.display(),
        marker.display()
    );
    let attacks: Vec<Vec<String>> = vec![
        vec!["sh".into(), "-c".into(), "echo owned > /etc/passwd".into()],
        vec!["sh".into(), "-c".into(), "echo owned > /etc/new".into()],
        vec!["sh".into(), "-c".into(), "echo ok > /dev/null".into()],
        vec![
            "sh".into(),
            "-c".into(),
            "mount -o remount,rw / && echo owned > /etc/new".into(),
        ],
        vec![
            "unshare".into(),
            "-m".into(),
            "sh".into(),
            "-c".into(),
            "mount -o remount,rw / && echo owned > /etc/new".into(),
        ],
        vec![
            "nsenter".into(),
            "-t".into(),
            "1".into(),
            "-m".into(),
            "-p".into(),
            "true".into(),
        ],
        vec!["chroot".into(), "/tmp".into(), "/bin/true".into()],
        vec!["perl".into(), "-e".into(), escape],
        vec![
            "sh".into(),
            "-c".into(),
            "sleep 3600.0419 >/dev/null 2>&1 &".into(),
        ],
    ];
    let mut script = String::new();
    for a in &attacks {
        script.push_str(&format!(
            "try {{ let r = query({}); print(\"code=\" + r.code + \" stderr=\" + r.stderr); }} catch (e) {{ print(\"error=\" + e); }}\n",
            serde_json::to_string(a).unwrap()
        ));
    }
    script.push_str("fs::write(\"/etc/planned.conf\", \"x\\n\");\n");
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    current_rt().block_on(async {
        let url = start_serve(fr.root(), &tokens).await;
        let client = Client::new(&url, PLAN_TOKEN).unwrap();
        // bad package paths: refused, nothing unpacked
        for (path, why) in [
            ("skyhook_dir/../../etc/x", "parent"),
            ("/etc/x", "absolute"),
            ("root_dir/../skyhook_dir/x", "parent"),
            ("etc/x", "outside skyhook_dir/root_dir"),
            ("skyhook_dir", "no file name"),
        ] {
            let mut b = plan_body("bad", "1");
            b["package"]["files"][path] = "x".into();
            let (status, v) = post_start(&client, &b).await;
            assert_eq!(status, 400, "{path} ({why}): {v}");
        }
        for key in ["../x", "..", "a/b", ".hidden"] {
            let mut b = plan_body("bad", "1");
            b["package"]["configmaps"][key] = "x".into();
            let (status, v) = post_start(&client, &b).await;
            assert_eq!(status, 400, "configMap {key}: {v}");
        }
        let (a, b) = (plan_body("p-a", &script), plan_body("p-b", &script));
        let (pa, pb) = tokio::join!(plan_on(&client, &a), plan_on(&client, &b));
        for (exit, lines) in [pa, pb] {
            eprintln!("{lines}");
            assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
            let codes: Vec<&str> = lines
                .lines()
                .filter(|l| l.starts_with("code=") || l.starts_with("error="))
                .collect();
            // only the write to /dev/null and the background sleep's shell succeed
            assert_eq!(codes.len(), attacks.len(), "{lines}");
            for (i, c) in codes.iter().enumerate() {
                let ok = c.split(' ').next() == Some("code=0");
                assert_eq!(
                    ok,
                    i == 2 || i == 8,
                    "attack {i} {:?}: {c}\n{lines}",
                    attacks[i]
                );
            }
            let rendered = exit["rendered"].as_str().unwrap();
            assert!(rendered.contains("/etc/planned.conf"), "{rendered}");
            assert!(!rendered.contains("/etc/x"), "{rendered}");
        }
    });
    assert!(!marker.exists(), "a query wrote outside the host root");
    let left = left_running(&["sleep", "3600.0419"]);
    assert_eq!(
        left,
        Vec::<i32>::new(),
        "a query's background child outlived the plan"
    );
    assert_eq!(tree(fr.root()), before);
}

/// A `plan` token reaches no execution of another engine: the status, events and cancel of
/// a `run` engine's step are 404 to it (as an unknown id), and the step's exit stands.
#[test]
fn a_plan_token_cannot_see_or_cancel_another_engines_execution() {
    require_root!();
    let fr = FakeRoot::new();
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    current_rt().block_on(async {
        let url = start_serve(fr.root(), &tokens).await;
        let run = Client::new(&url, RUN_TOKEN).unwrap();
        let plan = Client::new(&url, PLAN_TOKEN).unwrap();
        let exit = run_echo_hi(&run).await;
        assert_eq!(exit["exit"], json!({"code": 0}));
        for (m, path, body) in [
            (hyper::Method::GET, "/v1/executions/r1", None),
            (hyper::Method::GET, "/v1/executions/r1/events?after=0", None),
            (
                hyper::Method::POST,
                "/v1/executions/r1/cancel",
                Some(b"{}".to_vec()),
            ),
        ] {
            let (status, v) = plan.call(m, path, body).await.unwrap();
            assert_eq!(status, 404, "{path}: {v}");
        }
        let (status, v) = run
            .call(hyper::Method::GET, "/v1/executions/r1", None)
            .await
            .unwrap();
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["exit"], json!({"code": 0}), "{v}");
    });
}

/// A query runs in the plan's own PID namespace: it cannot signal the server (here the test
/// process, whose pid it is given: no such process) nor, under `hostPID`, any host process,
/// and its parent (the server) is outside its namespace (`getppid()` is 0). Pid 1 is the
/// plan's own init, which runs as root: the query user may not signal it. Probed with
/// signal 0 only.
#[test]
fn a_plan_query_cannot_signal_the_server() {
    require_root!();
    let fr = host();
    let server = std::process::id();
    let (exit, lines) = plan(
        fr.root(),
        &plan_body(
            "signal",
            &perl_query(&format!(
                "for my $p ({server}, 0, 1) {{ print $p == 0 ? getppid() : kill(0, $p) ? \"signalled\" : \"$!\", \";\" }}"
            )),
        ),
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
    // kill(0, server) fails (no such process in the namespace), the parent is outside it,
    // and pid 1 is the plan's own init (root's).
    assert!(
        lines.contains("code=0 out=No such process;0;Operation not permitted; "),
        "a plan's query may signal the server (kill(0, {server}) = 1): {lines}"
    );
}

/// A query has no network but its own loopback: a TCP listener of the server's network
/// namespace (here the test's, on 127.0.0.1) refuses it, and only `lo` is up.
#[test]
fn a_plan_query_cannot_reach_the_servers_network() {
    require_root!();
    let fr = host();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let code = format!(
        "socket(my $s, 2, 1, 6) or die \"socket: $!\\n\"; \
         my $a = pack(\"S n C4 x8\", 2, {port}, 127, 0, 0, 1); \
         print connect($s, $a) ? \"connected\" : \"refused: $!\";",
    );
    let (exit, lines) = plan(fr.root(), &plan_body("net", &perl_query(&code)));
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
    assert!(
        lines.contains("code=0 out=refused: Connection refused"),
        "a plan's query reached the server's loopback listener on port {port}: {lines}"
    );
}

/// Each query runs under the plan's limits (`serve --plan-memory`, defaults here): its
/// address space and CPU time are capped, it may write no file (`RLIMIT_FSIZE` 0) and dump
/// no core, as its `/proc/self/limits` says.
#[test]
fn a_plan_query_runs_under_the_plans_rlimits() {
    require_root!();
    let fr = host();
    let script = "let r = query([\"sh\", \"-c\", \"ulimit -v; ulimit -t; ulimit -f; ulimit -c\"]);\nlet s = r.stdout;\ns.replace(\"\\n\", \",\");\nprint(\"limits=\" + s);\n";
    let (exit, lines) = plan(fr.root(), &plan_body("limits", script));
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
    // address space 4 GiB (in KiB), 60 s of CPU, no file size, no core
    assert!(
        lines.contains("limits=4194304,60,0,0,"),
        "a plan's query is not held to the plan's limits: {lines}"
    );
}

/// A fork bomb (bounded here: 1,000 children that sleep) is stopped by the plan's PID
/// namespace's `pid_max`: far fewer than 1,000 forks succeed, the plan still ends, and the
/// server keeps serving the next plan.
#[test]
fn a_fork_bomb_query_is_stopped_and_the_server_keeps_serving() {
    require_root!();
    let fr = host();
    let code = "my $n = 0; for (1..1000) { my $p = fork(); last unless defined $p; \
                if ($p == 0) { sleep 20; exit 0 } $n++ } print \"forked=$n\";";
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    current_rt().block_on(async {
        let url = start_serve(fr.root(), &tokens).await;
        let client = Client::new(&url, PLAN_TOKEN).unwrap();
        let (exit, lines) = plan_on(&client, &plan_body("bomb", &perl_query(code))).await;
        assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
        let forked: usize = lines
            .split("forked=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no fork count: {lines}"));
        eprintln!("forked={forked}");
        assert!(
            forked < 600,
            "a plan's fork bomb made {forked} processes: {lines}"
        );
        let exit = client
            .execute(
                &plan_body("after", "print(\"still serving\");"),
                &Cancel::new(),
                &mut |_| {},
            )
            .await
            .unwrap();
        assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
    });
}

/// A memory hog query (1 GiB in one string) under `--plan-memory 256MiB` fails to allocate
/// instead of taking the node's memory, and the server keeps serving.
#[test]
fn a_memory_hog_query_is_stopped_and_the_server_keeps_serving() {
    require_root!();
    let fr = host();
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.sandbox.memory = 256 << 20;
    current_rt().block_on(async {
        let client = Client::new(&start_serve_with(cfg, &tokens).await, PLAN_TOKEN).unwrap();
        let code = "my $x = \"x\" x (1 << 30); print length($x);";
        let (exit, lines) = plan_on(&client, &plan_body("hog", &perl_query(code))).await;
        assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
        assert!(
            !lines.contains("out=1073741824") && !lines.contains("code=0 "),
            "a plan's query allocated 1 GiB: {lines}"
        );
        assert!(lines.contains("Out of memory"), "{lines}");
        let (exit, lines) =
            plan_on(&client, &plan_body("after", "print(\"still serving\");")).await;
        assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
        assert!(lines.contains("still serving"), "{lines}");
    });
}

/// Over `--max-plans` a plan start is refused with 429 (`too many plans running`, the cap,
/// `Retry-After`) and runs nothing; once the running plan ended, the next one is admitted.
#[test]
fn plans_over_the_cap_are_refused_with_429_until_one_ends() {
    require_root!();
    let fr = host();
    let fifo = fr.host("/fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.max_plans = 1;
    current_rt().block_on(async {
        let client = Client::new(&start_serve_with(cfg, &tokens).await, PLAN_TOKEN).unwrap();
        let a = plan_body(
            "a",
            "let r = query([\"cat\", \"/fifo\"]);\nprint(\"got=\" + r.stdout);\n",
        );
        let over = async {
            // The open returns once plan a's query has opened the FIFO: a is running.
            let f = tokio::task::spawn_blocking(move || std::fs::File::create(&fifo).unwrap())
                .await
                .unwrap();
            let (status, v) = post_start(&client, &plan_body("b", "print(\"b ran\");")).await;
            use std::io::Write as _;
            (&f).write_all(b"done\n").unwrap();
            drop(f);
            (status, v)
        };
        let ((exit, lines), (status, v)) = tokio::join!(plan_on(&client, &a), over);
        assert_eq!(
            (status, &v),
            (
                429,
                &json!({"error": "too many plans running", "max_plans": 1})
            ),
            "a plan over --max-plans 1 was not refused"
        );
        assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
        assert!(lines.contains("got=done"), "{lines}");
        let (exit, lines) = plan_on(&client, &plan_body("c", "print(\"c ran\");")).await;
        assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
        assert!(lines.contains("c ran"), "{lines}");
    });
}

/// A plan's script step is held to `--plan-script-timeout` (2 s here) even when the package
/// asks for an hour (`SKYHOOK_SCRIPT_TIMEOUT=3600`): a query that would run for an hour ends
/// the step at the server's deadline, and the plan reports the failure.
#[test]
fn a_plan_step_is_held_to_the_servers_script_timeout() {
    require_root!();
    let fr = host();
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.script_timeout = std::time::Duration::from_secs(2);
    let mut body = plan_body(
        "slow",
        "query([\"sleep\", \"3600.0423\"]);\nprint(\"the query returned\");\n",
    );
    body["env"] = json!({"SKYHOOK_SCRIPT_TIMEOUT": "3600"});
    current_rt().block_on(async {
        let client = Client::new(&start_serve_with(cfg, &tokens).await, PLAN_TOKEN).unwrap();
        let started = std::time::Instant::now();
        let (exit, lines) = plan_on(&client, &body).await;
        let took = started.elapsed();
        assert!(
            took < std::time::Duration::from_secs(30),
            "the plan ran {took:?} with a 2 s script timeout: {exit:#}"
        );
        assert_eq!(exit["exit"]["code"], json!(1), "{exit:#}");
        assert!(!lines.contains("the query returned"), "{lines}");
        let rendered = exit["rendered"].as_str().unwrap_or_default();
        assert!(
            rendered.contains("command sleep 3600.0423 timed out after 2.0s and was killed"),
            "{rendered}"
        );
    });
}

/// A `skyhook-agent serve` process over `root` (the binary: a child subreaper, as on a
/// node) with `extra` options, killed when dropped; its URL once it listens (10 s at most).
pub(crate) struct ServeBin(pub(crate) std::process::Child);

impl Drop for ServeBin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `skyhook-agent serve` over `root` on a free loopback port, with `extra` arguments: the
/// process (killed when dropped) and its URL.
pub(crate) fn serve_bin(root: &Path, tokens: &Path, extra: &[&str]) -> (ServeBin, String) {
    let (srv, url, _) = serve_bin_with(root, tokens, extra, |_| {});
    (srv, url)
}

/// [`serve_bin`] with its command made ready by `prepare` (a `pre_exec`, say): the process,
/// its URL and the lines of its standard error before the one saying where it listens.
pub(crate) fn serve_bin_with(
    root: &Path,
    tokens: &Path,
    extra: &[&str],
    prepare: impl FnOnce(&mut std::process::Command),
) -> (ServeBin, String, Vec<String>) {
    use std::io::BufRead as _;
    let mut cmd = std::process::Command::new(crate::util::AGENT);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(root)
        .arg("--tokens-file")
        .arg(tokens)
        .args(extra)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    prepare(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let err = child.stderr.take().unwrap();
    let srv = ServeBin(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut before = Vec::new();
    loop {
        let l = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("serve did not say where it listens");
        if let Some(rest) = l.split("listening on 127.0.0.1:").nth(1) {
            let port = rest.split_whitespace().next().unwrap();
            return (srv, format!("http://127.0.0.1:{port}"), before);
        }
        before.push(l);
    }
}

/// A query whose background child keeps its output open ends when the query does: the
/// child (adopted by the plan's init, not the server) gets the group's `SIGTERM` at once
/// rather than after the query's exit grace (5 s), and does not outlive the plan. Run on the
/// `serve` binary, a child subreaper as on a node (the in-process servers of these tests
/// are not, so they never take the shortcut this is about).
#[test]
fn a_querys_background_child_holding_its_output_is_ended_with_it() {
    require_root!();
    let fr = host();
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let (_srv, url) = serve_bin(fr.root(), &tokens, &["--plan-pids", "400"]);
    let body = plan_body(
        "bg",
        "let r = query([\"sh\", \"-c\", \"sleep 3600.0425 & echo started\"]);\nprint(\"code=\" + r.code + \" out=\" + r.stdout);\n",
    );
    let started = std::time::Instant::now();
    let (exit, lines) = current_rt().block_on(async {
        let client = Client::new(&url, PLAN_TOKEN).unwrap();
        plan_on(&client, &body).await
    });
    let took = started.elapsed();
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
    assert!(lines.contains("code=0 out=started"), "{lines}");
    let left = left_running(&["sleep", "3600.0425"]);
    assert_eq!(
        left,
        Vec::<i32>::new(),
        "the background child outlived the plan"
    );
    assert!(
        took < std::time::Duration::from_secs(3),
        "the plan waited {took:?} for its query's background child"
    );
}
