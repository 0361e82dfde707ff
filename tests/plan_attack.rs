//! Attacks on `serve`'s read-only `package_plan` (docs/fleet.md, "It writes nothing to the
//! host"): a hostile package whose queries try to leave the read-only host root, each run
//! against an in-process `serve` on loopback over a throwaway root, with every file of that
//! root held byte for byte and markers outside it checked.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use skyhook::process::Cancel;
use skyhook::remote::Client;

use crate::util::{FakeRoot, tree};

use crate::fleet::{PLAN_TOKEN, RUN_TOKEN, start_serve, tokens_file};

/// A `package_plan` start of package `evil` 1.0.0 whose one apply step is `script`.
fn plan_body(id: &str, script: &str) -> Value {
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
fn perl_query(code: &str) -> String {
    format!(
        "let r = query([\"perl\", \"-e\", {code:?}]);\nprint(\"code=\" + r.code + \" out=\" + r.stdout + \" err=\" + r.stderr);\n"
    )
}

/// Plan `body` on a fresh `serve` over `root`: the exit event and the line events' text.
fn plan(root: &Path, body: &Value) -> (Value, String) {
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = start_serve(root, &tokens).await;
        let client = Client::new(&url, PLAN_TOKEN).unwrap();
        let mut lines = String::new();
        let exit = client
            .execute(body, &Cancel::new(), &mut |e| {
                if let Some(t) = e.get("line").and_then(Value::as_str) {
                    lines.push_str(t);
                    lines.push('\n');
                }
            })
            .await
            .unwrap();
        (exit, lines)
    })
}

/// A throwaway host root with `perl`, `unshare`, `nsenter`, `mount`, `chroot` (and the
/// template's tools) and a `/dev/null` device.
fn host() -> FakeRoot {
    let fr = FakeRoot::with_tools(&["perl", "unshare", "nsenter", "mount", "chroot"]);
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
fn pids_of(argv: &[&str]) -> Vec<i32> {
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
fn exits_within(pid: i32, ms: i32) -> bool {
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
    // Killed processes are awaited (their pidfd turns readable), 5 s at most each.
    let left: Vec<i32> = pids_of(&argv)
        .into_iter()
        .filter(|&p| !exits_within(p, 5000))
        .collect();
    for p in &left {
        // the test's own cleanup of what the plan left behind
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), nix::sys::signal::SIGKILL);
    }
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
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
            let (status, v) = client
                .call(
                    hyper::Method::POST,
                    "/v1/executions",
                    Some(b.to_string().into_bytes()),
                )
                .await
                .unwrap();
            assert_eq!(status, 400, "{path} ({why}): {v}");
        }
        for key in ["../x", "..", "a/b", ".hidden"] {
            let mut b = plan_body("bad", "1");
            b["package"]["configmaps"][key] = "x".into();
            let (status, v) = client
                .call(
                    hyper::Method::POST,
                    "/v1/executions",
                    Some(b.to_string().into_bytes()),
                )
                .await
                .unwrap();
            assert_eq!(status, 400, "configMap {key}: {v}");
        }
        let (a, b) = (plan_body("p-a", &script), plan_body("p-b", &script));
        let mut la = String::new();
        let mut lb = String::new();
        let (ca, cb) = (Cancel::new(), Cancel::new());
        let mut on_a = |e: &Value| {
            if let Some(t) = e.get("line").and_then(Value::as_str) {
                la.push_str(t);
                la.push('\n');
            }
        };
        let mut on_b = |e: &Value| {
            if let Some(t) = e.get("line").and_then(Value::as_str) {
                lb.push_str(t);
                lb.push('\n');
            }
        };
        let (ea, eb) = tokio::join!(
            client.execute(&a, &ca, &mut on_a),
            client.execute(&b, &cb, &mut on_b)
        );
        for (exit, lines) in [(ea.unwrap(), &la), (eb.unwrap(), &lb)] {
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
    let left: Vec<i32> = pids_of(&["sleep", "3600.0419"])
        .into_iter()
        .filter(|&p| !exits_within(p, 5000))
        .collect();
    for p in &left {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), nix::sys::signal::SIGKILL);
    }
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = start_serve(fr.root(), &tokens).await;
        let run = Client::new(&url, RUN_TOKEN).unwrap();
        let plan = Client::new(&url, PLAN_TOKEN).unwrap();
        let exit = run
            .execute(
                &json!({"id": "r1", "kind": "sh", "command": "echo hi"}),
                &Cancel::new(),
                &mut |_| {},
            )
            .await
            .unwrap();
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

/// KNOWN HOLE (docs/fleet.md, "Not done yet"): a query runs as root in the server's PID
/// namespace, so it may signal the server itself (its parent here), and with `hostPID` any
/// host process; a plan token can so stop the node's `serve`. Probed with signal 0 only.
/// Closing it needs a PID namespace or a seccomp filter on the plan's commands.
#[test]
#[ignore = "known hole: a plan's query can signal the server (docs/fleet.md, Not done yet)"]
fn known_hole_a_plan_query_can_signal_the_server() {
    require_root!();
    let fr = host();
    let (exit, lines) = plan(
        fr.root(),
        &plan_body(
            "signal",
            &perl_query("print kill(0, getppid()), \" \", getppid();"),
        ),
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
    assert!(
        lines.contains("out=0 "),
        "a plan's query may signal the server (kill(0, ppid) = 1): {lines}"
    );
}
