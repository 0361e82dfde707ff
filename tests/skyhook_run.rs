//! `skyhook-run SCRIPT` and `skyhook-run --package DIR`: dry runs, applies, checks, JSON,
//! exit codes and error format of the built binary, against tempdir host roots without any
//! binaries (a command that ran would fail loudly), except the chrooted package apply.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn skyhook_run() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_skyhook-run"));
    // A known environment: the step environment is skyhook-run's own plus --env.
    c.env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    c
}

fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

/// Every entry under `root`: path, kind, mode, uid, mtime (ns) and content (files) or target
/// (symlinks). Equal before and after means the tree is byte-identical and untouched.
fn tree(root: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            let what = if m.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                "dir".to_string()
            } else {
                format!("file {:?}", std::fs::read(&p).unwrap())
            };
            out.push(format!(
                "{rel} {what} {:o} {} {}.{}",
                m.mode(),
                m.uid(),
                m.mtime(),
                m.mtime_nsec()
            ));
            if m.is_dir() {
                walk(base, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

/// A host root with `/etc/demo.conf` = `a=1\n` and no binaries.
fn demo_root() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "etc/demo.conf", "a=1\n");
    d
}

const WRITE_DEMO: &str = "print(`mode=${step.mode} dry_run=${step.dry_run}`);\n\
                          fs::write(\"/etc/demo.conf\", \"a=2\\n\");\n";

const DEMO_DIFF: &str = "~ update /etc/demo.conf\n\
                         --- a/etc/demo.conf\n\
                         +++ b/etc/demo.conf\n\
                         @@ -1 +1 @@\n\
                         -a=1\n\
                         +a=2\n";

fn run_script(script: &Path, root: &Path, extra: &[&str]) -> Output {
    skyhook_run()
        .arg(script)
        .arg("--root")
        .arg(root)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn dry_run_prints_the_diff_and_changes_nothing() {
    let root = demo_root();
    let dir = tempfile::tempdir().unwrap();
    let script = write(dir.path(), "apply.rhai", WRITE_DEMO);
    let before = tree(root.path());

    let out = run_script(&script, root.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        format!("mode=apply dry_run=true\n{DEMO_DIFF}Plan: 1 to change, 0 unchanged.\n")
    );
    assert_eq!(text(&out.stderr), "");

    let out = run_script(&script, root.path(), &["--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(tree(root.path()), before);
    assert_eq!(
        std::fs::read(root.path().join("etc/demo.conf")).unwrap(),
        b"a=1\n"
    );
}

#[test]
fn apply_writes_then_nothing_is_left_to_plan() {
    let root = demo_root();
    let dir = tempfile::tempdir().unwrap();
    let script = write(dir.path(), "apply.rhai", WRITE_DEMO);

    let out = run_script(&script, root.path(), &["--apply"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "mode=apply dry_run=false\n~ update /etc/demo.conf\nApply: 1 changed, 0 unchanged.\n"
    );
    assert_eq!(
        std::fs::read(root.path().join("etc/demo.conf")).unwrap(),
        b"a=2\n"
    );

    let out = run_script(&script, root.path(), &["--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "mode=apply dry_run=true\nPlan: 0 to change, 1 unchanged.\n"
    );
}

#[test]
fn json_output_is_one_document_with_the_change() {
    let root = demo_root();
    let dir = tempfile::tempdir().unwrap();
    let script = write(dir.path(), "apply.rhai", WRITE_DEMO);
    let out = run_script(
        &script,
        root.path(),
        &["--output", "json", "--detailed-exitcode"],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    // script output moves to stderr; stdout is exactly one JSON document
    assert_eq!(text(&out.stderr), "mode=apply dry_run=true\n");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mode"], "plan");
    assert_eq!(v["step_mode"], "apply");
    assert_eq!(v["summary"], "Plan: 1 to change, 0 unchanged.");
    assert_eq!(v["ok"], true);
    assert_eq!(v["exit_code"], 2);
    assert_eq!(v["return_code"], 0);
    assert_eq!(v["error"], Value::Null);
    let changes = v["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0]["target"], "/etc/demo.conf");
    assert_eq!(changes[0]["summary"], "update /etc/demo.conf");
    assert_eq!(
        changes[0]["diff"],
        "--- a/etc/demo.conf\n+++ b/etc/demo.conf\n@@ -1 +1 @@\n-a=1\n+a=2\n"
    );
}

#[test]
fn check_mode_fails_with_drift_then_passes_after_apply() {
    let root = demo_root();
    let dir = tempfile::tempdir().unwrap();
    let script = write(dir.path(), "apply.rhai", WRITE_DEMO);
    let before = tree(root.path());

    let out = run_script(&script, root.path(), &["--mode", "apply-check"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        format!("mode=apply-check dry_run=false\n{DEMO_DIFF}Plan: 1 to change, 0 unchanged.\n")
    );
    assert_eq!(
        text(&out.stderr),
        "skyhook-run: drift: 1 pending change(s), the host is not in the state this script describes\n"
    );
    assert_eq!(tree(root.path()), before);

    run_script(&script, root.path(), &["--apply"]);
    let out = run_script(&script, root.path(), &["--mode", "apply-check"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "mode=apply-check dry_run=false\nPlan: 0 to change, 1 unchanged.\n"
    );
}

#[test]
fn step_context_env_args_and_configmaps() {
    let root = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "cm/greeting", "hi\n");
    write(dir.path(), "lib/util.rhai", "fn twice(x) { x + x }\n");
    let script = write(
        dir.path(),
        "s.rhai",
        "import \"lib/util\" as u;\n\
         print(`${step.name} ${step.mode} ${step.args} ${env(\"K\")} ${env(\"REAL\")}`);\n\
         print(u::twice(config::get(\"greeting\")));\n\
         print(step.skyhook_dir == env(\"SKYHOOK_DIR\"));\n",
    );
    let out = skyhook_run()
        .env("REAL", "from-env")
        .env("K", "overridden")
        .arg(&script)
        .arg("--root")
        .arg(root.path())
        .args([
            "--mode", "config", "--env", "K=v=1", "--arg", "-x", "--arg", "y",
        ])
        .arg("--configmaps")
        .arg(dir.path().join("cm"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "s config [\"-x\", \"y\"] v=1 from-env\nhi\nhi\n\ntrue\nPlan: 0 to change, 0 unchanged.\n"
    );
}

#[test]
fn commands_are_recorded_not_run_in_a_dry_run() {
    // The root has no binaries at all: a command that ran would fail the script.
    let root = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = write(
        dir.path(),
        "s.rhai",
        "let r = run([\"/usr/bin/systemctl\", \"restart\", \"x\"]);\nprint(r.planned);\n\
         service::daemon_reload();\n",
    );
    let out = run_script(&script, root.path(), &["--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "true\n> would run: /usr/bin/systemctl restart x\n> would run: systemctl daemon-reload\n\
         Plan: 0 to change, 0 unchanged, 2 actions.\n"
    );
    // applied, the missing program is an error at its position
    let out = run_script(&script, root.path(), &["--apply"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).starts_with(&format!("{}:1:9: run: ", script.display())),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn errors_exit_1_with_file_line_col() {
    let root = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "syntax.rhai", "let x = 1;\nlet y = ;\n");
    write(
        dir.path(),
        "fails.rhai",
        "print(\"before\");\n\n  fail(\"no good\");\n",
    );
    write(dir.path(), "code.rhai", "3\n");
    let out = skyhook_run()
        .current_dir(dir.path())
        .args(["syntax.rhai", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(text(&out.stdout), "");
    assert_eq!(text(&out.stderr), "syntax.rhai:2:9: Unexpected ';'\n");

    let out = skyhook_run()
        .current_dir(dir.path())
        .args(["fails.rhai", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "before\nPlan: 0 to change, 0 unchanged.\n"
    );
    assert_eq!(text(&out.stderr), "fails.rhai:3:3: no good\n");

    let out = skyhook_run()
        .current_dir(dir.path())
        .args(["code.rhai", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(text(&out.stderr), "skyhook-run: code.rhai: returned 3\n");

    // JSON: the error document on stdout, the message on stderr
    let out = skyhook_run()
        .current_dir(dir.path())
        .args(["syntax.rhai", "--output", "json", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"], "syntax.rhai:2:9: Unexpected ';'");
    assert_eq!(v["exit_code"], 1);
}

#[test]
fn usage_errors_exit_1() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path().to_str().unwrap();
    for args in [
        vec![],
        vec!["x.rhai"],
        vec!["x.rhai", "--root", r, "--bogus"],
        vec!["x.rhai", "--root", r, "--mode", "nosuchmode"],
        vec!["x.rhai", "--root", r, "--env", "NOEQUALS"],
        vec!["x.rhai", "--root", r, "--output", "yaml"],
        vec!["--package", "examples/tuning", "--root", r],
        vec![
            "x.rhai",
            "--package",
            "examples/tuning",
            "--mode",
            "config",
            "--root",
            r,
        ],
        vec![
            "--package",
            "examples/tuning",
            "--mode",
            "config",
            "--root",
            r,
            "--arg",
            "a",
        ],
    ] {
        let out = skyhook_run().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        assert_eq!(text(&out.stdout), "", "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
    let out = skyhook_run().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for needle in [
        "--detailed-exitcode",
        "Plan: 2 to change, 5 unchanged, 1 action.",
        "--package examples/tuning",
    ] {
        assert!(help.contains(needle), "help lacks {needle}");
    }
}

/// A fake node root for the tuning example: os-release, the four /proc/sys keys of its
/// sysctl.conf configMap (at other values), no binaries.
fn tuning_root() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "etc/os-release",
        "ID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"22.04\"\n",
    );
    for key in [
        "net/core/rmem_max",
        "net/core/wmem_max",
        "fs/inotify/max_user_instances",
        "vm/max_map_count",
    ] {
        write(d.path(), &format!("proc/sys/{key}"), "100\n");
    }
    write(d.path(), "proc/sys/kernel/osrelease", "6.8.0\n");
    d
}

fn manifest(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

#[test]
fn package_dry_run_of_the_tuning_example() {
    let root = tuning_root();
    let before = tree(root.path());
    let out = skyhook_run()
        .arg("--package")
        .arg(manifest("examples/tuning"))
        .args(["--mode", "config", "--detailed-exitcode", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stdout = text(&out.stdout);
    for line in [
        "==> step config: config.rhai",
        "~ sysctl net.core.rmem_max = 16777216 (was 100)",
        "~ sysctl vm.max_map_count = 262144 (was 100)",
        "~ create /etc/sysctl.d/999-tuning-tuning.conf (mode 0644)",
        "+++ b/etc/sysctl.d/999-tuning-tuning.conf",
        "+net.core.rmem_max = 16777216",
        "~ create /etc/security/limits.d/999-tuning-tuning.conf (mode 0644)",
        "+* hard nofile 1048576",
        "~ create /etc/systemd/system/containerd.service.d/999-tuning-tuning.conf (mode 0644)",
        "+LimitNOFILE=1048576",
        "~ create /etc/default/grub.d/999-tuning-tuning.cfg (mode 0644)",
        "> would run: systemctl daemon-reload",
        "> would run: update-grub",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing {line:?} in\n{stdout}"
        );
    }
    assert!(
        stdout.ends_with("\nPlan: 8 to change, 0 unchanged, 2 actions.\n"),
        "{stdout}"
    );
    assert_eq!(tree(root.path()), before);

    // the same package as JSON
    let out = skyhook_run()
        .arg("--package")
        .arg(manifest("examples/tuning"))
        .args(["--mode", "config", "--output", "json", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["package"], "tuning");
    assert_eq!(v["package_mode"], "config");
    assert_eq!(v["summary"], "Plan: 8 to change, 0 unchanged, 2 actions.");
    assert_eq!(v["steps"][0]["kind"], "rhai");
    assert_eq!(v["steps"][0]["result"]["ok"], true);
    assert_eq!(tree(root.path()), before);
}

/// A package with a bash step (`env:` argument) between two `.rhai` steps; the second reads
/// what the first planned.
fn mixed_package(dir: &Path) {
    write(
        dir,
        "config.json",
        r#"{"schema_version": "v1", "root_dir": "/", "expected_config_files": ["greeting.conf"],
  "package_name": "mixed", "package_version": "1.0.0",
  "modes": {"apply": [
    {"name": "first", "path": "first.rhai", "arguments": [], "returncodes": [0],
     "on_host": true, "idempotence": false, "upgrade_step": false},
    {"name": "greet", "path": "greet.sh", "arguments": ["env:NODE_NAME", "x"], "returncodes": [0],
     "on_host": true, "idempotence": false, "upgrade_step": false},
    {"name": "second", "path": "second.rhai", "arguments": [], "returncodes": [0],
     "on_host": true, "idempotence": false, "upgrade_step": false}
  ], "apply-check": [
    {"name": "check", "path": "check.rhai", "arguments": [], "returncodes": [0],
     "on_host": true, "idempotence": false, "upgrade_step": false}
  ]}}"#,
    );
    write(
        dir,
        "skyhook_dir/first.rhai",
        "fs::write(\"/etc/mixed/a.conf\", config::get(\"greeting.conf\"));\n",
    );
    write(
        dir,
        "skyhook_dir/greet.sh",
        "#!/bin/sh\nset -eu\nprintf '%s %s\\n' \"$1\" \"$2\" > /etc/mixed/greeted\n",
    );
    write(
        dir,
        "skyhook_dir/second.rhai",
        "print(`second sees: ${fs::read(\"/etc/mixed/a.conf\")}`);\n",
    );
    write(
        dir,
        "skyhook_dir/check.rhai",
        "fs::write(\"/etc/mixed/a.conf\", config::get(\"greeting.conf\"));\n",
    );
    write(dir, "configmaps/greeting.conf", "hello\n");
}

#[test]
fn package_dry_run_lists_bash_steps_and_shares_one_session() {
    let root = tempfile::tempdir().unwrap();
    let pkg = tempfile::tempdir().unwrap();
    mixed_package(pkg.path());
    let before = tree(root.path());
    let out = skyhook_run()
        .arg("--package")
        .arg(pkg.path())
        .args(["--mode", "apply", "--env", "NODE_NAME=n1", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "second sees: hello\n\n\
         ==> step first: first.rhai\n\
         ~ create /etc/mixed/a.conf (mode 0644)\n\
         --- /dev/null\n\
         +++ b/etc/mixed/a.conf\n\
         @@ -0,0 +1 @@\n\
         +hello\n\
         ==> step greet: greet.sh n1 x\n\
         > would run: greet.sh n1 x\n\
         ==> step second: second.rhai\n\
         Plan: 1 to change, 0 unchanged, 1 action.\n"
    );
    assert_eq!(tree(root.path()), before);

    // a missing env: variable fails the step as the agent would, later steps are not run
    let out = skyhook_run()
        .arg("--package")
        .arg(pkg.path())
        .args(["--mode", "apply", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "==> step greet: greet.sh env:NODE_NAME x\n\
             failed: greet.sh: Expected environment variable did not exist: NODE_NAME\n\
             ==> step second: second.rhai\nnot run: an earlier step failed\n"
        ),
        "{stdout}"
    );
    assert_eq!(tree(root.path()), before);
}

#[test]
fn package_apply_runs_the_agent_flow_chrooted() {
    require_root!();
    let fr = crate::util::FakeRoot::new();
    let pkg = tempfile::tempdir().unwrap();
    mixed_package(pkg.path());
    let cm = tempfile::tempdir().unwrap();
    write(cm.path(), "greeting.conf", "from --configmaps\n");
    let out = skyhook_run()
        .arg("--package")
        .arg(pkg.path())
        .args([
            "--mode",
            "apply",
            "--apply",
            "--env",
            "NODE_NAME=n1",
            "--root",
        ])
        .arg(fr.root())
        .arg("--configmaps")
        .arg(cm.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("SUCEEDED: greet.sh n1 x\n"), "{stdout}");
    assert!(
        stdout.contains("second sees: from --configmaps\n"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with(
            "skyhook-run: mode apply succeeded (package copy at /var/lib/skyhook/skyhook-run/mixed-1.0.0)\n"
        ),
        "{stdout}"
    );
    assert_eq!(fr.read("/etc/mixed/a.conf"), "from --configmaps\n");
    assert_eq!(fr.read("/etc/mixed/greeted"), "n1 x\n");
    assert_eq!(
        fr.read("/var/lib/skyhook/skyhook-run/mixed-1.0.0/configmaps/greeting.conf"),
        "from --configmaps\n"
    );
    // flags and logs under the agent's default roots inside the root
    assert_eq!(fr.list("/etc/skyhook/flags/mixed/1.0.0").len(), 3);
    assert!(!fr.list("/var/log/skyhook/mixed/1.0.0").is_empty());

    // a dry run now: the flags make the agent skip every step
    let out = skyhook_run()
        .arg("--package")
        .arg(pkg.path())
        .args(["--mode", "apply", "--detailed-exitcode", "--root"])
        .arg(fr.root())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = text(&out.stdout);
    assert_eq!(
        stdout
            .matches("skipped: flag /etc/skyhook/flags/mixed/1.0.0/")
            .count(),
        3,
        "{stdout}"
    );
    assert!(
        stdout.ends_with("Plan: 0 to change, 0 unchanged.\n"),
        "{stdout}"
    );
}

/// `skyhook-run x.sh` is refused (not a Rhai script); a `--configmaps` folder that does not
/// exist is an error; `--package` with a mode without steps says so and exits 0.
#[test]
fn refuses_non_rhai_scripts_missing_configmaps_and_says_when_a_mode_has_no_steps() {
    let root = demo_root();
    let dir = tempfile::tempdir().unwrap();
    let sh = write(dir.path(), "apply.sh", "echo hi\n");
    let out = run_script(&sh, root.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).starts_with(&format!(
            "skyhook-run: error: {} is not a Rhai script",
            sh.display()
        )),
        "{}",
        text(&out.stderr)
    );
    let script = write(dir.path(), "a.rhai", "print(1);\n");
    let missing = dir.path().join("no-such-cm");
    let out = run_script(
        &script,
        root.path(),
        &["--configmaps", missing.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        text(&out.stderr),
        format!(
            "skyhook-run: error: --configmaps {}: no such directory\n",
            missing.display()
        )
    );
    assert_eq!(out.stdout, b"");

    let pkg = tempfile::tempdir().unwrap();
    mixed_package(pkg.path());
    for extra in [&[][..], &["--apply"][..]] {
        let out = skyhook_run()
            .arg("--package")
            .arg(pkg.path())
            .args(["--mode", "uninstall", "--root"])
            .arg(root.path())
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(
            text(&out.stderr),
            "skyhook-run: package mixed 1.0.0 has no uninstall steps: nothing to run (modes \
             with steps: apply, apply-check)\n"
        );
    }
}
