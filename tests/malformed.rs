//! A malformed-input corpus, generated here: mutated config.json documents, unusable names
//! and values, non-regular files in place of config.json, out-of-range settings and broken
//! interrupt payloads. Every case must exit 1 with one error line on stderr, never panic,
//! and leave the host root exactly as it was (no `START`, no flag, no log).

use std::fs;
use std::os::unix::fs::symlink;

use serde_json::{Value, json};

use crate::util::*;

/// What one case changes before the agent runs.
enum Input {
    /// config.json is this text.
    Config(String),
    /// config.json is replaced by something that is not a regular file (set up by the closure).
    Special(&'static str),
    /// The environment variable is set for this run (config stays fixture P).
    Env(&'static str, String),
    /// `interrupt` with this payload.
    Interrupt(String),
}

fn mutated(f: impl FnOnce(&mut Value)) -> Input {
    let mut d = p_config();
    f(&mut d);
    Input::Config(d.to_string())
}

fn corpus() -> Vec<(String, Input)> {
    let mut cases: Vec<(String, Input)> = Vec::new();
    for text in [
        "",
        "{",
        "\u{0}",
        "[]",
        "null",
        "123",
        "\"v1\"",
        "{\"modes\": 5}",
    ] {
        cases.push((
            format!("not a config: {text:?}"),
            Input::Config(text.into()),
        ));
    }
    for key in [
        "schema_version",
        "package_name",
        "package_version",
        "modes",
        "expected_config_files",
    ] {
        cases.push((
            format!("missing {key}"),
            mutated(|d| {
                d.as_object_mut().unwrap().remove(key);
            }),
        ));
    }
    let long = "n".repeat(300);
    for name in ["", ".", "..", "a/b", "a\u{0}b", "demo\n", long.as_str()] {
        let name = name.to_string();
        cases.push((
            format!("package_name {:?}", &name[..name.len().min(20)]),
            mutated(move |d| d["package_name"] = json!(name)),
        ));
    }
    for v in ["../x", "1.0.0\n", "1.0", ""] {
        cases.push((
            format!("package_version {v:?}"),
            mutated(|d| d["package_version"] = json!(v)),
        ));
    }
    cases.push((
        "a 10 MB argument".into(),
        mutated(|d| d["modes"]["apply"][0]["arguments"] = json!(["x".repeat(10 << 20)])),
    ));
    cases.push((
        "100k arguments".into(),
        mutated(|d| d["modes"]["apply"][0]["arguments"] = json!(vec!["a"; 100_000])),
    ));
    cases.push((
        "env key with NUL".into(),
        mutated(|d| d["modes"]["apply"][0]["env"] = json!({"A\u{0}": "1"})),
    ));
    for path in ["a\u{0}.sh", "/abs.sh", "../up.sh", ""] {
        cases.push((
            format!("step path {path:?}"),
            mutated(|d| d["modes"]["apply"][0]["path"] = json!(path)),
        ));
    }
    for codes in [json!([1e30]), json!(["x"]), json!([0, 2.5]), json!(5)] {
        cases.push((
            format!("returncodes {codes}"),
            mutated(|d| d["modes"]["apply"][0]["returncodes"] = codes),
        ));
    }
    cases.push((
        "unknown mode".into(),
        mutated(|d| d["modes"]["explode"] = json!([])),
    ));
    cases.push((
        "steps not objects".into(),
        mutated(|d| d["modes"]["apply"] = json!([1, "x", null])),
    ));
    for special in [
        "fifo",
        "directory",
        "char device",
        "2 GiB sparse",
        "dangling symlink",
    ] {
        cases.push((
            format!("config.json is a {special}"),
            Input::Special(special),
        ));
    }
    for (k, v) in [
        ("SKYHOOK_SCRIPT_TIMEOUT", "18446744073709551615".to_string()),
        ("SKYHOOK_SCRIPT_TIMEOUT", "0".into()),
        ("SKYHOOK_SCRIPT_TIMEOUT", "abc".into()),
        ("SKYHOOK_RESOURCE_ID", format!("{RID}\n")),
        ("SKYHOOK_RESOURCE_ID", "a_b".into()),
        (
            "SKYHOOK_RESOURCE_ID",
            format!("a_b_{}", "9".repeat(100_000)),
        ),
        ("SKYHOOK_ROOT_DIR", "t/state".into()),
        ("SKYHOOK_LOG_DIR", "./log".into()),
    ] {
        cases.push((format!("{k}={:?}", &v[..v.len().min(24)]), Input::Env(k, v)));
    }
    let b64 = |s: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    for payload in [
        "!!!not base64".to_string(),
        b64("not json"),
        b64("[]"),
        b64("{\"type\": 5}"),
        b64("{\"type\": \"explode\"}"),
        b64("{\"type\": \"service_restart\", \"services\": \"x\"}"),
        b64(&"x".repeat(90_000)),
        String::new(),
    ] {
        cases.push((
            format!("interrupt payload {:?}", &payload[..payload.len().min(24)]),
            Input::Interrupt(payload),
        ));
    }
    cases
}

#[test]
fn malformed_inputs_exit_1_with_one_line_and_change_nothing() {
    require_root!();
    let cases = corpus();
    assert!(cases.len() >= 50, "{} cases", cases.len());
    for (name, input) in cases {
        let mut fr = FakeRoot::new();
        fr.write_p();
        let config = fr.host("/t/pkg/config.json");
        let mut mode = "apply";
        let mut payload = None;
        match &input {
            Input::Config(text) => {
                fs::write(&config, text).unwrap();
            }
            Input::Special(kind) => {
                fs::remove_file(&config).unwrap();
                match *kind {
                    "fifo" => nix::unistd::mkfifo(
                        &config,
                        nix::sys::stat::Mode::from_bits_truncate(0o644),
                    )
                    .unwrap(),
                    "directory" => fs::create_dir(&config).unwrap(),
                    "char device" => nix::sys::stat::mknod(
                        &config,
                        nix::sys::stat::SFlag::S_IFCHR,
                        nix::sys::stat::Mode::from_bits_truncate(0o666),
                        nix::sys::stat::makedev(1, 5),
                    )
                    .unwrap(),
                    "2 GiB sparse" => fs::File::create(&config).unwrap().set_len(2 << 30).unwrap(),
                    "dangling symlink" => symlink("/t/nowhere.json", &config).unwrap(),
                    other => unreachable!("{other}"),
                }
            }
            Input::Env(k, v) => {
                if *k == "SKYHOOK_SCRIPT_TIMEOUT" {
                    // a .rhai step, so the timeout matters to this run
                    fr.write_step("s.rhai", "0\n");
                    let mut d = p_config();
                    d["modes"]["apply"] = json!([step("s", "s.rhai", &[])]);
                    fr.write_config(&d);
                }
                fr.set_env(k, v);
            }
            Input::Interrupt(p) => {
                mode = "interrupt";
                payload = Some(p.clone());
            }
        }
        let before = fr.snapshot();
        let r = fr.root_str();
        let run = match &payload {
            Some(p) => fr.run_args(&[mode, &r, "/t/pkg", p]),
            None => fr.run(mode),
        };
        let ctx = format!(
            "case {name}\n--- stderr ---\n{}\n--- stdout ---\n{}",
            &run.stderr[..run.stderr.len().min(2000)],
            &run.stdout[..run.stdout.len().min(2000)]
        );
        assert_eq!(run.code, 1, "{ctx}");
        assert!(!run.stderr.contains("panicked"), "{ctx}");
        let lines: Vec<&str> = run.stderr.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 1, "one error line: {ctx}");
        assert!(lines[0].starts_with("skyhook-agent: error: "), "{ctx}");
        assert!(lines[0].len() <= 1200, "a readable line: {ctx}");
        assert_eq!(fr.snapshot(), before, "nothing written: {ctx}");
        assert!(!fr.exists("/t/state/flags/START"), "{ctx}");
    }
}
