//! Property tests (fuzz-style, bounded, deterministic) of the parsers and formatters that take
//! untrusted input: the config.json loader, the interrupt payload decoder, the Python-repr
//! flag namer (against python3 itself), the grub configMap parser and the log chunker.
//!
//! These run in every `cargo test`, with a fixed number of cases each (`PROPTEST_CASES`
//! raises it for a longer run); the coverage-guided libFuzzer targets of the same surfaces,
//! run by hand for a bounded time, are in `tests/fuzz/` (its README).

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};

fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// A valid config.json document, as a serde value.
fn valid_doc() -> serde_json::Value {
    serde_json::json!({"schema_version": "v1", "root_dir": "/", "expected_config_files": [],
      "package_name": "demo", "package_version": "1.0.0",
      "modes": {
        "apply": [{"name": "foo", "path": "foo.sh", "arguments": ["a", "b"], "returncodes": [0],
                   "on_host": true, "idempotence": false, "upgrade_step": false, "env": {"A": "1"}}],
        "apply-check": [{"name": "foo_check", "path": "foo_check.sh", "arguments": [],
                         "returncodes": [0], "on_host": true, "idempotence": false,
                         "upgrade_step": false}]}})
}

/// Replace the value at a pseudo-random place of `doc` (chosen by `pick`) with `with`.
fn mutate(doc: &mut serde_json::Value, pick: u64, with: serde_json::Value) {
    use serde_json::Value;
    let mut node = doc;
    let mut pick = pick;
    loop {
        let len = match node {
            Value::Object(m) => m.len(),
            Value::Array(a) => a.len(),
            _ => 0,
        };
        if len == 0 || pick.is_multiple_of(4) {
            *node = with;
            return;
        }
        let i = (pick as usize / 4) % len;
        pick /= 7;
        node = match node {
            Value::Object(m) => m.values_mut().nth(i).expect("index in range"),
            Value::Array(a) => &mut a[i],
            _ => unreachable!("len > 0"),
        };
    }
}

fn json_leaf() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(serde_json::Value::from),
        ".{0,40}".prop_map(serde_json::Value::from),
        Just(serde_json::json!([])),
        Just(serde_json::json!({})),
        Just(serde_json::json!(["x", 1, null])),
    ]
}

#[test]
fn config_loader_never_panics_on_bytes() {
    let mut runner = TestRunner::new(config(300));
    runner
        .run(&proptest::collection::vec(any::<u8>(), 0..512), |bytes| {
            let r = crate::package::load::parse(std::path::Path::new("/c.json"), &bytes);
            if let Err(e) = r {
                prop_assert!(!e.to_string().contains('\n'));
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn config_loader_never_panics_on_mutated_documents() {
    let mut runner = TestRunner::new(config(400));
    runner
        .run(&(any::<u64>(), json_leaf()), |(pick, leaf)| {
            let mut doc = valid_doc();
            mutate(&mut doc, pick, leaf);
            let text = doc.to_string();
            match crate::package::load::parse(std::path::Path::new("/c.json"), text.as_bytes()) {
                Ok(loaded) => {
                    // Whatever was accepted is usable as path parts.
                    let p = &loaded.package;
                    prop_assert!(!p.package_name.is_empty() && !p.package_name.contains('/'));
                    for (_, s) in p.all_steps() {
                        let _ = crate::state::flags::marker(s);
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    prop_assert!(!msg.contains('\n'), "{msg}");
                    prop_assert!(msg.len() < 4096, "{} bytes", msg.len());
                }
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn interrupt_decoder_never_panics() {
    use base64::Engine as _;
    let b64 = || base64::engine::general_purpose::STANDARD;
    let mut runner = TestRunner::new(config(400));
    runner
        .run(
            &prop_oneof![
                ".{0,80}".boxed(),
                json_leaf()
                    .prop_map(move |v| b64().encode(v.to_string()))
                    .boxed(),
                (".{0,12}", json_leaf())
                    .prop_map(move |(t, s)| b64()
                        .encode(serde_json::json!({"type": t, "services": s}).to_string()))
                    .boxed(),
            ],
            |payload| {
                let _ = crate::agent::interrupt::Interrupt::decode(&payload);
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn grub_configmap_parser_never_panics() {
    let mut runner = TestRunner::new(config(300));
    runner
        .run(&"(.{0,30}\n){0,6}", |text| {
            let args = crate::host::kernel::tuning::grub::parse(&text);
            for a in &args {
                prop_assert!(!a.contains('\n'));
            }
            Ok(())
        })
        .unwrap();
}

/// Any way of cutting a stream into chunks relays the same bytes (with one clock reading,
/// the timestamps are equal too): labels, line prefixes and UTF-8 handling never depend on
/// where a pipe read happened to end.
#[test]
fn log_chunker_output_does_not_depend_on_chunking() {
    use crate::logs::sink::{Label, Relay};
    let now = chrono::NaiveDate::from_ymd_opt(2025, 1, 2)
        .unwrap()
        .and_hms_micro_opt(3, 4, 5, 6)
        .unwrap();
    let relay_all = |chunks: &[&[u8]]| {
        let mut r = Relay::new(Label::Out);
        let mut out = Vec::new();
        for c in chunks {
            r.feed(c, now, &mut out);
        }
        r.finish(&mut out);
        out
    };
    let mut runner = TestRunner::new(config(300));
    runner
        .run(
            &(
                proptest::collection::vec(
                    prop_oneof![
                        Just(b'\n'),
                        Just(0xC3u8),
                        Just(0xA9u8),
                        Just(0xE2u8),
                        Just(0x82u8),
                        Just(0xACu8),
                        Just(0xFFu8),
                        b'a'..=b'z',
                    ],
                    0..200,
                ),
                proptest::collection::vec(0usize..200, 0..8),
            ),
            |(bytes, cuts)| {
                let whole = relay_all(&[&bytes]);
                let mut cuts: Vec<usize> = cuts.into_iter().filter(|c| *c < bytes.len()).collect();
                cuts.sort_unstable();
                cuts.dedup();
                let mut chunks: Vec<&[u8]> = Vec::new();
                let mut start = 0;
                for c in cuts {
                    chunks.push(&bytes[start..c]);
                    start = c;
                }
                chunks.push(&bytes[start..]);
                prop_assert_eq!(relay_all(&chunks), whole);
                Ok(())
            },
        )
        .unwrap();
}

/// `repr()` of a list of strings, ours against python3's own (one python3 process for all
/// cases), over ASCII with controls, Latin-1, General Punctuation (format characters such as
/// U+200B), CJK and emoji: code points whose category has not changed across Unicode
/// versions. This is the flag namer's core (contract 6.2).
#[test]
fn repr_matches_python3() {
    let Ok(python) = which_python() else {
        eprintln!("SKIPPED repr_matches_python3: python3 not found");
        return;
    };
    let ch = prop_oneof![
        (0u32..0x80).prop_map(|c| char::from_u32(c).unwrap()),
        (0x80u32..0x100).prop_map(|c| char::from_u32(c).unwrap()),
        (0x2000u32..0x2070).prop_map(|c| char::from_u32(c).unwrap()),
        (0x4e00u32..0x4e80).prop_map(|c| char::from_u32(c).unwrap()),
        (0x1f600u32..0x1f650).prop_map(|c| char::from_u32(c).unwrap()),
        Just('\''),
        Just('"'),
        Just('\\'),
    ];
    let list = proptest::collection::vec(
        proptest::collection::vec(ch, 0..12).prop_map(|v| v.into_iter().collect::<String>()),
        0..4,
    );
    let mut runner = TestRunner::new(config(500));
    let mut cases: Vec<Vec<String>> = Vec::new();
    for _ in 0..runner.config().cases {
        cases.push(list.new_tree(&mut runner).unwrap().current());
    }
    let input = serde_json::to_string(&cases).unwrap();
    let script = "import json,sys\nfor l in json.load(sys.stdin): print(json.dumps(repr(l)))";
    let mut child = std::process::Command::new(python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let theirs: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(theirs.len(), cases.len());
    for (case, py) in cases.iter().zip(&theirs) {
        assert_eq!(&crate::pyfmt::repr_str_list(case), py, "{case:?}");
    }
}

fn which_python() -> Result<std::path::PathBuf, ()> {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = std::path::Path::new(dir).join("python3");
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(())
}
