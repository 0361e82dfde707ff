//! [`enter_read_only`]: what a command the plan's thread forks can and cannot do.

use std::process::Command;

use super::enter_read_only;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `sh -c SCRIPT` forked from this thread: its exit code.
fn sh(script: &str) -> i32 {
    Command::new("/bin/sh")
        .args(["-c", script])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .code()
        .unwrap_or(-1)
}

/// Inside the plan's namespace a command can neither write a file, nor remount the root
/// writable (no CAP_SYS_ADMIN), nor write through a device node of the root (nodev); it can
/// still write to /dev/null. Outside it, the same root stays writable.
#[test]
fn commands_of_the_plan_cannot_write_remount_or_use_devices() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    std::fs::create_dir_all(root.join("dev")).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    let mk = |name: &str, minor: u64| {
        nix::sys::stat::mknod(
            &root.join("dev").join(name),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, minor),
        )
        .unwrap();
    };
    mk("null", 3);
    mk("fake-disk", 5); // /dev/zero's numbers: any write succeeds where devices open
    let at = d.path().join("host");
    std::fs::create_dir(&at).unwrap();
    let (r, a) = (root.clone(), at.clone());
    let codes = std::thread::spawn(move || {
        enter_read_only(&r, &a, None).unwrap();
        let p = a.display();
        (
            sh(&format!("echo x > {p}/etc/new")),
            sh(&format!(
                "mount -o remount,rw,bind {p} && echo x > {p}/etc/new"
            )),
            sh(&format!("echo x > {p}/dev/fake-disk")),
            sh(&format!("echo x > {p}/dev/null")),
        )
    })
    .join()
    .unwrap();
    assert_ne!(codes.0, 0, "a write to the read-only root succeeded");
    assert_ne!(codes.1, 0, "a command remounted the root writable");
    assert_ne!(
        codes.2, 0,
        "a command wrote through a device node of the root"
    );
    assert_eq!(codes.3, 0, "/dev/null is the server's");
    assert!(!root.join("etc/new").exists());
    // this thread's namespace: untouched, the root writable, the mount point empty
    assert_eq!(sh(&format!("echo x > {}/etc/new", root.display())), 0);
    assert_eq!(std::fs::read_dir(&at).unwrap().count(), 0);
}

/// A command of the plan keeps only the capabilities a read needs (`CapEff` and `CapBnd`:
/// chown, dac_override, fowner, fsetid, kill, audit_write),
/// so it can neither `chroot` (out of the read-only root), `unshare -m`, nor `nsenter` the
/// host's namespaces; and every other mount of the plan's namespace is read-only too (the
/// server's own temporary directory here), should a command reach it.
#[test]
fn commands_of_the_plan_keep_only_read_capabilities_and_no_mount_is_writable() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let at = d.path().join("host");
    std::fs::create_dir(&at).unwrap();
    let (r, a, o) = (root.clone(), at.clone(), outside.path().to_path_buf());
    let (caps, codes) = std::thread::spawn(move || {
        enter_read_only(&r, &a, None).unwrap();
        let out = Command::new("/bin/sh")
            .args(["-c", "grep -E '^Cap(Eff|Bnd)' /proc/self/status"])
            .output()
            .unwrap();
        (
            String::from_utf8(out.stdout).unwrap(),
            (
                sh(&format!("echo x > {}/new", o.display())),
                sh(&format!("chroot {} /bin/true", a.display())),
                sh("unshare -m true"),
                sh("nsenter -t 1 -m true"),
            ),
        )
    })
    .join()
    .unwrap();
    assert_eq!(
        caps,
        "CapEff:\t000000002000003b\nCapBnd:\t000000002000003b\n"
    );
    assert_ne!(
        codes.0, 0,
        "a command wrote to the server's temporary directory"
    );
    assert_ne!(codes.1, 0, "a command could chroot");
    assert_ne!(codes.2, 0, "a command could unshare a mount namespace");
    assert_ne!(codes.3, 0, "a command could enter pid 1's mount namespace");
    assert!(!outside.path().join("new").exists());
}

/// A `plan` token's start is checked on the parsed `kind`, exactly: case variants, a
/// trailing space, a duplicate `kind` key (either order), a `kind` nested elsewhere, an
/// array or trailing bytes are all refused (403); the same kind spelled with a JSON escape
/// is `package_plan` and parses as one.
#[test]
fn a_plan_token_starts_only_an_exact_package_plan() {
    for body in [
        r#"{"id":"x","kind":"Package_Plan","command":"touch /p"}"#,
        r#"{"id":"x","kind":"PACKAGE_PLAN","command":"touch /p"}"#,
        r#"{"id":"x","kind":"package_plan ","command":"touch /p"}"#,
        r#"{"id":"x","kind":"package_plan","kind":"sh","command":"touch /p"}"#,
        r#"{"id":"x","kind":"sh","kind":"package_plan","command":"touch /p"}"#,
        r#"{"id":"x","kind":"sh","package":{"kind":"package_plan"},"command":"touch /p"}"#,
        r#"[{"kind":"package_plan"}]"#,
        r#"{"kind":"package_plan"} {"kind":"sh","command":"touch /p"}"#,
        r#"{"id":"x","Kind":"package_plan","kind":"sh","command":"touch /p"}"#,
    ] {
        let r = super::scope_check(true, body.as_bytes());
        assert_eq!(r.map_err(|e| e.status), Err(403), "{body}");
        // a run token passes the scope check; the parser decides
        assert!(super::scope_check(false, body.as_bytes()).is_ok());
    }
    let escaped = r#"{"id":"x","kind":"package\u005fplan","package":{"config":{}}}"#;
    assert!(super::scope_check(true, escaped.as_bytes()).is_ok());
    assert!(super::parse_plan(escaped.as_bytes()).unwrap().is_some());
}

/// Bodies shaped to exhaust the parser or the unpacking: a config nested 10,000 deep (400,
/// the parser's depth limit), 2,001 files (413), 64 small files of 64 KiB base64 each over
/// the 3 MiB cap (413), a path 65 components deep and a `..` hidden mid-path (400).
#[test]
fn package_bodies_that_exhaust_are_refused_before_unpacking() {
    let deep = format!(
        r#"{{"id":"x","kind":"package_plan","package":{{"config":{{"a":{}1{}}}}}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    assert_eq!(super::parse_plan(deep.as_bytes()).unwrap_err().status, 400);
    let body = |files: serde_json::Value| {
        serde_json::json!({"id": "x", "kind": "package_plan",
                           "package": {"config": {}, "files": files}})
        .to_string()
    };
    let many: serde_json::Map<String, serde_json::Value> = (0..=super::MAX_PACKAGE_FILES)
        .map(|i| (format!("skyhook_dir/f{i}"), "x".into()))
        .collect();
    let r = super::parse_plan(body(many.into()).as_bytes()).unwrap_err();
    assert_eq!(r.status, 413, "{:?}", r.body);
    use base64::Engine as _;
    let chunk = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 64 << 10]);
    let big: serde_json::Map<String, serde_json::Value> = (0..49)
        .map(|i| {
            (
                format!("root_dir/b{i}"),
                serde_json::json!({"base64": chunk}),
            )
        })
        .collect();
    let r = super::parse_plan(body(big.into()).as_bytes()).unwrap_err();
    assert_eq!(r.status, 413, "{:?}", r.body);
    let deep_path = format!("skyhook_dir/{}f", "d/".repeat(64));
    for p in [
        deep_path.as_str(),
        "skyhook_dir/a/../../../etc/x",
        "root_dir/./../x",
    ] {
        let r = super::parse_plan(body(serde_json::json!({p: "x"})).as_bytes()).unwrap_err();
        assert_eq!(r.status, 400, "{p}: {:?}", r.body);
    }
}

/// A package of `steps` apply steps, each a pure Rhai loop of `secs` seconds that first
/// prints `step N started`: no command, so only the plan's cancel token can end one early.
fn slow_package(steps: usize, secs: f64) -> serde_json::Value {
    let mut apply = Vec::new();
    let mut files = serde_json::Map::new();
    files.insert("skyhook_dir/check.sh".into(), "#!/bin/sh\nexit 0\n".into());
    for i in 1..=steps {
        apply.push(
            serde_json::json!({"name": format!("s{i}"), "path": format!("s{i}.rhai"),
            "arguments": [], "returncodes": [0], "on_host": true, "idempotence": false,
            "upgrade_step": false}),
        );
        files.insert(
            format!("skyhook_dir/s{i}.rhai"),
            format!(
                "print(\"step {i} started\");\nlet t = timestamp();\nwhile t.elapsed < {secs:.1} {{ }}\n"
            )
            .into(),
        );
    }
    serde_json::json!({"id": "slow", "kind": "package_plan",
        "package": {"config": {"schema_version": "v1", "root_dir": "/",
            "expected_config_files": [], "package_name": "slow", "package_version": "1.0.0",
            "modes": {"apply": apply, "apply-check": [{"name": "c", "path": "check.sh",
                "arguments": [], "returncodes": [0], "on_host": true, "idempotence": false,
                "upgrade_step": false}]}}, "files": files}})
}

/// A plan cancelled (a remote cancel, or its `timeout_s`) while its first step runs stops
/// at once: the running script is interrupted, no later step starts, no event follows the
/// cancel, and the plan's thread (which holds its place under `--max-plans`) ends within a
/// fraction of the steps' 12 s.
#[test]
fn a_cancelled_plan_starts_no_further_step_and_ends_at_once() {
    use crate::process::{Cancel, CancelReason};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let reasons = [
        CancelReason::Remote("preview".into()),
        CancelReason::Deadline {
            what: "timeout_s".into(),
            secs: 1.0,
        },
    ];
    for reason in reasons {
        let body = slow_package(6, 2.0).to_string();
        let limits = super::super::plan_limits::PlanLimits::default();
        let mut job = super::parse_plan(body.as_bytes()).unwrap().unwrap().job;
        job.bound(&limits, limits.admit().unwrap());
        let root = tempfile::tempdir().unwrap();
        // No operations limit: the steps run until their clock, or the cancel.
        let engine = Arc::new(crate::script::ScriptEngine::new(crate::script::Limits {
            max_operations: u64::MAX,
            ..crate::script::Limits::default()
        }));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let tx = Mutex::new(tx);
        // Disconnected once the plan's threads dropped their copies: they ended.
        let emit: super::Emit = Arc::new(move |b| {
            let _ = tx.lock().unwrap().send(b.render(0));
        });
        let cancel = Cancel::new();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (c, r) = (cancel.clone(), root.path().to_path_buf());
        let plan = std::thread::spawn(move || rt.block_on(super::run(job, r, engine, emit, c)));
        let mut seen = Vec::new();
        while !seen.iter().any(|l: &String| l.contains("step 1 started")) {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(l) => seen.push(l),
                Err(e) => panic!("{e}: no step started: {seen:#?} {:#?}", plan.join()),
            }
        }
        cancel.abort(reason.clone());
        let t0 = Instant::now();
        let (exit, _) = plan.join().unwrap();
        assert_eq!(exit, serde_json::json!({"error": "cancelled"}), "{reason}");
        let mut after = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(l) => after.push(l),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(e) => panic!("the plan's thread still runs 60 s after the cancel: {e}"),
            }
        }
        let took = t0.elapsed();
        eprintln!("{reason}: the plan's thread ended {took:?} after the cancel");
        assert!(
            !after.iter().any(|l| l.contains("started")),
            "{reason}: a step started after the cancel: {after:#?}"
        );
        assert!(
            took < Duration::from_secs(3),
            "{reason}: the plan ran {took:?} after the cancel (its steps: 12 s)"
        );
    }
}

/// Issue 32: a failed mode stops its package's later modes, as the agent runs no mode after
/// a failed one: `apply`'s step fails, so `apply-check`'s script never runs; the stream, the
/// mode's entry in `plans`, `rendered` and the exit's error say it was not planned and why.
#[test]
fn a_failed_mode_stops_the_later_modes_of_its_package() {
    use std::sync::{Arc, Mutex};
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let step = |name: &str| {
        serde_json::json!({"name": name, "path": format!("{name}.rhai"), "arguments": [],
            "returncodes": [0], "on_host": true, "idempotence": false, "upgrade_step": false})
    };
    let body = serde_json::json!({"id": "modes", "kind": "package_plan",
        "modes": ["apply", "apply-check"],
        "package": {"config": {"schema_version": "v1", "root_dir": "/",
            "expected_config_files": [], "package_name": "m", "package_version": "1.0.0",
            "modes": {"apply": [step("a")], "apply-check": [step("c")]}},
            "files": {"skyhook_dir/a.rhai": "fail(\"apply is broken\");\n",
                      "skyhook_dir/c.rhai": "print(\"the check was planned\");\n"}}});
    let limits = super::super::plan_limits::PlanLimits::default();
    let mut job = super::parse_plan(body.to_string().as_bytes())
        .unwrap()
        .unwrap()
        .job;
    job.bound(&limits, limits.admit().unwrap());
    let root = tempfile::tempdir().unwrap();
    let engine = Arc::new(crate::script::ScriptEngine::new(
        crate::script::Limits::default(),
    ));
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l2 = lines.clone();
    let emit: super::Emit = Arc::new(move |b| {
        if let super::Body::Line { line, .. } = b {
            l2.lock().unwrap().push(line);
        }
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (exit, extra) = rt.block_on(super::run(
        job,
        root.path().to_path_buf(),
        engine,
        emit,
        crate::process::Cancel::new(),
    ));
    // the exit's extra fields as one JSON object, as an exit event carries them
    let mut members = String::from("{\"_\":0");
    extra.write_members(&mut members);
    members.push('}');
    let extra: serde_json::Value = serde_json::from_str(&members).unwrap();
    let lines = lines.lock().unwrap().join("\n");
    assert!(!lines.contains("the check was planned"), "{lines}");
    assert!(
        lines.contains("package m 1.0.0 mode apply-check: not planned: mode apply failed"),
        "{lines}"
    );
    assert_eq!(
        exit,
        serde_json::json!({"code": 1, "error": "mode apply: a step failed; \
                                                mode apply-check: not planned: mode apply failed"})
    );
    assert_eq!(
        extra["plans"][1],
        serde_json::json!({"package_mode": "apply-check", "ok": false,
            "error": "not planned: mode apply failed",
            "errors": [{"file": null, "line": null, "column": null,
                        "message": "not planned: mode apply failed"}],
            "not_planned": "mode apply failed", "exit_code": 1})
    );
    // a `failure` of docs/plan.schema.json
    let schema: serde_json::Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/plan.schema.json"
    )))
    .unwrap();
    let failure = serde_json::json!({"$ref": "#/$defs/failure", "$defs": schema["$defs"]});
    let failure = jsonschema::draft202012::options().build(&failure).unwrap();
    assert!(
        failure.is_valid(&extra["plans"][1]),
        "{:#}",
        extra["plans"][1]
    );
    let rendered = extra["rendered"].as_str().unwrap();
    assert!(
        rendered.ends_with("--- mode apply-check\nnot planned: mode apply failed\n"),
        "{rendered}"
    );
}
