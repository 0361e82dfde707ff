//! Tests of `package/load.rs`: loading, the schema, the step rules and step files.

use super::*;
use serde_json::json;

const FILE: &str = "/pkg/config.json";

/// Fixture P of contract 15.
fn fixture() -> Value {
    json!({"schema_version": "v1", "root_dir": "/", "expected_config_files": [],
      "package_name": "demo", "package_version": "1.0.0",
      "modes": {
        "apply": [{"name": "foo", "path": "foo.sh", "arguments": ["a", "b"], "returncodes": [0],
                   "on_host": true, "idempotence": false, "upgrade_step": false}],
        "apply-check": [{"name": "foo_check", "path": "foo_check.sh", "arguments": [], "returncodes": [0],
                         "on_host": true, "idempotence": false, "upgrade_step": false}]}})
}

fn load(doc: &Value) -> Result<Loaded, PackageError> {
    parse(Path::new(FILE), doc.to_string().as_bytes())
}

fn err(doc: &Value) -> String {
    load(doc).unwrap_err().to_string()
}

fn step(name: &str, path: &str) -> Value {
    json!({"name": name, "path": path, "arguments": [], "returncodes": [0],
           "on_host": true, "idempotence": false, "upgrade_step": false})
}

#[test]
fn fixture_loads() {
    let l = load(&fixture()).unwrap();
    assert_eq!(l.warnings, Vec::<String>::new());
    let p = &l.package;
    assert_eq!(p.package_name, "demo");
    assert_eq!(p.package_version, "1.0.0");
    assert_eq!(p.schema_version, "v1");
    assert_eq!(
        p.modes.iter().map(|(m, _)| *m).collect::<Vec<_>>(),
        vec![Mode::Apply, Mode::ApplyCheck]
    );
    let foo = &p.steps(Mode::Apply)[0];
    assert_eq!(foo.arguments, vec!["a", "b"]);
    assert_eq!(foo.returncodes, vec![ReturnCode::int(0)]);
    assert!(foo.on_host && !foo.idempotence && !foo.upgrade_step);
    assert!(p.steps(Mode::Config).is_empty());
    assert!(!p.has_mode_key(Mode::Config));
}

#[test]
fn schema_errors_stay_one_readable_line() {
    let mut d = fixture();
    d["modes"]["apply"][0]["arguments"] = json!(vec![json!(["x".repeat(1_000)]); 5_000]);
    let e = err(&d);
    assert!(e.len() < 4000, "{} bytes", e.len());
    assert!(
        e.ends_with("; and 990 more violations"),
        "{}",
        &e[e.len() - 80..]
    );
    assert!(!e.contains('\n'));
}

#[test]
fn step_paths_with_control_or_bidi_characters_are_refused_naming_step_and_character() {
    for (path, code, kind) in [
        ("a\nFAILED.sh", "U+000A", "control character"),
        ("a\r.sh", "U+000D", "control character"),
        ("a\t.sh", "U+0009", "control character"),
        ("a\u{85}.sh", "U+0085", "control character"),
        ("a\u{9b}.sh", "U+009B", "control character"),
        ("a\u{7f}.sh", "U+007F", "control character"),
        ("gpu\u{202E}hs.x", "U+202E", "bidirectional text control"),
        ("a\u{202A}.sh", "U+202A", "bidirectional text control"),
        ("a\u{2066}.sh", "U+2066", "bidirectional text control"),
        ("a\u{2069}.sh", "U+2069", "bidirectional text control"),
        ("a\u{200E}.sh", "U+200E", "bidirectional text control"),
        ("a\u{200F}.sh", "U+200F", "bidirectional text control"),
    ] {
        let mut d = fixture();
        d["modes"]["apply-check"][0]["path"] = json!(path);
        let e = err(&d);
        assert_eq!(
            e,
            format!(
                "/pkg/config.json: step {path:?} of mode apply-check: path: contains the {kind} {code}: step paths must not contain control characters (newline, carriage return, tab, C1) or bidirectional text controls"
            )
        );
        assert!(!e.contains(['\n', '\r', '\u{202E}']), "{e:?}");
    }
    // Printable non-ASCII stays allowed.
    let mut d = fixture();
    d["modes"]["apply"][0]["path"] = json!("données/é.sh");
    d["modes"]["apply-check"][0]["path"] = json!("données/é_check.sh");
    assert!(load(&d).is_ok());
}

#[test]
fn names_and_step_values_are_bounded() {
    let long = "n".repeat(300);
    for (name, why) in [
        ("", "is empty"),
        (".", "must not be . or .."),
        ("..", "must not be . or .."),
        ("a/b", "must not contain /"),
        ("a\u{0}b", "must not contain a NUL byte"),
        (
            "demo\n",
            "must not contain control characters (newline, tab, ...)",
        ),
        (long.as_str(), "is longer than 255 bytes"),
    ] {
        let mut d = fixture();
        d["package_name"] = json!(name);
        let e = err(&d);
        assert!(e.starts_with("/pkg/config.json: package_name "), "{e}");
        assert!(e.contains(why), "{name:?}: {e}");
        assert!(e.len() < 300, "one readable line: {e}");
    }
    let mut big = fixture();
    big["modes"]["apply"][0]["arguments"] = json!(["x".repeat(200 * 1024)]);
    assert_eq!(
        err(&big),
        "/pkg/config.json: step \"foo.sh\" of mode apply: argument 0: 204800 bytes, more than 131072"
    );
    let mut many = fixture();
    many["modes"]["apply"][0]["arguments"] = json!(vec!["a"; 100_000]);
    assert_eq!(
        err(&many),
        "/pkg/config.json: step \"foo.sh\" of mode apply: arguments: 100000 arguments, more than 4096"
    );
    let mut nul = fixture();
    nul["modes"]["apply"][0]["env"] = json!({"A\u{0}B": "1"});
    assert!(err(&nul).contains("must be non-empty without '=' or NUL"));
    let mut nulv = fixture();
    nulv["modes"]["apply"][0]["env"] = json!({"A": "x\u{0}"});
    assert!(err(&nulv).ends_with("value contains a NUL byte"));
    let mut total = fixture();
    total["modes"]["apply"][0]["arguments"] = json!(vec!["y".repeat(100 * 1024); 11]);
    assert!(err(&total).contains("bytes in all, more than 1048576"));
}

#[test]
fn env_keeps_file_order() {
    let mut d = fixture();
    d["modes"]["apply"][0]["env"] = json!({"Z": "1", "A": "2"});
    let l = load(&d).unwrap();
    assert_eq!(
        l.package.steps(Mode::Apply)[0].env,
        vec![("Z".into(), "1".into()), ("A".into(), "2".into())]
    );
}

#[test]
fn case_13a_bad_version() {
    let mut d = fixture();
    d["package_version"] = json!("1.0");
    let e = err(&d);
    assert!(
        e.starts_with("/pkg/config.json: does not match the skyhook-agent v1 schema: at /package_version: \"1.0\" is not a semantic version: expected MAJOR.MINOR.PATCH"),
        "{e}"
    );
}

#[test]
fn case_13b_empty_returncodes() {
    let mut d = fixture();
    d["modes"]["apply"][0]["returncodes"] = json!([]);
    let e = err(&d);
    assert!(
        e.contains("at /modes/apply/0/returncodes: [] has less than 1 item"),
        "{e}"
    );
}

#[test]
fn case_13c_no_checks() {
    let mut d = fixture();
    d["modes"].as_object_mut().unwrap().remove("apply-check");
    assert_eq!(
        err(&d),
        "/pkg/config.json: Couldn't validate steps. There are no checks for any of the apply steps."
    );
    // an empty check list is the same as a missing one
    d["modes"]["apply-check"] = json!([]);
    assert!(matches!(
        load(&d),
        Err(PackageError::MissingChecks {
            mode: Mode::Apply,
            ..
        })
    ));
}

#[test]
fn case_13d_upgrade_step_in_apply() {
    let mut d = fixture();
    d["modes"]["apply"][0]["upgrade_step"] = json!(true);
    d["modes"]["apply"][0]["arguments"] = json!([]);
    assert_eq!(
        err(&d),
        "/pkg/config.json: UpgradeStep foo.sh defined in the apply mode but can only be \
         defined in the UPGRADE or UPGRADE_CHECK modes."
    );
}

#[test]
fn case_13d_upgrade_step_with_fixture_arguments() {
    // Fixture P's foo has arguments: the construction error comes first (as in Python).
    let mut d = fixture();
    d["modes"]["apply"][0]["upgrade_step"] = json!(true);
    assert_eq!(
        err(&d),
        "/pkg/config.json: UpgradeStep foo can not have any arguments, but found: ['a', 'b']"
    );
}

#[test]
fn case_13e_upgrade_step_arguments() {
    let mut d = fixture();
    let mut u = step("u", "u.sh");
    u["upgrade_step"] = json!(true);
    u["arguments"] = json!(["x"]);
    d["modes"]["upgrade"] = json!([u]);
    d["modes"]["upgrade-check"] = json!([step("u_check", "u_check.sh")]);
    assert_eq!(
        err(&d),
        "/pkg/config.json: UpgradeStep u can not have any arguments, but found: ['x']"
    );
}

#[test]
fn case_13f_only_checks() {
    let mut d = fixture();
    d["modes"].as_object_mut().unwrap().remove("apply");
    assert_eq!(
        err(&d),
        "/pkg/config.json: There are only check modes defined. You must define at least one \
         of UNINSTALL, UPGRADE, APPLY, CONFIG, POST_INTERRUPT"
    );
}

#[test]
fn case_13g_empty_apply_key_counts() {
    let mut d = fixture();
    d["modes"]["apply"] = json!([]);
    let l = load(&d).unwrap();
    assert!(l.package.has_mode_key(Mode::Apply));
    assert!(l.package.steps(Mode::Apply).is_empty());
    assert_eq!(l.package.steps(Mode::ApplyCheck).len(), 1);
}

#[test]
fn no_steps_at_all() {
    let mut d = fixture();
    d["modes"] = json!({"apply": [], "apply-check": []});
    assert_eq!(err(&d), "/pkg/config.json: There are no defined steps.");
}

#[test]
fn unknown_schema_version_checked_first() {
    let mut d = fixture();
    d["schema_version"] = json!("v2");
    d["package_version"] = json!("bad");
    assert_eq!(
        err(&d),
        "/pkg/config.json: Unknown skyhook-agent schema version: v2"
    );
}

#[test]
fn invalid_json() {
    let e = parse(Path::new(FILE), b"{").unwrap_err();
    assert!(matches!(e, PackageError::Json { .. }));
    assert_eq!(e.to_string(), "/pkg/config.json: invalid JSON");
}

#[test]
fn unknown_mode_key() {
    let mut d = fixture();
    d["modes"]["deploy"] = json!([]);
    let e = err(&d);
    assert_eq!(
        e,
        "/pkg/config.json: 'deploy' is not a valid Mode (valid modes: uninstall, \
         uninstall-check, upgrade, upgrade-check, apply, apply-check, config, config-check, \
         interrupt, post-interrupt, post-interrupt-check)"
    );
}

#[test]
fn unknown_step_key_warns() {
    let mut d = fixture();
    d["modes"]["apply"][0]["timeout"] = json!(5);
    d["modes"]["apply"][0]["requires_interrupt"] = json!(true);
    let l = load(&d).unwrap();
    assert_eq!(
        l.warnings,
        vec!["step 'foo' of mode apply has unknown key 'timeout'; ignored"]
    );
}

#[test]
fn missing_check_warning_basename_rule() {
    let mut d = fixture();
    d["modes"]["apply"] = json!([
        step("a", "dir.d/foo"),
        step("b", "sub/x.sh"),
        step("c", "foo.sh")
    ]);
    d["modes"]["apply-check"] = json!([step("ac", "sub/x_check.sh")]);
    // foo_check.sh only in another check mode does not count (paired mode)
    d["modes"]["config"] = json!([step("cc", "c.sh")]);
    d["modes"]["config-check"] = json!([step("cck", "foo_check.sh"), step("cx", "c_check.sh")]);
    let l = load(&d).unwrap();
    assert_eq!(
        l.warnings,
        vec![
            " dir.d/foo_check doesn't exist. Checks ensure that all tasks in the step will complete.",
            " foo_check.sh doesn't exist. Checks ensure that all tasks in the step will complete.",
        ]
    );
    assert_eq!(expected_check_path("a.b.sh"), "a.b_check.sh");
    assert_eq!(expected_check_path(".hidden"), "_check.hidden");
}

#[test]
fn rhai_step_that_is_its_own_check_gets_no_warning() {
    let mut d = fixture();
    d["modes"]["apply"] = json!([step("a", "apply.rhai"), step("b", "other.rhai")]);
    d["modes"]["apply-check"] = json!([step("a", "apply.rhai")]);
    let l = load(&d).unwrap();
    assert_eq!(
        l.warnings,
        vec![
            " other_check.rhai doesn't exist. Checks ensure that all tasks in the step will complete."
        ]
    );
}

#[test]
fn float_return_code_kept_as_float() {
    let text =
        fixture()
            .to_string()
            .replacen(r#""returncodes":[0]"#, r#""returncodes":[0, 1.0]"#, 1);
    assert!(text.contains("[0, 1.0]"));
    let l = parse(Path::new(FILE), text.as_bytes()).unwrap();
    let foo = &l.package.steps(Mode::Apply)[0];
    assert_eq!(
        foo.returncodes,
        vec![
            ReturnCode::int(0),
            ReturnCode {
                value: 1,
                float: true
            }
        ]
    );
    assert_eq!(crate::pyfmt::repr_codes(&foo.returncodes), "[0, 1.0]");
    assert!(foo.accepts(1));
}

#[test]
fn huge_return_code_rejected() {
    let text = fixture().to_string().replacen(
        r#""returncodes":[0]"#,
        r#""returncodes":[18446744073709551615]"#,
        1,
    );
    let e = parse(Path::new(FILE), text.as_bytes()).unwrap_err();
    assert!(matches!(e, PackageError::ReturnCodeRange { .. }), "{e}");
}

#[test]
fn step_files_missing_reported_together() {
    let mut d = fixture();
    d["modes"]["config"] = json!([step("c", "c.sh"), step("c2", "foo.sh")]);
    d["modes"]["config-check"] = json!([step("cc", "c_check.sh")]);
    let pkg = load(&d).unwrap().package;
    let present = ["foo.sh", "c_check.sh"];
    let e = check_step_files(Path::new(FILE), &pkg, |p| present.contains(&p)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "/pkg/config.json: Following steps did not exist:foo_check.sh, c.sh"
    );
    check_step_files(Path::new(FILE), &pkg, |_| true).unwrap();
    // Each distinct path is looked up once (foo.sh is in apply and config).
    let asked = std::cell::RefCell::new(Vec::new());
    check_step_files(Path::new(FILE), &pkg, |p| {
        asked.borrow_mut().push(p.to_string());
        true
    })
    .unwrap();
    let mut asked = asked.into_inner();
    let n = asked.len();
    asked.sort();
    asked.dedup();
    assert_eq!(n, asked.len(), "{asked:?}");
}

#[test]
fn step_files_unsafe_paths() {
    for bad in ["/etc/x.sh", "../x.sh", "sub/../../x.sh", ""] {
        let mut d = fixture();
        d["modes"]["apply"][0]["path"] = json!(bad);
        let pkg = load(&d).unwrap().package;
        let e = check_step_files(Path::new(FILE), &pkg, |_| true).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "/pkg/config.json: step path '{bad}' in mode apply must be relative to \
                 skyhook_dir without '..' components"
            )
        );
    }
    let mut d = fixture();
    d["modes"]["apply"][0]["path"] = json!("./sub/x..y.sh");
    let pkg = load(&d).unwrap().package;
    check_step_files(Path::new(FILE), &pkg, |_| true).unwrap();
}
