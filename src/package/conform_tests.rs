//! `conforms_v1` against the compiled schema: every document of a corpus of bad configs (the
//! inputs of the loader's, the schema's and `tests/malformed.rs`'s tests of bad configs, and
//! edge cases: extra fields, wrong types in nested fields, null, integral floats, the two
//! patterns) and of mutated and generated documents gets the same verdict from both, and
//! [`parse`] the same result as a parse that always asks the schema.

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

use super::conforms_v1;
use crate::package::load::{parse, parse_with};
use crate::package::schema::validate_v1;

fn step(name: &str, path: &str) -> Value {
    json!({"name": name, "path": path, "arguments": [], "returncodes": [0],
           "on_host": true, "idempotence": false, "upgrade_step": false})
}

fn valid() -> Value {
    json!({"schema_version": "v1", "root_dir": "/", "expected_config_files": ["a.conf"],
           "package_name": "demo", "package_version": "1.0.0",
           "modes": {"apply": [{"name": "foo", "path": "foo.sh", "arguments": ["a"],
                                "returncodes": [0, 1], "on_host": true, "idempotence": false,
                                "upgrade_step": false, "env": {"A": "1"},
                                "requires_interrupt": false}],
                     "apply-check": [step("foo_check", "foo_check.sh")]}})
}

/// `valid()` with `f` applied.
fn with(f: impl FnOnce(&mut Value)) -> Value {
    let mut d = valid();
    f(&mut d);
    d
}

/// Remove `key` from the object at `d`.
fn without(d: &mut Value, key: &str) {
    d.as_object_mut().expect("an object").remove(key);
}

/// Both verdicts and both parses of `doc` agree (the case named by `what`).
fn same_verdict(what: &str, doc: &Value) {
    let violations = validate_v1(doc).expect("the schema compiles");
    assert_eq!(
        conforms_v1(doc),
        violations.is_empty(),
        "{what}: conforms_v1 and the schema disagree on {doc}; schema: {violations:?}"
    );
    same_parse(what, doc.to_string().as_bytes());
}

/// `parse` gives what a parse that always asks the schema gives: the same package and
/// warnings, or the same error message.
fn same_parse(what: &str, text: &[u8]) {
    let file = Path::new("/pkg/config.json");
    let fast = parse(file, text).map_err(|e| e.to_string());
    let schema = parse_with(file, text, |_| false).map_err(|e| e.to_string());
    assert_eq!(fast, schema, "{what}");
}

/// The bad (and some good) configs of the loader's, the schema's and the malformed-input
/// tests, and edge cases of every keyword of the schema.
fn corpus() -> Vec<(String, Value)> {
    let mut c: Vec<(String, Value)> = vec![("valid".into(), valid())];
    let mut add = |what: &str, d: Value| c.push((what.to_string(), d));
    // Not an object at all (tests/malformed.rs).
    for d in [json!([]), json!(null), json!(123), json!("v1"), json!(true)] {
        add("not an object", d);
    }
    add("modes 5", json!({"modes": 5}));
    add("schema_version only", json!({"schema_version": "v1"}));
    for key in [
        "schema_version",
        "package_name",
        "package_version",
        "expected_config_files",
        "modes",
        "root_dir",
    ] {
        add(&format!("missing {key}"), with(|d| without(d, key)));
        add(&format!("{key} null"), with(|d| d[key] = Value::Null));
        add(&format!("{key} number"), with(|d| d[key] = json!(1)));
        add(&format!("{key} object"), with(|d| d[key] = json!({})));
        add(&format!("{key} array"), with(|d| d[key] = json!([])));
    }
    add(
        "extra top-level fields",
        with(|d| {
            d["other"] = json!({"x": [null]});
            d["$schema"] = json!(5);
        }),
    );
    for v in [
        "1.0",
        "a",
        "1.0.0-",
        "1.0.0_",
        "2024.01.01",
        "01.0.0",
        "../x",
        "1.0.0\n",
        "",
        "1.0.0+",
        "1.0.0-a..b",
        "1.0.0-01",
        "1.0.0+b..c",
        "1.0.0 ",
        " 1.0.0",
        "1.0.0.0",
        "1..0",
        "1.0.0-+b",
        "1.0.0+b+c",
        "v1.0.0",
        "1.0.0-α",
        "1.0.0-rc.1+b.2",
        "1.0.0-0a.00a.-",
        "1.0.0-0",
        "1.0.0+001",
        "0.0.0",
        "1.0.0-dev",
        "2024.12.19",
    ] {
        add(
            &format!("package_version {v:?}"),
            with(|d| d["package_version"] = json!(v)),
        );
    }
    for name in ["", ".", "..", "a/b", "a\u{0}b", "demo\n", &"n".repeat(300)] {
        add("package_name", with(|d| d["package_name"] = json!(name)));
    }
    add(
        "expected_config_files with a number",
        with(|d| {
            d["expected_config_files"] = json!(["a", 1]);
        }),
    );
    add(
        "expected_config_files with null",
        with(|d| {
            d["expected_config_files"] = json!([null]);
        }),
    );
    add("modes an array", with(|d| d["modes"] = json!([])));
    add("modes empty", with(|d| d["modes"] = json!({})));
    add(
        "unknown mode []",
        with(|d| d["modes"]["deploy"] = json!([])),
    );
    add("unknown mode 5", with(|d| d["modes"]["explode"] = json!(5)));
    add(
        "unknown mode null",
        with(|d| d["modes"]["Apply"] = Value::Null),
    );
    add("mode null", with(|d| d["modes"]["apply"] = Value::Null));
    add("mode an object", with(|d| d["modes"]["apply"] = json!({})));
    add("mode empty", with(|d| d["modes"]["apply"] = json!([])));
    add(
        "steps not objects",
        with(|d| d["modes"]["apply"] = json!([1, "x", null])),
    );
    add(
        "step an array",
        with(|d| d["modes"]["config"] = json!([[]])),
    );
    add(
        "no steps",
        with(|d| d["modes"] = json!({"apply": [], "apply-check": []})),
    );
    add(
        "only checks",
        with(|d| {
            d["modes"] = json!({"apply-check": [step("c", "c.sh")]});
        }),
    );
    for key in [
        "name",
        "path",
        "arguments",
        "returncodes",
        "on_host",
        "idempotence",
        "upgrade_step",
        "env",
        "requires_interrupt",
    ] {
        add(
            &format!("step without {key}"),
            with(|d| without(&mut d["modes"]["apply"][0], key)),
        );
        for (kind, v) in [
            ("null", Value::Null),
            ("number", json!(1)),
            ("float", json!(1.5)),
            ("string", json!("true")),
            ("bool", json!(true)),
            ("array", json!(["x"])),
            ("object", json!({"k": "v"})),
        ] {
            add(
                &format!("step {key} {kind}"),
                with(|d| d["modes"]["apply"][0][key] = v),
            );
        }
    }
    add(
        "extra step fields",
        with(|d| {
            d["modes"]["apply"][0]["timeout"] = json!(5);
            d["modes"]["apply"][0]["extra"] = json!({"deep": [null]});
        }),
    );
    for name in [
        "",
        "bad name",
        "é",
        "a\n",
        "a/b",
        "a+b",
        "-._09azAZ",
        "a\u{0}",
        "name\t",
    ] {
        add(
            &format!("step name {name:?}"),
            with(|d| d["modes"]["apply"][0]["name"] = json!(name)),
        );
    }
    for args in [json!(["a", 1]), json!([null]), json!([["x"]]), json!("a")] {
        add(
            &format!("arguments {args}"),
            with(|d| d["modes"]["apply"][0]["arguments"] = args),
        );
    }
    for codes in [
        json!([]),
        json!([1.5]),
        json!([0, 2.5]),
        json!(["0"]),
        json!([true]),
        json!([null]),
        json!([[0]]),
        json!(5),
        json!([-1]),
        json!([18_446_744_073_709_551_615_u64]),
    ] {
        add(
            &format!("returncodes {codes}"),
            with(|d| d["modes"]["apply"][0]["returncodes"] = codes),
        );
    }
    for env in [
        json!({"A": 1}),
        json!({"A": null}),
        json!({"A": {"B": "x"}}),
        json!({"A": ["x"]}),
        json!({"": "x"}),
        json!({"A\u{0}": "1"}),
        json!([]),
    ] {
        add(
            &format!("env {env}"),
            with(|d| d["modes"]["apply"][0]["env"] = env),
        );
    }
    add(
        "a bad step in a later mode",
        with(|d| {
            d["modes"]["post-interrupt-check"] = json!([step("ok", "x.sh"), {"name": "x"}]);
        }),
    );
    add(
        "several violations",
        with(|d| {
            d["package_version"] = json!("1.0");
            d["modes"]["apply"][0]["returncodes"] = json!([]);
            d["modes"]["apply"][0]["name"] = json!("bad name");
            without(&mut d["modes"]["apply"][0], "on_host");
        }),
    );
    add(
        "upgrade step with arguments",
        with(|d| {
            let mut u = step("u", "u.sh");
            u["upgrade_step"] = json!(true);
            u["arguments"] = json!(["x"]);
            d["modes"]["upgrade"] = json!([u]);
            d["modes"]["upgrade-check"] = json!([step("u_check", "u_check.sh")]);
        }),
    );
    add(
        "schema_version v2",
        with(|d| {
            d["schema_version"] = json!("v2");
            d["package_version"] = json!("bad");
        }),
    );
    c
}

#[test]
fn every_corpus_document_gets_the_schemas_verdict_and_message() {
    let cases = corpus();
    assert!(cases.len() > 150, "{} cases", cases.len());
    let mut refused = 0;
    for (what, doc) in &cases {
        same_verdict(what, doc);
        refused += usize::from(!conforms_v1(doc));
    }
    // Most of the corpus is refused by the schema: this is a test of refusals.
    assert!(refused > 120, "{refused} refused");
    // Text-level cases: numbers as written (integral floats, exponents, huge values),
    // duplicate keys (the last one counts, in both paths) and invalid JSON.
    let base = valid().to_string();
    for codes in [
        "[0, 1.0]",
        "[1e0]",
        "[1E2]",
        "[1e300]",
        "[-0.0]",
        "[1.0000001]",
        "[2.5e-1]",
    ] {
        let text = base.replacen(
            r#""returncodes":[0,1]"#,
            &format!(r#""returncodes":{codes}"#),
            1,
        );
        assert_ne!(text, base);
        let doc: Value = serde_json::from_str(&text).unwrap();
        same_verdict(codes, &doc);
    }
    let dup = base.replacen(
        r#""package_version":"1.0.0""#,
        r#""package_version":"1.0","package_version":"1.0.0""#,
        1,
    );
    assert_ne!(dup, base);
    same_parse("duplicate key", dup.as_bytes());
    for text in ["", "{", "\u{0}", "{\"a\":}"] {
        same_parse("not JSON", text.as_bytes());
    }
}

/// A value at a pseudo-random place of `doc` (chosen by `pick`) replaced by `leaf`, or,
/// when `remove`, the key there removed.
fn mutate(doc: &mut Value, mut pick: u64, leaf: Value, remove: bool) {
    let mut node = doc;
    loop {
        let len = match node {
            Value::Object(m) => m.len(),
            Value::Array(a) => a.len(),
            _ => 0,
        };
        let i = (pick as usize / 4) % len.max(1);
        if len == 0 || pick.is_multiple_of(4) {
            *node = leaf;
            return;
        }
        pick /= 5;
        if remove
            && pick.is_multiple_of(3)
            && let Value::Object(m) = node
        {
            let key = m.keys().nth(i).expect("index in range").clone();
            m.shift_remove(&key);
            return;
        }
        node = match node {
            Value::Object(m) => m.values_mut().nth(i).expect("index in range"),
            Value::Array(a) => &mut a[i],
            _ => unreachable!("len > 0"),
        };
    }
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(|f| json!(f.trunc())),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "[0-9a-zA-Z.+_ -]{0,12}".prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
        Just(json!(["x", 1, null])),
        Just(json!([0])),
        Just(json!({"A": "1"})),
        Just(step("s", "s.sh")),
        Just(json!([step("s", "s.sh")])),
    ]
}

fn cases(n: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(n);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

#[test]
fn mutated_documents_get_the_schemas_verdict_and_message() {
    let mut runner = TestRunner::new(cases(1500));
    let mutation = (any::<u64>(), leaf(), any::<bool>());
    runner
        .run(&proptest::collection::vec(mutation, 1..4), |mutations| {
            let mut doc = valid();
            for (pick, leaf, remove) in mutations {
                mutate(&mut doc, pick, leaf, remove);
            }
            same_verdict("mutated", &doc);
            Ok(())
        })
        .unwrap();
}

/// Every place of a valid document a keyword of the schema constrains.
const PLACES: [&str; 16] = [
    "",
    "/schema_version",
    "/root_dir",
    "/package_version",
    "/expected_config_files",
    "/expected_config_files/0",
    "/modes",
    "/modes/apply",
    "/modes/apply/0",
    "/modes/apply/0/name",
    "/modes/apply/0/arguments/0",
    "/modes/apply/0/returncodes",
    "/modes/apply/0/returncodes/1",
    "/modes/apply/0/on_host",
    "/modes/apply/0/env/A",
    "/modes/apply/0/requires_interrupt",
];

#[test]
fn each_constrained_place_with_any_value_gets_the_schemas_verdict() {
    let mut runner = TestRunner::new(cases(1500));
    runner
        .run(&(0..PLACES.len(), leaf()), |(i, leaf)| {
            let mut doc = valid();
            *doc.pointer_mut(PLACES[i]).expect("a place of valid()") = leaf;
            same_verdict(PLACES[i], &doc);
            Ok(())
        })
        .unwrap();
}

#[test]
fn generated_versions_and_step_names_get_the_patterns_verdict() {
    let mut runner = TestRunner::new(cases(3000));
    let text = prop_oneof![
        "[0-9.+-]{0,12}",
        "[0-9a-zA-Z.+_-]{0,14}",
        "(0|1|01|[1-9][0-9]{0,2})[.](0|1|00|12)[.](0|7|07)([-+][0-9a-zA-Z.-]{0,8}){0,2}",
        ".{0,6}",
    ];
    runner
        .run(&text, |s| {
            same_verdict(
                "package_version",
                &with(|d| d["package_version"] = json!(s)),
            );
            same_verdict(
                "step name",
                &with(|d| d["modes"]["apply"][0]["name"] = json!(s)),
            );
            Ok(())
        })
        .unwrap();
}
