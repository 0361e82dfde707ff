//! How `serve`'s `package_plan` stops (docs/fleet.md "Limits", "A chain"): a plan script
//! held to `--plan-max-operations`; a chain that stops at its first failed package; a
//! failed step whose planned changes leave the view later modes plan against; the plan's
//! lines naming `<package>`, never the server's temporary directory.

use serde_json::{Value, json};
use skyhook::remote::Client;

use crate::fleet::{PLAN_TOKEN, start_serve, tokens_file};
use crate::plan_attack::{current_rt, host_with, plan_events, plan_step, serve_bin};
use crate::util::tree;

/// Package `name` 1.0.0 whose modes (name to its steps' scripts) are `modes`.
fn package(name: &str, modes: &[(&str, &[(&str, &str)])]) -> Value {
    let mut m = serde_json::Map::new();
    let mut files = serde_json::Map::new();
    files.insert("skyhook_dir/check.rhai".into(), "let ok = true;\n".into());
    for (mode, steps) in modes {
        // the agent wants a check mode beside each mode
        m.insert(format!("{mode}-check"), json!([plan_step("check")]));
        m.insert(
            (*mode).into(),
            steps
                .iter()
                .map(|(s, _)| plan_step(s))
                .collect::<Vec<_>>()
                .into(),
        );
        for (s, script) in *steps {
            files.insert(format!("skyhook_dir/{s}.rhai"), (*script).into());
        }
    }
    json!({"config": {"schema_version": "v1", "root_dir": "/", "expected_config_files": [],
                      "package_name": name, "package_version": "1.0.0", "modes": m},
           "files": files})
}

/// A tight loop in a plan's script is stopped by the server's `--plan-max-operations`
/// (100,000 here), well before its script timeout, with the limit named.
#[test]
fn a_plan_script_is_held_to_the_servers_operations_limit() {
    require_root!();
    let fr = host_with(&[]);
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let (_srv, url) = serve_bin(
        fr.root(),
        &tokens,
        &[
            "--plan-max-operations",
            "100000",
            "--plan-script-timeout",
            "120s",
        ],
    );
    let body = json!({"id": "spin", "kind": "package_plan",
        "package": package("spin", &[("apply", &[("spin", "let n = 0;\nloop { n += 1; }\n")])])});
    let started = std::time::Instant::now();
    let (exit, _, _) = current_rt()
        .block_on(async { plan_events(&Client::new(&url, PLAN_TOKEN).unwrap(), &body).await });
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{exit:#}"
    );
    assert_eq!(exit["exit"]["code"], json!(1), "{exit:#}");
    let rendered = exit["rendered"].as_str().unwrap_or_default();
    assert!(
        rendered.contains("operations limit exceeded (max_operations = 100000)"),
        "{rendered}"
    );
}

/// A chain stops at its first failed package: `a` fails, so `b` (after it in `dependsOn`
/// order) is not planned; its script never runs, the stream says so, and the exit lists it
/// as not planned because `a` failed.
#[test]
fn a_chain_stops_after_a_failed_package() {
    require_root!();
    let fr = host_with(&[]);
    let before = tree(fr.root());
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let a = package("a", &[("apply", &[("a", "fail(\"a is broken\");\n")])]);
    let b = package(
        "b",
        &[(
            "apply",
            &[(
                "b",
                "print(\"b was planned\");\nfs::write(\"/etc/b.conf\", \"b\\n\");\n",
            )],
        )],
    );
    let body = json!({"id": "chain", "kind": "package_plan",
                      "packages": [{"package": a}, {"package": b}]});
    let (exit, lines, plans) = current_rt().block_on(async {
        let client = Client::new(&start_serve(fr.root(), &tokens).await, PLAN_TOKEN).unwrap();
        plan_events(&client, &body).await
    });
    assert!(!lines.contains("b was planned"), "{lines}");
    assert!(
        lines.contains("package b 1.0.0: not planned: package a failed"),
        "{lines}"
    );
    assert!(!plans.iter().any(|p| p["package"] == "b"), "{plans:#?}");
    assert_eq!(
        exit["exit"],
        json!({"code": 1, "error": "package a: mode apply: a step failed; \
                                    package b: not planned: package a failed"}),
        "{exit:#}"
    );
    assert_eq!(
        exit["packages"][1],
        json!({"package": "b", "version": "1.0.0",
               "exit": {"code": 1, "error": "not planned: package a failed"},
               "not_planned": "package a failed", "plans": [], "rendered": ""}),
        "{exit:#}"
    );
    assert_eq!(tree(fr.root()), before);
}

/// A failed step changes nothing, in a plan as in the agent's all-or-nothing apply: the file
/// a check step planned before it failed is not in the view the next check step (a check
/// runs all its steps) plans against. (A later mode is not planned at all after a failed
/// one: `a_failed_mode_stops_the_later_modes_of_its_package`, in serve's plan tests.)
#[test]
fn a_failed_steps_planned_changes_leave_the_view() {
    require_root!();
    let fr = host_with(&[]);
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let mut p = package("half", &[("apply", &[("ok", "let x = 1;\n")])]);
    p["config"]["modes"]["apply-check"] = json!([plan_step("half"), plan_step("look")]);
    p["files"]["skyhook_dir/half.rhai"] =
        "fs::write(\"/etc/half.conf\", \"x\\n\");\nfail(\"stopped halfway\");\n".into();
    p["files"]["skyhook_dir/look.rhai"] =
        "print(\"seen=\" + fs::exists(\"/etc/half.conf\"));\n".into();
    let body = json!({"id": "half", "kind": "package_plan", "modes": ["apply-check"],
                      "package": p});
    let (exit, lines, _) = current_rt().block_on(async {
        let client = Client::new(&start_serve(fr.root(), &tokens).await, PLAN_TOKEN).unwrap();
        plan_events(&client, &body).await
    });
    assert!(lines.contains("seen=false"), "{lines}\n{exit:#}");
}

/// Every line a plan streams names the package as `<package>`, never the server's temporary
/// directory (`/tmp/skyhook-package-plan-...`), as the exit event already did.
#[test]
fn the_plans_lines_name_the_package_not_the_servers_directory() {
    require_root!();
    let fr = host_with(&[]);
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let p = package(
        "q",
        &[(
            "apply",
            &[("q", "let r = 1;\nquery([\"/no/such/tool\"]);\n")],
        )],
    );
    let body = json!({"id": "q", "kind": "package_plan", "package": p});
    let (exit, lines, _) = current_rt().block_on(async {
        let client = Client::new(&start_serve(fr.root(), &tokens).await, PLAN_TOKEN).unwrap();
        plan_events(&client, &body).await
    });
    assert!(
        !lines.contains("skyhook-package-plan-"),
        "a line names the server's directory:\n{lines}"
    );
    assert!(
        lines.contains("<package>/skyhook_dir/q.rhai:2"),
        "{lines}\n{exit:#}"
    );
}
