//! `skyhook-run check`: exit codes and message format of the built binary.

use std::path::Path;
use std::process::Command;

fn skyhook_run() -> Command {
    Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
}

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[test]
fn good_files_exit_0_with_one_ok_line_each() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "lib/util.rhai", "fn f() { 1 }\n");
    write(
        dir.path(),
        "a.rhai",
        "import \"lib/util\" as u;\nimport \"skyhook/hello\" as h;\nu::f()\n",
    );
    write(dir.path(), "b.rhai", "print(step.name);\n");
    let out = skyhook_run()
        .arg("check")
        .arg(dir.path().join("a.rhai"))
        .arg(dir.path().join("b.rhai"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "OK {}\nOK {}\n",
            dir.path().join("a.rhai").display(),
            dir.path().join("b.rhai").display()
        )
    );
    assert_eq!(out.stderr, b"");
}

#[test]
fn errors_exit_1_with_file_line_col() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "ok.rhai", "let x = 1;\n");
    write(dir.path(), "syntax.rhai", "let x = 1;\nlet y = ;\n");
    write(
        dir.path(),
        "import.rhai",
        "\n  import \"lib/missing\" as m;\n",
    );
    write(dir.path(), "lib/bad.rhai", "fn f() {\n  1 +\n}\n");
    write(dir.path(), "badmod.rhai", "import \"lib/bad\" as b;\n");
    // Relative paths as given on the command line are kept in the messages.
    let out = skyhook_run()
        .current_dir(dir.path())
        .args([
            "check",
            "ok.rhai",
            "syntax.rhai",
            "import.rhai",
            "badmod.rhai",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(out.stdout, b"OK ok.rhai\n");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr,
        "syntax.rhai:2:9: error: Unexpected ';'\n\
         import.rhai:2:3: error: cannot import \"lib/missing\": lib/missing.rhai: No such file \
         or directory (os error 2)\n\
         lib/bad.rhai:3:1: error: Unexpected '}'\n"
    );
}

/// The checker's findings through the CLI: errors exit 1, a file with warnings only is OK
/// (exit 0) with its warnings; a file that is not `.rhai` is refused.
#[test]
fn checker_findings_with_positions() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "typo.rhai", "fs::wrte(\"/etc/x\", \"y\");\n");
    write(
        dir.path(),
        "arity.rhai",
        "let ok = fs::write(\"/etc/x\");\n",
    );
    write(dir.path(), "module.rhai", "\nservcie::restart(\"x\");\n");
    write(
        dir.path(),
        "option.rhai",
        "fs::write(\"/etc/x\", \"y\", #{mdoe: 0o644});\n",
    );
    write(
        dir.path(),
        "stdlib.rhai",
        "import \"skyhook/tuning\" as t;\nt::confg();\n",
    );
    write(
        dir.path(),
        "traps.rhai",
        "let s = \" x \";\nlet t = s.trim();\nprint(`a\\nb`);\n",
    );
    write(dir.path(), "apply.sh", "echo hi\n");
    let out = skyhook_run()
        .current_dir(dir.path())
        .args([
            "check",
            "typo.rhai",
            "arity.rhai",
            "module.rhai",
            "option.rhai",
            "stdlib.rhai",
            "traps.rhai",
            "apply.sh",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "OK traps.rhai (2 warnings)\n"
    );
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "typo.rhai:1:1: error: unknown function fs::wrte (did you mean fs::write?)\n\
         arity.rhai:1:10: error: fs::write expects 2 or 3 arguments, got 1\n\
         module.rhai:2:1: error: unknown module servcie (did you mean service?)\n\
         option.rhai:1:28: error: fs::write: unknown option mdoe (did you mean mode? \
         accepted: mode, owner, group)\n\
         stdlib.rhai:2:1: error: unknown function t::confg in module \"skyhook/tuning\" (did \
         you mean t::config?)\n\
         traps.rhai:2:11: warning: trim() changes its object in place and returns (), but the \
         result is assigned to a variable: call `s.trim(..);` as a statement, then use `s`\n\
         traps.rhai:3:7: warning: backtick string contains \\n, which Rhai keeps as a \
         backslash and an `n` (backtick strings have no escapes): break the line in the string \
         itself, or use \"...\\n...\"\n\
         apply.sh: error: not a Rhai script (check takes .rhai files)\n"
    );
    // warnings alone: exit 0
    let out = skyhook_run()
        .current_dir(dir.path())
        .args(["check", "traps.rhai"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// `--help` documents the exit codes of `check`.
#[test]
fn help_documents_check_exit_codes() {
    let out = skyhook_run().arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains("Checking scripts (skyhook-run check FILE...):"),
        "{help}"
    );
    assert!(
        help.contains("Exit 0: no errors (warnings allowed); 1: any"),
        "{help}"
    );
    let out = skyhook_run().args(["check", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("Exit 0 when no file has an error"), "{help}");
}

#[test]
fn usage_errors_exit_2() {
    let out = skyhook_run().output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = skyhook_run().arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = skyhook_run()
        .args(["check", "--bogus", "x.rhai"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = skyhook_run().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
}
