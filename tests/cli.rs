//! CLI conventions of both binaries: `--version` with the git revision and build date,
//! `skyhook-run completions SHELL` generated from the clap definitions.

use std::process::Command;

use crate::util::{AGENT, FakeRoot, TS, re, re_full};

const RUN: &str = env!("CARGO_BIN_EXE_skyhook-run");

fn out(bin: &str, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(bin)
        .args(args)
        .output()
        .expect("run the binary");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn version_has_revision_and_build_date() {
    for (bin, name) in [(AGENT, "skyhook-agent"), (RUN, "skyhook-run")] {
        for flag in ["--version", "-V"] {
            let (code, stdout, _) = out(bin, &[flag]);
            assert_eq!(code, 0, "{name} {flag}");
            let pattern = format!(
                r"{name} {} \((?:[0-9a-f]{{7,40}}|unknown), built \d{{4}}-\d\d-\d\d\)\n",
                regex::escape(env!("CARGO_PKG_VERSION"))
            );
            assert!(
                re_full(&pattern).is_match(&stdout),
                "{name} {flag}: {stdout:?} !~ {pattern}"
            );
        }
    }
}

#[test]
fn completions_for_bash_zsh_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, stdout, stderr) = out(RUN, &["completions", shell]);
        assert_eq!(code, 0, "{shell}: {stderr}");
        for word in ["skyhook-run", "package", "detailed-exitcode", "check"] {
            assert!(stdout.contains(word), "{shell} completions lack {word}");
        }
    }
    let (code, _, stderr) = out(RUN, &["completions", "tcsh"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("invalid value 'tcsh'"), "{stderr}");
}

/// `SKYHOOK_LOG=debug SKYHOOK_LOG_FORMAT=json` adds JSON diagnostic events with the mode,
/// step and command spans on stderr; stdout (the byte-compatible agent output) has the same
/// lines as without diagnostics.
#[test]
fn diagnostics_go_to_stderr_as_json_and_leave_stdout_alone() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    let plain = fr.run("apply");
    plain.code(0);
    let mut fr2 = FakeRoot::new();
    fr2.write_p();
    fr2.set_env("SKYHOOK_LOG", "skyhook=debug");
    fr2.set_env("SKYHOOK_LOG_FORMAT", "json");
    let traced = fr2.run("apply");
    traced.code(0);
    let shape = |s: &str| -> Vec<String> {
        let ts = re(TS);
        s.lines()
            .map(|l| {
                ts.replace_all(l, "TS")
                    .replace(fr.root_str().as_str(), "R")
                    .replace(fr2.root_str().as_str(), "R")
            })
            .collect()
    };
    assert_eq!(shape(&traced.stdout), shape(&plain.stdout));
    let events: Vec<serde_json::Value> = traced
        .stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert!(
        events.iter().any(|e| e["fields"]["message"] == "step ended"
            && e["span"]["name"] == "step"
            && e["span"]["path"] == "foo.sh"),
        "{}",
        traced.stderr
    );
    assert!(
        events.iter().any(|e| e["spans"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["name"] == "mode"))),
        "{}",
        traced.stderr
    );
}

/// `skyhook-run man DIR` writes both man pages from the clap definitions.
#[test]
fn man_pages_are_generated_from_the_definitions() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
        .arg("man")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let agent = std::fs::read_to_string(dir.path().join("skyhook-agent.1")).unwrap();
    assert!(agent.contains(".TH skyhook-agent 1"), "{agent}");
    assert!(agent.contains("validate CONFIG_JSON"), "{agent}");
    let run = std::fs::read_to_string(dir.path().join("skyhook-run.1")).unwrap();
    assert!(
        run.contains(".TH skyhook-run 1") && run.contains("\\-\\-skyhook\\-cr"),
        "{run}"
    );
    // serve's options have a page of their own (skyhook-agent.1 has none of them)
    let serve = std::fs::read_to_string(dir.path().join("skyhook-agent-serve.1")).unwrap();
    assert!(
        serve.contains(".TH skyhook-agent-serve 1")
            && serve.contains("\\-\\-alive\\-every")
            && serve.contains("\\-\\-workdir"),
        "{serve}"
    );
}

/// The binaries install the counting allocator (`#[global_allocator]` in `src/bin/*`): a
/// script that holds more than the default 256 MiB is stopped by the memory limit.
#[test]
fn skyhook_run_bounds_a_scripts_memory() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("big.rhai");
    std::fs::write(
        &script,
        "let m = #{};\nlet v = \"x\";\nv.pad(1000000, 'x');\nfor i in 0..100000 {\n    m[v + i] = i;\n}\n",
    )
    .unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let (code, _, stderr) = out(
        RUN,
        &[script.to_str().unwrap(), "--root", root.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("memory limit exceeded: the script holds more than 256 MiB (max_memory)"),
        "{stderr}"
    );
}

/// `skyhook-run new NAME` writes a package `check` and a dry run accept, and refuses (exit 1,
/// nothing written) when NAME exists.
#[test]
fn skyhook_run_new_writes_a_package_and_refuses_an_existing_one() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let o = Command::new(RUN)
            .current_dir(dir.path())
            .args(args)
            .output()
            .expect("run skyhook-run");
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = run(&["new", "demo", "--configmap", "a.conf"]);
    assert_eq!(
        (code, stdout.as_str()),
        (0, "skyhook-run: wrote package demo\n"),
        "{stderr}"
    );
    let readme = std::fs::read(dir.path().join("demo/README.md")).unwrap();
    let (code, stdout, stderr) = run(&["new", "demo"]);
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(
        stderr,
        "skyhook-run: error: demo: already exists (nothing written)\n"
    );
    assert_eq!(
        std::fs::read(dir.path().join("demo/README.md")).unwrap(),
        readme
    );
    let (code, stdout, stderr) = run(&[
        "check",
        "demo/skyhook_dir/apply.rhai",
        "demo/skyhook_dir/config.rhai",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        "OK demo/skyhook_dir/apply.rhai\nOK demo/skyhook_dir/config.rhai\n"
    );
    std::fs::create_dir(dir.path().join("root")).unwrap();
    let (code, stdout, stderr) = run(&[
        "--package",
        "demo",
        "--mode",
        "config-check",
        "--root",
        "root",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("configMap a.conf: 0 line(s)"), "{stdout}");
}

/// A result that cannot be written to stdout (`/dev/full`) fails the command with a
/// message; it exited 0 with the output lost (and `check` panicked, exit 101).
#[test]
fn a_result_that_cannot_be_written_fails() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let d = dir.path();
    std::fs::write(d.join("w.rhai"), "fs::write(\"/x\", \"y\");\n").unwrap();
    std::fs::create_dir(d.join("root1")).unwrap();
    let o = Command::new(RUN)
        .args(["new", "demo"])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let w = d.join("w.rhai");
    let (w, root, demo) = (
        w.to_str().unwrap(),
        d.join("root1").display().to_string(),
        d.join("demo").display().to_string(),
    );
    let config = format!("{demo}/config.json");
    let cases: Vec<(&str, Vec<&str>)> = vec![
        (RUN, vec!["check", w]),
        (RUN, vec![w, "--root", &root]),
        (RUN, vec![w, "--root", &root, "--output", "json"]),
        (
            RUN,
            vec!["--package", &demo, "--mode", "apply", "--root", &root],
        ),
        (RUN, vec!["--help"]),
        (AGENT, vec!["validate", &config]),
        (AGENT, vec!["--help"]),
        (AGENT, vec!["serve", "--version"]),
    ];
    for (bin, args) in cases {
        let o = Command::new(bin)
            .args(&args)
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("error: cannot write to stdout: No space left on device"),
            "{args:?}: {stderr}"
        );
    }
}
