//! Request validation without a runtime: plain `#[test]`s of the pure checks.

use std::path::Path;

use super::*;

fn req(v: Value) -> StartRequest {
    parse(v.to_string().as_bytes()).unwrap()
}

fn detail(r: Refusal) -> (u16, String) {
    let d = r.body["detail"].as_str().unwrap_or_default().to_string();
    (r.status, d)
}

#[test]
fn parse_refuses_bad_json_unknown_fields_and_bad_ids() {
    assert_eq!(parse(b"{nope").unwrap_err().status, 400);
    let unknown = parse(br#"{"id": "a", "kind": "sh", "x": 1}"#).unwrap_err();
    assert_eq!(unknown.status, 400);
    assert!(
        unknown.body["detail"]
            .as_str()
            .unwrap()
            .contains("unknown field `x`"),
        "{:?}",
        unknown.body
    );
    for id in ["", "a/b", "a b", &"x".repeat(129)] {
        let r = parse(json!({"id": id, "kind": "sh"}).to_string().as_bytes()).unwrap_err();
        assert_eq!(
            detail(r),
            (400, "id must match [A-Za-z0-9._-]{1,128}".into()),
            "{id:?}"
        );
    }
    assert!(valid_id(&"a.b_c-9".repeat(19)[..128]));
    assert_eq!(req(json!({"id": "a", "kind": "rhai"})).kind, Kind::Rhai);
}

#[test]
fn common_checks_env_timeout_and_workdir_in_order() {
    let dflt = Path::new("/var/tmp");
    let c = common(&req(json!({"id": "a", "kind": "sh"})), dflt).unwrap();
    assert_eq!(
        c,
        Common {
            timeout: None,
            workdir: "/var/tmp".into()
        }
    );
    let c = common(
        &req(json!({"id": "a", "kind": "sh", "timeout_s": 1.5, "workdir": "/x"})),
        dflt,
    )
    .unwrap();
    assert_eq!(c.timeout, Some(Duration::from_millis(1500)));
    assert_eq!(c.workdir, PathBuf::from("/x"));
    let bad = |v: Value| detail(common(&req(v), dflt).unwrap_err());
    assert_eq!(
        bad(json!({"id": "a", "kind": "sh", "env": {"A=B": "1"}, "timeout_s": 0})),
        (400, "invalid env entry \"A=B\"".into())
    );
    assert_eq!(
        bad(json!({"id": "a", "kind": "sh", "env": {"A": "x\u{0}"}})),
        (400, "invalid env entry \"A\"".into())
    );
    for t in [0.0, -1.0, 604800.5] {
        assert_eq!(
            bad(json!({"id": "a", "kind": "sh", "timeout_s": t, "workdir": "rel"})),
            (400, "timeout_s must be in (0, 604800]".into()),
            "{t}"
        );
    }
    assert_eq!(
        bad(json!({"id": "a", "kind": "sh", "workdir": "rel"})),
        (400, "workdir must be an absolute host path".into())
    );
}

#[test]
fn environment_starts_with_path_and_a_later_entry_replaces_an_earlier_one_at_the_end() {
    let r = req(json!({"id": "a", "kind": "sh", "command": "true",
                       "env": {"PATH": "/p", "B": "2", "A": "1"}}));
    let env = environment(&r, &[("B".into(), "secret".into())]).unwrap();
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (&**k, &**v)).collect();
    assert_eq!(pairs, [("A", "1"), ("PATH", "/p"), ("B", "secret")]);
}

#[test]
fn an_environment_or_command_that_would_not_fit_an_exec_is_413_naming_no_value() {
    let entry = |n: usize| vec![("V".to_string(), "x".repeat(n))];
    assert!(check_exec_size(&entry(MAX_ARG_BYTES - 4), None).is_ok());
    let r = check_exec_size(&entry(MAX_ARG_BYTES - 3), None).unwrap_err();
    assert_eq!(r.status, 413);
    assert_eq!(r.body["error"], "environment too large");
    assert_eq!(
        r.body["detail"],
        format!("env \"V\" is {MAX_ARG_BYTES} bytes, each entry must be under {MAX_ARG_BYTES}")
    );
    assert!(!r.body.to_string().contains("xxx"));
    let many: Vec<(String, String)> = (0..=MAX_ENV_ENTRIES)
        .map(|i| (format!("V{i}"), String::new()))
        .collect();
    assert_eq!(
        check_exec_size(&many, None).unwrap_err().body["detail"],
        format!("1025 environment entries, at most {MAX_ENV_ENTRIES}")
    );
    let command = "c".repeat(MAX_ARG_BYTES);
    assert_eq!(
        check_exec_size(&[], Some(&command)).unwrap_err().body["detail"],
        format!(
            "command is {} bytes, it must be under {MAX_ARG_BYTES}",
            MAX_ARG_BYTES + 1
        )
    );
    let big: Vec<(String, String)> = (0..9)
        .map(|i| (format!("V{i}"), "x".repeat(MAX_ARG_BYTES - 10)))
        .collect();
    let r = check_exec_size(&big, None).unwrap_err();
    assert!(
        r.body["detail"]
            .as_str()
            .unwrap()
            .ends_with(&format!("bytes, at most {MAX_ENV_BYTES}")),
        "{:?}",
        r.body
    );
    assert_eq!(r.body["max_env_entries"], MAX_ENV_ENTRIES);
    assert_eq!(r.body["max_env_bytes"], MAX_ENV_BYTES);
    assert_eq!(r.body["max_arg_bytes"], MAX_ARG_BYTES);
}

#[test]
fn sh_and_rhai_fields_are_checked_per_kind() {
    let sh = |v: Value| sh_command(&req(v)).map_err(detail);
    assert_eq!(
        sh(json!({"id": "a", "kind": "sh", "command": "ls"})),
        Ok("ls".into())
    );
    assert_eq!(
        sh(json!({"id": "a", "kind": "sh", "command": "ls", "mode": "plan"})),
        Err((400, "kind sh takes command, not script or mode".into()))
    );
    assert_eq!(
        sh(json!({"id": "a", "kind": "sh"})),
        Err((400, "kind sh needs command".into()))
    );
    assert_eq!(
        sh(json!({"id": "a", "kind": "sh", "command": "a\u{0}"})),
        Err((400, "command contains NUL".into()))
    );
    let r = req(json!({"id": "x", "kind": "rhai", "script": "1", "mode": "check"}));
    assert_eq!(
        rhai(&r),
        Ok(RhaiRequest {
            script: "1",
            exec: ExecMode::Check,
            file: "x.rhai".into()
        })
    );
    let r = req(json!({"id": "x", "kind": "rhai", "script": "1", "script_name": "s.rhai"}));
    let ok = rhai(&r).unwrap();
    assert_eq!((ok.exec, ok.file.as_str()), (ExecMode::Apply, "s.rhai"));
    let bad = |v: Value| detail(rhai(&req(v)).unwrap_err());
    assert_eq!(
        bad(json!({"id": "x", "kind": "rhai", "script": "1", "command": "ls"})),
        (400, "kind rhai takes script, not command".into())
    );
    assert_eq!(
        bad(json!({"id": "x", "kind": "rhai"})),
        (400, "kind rhai needs script".into())
    );
    assert_eq!(
        bad(json!({"id": "x", "kind": "rhai", "script": "1", "mode": "dry"})),
        (400, "mode \"dry\": expected apply, plan or check".into())
    );
    for name in ["", "a\nb", &"n".repeat(256)] {
        assert_eq!(
            bad(json!({"id": "x", "kind": "rhai", "script": "1", "script_name": name})),
            (
                400,
                "script_name must be 1 to 255 bytes without control characters".into()
            )
        );
    }
}

#[test]
fn a_script_that_does_not_compile_is_422_with_its_position_redacted() {
    let engine = crate::step::engine();
    let redactor = Redactor::new();
    redactor.add("hunter2");
    let r = req(json!({"id": "x", "kind": "rhai", "script": "let a = \"hunter2\" +;"}));
    let e = compile(&engine, &rhai(&r).unwrap(), &redactor).unwrap_err();
    assert_eq!(e.status, 422);
    assert_eq!(e.body["error"], "script does not compile");
    assert_eq!(
        (e.body["line"].as_u64(), e.body["column"].is_u64()),
        (Some(1), true)
    );
    assert!(!e.body.to_string().contains("hunter2"), "{:?}", e.body);
    let r = req(json!({"id": "x", "kind": "rhai", "script": "import \"./local\" as l; 0"}));
    assert_eq!(
        compile(&engine, &rhai(&r).unwrap(), &redactor)
            .unwrap_err()
            .status,
        422
    );
    let r = req(json!({"id": "x", "kind": "rhai", "script": "40 + 2"}));
    assert!(compile(&engine, &rhai(&r).unwrap(), &redactor).is_ok());
}

#[test]
fn a_cancel_body_is_empty_or_a_grace_in_range() {
    let d = Duration::from_secs(10);
    assert_eq!(cancel_grace(b"", d), Ok(d));
    assert_eq!(cancel_grace(b" \n", d), Ok(d));
    assert_eq!(cancel_grace(b"{}", d), Ok(d));
    assert_eq!(
        cancel_grace(br#"{"grace_s": 0.5}"#, d),
        Ok(Duration::from_millis(500))
    );
    assert_eq!(
        detail(cancel_grace(br#"{"grace_s": 3601}"#, d).unwrap_err()),
        (400, "grace_s must be in [0, 3600]".into())
    );
    assert_eq!(cancel_grace(br#"{"grace": 1}"#, d).unwrap_err().status, 400);
}

#[test]
fn a_secret_refusal_is_403_when_not_allowed_else_422_and_names_the_coordinate() {
    let s = super::super::secrets::Secrets {
        dir: PathBuf::from("/nonexistent-secrets"),
        allow: vec!["db".into()],
    };
    let coord = |name: &str| SecretRef {
        env: "E".into(),
        name: name.into(),
        key: "k".into(),
    };
    let r = Refusal::secret(&s.resolve(&coord("other")).unwrap_err());
    assert_eq!(r.status, 403);
    assert_eq!(
        (&r.body["name"], &r.body["key"]),
        (&json!("other"), &json!("k"))
    );
    let r = Refusal::secret(&s.resolve(&coord("db")).unwrap_err());
    assert_eq!(r.status, 422);
    assert_eq!(r.body["name"], "db");
}
