//! Fleet preview (docs/fleet.md): `serve`'s read-only `package_plan` execution and
//! `skyhook-run plan`'s grouping, with `serve` instances in this process on loopback, each
//! over its own fake host of `tests/fakehosts`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skyhook::fleet::run::{Options, plan_bodies, preview};
use skyhook::fleet::{Cr, load_nodes};
use skyhook::package::Mode;
use skyhook::process::Cancel;
use skyhook::remote::Client;
use skyhook::serve::Service;
use skyhook::serve::auth::{Auth, sha256_hex};
use skyhook::serve::exec::Config;
use skyhook::serve::http::{Limits, Listener, Server, serve};

use crate::nvidia_ports::fake_host;
use crate::plan_attack::{post_start, run_echo_hi};
use crate::util::{FakeRoot, tree};

pub(crate) const PLAN_TOKEN: &str = "tok-plan";
pub(crate) const RUN_TOKEN: &str = "tok-run";

/// A tokens file with a `plan`-scoped engine `preview` and a `run` engine `ci`.
pub(crate) fn tokens_file(dir: &Path) -> PathBuf {
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
pub(crate) async fn start_serve(root: &Path, tokens: &Path) -> String {
    start_serve_with(Config::new(root), tokens).await
}

/// A `serve` on a loopback port of configuration `cfg`, in this runtime; its URL.
pub(crate) async fn start_serve_with(cfg: Config, tokens: &Path) -> String {
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
         fs::write(\"/etc/fleet-demo/base.conf\", \"managed=base\\nos=\" + id + \"\\n\");\n\
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
         fs::write(\"/etc/fleet-demo/tuning.conf\", \"threads=\" + config::get(\"threads\") + \"\\n\");\n\
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

/// A package `app` 1.0.0 in `dir`: `apply` writes /etc/chain/app.conf, `config` writes the
/// same content again, `config-check` reads it and fails unless it says `ready=1`.
fn chained_modes_package(dir: &Path) -> PathBuf {
    let app = dir.join("app");
    write(
        &app.join("config.json"),
        &json!({"schema_version": "v1", "root_dir": "/", "expected_config_files": [],
                "package_name": "app", "package_version": "1.0.0",
                "modes": {"apply": [step("write", "write.rhai")],
                          "apply-check": [step("ready", "ready.rhai")],
                          "config": [step("write", "write.rhai")],
                          "config-check": [step("ready", "ready.rhai")]}})
        .to_string(),
    );
    write(
        &app.join("skyhook_dir/write.rhai"),
        "fs::write(\"/etc/chain/app.conf\", \"ready=1\\n\");\n",
    );
    write(
        &app.join("skyhook_dir/ready.rhai"),
        "let c = fs::read(\"/etc/chain/app.conf\");\n\
         if !c.contains(\"ready=1\") { throw \"app.conf is not ready\"; }\n",
    );
    app
}

/// Issue 32: the modes of one package plan are planned in one session carried from mode to
/// mode, so `config` sees what `apply` would write (and writes nothing more) and
/// `config-check`, which reads that file, plans to pass instead of failing.
#[test]
fn a_later_mode_plans_against_what_an_earlier_mode_planned() {
    require_root!();
    let fr = fake_host("ubuntu-22.04");
    let pkgs = tempfile::tempdir().unwrap();
    let app = chained_modes_package(pkgs.path());
    let tokens = tokens_file(pkgs.path());
    let before = tree(fr.root());
    let cr_path = pkgs.path().join("skyhook.yaml");
    write(
        &cr_path,
        "kind: Skyhook\nmetadata: {name: chain}\nspec:\n  packages:\n    app: {version: 1.0.0}\n",
    );
    let cr = Cr::load(&cr_path).unwrap();
    let dirs = BTreeMap::from([("app".to_string(), app)]);
    let modes = [Mode::Apply, Mode::Config, Mode::ConfigCheck];
    let mut body = plan_bodies(&cr, &dirs, &modes).unwrap().remove(0).2;
    body["id"] = "modes-1".into();
    let exit = rt().block_on(async {
        let url = start_serve(fr.root(), &tokens).await;
        let client = Client::new(&url, PLAN_TOKEN).unwrap();
        client
            .execute(&body, &Cancel::new(), &mut |_| {})
            .await
            .unwrap()
    });
    assert_eq!(exit["exit"], json!({"code": 0}), "{}", exit["rendered"]);
    let oks: Vec<&Value> = exit["plans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["ok"])
        .collect();
    assert_eq!(oks, [true, true, true]);
    assert_eq!(
        exit["rendered"],
        "--- mode apply\n\
         ==> step write: write.rhai\n\
         + mkdir /etc/chain\n\
         ~ create /etc/chain/app.conf (mode 0644)  # <package>/skyhook_dir/write.rhai:1\n\
         --- /dev/null\n\
         +++ b/etc/chain/app.conf\n\
         @@ -0,0 +1 @@\n\
         +ready=1\n\
         Plan: 1 to change, 0 unchanged.\n\
         --- mode config\n\
         ==> step write: write.rhai\n\
         Plan: 0 to change, 1 unchanged.\n\
         --- mode config-check\n\
         ==> step ready: ready.rhai\n\
         Plan: 0 to change, 0 unchanged.\n"
    );
    assert_eq!(tree(fr.root()), before);
}

/// Issue 32: the packages of a CR are planned on a node in one execution, each against the
/// host as the earlier ones would leave it: `reader` (dependsOn `base`) reads the file
/// `base` writes and plans to pass (on main it failed: the file is not on the live root).
#[test]
fn a_later_package_plans_against_what_an_earlier_package_planned() {
    require_root!();
    let pkgs = tempfile::tempdir().unwrap();
    let cr_path = packages(pkgs.path());
    let reader = pkgs.path().join("reader");
    write(
        &reader.join("config.json"),
        &json!({"schema_version": "v1", "root_dir": "/", "expected_config_files": [],
                "package_name": "reader", "package_version": "0.1.0",
                "modes": {"apply": [step("read", "read.rhai")],
                          "apply-check": [step("read_check", "check.sh")]}})
        .to_string(),
    );
    write(
        &reader.join("skyhook_dir/read.rhai"),
        "let base = fs::read(\"/etc/fleet-demo/base.conf\");\n\
         fs::write(\"/etc/fleet-demo/reader.conf\", base.split(\"\\n\")[0] + \"\\n\");\n",
    );
    write(&reader.join("skyhook_dir/check.sh"), "#!/bin/sh\nexit 0\n");
    let cr_text = std::fs::read_to_string(&cr_path).unwrap()
        + "    reader:\n      version: 0.1.0\n      dependsOn: {base: 1.0.0}\n";
    std::fs::write(&cr_path, cr_text).unwrap();
    let tokens = tokens_file(pkgs.path());
    let fr = fake_host("ubuntu-22.04");
    let before = tree(fr.root());
    let cr = Cr::load(&cr_path).unwrap();
    let bodies = plan_bodies(&cr, &BTreeMap::new(), &[Mode::Apply]).unwrap();
    let names: Vec<&str> = bodies.iter().map(|b| b.0.as_str()).collect();
    assert_eq!(names, ["base", "reader", "tuning"]);
    let p = preview_one(&cr_path, fr.root(), &tokens, &[Mode::Apply]);
    let text = p.render_text();
    assert!(
        text.ends_with("1 selected: 1 would change (1 plan), 0 converged, 0 failed\n"),
        "{text}"
    );
    let reader_part =
        &text[text.find("package reader").unwrap()..text.find("package tuning").unwrap()];
    assert_eq!(
        reader_part,
        "package reader 0.1.0\n\
         --- mode apply\n\
         ==> step read: read.rhai\n\
         ~ create /etc/fleet-demo/reader.conf (mode 0644)  # <package>/skyhook_dir/read.rhai:2\n\
         --- /dev/null\n\
         +++ b/etc/fleet-demo/reader.conf\n\
         @@ -0,0 +1 @@\n\
         +managed=base\n\
         Plan: 1 to change, 0 unchanged.\n"
    );
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
            let (status, v) = post_start(&plan, &kind).await;
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
        let exit = run_echo_hi(&run).await;
        assert_eq!(exit["exit"], json!({"code": 0}));
        // a package over the cap is 413, naming the limit
        let mut big = body.clone();
        big["id"] = "big".into();
        big["package"]["files"]["skyhook_dir/big.rhai"] = "x".repeat(3 << 20).into();
        let (status, v) = post_start(&plan, &big).await;
        assert_eq!(status, 413, "{v}");
        assert_eq!(v["error"], "package too large");
        assert_eq!(v["max_package_bytes"], 3 << 20);
    });
    assert_eq!(tree(fr.root()), before);
}

/// A hostile node: answers any request with a 200 stream that never ends a line, one byte
/// every 100 ms (`drip`), or 64 KiB chunks as fast as it can (`flood`).
async fn start_hostile(flood: bool) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n\
                            Transfer-Encoding: chunked\r\n\r\n";
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = if flood {
                    format!("10000\r\n{}\r\n", "x".repeat(0x10000))
                } else {
                    "1\r\nx\r\n".to_string()
                };
                // Bounded: 10,000 chunks (640 MiB flooded, or 1,000 s dripped) at most.
                for _ in 0..10_000 {
                    if s.write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                    if !flood {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

/// A port nothing listens on.
async fn dead_address() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

/// Apply both packages of `cr` to `root` for real (`skyhook-run --package --apply`), so
/// their step flags exist: the node is converged.
fn apply_packages(pkgs: &Path, cr: &Path, root: &Path) {
    let cm = pkgs.join("cm-tuning");
    write(&cm.join("threads"), "8");
    for (name, cms) in [("base", None), ("tuning", Some(&cm))] {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_skyhook-run"));
        c.env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .arg("--package")
            .arg(pkgs.join(name))
            .args(["--mode", "apply", "--apply", "--root"])
            .arg(root)
            .arg("--skyhook-cr")
            .arg(cr);
        if let Some(cm) = cms {
            c.arg("--configmaps").arg(cm);
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "apply {name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The done-when test of issue 32: 21 `serve` instances in this process, each over its own
/// fake host (fresh Ubuntu 22.04 and 24.04, fresh Amazon Linux, converged, one where a step
/// of `tuning` fails, two the selector excludes), one node down, one dripping and one
/// flooding. The grouped output is exact and the same on a second run; every failure is
/// named per node; no file of any host changed.
#[test]
fn a_fleet_preview_groups_nodes_by_plan_and_changes_no_host() {
    require_root!();
    let pkgs = tempfile::tempdir().unwrap();
    let cr_path = packages(pkgs.path());
    let tokens = tokens_file(pkgs.path());
    // (name, layer, labels beyond the selected ones, state)
    let mut spec: Vec<(String, &str, &str, &str)> = Vec::new();
    for i in 1..=8 {
        spec.push((format!("n{i:02}"), "ubuntu-22.04", "", "fresh"));
    }
    for i in 9..=12 {
        spec.push((format!("n{i:02}"), "ubuntu-24.04-eks-x86_64", "", "fresh"));
    }
    for i in 13..=15 {
        spec.push((format!("n{i:02}"), "amazon-linux-2023", "", "fresh"));
    }
    for i in 16..=18 {
        spec.push((format!("n{i:02}"), "ubuntu-22.04", "", "converged"));
    }
    spec.push(("n19".into(), "ubuntu-22.04", "", "broken"));
    spec.push(("n20".into(), "ubuntu-22.04", "skip", "fresh"));
    spec.push(("n21".into(), "cos-117", "nogpu", "fresh"));
    let hosts: Vec<FakeRoot> = spec
        .iter()
        .map(|(_, layer, _, state)| {
            let fr = fake_host(layer);
            match *state {
                "converged" => apply_packages(pkgs.path(), &cr_path, fr.root()),
                "broken" => {
                    fr.write("/etc/fleet-demo/broken", "");
                }
                _ => {}
            }
            fr
        })
        .collect();
    let before: Vec<Vec<String>> = hosts.iter().map(|h| tree(h.root())).collect();
    let cr = Cr::load(&cr_path).unwrap();
    let bodies = plan_bodies(&cr, &BTreeMap::new(), &[Mode::Apply]).unwrap();
    let outputs: Vec<String> = rt().block_on(async {
        let mut nodes = Vec::new();
        for ((name, _, extra, _), host) in spec.iter().zip(&hosts) {
            let mut labels = json!({"nvidia.com/gpu.present": "true", "kubernetes.io/os": "linux"});
            match *extra {
                "skip" => labels["fleet-demo/skip"] = "yes".into(),
                "nogpu" => labels["nvidia.com/gpu.present"] = "false".into(),
                _ => {}
            }
            let address = start_serve(host.root(), &tokens).await;
            nodes.push(json!({"name": name, "labels": labels, "address": address}));
        }
        let linux = json!({"nvidia.com/gpu.present": "true", "kubernetes.io/os": "linux"});
        nodes.push(json!({"name": "n22", "labels": linux, "address": dead_address().await}));
        nodes.push(json!({"name": "n23", "labels": linux, "address": start_hostile(false).await}));
        nodes.push(json!({"name": "n24", "labels": linux, "address": start_hostile(true).await}));
        let nodes_file = pkgs.path().join("nodes.yaml");
        std::fs::write(&nodes_file, serde_yaml_ng::to_string(&nodes).unwrap()).unwrap();
        let nodes = load_nodes(&nodes_file, None).unwrap();
        let mut outs = Vec::new();
        for _ in 0..2 {
            let p = preview(
                &cr,
                nodes.clone(),
                bodies.clone(),
                &options(vec![Mode::Apply], PLAN_TOKEN),
                &Cancel::new(),
                &mut |_, _| {},
            )
            .await;
            assert_eq!(p.to_json()["summary"]["line"], p.summary());
            outs.push(p.render_text());
        }
        outs
    });
    for (h, b) in hosts.iter().zip(&before) {
        assert!(&tree(h.root()) == b, "host {} changed", h.root().display());
    }
    assert_eq!(outputs[0], outputs[1]);
    assert_eq!(outputs[0], expected());
}

/// What the preview prints (both runs).
fn expected() -> String {
    format!(
        "== would change on 12 nodes: n01, n02, n03, n04, n05, n06, n07, n08, n09, n10, n11, n12\n{}== would change on 3 nodes: n13, n14, n15\n{}{CONVERGED_AND_FAILED}",
        planned_on("ubuntu"),
        planned_on("amzn")
    )
}

/// The plans of `base` and `tuning` in [`expected`] on a node whose os-release `ID` is `os`.
fn planned_on(os: &str) -> String {
    format!(
        r#"package base 1.0.0
--- mode apply
==> step base: base.rhai
+ mkdir /etc/fleet-demo
~ create /etc/fleet-demo/base.conf (mode 0644)  # <package>/skyhook_dir/base.rhai:2
--- /dev/null
+++ b/etc/fleet-demo/base.conf
@@ -0,0 +1,2 @@
+managed=base
+os={os}
==> step setup: setup.sh
> would run: setup.sh
Plan: 1 to change, 0 unchanged, 1 action.
package tuning 2.0.0
--- mode apply
==> step tune: tune.rhai
~ create /etc/fleet-demo/tuning.conf (mode 0644)  # <package>/skyhook_dir/tune.rhai:2
--- /dev/null
+++ b/etc/fleet-demo/tuning.conf
@@ -0,0 +1 @@
+threads=8
! interrupt: restart services containerd  # <package>/skyhook_dir/tune.rhai:3
note: tune.rhai: requested interrupt restart_services [containerd] is declared in the Skyhook CR (interrupt (type: service, services: [containerd])): the operator runs it in its interrupt stage
Plan: 1 to change, 0 unchanged.
"#
    )
}

/// The converged, failed and excluded nodes of [`expected`], and its summary.
const CONVERGED_AND_FAILED: &str = r#"== converged on 3 nodes: n16, n17, n18
package base 1.0.0
--- mode apply
==> step base: base.rhai
skipped: flag /etc/skyhook/flags/base/1.0.0/base.rhai_W11fWzBd exists
==> step setup: setup.sh
skipped: flag /etc/skyhook/flags/base/1.0.0/setup.sh_W11fWzBd exists
Plan: 0 to change, 0 unchanged.
package tuning 2.0.0
--- mode apply
==> step tune: tune.rhai
skipped: flag /etc/skyhook/flags/tuning/2.0.0/tune.rhai_W11fWzBd exists
Plan: 0 to change, 0 unchanged.
== failed on n19: package tuning: mode apply step tune: <package>/skyhook_dir/tune.rhai:1:43: /etc/fleet-demo/broken is present
== failed on n22: Connection refused (os error 111)
== failed on n23: no plan within 8 s (--node-timeout)
== failed on n24: the stream passed 1048576 bytes: stopped reading
== excluded by spec.nodeSelectors: n20, n21
22 selected: 15 would change (2 plans), 3 converged, 4 failed
"#;

fn options(modes: Vec<Mode>, token: &str) -> Options {
    Options {
        modes,
        parallel: 32,
        timeout: Duration::from_secs(8),
        max_stream: 1 << 20,
        token: token.into(),
        tls_ca: None,
        tls_client: None,
    }
}

/// `skyhook-run plan` end to end: text and JSON output, `--detailed-exitcode` (3 with
/// changes pending), exit 1 naming a failed node, exit 2 for a bad mode, 1 for a missing CR.
#[test]
fn skyhook_run_plan_exit_codes_and_json_records() {
    require_root!();
    let pkgs = tempfile::tempdir().unwrap();
    let cr = packages(pkgs.path());
    let tokens = tokens_file(pkgs.path());
    let token_file = pkgs.path().join("plan.token");
    std::fs::write(&token_file, format!("{PLAN_TOKEN}\n")).unwrap();
    let fr = fake_host("ubuntu-22.04");
    let before = tree(fr.root());
    rt().block_on(async {
        let up = start_serve(fr.root(), &tokens).await;
        let gpu = json!({"nvidia.com/gpu.present": "true", "kubernetes.io/os": "linux"});
        let one = pkgs.path().join("one.yaml");
        std::fs::write(
            &one,
            serde_yaml_ng::to_string(&json!([{"name": "up", "labels": gpu, "address": up}]))
                .unwrap(),
        )
        .unwrap();
        let two = pkgs.path().join("two.yaml");
        let down = dead_address().await;
        std::fs::write(
            &two,
            serde_yaml_ng::to_string(&json!([
            {"name": "up", "labels": gpu, "address": up},
            {"name": "down", "labels": gpu, "address": down}]))
            .unwrap(),
        )
        .unwrap();
        let run = |args: Vec<String>| async move {
            let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
                .arg("plan")
                .args(args)
                .output()
                .await
                .unwrap();
            (
                out.status.code().unwrap(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        let args = |nodes: &Path, extra: &[&str]| {
            let mut a: Vec<String> = vec![
                "--skyhook-cr".into(),
                cr.display().to_string(),
                "--nodes".into(),
                nodes.display().to_string(),
                "--token-file".into(),
                token_file.display().to_string(),
                "--mode".into(),
                "apply".into(),
            ];
            a.extend(extra.iter().map(|s| s.to_string()));
            a
        };
        let (code, out, err) = run(args(&one, &["--detailed-exitcode"])).await;
        assert_eq!(code, 3, "{out}{err}");
        assert!(
            out.ends_with("1 selected: 1 would change (1 plan), 0 converged, 0 failed\n"),
            "{out}"
        );
        let (code, out, _) = run(args(&one, &[])).await;
        assert_eq!(code, 0, "{out}");
        let (code, out, err) = run(args(&two, &["--output", "json", "--detailed-exitcode"])).await;
        assert_eq!(code, 1, "{out}{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        let schema: Value = serde_json::from_str(
            &std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/plan.schema.json"),
            )
            .unwrap(),
        )
        .unwrap();
        let schema = jsonschema::draft202012::options().build(&schema).unwrap();
        let errors: Vec<String> = schema
            .iter_errors(&v)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{errors:#?}");
        assert_eq!(v["nodes"][0]["node"], "down");
        assert_eq!(v["nodes"][0]["status"], "failed");
        assert_eq!(v["nodes"][0]["error"], "Connection refused (os error 111)");
        assert_eq!(v["nodes"][1]["status"], "would_change");
        assert_eq!(v["nodes"][1]["group"], 0);
        assert_eq!(
            v["nodes"][1]["packages"][1]["plans"][0]["package"],
            "tuning"
        );
        assert_eq!(
            v["summary"]["line"],
            "2 selected: 1 would change (1 plan), 0 converged, 1 failed"
        );
        let (code, _, err) = run(args(&one, &["--mode", "interrupt"])).await;
        assert_eq!(code, 2, "{err}");
        let missing = pkgs.path().join("nope.yaml");
        let (code, _, err) = run(vec![
            "--skyhook-cr".into(),
            missing.display().to_string(),
            "--nodes".into(),
            one.display().to_string(),
        ])
        .await;
        assert_eq!(code, 1);
        assert_eq!(
            err,
            format!(
                "skyhook-run: error: {}: No such file or directory (os error 2)\n",
                missing.display()
            )
        );
    });
    assert_eq!(tree(fr.root()), before);
}

/// A CA and a certificate for 127.0.0.1 signed by it, as PEM files in `dir`:
/// (CA file, certificate file, key file).
fn ca_and_leaf(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let files = (
        dir.join(format!("{name}-ca.pem")),
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&files.0, ca.pem()).unwrap();
    std::fs::write(&files.1, leaf.pem()).unwrap();
    std::fs::write(&files.2, key.serialize_pem()).unwrap();
    files
}

/// A `serve` over `root` on loopback with TLS (`cert`, `key`); its `https://` URL.
async fn start_tls_serve(root: &Path, tokens: &Path, cert: &Path, key: &Path) -> String {
    let svc = Service::with_audit(Config::new(root), true, Arc::new(|_: &str| {})).unwrap();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let acceptor = tokio_rustls::TlsAcceptor::from(
        skyhook::serve::tls::server_config(cert, key, None).unwrap(),
    );
    let server = Server::new(svc, Auth::from_file(tokens).unwrap(), Limits::default());
    let (stop, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _keep = stop;
        serve(Listener::Tls(l, acceptor), server, rx).await;
    });
    format!("https://127.0.0.1:{port}")
}

/// A node whose certificate the CA does not vouch for is failed, naming the certificate; a
/// stop (Ctrl-C) while a dripping node still runs returns what finished and lists the rest.
#[test]
fn a_wrong_certificate_fails_its_node_and_a_stop_keeps_what_finished() {
    require_root!();
    let pkgs = tempfile::tempdir().unwrap();
    let cr_path = packages(pkgs.path());
    let tokens = tokens_file(pkgs.path());
    let (ca_a, cert_a, key_a) = ca_and_leaf(pkgs.path(), "a");
    let (_, cert_b, key_b) = ca_and_leaf(pkgs.path(), "b");
    let good = FakeRoot::new();
    let bad = FakeRoot::new();
    let before = (tree(good.root()), tree(bad.root()));
    let cr = Cr::load(&cr_path).unwrap();
    let bodies = plan_bodies(&cr, &BTreeMap::new(), &[Mode::Apply]).unwrap();
    let p = rt().block_on(async {
        let gpu = json!({"nvidia.com/gpu.present": "true", "kubernetes.io/os": "linux"});
        let nodes = json!([
            {"name": "good", "labels": gpu,
             "address": start_tls_serve(good.root(), &tokens, &cert_a, &key_a).await},
            {"name": "bad", "labels": gpu,
             "address": start_tls_serve(bad.root(), &tokens, &cert_b, &key_b).await},
            {"name": "slow", "labels": gpu, "address": start_hostile(false).await},
        ]);
        let f = pkgs.path().join("nodes.json");
        std::fs::write(&f, nodes.to_string()).unwrap();
        let mut opts = options(vec![Mode::Apply], PLAN_TOKEN);
        opts.tls_ca = Some(ca_a.clone());
        opts.timeout = Duration::from_secs(120);
        let stop = Cancel::new();
        let s2 = stop.clone();
        // the stop comes once the two TLS nodes are done; the dripping one never is
        let mut progress = move |done: usize, _: usize| {
            if done == 2 {
                s2.abort(skyhook::process::CancelReason::Signal("SIGINT"));
            }
        };
        preview(
            &cr,
            load_nodes(&f, None).unwrap(),
            bodies,
            &opts,
            &stop,
            &mut progress,
        )
        .await
    });
    let v = p.to_json();
    assert_eq!(v["nodes"][0]["node"], "bad");
    let err = v["nodes"][0]["error"].as_str().unwrap();
    assert!(
        !err.starts_with("package ") && err.contains("certificate"),
        "{err}"
    );
    assert_eq!(v["nodes"][1]["node"], "good");
    assert_eq!(v["nodes"][1]["status"], "would_change");
    assert_eq!(
        v["nodes"][2],
        json!({"node": "slow", "status": "not_planned", "group": null,
                                      "error": "interrupted", "packages": []})
    );
    assert_eq!(
        p.summary(),
        "3 selected: 1 would change (1 plan), 0 converged, 1 failed, 1 not planned (interrupted)"
    );
    assert_eq!((tree(good.root()), tree(bad.root())), before);
}

/// A preview of `cr` (its packages beside it) planning `modes` on one node `n1` over `root`;
/// what it found.
fn preview_one(
    cr: &Path,
    root: &Path,
    tokens: &Path,
    modes: &[Mode],
) -> skyhook::fleet::run::Preview {
    let c = Cr::load(cr).unwrap();
    let bodies = plan_bodies(&c, &BTreeMap::new(), modes).unwrap();
    rt().block_on(async {
        let gpu = json!({"nvidia.com/gpu.present": "true", "kubernetes.io/os": "linux"});
        let address = start_serve(root, tokens).await;
        let f = cr.with_file_name("nodes.json");
        let nodes = json!([{"name": "n1", "labels": gpu, "address": address}]);
        std::fs::write(&f, nodes.to_string()).unwrap();
        let opts = options(modes.to_vec(), PLAN_TOKEN);
        preview(
            &c,
            load_nodes(&f, None).unwrap(),
            bodies,
            &opts,
            &Cancel::new(),
            &mut |_, _| {},
        )
        .await
    })
}

/// Preview `p` of [`preview_one`] says its node `n1` failed with `why`, in text and JSON.
fn assert_n1_failed(p: &skyhook::fleet::run::Preview, why: &str) {
    assert_eq!(
        p.render_text(),
        format!(
            "== failed on n1: {why}\n1 selected: 0 would change (0 plans), 0 converged, 1 failed\n"
        )
    );
    assert_eq!(p.to_json()["nodes"][0]["error"], json!(why));
}

/// Issue 32: a chain stops at its first failed package, and the preview says which later
/// packages were not planned because of it: `base` fails on a host where
/// `/etc/fleet-demo/broken` exists, so `tuning` (dependsOn `base`) is not planned.
#[test]
fn a_preview_names_the_packages_not_planned_after_a_failed_one() {
    require_root!();
    let pkgs = tempfile::tempdir().unwrap();
    let cr_path = packages(pkgs.path());
    write(
        &pkgs.path().join("base/skyhook_dir/base.rhai"),
        "if fs::exists(\"/etc/fleet-demo/broken\") { throw \"/etc/fleet-demo/broken is present\"; }\n",
    );
    let tokens = tokens_file(pkgs.path());
    let fr = fake_host("ubuntu-22.04");
    fr.write("/etc/fleet-demo/broken", "");
    let p = preview_one(&cr_path, fr.root(), &tokens, &[Mode::Apply]);
    let why = "package base: mode apply step base: <package>/skyhook_dir/base.rhai:1:43: \
               /etc/fleet-demo/broken is present; not planned because package base failed: tuning";
    assert_n1_failed(&p, why);
}

/// Issue 32: a failed mode stops its package's later modes, as the agent runs none after
/// it, and the preview names them: `tuning`'s apply fails where `/etc/fleet-demo/broken`
/// exists, so its apply-check is not planned (`base` plans both).
#[test]
fn a_preview_names_the_modes_not_planned_after_a_failed_one() {
    require_root!();
    let pkgs = tempfile::tempdir().unwrap();
    let cr_path = packages(pkgs.path());
    let tokens = tokens_file(pkgs.path());
    let fr = fake_host("ubuntu-22.04");
    fr.write("/etc/fleet-demo/broken", "");
    let p = preview_one(
        &cr_path,
        fr.root(),
        &tokens,
        &[Mode::Apply, Mode::ApplyCheck],
    );
    let why = "package tuning: mode apply step tune: <package>/skyhook_dir/tune.rhai:1:43: \
               /etc/fleet-demo/broken is present; not planned because mode apply failed: apply-check";
    assert_n1_failed(&p, why);
}
