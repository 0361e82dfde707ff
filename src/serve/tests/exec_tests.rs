//! The service end to end in-process: starts, streams, cancels, restarts.

use std::collections::BTreeMap;

use super::*;
use crate::serve::secrets::Secrets;
use crate::serve::state::proc_stat;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn service(dir: &Path, f: impl FnOnce(&mut Config)) -> Arc<Service> {
    let mut cfg = Config::new(Path::new("/"));
    std::fs::create_dir_all(dir.join("secrets/db")).unwrap();
    std::fs::write(dir.join("secrets/db/pw"), "s3cr3t-value").unwrap();
    cfg.secrets = Secrets {
        dir: dir.join("secrets"),
        allow: vec!["db".into()],
    };
    cfg.state_dir = Some(dir.join("state"));
    f(&mut cfg);
    Service::with_audit(cfg, true, Arc::new(|_: &str| {})).unwrap()
}

/// Every line of a stream until it closes.
async fn collect(mut rx: mpsc::Receiver<Bytes>) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(b) = rx.recv().await {
        for l in String::from_utf8(b.to_vec()).unwrap().lines() {
            out.push(serde_json::from_str(l).unwrap());
        }
    }
    out
}

/// `ev` accounts for every seq from 1 to `last` exactly once, in order (numbered events
/// and lost events' ranges), and ends with the exit event numbered `last`.
fn assert_covers(ev: &[Value], last: u64) {
    let mut next = 1;
    for e in ev {
        if let Some(n) = e.get("lost") {
            let (from, to) = (e["from_seq"].as_u64(), e["to_seq"].as_u64());
            assert_eq!(from, Some(next), "{e}");
            let to = to.unwrap();
            assert_eq!(n.as_u64(), Some(to - next + 1), "{e}");
            next = to + 1;
        } else if let Some(seq) = e.get("seq") {
            assert_eq!(seq.as_u64(), Some(next), "{e}");
            next += 1;
        }
    }
    assert_eq!(next, last + 1, "events end at {}", next - 1);
    let end = ev.last().unwrap();
    assert!(end.get("exit").is_some(), "the stream ends with {end}");
}

async fn run_to_end(svc: &Arc<Service>, body: Value) -> Vec<Value> {
    let e = svc.start(body.to_string().as_bytes(), "t").unwrap();
    collect(svc.stream(e, 0).unwrap()).await
}

#[test]
fn refused_starts_leave_nothing_then_429_and_cancel() {
    let d = tempfile::tempdir().unwrap();
    let svc = service(d.path(), |c| c.max_running = 1);
    rt().block_on(async {
        let marker = d.path().join("ran");
        let touch = format!("touch {}", marker.display());
        let cases = [
            (b"{nope".to_vec(), 400),
            (
                json!({"id": "a", "kind": "sh", "command": touch, "x": 1})
                    .to_string()
                    .into_bytes(),
                400,
            ),
            (
                json!({"id": "a/b", "kind": "sh", "command": touch})
                    .to_string()
                    .into_bytes(),
                400,
            ),
            (
                json!({"id": "a", "kind": "sh", "script": "1"})
                    .to_string()
                    .into_bytes(),
                400,
            ),
            (
                json!({"id": "a", "kind": "sh", "command": touch, "timeout_s": -1})
                    .to_string()
                    .into_bytes(),
                400,
            ),
            (
                json!({"id": "a", "kind": "rhai", "script": "1", "script_name": "a\nb"})
                    .to_string()
                    .into_bytes(),
                400,
            ),
            (
                json!({"id": "a", "kind": "sh", "command": touch,
                    "secrets": [{"env": "P", "name": "other", "key": "pw"}]})
                .to_string()
                .into_bytes(),
                403,
            ),
            (
                json!({"id": "a", "kind": "sh", "command": touch,
                    "secrets": [{"env": "P", "name": "db", "key": "nope"}]})
                .to_string()
                .into_bytes(),
                422,
            ),
            (
                json!({"id": "a", "kind": "rhai", "script": "fn ("})
                    .to_string()
                    .into_bytes(),
                422,
            ),
            (
                json!({"id": "a", "kind": "rhai", "script": "import \"../../etc/hostname\" as m;"})
                    .to_string()
                    .into_bytes(),
                422,
            ),
            (
                json!({"id": "a", "kind": "rhai", "script": "1", "mode": "yolo"})
                    .to_string()
                    .into_bytes(),
                400,
            ),
        ];
        for (body, want) in &cases {
            let r = svc.start(body, "t").unwrap_err();
            assert_eq!(r.status, *want, "{}", String::from_utf8_lossy(body));
            assert!(!r.body.to_string().contains("s3cr3t"));
        }
        assert!(svc.get("a").is_none());
        assert_eq!((svc.running(), svc.ring_bytes()), (0, 0));
        assert!(!marker.exists());
        assert!(
            std::fs::read_dir(d.path().join("state"))
                .unwrap()
                .next()
                .is_none()
        );
        // one running: the next is 429, with Retry-After
        let long = svc
            .start(
                json!({"id": "long", "kind": "sh", "command": "echo up; sleep 60"})
                    .to_string()
                    .as_bytes(),
                "t",
            )
            .unwrap();
        let r = svc
            .start(
                json!({"id": "b", "kind": "sh", "command": "true"})
                    .to_string()
                    .as_bytes(),
                "t",
            )
            .unwrap_err();
        assert_eq!(r.status, 429);
        assert_eq!(r.headers, vec![("Retry-After", "1".to_string())]);
        assert!(svc.get("b").is_none());
        let mut rx = svc.stream(long.clone(), 0).unwrap();
        let up = rx.recv().await.unwrap();
        assert!(String::from_utf8_lossy(&up).contains("\"line\":\"up\""));
        assert_eq!(svc.cancel("long", b"{\"grace_s\": 1}", "t").unwrap().0, 202);
        let ev = collect(rx).await;
        assert_eq!(ev.last().unwrap()["exit"], json!({"signal": 15}));
        assert_eq!(svc.cancel("long", b"", "t").unwrap().0, 200);
        assert_eq!(svc.running(), 0);
        assert!(
            std::fs::read_dir(d.path().join("state"))
                .unwrap()
                .next()
                .is_none()
        );
    });
}

/// A reader that does not read while a step writes past `--ring-lines` loses events:
/// it is told which (a lost event) and then gets the rest and the exit event.
#[test]
fn slow_reader_gets_a_lost_event_then_the_rest_and_the_exit() {
    let d = tempfile::tempdir().unwrap();
    let svc = service(d.path(), |c| {
        c.ring_lines = 50;
        c.keep_finished = 1;
    });
    rt().block_on(async {
        let e = svc
            .start(
                json!({"id": "s", "kind": "sh", "command": "seq 1 3000"})
                    .to_string()
                    .as_bytes(),
                "t",
            )
            .unwrap();
        let rx = svc.stream(e.clone(), 0).unwrap();
        assert_eq!(e.ended().await, json!({"code": 0}));
        let ev = collect(rx).await;
        assert_covers(&ev, 3001);
        let lost: u64 = ev.iter().filter_map(|e| e["lost"].as_u64()).sum();
        assert!(lost > 0, "nothing lost: the test did not fall behind");
        let text = svc.metrics_text();
        let line = format!("skyhook_serve_stream_lost_events_total {lost}");
        assert!(text.lines().any(|l| l == line), "{text}");
        // the whole ring evicted (keep_finished = 1): a reader still holding the
        // execution gets the kept exit event after the lost range
        run_to_end(&svc, json!({"id": "t", "kind": "sh", "command": "true"})).await;
        assert!(svc.get("s").is_none());
        let (lost, ev, ended, last) = e.read_on(10, 100);
        assert_eq!((lost, ended, last), (Some((11, 3000)), true, 3001));
        assert_eq!(ev.len(), 1);
        assert!(
            ev[0].1.starts_with(r#"{"seq":3001,"exit":{"code":0}"#),
            "{}",
            ev[0].1
        );
    });
}

#[test]
fn byte_budget_evicts_ended_executions_then_own_oldest_events() {
    let d = tempfile::tempdir().unwrap();
    let svc = service(d.path(), |c| {
        c.ring_bytes = 4000;
        c.keep_finished = 2;
    });
    rt().block_on(async {
        let ev = run_to_end(
            &svc,
            json!({"id": "a", "kind": "sh", "command": "seq 1 10"}),
        )
        .await;
        assert_eq!(ev.len(), 11);
        assert!(svc.get("a").is_some());
        // 200 lines of ~70 bytes: over budget; "a" goes first, then b's oldest events
        let b = svc
            .start(
                json!({"id": "b", "kind": "sh", "command": "seq 1 200"})
                    .to_string()
                    .as_bytes(),
                "t",
            )
            .unwrap();
        let rx = svc.stream(b.clone(), 0).unwrap();
        assert_eq!(b.ended().await, json!({"code": 0}));
        // a reader that fell behind the ring is told what it lost, then gets the rest
        let ev = collect(rx).await;
        assert_covers(&ev, 201);
        assert!(ev.iter().any(|e| e.get("lost").is_some()), "no lost event");
        assert!(
            svc.get("a").is_none(),
            "the ended execution was not evicted first"
        );
        assert!(svc.ring_bytes() <= 4000 + 200, "{}", svc.ring_bytes());
        assert!(svc.get("b").is_some());
        let gap = svc.stream(b.clone(), 0).unwrap_err();
        assert_eq!(gap.wanted, 1);
        assert!(gap.oldest > 100, "{gap:?}");
        assert_eq!(b.status()["state"], "exited");
        // by count: keep_finished = 2
        for id in ["c", "d"] {
            run_to_end(&svc, json!({"id": id, "kind": "sh", "command": "true"})).await;
        }
        assert!(svc.get("b").is_none() && svc.get("c").is_some() && svc.get("d").is_some());
    });
}

#[test]
fn heartbeats_secrets_rhai_and_shutdown() {
    let d = tempfile::tempdir().unwrap();
    let svc = service(d.path(), |c| c.alive_every = Duration::from_millis(20));
    rt().block_on(async {
        let ev = run_to_end(
            &svc,
            json!({"id": "h", "kind": "sh", "command": "sleep 0.2; echo \"$P\"",
                   "secrets": [{"env": "P", "name": "db", "key": "pw"}]}),
        )
        .await;
        assert!(ev.iter().any(|e| e["alive"] == true && e.get("seq").is_none()));
        let lines: Vec<&Value> = ev.iter().filter(|e| e.get("seq").is_some()).collect();
        assert_eq!(lines[0]["line"], "***");
        let ev = run_to_end(
            &svc,
            json!({"id": "r", "kind": "rhai", "mode": "plan",
                   "script": "let p = secret(\"db\", \"pw\"); print(p); fs::write(\"/tmp/skyhook-serve-plan-only\", p);",
                   "secrets": [{"env": "P", "name": "db", "key": "pw"}]}),
        )
        .await;
        let text = serde_json::to_string(&ev).unwrap();
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(!text.contains(&crate::host::root::digest::sha256_tag(b"s3cr3t-value")), "{text}");
        assert_eq!(ev.last().unwrap()["report"]["changes"][0]["after"], "***");
        assert!(ev.iter().any(|e| e["line"] == "***"));
        assert_eq!(ev.last().unwrap()["exit"], json!({"code": 0}));
        // shutdown: the grace passes, the running one is cancelled, new starts refused
        let e = svc
            .start(json!({"id": "s", "kind": "sh", "command": "echo up; sleep 60"}).to_string().as_bytes(), "t")
            .unwrap();
        let mut rx = svc.stream(e, 0).unwrap();
        assert!(!rx.recv().await.unwrap().is_empty(), "the step started");
        svc.shutdown(Duration::from_millis(50)).await;
        assert_eq!(collect(rx).await.last().unwrap()["exit"], json!({"signal": 15}));
        let r = svc
            .start(json!({"id": "z", "kind": "sh", "command": "true"}).to_string().as_bytes(), "t")
            .unwrap_err();
        assert_eq!(r.status, 503);
    });
}

#[test]
fn rhai_secret_reads_only_declared_coordinates_resolved_before_the_start() {
    let d = tempfile::tempdir().unwrap();
    let svc = service(d.path(), |_| {});
    let outside = d.path().join("outside");
    std::fs::write(&outside, "host-file-content").unwrap();
    std::os::unix::fs::symlink(&outside, d.path().join("secrets/db/link")).unwrap();
    std::fs::write(d.path().join("secrets/db/other"), "undeclared-value").unwrap();
    rt().block_on(async {
        let declared = json!([{"env": "P", "name": "db", "key": "pw"}]);
        for key in ["link", "other"] {
            let ev = run_to_end(
                &svc,
                json!({"id": format!("r-{key}"), "kind": "rhai", "secrets": declared,
                       "script": format!("print(secret(\"db\", \"{key}\"));")}),
            )
            .await;
            let text = serde_json::to_string(&ev).unwrap();
            assert!(!text.contains("host-file-content"), "{text}");
            assert!(!text.contains("undeclared-value"), "{text}");
            let exit = &ev.last().unwrap()["exit"];
            assert_eq!(exit["code"], 1, "{text}");
            let err = exit["error"].as_str().unwrap();
            assert!(
                err.contains(&format!(
                    "secret \"db\" key \"{key}\" is not in the request's `secrets` field"
                )),
                "{err}"
            );
            assert!(!err.contains("SKYHOOK_ALLOWED_SECRETS"), "{err}");
        }
        // the declared one is read; a declared link out of the dir is refused up front
        let ev = run_to_end(
            &svc,
            json!({"id": "ok", "kind": "rhai", "secrets": declared,
                   "script": "if secret(\"db\", \"pw\") == \"s3cr3t-value\" { print(\"same\"); }"}),
        )
        .await;
        assert!(ev.iter().any(|e| e["line"] == "same"), "{ev:?}");
        let marker = d.path().join("ran");
        let r = svc
            .start(
                json!({"id": "esc", "kind": "rhai",
                       "script": format!("fs::write(\"{}\", \"x\");", marker.display()),
                       "secrets": [{"env": "P", "name": "db", "key": "link"}]})
                .to_string()
                .as_bytes(),
                "t",
            )
            .unwrap_err();
        assert_eq!(r.status, 422);
        assert_eq!(
            r.body,
            json!({"error": "secret not found", "name": "db", "key": "link"})
        );
        assert!(svc.get("esc").is_none() && !marker.exists());
    });
}

#[test]
fn another_engine_gets_404_for_status_events_and_cancel_also_after_a_restart() {
    let d = tempfile::tempdir().unwrap();
    let svc = service(d.path(), |_| {});
    rt().block_on(async {
        let e = svc
            .start(
                json!({"id": "mine", "kind": "sh", "command": "echo up; sleep 60"})
                    .to_string()
                    .as_bytes(),
                "a",
            )
            .unwrap();
        let mut rx = svc.stream(e.clone(), 0).unwrap();
        assert!(String::from_utf8_lossy(&rx.recv().await.unwrap()).contains("up"));
        assert_eq!(svc.status("mine", "b").unwrap_err(), Refusal::not_found());
        assert_eq!(
            svc.events("mine", 0, "b").unwrap_err(),
            Refusal::not_found()
        );
        assert_eq!(
            svc.cancel("mine", b"", "b").unwrap_err(),
            Refusal::not_found()
        );
        assert_eq!(svc.status("mine", "a").unwrap()["state"], "running");
        assert!(e.exit().is_none(), "another engine's cancel reached it");
        // `after` beyond the last event: 400 naming it, for the owner too
        let r = svc.events("mine", 5, "a").unwrap_err();
        assert_eq!(r.status, 400);
        assert_eq!(r.body["last_seq"], 1);
        assert!(svc.events("mine", 1, "a").is_ok());
        // a restarted server reads the owner from the state dir
        let state = d.path().join("state/mine.json");
        let doc: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
        assert_eq!(doc["engine"], "a");
        let again = service(d.path(), |_| {});
        assert_eq!(
            again.cancel("mine", b"", "b").unwrap_err(),
            Refusal::not_found()
        );
        assert!(e.exit().is_none());
        let (code, body) = again.cancel("mine", b"{\"grace_s\": 1}", "a").unwrap();
        assert_eq!((code, &body["recovered"]), (202, &json!(true)));
        assert_eq!(
            collect(rx).await.last().unwrap()["exit"],
            json!({"signal": 15})
        );
    });
}

#[test]
fn workdir_resolves_inside_the_host_root() {
    let t = crate::host::testutil::TestHost::new();
    t.install_sh();
    let d = t.dir.path();
    // beside the root on the host, and an absolute link naming a host directory
    std::fs::create_dir_all(d.join("beside")).unwrap();
    std::fs::create_dir_all(t.p("/srv/real")).unwrap();
    std::os::unix::fs::symlink(d.join("beside"), t.p("/srv/out")).unwrap();
    std::os::unix::fs::symlink("/srv/real", t.p("/srv/in")).unwrap();
    let svc = service(d, |c| c.root = t.root.clone());
    rt().block_on(async {
        for w in [
            "/../beside".to_string(),
            "/srv/out".to_string(),
            format!("{}", d.join("beside").display()),
            "/srv/nope".to_string(),
        ] {
            let r = svc
                .start(
                    json!({"id": "w", "kind": "sh", "command": "true", "workdir": w})
                        .to_string()
                        .as_bytes(),
                    "t",
                )
                .unwrap_err();
            assert_eq!(r.status, 422, "{w}");
            assert_eq!(
                r.body,
                json!({"error": "workdir not found", "workdir": w}),
                "{w}"
            );
            assert!(svc.get("w").is_none());
        }
        // a link inside the root, absolute as the chrooted step reads it
        let ev = run_to_end(
            &svc,
            json!({"id": "in", "kind": "sh", "command": "pwd", "workdir": "/srv/in"}),
        )
        .await;
        assert_eq!(ev[0]["line"], "/srv/real", "{ev:?}");
        assert_eq!(ev.last().unwrap()["exit"], json!({"code": 0}));
    });
}

#[test]
fn an_environment_that_would_not_fit_an_exec_is_413_and_a_relative_import_names_no_path() {
    let d = tempfile::tempdir().unwrap();
    let svc = service(d.path(), |_| {});
    let marker = d.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let big = "v".repeat(200_000);
    let many: BTreeMap<String, String> = (0..2000).map(|i| (format!("V{i}"), "x".into())).collect();
    let wide: BTreeMap<String, String> = (0..10)
        .map(|i| (format!("V{i}"), "v".repeat(120_000)))
        .collect();
    rt().block_on(async {
        for (body, detail) in [
            (
                json!({"id": "e", "kind": "sh", "command": touch, "env": {"BIG": big}}),
                "env \"BIG\" is 200005 bytes, each entry must be under 131072",
            ),
            (
                json!({"id": "e", "kind": "sh", "command": touch, "env": many}),
                "2001 environment entries, at most 1024",
            ),
            (
                json!({"id": "e", "kind": "rhai", "script": "1", "env": wide}),
                "environment and command are 12001",
            ),
            (
                json!({"id": "e", "kind": "sh", "command": format!("{touch} {big}")}),
                "command is",
            ),
        ] {
            let r = svc.start(body.to_string().as_bytes(), "t").unwrap_err();
            assert_eq!(r.status, 413, "{detail}");
            assert_eq!(r.body["error"], "environment too large");
            assert_eq!(r.body["max_env_bytes"], 1 << 20);
            let got = r.body["detail"].as_str().unwrap();
            assert!(got.starts_with(detail), "{got}");
            assert!(svc.get("e").is_none() && !marker.exists());
        }
        // a large value that fits is passed whole
        let ev = run_to_end(
            &svc,
            json!({"id": "fits", "kind": "sh", "command": "echo ${#V}",
                   "env": {"V": "v".repeat(100_000)}}),
        )
        .await;
        assert_eq!(ev[0]["line"], "100000", "{ev:?}");
        // a relative import: a plain message, no server path
        let r = svc
            .start(
                json!({"id": "i", "kind": "rhai", "script": "import \"lib/util\" as u;"})
                    .to_string()
                    .as_bytes(),
                "t",
            )
            .unwrap_err();
        assert_eq!(r.status, 422);
        let msg = r.body["message"].as_str().unwrap();
        assert!(
            msg.contains("only the embedded skyhook/... modules can be imported here"),
            "{msg}"
        );
        assert!(!msg.contains("nonexistent"), "{msg}");
    });
}

#[test]
fn a_cancelled_or_timed_out_rhai_step_stops_at_its_next_operation() {
    let d = tempfile::tempdir().unwrap();
    let svc = service(d.path(), |_| {});
    rt().block_on(async {
        let e = svc
            .start(
                json!({"id": "spin", "kind": "rhai",
                       "script": "print(\"up\"); let x = 0; loop { x += 1; }"})
                .to_string()
                .as_bytes(),
                "t",
            )
            .unwrap();
        let mut rx = svc.stream(e, 0).unwrap();
        assert!(String::from_utf8_lossy(&rx.recv().await.unwrap()).contains("up"));
        assert_eq!(svc.cancel("spin", b"", "t").unwrap().0, 202);
        let ev = collect(rx).await;
        assert_eq!(ev.last().unwrap()["exit"], json!({"error": "cancelled"}));
        let ev = run_to_end(
            &svc,
            json!({"id": "slow", "kind": "rhai", "timeout_s": 0.2,
                   "script": "let x = 0; loop { x += 1; }"}),
        )
        .await;
        assert_eq!(ev.last().unwrap()["exit"], json!({"error": "timeout"}));
    });
}

/// Every line of a stream until it closes, as sent, each `"ts":"…"` value (checked to
/// be `YYYY-MM-DDTHH:MM:SS.mmmZ`) replaced by `TS`.
async fn raw_lines(mut rx: mpsc::Receiver<Bytes>) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(b) = rx.recv().await {
        for l in String::from_utf8(b.to_vec()).unwrap().lines() {
            let mut l = l.to_string();
            if let Some(at) = l.find("\"ts\":\"") {
                let ts = &l[at + 6..at + 6 + 24];
                assert!(
                    ts.len() == 24 && ts.as_bytes()[10] == b'T' && ts.ends_with('Z'),
                    "{l}"
                );
                l.replace_range(at + 6..at + 6 + 24, "TS");
            }
            out.push(l);
        }
    }
    out
}

/// The exit event of an sh execution, byte for byte, for an exit 0 (after a line of
/// output), an exit 3, a timeout, a cancel (the shell dies of the SIGTERM), a cancel the
/// shell traps and exits 7 after, and a shell that cannot be spawned: clients parse these.
#[test]
fn sh_exit_events_are_pinned_byte_for_byte() {
    let d = tempfile::tempdir().unwrap();
    let svc = service(d.path(), |_| {});
    rt().block_on(async {
        let run = |id: &str, extra: Value| {
            let mut body = json!({"id": id, "kind": "sh"});
            if let (Value::Object(b), Value::Object(x)) = (&mut body, extra) {
                b.extend(x);
            }
            let e = svc.start(body.to_string().as_bytes(), "t").unwrap();
            svc.stream(e, 0).unwrap()
        };
        let lines = raw_lines(run("ok", json!({"command": "echo hi"}))).await;
        assert_eq!(
            lines,
            [
                r#"{"seq":1,"stream":"stdout","line":"hi","ts":"TS"}"#,
                r#"{"seq":2,"exit":{"code":0},"ts":"TS"}"#
            ]
        );
        let lines = raw_lines(run("three", json!({"command": "exit 3"}))).await;
        assert_eq!(lines, [r#"{"seq":1,"exit":{"code":3},"ts":"TS"}"#]);
        let lines = raw_lines(run(
            "slow",
            json!({"command": "exec sleep 30", "timeout_s": 0.2}),
        ))
        .await;
        assert_eq!(lines, [r#"{"seq":1,"exit":{"error":"timeout"},"ts":"TS"}"#]);
        for (id, command, exit) in [
            ("cancel", "echo up; exec sleep 30", r#"{"signal":15}"#),
            (
                "trapped",
                // The loop's stderr is quiet: whether the shell reports its killed sleep
                // ("Terminated") before the trap runs is a race of its own.
                "trap 'exit 7' TERM; echo up; while :; do sleep 0.05; done 2>/dev/null",
                r#"{"code":7}"#,
            ),
        ] {
            let mut rx = run(id, json!({ "command": command }));
            let first = String::from_utf8(rx.recv().await.unwrap().to_vec()).unwrap();
            assert!(first.contains(r#""line":"up""#), "{first}");
            assert_eq!(svc.cancel(id, b"", "t").unwrap().0, 202);
            assert_eq!(
                raw_lines(rx).await,
                [format!(r#"{{"seq":2,"exit":{exit},"ts":"TS"}}"#)],
                "{id}"
            );
        }
    });
    let svc = service(&d.path().join("nosh"), |c| {
        c.shell = vec!["/nonexistent/sh".into(), "-c".into()];
    });
    rt().block_on(async {
        let e = svc
            .start(
                json!({"id": "nosh", "kind": "sh", "command": "true"})
                    .to_string()
                    .as_bytes(),
                "t",
            )
            .unwrap();
        assert_eq!(
            raw_lines(svc.stream(e, 0).unwrap()).await,
            [r#"{"seq":1,"exit":{"error":"spawn failed: No such file or directory (os error 2)"},"ts":"TS"}"#]
        );
    });
}

/// The exit event of a Rhai execution: its exit object, then `report` and `rendered`,
/// for a script's integer, its error, and a script that never ran (a root that is gone).
#[test]
fn rhai_exit_events_are_pinned() {
    let d = tempfile::tempdir().unwrap();
    let svc = service(d.path(), |_| {});
    rt().block_on(async {
        for (id, script, exit) in [
            ("three", "3", json!({"code": 3})),
            (
                "thrown",
                "throw \"no\";",
                json!({"code": 1, "error": "thrown.rhai:1:1: no"}),
            ),
        ] {
            let ev = run_to_end(&svc, json!({"id": id, "kind": "rhai", "script": script})).await;
            let end = ev.last().unwrap();
            assert_eq!(end["exit"], exit, "{end}");
            let keys: Vec<&str> = end.as_object().unwrap().keys().map(|k| &**k).collect();
            assert_eq!(keys, ["seq", "exit", "ts", "report", "rendered"], "{end}");
            assert_eq!(end["report"]["return_code"], exit["code"], "{end}");
        }
    });
    let gone = d.path().join("gone");
    std::fs::create_dir(&gone).unwrap();
    let svc = service(&d.path().join("s2"), |c| c.root = gone.clone());
    std::fs::remove_dir(&gone).unwrap();
    rt().block_on(async {
        let ev = run_to_end(&svc, json!({"id": "r", "kind": "rhai", "script": "0"})).await;
        let end = ev.last().unwrap();
        let keys: Vec<&str> = end.as_object().unwrap().keys().map(|k| &**k).collect();
        assert_eq!(keys, ["seq", "exit", "ts"], "{end}");
        let e = end["exit"]["error"].as_str().unwrap();
        assert!(e.starts_with("cannot open host root: "), "{end}");
    });
}

/// A live (not zombie) process.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_string()))
        .is_some_and(|r| !r.starts_with('Z'))
}

/// The pid written to `path`, waited for (bounded).
async fn pid_in(path: &Path) -> i32 {
    for _ in 0..500 {
        if let Some(p) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no pid in {}", path.display());
}

#[test]
fn concurrent_executions_keep_their_background_children_until_their_own_end() {
    let d = tempfile::tempdir().unwrap();
    let root = cgroup::Root::detect().expect("a usable cgroup here");
    let svc = service(d.path(), |c| c.cgroup = Some(root));
    let p = |n: &str| d.path().join(n);
    rt().block_on(async {
        // A: a Rhai step whose command leaves an orphan and a setsid child while it runs.
        let long = format!(
            "(sleep 100 & echo $! > {}); setsid sleep 100 & echo $! > {}; sleep 100",
            p("a").display(),
            p("as").display()
        );
        let a = svc
            .start(
                json!({"id": "a", "kind": "rhai",
                       "script": format!("run([\"sh\", \"-c\", {long:?}]);")})
                .to_string()
                .as_bytes(),
                "t",
            )
            .unwrap();
        let (orphan, setsid) = (pid_in(&p("a")).await, pid_in(&p("as")).await);
        let rec = svc.state.as_ref().unwrap().get("a").expect("a recorded");
        let cg = rec.cgroup.expect("a's cgroup recorded");
        assert_eq!(a.cgroup.as_deref(), Some(cg.as_path()));
        assert!(cgroup::procs(&cg).contains(&setsid));
        // B (Rhai) and C (sh) each leave a background child and end.
        let bg = |n: &str| format!("(sleep 100 & echo $! > {})", p(n).display());
        let ev = run_to_end(
            &svc,
            json!({"id": "b", "kind": "rhai",
                   "script": format!("run([\"sh\", \"-c\", {:?}]);", bg("b"))}),
        )
        .await;
        assert_eq!(ev.last().unwrap()["exit"], json!({"code": 0}), "{ev:?}");
        let ev = run_to_end(&svc, json!({"id": "c", "kind": "sh", "command": bg("c")})).await;
        assert_eq!(ev.last().unwrap()["exit"], json!({"code": 0}), "{ev:?}");
        let (b, c) = (pid_in(&p("b")).await, pid_in(&p("c")).await);
        assert!(!alive(b) && !alive(c), "B's and C's children end with them");
        assert!(
            alive(orphan) && alive(setsid),
            "A's children outlive B and C"
        );
        // Cancelling A ends both of its children and retires its cgroup and record.
        assert_eq!(svc.cancel("a", br#"{"grace_s": 0.2}"#, "t").unwrap().0, 202);
        let exit = tokio::time::timeout(Duration::from_secs(20), a.ended())
            .await
            .expect("a ends");
        assert_eq!(exit, json!({"error": "cancelled"}));
        assert!(!alive(orphan) && !alive(setsid));
        assert!(!cg.exists(), "{} removed", cg.display());
        assert!(svc.state.as_ref().unwrap().get("a").is_none());
    });
}

/// The server's start (`Service::with_audit`, as `serve` builds it) on a state dir
/// holding `name` made by `make`, on a thread of its own: its audit lines and the ids it
/// recovered, or a failure when it has not finished within 60 s (a start that blocks).
fn start_on(make: impl FnOnce(&Path)) -> (Vec<String>, Vec<String>, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let st = d.path().join("state");
    std::fs::create_dir_all(&st).unwrap();
    make(&st);
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = st.clone();
    std::thread::spawn(move || {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let mut cfg = Config::new(Path::new("/"));
        cfg.state_dir = Some(dir);
        let svc = Service::with_audit(
            cfg,
            true,
            Arc::new(move |l: &str| sink.lock().unwrap().push(l.to_string())),
        )
        .unwrap();
        let recovered = svc.recovered();
        let _ = tx.send((lock(&lines).clone(), recovered));
    });
    let (lines, recovered) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the server's start finished (a record must never block it)");
    // The dir stays for the caller's checks until it is dropped with `d`.
    let kept = d.keep();
    (lines, recovered, kept.join("state"))
}

/// The process's peak resident size (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

/// A FIFO in the state dir (`<id>.json`) is skipped with a warning naming it: opened
/// without blocking, it is seen not to be a regular file; the start does not hang.
#[test]
fn start_skips_a_fifo_record_without_blocking() {
    let (lines, recovered, dir) = start_on(|st| {
        nix::unistd::mkfifo(&st.join("f.json"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", st.join("l.json")).unwrap();
    });
    assert!(recovered.is_empty());
    let warnings: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| v["warning"].clone())
        .collect();
    let mut warnings: Vec<String> = warnings
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect();
    warnings.sort();
    assert_eq!(
        warnings,
        [
            format!(
                "state dir record {}: not a regular file (a fifo): skipped",
                dir.join("f.json").display()
            ),
            format!(
                "state dir record {}: a symlink: skipped",
                dir.join("l.json").display()
            ),
        ]
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// The warnings of a start's audit lines, sorted.
fn warnings_of(lines: &[String]) -> Vec<String> {
    let mut w: Vec<String> = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["warning"].clone())
        .filter_map(|w| w.as_str().map(String::from))
        .collect();
    w.sort();
    w
}

/// Device nodes, a socket and a directory named `<id>.json` are skipped naming what
/// they are, never opened for reading: opening a device has effects of its own (a
/// watchdog starts counting, a tape rewinds), so only its `O_PATH` handle is `fstat`ed.
/// (Major 240 has no driver: an open of these nodes would be `ENXIO`.)
#[test]
fn start_skips_devices_sockets_and_directories_unopened() {
    use nix::sys::stat::{Mode, SFlag, makedev, mknod};
    let (lines, recovered, dir) = start_on(|st| {
        mknod(
            &st.join("c.json"),
            SFlag::S_IFCHR,
            Mode::S_IRUSR,
            makedev(240, 0),
        )
        .unwrap();
        mknod(
            &st.join("b.json"),
            SFlag::S_IFBLK,
            Mode::S_IRUSR,
            makedev(240, 1),
        )
        .unwrap();
        std::os::unix::net::UnixListener::bind(st.join("s.json")).unwrap();
        std::fs::create_dir(st.join("d.json")).unwrap();
    });
    assert!(recovered.is_empty());
    let at = |n: &str, what: &str| {
        format!(
            "state dir record {}: not a regular file ({what}): skipped",
            dir.join(n).display()
        )
    };
    assert_eq!(
        warnings_of(&lines),
        [
            at("b.json", "a block device"),
            at("c.json", "a character device"),
            at("d.json", "a directory"),
            at("s.json", "a socket"),
        ]
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// A record's cgroup is a server's (`<cgroup>/skyhook-serve/<name>`) on a cgroup
/// filesystem, else the record is skipped with a warning: a plain directory with a FIFO
/// as its `cgroup.procs` does not block the start, and its list of pids (any process of
/// the machine) is never signalled; a cgroup not of a server is not either.
#[test]
fn start_skips_a_record_whose_cgroup_is_not_a_servers() {
    let me = std::process::id() as i32;
    let (_, start) = proc_stat(me).unwrap();
    let fake = tempfile::tempdir().unwrap();
    let cg = fake.path().join("skyhook-serve/x.1.0");
    std::fs::create_dir_all(&cg).unwrap();
    nix::unistd::mkfifo(&cg.join("cgroup.procs"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let (lines, recovered, dir) = start_on(|st| {
        for (id, cgroup) in [
            ("fifo", cg.to_string_lossy().into_owned()),
            ("other", "/sys/fs/cgroup/system.slice".to_string()),
            (
                "up",
                format!("{}/skyhook-serve/../x.1.0", fake.path().display()),
            ),
        ] {
            let rec = json!({"pid": me, "start": start, "cgroup": cgroup, "engine": "ci"});
            std::fs::write(st.join(format!("{id}.json")), rec.to_string()).unwrap();
        }
    });
    assert!(recovered.is_empty(), "{recovered:?}");
    let at = |id: &str, why: String| {
        format!(
            "state dir record {}: {why}: skipped",
            dir.join(format!("{id}.json")).display()
        )
    };
    assert_eq!(
        warnings_of(&lines),
        [
            at(
                "fifo",
                format!("its cgroup {} is not on a cgroup filesystem", cg.display())
            ),
            at(
                "other",
                "its cgroup /sys/fs/cgroup/system.slice is not a server's (<cgroup>/skyhook-serve/<name>)".into()
            ),
            at(
                "up",
                format!(
                    "its cgroup {}/skyhook-serve/../x.1.0 is not a server's (<cgroup>/skyhook-serve/<name>)",
                    fake.path().display()
                )
            ),
        ]
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// A 3 GiB sparse record is refused by its size before any byte is read (the cap is
/// `state::MAX_RECORD_BYTES`), with a warning naming it and both sizes;
/// the process's peak memory does not grow by the file's size.
#[test]
fn start_refuses_an_oversized_record_unread() {
    let before = peak_rss_kib();
    let (lines, recovered, dir) = start_on(|st| {
        let f = std::fs::File::create(st.join("big.json")).unwrap();
        f.set_len(3 << 30).unwrap();
    });
    let grown_mib = (peak_rss_kib() - before) / 1024;
    assert!(grown_mib < 512, "peak RSS grew by {grown_mib} MiB");
    assert!(recovered.is_empty());
    let warnings: Vec<String> = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["warning"].clone())
        .map(|w| w.as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        warnings,
        [format!(
            "state dir record {}: 3221225472 bytes, more than the limit of 65536 bytes: skipped",
            dir.join("big.json").display()
        )]
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// The exit event is the last of an execution's stream: an event emitted after it (a
/// cancelled plan's thread still ending) is not appended.
#[test]
fn nothing_is_appended_to_a_stream_after_its_exit() {
    let d = tempfile::tempdir().unwrap();
    let svc = service(d.path(), |_| {});
    rt().block_on(async {
        let e = svc
            .start(
                json!({"id": "done", "kind": "rhai", "script": "print(\"up\");"})
                    .to_string()
                    .as_bytes(),
                "t",
            )
            .unwrap();
        let before = collect(svc.stream(e.clone(), 0).unwrap()).await;
        assert!(before.last().unwrap().get("exit").is_some(), "{before:?}");
        svc.emit(
            &e,
            &super::super::event::Body::Line {
                stream: "stdout",
                line: "late".into(),
                partial: false,
                lossy: false,
            },
        );
        let after = collect(svc.stream(e, 0).unwrap()).await;
        assert_eq!(after, before);
    });
}
