//! The 50 acceptance cases of agent-contract.md section 15, one test each.
//!
//! Every case runs `skyhook-agent MODE R $T/pkg [PAYLOAD]` on its own [`FakeRoot`] `R`, with
//! `T` = `/t` (host path; on disk `R/t`). `F` = `$T/state/flags`, `L` = `$T/log/demo/1.0.0`.
//! The cases are written with root mount `/`; here the root mount is `R`, so only the
//! `root_mount:` banner line differs from the text of the case.

use std::collections::BTreeSet;
use std::fs;
use std::time::Duration;

use serde_json::{Value, json};

use crate::util::*;

/// Flag of fixture P's `foo` step (`['a', 'b']_[0]`).
const FOO_FLAG: &str = "demo/1.0.0/foo.sh_WydhJywgJ2InXV9bMF0=";
/// Content of a flag written for a step with `idempotence: false`.
const FLAG_AUTO: &str = "last_run: {TS}\nstep_always_runs: False";
/// Content of a flag written for a step with `idempotence: true`.
const FLAG_DISABLED: &str = "last_run: {TS}\nstep_always_runs: True";
/// A Python-written history at version 0.0.9.
const HISTORY_009: &str = r#"{"current-version": "0.0.9", "history": [{"version": "0.0.9", "time": "2024-08-28T14:33:20.123456+00:00"}]}"#;

/// Host path `F/<rel>`.
fn f(rel: &str) -> String {
    format!("{T}/state/flags/{rel}")
}

/// Host path `L/<rel>`.
fn l(rel: &str) -> String {
    format!("{T}/log/demo/1.0.0/{rel}")
}

const HISTORY: &str = "/t/state/history/demo.json";

fn history_json(fr: &FakeRoot) -> Value {
    serde_json::from_str(&fr.read(HISTORY)).expect("history is JSON")
}

fn with_step_field(mut s: Value, key: &str, v: Value) -> Value {
    s[key] = v;
    s
}

/// The single `L/<step>-FTS.log` (panics unless exactly one).
#[track_caller]
fn single_log(fr: &FakeRoot, step_re: &str) -> String {
    let logs = fr.logs_matching(&format!(r"{step_re}-{{FTS}}\.log"));
    assert_eq!(
        logs.len(),
        1,
        "expected exactly one {step_re} log, got {logs:?}"
    );
    logs[0].clone()
}

// ---------------------------------------------------------------------------------------
// Command line and environment

#[test]
fn case_01_banner() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    let run = fr.run("apply");
    run.code(0);
    let root_line = format!("root_mount: {}", fr.root_str());
    let expected = [
        "--------------------",
        "-CLI CONFIGURATION--",
        "mode: apply",
        &root_line,
        "copy_dir: /t/pkg",
        "interrupt_data: None",
        "always_run_step: False",
        "-ENV CONFIGURATION--",
        "COPY_RESOLV: False",
        "OVERLAY_ALWAYS_RUN_STEP: False",
        "SKYHOOK_RESOURCE_ID: sky-0000-1_demo_1.0.0",
        "SKYHOOK_DATA_DIR: /skyhook-package",
        "SKYHOOK_ROOT_DIR: /t/state",
        "SKYHOOK_LOG_DIR: /t/log",
        "SKYHOOK_AGENT_BUFFER_LIMIT: 8192",
        "SKYHOOK_AGENT_WRITE_LOGS: True",
        "Directory CONFIGURATION",
        "flag_dir: /t/state/flags/demo/1.0.0",
        "log_dir: /t/log/demo/1.0.0",
        "history_file: /t/state/history/demo.json",
        "--------------------",
    ];
    let lines = run.lines();
    assert!(lines.len() >= 21, "short stdout:\n{}", run.stdout);
    assert_eq!(&lines[..21], &expected[..]);
}

#[test]
fn case_02_unknown_mode() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    let run = fr.run("future-stage");
    run.code(0);
    assert!(
        run.stderr.contains("future-stage"),
        "stderr: {}",
        run.stderr
    );
    assert!(!fr.exists("/t/state"));
    // After the banner, as Python (section 2).
    assert!(
        run.stdout.contains("-CLI CONFIGURATION--"),
        "{}",
        run.stdout
    );
    // Without a usable SKYHOOK_RESOURCE_ID: still exit 0, no banner, nothing written.
    let mut fr = FakeRoot::new();
    fr.write_p();
    fr.unset_env("SKYHOOK_RESOURCE_ID");
    let run = fr.run("future-stage");
    run.code(0);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(!fr.exists("/t/state"));
}

#[test]
fn case_03_bad_resource_id() {
    require_root!();
    let mut fr = FakeRoot::new();
    fr.write_p();
    fr.set_env("SKYHOOK_RESOURCE_ID", "nounderscore");
    let run = fr.run("apply");
    run.code(1);
    assert!(!fr.exists("/t/state"));
    assert!(!fr.exists("/t/log"));
    assert!(
        !run.stdout.contains("foo a b"),
        "foo.sh ran: {}",
        run.stdout
    );
}

#[test]
fn case_04_argument_count() {
    require_root!();
    let fr = FakeRoot::new();
    let before = fr.snapshot();
    let run = fr.run_args(&["apply"]);
    run.code(2);
    assert!(
        run.stderr
            .contains("usage: skyhook-agent MODE [ROOT_MOUNT] COPY_DIR [INTERRUPT_DATA]"),
        "stderr: {}",
        run.stderr
    );
    assert_eq!(fr.snapshot(), before, "something was created");
}

#[test]
fn case_05_legacy_two_argument_form() {
    require_root!();
    // The data dir is a container-side path: it must not exist on this machine either.
    assert!(
        !std::path::Path::new("/t/missing").exists(),
        "/t/missing exists on this machine"
    );
    let mut fr = FakeRoot::new();
    fr.set_env("SKYHOOK_DATA_DIR", "/t/missing");
    let (run, present) = fr.run_legacy(&["apply", "/t/pkg2"], "/t/pkg2");
    let lines = run.lines();
    assert!(
        lines.len() >= 5,
        "short stdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    assert_eq!(lines[3], "root_mount: /root");
    assert_eq!(lines[4], "copy_dir: /t/pkg2");
    run.code(1);
    assert!(!present, "/root/t/pkg2 was created");
}

#[test]
fn case_06_legacy_interrupt_form() {
    require_root!();
    let fr = FakeRoot::new();
    let (run, present) = fr.run_legacy(&["interrupt", "/t/pkg", "bm90LWpzb24="], "/t/state");
    let lines = run.lines();
    assert!(
        lines.len() >= 6,
        "short stdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    assert_eq!(lines[3], "root_mount: /root");
    assert_eq!(lines[5], "interrupt_data: bm90LWpzb24=");
    run.code(1);
    assert!(!present, "/root/t/state was created");
}

#[test]
fn case_07_validate() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    let cfg = fr.t("pkg/config.json");
    let cfg = cfg.to_str().unwrap();
    let before = fr.snapshot();
    let run = fr.run_args(&["validate", cfg]);
    run.code(0);
    assert!(
        !run.stdout.contains("CONFIGURATION"),
        "banner printed: {}",
        run.stdout
    );
    assert_eq!(fr.snapshot(), before, "validate created something");

    fs::remove_file(fr.t("pkg/skyhook_dir/foo_check.sh")).unwrap();
    let run = fr.run_args(&["validate", cfg]);
    run.code(1);
    assert!(
        run.stderr.contains("foo_check.sh"),
        "stderr: {}",
        run.stderr
    );
}

// ---------------------------------------------------------------------------------------
// Preparation and validation

#[test]
fn case_08_legacy_copy() {
    require_root!();
    let mut fr = FakeRoot::new();
    let cfg = serde_json::to_vec_pretty(&p_config()).unwrap();
    fr.write("/t/src/config.json", &cfg);
    fr.write_mode(
        "/t/src/skyhook_dir/foo.sh",
        "#!/bin/sh\necho \"foo $1 $2\"\n",
        0o755,
    );
    fr.write_mode(
        "/t/src/skyhook_dir/foo_check.sh",
        "#!/bin/sh\nexit 0\n",
        0o755,
    );
    // SKYHOOK_DATA_DIR is a path in the agent's own filesystem: R/t/src.
    let src = fr.t("src");
    fr.set_env("SKYHOOK_DATA_DIR", src.to_str().unwrap());
    let run = fr.run("apply");
    run.code(0);
    assert_eq!(fs::read(fr.t("pkg/config.json")).unwrap(), cfg);
    assert!(fr.exists(&f(FOO_FLAG)));
}

fn overlay_package(fr: &FakeRoot) {
    fr.write_p();
    fr.write_mode("/t/pkg/root_dir/t/overlay/etc/demo.conf", "k=v\n", 0o640);
}

#[test]
fn case_09_overlay() {
    require_root!();
    let fr = FakeRoot::new();
    overlay_package(&fr);
    fr.run("apply").code(0);
    assert_eq!(fr.read("/t/overlay/etc/demo.conf"), "k=v\n");
    assert_eq!(fr.mode("/t/overlay/etc/demo.conf"), 0o640);

    // Existing directories keep their mode [fix]; that includes R itself.
    let fr = FakeRoot::new();
    overlay_package(&fr);
    fs::set_permissions(
        fr.t("pkg/root_dir/t/overlay/etc"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    fs::create_dir_all(fr.t("overlay/etc")).unwrap();
    fs::set_permissions(
        fr.t("overlay/etc"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let root_mode = fr.mode("/");
    fr.run("apply").code(0);
    assert_eq!(fr.read("/t/overlay/etc/demo.conf"), "k=v\n");
    assert_eq!(fr.mode("/t/overlay/etc"), 0o755);
    assert_eq!(fr.mode("/"), root_mode, "the root mount's mode changed");
}

#[test]
fn case_10_no_overlay_when_uninstalling() {
    require_root!();
    let fr = FakeRoot::new();
    overlay_package(&fr);
    let mut cfg = p_config();
    cfg["modes"]["uninstall"] = json!([step("un", "un.sh", &[])]);
    cfg["modes"]["uninstall-check"] = json!([step("un_check", "un_check.sh", &[])]);
    fr.write_config(&cfg);
    fr.write_step("un.sh", "#!/bin/sh\nexit 0\n");
    fr.write_step("un_check.sh", "#!/bin/sh\nexit 0\n");
    fr.run("uninstall").code(0);
    assert!(!fr.exists("/t/overlay"));
}

#[test]
fn case_11_expected_config_files() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    let mut cfg = p_config();
    cfg["expected_config_files"] = json!(["settings.conf"]);
    fr.write_config(&cfg);
    let run = fr.run("apply");
    run.code(1);
    assert!(
        run.all().contains("settings.conf"),
        "no mention of settings.conf: {}",
        run.all()
    );
    assert!(!fr.exists(&f("START")));
    assert!(!run.stdout.contains("foo a b"), "foo.sh ran");
    assert!(fr.logs_matching(r"foo\.sh-.*").is_empty());

    fr.write("/t/pkg/configmaps/settings.conf", "");
    fr.run("apply").code(0);
}

#[test]
fn case_12_missing_step_file() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    fs::remove_file(fr.t("pkg/skyhook_dir/foo_check.sh")).unwrap();
    let run = fr.run("apply");
    run.code(1);
    assert!(
        run.all().contains("foo_check.sh"),
        "error does not name foo_check.sh: {}",
        run.all()
    );
    assert!(!fr.exists("/t/state"));
}

#[test]
fn case_13_schema_and_rule_violations() {
    require_root!();
    let foo = step("foo", "foo.sh", &["a", "b"]);
    let chk = p_check_step();
    let mut variants: Vec<(&str, Value)> = Vec::new();
    let mut a = p_config();
    a["package_version"] = json!("1.0");
    variants.push(("a: version 1.0", a));
    variants.push((
        "b: empty returncodes",
        config(json!({"apply": [with_step_field(foo.clone(), "returncodes", json!([]))], "apply-check": [chk]})),
    ));
    variants.push(("c: no apply-check", config(json!({"apply": [foo.clone()]}))));
    variants.push((
        "d: upgrade_step in apply",
        config(json!({"apply": [with_step_field(foo.clone(), "upgrade_step", json!(true))], "apply-check": [chk]})),
    ));
    let u = with_step_field(step("u", "u.sh", &["x"]), "upgrade_step", json!(true));
    let uc = with_step_field(
        step("u_check", "u_check.sh", &[]),
        "upgrade_step",
        json!(true),
    );
    variants.push((
        "e: upgrade step with arguments",
        config(json!({"apply": [foo.clone()], "apply-check": [chk], "upgrade": [u], "upgrade-check": [uc]})),
    ));
    variants.push(("f: only apply-check", config(json!({"apply-check": [chk]}))));
    for (what, cfg) in variants {
        let fr = FakeRoot::new();
        fr.write_p();
        fr.write_step("u.sh", "#!/bin/sh\nexit 0\n");
        fr.write_step("u_check.sh", "#!/bin/sh\nexit 0\n");
        fr.write_config(&cfg);
        let run = fr.run("apply");
        assert_eq!(
            run.code, 1,
            "variant {what}: exit status\n{}\n{}",
            run.stdout, run.stderr
        );
        assert!(!fr.exists("/t/state"), "variant {what}: $T/state created");
    }
    // (g) "apply": [] with only check steps loads.
    let fr = FakeRoot::new();
    fr.write_p();
    fr.write_config(&config(json!({"apply": [], "apply-check": [chk]})));
    fr.run("apply-check").code(0);
}

// ---------------------------------------------------------------------------------------
// Run modes and flags

#[test]
fn case_14_first_apply() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    let run = fr.run("apply");
    run.code(0);
    assert!(fr.exists(&f("START")));
    assert_eq!(fr.read(&f("START")), "");
    assert_full_match(&fr.read(&f(FOO_FLAG)), FLAG_AUTO);
    run.has_line("apply foo.sh ['a', 'b'] [0] Idempotence.Auto True");
    run.has_line_ending("SUCEEDED: foo.sh a b");
    let log = single_log(&fr, r"foo\.sh");
    let content = fr.read(&l(&log));
    assert!(
        re(r"^\[out\]{TS} foo a b$").is_match(&content),
        "log: {content:?}"
    );
    assert_eq!(fr.read_opt(&l(&format!("{log}.err"))).as_deref(), Some(""));
}

#[test]
fn case_15_skip_when_flagged() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    fr.run("apply").code(0);
    let run = fr.run("apply");
    run.code(0);
    assert_eq!(
        fr.logs_matching(r"foo\.sh-{FTS}\.log").len(),
        1,
        "a second log appeared"
    );
    run.matches(r"^Skipping foo.sh because /+.*/state/flags/demo/1\.0\.0/foo\.sh_WydhJywgJ2InXV9bMF0= exists\.$");
}

#[test]
fn case_16_always_run_override() {
    require_root!();
    let mut fr = FakeRoot::new();
    fr.write_p();
    fr.run("apply").code(0);
    fr.set_env("OVERLAY_ALWAYS_RUN_STEP", "TRUE");
    let run = fr.run("apply");
    run.code(0);
    assert_eq!(fr.logs_matching(r"foo\.sh-{FTS}\.log").len(), 2);
    run.has_line("always_run_step: True");
    run.has_line_between(
        "WARNING: ",
        "exists for foo.sh but OVERLAY_ALWAYS_RUN_STEP flag is set so running anyway.",
    );
}

#[test]
fn case_17_self_managed_idempotence() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    let foo = with_step_field(
        step("foo", "foo.sh", &["a", "b"]),
        "idempotence",
        json!(true),
    );
    fr.write_config(&config(
        json!({"apply": [foo], "apply-check": [p_check_step()]}),
    ));
    let first = fr.run("apply");
    first.code(0);
    let second = fr.run("apply");
    second.code(0);
    for run in [&first, &second] {
        run.matches(r"^\[out\]{TS} foo a b$");
        run.has_line_ending("Idempotence.Disabled True");
    }
    assert_eq!(
        fr.logs_matching(r"foo\.sh-{FTS}\.log").len(),
        2,
        "the script did not run twice"
    );
    assert_full_match(&fr.read(&f(FOO_FLAG)), FLAG_DISABLED);
    second.has_line("Flag exists but idempotence is Idempotence.Disabled so running step.");
}

#[test]
fn case_18_config_ignores_flags() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    let mut cfg = p_config();
    cfg["modes"]["config"] = json!([step("c", "c.sh", &[])]);
    cfg["modes"]["config-check"] = json!([step("c_check", "c_check.sh", &[])]);
    fr.write_config(&cfg);
    fr.write_step("c.sh", "#!/bin/sh\necho c ran\n");
    fr.write_step("c_check.sh", "#!/bin/sh\nexit 0\n");
    fr.write(&f("demo/1.0.0/c.sh_W11fWzBd"), "stale");
    let run = fr.run("config");
    run.code(0);
    run.matches(r"^\[out\]{TS} c ran$");
    run.has_line(
        "Flag exists but CONFIG, UNINSTALL, and UPGRADE mode don't support idempotence so running step anyway.",
    );
    assert_full_match(&fr.read(&f("demo/1.0.0/c.sh_W11fWzBd")), FLAG_AUTO);
}

#[test]
fn case_19_post_interrupt_honours_flags() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    let mut cfg = p_config();
    cfg["modes"]["post-interrupt"] = json!([step("p", "p.sh", &[])]);
    cfg["modes"]["post-interrupt-check"] = json!([step("p_check", "p_check.sh", &[])]);
    fr.write_config(&cfg);
    fr.write_step("p.sh", "#!/bin/sh\necho ran >> /t/p.count\n");
    fr.write_step("p_check.sh", "#!/bin/sh\nexit 0\n");
    fr.run("post-interrupt").code(0);
    let second = fr.run("post-interrupt");
    second.code(0);
    assert_eq!(fr.read("/t/p.count"), "ran\n");
    second.has_line_between("Skipping p.sh because ", " exists.");
}

#[test]
fn case_20_same_script_different_arguments() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    fr.write_config(&config(json!({
        "apply": [step("foo", "foo.sh", &[]), step("foo_a", "foo.sh", &["a"])],
        "apply-check": [p_check_step()],
    })));
    let run = fr.run("apply");
    run.code(0);
    let i0 = run
        .line_index("apply foo.sh [] [0] Idempotence.Auto True")
        .expect("first header");
    let i1 = run
        .line_index("apply foo.sh ['a'] [0] Idempotence.Auto True")
        .expect("second header");
    assert!(i0 < i1, "steps ran out of order:\n{}", run.stdout);
    assert!(fr.exists(&f("demo/1.0.0/foo.sh_W11fWzBd")));
    assert!(fr.exists(&f("demo/1.0.0/foo.sh_WydhJ11fWzBd")));
    let logs = fr.logs_matching(r"foo\.sh-{FTS}\.log");
    assert_eq!(logs.len(), 2, "logs: {logs:?}");
}

#[test]
fn case_21_marker_containing_slash() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    fr.write_config(&config(json!({
        "apply": [step("foo", "foo.sh", &["?"])], "apply-check": [p_check_step()],
    })));
    fr.run("apply").code(0);
    assert!(
        fs::metadata(fr.flag("demo/1.0.0/foo.sh_Wyc/J11fWzBd"))
            .map(|m| m.is_file())
            .unwrap_or(false)
    );
    assert!(
        fs::metadata(fr.flag("demo/1.0.0/foo.sh_Wyc"))
            .map(|m| m.is_dir())
            .unwrap_or(false)
    );
}

#[test]
fn case_22_marker_rendering() {
    require_root!();
    for (args, codes, flag) in [
        (
            vec!["it's"],
            json!([0, 1]),
            "demo/1.0.0/foo.sh_WyJpdCdzIl1fWzAsIDFd",
        ),
        (
            vec!["1", "2"],
            json!([0, 1, 2]),
            "demo/1.0.0/foo.sh_WycxJywgJzInXV9bMCwgMSwgMl0=",
        ),
    ] {
        let fr = FakeRoot::new();
        fr.write_p();
        let foo = with_step_field(step("foo", "foo.sh", &args), "returncodes", codes);
        fr.write_config(&config(
            json!({"apply": [foo], "apply-check": [p_check_step()]}),
        ));
        fr.run("apply").code(0);
        assert!(
            fr.exists(&f(flag)),
            "missing flag {flag}; flags: {:?}",
            fr.list("/t/state/flags/demo/1.0.0")
        );
    }
}

#[test]
fn case_23_env_substitution() {
    require_root!();
    let mut fr = FakeRoot::new();
    fr.write_p();
    fr.write_config(&config(json!({
        "apply": [step("foo", "foo.sh", &["env:MYVAR"])], "apply-check": [p_check_step()],
    })));
    fr.write_step("foo.sh", "#!/bin/sh\nprintf '%s' \"$1\" > /t/arg1\n");
    fr.set_env("MYVAR", "hello");
    let run = fr.run("apply");
    run.code(0);
    assert_eq!(fr.read("/t/arg1"), "hello");
    run.has_line("apply foo.sh ['env:MYVAR'] [0] Idempotence.Auto True");
    run.has_line_ending("SUCEEDED: foo.sh hello");
    assert!(fr.exists(&f("demo/1.0.0/foo.sh_WydlbnY6TVlWQVInXV9bMF0=")));

    fr.set_env("MYVAR", "changed");
    let run = fr.run("apply");
    run.code(0);
    run.has_line_between("Skipping foo.sh because ", " exists.");
    assert_eq!(fr.read("/t/arg1"), "hello");
}

#[test]
fn case_24_missing_env_variable() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    fr.write_config(&config(json!({
        "apply": [step("foo", "foo.sh", &["env:NOPE1", "env:NOPE2"])], "apply-check": [p_check_step()],
    })));
    let run = fr.run("apply");
    run.code(1);
    let i1 = run
        .line_index("foo.sh: Expected environment variable did not exist: NOPE1")
        .expect("NOPE1 line");
    let i2 = run
        .line_index("foo.sh: Expected environment variable did not exist: NOPE2")
        .expect("NOPE2 line");
    assert_eq!(
        i2,
        i1 + 1,
        "NOPE2 line does not follow NOPE1 line:\n{}",
        run.stdout
    );
    assert!(fr.logs_matching(r"foo\.sh-.*\.log").is_empty());
    assert!(
        fr.list("/t/state/flags/demo/1.0.0").is_empty(),
        "a flag was written"
    );
}

#[test]
fn case_25_step_environment() {
    require_root!();
    let mut fr = FakeRoot::new();
    fr.write_p();
    let foo = with_step_field(
        step("foo", "foo.sh", &["a", "b"]),
        "env",
        json!({"STEP_ROOT": "bogus", "SKYHOOK_DIR": "bogus", "X": "1"}),
    );
    fr.write_config(&config(
        json!({"apply": [foo], "apply-check": [p_check_step()]}),
    ));
    fr.write_step(
        "foo.sh",
        "#!/bin/sh\nprintf '%s\\n' \"$STEP_ROOT\" \"$SKYHOOK_DIR\" \"$X\" \"$PKGVAR\" \"$(pwd -P)\" > /t/env.out\n",
    );
    fr.set_env("PKGVAR", "pv");
    fr.run("apply").code(0);
    assert_eq!(
        fr.read("/t/env.out"),
        "/t/pkg/skyhook_dir\n/t/pkg\n1\npv\n/t/pkg\n"
    );
}

#[test]
fn case_26_execute_bit() {
    require_root!();
    for (before, after) in [(0o644, 0o755), (0o640, 0o751)] {
        let fr = FakeRoot::new();
        fr.write_p();
        fr.write_mode(
            "/t/pkg/skyhook_dir/foo.sh",
            "#!/bin/sh\necho \"foo $1 $2\"\n",
            before,
        );
        fr.run("apply").code(0);
        assert_eq!(
            fr.mode("/t/pkg/skyhook_dir/foo.sh"),
            after,
            "from {before:o}"
        );
    }
}

#[test]
fn case_27_failure_stops_the_run() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    fr.write_config(&config(json!({
        "apply": [step("bad", "bad.sh", &[]), step("foo", "foo.sh", &["a", "b"])],
        "apply-check": [p_check_step()],
    })));
    fr.write_step("bad.sh", "#!/bin/sh\nexit 7\n");
    let run = fr.run("apply");
    run.code(1);
    run.has_line_ending("FAILED: bad.sh  7");
    assert!(!fr.exists(&f("demo/1.0.0/bad.sh_W11fWzBd")));
    assert!(!fr.exists(&f(FOO_FLAG)));
    assert!(fr.logs_matching(r"foo\.sh-.*").is_empty(), "foo.sh ran");
}

#[test]
fn case_28_accepted_non_zero_status() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    let foo = with_step_field(
        step("foo", "foo.sh", &["a", "b"]),
        "returncodes",
        json!([0, 3]),
    );
    fr.write_config(&config(
        json!({"apply": [foo], "apply-check": [p_check_step()]}),
    ));
    fr.write_step("foo.sh", "#!/bin/sh\necho \"foo $1 $2\"\nexit 3\n");
    fr.run("apply").code(0);
    assert!(fr.exists(&f("demo/1.0.0/foo.sh_WydhJywgJ2InXV9bMCwgM10=")));

    let fr = FakeRoot::new();
    fr.write_p();
    let foo = with_step_field(
        step("foo", "foo.sh", &["a", "b"]),
        "returncodes",
        json!([0, 1]),
    );
    fr.write_config(&config(
        json!({"apply": [foo], "apply-check": [p_check_step()]}),
    ));
    fr.write_step("foo.sh", "#!/bin/sh\necho \"foo $1 $2\"\nexit 2\n");
    fr.run("apply").code(1);
}

#[test]
fn case_29_log_line_format() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    fr.write_step(
        "foo.sh",
        "#!/bin/sh\nprintf 'one\\ntwo\\n'; printf 'e1\\n' >&2\n",
    );
    fr.run("apply").code(0);
    let log = single_log(&fr, r"foo\.sh");
    assert_full_match(
        &fr.read(&l(&log)),
        r"\[out\]{TS} one\n\[out\]{TS} two\n\[out\]{TS} ",
    );
    assert_full_match(
        &fr.read(&l(&format!("{log}.err"))),
        r"\[err\]{TS} e1\n\[err\]{TS} ",
    );
}

#[test]
fn case_30_silent_step() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    fr.write_step("foo.sh", "#!/bin/sh\n:\n");
    fr.run("apply").code(0);
    let log = single_log(&fr, r"foo\.sh");
    assert_eq!(fs::metadata(fr.host(&l(&log))).unwrap().len(), 0);
    assert_eq!(
        fs::metadata(fr.host(&l(&format!("{log}.err"))))
            .unwrap()
            .len(),
        0
    );
}

#[test]
fn case_31_logs_disabled() {
    require_root!();
    let mut fr = FakeRoot::new();
    fr.write_p();
    fr.set_env("SKYHOOK_AGENT_WRITE_LOGS", "false");
    let run = fr.run("apply");
    run.code(0);
    run.has_line("SKYHOOK_AGENT_WRITE_LOGS: False");
    assert!(!fr.exists("/t/log"), "$T/log exists");
    run.matches(r"^\[out\]{TS} foo a b$");
}

#[test]
fn case_32_retention() {
    require_root!();
    let mut fr = FakeRoot::new();
    fr.write_p();
    fr.set_env("OVERLAY_ALWAYS_RUN_STEP", "true");
    let pattern = r"foo\.sh-{FTS}\.log";
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for i in 0..7 {
        fr.run("apply").code(0);
        let now: BTreeSet<String> = fr.logs_matching(pattern).into_iter().collect();
        let new: Vec<&String> = now.difference(&seen).collect();
        assert_eq!(
            new.len(),
            1,
            "run {i} added {new:?} (listing {now:?}, seen before {seen:?}): a log name must be new, not a reused pruned one"
        );
        seen.extend(now);
    }
    let kept: Vec<String> = fr.logs_matching(pattern);
    let newest: Vec<String> = seen.iter().rev().take(5).rev().cloned().collect();
    assert_eq!(kept, newest, "retention kept the wrong files");
    let errs: Vec<String> = fr
        .list("/t/log/demo/1.0.0")
        .into_iter()
        .filter(|n| n.ends_with(".log.err"))
        .collect();
    let expected_errs: Vec<String> = kept.iter().map(|n| format!("{n}.err")).collect();
    assert_eq!(
        errs, expected_errs,
        "every kept .log has its .log.err and orphans are removed"
    );
}

#[test]
fn case_33_small_buffer_long_lines() {
    require_root!();
    let mut fr = FakeRoot::new();
    fr.write_p();
    fr.set_env("SKYHOOK_AGENT_BUFFER_LIMIT", "4");
    let (a, b, c) = ("a".repeat(1000), "b".repeat(1000), "c".repeat(1000));
    fr.write_step(
        "foo.sh",
        &format!("#!/bin/sh\necho {a}\necho {b}\necho {c}\n"),
    );
    fr.run("apply").code(0);
    let log = fr.read(&l(&single_log(&fr, r"foo\.sh")));
    assert_eq!(log.matches('\n').count(), 3);
    assert_full_match(
        &log,
        r"\[out\]{TS} a{1000}\n\[out\]{TS} b{1000}\n\[out\]{TS} c{1000}\n\[out\]{TS} ",
    );
}

// ---------------------------------------------------------------------------------------
// Check modes and history

#[test]
fn case_34_apply_check_success() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    fr.run("apply-check").code(0);
    assert_eq!(fr.read(&f("check_results")), "foo_check.sh False");
    assert_eq!(
        fr.read_opt(&f("apply-check_ALL_CHECKED")).as_deref(),
        Some("")
    );
    assert_full_match(
        &fr.read(HISTORY),
        r#"\{"current-version": "1\.0\.0", "history": \[\{"version": "1\.0\.0", "time": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00"\}\]\}"#,
    );
}

#[test]
fn case_35_checks_run_to_the_end() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    fr.write_config(&config(json!({
        "apply": [step("foo", "foo.sh", &["a", "b"])],
        "apply-check": [step("a_check", "a_check.sh", &[]), step("b_check", "b_check.sh", &[])],
    })));
    fr.write_step("a_check.sh", "#!/bin/sh\nexit 1\n");
    fr.write_step("b_check.sh", "#!/bin/sh\nexit 0\n");
    fr.write(&f("apply-check_ALL_CHECKED"), "");
    fr.run("apply-check").code(1);
    single_log(&fr, r"a_check\.sh");
    single_log(&fr, r"b_check\.sh");
    assert_eq!(
        fr.read(&f("check_results")),
        "a_check.sh True\nb_check.sh False"
    );
    assert!(
        !fr.exists(&f("apply-check_ALL_CHECKED")),
        "stale ALL_CHECKED kept"
    );
    assert!(!fr.exists(HISTORY));
}

#[test]
fn case_36_check_mode_without_steps() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_config(&config(json!({
        "config": [step("c", "c.sh", &[])], "config-check": [step("c_check", "c_check.sh", &[])],
    })));
    fr.write_step("c.sh", "#!/bin/sh\nexit 0\n");
    fr.write_step("c_check.sh", "#!/bin/sh\nexit 0\n");
    let run = fr.run("apply-check");
    run.code(0);
    assert!(
        run.stderr.contains("apply-check") && run.stderr.to_lowercase().contains("no "),
        "no warning about missing apply-check steps: {}",
        run.stderr
    );
    assert!(!fr.exists(&f("check_results")));
    assert_eq!(history_json(&fr)["current-version"], json!("1.0.0"));
}

#[test]
fn case_37_history_prepends() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    fr.write(HISTORY, HISTORY_009);
    fr.run("apply-check").code(0);
    let h = history_json(&fr);
    assert_eq!(h["current-version"], json!("1.0.0"));
    let entries = h["history"].as_array().expect("history array");
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["version"], json!("1.0.0"));
    assert_eq!(
        entries[1],
        json!({"version": "0.0.9", "time": "2024-08-28T14:33:20.123456+00:00"})
    );
    // Section 6.3: Python's bytes (", " and ": " separators, no newline, key order).
    assert_full_match(
        &fr.read(HISTORY),
        r#"\{"current-version": "1\.0\.0", "history": \[\{"version": "1\.0\.0", "time": "[^"]*\+00:00"\}, \{"version": "0\.0\.9", "time": "2024-08-28T14:33:20\.123456\+00:00"\}\]\}"#,
    );
}

#[test]
fn case_38_corrupt_history() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    fr.write(HISTORY, "{");
    let run = fr.run("apply-check");
    run.code(0);
    assert_eq!(fr.read("/t/state/history/demo.json.backup"), "{");
    let h = history_json(&fr);
    assert_eq!(h["current-version"], json!("1.0.0"));
    let entries = h["history"].as_array().expect("history array");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["version"], json!("1.0.0"));
    run.has_line_between(
        "Failed to load existing history, corrupt history file moved to",
        "demo.json.backup...",
    );
}

// ---------------------------------------------------------------------------------------
// Upgrade and uninstall

fn upgrade_package(fr: &FakeRoot) {
    fr.write_p();
    let u = json!({"name": "u", "path": "u.sh", "arguments": [], "returncodes": [0], "on_host": true,
                   "idempotence": false, "upgrade_step": true, "env": {"PREVIOUS_VERSION": "x"}});
    let uc = with_step_field(
        step("u_check", "u_check.sh", &[]),
        "upgrade_step",
        json!(true),
    );
    fr.write_config(&config(json!({
        "apply": [step("foo", "foo.sh", &["a", "b"])], "apply-check": [p_check_step()],
        "upgrade": [u, step("r", "r.sh", &["k"])], "upgrade-check": [uc],
    })));
    let body = "#!/bin/sh\necho \"$*|$PREVIOUS_VERSION|$CURRENT_VERSION\" >> /t/calls\n";
    for s in ["u.sh", "r.sh", "u_check.sh"] {
        fr.write_step(s, body);
    }
}

#[test]
fn case_39_upgrade_with_history() {
    require_root!();
    let fr = FakeRoot::new();
    upgrade_package(&fr);
    fr.write(HISTORY, HISTORY_009);
    let run = fr.run("upgrade");
    run.code(0);
    assert_eq!(
        fr.calls().as_deref(),
        Some("0.0.9 1.0.0|0.0.9|1.0.0\nk|0.0.9|1.0.0\n")
    );
    run.has_line("upgrade u.sh ['0.0.9', '1.0.0'] [0] Idempotence.Auto True");
    assert!(fr.exists(&f("demo/1.0.0/u.sh_W11fWzBd")));
    assert!(fr.exists(&f("demo/1.0.0/r.sh_WydrJ11fWzBd")));
    assert_eq!(fr.read(HISTORY), HISTORY_009, "upgrade changed the history");
}

#[test]
fn case_40_upgrade_without_history() {
    require_root!();
    let fr = FakeRoot::new();
    upgrade_package(&fr);
    let run = fr.run("upgrade");
    run.code(0);
    let calls = fr.calls().expect("$T/calls");
    assert_eq!(calls.lines().next(), Some("unknown 1.0.0|unknown|1.0.0"));
    run.has_line("no existing history found for demo, could be first installation...");
    assert!(
        fs::metadata(fr.host("/t/state/history"))
            .map(|m| m.is_dir())
            .unwrap_or(false)
    );
    assert!(!fr.exists(HISTORY));
}

#[test]
fn case_41_upgrade_check_records() {
    require_root!();
    let fr = FakeRoot::new();
    upgrade_package(&fr);
    fr.write(HISTORY, HISTORY_009);
    fr.run("upgrade").code(0);
    fr.run("upgrade-check").code(0);
    let calls = fr.calls().expect("$T/calls");
    assert_eq!(
        calls.lines().last(),
        Some("0.0.9 1.0.0|0.0.9|1.0.0"),
        "calls: {calls:?}"
    );
    let h = history_json(&fr);
    assert_eq!(h["current-version"], json!("1.0.0"));
    assert_eq!(h["history"][0]["version"], json!("1.0.0"));
    assert_eq!(
        h["history"][1],
        json!({"version": "0.0.9", "time": "2024-08-28T14:33:20.123456+00:00"})
    );
}

fn uninstall_package(fr: &FakeRoot, check_status: i32) {
    fr.write_p();
    let mut cfg = p_config();
    cfg["modes"]["uninstall"] = json!([step("un", "un.sh", &[])]);
    cfg["modes"]["uninstall-check"] = json!([step("un_check", "un_check.sh", &[])]);
    fr.write_config(&cfg);
    fr.write_step("un.sh", "#!/bin/sh\nexit 0\n");
    fr.write_step("un_check.sh", &format!("#!/bin/sh\nexit {check_status}\n"));
    for flag in [
        FOO_FLAG,
        "demo/1.0.0/un.sh_W11fWzBd",
        "demo/1.0.0/bogus.sh_W11fWzBd",
    ] {
        fr.write(
            &f(flag),
            "last_run: 2024-08-28T14:33:20.123456\nstep_always_runs: False",
        );
    }
}

#[test]
fn case_42_uninstall_check_success() {
    require_root!();
    let fr = FakeRoot::new();
    uninstall_package(&fr, 0);
    fr.run("uninstall-check").code(0);
    assert!(!fr.exists(&f(FOO_FLAG)));
    assert!(!fr.exists(&f("demo/1.0.0/un.sh_W11fWzBd")));
    assert!(fr.exists(&f("demo/1.0.0/bogus.sh_W11fWzBd")));
    assert_eq!(fr.read(&f("check_results")), "un_check.sh False");
    assert!(fr.exists(&f("uninstall-check_ALL_CHECKED")));
    assert_eq!(history_json(&fr)["current-version"], json!("uninstalled"));
}

#[test]
fn case_43_uninstall_check_failure() {
    require_root!();
    let fr = FakeRoot::new();
    uninstall_package(&fr, 1);
    let hist = r#"{"current-version": "1.0.0", "history": [{"version": "1.0.0", "time": "2024-08-28T14:33:20.123456+00:00"}]}"#;
    fr.write(HISTORY, hist);
    fr.run("uninstall-check").code(1);
    for flag in [
        FOO_FLAG,
        "demo/1.0.0/un.sh_W11fWzBd",
        "demo/1.0.0/bogus.sh_W11fWzBd",
    ] {
        assert!(fr.exists(&f(flag)), "flag {flag} removed");
    }
    assert_eq!(fr.read(HISTORY), hist);
}

// ---------------------------------------------------------------------------------------
// Interrupts

/// `I` of section 15.
const I: &str = "/t/state/interrupts/flags/sky-0000-1_demo_1.0.0";

fn i(name: &str) -> String {
    format!("{I}/{name}")
}

const NODE_RESTART: &str = "eyJ0eXBlIjoibm9kZV9yZXN0YXJ0In0=";

fn interrupt_root() -> FakeRoot {
    let mut fr = FakeRoot::new();
    fr.interrupt_setup();
    fr
}

#[test]
fn case_44_no_op() {
    require_root!();
    let fr = interrupt_root();
    fr.interrupt("eyJ0eXBlIjoibm9fb3AifQ==").code(0);
    let marker = fr.read_opt(&i("no_op.complete")).expect("no_op.complete");
    assert!(!marker.is_empty(), "no_op.complete is empty");
    assert_eq!(fr.calls(), None);
    assert!(!fr.exists("/t/log"), "$T/log exists");
}

const SERVICE_RESTART: &str =
    "eyJ0eXBlIjoic2VydmljZV9yZXN0YXJ0Iiwic2VydmljZXMiOlsiY29udGFpbmVyZCIsImt1YmVsZXQiXX0=";

#[test]
fn case_45_service_restart() {
    require_root!();
    let fr = interrupt_root();
    fr.interrupt(SERVICE_RESTART).code(0);
    assert_eq!(
        fr.calls().as_deref(),
        Some("systemctl daemon-reload\nsystemctl restart containerd\nsystemctl restart kubelet\n")
    );
    for n in 0..3 {
        assert!(
            fr.exists(&i(&format!("service_restart_{n}.complete"))),
            "service_restart_{n}.complete"
        );
    }
    let r = re_full(r"service_restart_0-{FTS}\.log");
    let logs: Vec<String> = fr
        .list("/t/log/demo/1.0.0/interrupts")
        .into_iter()
        .filter(|n| r.is_match(n))
        .collect();
    assert_eq!(
        logs.len(),
        1,
        "interrupt logs: {:?}",
        fr.list("/t/log/demo/1.0.0/interrupts")
    );
    let log = fr.read(&l(&format!("interrupts/{}", logs[0])));
    assert!(log.starts_with("systemctl daemon-reload\n"), "log: {log:?}");

    let again = fr.interrupt(SERVICE_RESTART);
    again.code(0);
    assert_eq!(
        fr.calls().as_deref(),
        Some("systemctl daemon-reload\nsystemctl restart containerd\nsystemctl restart kubelet\n"),
        "the second run executed something"
    );
    for n in 0..3 {
        again.has_line(&format!(
            "Skipping interrupt service_restart_{n} because it was already run for sky-0000-1_demo_1.0.0"
        ));
    }
}

#[test]
fn case_46_failing_command_then_resume() {
    require_root!();
    let fr = interrupt_root();
    let payload = "eyJ0eXBlIjoic2VydmljZV9yZXN0YXJ0Iiwic2VydmljZXMiOlsiY29udGFpbmVyZCIsImJhZCIsImt1YmVsZXQiXX0=";
    let run = fr.interrupt(payload);
    run.code(1);
    let calls = fr.calls().expect("$T/calls");
    let lines: Vec<&str> = calls.lines().collect();
    assert_eq!(lines.len(), 3, "calls: {calls:?}");
    assert_eq!(lines[2], "systemctl restart bad");
    assert!(fr.exists(&i("service_restart_0.complete")));
    assert!(fr.exists(&i("service_restart_1.complete")));
    assert!(!fr.exists(&i("service_restart_2.complete")));
    assert!(!fr.exists(&i("service_restart_3.complete")));
    run.has_line_ending("INTERRUPT FAILED: ['systemctl', 'restart', 'bad'] return_code: 5");

    fr.stub("/t/bin", "systemctl", "/t/calls", &[]);
    fr.interrupt(payload).code(0);
    assert_eq!(
        fr.calls().unwrap(),
        format!("{calls}systemctl restart bad\nsystemctl restart kubelet\n")
    );
}

#[test]
fn case_47_other_types() {
    require_root!();
    let fr = interrupt_root();
    fr.interrupt("eyJ0eXBlIjoicmVzdGFydF9hbGxfc2VydmljZXMifQ==")
        .code(0);
    assert_eq!(fr.calls().as_deref(), Some("service procps force-reload\n"));
    assert!(fr.exists(&i("restart_all_services_0.complete")));

    let fr = interrupt_root();
    fr.interrupt("eyJ0eXBlIjoic2NyaXB0X2ludGVycnVwdCJ9").code(0);
    assert_eq!(fr.calls(), None);
    assert!(fr.list(I).is_empty(), "files in I: {:?}", fr.list(I));

    let fr = interrupt_root();
    fr.write(&i("node_restart_0.complete"), "1724846400.0");
    fr.interrupt(NODE_RESTART).code(0);
    assert_eq!(fr.calls(), None, "reboot was called");
}

#[test]
fn case_48_reboot_completion_by_boot_id() {
    require_root!();
    let fr = interrupt_root();
    fr.write(
        "/proc/sys/kernel/random/boot_id",
        "11111111-2222-3333-4444-555555555555\n",
    );
    fr.write(
        &i("node_restart_0.pending"),
        "boot-id:00000000-0000-0000-0000-000000000000\n",
    );
    fr.interrupt(NODE_RESTART).code(0);
    assert_eq!(fr.calls(), None, "reboot was called");
    assert!(!fr.exists(&i("node_restart_0.pending")));
    assert!(fr.exists(&i("node_restart_0.complete")));
}

#[test]
fn case_49_bad_payloads() {
    require_root!();
    for payload in [
        "not base64!",
        "eyJ0eXBlIjoicmVib290In0=",
        "eyJub3BlIjoxfQ==",
    ] {
        let fr = interrupt_root();
        let run = fr.interrupt(payload);
        assert_eq!(
            run.code, 1,
            "payload {payload:?}\n{}\n{}",
            run.stdout, run.stderr
        );
        assert!(
            !fr.exists("/t/state/interrupts"),
            "payload {payload:?} created interrupt state"
        );
        assert_eq!(fr.calls(), None, "payload {payload:?} called something");
    }
}

// ---------------------------------------------------------------------------------------
// Signals

#[test]
fn case_50_sigterm_between_steps() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    fr.write_config(&config(json!({
        "apply": [step("s1", "s1.sh", &[]), step("s2", "s2.sh", &[])],
        "apply-check": [p_check_step()],
    })));
    fr.write_step("s1.sh", "#!/bin/sh\nsleep 3; touch /t/s1-done\n");
    fr.write_step("s2.sh", "#!/bin/sh\ntouch /t/s2-ran\n");
    let mut child = fr.spawn("apply");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (lines, stdout) = line_reader(child.stdout.take().expect("stdout"));
    let (_, stderr) = line_reader(child.stderr.take().expect("stderr"));
    // Wait for the agent to start s1: its header line (bounded; no blind sleep).
    let header = "apply s1.sh [] [0] Idempotence.Auto True";
    loop {
        match lines.recv_timeout(Duration::from_secs(30)) {
            Ok(l) if l == header => break,
            Ok(_) => {}
            Err(e) => {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                let _ = child.wait();
                panic!(
                    "no {header:?} line from the agent ({e}); stdout:\n{}\nstderr:\n{}",
                    stdout.join().unwrap(),
                    stderr.join().unwrap()
                );
            }
        }
    }
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("send SIGTERM");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(s) => s.expect("wait"),
        Err(_) => {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            panic!("agent did not exit after SIGTERM");
        }
    };
    let s1_done_at_exit = fr.exists("/t/s1-done");
    let out = stdout.join().unwrap();
    let err = stderr.join().unwrap();
    assert_eq!(
        exit_code(status),
        1,
        "exit status\nstdout:\n{out}\nstderr:\n{err}"
    );
    assert!(s1_done_at_exit, "the agent exited before s1.sh finished");
    assert!(fr.exists(&f("demo/1.0.0/s1.sh_W11fWzBd")));
    assert!(!fr.exists("/t/s2-ran"), "s2.sh ran after SIGTERM");
}

/// Upstream's "bootstrap copy dir before interrupts": with the copy dir missing and
/// `SKYHOOK_DATA_DIR` present, an interrupt first copies the data dir into the copy dir and
/// runs its commands there (no "running in /" warning); without a data dir either, the
/// commands still run, from `/`.
#[test]
fn interrupt_bootstraps_a_missing_copy_dir_from_the_data_dir() {
    require_root!();
    let mut fr = interrupt_root();
    fs::remove_dir_all(fr.t("pkg")).unwrap();
    let src = fr.t("src");
    fs::create_dir_all(src.join("skyhook_dir")).unwrap();
    fs::write(src.join("config.json"), "{}").unwrap();
    fr.set_env("SKYHOOK_DATA_DIR", src.to_str().unwrap());
    let run = fr.interrupt(SERVICE_RESTART);
    run.code(0);
    assert_eq!(fr.read("/t/pkg/config.json"), "{}");
    assert!(fr.exists("/t/pkg/skyhook_dir"));
    assert!(
        !run.stderr.contains("does not exist on the host"),
        "stderr: {}",
        run.stderr
    );
    assert!(fr.calls().unwrap().contains("systemctl restart containerd"));

    // No data dir either: the documented fallback.
    let mut fr = interrupt_root();
    fs::remove_dir_all(fr.t("pkg")).unwrap();
    fr.set_env("SKYHOOK_DATA_DIR", "/t/missing");
    let run = fr.interrupt(SERVICE_RESTART);
    run.code(0);
    assert!(
        run.stderr
            .contains("copy dir /t/pkg does not exist on the host; running"),
        "stderr: {}",
        run.stderr
    );
    assert!(!fr.exists("/t/pkg"));
}
