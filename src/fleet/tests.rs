use std::collections::BTreeMap;

use serde_json::json;

use super::run::{NodeResult, Outcome, Preview};
use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn selectors_match_as_kubernetes_label_selectors() {
    let s = Selector::parse(Some(&json!({
        "matchLabels": {"gpu": "true"},
        "matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a", "b"]},
            {"key": "tier", "operator": "NotIn", "values": ["canary"]},
            {"key": "pool", "operator": "Exists"},
            {"key": "skip", "operator": "DoesNotExist"},
        ]
    })))
    .unwrap();
    let base = [("gpu", "true"), ("zone", "a"), ("pool", "p1")];
    assert!(s.matches(&labels(&base)));
    // NotIn holds for an absent label and for another value
    assert!(s.matches(&labels(&[
        ("gpu", "true"),
        ("zone", "b"),
        ("pool", "x"),
        ("tier", "prod")
    ])));
    assert!(!s.matches(&labels(&[
        ("gpu", "true"),
        ("zone", "a"),
        ("pool", "p"),
        ("tier", "canary")
    ])));
    assert!(!s.matches(&labels(&[("gpu", "true"), ("zone", "c"), ("pool", "p")])));
    assert!(
        !s.matches(&labels(&[("gpu", "true"), ("pool", "p")])),
        "In needs the label"
    );
    assert!(
        !s.matches(&labels(&[("gpu", "true"), ("zone", "a")])),
        "Exists"
    );
    assert!(!s.matches(&labels(&[
        ("gpu", "true"),
        ("zone", "a"),
        ("pool", "p"),
        ("skip", "")
    ])));
    assert!(!s.matches(&labels(&[("gpu", "false"), ("zone", "a"), ("pool", "p")])));
    // no selector, or an empty one, selects every node (as the operator's)
    for v in [None, Some(json!({})), Some(json!(null))] {
        assert!(Selector::parse(v.as_ref()).unwrap().matches(&labels(&[])));
    }
}

#[test]
fn bad_selectors_are_refused_naming_the_field() {
    let cases = [
        (
            json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
            "spec.nodeSelectors.matchExpressions[0]: operator In needs values",
        ),
        (
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
            "spec.nodeSelectors.matchExpressions[0]: operator Exists takes no values",
        ),
        (
            json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
            "spec.nodeSelectors.matchExpressions[0].operator: \"Gt\" (expected In, NotIn, Exists or DoesNotExist)",
        ),
        (
            json!({"matchLabels": {"a": 1}}),
            "spec.nodeSelectors.matchLabels.a: not a string",
        ),
        (
            json!({"nodeNames": ["x"]}),
            "spec.nodeSelectors: unknown field \"nodeNames\"",
        ),
    ];
    for (v, want) in cases {
        assert_eq!(Selector::parse(Some(&v)).unwrap_err(), want, "{v}");
    }
}

fn cr_file(dir: &std::path::Path, packages: &str) -> std::path::PathBuf {
    let p = dir.join("cr.yaml");
    std::fs::write(
        &p,
        format!("apiVersion: skyhook.nvidia.com/v1alpha1\nkind: Skyhook\nmetadata: {{name: demo}}\nspec:\n  packages:\n{packages}"),
    )
    .unwrap();
    p
}

#[test]
fn packages_come_in_depends_on_order_and_bad_dependencies_are_named() {
    let d = tempfile::tempdir().unwrap();
    let cr = Cr::load(&cr_file(
        d.path(),
        "    c: {version: '1', dependsOn: {b: '2'}}\n    a: {version: '3'}\n    b: {version: '2', dependsOn: {a: '3'}}\n    d: {version: '1'}\n",
    ))
    .unwrap();
    let names: Vec<&str> = cr.packages.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
    assert_eq!(cr.resource_id(&cr.packages[1]), "demo-preview-1_b_2");
    let err = |packages: &str| Cr::load(&cr_file(d.path(), packages)).unwrap_err().message;
    assert_eq!(
        err("    a: {version: '1', dependsOn: {z: '1'}}\n"),
        "spec.packages.a.dependsOn: z is not a package of this Skyhook"
    );
    assert_eq!(
        err("    a: {version: '1', dependsOn: {b: '1'}}\n    b: {version: '2'}\n"),
        "spec.packages.a.dependsOn: b 1, but the Skyhook has b 2"
    );
    assert_eq!(
        err(
            "    a: {version: '1', dependsOn: {b: '1'}}\n    b: {version: '1', dependsOn: {a: '1'}}\n"
        ),
        "spec.packages: dependsOn forms a cycle among a, b"
    );
}

#[test]
fn kubectl_node_lists_get_addresses_from_the_template() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("nodes.json");
    std::fs::write(
        &f,
        json!({"apiVersion": "v1", "kind": "List", "items": [
            {"metadata": {"name": "gpu-1", "labels": {"gpu": "true"}},
             "status": {"addresses": [{"type": "Hostname", "address": "gpu-1.local"},
                                      {"type": "InternalIP", "address": "10.0.0.7"}]}},
            {"metadata": {"name": "cpu-1"}, "status": {"addresses": []}},
        ]})
        .to_string(),
    )
    .unwrap();
    let nodes = load_nodes(&f, Some("https://{InternalIP}:8443")).unwrap();
    assert_eq!(
        nodes,
        vec![
            Node {
                name: "gpu-1".into(),
                labels: labels(&[("gpu", "true")]),
                address: Some("https://10.0.0.7:8443".into()),
            },
            // no InternalIP: no address, reported as that node's failure
            Node {
                name: "cpu-1".into(),
                labels: BTreeMap::new(),
                address: None,
            },
        ]
    );
    std::fs::write(&f, "- {name: a}\n- {name: a}\n").unwrap();
    assert_eq!(
        load_nodes(&f, None).unwrap_err().to_string(),
        format!("{}: node a is listed twice", f.display())
    );
}

/// NODES in JSON is read by serde_json (the fast path of `load_nodes`); every document
/// must read as the YAML parser alone reads it, errors included.
#[test]
fn json_node_lists_read_as_the_yaml_parser_reads_them() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("nodes.json");
    let yaml_only = |text: &str| -> Result<Vec<Node>, String> {
        // what the YAML parser alone makes of `text`: written as YAML with a leading
        // comment, which serde_json refuses
        std::fs::write(&f, format!("# yaml\n{text}")).unwrap();
        load_nodes(&f, Some("http://{name}:1")).map_err(|e| e.to_string())
    };
    let read = |text: &str| -> Result<Vec<Node>, String> {
        std::fs::write(&f, text).unwrap();
        load_nodes(&f, Some("http://{name}:1")).map_err(|e| e.to_string())
    };
    let cases = [
        // a list, escapes, non-ASCII, a duplicate key (the last one counts)
        r#"[{"name": "a\/b", "labels": {"k": "v\u00e9", "k2": "x", "k2": "y"}},
            {"name": "n\u00f6de", "address": "https://h:2"}]"#,
        r#"{"nodes": [{"name": "a", "labels": {}}]}"#,
        // kubectl's shape
        r#"{"items": [{"metadata": {"name": "m", "labels": {"z": "1"}},
                       "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}]}"#,
    ];
    for text in cases {
        let fast = read(text).unwrap();
        assert_eq!(fast, yaml_only(text).unwrap(), "{text}");
    }
    assert_eq!(read(cases[0]).unwrap()[0].labels["k2"], "y");
    // Errors found after the parse are the same: a label that is not a string, a
    // duplicate node (the first one repeated is named).
    for text in [
        r#"[{"name": "a", "labels": {"k": 1}}]"#,
        r#"[{"name": "a"}, {"name": "b"}, {"name": "b"}, {"name": "a"}]"#,
    ] {
        let fast = read(text).unwrap_err();
        let slow = yaml_only(text).unwrap_err();
        assert_eq!(fast, slow, "{text}");
    }
    assert!(
        read(r#"[{"name": "a"}, {"name": "b"}, {"name": "b"}]"#)
            .unwrap_err()
            .ends_with("node b is listed twice")
    );
    // A surrogate-pair escape, which serde_json would take, goes to the YAML parser, which
    // refuses it as it did before the fast path.
    let surrogate = r#"[{"name": "\ud83d\ude00"}]"#;
    let yaml_error = serde_yaml_ng::from_str::<serde_json::Value>(surrogate).unwrap_err();
    assert_eq!(
        read(surrogate).unwrap_err(),
        format!("{}: not a YAML or JSON document: {yaml_error}", f.display())
    );
    // JSON that serde_json refuses (a trailing comma) is the YAML parser's to read
    assert_eq!(
        read(r#"[{"name": "a"},]"#).unwrap(),
        yaml_only(r#"[{"name": "a"},]"#).unwrap()
    );
}

#[test]
fn the_summary_counts_plans_among_nodes_that_would_change() {
    let planned = |node: &str, pending: u64, canonical: &str| NodeResult {
        node: node.into(),
        outcome: Outcome::Planned {
            packages: Vec::new(),
            pending,
            canonical: canonical.into(),
        },
    };
    let p = Preview::new(
        vec![
            planned("b", 1, "x\n"),
            planned("a", 1, "x\n"),
            planned("c", 2, "y\n"),
            planned("d", 0, "z\n"),
            NodeResult {
                node: "e".into(),
                outcome: Outcome::Failed("down".into()),
            },
        ],
        vec!["f".into()],
        Vec::new(),
    );
    assert_eq!(
        p.render_text(),
        "== would change on 2 nodes: a, b\nx\n== would change on 1 node: c\ny\n\
         == converged on 1 node: d\nz\n== failed on e: down\n\
         == excluded by spec.nodeSelectors: f\n\
         5 selected: 3 would change (2 plans), 1 converged, 1 failed\n"
    );
    assert_eq!(p.to_json()["summary"]["plans"], 2);
    assert_eq!(p.to_json()["nodes"][4]["error"], "down");
}

/// The chain form of a node's plan ([`run::chain_body`]) parses as one `package_plan` of
/// every package; a start gives `package` or `packages`, never both or neither, and at most
/// `MAX_CHAIN_PACKAGES` packages (400 otherwise).
#[test]
fn a_chain_carries_every_package_and_its_form_is_checked() {
    use crate::serve::plan::{MAX_CHAIN_PACKAGES, parse_plan};
    let pkg = |name: &str| {
        json!({"config": {"package_name": name, "package_version": "1.0.0"},
               "files": {"skyhook_dir/a.rhai": "1"}})
    };
    let single = |name: &str| {
        (
            name.to_string(),
            "1.0.0".to_string(),
            json!({"kind": "package_plan", "package": pkg(name), "modes": ["apply", "config"],
                   "env": {"SKYHOOK_RESOURCE_ID": format!("r_{name}_1.0.0")},
                   "skyhook_cr": {"spec": {"packages": {name: {"version": "1.0.0"}}}}}),
        )
    };
    let mut body = run::chain_body(&[single("a"), single("b")]);
    assert_eq!(body["modes"], json!(["apply", "config"]));
    assert_eq!(
        body["packages"][1]["env"]["SKYHOOK_RESOURCE_ID"],
        "r_b_1.0.0"
    );
    body["id"] = "c1".into();
    let start = parse_plan(body.to_string().as_bytes()).unwrap().unwrap();
    assert_eq!(start.id, "c1");
    let status = |b: serde_json::Value| parse_plan(b.to_string().as_bytes()).unwrap_err().status;
    let mut both = body.clone();
    both["package"] = pkg("a");
    assert_eq!(status(both), 400);
    let mut env_beside = body.clone();
    env_beside["env"] = json!({"X": "1"});
    assert_eq!(status(env_beside), 400);
    assert_eq!(status(json!({"id": "n", "kind": "package_plan"})), 400);
    let mut many = body.clone();
    many["packages"] = (0..=MAX_CHAIN_PACKAGES)
        .map(|i| json!({"package": pkg(&format!("p{i}"))}))
        .collect();
    assert_eq!(status(many), 400);
}

/// A CA (as PEM) and certificates it signed for `names` (DER), by rcgen.
fn ca_and_leaves(names: &[&str]) -> (String, Vec<Vec<u8>>) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaves = names
        .iter()
        .map(|n| {
            let key = rcgen::KeyPair::generate().unwrap();
            rcgen::CertificateParams::new(vec![n.to_string()])
                .unwrap()
                .signed_by(&key, &issuer)
                .unwrap()
                .der()
                .to_vec()
        })
        .collect();
    (ca.pem(), leaves)
}

/// The preview's verifier checks a chain to the CA once, and every node's name each time:
/// a chain it verified for one name is refused for a name its certificate lacks, and a
/// chain another CA signed is refused after a good one was verified.
#[test]
fn a_chain_verified_once_still_checks_each_nodes_name_and_issuer() {
    use tokio_rustls::rustls::client::WebPkiServerVerifier;
    use tokio_rustls::rustls::client::danger::ServerCertVerifier as _;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let d = tempfile::tempdir().unwrap();
    let (ca, leaves) = ca_and_leaves(&["node-a.fleet", "*.pool.fleet"]);
    let (_, other) = ca_and_leaves(&["node-a.fleet"]);
    let ca_file = d.path().join("ca.pem");
    std::fs::write(&ca_file, &ca).unwrap();
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    for c in crate::serve::tls::certs(&ca_file).unwrap() {
        roots.add(c).unwrap();
    }
    let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let inner = WebPkiServerVerifier::builder_with_provider(std::sync::Arc::new(roots), provider)
        .build()
        .unwrap();
    let v = super::tls::ChainOnce::new(inner);
    let check = |der: &[u8], name: &str| {
        let name = ServerName::try_from(name.to_string()).unwrap();
        v.verify_server_cert(
            &CertificateDer::from(der.to_vec()),
            &[],
            &name,
            &[],
            UnixTime::now(),
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    };
    let (a, wildcard) = (&leaves[0], &leaves[1]);
    assert_eq!(check(a, "node-a.fleet"), Ok(()));
    // the same chain again: still this node's name
    assert_eq!(check(a, "node-a.fleet"), Ok(()));
    let e = check(a, "node-b.fleet").unwrap_err();
    assert!(e.contains("not valid for name"), "{e}");
    // a wildcard certificate shared by the nodes of a pool
    for n in ["n1.pool.fleet", "n2.pool.fleet", "n3.pool.fleet"] {
        assert_eq!(check(wildcard, n), Ok(()), "{n}");
    }
    assert!(check(wildcard, "n1.other.fleet").is_err());
    // another CA's certificate for a name verified before (rcgen names both CAs alike, so
    // the CA's key refuses its signature)
    let e = check(&other[0], "node-a.fleet").unwrap_err();
    assert!(e.contains("BadSignature"), "{e}");
    // the preview's configuration: serve's, AES-128-GCM-SHA256 first
    let cfg = super::tls::preview_config(&ca_file, None).unwrap();
    assert_eq!(
        cfg.crypto_provider().cipher_suites[0].suite(),
        tokio_rustls::rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
    );
    assert_eq!(cfg.alpn_protocols, vec![b"http/1.1".to_vec()]);
    // and serve's errors
    let missing = d.path().join("missing.pem");
    assert_eq!(
        super::tls::preview_config(&missing, None).unwrap_err(),
        crate::serve::tls::client_config(&missing, None).unwrap_err()
    );
}

/// What the preview reads of an exit event, read through `serde_json::Value`'s accessors
/// (as the preview did before [`answer`]): one line per field read.
fn read_by_value(line: &str) -> String {
    use serde_json::Value;
    let v: Value = serde_json::from_str(line).unwrap();
    let s = |v: &Value| format!("{:?}", v.as_str());
    let mut out = format!(
        "exit {} error {}\n",
        v.get("exit").is_some(),
        s(&v["exit"]["error"])
    );
    for a in v["packages"].as_array().into_iter().flatten() {
        out += &format!(
            "package code0 {} error {} not_planned {} rendered {}\n",
            a["exit"]["code"] == 0,
            s(&a["exit"]["error"]),
            a.get("not_planned").is_some(),
            s(a.get("rendered").unwrap_or(&Value::Null)),
        );
        for p in a
            .get("plans")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            out += &format!(
                " mode {} not_planned {:?} error {} counts {:?} {:?}\n",
                s(p.get("package_mode").unwrap_or(&Value::Null)),
                p.get("not_planned").map(Value::as_str),
                s(p.get("error").unwrap_or(&Value::Null)),
                p["counts"]["changes"].as_u64(),
                p["counts"]["actions"].as_u64(),
            );
            for st in p
                .get("steps")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                out += &format!(
                    "  step {} kind {} error {} failed {} why {} drift {}\n",
                    s(st.get("name").unwrap_or(&Value::Null)),
                    s(st.get("kind").unwrap_or(&Value::Null)),
                    s(st.get("error").unwrap_or(&Value::Null)),
                    st["result"]["ok"] == false,
                    s(&st["result"]["error"]),
                    st["result"]["drift"],
                );
            }
        }
    }
    out
}

/// The same through [`answer::ExitLine`].
fn read_by_view(line: &str) -> String {
    let e = answer::ExitLine::parse(line.as_bytes()).unwrap();
    let s = |t: &answer::Text| format!("{:?}", t.as_str());
    let mut out = format!(
        "exit {} error {}\n",
        e.exit.is_some(),
        e.exit.as_ref().map_or("None".into(), |x| s(&x.error))
    );
    for a in &e.packages.0 {
        out += &format!(
            "package code0 {} error {} not_planned {} rendered {}\n",
            a.exit.code == 0,
            s(&a.exit.error),
            a.not_planned,
            s(&a.rendered),
        );
        for p in &a.plans.0 {
            out += &format!(
                " mode {} not_planned {:?} error {} counts {:?} {:?}\n",
                s(&p.package_mode),
                p.not_planned.as_ref().map(answer::Text::as_str),
                s(&p.error),
                p.changes.as_u64(),
                p.actions.as_u64(),
            );
            for st in &p.steps.0 {
                out += &format!(
                    "  step {} kind {} error {} failed {} why {} drift {}\n",
                    s(&st.name),
                    s(&st.kind),
                    s(&st.error),
                    st.ok == false,
                    s(&st.result_error),
                    st.drift,
                );
            }
        }
    }
    out
}

#[test]
fn an_exit_event_reads_as_its_json_value_reads() {
    let lines = [
        // as serve sends it
        r#"{"seq":9,"exit":{"code":0},"packages":[{"package":"a","version":"1","exit":{"code":0},"plans":[{"package_mode":"apply","counts":{"changes":2,"actions":1},"steps":[{"name":"s","kind":"rhai","result":{"ok":true,"drift":0,"changes":[{"path":"/x"}]}}]}],"rendered":"--- mode apply\n+ /etc/n1.conf \u00e9\n"}]}"#,
        // failures: a failed step, a rhai step not ok with and without an error, modes
        // not planned, a later package not planned
        r#"{"exit":{"code":1,"error":"e"},"packages":[{"exit":{"code":1,"error":"x"},"plans":[{"package_mode":"apply","steps":[{"name":"f","kind":"failed","error":"boom"},{"name":"r","kind":"rhai","result":{"ok":false,"drift":3}},{"name":"q","kind":"rhai","result":{"ok":false,"error":"no"}}]},{"package_mode":"config","not_planned":"mode apply failed"},{"package_mode":"x","error":"mode failed"}],"rendered":""},{"not_planned":"package a failed","exit":{"code":1},"plans":[],"rendered":""}]}"#,
        // fields of another type than the one read, null, absent
        r#"{"exit":null,"packages":[{"exit":{"code":0.0,"error":7},"not_planned":null,"plans":[{"package_mode":1,"not_planned":null,"counts":{"changes":2.0,"actions":-1},"steps":[{"name":[],"kind":"rhai","result":{"ok":"false","drift":{"a":[1,2]}}},{"kind":"rhai","result":{"ok":false}},{"kind":"rhai","result":[false]},"step"]},7,null],"rendered":["x"]},"p",[1],{}]}"#,
        r#"{"exit":{"code":0},"packages":{"a":1}}"#,
        r#"{"exit":"done","packages":"none"}"#,
        r#"["exit",{"exit":{}}]"#,
        r#"{"no_exit":{"exit":1}}"#,
        // a field given twice is its last; escaped names
        r#"{"exit":{"error":"first"},"exit":{"error":"last","code":0},"packages":[{"rendered":"a","ren\u0064ered":"b","exit":{"code":1},"exit":{"code":0},"plans":[{"counts":{"changes":1},"counts":{"actions":5},"steps":[{"kind":"failed","error":"one"}],"steps":[]}]}],"packages":[{"rendered":"kept","plans":null}]}"#,
    ];
    for line in lines {
        assert_eq!(read_by_view(line), read_by_value(line), "{line}");
    }
    // plans as sent, for --output json (null when absent or not an object's)
    let plans = answer::plans(lines[2].as_bytes()).unwrap();
    let v: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
    assert_eq!(plans.len(), 4);
    assert_eq!(plans[0], v["packages"][0]["plans"]);
    assert_eq!(plans[1..], [json!(null), json!(null), json!(null)]);
    // not JSON
    assert!(answer::ExitLine::parse(br#"{"exit":{"code":0},"packages":[}"#).is_err());
}
