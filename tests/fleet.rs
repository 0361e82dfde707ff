//! Fleet preview (docs/fleet.md): `serve`'s read-only `package_plan` execution and
//! `skyhook-run plan`'s grouping, with `serve` instances in this process on loopback, each
//! over its own fake host of `tests/fakehosts`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use skyhook::fleet::Cr;
use skyhook::fleet::run::plan_bodies;
use skyhook::package::Mode;
use skyhook::process::Cancel;
use skyhook::remote::Client;
use skyhook::serve::Service;
use skyhook::serve::auth::{Auth, sha256_hex};
use skyhook::serve::exec::Config;
use skyhook::serve::http::{Limits, Listener, Server, serve};

use crate::nvidia_ports::fake_host;
use crate::util::{FakeRoot, tree};

const PLAN_TOKEN: &str = "tok-plan";
const RUN_TOKEN: &str = "tok-run";

/// A tokens file with a `plan`-scoped engine `preview` and a `run` engine `ci`.
fn tokens_file(dir: &Path) -> PathBuf {
    let f = dir.join("engines");
    std::fs::write(
        &f,
        format!(
            "preview {} plan\nci {}\n",
            sha256_hex(PLAN_TOKEN.as_bytes()),
            sha256_hex(RUN_TOKEN.as_bytes())
        ),
    )
    .unwrap();
    f
}

/// A `serve` on a loopback port over `root`, in this runtime; its URL.
async fn start_serve(root: &Path, tokens: &Path) -> String {
    let cfg = Config::new(root);
    let svc = Service::with_audit(cfg, true, Arc::new(|_: &str| {})).unwrap();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let server = Server::new(svc, Auth::from_file(tokens).unwrap(), Limits::default());
    let (stop, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _keep = stop;
        serve(Listener::Tcp(l), server, rx).await;
    });
    format!("http://127.0.0.1:{port}")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn step(name: &str, path: &str) -> Value {
    json!({"name": name, "path": path, "arguments": [], "returncodes": [0], "on_host": true,
           "idempotence": false, "upgrade_step": false})
}

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Two packages beside a Skyhook CR in `dir`:
/// - `base` 1.0.0: `base.rhai` writes /etc/fleet-demo/base.conf naming the distribution
///   and tries to write through a read-only query (`query(["sh", "-c", "echo > ..."])`);
///   `setup.sh`, a process step that would write (listed, never run);
/// - `tuning` 2.0.0 (dependsOn base): `tune.rhai` fails when /etc/fleet-demo/broken exists,
///   else writes /etc/fleet-demo/tuning.conf from its configMap and asks for a restart of
///   containerd, which the CR declares.
///
/// The CR selects `nvidia.com/gpu.present=true` nodes without `fleet-demo/skip`.
fn packages(dir: &Path) -> PathBuf {
    let base = dir.join("base");
    write(
        &base.join("config.json"),
        &json!({"schema_version": "v1", "root_dir": "/", "expected_config_files": [],
                "package_name": "base", "package_version": "1.0.0",
                "modes": {"apply": [step("base", "base.rhai"), step("setup", "setup.sh")],
                          "apply-check": [step("base_check", "check.sh")]}})
        .to_string(),
    );
    write(
        &base.join("skyhook_dir/base.rhai"),
        "let id = os::id();\n\
         fs::write(\"/etc/fleet-demo/base.conf\", `managed=base\\nos=${id}\\n`);\n\
         let r = query([\"sh\", \"-c\", \"echo owned > /etc/owned-by-a-query\"]);\n",
    );
    write(
        &base.join("skyhook_dir/setup.sh"),
        "#!/bin/sh\ntouch /etc/owned-by-setup\n",
    );
    let tuning = dir.join("tuning");
    write(
        &tuning.join("config.json"),
        &json!({"schema_version": "v1", "root_dir": "/", "expected_config_files": ["threads"],
                "package_name": "tuning", "package_version": "2.0.0",
                "modes": {"apply": [step("tune", "tune.rhai")],
                          "apply-check": [step("tune_check", "check.sh")]}})
        .to_string(),
    );
    write(
        &tuning.join("skyhook_dir/tune.rhai"),
        "if fs::exists(\"/etc/fleet-demo/broken\") { throw \"/etc/fleet-demo/broken is present\"; }\n\
         fs::write(\"/etc/fleet-demo/tuning.conf\", `threads=${config::get(\"threads\")}\\n`);\n\
         interrupt::restart_services([\"containerd\"]);\n",
    );
    write(&tuning.join("configmaps/threads"), "4");
    for p in [&base, &tuning] {
        write(&p.join("skyhook_dir/check.sh"), "#!/bin/sh\nexit 0\n");
    }
    let cr = dir.join("skyhook.yaml");
    write(
        &cr,
        "apiVersion: skyhook.nvidia.com/v1alpha1\n\
         kind: Skyhook\n\
         metadata: {name: fleet-demo}\n\
         spec:\n\
         \x20 nodeSelectors:\n\
         \x20   matchLabels: {nvidia.com/gpu.present: \"true\"}\n\
         \x20   matchExpressions:\n\
         \x20     - {key: fleet-demo/skip, operator: DoesNotExist}\n\
         \x20     - {key: kubernetes.io/os, operator: In, values: [linux]}\n\
         \x20 packages:\n\
         \x20   tuning:\n\
         \x20     version: 2.0.0\n\
         \x20     dependsOn: {base: 1.0.0}\n\
         \x20     interrupt: {type: service, services: [containerd]}\n\
         \x20     configMap: {threads: \"8\"}\n\
         \x20   base:\n\
         \x20     version: 1.0.0\n",
    );
    cr
}

/// A `package_plan` start body for the packages of `cr`.
fn bodies(cr: &Path) -> Vec<(String, String, Value)> {
    let cr = Cr::load(cr).unwrap();
    plan_bodies(&cr, &BTreeMap::new(), &[Mode::Apply]).unwrap()
}

/// A package plan of a package that writes, runs a writing query and lists a writing process
/// step leaves every file of the host as it was, byte for byte (mode, owner, mtime too),
/// and still plans what it would do; the query's write was refused by the kernel.
#[test]
fn a_package_plan_writes_nothing_whatever_the_package_says() {
    require_root!();
    let fr = fake_host("ubuntu-22.04");
    let pkgs = tempfile::tempdir().unwrap();
    let cr = packages(pkgs.path());
    let before = tree(fr.root());
    let tokens = tokens_file(pkgs.path());
    let body = bodies(&cr).remove(0).2;
    rt().block_on(async {
        let url = start_serve(fr.root(), &tokens).await;
        let client = Client::new(&url, PLAN_TOKEN).unwrap();
        let mut start = body.clone();
        start["id"] = "plan-1".into();
        let mut events = Vec::new();
        let exit = client
            .execute(&start, &Cancel::new(), &mut |e| events.push(e.clone()))
            .await
            .unwrap();
        assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
        let rendered = exit["rendered"].as_str().unwrap();
        assert!(rendered.contains("/etc/fleet-demo/base.conf"), "{rendered}");
        assert!(rendered.contains("> would run: setup.sh"), "{rendered}");
        let plan = &exit["plans"][0];
        assert_eq!(plan["package"], "base");
        assert_eq!(plan["ok"], true);
        assert_eq!(plan["steps"][1]["kind"], "process");
        // a plan event per change and action, before the exit
        assert!(
            events
                .iter()
                .any(|e| e["plan"]["path"] == "/etc/fleet-demo/base.conf"),
            "{events:#?}"
        );
    });
    assert!(
        !fr.host("/etc/owned-by-a-query").exists(),
        "a query wrote to the host"
    );
    assert!(!fr.host("/etc/owned-by-setup").exists());
    assert_eq!(tree(fr.root()), before);
}

/// A `plan` token starts a package plan and is refused (403) for a step execution, which
/// then runs nothing; a `run` token still starts a step.
#[test]
fn a_plan_token_plans_and_cannot_run_a_step() {
    require_root!();
    let fr = FakeRoot::new();
    let pkgs = tempfile::tempdir().unwrap();
    let cr = packages(pkgs.path());
    let tokens = tokens_file(pkgs.path());
    let body = bodies(&cr).remove(0).2;
    let before = tree(fr.root());
    rt().block_on(async {
        let url = start_serve(fr.root(), &tokens).await;
        let plan = Client::new(&url, PLAN_TOKEN).unwrap();
        let run = Client::new(&url, RUN_TOKEN).unwrap();
        for kind in [
            json!({"id": "s1", "kind": "sh", "command": "touch /pwned"}),
            json!({"id": "s2", "kind": "rhai", "script": "fs::write(\"/pwned\", \"x\");"}),
            json!({"id": "s3", "kind": "rhai", "mode": "plan", "script": "1"}),
        ] {
            let (status, v) = plan
                .call(
                    hyper::Method::POST,
                    "/v1/executions",
                    Some(kind.to_string().into_bytes()),
                )
                .await
                .unwrap();
            assert_eq!(status, 403, "{kind}: {v}");
            assert_eq!(
                v,
                json!({"error": "forbidden",
                       "detail": "a plan-scoped token can start only kind package_plan"})
            );
        }
        let mut start = body.clone();
        start["id"] = "p1".into();
        let exit = plan
            .execute(&start, &Cancel::new(), &mut |_| {})
            .await
            .unwrap();
        assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
        // a run token works as before
        let exit = run
            .execute(
                &json!({"id": "r1", "kind": "sh", "command": "echo hi"}),
                &Cancel::new(),
                &mut |_| {},
            )
            .await
            .unwrap();
        assert_eq!(exit["exit"], json!({"code": 0}));
        // a package over the cap is 413, naming the limit
        let mut big = body.clone();
        big["id"] = "big".into();
        big["package"]["files"]["skyhook_dir/big.rhai"] = "x".repeat(3 << 20).into();
        let (status, v) = plan
            .call(
                hyper::Method::POST,
                "/v1/executions",
                Some(big.to_string().into_bytes()),
            )
            .await
            .unwrap();
        assert_eq!(status, 413, "{v}");
        assert_eq!(v["error"], "package too large");
        assert_eq!(v["max_package_bytes"], 3 << 20);
    });
    assert_eq!(tree(fr.root()), before);
}
