//! Realistic packages from `tests/fixtures/` run through all their modes on a [`FakeRoot`].
//!
//! - `shellscript`: shaped like the public Skyhook "shellscript" package: every mode runs the
//!   dispatcher `shellscript_run.sh <mode_with_underscores>` (all steps `idempotence: true`),
//!   which sources `$SKYHOOK_DIR/configmaps/<stage>.sh` and, when the configMap has no such
//!   script, prints the public dispatcher's `Could not find file ...` message and succeeds.
//!   The configmaps are laid out as a Kubernetes configMap volume is (`..<timestamp>/`
//!   directory, `..data` link, per-key links).
//! - `tuning`: shaped like the public Skyhook "tuning" package: bash steps that install
//!   `sysctl.conf`, `ulimit.conf` and `service_containerd.conf` from the configMap as drop-in
//!   files, calling recording `sysctl`/`systemctl` stubs, checks that compare the files, and
//!   an uninstall that removes them.

use std::fs;
use std::path::Path;

use serde_json::{Value, json};

use crate::util::*;

fn fixture(fr: &FakeRoot, name: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    copy_tree(&src, &fr.t("pkg")).expect("copy the fixture package");
}

fn history(fr: &FakeRoot, pkg: &str) -> Value {
    serde_json::from_str(&fr.read(&format!("{T}/state/history/{pkg}.json"))).expect("history JSON")
}

fn versions(h: &Value) -> Vec<String> {
    h["history"]
        .as_array()
        .expect("history array")
        .iter()
        .map(|e| e["version"].as_str().expect("version").to_string())
        .collect()
}

/// Regular files (not directories) under host directory `host`, relative, sorted.
fn files_under(fr: &FakeRoot, host: &str) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        if let Ok(rd) = fs::read_dir(dir) {
            for e in rd.flatten() {
                let p = e.path();
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    walk(base, &p, out);
                } else {
                    out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
                }
            }
        }
    }
    let base = fr.host(host);
    let mut out = Vec::new();
    walk(&base, &base, &mut out);
    out.sort();
    out
}

const FLAG_DISABLED: &str = "last_run: {TS}\nstep_always_runs: True";
const FLAG_AUTO: &str = "last_run: {TS}\nstep_always_runs: False";

#[test]
fn shellscript_package_all_modes() {
    require_root!();
    let mut fr = FakeRoot::new();
    fr.set_env("SKYHOOK_RESOURCE_ID", "sky-0000-1_shellscript_1.0.0");
    fixture(&fr, "shellscript");
    let flags = "/t/state/flags/shellscript/1.0.0";
    let flag = |stage: &str| {
        format!(
            "{flags}/shellscript_run.sh_{}",
            marker(&format!("['{stage}']_[0]"))
        )
    };

    // A check before anything was applied fails and records the failure.
    fr.run("apply-check").code(1);
    assert_eq!(
        fr.read("/t/state/flags/check_results"),
        "shellscript_run.sh True"
    );
    assert!(!fr.exists("/t/state/history/shellscript.json"));

    let run = fr.run("apply");
    run.code(0);
    run.has_line("apply shellscript_run.sh ['apply'] [0] Idempotence.Disabled True");
    run.matches(r"^\[out\]{TS} apply done$");
    run.has_line_ending("SUCEEDED: shellscript_run.sh apply");
    assert_eq!(
        fr.read("/etc/shellscript/state"),
        "applied by sky-0000-1_shellscript_1.0.0\n"
    );
    assert_full_match(&fr.read(&flag("apply")), FLAG_DISABLED);

    fr.run("apply-check").code(0);
    assert_eq!(
        fr.read("/t/state/flags/check_results"),
        "shellscript_run.sh False"
    );
    assert!(fr.exists("/t/state/flags/apply-check_ALL_CHECKED"));
    let h = history(&fr, "shellscript");
    assert_eq!(h["current-version"], json!("1.0.0"));
    assert_eq!(versions(&h), ["1.0.0"]);

    // idempotence: true — the package manages idempotence, so apply runs again.
    let run = fr.run("apply");
    run.code(0);
    run.has_line("Flag exists but idempotence is Idempotence.Disabled so running step.");
    run.matches(r"^\[out\]{TS} apply done$");

    // config with the package's env passed through the agent.
    fr.set_env("LEVEL", "high");
    let run = fr.run("config");
    run.code(0);
    run.matches(r"^\[out\]{TS} config level high$");
    assert_eq!(fr.read("/etc/shellscript/config"), "level=high\n");
    assert_full_match(&fr.read(&flag("config")), FLAG_DISABLED);
    fr.run("config-check").code(0);
    assert!(fr.exists("/t/state/flags/config-check_ALL_CHECKED"));

    // Stages without a configMap script succeed with the dispatcher's message.
    for (mode, stage) in [
        ("post-interrupt", "post_interrupt"),
        ("post-interrupt-check", "post_interrupt_check"),
        ("upgrade", "upgrade"),
        ("upgrade-check", "upgrade_check"),
    ] {
        let run = fr.run(mode);
        run.code(0);
        run.matches(&format!(
            r"^\[out\]{{TS}} Could not find file /t/pkg/configmaps/{stage}\.sh was this in the configmap\?$"
        ));
    }
    assert!(fr.exists(&flag("post_interrupt")));
    assert!(fr.exists(&flag("upgrade")));
    let h = history(&fr, "shellscript");
    assert_eq!(
        versions(&h),
        ["1.0.0", "1.0.0"],
        "upgrade-check records the version"
    );

    let run = fr.run("uninstall");
    run.code(0);
    run.matches(r"^\[out\]{TS} uninstalled$");
    assert!(!fr.exists("/etc/shellscript"));
    fr.run("uninstall-check").code(0);
    assert_eq!(
        fr.read("/t/state/flags/check_results"),
        "shellscript_run.sh False"
    );
    assert!(fr.exists("/t/state/flags/uninstall-check_ALL_CHECKED"));
    let h = history(&fr, "shellscript");
    assert_eq!(h["current-version"], json!("uninstalled"));
    assert_eq!(versions(&h), ["uninstalled", "1.0.0", "1.0.0"]);
    assert_eq!(
        files_under(&fr, flags),
        Vec::<String>::new(),
        "uninstall-check left step flags"
    );

    // The configMap volume layout is left as it was; only the dispatcher got chmodded.
    let link = fs::read_link(fr.t("pkg/configmaps/apply.sh")).expect("apply.sh is still a link");
    assert_eq!(link, Path::new("..data/apply.sh"));
    assert_eq!(
        fs::read_link(fr.t("pkg/configmaps/..data")).unwrap(),
        Path::new("..2024_01_01_00_00_00.123")
    );
}

#[test]
fn tuning_package_all_modes() {
    require_root!();
    let mut fr = FakeRoot::new();
    fr.set_env("SKYHOOK_RESOURCE_ID", "sky-0000-1_tuning_1.1.4");
    fr.set_env("PATH", "/usr/local/bin:/usr/bin:/bin");
    fixture(&fr, "tuning");
    fr.stub("/usr/local/bin", "systemctl", "/t/calls", &[]);
    fr.stub("/usr/local/bin", "sysctl", "/t/calls", &[]);
    let flags = "/t/state/flags/tuning/1.1.4";
    let settings_flag = format!("{flags}/update_settings.sh_W11fWzBd");
    let sysctl = "/etc/sysctl.d/999-tuning.conf";
    let limits = "/etc/security/limits.d/999-tuning.conf";
    let containerd = "/etc/systemd/system/containerd.service.d/999-tuning.conf";
    let reload = "sysctl --system\nsystemctl daemon-reload\n";

    // Checks fail on a node that was never tuned.
    fr.run("apply-check").code(1);
    assert_eq!(
        fr.read("/t/state/flags/check_results"),
        "update_settings_check.sh True"
    );
    assert!(!fr.exists("/t/state/history/tuning.json"));

    let run = fr.run("apply");
    run.code(0);
    run.has_line("apply update_settings.sh [] [0] Idempotence.Auto True");
    run.has_line_ending("SUCEEDED: update_settings.sh ");
    assert_eq!(
        fr.read(sysctl),
        "net.core.rmem_max = 16777216\nfs.inotify.max_user_instances = 8192\n"
    );
    assert_eq!(
        fr.read(limits),
        "* hard memlock unlimited\n* hard nofile 1048576\n"
    );
    assert_eq!(
        fr.read(containerd),
        "[Service]\nLimitNOFILE=1048576\nLimitMEMLOCK=infinity\n"
    );
    assert_eq!(fr.calls().as_deref(), Some(reload));
    assert_full_match(&fr.read(&settings_flag), FLAG_AUTO);
    let logs: Vec<String> = fr
        .list("/t/log/tuning/1.1.4")
        .into_iter()
        .filter(|n| re_full(r"update_settings\.sh-{FTS}\.log").is_match(n))
        .collect();
    assert_eq!(logs.len(), 1, "logs: {logs:?}");
    let log = fr.read(&format!("/t/log/tuning/1.1.4/{}", logs[0]));
    assert!(
        re(r"^\[out\]{TS} updating sysctl settings$").is_match(&log),
        "log: {log:?}"
    );

    // apply is flag-managed: a second apply skips and calls nothing.
    let run = fr.run("apply");
    run.code(0);
    run.has_line_between("Skipping update_settings.sh because ", " exists.");
    assert_eq!(fr.calls().as_deref(), Some(reload));

    fr.run("apply-check").code(0);
    assert_eq!(
        fr.read("/t/state/flags/check_results"),
        "update_settings_check.sh False"
    );
    assert!(fr.exists("/t/state/flags/apply-check_ALL_CHECKED"));
    let h = history(&fr, "tuning");
    assert_eq!(h["current-version"], json!("1.1.4"));
    assert_eq!(versions(&h), ["1.1.4"]);

    // A changed configMap: config re-runs the same script despite its flag.
    fr.write(
        "/t/pkg/configmaps/sysctl.conf",
        "net.core.rmem_max = 33554432\n",
    );
    fr.run("config-check").code(1);
    assert_eq!(
        fr.read("/t/state/flags/check_results"),
        "update_settings_check.sh True"
    );
    let run = fr.run("config");
    run.code(0);
    run.has_line(
        "Flag exists but CONFIG, UNINSTALL, and UPGRADE mode don't support idempotence so running step anyway.",
    );
    assert_eq!(fr.read(sysctl), "net.core.rmem_max = 33554432\n");
    assert_eq!(fr.calls().unwrap(), format!("{reload}{reload}"));
    assert_full_match(&fr.read(&settings_flag), FLAG_DISABLED);
    fr.run("config-check").code(0);
    assert!(fr.exists("/t/state/flags/config-check_ALL_CHECKED"));
    assert_eq!(
        versions(&history(&fr, "tuning")),
        ["1.1.4"],
        "config-check wrote history"
    );

    // uninstall neither overlays nor checks expected config files.
    fs::remove_file(fr.t("pkg/configmaps/ulimit.conf")).unwrap();
    let run = fr.run("uninstall");
    run.code(0);
    run.matches(r"^\[out\]{TS} tuning removed$");
    for p in [sysctl, limits, containerd] {
        assert!(!fr.exists(p), "{p} left behind");
    }
    assert_eq!(fr.calls().unwrap(), format!("{reload}{reload}{reload}"));
    assert!(fr.exists(&format!("{flags}/update_settings_uninstall.sh_W11fWzBd")));

    fr.run("uninstall-check").code(0);
    assert_eq!(
        fr.read("/t/state/flags/check_results"),
        "update_settings_uninstall_check.sh False"
    );
    assert!(fr.exists("/t/state/flags/uninstall-check_ALL_CHECKED"));
    let h = history(&fr, "tuning");
    assert_eq!(h["current-version"], json!("uninstalled"));
    assert_eq!(versions(&h), ["uninstalled", "1.1.4"]);
    assert_eq!(
        files_under(&fr, flags),
        Vec::<String>::new(),
        "uninstall-check left step flags"
    );
    assert_eq!(
        fr.calls().unwrap(),
        format!("{reload}{reload}{reload}"),
        "checks called tools"
    );
}
