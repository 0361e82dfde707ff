//! `toml::`, `json::`, `ini::`, `sha256` and `regex::` through Rhai: value and key path
//! conversions, all modes, errors naming the function.

use crate::host::effects::report::ExecMode;
use crate::host::testutil::TestHost;
use crate::script::host_api::tests::*;

/// One call of each function of this file, for
/// [`crate::script::host_api::tests::declared_effects_are_the_submitted_ones`]: in the root that test
/// prepares, each call of a function that submits effects changes something.
pub(crate) const SAMPLES: &[&str] = &[
    r#"toml::get("/etc/c.toml", "a.x")"#,
    r#"toml::set("/etc/c.toml", "a.x", 2)"#,
    r#"toml::remove("/etc/c.toml", "a.x")"#,
    r#"toml::ensure_table("/etc/c.toml", ["b"])"#,
    r#"toml::parse("a = 1")"#,
    r#"json::get("/etc/d.json", "/a")"#,
    r#"json::set("/etc/d.json", "/a", 2)"#,
    r#"json::remove("/etc/d.json", "/a")"#,
    r#"ini::get("/etc/u.conf", "Service", "User")"#,
    r#"ini::set("/etc/u.conf", "Service", "User", "y")"#,
    r#"ini::remove("/etc/u.conf", "Service", "User")"#,
    r#"regex::is_match("a", "abc")"#,
    r#"regex::captures("(a)", "abc")"#,
    r#"regex::named("(?<x>a)", "abc")"#,
    r#"regex::replace("a", "abc", "b")"#,
];

#[test]
fn structured_edits_all_modes() {
    let t = TestHost::new();
    t.file("/etc/c.toml", "# c\n[a]\nx = 1\n");
    t.file("/etc/d.json", "{\n  \"a\": 1\n}\n");
    t.file("/etc/u.conf", "[Service]\nUser=x\n");
    let report = all_modes(
        &t,
        &[
            r#"toml::set("/etc/c.toml", ["a", "y"], #{k: [1, 2.5, "s", true]})"#,
            r#"toml::set("/etc/c.toml", "a.x", 2)"#,
            r#"toml::ensure_table("/etc/c.toml", ["b"])"#,
            r#"json::set("/etc/d.json", ["b", "c"], [(), 1])"#,
            r#"json::remove("/etc/d.json", "/a")"#,
            r#"ini::set("/etc/u.conf", "Service", "LimitNOFILE", 65536)"#,
            r#"ini::remove("/etc/u.conf", "Service", "User")"#,
        ],
    );
    assert_eq!(report.changes.len(), 7);
    assert_eq!(
        t.read("/etc/c.toml"),
        "# c\n[a]\nx = 2\n\n[a.y]\nk = [1, 2.5, \"s\", true]\n\n[b]\n"
    );
    assert_eq!(
        t.read("/etc/d.json"),
        "{\n  \"b\": {\n    \"c\": [\n      null,\n      1\n    ]\n  }\n}\n"
    );
    assert_eq!(t.read("/etc/u.conf"), "[Service]\nLimitNOFILE=65536\n");
    let r = run(
        &t,
        ExecMode::Plan,
        r#"print(toml::get("/etc/c.toml", ["a"]));
print(toml::get("/etc/c.toml", ["a", "y", "k", 1]));
print(toml::get("/etc/c.toml", "nope.x") == ());
print(json::get("/etc/d.json", ["b", "c", 0]) == ());
print(json::get("/etc/d.json", "/b/c/1"));
print(ini::get("/etc/u.conf", "Service", "LimitNOFILE"));
print(ini::get("/etc/u.conf", "Service", "User") == ());
print(toml::parse("a = { b = 'c' }"));"#,
    )
    .ok();
    assert_eq!(
        r.stdout(),
        "#{\"x\": 2, \"y\": #{\"k\": [1, 2.5, \"s\", true]}}\n2.5\ntrue\ntrue\n1\n65536\ntrue\n#{\"a\": #{\"b\": \"c\"}}\n"
    );
}

#[test]
fn structured_errors_name_the_function() {
    let t = TestHost::new();
    t.file("/etc/c.toml", "a = 1\n");
    let cases = [
        (
            r#"toml::set("/etc/c.toml", 5, 1)"#,
            "main.rhai:1:7: toml::set: key_path must be a string or an array of keys, got i64",
        ),
        (
            r#"toml::get("/etc/c.toml", ["a", -1])"#,
            "main.rhai:1:7: toml::get: key_path[1] is a negative index (-1)",
        ),
        (
            r#"toml::set("/etc/c.toml", ["b"], || 1)"#,
            "main.rhai:1:7: toml::set: value must be a string, number, bool, array, map or (), got Fn",
        ),
        (
            r#"toml::set("/etc/c.toml", ["a", "b"], 1)"#,
            "main.rhai:1:7: toml::set: invalid key path: /etc/c.toml: a is a number, not a table",
        ),
        (
            r#"toml::remove("/etc/c.toml", ["a", 0])"#,
            "main.rhai:1:7: toml::remove: invalid key path: /etc/c.toml: a[0]: array indices are only supported by toml::get",
        ),
        (
            r#"toml::parse("a =")"#,
            "main.rhai:1:7: toml::parse: <text>:1:4: invalid TOML: string values must be quoted, expected literal string",
        ),
        (
            r#"ini::set("/etc/u.conf", "S", "k", [1])"#,
            "main.rhai:1:6: ini::set: value must be a string or a number, got array",
        ),
        (
            r#"regex::is_match("(", "x")"#,
            "main.rhai:1:8: regex::is_match: invalid regex \"(\": regex parse error:\n    (\n    ^\nerror: unclosed group",
        ),
    ];
    for (src, want) in cases {
        let r = run(&t, ExecMode::Apply, src);
        assert_eq!(r.error(), want, "{src}");
    }
}

#[test]
fn sha256_and_regex_helpers() {
    let t = TestHost::new();
    let r = run(
        &t,
        ExecMode::Plan,
        r#"print(sha256("abc"));
print(regex::is_match("^v[0-9]+$", "v12"));
print(regex::captures("(\\w+)=(\\d+)?", "key="));
print(regex::captures("x", "abc") == ());
print(regex::named("(?P<k>\\w+)=(?P<v>\\w+)", "a=b"));
print(regex::replace("(\\d+)", "a1b22", "<$1>"));"#,
    )
    .ok();
    assert_eq!(
        r.stdout(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\ntrue\n[\"key=\", \"key\", ()]\ntrue\n#{\"k\": \"a\", \"v\": \"b\"}\na<1>b<22>\n"
    );
}

#[test]
fn to_json_is_pretty_and_parse_json_reads_it_back() {
    let t = TestHost::new();
    let r = run(
        &t,
        ExecMode::Plan,
        r#"let m = #{b: 1, a: [1, "x", ()], c: #{}};
print(to_json(m));
print(m.to_json() == to_json(m));
print(to_json([true, 2.5]));
print(to_json("s"));
print(parse_json(to_json(m)) == m);"#,
    )
    .ok();
    assert_eq!(
        r.stdout(),
        "{\n  \"a\": [\n    1,\n    \"x\",\n    null\n  ],\n  \"b\": 1,\n  \"c\": {}\n}\ntrue\n[\n  true,\n  2.5\n]\n\"s\"\ntrue\n"
    );
}

/// A structured file that does not parse, read after a command the plan did not run (which
/// may rewrite it): unknown in the plan, not a refusal; the same text given to `toml::parse`
/// is an argument, not the host's state, and stays a failure
/// ([`crate::host::files::structured::StructuredError`] keeps `depends_on_host` of the former
/// `HostError::Parse`).
#[test]
fn a_bad_structured_file_after_an_unplanned_command_is_unknown_in_the_plan() {
    let t = TestHost::new();
    t.install_sh();
    t.stub("setup", ":");
    t.file("/etc/app.toml", "a =\n");
    let step = "run([\"setup\"]);\ntoml::get(\"/etc/app.toml\", \"a\");\n";
    let plan = run(&t, ExecMode::Plan, step);
    let e = plan
        .outcome
        .error
        .as_ref()
        .expect("the plan ends at the get");
    assert_eq!(
        (&e.kind, e.message.as_str()),
        (
            &crate::script::errors::ScriptErrorKind::PlanUnknown,
            "toml::get: unknown in the plan: /etc/app.toml:1:4: invalid TOML: string values must be quoted, expected literal string, as the host is before setup (planned at main.rhai:1), which only the apply runs and which may change that"
        )
    );
    assert_eq!(
        run(&t, ExecMode::Apply, step).error(),
        "main.rhai:2:7: toml::get: /etc/app.toml:1:4: invalid TOML: string values must be quoted, expected literal string"
    );
    let step = "run([\"setup\"]);\ntoml::parse(\"a =\");\n";
    assert_eq!(
        run(&t, ExecMode::Plan, step).error(),
        "main.rhai:2:7: toml::parse: <text>:1:4: invalid TOML: string values must be quoted, expected literal string"
    );
}
