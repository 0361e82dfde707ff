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
fn good_files_exit_0_silently() {
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
    assert_eq!(out.stdout, b"");
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
    assert_eq!(out.stdout, b"");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr,
        "syntax.rhai:2:9: Unexpected ';'\n\
         import.rhai:2:3: cannot import \"lib/missing\": lib/missing.rhai: No such file or \
         directory (os error 2)\n\
         lib/bad.rhai:3:1: Unexpected '}'\n"
    );
}

#[test]
fn usage_errors_exit_1() {
    let out = skyhook_run().output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = skyhook_run().arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = skyhook_run()
        .args(["check", "--bogus", "x.rhai"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = skyhook_run().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
}
