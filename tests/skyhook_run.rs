//! `skyhook-run SCRIPT` and `skyhook-run --package DIR`: dry runs, applies, checks, JSON,
//! exit codes and error format of the built binary, against tempdir host roots without any
//! binaries (a command that ran would fail loudly), except the chrooted package apply.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::util::tree;

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

/// A host root with `/etc/demo.conf` = `a=1\n` and no binaries.
fn demo_root() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "etc/demo.conf", "a=1\n");
    d
}

/// A [`demo_root`], and `body` written at `name` in a folder of its own: the root, the
/// folder and the script's path.
fn demo_script(name: &str, body: &str) -> (tempfile::TempDir, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let script = write(dir.path(), name, body);
    (demo_root(), dir, script)
}

const WRITE_DEMO: &str = "print(`mode=${step.mode} dry_run=${step.dry_run}`);\n\
                          fs::write(\"/etc/demo.conf\", \"a=2\\n\");\n";

/// The plan of [`WRITE_DEMO`] at `script`: the change with its position and diff.
fn demo_diff(script: &Path) -> String {
    format!(
        "~ update /etc/demo.conf  # {}:2\n\
         --- a/etc/demo.conf\n\
         +++ b/etc/demo.conf\n\
         @@ -1 +1 @@\n\
         -a=1\n\
         +a=2\n",
        script.display()
    )
}

fn run_script(script: &Path, root: &Path, extra: &[&str]) -> Output {
    skyhook_run()
        .arg(script)
        .arg("--root")
        .arg(root)
        .args(extra)
        .output()
        .unwrap()
}

/// `skyhook-run --package PKG --mode MODE --root ROOT EXTRA...`.
fn run_package(pkg: &Path, mode: &str, root: &Path, extra: &[&str]) -> Output {
    skyhook_run()
        .arg("--package")
        .arg(pkg)
        .args(["--mode", mode, "--root"])
        .arg(root)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn dry_run_prints_the_diff_and_changes_nothing() {
    let (root, _dir, script) = demo_script("apply.rhai", WRITE_DEMO);
    let before = tree(root.path());

    let out = run_script(&script, root.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        format!(
            "mode=apply dry_run=true\n{}Plan: 1 to change, 0 unchanged.\n",
            demo_diff(&script)
        )
    );
    assert_eq!(text(&out.stderr), "");

    let out = run_script(&script, root.path(), &["--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(tree(root.path()), before);
    assert_eq!(
        std::fs::read(root.path().join("etc/demo.conf")).unwrap(),
        b"a=1\n"
    );
}

#[test]
fn apply_writes_then_nothing_is_left_to_plan() {
    let (root, _dir, script) = demo_script("apply.rhai", WRITE_DEMO);

    let out = run_script(&script, root.path(), &["--apply"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        format!(
            "mode=apply dry_run=false\n~ update /etc/demo.conf  # {}:2\nApply: 1 changed, 0 unchanged.\n",
            script.display()
        )
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
    let (root, _dir, script) = demo_script("apply.rhai", WRITE_DEMO);
    let out = run_script(
        &script,
        root.path(),
        &["--output", "json", "--detailed-exitcode"],
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    // script output moves to stderr; stdout is exactly one JSON document
    assert_eq!(text(&out.stderr), "mode=apply dry_run=true\n");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mode"], "plan");
    assert_eq!(v["step_mode"], "apply");
    assert_eq!(v["summary"], "Plan: 1 to change, 0 unchanged.");
    assert_eq!(v["ok"], true);
    assert_eq!(v["exit_code"], 3);
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
    let (root, _dir, script) = demo_script("apply.rhai", WRITE_DEMO);
    let before = tree(root.path());

    let out = run_script(&script, root.path(), &["--mode", "apply-check"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        format!(
            "mode=apply-check dry_run=false\n{}Plan: 1 to change, 0 unchanged.\n",
            demo_diff(&script)
        )
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
        format!(
            "> would run: /usr/bin/systemctl restart x  # {s}:1\ntrue\n\
             > would run: systemctl daemon-reload  # {s}:3\n\
             Plan: 0 to change, 0 unchanged, 2 actions.\n",
            s = script.display()
        )
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
    // `skyhook-run ARGS --root ROOT` in the scripts' folder.
    let run = |args: &[&str]| {
        skyhook_run()
            .current_dir(dir.path())
            .args(args)
            .arg("--root")
            .arg(root.path())
            .output()
            .unwrap()
    };
    let out = run(&["syntax.rhai"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(text(&out.stdout), "");
    assert_eq!(text(&out.stderr), "syntax.rhai:2:9: Unexpected ';'\n");

    let out = run(&["fails.rhai"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "before\nPlan: 0 to change, 0 unchanged.\n"
    );
    assert_eq!(text(&out.stderr), "fails.rhai:3:3: no good\n");

    let out = run(&["code.rhai"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(text(&out.stderr), "skyhook-run: code.rhai: returned 3\n");

    // JSON: the error document on stdout, the message on stderr
    let out = run(&["syntax.rhai", "--output", "json"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"], "syntax.rhai:2:9: Unexpected ';'");
    assert_eq!(v["exit_code"], 1);
}

/// A malformed command line exits 2, the usage status of all three commands (README.md,
/// "Exit status").
#[test]
fn usage_errors_exit_2() {
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
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
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
    let out = run_package(
        &manifest("examples/tuning"),
        "config",
        root.path(),
        &["--detailed-exitcode"],
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
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
            stdout
                .lines()
                .any(|l| l.split_once("  # ").map_or(l, |(l, _pos)| l) == line),
            "missing {line:?} in\n{stdout}"
        );
    }
    assert!(
        stdout.ends_with("\nPlan: 8 to change, 0 unchanged, 2 actions.\n"),
        "{stdout}"
    );
    assert_eq!(tree(root.path()), before);

    // the same package as JSON
    let out = run_package(
        &manifest("examples/tuning"),
        "config",
        root.path(),
        &["--output", "json"],
    );
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
    let out = run_package(pkg.path(), "apply", root.path(), &["--env", "NODE_NAME=n1"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        format!(
            "==> step first: first.rhai\n\
             + mkdir /etc\n\
             + mkdir /etc/mixed\n\
             ~ create /etc/mixed/a.conf (mode 0644)  # {}:1\n\
             --- /dev/null\n\
             +++ b/etc/mixed/a.conf\n\
             @@ -0,0 +1 @@\n\
             +hello\n\
             ==> step greet: greet.sh n1 x\n\
             > would run: greet.sh n1 x\n\
             ==> step second: second.rhai\n\
             second sees: hello\n\n\
             Plan: 1 to change, 0 unchanged, 1 action.\n",
            pkg.path().join("skyhook_dir/first.rhai").display()
        )
    );
    assert_eq!(tree(root.path()), before);

    // a missing env: variable fails the step as the agent would, later steps are not run
    let out = run_package(pkg.path(), "apply", root.path(), &[]);
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
    let out = run_package(
        pkg.path(),
        "apply",
        fr.root(),
        &[
            "--apply",
            "--env",
            "NODE_NAME=n1",
            "--configmaps",
            cm.path().to_str().unwrap(),
        ],
    );
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
    let out = run_package(pkg.path(), "apply", fr.root(), &["--detailed-exitcode"]);
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

/// A package whose apply runs `edit.rhai` (three changes between two prints: a file in a
/// missing directory, a config line edited, a file removed), then `greet.sh`.
fn changes_package(dir: &Path) {
    write(
        dir,
        "config.json",
        r#"{"schema_version": "v1", "expected_config_files": [],
  "package_name": "changes", "package_version": "1.0.0",
  "modes": {"apply": [
    {"name": "edit", "path": "edit.rhai", "arguments": [], "returncodes": [0],
     "on_host": true, "idempotence": false, "upgrade_step": false},
    {"name": "greet", "path": "greet.sh", "arguments": [], "returncodes": [0],
     "on_host": true, "idempotence": false, "upgrade_step": false}
  ], "apply-check": [
    {"name": "edit", "path": "edit.rhai", "arguments": [], "returncodes": [0],
     "on_host": true, "idempotence": false, "upgrade_step": false}
  ]}}"#,
    );
    write(
        dir,
        "skyhook_dir/edit.rhai",
        "print(\"start\");\n\
         fs::write(\"/etc/demo.d/a.conf\", \"a=1\\n\");\n\
         fs::ensure_line(\"/etc/demo.conf\", \"k=v\", #{regex: \"^k=\"});\n\
         fs::remove(\"/etc/old.conf\");\n\
         print(\"end\");\n",
    );
    write(dir, "skyhook_dir/greet.sh", "#!/bin/sh\necho greeted\n");
}

/// A root for [`changes_package`]: `/etc/demo.conf` with a `k=` line, `/etc/old.conf`.
fn changes_root() -> crate::util::FakeRoot {
    let fr = crate::util::FakeRoot::new();
    fr.write_mode("/etc/demo.conf", "a=1\nk=old\n", 0o644);
    fr.write("/etc/old.conf", "x\n");
    fr
}

/// `skyhook-run --package DIR --apply` with `extra` on `fr`, output and stdout without the
/// `[out]`/`[err]` prefixes of step output.
fn package_apply(pkg: &Path, fr: &crate::util::FakeRoot, extra: &[&str]) -> (Output, String) {
    let out = run_package(pkg, "apply", fr.root(), &[&["--apply"][..], extra].concat());
    let prefix = crate::util::re(&format!(r"\[(out|err)\]{} ", crate::util::TS));
    let stdout = prefix.replace_all(&text(&out.stdout), "").into_owned();
    (out, stdout)
}

/// The edited config's unified diff.
const DEMO_CONF_DIFF: &str =
    "--- a/etc/demo.conf\n+++ b/etc/demo.conf\n@@ -1,2 +1,2 @@\n a=1\n-k=old\n+k=v\n";

/// What `edit.rhai` of [`changes_package`] at path `at` changes, with diffs: the directory
/// made, each change with its position, then its unified diff.
fn edit_changes_diff(at: &str) -> String {
    format!(
        "+ mkdir /etc/demo.d\n\
         ~ create /etc/demo.d/a.conf (mode 0644)  # {at}:2\n\
         --- /dev/null\n\
         +++ b/etc/demo.d/a.conf\n\
         @@ -0,0 +1 @@\n\
         +a=1\n\
         ~ update /etc/demo.conf  # {at}:3\n\
         {DEMO_CONF_DIFF}\
         ~ remove /etc/old.conf  # {at}:4\n\
         --- a/etc/old.conf\n\
         +++ /dev/null\n\
         @@ -1 +0,0 @@\n\
         -x\n"
    )
}

/// `--package --apply` lists, per `.rhai` step, what it changed (after the step's own
/// output, before its result line: one line per change with its file:line, then the
/// summary), as the agent does; a bash step lists nothing.
#[test]
fn package_apply_lists_what_each_script_step_changed() {
    require_root!();
    let pkg = tempfile::tempdir().unwrap();
    changes_package(pkg.path());
    let fr = changes_root();
    let (out, stdout) = package_apply(pkg.path(), &fr, &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let at = "/var/lib/skyhook/skyhook-run/changes-1.0.0/skyhook_dir/edit.rhai";
    let want = format!(
        "apply edit.rhai [] [0] Idempotence.Auto True\n\
         start\n\
         end\n\
         + mkdir /etc/demo.d\n\
         ~ create /etc/demo.d/a.conf (mode 0644)  # {at}:2\n\
         ~ update /etc/demo.conf  # {at}:3\n\
         ~ remove /etc/old.conf  # {at}:4\n\
         Apply: 3 changed, 0 unchanged.\n\
         SUCEEDED: edit.rhai \n\
         apply greet.sh [] [0] Idempotence.Auto True\n\
         greeted\n\
         SUCEEDED: greet.sh \n"
    );
    assert!(stdout.contains(&want), "{stdout}");
    assert_eq!(fr.read("/etc/demo.conf"), "a=1\nk=v\n");
    assert!(!fr.exists("/etc/old.conf"));
}

/// `--diff` goes with `--package`: a dry run (which always shows diffs) accepts it, and
/// `--apply --diff` adds each file content change's unified diff to what a step lists.
#[test]
fn package_diff_shows_the_unified_diff_of_a_config_edit() {
    require_root!();
    let pkg = tempfile::tempdir().unwrap();
    changes_package(pkg.path());
    let fr = changes_root();
    let before = tree(fr.root());
    let out = run_package(pkg.path(), "apply", fr.root(), &["--diff"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let edit = pkg.path().join("skyhook_dir/edit.rhai");
    assert_eq!(
        text(&out.stdout),
        format!(
            "==> step edit: edit.rhai\n\
             start\n\
             {}\
             end\n\
             ==> step greet: greet.sh\n\
             > would run: greet.sh\n\
             Plan: 3 to change, 0 unchanged, 1 action.\n",
            edit_changes_diff(&edit.display().to_string())
        )
    );
    assert_eq!(tree(fr.root()), before);

    let (out, stdout) = package_apply(pkg.path(), &fr, &["--diff"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let at = "/var/lib/skyhook/skyhook-run/changes-1.0.0/skyhook_dir/edit.rhai";
    let want = format!(
        "start\n\
         end\n\
         {}\
         Apply: 3 changed, 0 unchanged.\n\
         SUCEEDED: edit.rhai \n",
        edit_changes_diff(at)
    );
    assert!(stdout.contains(&want), "{stdout}");
    assert_eq!(fr.read("/etc/demo.conf"), "a=1\nk=v\n");
}

/// `--package --apply --output json`: the document has each step and what it did, a
/// `.rhai` step's changes with their positions, a bash step's return code; it follows the
/// schema.
#[test]
fn package_apply_json_carries_each_steps_changes() {
    require_root!();
    let pkg = tempfile::tempdir().unwrap();
    changes_package(pkg.path());
    let fr = changes_root();
    let (out, _) = package_apply(pkg.path(), &fr, &["--output", "json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v = valid_json(&out);
    assert_eq!(v["apply"], true);
    assert_eq!(v["ok"], true);
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["mode"], "apply");
    assert_eq!(v["package"], "changes");
    assert_eq!(v["copy_dir"], "/var/lib/skyhook/skyhook-run/changes-1.0.0");
    assert_eq!(v["summary"], "Apply: 3 changed, 0 unchanged, 1 action.");
    let edit = &v["steps"][0];
    assert_eq!(edit["kind"], "rhai");
    assert_eq!(edit["result"]["summary"], "Apply: 3 changed, 0 unchanged.");
    let at = "/var/lib/skyhook/skyhook-run/changes-1.0.0/skyhook_dir/edit.rhai";
    let changes: Vec<(&str, &Value)> = edit["result"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["summary"].as_str().unwrap(), &c["position"]))
        .collect();
    assert_eq!(
        changes,
        [
            (
                "create /etc/demo.d/a.conf (mode 0644)",
                &serde_json::json!({"file": at, "line": 2})
            ),
            (
                "update /etc/demo.conf",
                &serde_json::json!({"file": at, "line": 3})
            ),
            (
                "remove /etc/old.conf",
                &serde_json::json!({"file": at, "line": 4})
            ),
        ]
    );
    assert_eq!(
        edit["result"]["changes"][0]["mkdir"],
        serde_json::json!(["/etc/demo.d"])
    );
    let greet = &v["steps"][1];
    assert_eq!(greet["kind"], "process");
    assert_eq!(greet["result"]["ok"], true);
    assert_eq!(greet["result"]["return_code"], 0);
    assert_eq!(greet["result"]["changes"], serde_json::json!([]));
    // the agent's output went to stderr
    assert!(text(&out.stderr).contains("SUCEEDED: edit.rhai"), "{out:?}");

    // a check mode with --apply: the same document, on the Check executor, no drift left
    let out = run_package(
        pkg.path(),
        "apply-check",
        fr.root(),
        &["--apply", "--output", "json"],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v = valid_json(&out);
    assert_eq!(v["mode"], "check");
    assert_eq!(v["summary"], "Plan: 0 to change, 3 unchanged.");
    assert_eq!(v["steps"][0]["result"]["drift"], 0);
}

/// `docs/plan.schema.json`, compiled (draft 2020-12, local references only).
fn plan_schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(manifest("docs/plan.schema.json")).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    jsonschema::draft202012::options().build(&schema).unwrap()
}

/// Parse stdout as one JSON document and validate it against the plan schema.
fn valid_json(out: &Output) -> Value {
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let errors: Vec<String> = plan_schema()
        .iter_errors(&v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{v:#}");
    v
}

/// Writes (one into a missing directory), an unguarded and a guarded command, prints and
/// log lines, interleaved.
const INTERLEAVED: &str = "print(\"start\");\n\
    fs::write(\"/etc/motd.d/10-gpu\", \"hello\\n\");\n\
    run([\"/usr/sbin/useradd\", \"gpuops\"], #{creates: \"/home/gpuops\"});\n\
    log::info(\"between\");\n\
    debug(\"to stderr\");\n\
    run([\"/usr/bin/systemctl\", \"restart\", \"x\"]);\n\
    fs::write(\"/etc/demo.conf\", \"a=2\\n\");\n\
    print(\"end\");\n";

#[test]
fn a_plan_lists_everything_in_order_with_positions() {
    let (root, _dir, script) = demo_script("s.rhai", INTERLEAVED);
    let before = tree(root.path());
    let out = run_script(&script, root.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        format!(
            "start\n\
             + mkdir /etc/motd.d\n\
             ~ create /etc/motd.d/10-gpu (mode 0644)  # {s}:2\n\
             --- /dev/null\n\
             +++ b/etc/motd.d/10-gpu\n\
             @@ -0,0 +1 @@\n\
             +hello\n\
             ~ run: /usr/sbin/useradd gpuops (creates /home/gpuops)  # {s}:3\n\
             INFO: between\n\
             > would run: /usr/bin/systemctl restart x  # {s}:6\n\
             ~ update /etc/demo.conf  # {s}:7\n\
             --- a/etc/demo.conf\n\
             +++ b/etc/demo.conf\n\
             @@ -1 +1 @@\n\
             -a=1\n\
             +a=2\n\
             end\n\
             Plan: 3 to change, 0 unchanged, 1 action.\n",
            s = script.display()
        )
    );
    // stderr output is written as it happens, not into the text plan
    assert_eq!(text(&out.stderr), "to stderr\n");
    assert_eq!(tree(root.path()), before);

    // the guard says done: skipped and unchanged
    write(root.path(), "home/gpuops/.keep", "");
    let out = run_script(&script, root.path(), &[]);
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("useradd"), "{stdout}");
    assert!(
        stdout.ends_with("\nPlan: 2 to change, 1 unchanged, 1 action.\n"),
        "{stdout}"
    );
    std::fs::remove_dir_all(root.path().join("home")).unwrap();

    // a check: the guarded command that would run is drift, like the writes
    let out = run_script(&script, root.path(), &["--mode", "apply-check"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("skyhook-run: drift: 3 pending change(s)"),
        "{out:?}"
    );

    // JSON: the same order, every stream, positions, hashes, diffs, counts
    let out = run_script(&script, root.path(), &["--output", "json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v = valid_json(&out);
    let items = v["items"].as_array().unwrap();
    let shape: Vec<String> = items
        .iter()
        .map(|i| match i["item"].as_str().unwrap() {
            "output" => format!(
                "{} {:?}",
                i["stream"].as_str().unwrap(),
                i["text"].as_str().unwrap()
            ),
            other => format!(
                "{other} {} line {}",
                i["kind"].as_str().unwrap(),
                i["position"]["line"]
            ),
        })
        .collect();
    assert_eq!(
        shape,
        [
            "stdout \"start\\n\"",
            "change write line 2",
            "change guarded_command line 3",
            "stdout \"INFO: between\\n\"",
            "stderr \"to stderr\\n\"",
            "action command line 6",
            "change write line 7",
            "stdout \"end\\n\"",
        ]
    );
    let script_file = script.display().to_string();
    assert_eq!(items[1]["position"]["file"], script_file.as_str());
    assert_eq!(items[1]["path"], "/etc/motd.d/10-gpu");
    assert_eq!(items[1]["mkdir"], serde_json::json!(["/etc/motd.d"]));
    assert_eq!(items[1]["before"], Value::Null);
    assert_eq!(items[2]["command"], "/usr/sbin/useradd gpuops");
    assert_eq!(items[2]["path"], Value::Null);
    assert_eq!(items[5]["command"], "/usr/bin/systemctl restart x");
    assert_eq!(
        items[6]["before"],
        format!("sha256:{}", sha256_hex("a=1\n"))
    );
    assert_eq!(items[6]["after"], format!("sha256:{}", sha256_hex("a=2\n")));
    assert_eq!(
        items[6]["diff"],
        "--- a/etc/demo.conf\n+++ b/etc/demo.conf\n@@ -1 +1 @@\n-a=1\n+a=2\n"
    );
    assert_eq!(
        v["counts"],
        serde_json::json!({"changes": 3, "unchanged": 0, "actions": 1, "interrupts": 0})
    );
    assert_eq!(v["errors"], serde_json::json!([]));
}

/// SHA-256 of `s` in hex, from the machine's `sha256sum` (an independent implementation).
fn sha256_hex(s: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    text(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn apply_with_diff_shows_the_plans_diffs() {
    let (root, _dir, script) = demo_script("apply.rhai", WRITE_DEMO);
    let planned = run_script(&script, root.path(), &[]);
    let out = run_script(&script, root.path(), &["--apply", "--diff"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        format!(
            "mode=apply dry_run=false\n{}Apply: 1 changed, 0 unchanged.\n",
            demo_diff(&script)
        )
    );
    // the same diff lines as the dry run printed
    let diff_of = |o: &Output| -> Vec<String> {
        text(&o.stdout)
            .lines()
            .filter(|l| l.starts_with(['-', '+', '@', '~']))
            .map(String::from)
            .collect()
    };
    assert_eq!(diff_of(&out), diff_of(&planned));
    assert_eq!(
        std::fs::read(root.path().join("etc/demo.conf")).unwrap(),
        b"a=2\n"
    );
    // JSON of an applied run carries the diff too
    std::fs::write(root.path().join("etc/demo.conf"), "a=1\n").unwrap();
    let out = run_script(
        &script,
        root.path(),
        &["--apply", "--diff", "--output", "json"],
    );
    let v = valid_json(&out);
    assert_eq!(v["mode"], "apply");
    assert_eq!(
        v["items"][1]["diff"],
        "--- a/etc/demo.conf\n+++ b/etc/demo.conf\n@@ -1 +1 @@\n-a=1\n+a=2\n"
    );
}

#[test]
fn the_json_schema_holds_for_real_plans() {
    // a script: plan, check with drift, apply
    let (root, dir, script) = demo_script("apply.rhai", WRITE_DEMO);
    for args in [
        vec!["--output", "json"],
        vec!["--output", "json", "--mode", "apply-check"],
        vec!["--output", "json", "--apply"],
    ] {
        let out = run_script(&script, root.path(), &args);
        let v = valid_json(&out);
        assert_eq!(v["script"], script.display().to_string(), "{args:?}");
    }
    // the schema is not vacuous: a plan missing its counts, or with a position on line 0,
    // or an item of an unknown kind, is rejected
    std::fs::write(root.path().join("etc/demo.conf"), "a=1\n").unwrap();
    let out = run_script(&script, root.path(), &["--output", "json"]);
    let good = valid_json(&out);
    let schema = plan_schema();
    let mut bad = good.clone();
    bad.as_object_mut().unwrap().remove("counts");
    assert!(!schema.is_valid(&bad));
    let mut bad = good.clone();
    bad["items"][1]["position"]["line"] = 0.into();
    assert!(!schema.is_valid(&bad));
    let mut bad = good;
    bad["items"][1]["item"] = "surprise".into();
    assert!(!schema.is_valid(&bad));
    // a runtime error: {file, line, column, message}
    let failing = write(
        dir.path(),
        "fails.rhai",
        "print(\"x\");\nfs::write(\"relative\", \"y\");\n",
    );
    let v = valid_json(&run_script(&failing, root.path(), &["--output", "json"]));
    assert_eq!(v["ok"], false);
    assert_eq!(v["errors"][0]["file"], failing.display().to_string());
    assert_eq!(v["errors"][0]["line"], 2);
    assert_eq!(v["errors"][0]["column"], 5);
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("fs::write: "),
        "{v:#}"
    );
    // a compile error: the failure document
    let syntax = write(dir.path(), "syntax.rhai", "let x = ;\n");
    let v = valid_json(&run_script(&syntax, root.path(), &["--output", "json"]));
    assert_eq!(
        v["errors"],
        serde_json::json!([{"file": syntax.display().to_string(), "line": 1, "column": 9,
            "message": "Unexpected ';'"}])
    );
    // packages: the tuning example (stdlib positions), a mixed one with a process step,
    // and the same failing on a missing env: variable
    let out = run_package(
        &manifest("examples/tuning"),
        "config",
        tuning_root().path(),
        &["--output", "json"],
    );
    let v = valid_json(&out);
    let first = &v["steps"][0]["result"]["items"][0];
    assert_eq!(first["item"], "change");
    assert!(
        first["position"]["file"]
            .as_str()
            .unwrap()
            .starts_with("stdlib/"),
        "{first:#}"
    );
    let pkg = tempfile::tempdir().unwrap();
    mixed_package(pkg.path());
    let empty = tempfile::tempdir().unwrap();
    for env in [vec!["--env", "NODE_NAME=n1"], vec![]] {
        let out = run_package(
            pkg.path(),
            "apply",
            empty.path(),
            &[&["--output", "json"][..], &env].concat(),
        );
        let v = valid_json(&out);
        let kinds: Vec<&str> = v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["kind"].as_str().unwrap())
            .collect();
        let expected: &[&str] = if env.is_empty() {
            &["rhai", "failed", "not_run"]
        } else {
            &["rhai", "process", "rhai"]
        };
        assert_eq!(kinds, expected);
    }
    // a package that does not load: the failure document
    let bad = tempfile::tempdir().unwrap();
    write(bad.path(), "config.json", "{}");
    let out = run_package(bad.path(), "apply", empty.path(), &["--output", "json"]);
    let v = valid_json(&out);
    assert_eq!(v["ok"], false);
}

/// A dry run judges requested interrupts as the agent does: against `--skyhook-cr` (or the
/// package's node-metadata/packages.json); an undeclared reboot fails the step with the CR
/// lines to add, a declared one plans; `skyhook-agent validate` warns about the request.
#[test]
fn dry_run_judges_requested_interrupts_against_the_cr() {
    let pkg = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let step = |name: &str, path: &str| {
        serde_json::json!({"name": name, "path": path, "arguments": [], "returncodes": [0],
                           "on_host": true, "idempotence": false, "upgrade_step": false})
    };
    let cfg = serde_json::json!({"schema_version": "v1", "expected_config_files": [],
        "package_name": "demo", "package_version": "1.0.0",
        "modes": {"apply": [step("r", "r.rhai")], "apply-check": [step("r", "r.rhai")]}});
    write(pkg.path(), "config.json", &cfg.to_string());
    write(
        pkg.path(),
        "skyhook_dir/r.rhai",
        "\n  interrupt::reboot();\n",
    );
    let cr = |body: &str| {
        write(
            pkg.path(),
            "cr.yaml",
            &format!("kind: Skyhook\nspec:\n  packages:\n    demo:\n      version: 1.0.0\n{body}"),
        )
    };
    let plan = |extra: &[&str]| {
        run_package(
            pkg.path(),
            "apply",
            root.path(),
            &[&["--output", "json"][..], extra].concat(),
        )
    };
    // Not declared.
    let cr_path = cr("");
    let out = plan(&["--skyhook-cr", cr_path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let v = valid_json(&out);
    let result = &v["steps"][0]["result"];
    assert_eq!(result["ok"], false);
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .ends_with("Add to spec.packages.demo: interrupt: {type: reboot}"),
        "{v:#}"
    );
    // Declared.
    let cr_path = cr("      interrupt:\n        type: reboot\n");
    let out = plan(&["--skyhook-cr", cr_path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v = valid_json(&out);
    assert_eq!(
        v["steps"][0]["result"]["interrupts"][0]["type"], "reboot",
        "{v:#}"
    );
    // validate warns with the position of the call.
    let out = Command::new(env!("CARGO_BIN_EXE_skyhook-agent"))
        .arg("validate")
        .arg(pkg.path().join("config.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(
        err.contains("skyhook_dir/r.rhai:2:14: step r.rhai can request interrupt::reboot(): the package's Skyhook CR must declare it (interrupt: {type: reboot}"),
        "{err}"
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
        let out = run_package(pkg.path(), "uninstall", root.path(), extra);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(
            text(&out.stderr),
            "skyhook-run: package mixed 1.0.0 has no uninstall steps: nothing to run (modes \
             with steps: apply, apply-check)\n"
        );
    }
}

/// In an apply, batched line edits (src/host/batch.rs) are written before every read of the
/// host: each read of the script sees every edit made before it (`fs::read`, `fs::stat`,
/// `fs::exists` and `fs::list` of a new file, a command's `cat`, `toml::get`).
#[test]
fn apply_reads_see_every_batched_line_edit() {
    require_root!();
    let fr = crate::util::FakeRoot::new();
    let dir = tempfile::tempdir().unwrap();
    let script = write(
        dir.path(),
        "r.rhai",
        "let f = \"/etc/b.conf\";\n\
         fs::ensure_line(f, \"a\");\n\
         fs::ensure_line(f, \"b\");\n\
         print(`read: ${fs::read(f)}`);\n\
         fs::ensure_line(f, \"c\");\n\
         print(`size: ${fs::stat(f).size}`);\n\
         fs::ensure_line(\"/etc/b.d/n.conf\", \"n\");\n\
         print(`exists: ${fs::exists(\"/etc/b.d/n.conf\")}`);\n\
         fs::ensure_line(\"/etc/b.d/m.conf\", \"m\");\n\
         print(`list: ${fs::list(\"/etc/b.d\")}`);\n\
         fs::ensure_line(f, \"d\");\n\
         print(`cat: ${sh(\"cat /etc/b.conf\").stdout}`);\n\
         fs::ensure_line(\"/etc/t.toml\", \"k = 1\");\n\
         print(`toml: ${toml::get(\"/etc/t.toml\", \"k\")}`);\n",
    );
    let out = run_script(&script, fr.root(), &["--apply"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = text(&out.stdout);
    let printed: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            !l.is_empty()
                && !["~ ", "+ ", "> ", "Apply:"]
                    .iter()
                    .any(|p| l.starts_with(p))
        })
        .collect();
    assert_eq!(
        printed,
        [
            "read: a",
            "b",
            "size: 6",
            "exists: true",
            "list: [\"m.conf\", \"n.conf\"]",
            "cat: a",
            "b",
            "c",
            "d",
            "toml: 1",
        ],
        "{stdout}"
    );
    assert!(
        stdout.ends_with("Apply: 7 changed, 0 unchanged, 1 action.\n"),
        "{stdout}"
    );
    assert_eq!(fr.read("/etc/b.conf"), "a\nb\nc\nd\n");
}

/// A stream's lines as they come and, once it ends, its whole text.
type Lines = (
    std::sync::mpsc::Receiver<String>,
    std::thread::JoinHandle<String>,
);

/// `cmd` spawned with its stdout and stderr read line by line: the child and the two
/// streams' [`Lines`].
fn spawn_reading(mut cmd: Command) -> (std::process::Child, Lines, Lines) {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = crate::util::line_reader(child.stdout.take().unwrap());
    let err = crate::util::line_reader(child.stderr.take().unwrap());
    (child, out, err)
}

/// Send signal `sig` to our own `child`.
fn signal(child: &std::process::Child, sig: i32) {
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// SIGTERM to `skyhook-run --apply` while line edits are batched (the script is in a loop
/// that only repeats an unchanged edit, so nothing has flushed them): the script is
/// cancelled, the batch is written and, the step having failed, undone with the directory
/// it created; the run says why, lists the 50 changes it made and exits 1.
#[test]
fn sigterm_during_an_apply_undoes_the_batched_edits() {
    let root = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = write(
        dir.path(),
        "s.rhai",
        "for i in 0..50 { fs::ensure_line(\"/etc/f\", `l ${i}`); }\n\
         print(\"ready\");\n\
         loop { fs::ensure_line(\"/etc/f\", \"l 0\"); }\n",
    );
    let mut cmd = skyhook_run();
    cmd.arg(&script)
        .arg("--root")
        .arg(root.path())
        .arg("--apply");
    let (mut child, (lines, out), (_, err)) = spawn_reading(cmd);
    let ready = lines.iter().any(|l| l == "ready");
    assert!(ready, "the script never printed ready");
    assert!(
        !root.path().join("etc/f").exists(),
        "the edits were written before the end: nothing was batched"
    );
    signal(&child, libc::SIGTERM);
    let status = child.wait().unwrap();
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    assert_eq!(status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        !root.path().join("etc").exists(),
        "the cancelled step's edits were not undone"
    );
    assert!(
        stderr.contains("skyhook-run: received SIGTERM: stopping the script")
            && stderr.contains("s.rhai:3:")
            && stderr.contains("step cancelled"),
        "{stderr}"
    );
    assert!(stdout.contains("Apply: 50 changed"), "{stdout}");
}

/// A second SIGINT during `--package ... --apply` ends skyhook-run at once with 130, as for a
/// script (the first stops the agent's run after the running step; the step here never
/// ends, so the run ended only when the step did); the agent names the signal it got.
#[test]
fn second_signal_during_a_package_apply_exits_at_once() {
    let root = tempfile::tempdir().unwrap();
    let pkg = tempfile::tempdir().unwrap();
    let made = Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
        .args(["new", "sig"])
        .current_dir(pkg.path())
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let dir = pkg.path().join("sig");
    write(
        &dir,
        "skyhook_dir/apply.rhai",
        // The preflight plans the step first: it loops only in the apply.
        "if step.dry_run { return; }\nprint(\"ready\");\nloop { fs::exists(\"/etc\"); }\n",
    );
    let mut cmd = skyhook_run();
    cmd.arg("--package")
        .arg(&dir)
        .args(["--mode", "apply", "--apply", "--root"])
        .arg(root.path());
    let (mut child, (lines, out), (errs, err)) = spawn_reading(cmd);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let ready = loop {
        match lines.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
            Ok(l) if l.contains("ready") => break true,
            Ok(_) => {}
            Err(_) => break false,
        }
    };
    if !ready {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the step never printed ready: {}", err.join().unwrap());
    }
    signal(&child, libc::SIGINT);
    // The agent and skyhook-run have both taken the first signal when each says so (a
    // second signal sent before that would be coalesced with the first).
    let (mut agent, mut run) = (false, false);
    let taken = loop {
        match errs.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
            Ok(l) if l.contains("skyhook-agent: received SIGINT") => agent = true,
            Ok(l) if l.contains("skyhook-run: received SIGINT: a second signal exits") => {
                run = true
            }
            Ok(_) => {}
            Err(_) => break false,
        }
        if agent && run {
            break true;
        }
    };
    signal(&child, libc::SIGINT);
    let status = child.wait().unwrap();
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    assert!(taken, "{stderr}");
    assert_eq!(status.code(), Some(130), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("skyhook-run: received SIGINT again: exiting now"),
        "{stderr}"
    );
}

/// What --help rules out is a usage error (2) naming the problem: --skyhook-cr with a
/// SCRIPT (it was ignored, exit 0), --mode interrupt with --package (exit 1), a --remote
/// URL of another scheme (exit 1). With --output json, an error before the run still
/// prints one JSON document (a SCRIPT that is not .rhai, a missing --configmaps, left
/// stdout empty), and so does a usage error found after parsing (an unknown mode).
#[test]
fn refusals_are_usage_errors_and_json_errors_are_documents() {
    let root = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let r = root.path().to_str().unwrap();
    let script = write(dir.path(), "w.rhai", "print(1);\n");
    let s = script.to_str().unwrap();
    // `skyhook-run ARGS --output json`: its output and the document on its stdout.
    let json_run = |args: &[&str]| {
        let out = skyhook_run()
            .args(args)
            .args(["--output", "json"])
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {out:?}"));
        (out, doc)
    };
    for (args, says) in [
        (
            vec![s, "--root", r, "--skyhook-cr", "cr.yaml"],
            "--skyhook-cr judges the interrupts of a package's steps",
        ),
        (
            vec![
                "--package",
                "examples/tuning",
                "--mode",
                "interrupt",
                "--root",
                r,
            ],
            "--mode interrupt: the operator runs a package's interrupts",
        ),
        (
            vec![s, "--remote", "ftp://x", "--token-file", "f"],
            "invalid value 'ftp://x' for '--remote <URL>'",
        ),
    ] {
        let out = skyhook_run().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(text(&out.stderr).contains(says), "{args:?}: {out:?}");
        assert_eq!(text(&out.stdout), "", "{args:?}");
    }
    // a usage error found after parsing is a document too, with exit code 2
    for args in [
        vec![s, "--root", r, "--skyhook-cr", "cr.yaml"],
        vec![
            "--package",
            "examples/tuning",
            "--mode",
            "interrupt",
            "--root",
            r,
        ],
        vec![s, "--root", r, "--mode", "nosuchmode"],
        vec![s, "--remote", "http://127.0.0.1:1"],
    ] {
        let (out, doc) = json_run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert_eq!(
            (&doc["ok"], &doc["exit_code"]),
            (&Value::Bool(false), &Value::from(2))
        );
    }
    let txt = write(dir.path(), "notrhai.txt", "");
    for (args, says) in [
        (
            vec![txt.to_str().unwrap(), "--root", r],
            "notrhai.txt is not a Rhai script",
        ),
        (
            vec![s, "--root", r, "--configmaps", "/nonexistent-cm"],
            "--configmaps /nonexistent-cm: no such directory",
        ),
    ] {
        let (out, doc) = json_run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        assert_eq!(doc["ok"], false);
        assert_eq!(doc["exit_code"], 1);
        assert!(doc["error"].as_str().unwrap().contains(says), "{doc}");
    }
}

/// A script that fails after changing a file: `--apply` exits 1, the file is put back, and
/// besides the report of what it did, stderr says that those changes were undone, so the
/// text output does not read as applied.
#[test]
fn a_failed_apply_says_its_file_changes_were_undone() {
    require_root!();
    let root = demo_root();
    let dir = tempfile::tempdir().unwrap();
    let script = write(
        dir.path(),
        "fail.rhai",
        "fs::write(\"/etc/demo.conf\", \"a=2\\n\");\nthrow \"late failure\";\n",
    );
    let out = run_script(&script, root.path(), &["--apply"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("skyhook-run: the script failed: 1 of the changes listed were undone"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("etc/demo.conf")).unwrap(),
        "a=1\n"
    );
}
