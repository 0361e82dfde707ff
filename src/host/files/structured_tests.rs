//! Tests of `toml::`, `json::`, `ini::`: exact resulting text, plan/check/apply behaviour.

use std::path::Path;

use serde_json::json;

use crate::host::ExecMode;
use crate::host::files::structured::KeyPath;
use crate::host::files::{ini, json, toml};
use crate::host::testutil::{TestHost, tree};

const CRI: &str = "io.containerd.grpc.v1.cri";

fn kp(keys: &[&str]) -> KeyPath {
    KeyPath::from(keys)
}

/// A containerd 2.x-style config: comments, indented nested tables, other runtimes.
const CONTAINERD_V2: &str = r#"# managed by hand
version = 2

[plugins]

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9" # pinned

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      snapshotter = "overlayfs"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            SystemdCgroup = true

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]
          runtime_type = "io.containerd.kata.v2"

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
"#;

fn apply(
    t: &TestHost,
    f: impl FnOnce(
        &mut crate::host::Host,
    ) -> Result<bool, crate::host::files::structured::StructuredError>,
) -> bool {
    let mut h = t.host(ExecMode::Apply);
    let r = f(&mut h).unwrap();
    h.finish().unwrap();
    r
}

#[test]
fn toml_set_one_key_is_one_line() {
    let t = TestHost::new();
    t.file("/etc/containerd/config.toml", CONTAINERD_V2);
    let p = "/etc/containerd/config.toml";
    assert!(apply(&t, |h| toml::set(
        h,
        p,
        &kp(&["plugins", CRI, "containerd", "default_runtime_name"]),
        &json!("nvidia")
    )));
    assert_eq!(
        t.read(p),
        CONTAINERD_V2.replace(
            "default_runtime_name = \"runc\"",
            "default_runtime_name = \"nvidia\""
        )
    );
    // A trailing comment stays with its value.
    assert!(apply(&t, |h| toml::set(
        h,
        p,
        &KeyPath::Text(format!("plugins.\"{CRI}\".sandbox_image")),
        &json!("registry.k8s.io/pause:3.10")
    )));
    assert!(
        t.read(p)
            .contains("    sandbox_image = \"registry.k8s.io/pause:3.10\" # pinned\n")
    );
    // Equal value: unchanged.
    assert!(!apply(&t, |h| toml::set(
        h,
        p,
        &kp(&["version"]),
        &json!(2)
    )));
}

#[test]
fn toml_new_table_goes_after_its_siblings() {
    let t = TestHost::new();
    t.file("/c.toml", CONTAINERD_V2);
    let v = json!({
        "runtime_type": "io.containerd.runc.v2",
        "options": {"BinaryName": "/usr/bin/nvidia-container-runtime"},
    });
    assert!(apply(&t, |h| toml::set(
        h,
        "/c.toml",
        &kp(&["plugins", CRI, "containerd", "runtimes", "nvidia"]),
        &v
    )));
    print!("{}", t.read("/c.toml"));
    let expected = CONTAINERD_V2.replace(
        "\n  [plugins.\"io.containerd.grpc.v1.cri\".registry]",
        r#"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"

  [plugins."io.containerd.grpc.v1.cri".registry]"#,
    );
    assert_eq!(t.read("/c.toml"), expected);
    // Again: unchanged; removing it restores the file byte for byte.
    assert!(!apply(&t, |h| toml::set(
        h,
        "/c.toml",
        &kp(&["plugins", CRI, "containerd", "runtimes", "nvidia"]),
        &v
    )));
    assert!(apply(&t, |h| toml::remove(
        h,
        "/c.toml",
        &kp(&["plugins", CRI, "containerd", "runtimes", "nvidia"])
    )));
    assert_eq!(t.read("/c.toml"), CONTAINERD_V2);
}

#[test]
fn toml_plan_is_byte_identical_and_check_reports_drift() {
    let t = TestHost::new();
    t.file("/c.toml", "# top\n[a]\nx = 1 # one\n");
    let before = tree(&t.root);
    let mut h = t.host(ExecMode::Plan);
    assert!(
        toml::set(
            &mut h,
            "/c.toml",
            &kp(&["a", "y"]),
            &json!([1, "two", true])
        )
        .unwrap()
    );
    // A later read in the plan sees the planned write.
    assert_eq!(
        toml::get(&h, "/c.toml", &kp(&["a"])).unwrap(),
        json!({"x": 1, "y": [1, "two", true]})
    );
    assert!(toml::remove(&mut h, "/c.toml", &kp(&["a", "x"])).unwrap());
    let plan = h.finish().unwrap();
    assert_eq!(tree(&t.root), before);
    assert_eq!(plan.changes.len(), 2);
    let diff = plan.changes[1].diff.clone().unwrap();
    assert!(diff.contains("-x = 1 # one\n"), "{diff}");

    let mut h = t.host(ExecMode::Check);
    assert!(toml::ensure_table(&mut h, "/c.toml", &kp(&["b", "c"])).unwrap());
    assert!(!toml::ensure_table(&mut h, "/c.toml", &kp(&["a"])).unwrap());
    assert_eq!(h.finish().unwrap().drift().len(), 1);
    assert_eq!(tree(&t.root), before);

    assert!(apply(&t, |h| toml::ensure_table(
        h,
        "/c.toml",
        &kp(&["b", "c"])
    )));
    assert_eq!(t.read("/c.toml"), "# top\n[a]\nx = 1 # one\n\n[b.c]\n");
}

#[test]
fn toml_values_errors_and_dotted_keys() {
    let t = TestHost::new();
    t.file(
        "/c.toml",
        "title = \"x\"\nwhen = 1979-05-27T07:32:00Z\n[[srv]]\nname = \"a\"\n[srv.opt]\nk = { a = 1 }\n",
    );
    let h = t.host(ExecMode::Plan);
    assert_eq!(
        toml::get(&h, "/c.toml", &KeyPath::Text("srv".into())).unwrap(),
        json!([{"name": "a", "opt": {"k": {"a": 1}}}])
    );
    assert_eq!(
        toml::get(
            &h,
            "/c.toml",
            &KeyPath::Segments(vec![
                crate::host::files::structured::Seg::Key("srv".into()),
                crate::host::files::structured::Seg::Index(0),
                crate::host::files::structured::Seg::Key("name".into()),
            ])
        )
        .unwrap(),
        json!("a")
    );
    assert_eq!(
        toml::get(&h, "/c.toml", &kp(&["when"])).unwrap(),
        json!("1979-05-27T07:32:00Z")
    );
    assert_eq!(
        toml::get(&h, "/c.toml", &kp(&["nope", "x"])).unwrap(),
        json!(null)
    );
    assert_eq!(
        toml::get(&h, "/missing.toml", &kp(&["x"])).unwrap(),
        json!(null)
    );
    drop(h);

    let mut h = t.host(ExecMode::Apply);
    let e = toml::set(&mut h, "/c.toml", &kp(&["title", "sub"]), &json!(1)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid key path: /c.toml: title is a string, not a table"
    );
    let e = toml::set(&mut h, "/c.toml", &kp(&["x"]), &json!(null)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid TOML value: /c.toml: x is () (TOML has no null; use toml::remove)"
    );
    let e = toml::get(&h, "/c.toml", &KeyPath::Text("a..b".into())).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("invalid key path: /c.toml: \"a..b\" is not a TOML dotted key"),
        "{e}"
    );
    h.finish().unwrap();
    t.file("/bad.toml", "a = 1\nb = = 2\n");
    let h = t.host(ExecMode::Apply);
    let e = toml::get(&h, "/bad.toml", &kp(&["a"])).unwrap_err();
    assert!(
        e.to_string().starts_with("/bad.toml:2:5: invalid TOML: "),
        "{e}"
    );
    assert!(
        toml::parse("x = [", Path::new("<text>"))
            .unwrap_err()
            .to_string()
            .starts_with("<text>:1:6: invalid TOML")
    );
}

#[test]
fn toml_inline_tables_stay_inline() {
    let t = TestHost::new();
    t.file("/c.toml", "[a]\nk = { x = 1 }\n");
    assert!(apply(&t, |h| toml::set(
        h,
        "/c.toml",
        &kp(&["a", "k"]),
        &json!({"y": {"z": 2}})
    )));
    assert_eq!(t.read("/c.toml"), "[a]\nk = { x = 1, y = { z = 2 } }\n");
    assert!(apply(&t, |h| toml::set(
        h,
        "/c.toml",
        &kp(&["a", "k", "x"]),
        &json!(3)
    )));
    assert_eq!(t.read("/c.toml"), "[a]\nk = { x = 3, y = { z = 2 } }\n");
}

const PKG_JSON: &str = "{\n    \"name\": \"x\",\n    \"deps\": {\n        \"b\": 1,\n        \"a\": [\n            1,\n            2\n        ]\n    }\n}\n";

#[test]
fn json_keeps_order_indent_and_newline() {
    let t = TestHost::new();
    t.file("/p.json", PKG_JSON);
    assert!(apply(&t, |h| json::set(
        h,
        "/p.json",
        &kp(&["deps", "c"]),
        &json!({"z": 1, "y": null})
    )));
    assert_eq!(
        t.read("/p.json"),
        "{\n    \"name\": \"x\",\n    \"deps\": {\n        \"b\": 1,\n        \"a\": [\n            1,\n            2\n        ],\n        \"c\": {\n            \"z\": 1,\n            \"y\": null\n        }\n    }\n}\n"
    );
    assert!(apply(&t, |h| json::remove(
        h,
        "/p.json",
        &KeyPath::Text("/deps/c".into())
    )));
    assert_eq!(t.read("/p.json"), PKG_JSON);
    assert!(apply(&t, |h| json::set(
        h,
        "/p.json",
        &KeyPath::Text("/deps/a/1".into()),
        &json!(5)
    )));
    assert_eq!(
        json::get(
            &t.host(ExecMode::Plan),
            "/p.json",
            &KeyPath::Text("/deps/a".into())
        )
        .unwrap(),
        json!([1, 5])
    );
    assert!(apply(&t, |h| json::remove(
        h,
        "/p.json",
        &KeyPath::Text("/deps/a/0".into())
    )));
    assert!(!apply(&t, |h| json::remove(
        h,
        "/p.json",
        &kp(&["nope", "x"])
    )));
    assert!(!apply(&t, |h| json::set(
        h,
        "/p.json",
        &kp(&["name"]),
        &json!("x")
    )));

    t.file("/tab.json", "{\n\t\"a\": 1\n}");
    assert!(apply(&t, |h| json::set(
        h,
        "/tab.json",
        &kp(&["b"]),
        &json!(true)
    )));
    assert_eq!(t.read("/tab.json"), "{\n\t\"a\": 1,\n\t\"b\": true\n}");
    // An equal value changes nothing, whatever the layout.
    t.file("/odd.json", "{ \"a\" : [1,2] }");
    assert!(!apply(&t, |h| json::set(
        h,
        "/odd.json",
        &kp(&["a"]),
        &json!([1, 2])
    )));
    assert_eq!(t.read("/odd.json"), "{ \"a\" : [1,2] }");
    t.file("/one.json", "{\"a\":1}\n");
    assert!(apply(&t, |h| json::set(
        h,
        "/one.json",
        &kp(&["b"]),
        &json!([1])
    )));
    assert_eq!(t.read("/one.json"), "{\"a\":1,\"b\":[1]}\n");
    assert!(apply(&t, |h| json::set(
        h,
        "/new/d.json",
        &kp(&["a", "b"]),
        &json!("c")
    )));
    assert_eq!(
        t.read("/new/d.json"),
        "{\n  \"a\": {\n    \"b\": \"c\"\n  }\n}\n"
    );

    let mut h = t.host(ExecMode::Apply);
    let e = json::set(&mut h, "/p.json", &kp(&["name", "x"]), &json!(1)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid key path: /p.json: name is a string, not an object or array"
    );
    let e = json::set(
        &mut h,
        "/p.json",
        &KeyPath::Text("/deps/a/7".into()),
        &json!(1),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid key path: /p.json: deps.a: index 7 is out of range (the array has 1 element)"
    );
    let e = toml::set(&mut h, "/i.toml", &kp(&[]), &json!(1)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid key path: /i.toml: the key path is empty: only a table (a map) can be set as the whole document"
    );
    let e = json::get(&h, "/p.json", &KeyPath::Text("deps".into())).unwrap_err();
    assert!(e.to_string().contains("is not a JSON Pointer"), "{e}");
    t.file("/bad.json", "{\n  \"a\": 1,\n}\n");
    let e = json::get(&h, "/bad.json", &kp(&["a"])).unwrap_err();
    assert_eq!(e.to_string(), "/bad.json:3:1: invalid JSON: trailing comma");
    h.finish().unwrap();
}

#[test]
fn json_plan_and_check() {
    let t = TestHost::new();
    t.file("/p.json", PKG_JSON);
    let before = tree(&t.root);
    let mut h = t.host(ExecMode::Plan);
    assert!(json::set(&mut h, "/p.json", &kp(&["name"]), &json!("y")).unwrap());
    assert_eq!(
        json::get(&h, "/p.json", &kp(&["name"])).unwrap(),
        json!("y")
    );
    let plan = h.finish().unwrap();
    assert_eq!(tree(&t.root), before);
    let diff = plan.changes[0].diff.clone().unwrap();
    assert!(
        diff.contains("-    \"name\": \"x\",\n+    \"name\": \"y\",\n"),
        "{diff}"
    );
    let mut h = t.host(ExecMode::Check);
    assert!(json::remove(&mut h, "/p.json", &kp(&["deps"])).unwrap());
    assert_eq!(h.finish().unwrap().drift().len(), 1);
    assert_eq!(tree(&t.root), before);
}

const UNIT: &str = "# a drop-in\n[Unit]\nDescription=x\n\n[Service]\nEnvironment=A=1\nLimitNOFILE = 1024 ; low\nEnvironment=B=2\n\n[Install]\nWantedBy=multi-user.target\n";

#[test]
fn ini_edits_lines_in_place() {
    let t = TestHost::new();
    t.file("/u.conf", UNIT);
    let h = t.host(ExecMode::Plan);
    assert_eq!(
        ini::get(&h, "/u.conf", "Service", "Environment").unwrap(),
        Some("B=2".into())
    );
    assert_eq!(
        ini::get(&h, "/u.conf", "Service", "LimitNOFILE").unwrap(),
        Some("1024 ; low".into())
    );
    assert_eq!(ini::get(&h, "/u.conf", "Service", "Nope").unwrap(), None);
    assert_eq!(ini::get(&h, "/missing", "a", "b").unwrap(), None);
    drop(h);
    // Replace the first, remove the repeats.
    assert!(apply(&t, |h| ini::set(
        h,
        "/u.conf",
        "Service",
        "Environment",
        "C=3"
    )));
    assert_eq!(
        t.read("/u.conf"),
        UNIT.replace("Environment=A=1", "Environment=C=3")
            .replace("Environment=B=2\n", "")
    );
    // Spacing kept; a new key after the section's last line; a new section at the end.
    t.file("/u.conf", UNIT);
    assert!(apply(&t, |h| ini::set(
        h,
        "/u.conf",
        "Service",
        "LimitNOFILE",
        "65536"
    )));
    assert!(apply(&t, |h| ini::set(
        h, "/u.conf", "Service", "TasksMax", "infinity"
    )));
    assert!(apply(&t, |h| ini::set(
        h, "/u.conf", "X-Extra", "On", "yes"
    )));
    assert!(apply(&t, |h| ini::set(h, "/u.conf", "", "top", "1")));
    assert_eq!(
        t.read("/u.conf"),
        "# a drop-in\ntop=1\n[Unit]\nDescription=x\n\n[Service]\nEnvironment=A=1\nLimitNOFILE = 65536\nEnvironment=B=2\nTasksMax=infinity\n\n[Install]\nWantedBy=multi-user.target\n\n[X-Extra]\nOn=yes\n"
    );
    assert!(!apply(&t, |h| ini::set(
        h, "/u.conf", "Service", "TasksMax", "infinity"
    )));
    assert!(apply(&t, |h| ini::remove(
        h,
        "/u.conf",
        "Service",
        "Environment"
    )));
    assert!(!apply(&t, |h| ini::remove(
        h,
        "/u.conf",
        "Service",
        "Environment"
    )));
    assert!(!t.read("/u.conf").contains("Environment"));
    // An equal value leaves a file without a final newline alone.
    t.file("/n.ini", "[a]\nk=v");
    assert!(!apply(&t, |h| ini::set(h, "/n.ini", "a", "k", "v")));
    assert_eq!(t.read("/n.ini"), "[a]\nk=v");
    // A new file, spaced style from the file's first key.
    t.file("/s.ini", "[a]\nk = v\n");
    assert!(apply(&t, |h| ini::set(h, "/s.ini", "a", "n", "1")));
    assert_eq!(t.read("/s.ini"), "[a]\nk = v\nn = 1\n");
    assert!(apply(&t, |h| ini::set(h, "/d/new.ini", "s", "k", "v")));
    assert_eq!(t.read("/d/new.ini"), "[s]\nk=v\n");

    let mut h = t.host(ExecMode::Apply);
    let e = ini::set(&mut h, "/s.ini", "a", "k=x", "1").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid INI key: /s.ini: \"k=x\" must not contain = or start with #, ; or ["
    );
    let e = ini::set(&mut h, "/s.ini", "a", "k", "1\n2").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid INI value: /s.ini: the value of \"k\" must be one line"
    );
    h.finish().unwrap();
}

#[test]
fn ini_plan_and_check() {
    let t = TestHost::new();
    t.file("/u.conf", UNIT);
    let before = tree(&t.root);
    let mut h = t.host(ExecMode::Plan);
    assert!(ini::set(&mut h, "/u.conf", "Unit", "Description", "y").unwrap());
    assert_eq!(
        ini::get(&h, "/u.conf", "Unit", "Description").unwrap(),
        Some("y".into())
    );
    let plan = h.finish().unwrap();
    assert_eq!(tree(&t.root), before);
    assert!(
        plan.changes[0]
            .diff
            .as_deref()
            .unwrap()
            .contains("-Description=x\n+Description=y\n")
    );
    let mut h = t.host(ExecMode::Check);
    assert!(ini::remove(&mut h, "/u.conf", "Install", "WantedBy").unwrap());
    assert!(!ini::remove(&mut h, "/u.conf", "Install", "Nope").unwrap());
    assert_eq!(h.finish().unwrap().drift().len(), 1);
    assert_eq!(tree(&t.root), before);
}

#[test]
fn toml_new_entries_copy_indentation_not_comments() {
    let t = TestHost::new();
    t.file(
        "/c.toml",
        "# head\n[a]\n  # about x\n  x = 1\n\n# about b\n[a.b]\n  k = 1\n",
    );
    assert!(apply(&t, |h| toml::set(
        h,
        "/c.toml",
        &kp(&["a", "y"]),
        &json!(2)
    )));
    assert!(apply(&t, |h| toml::set(
        h,
        "/c.toml",
        &kp(&["a", "c"]),
        &json!({"k": 2})
    )));
    assert_eq!(
        t.read("/c.toml"),
        "# head\n[a]\n  # about x\n  x = 1\n  y = 2\n\n# about b\n[a.b]\n  k = 1\n\n[a.c]\n  k = 2\n"
    );
}

#[test]
fn toml_dotted_keys_stay_dotted() {
    let t = TestHost::new();
    t.file("/c.toml", "a.b = 1 # dotted\n[x]\ny = 1\n");
    assert!(apply(&t, |h| toml::set(
        h,
        "/c.toml",
        &kp(&["a", "c"]),
        &json!(2)
    )));
    assert!(apply(&t, |h| toml::set(
        h,
        "/c.toml",
        &KeyPath::Text("a.b".into()),
        &json!(3)
    )));
    assert_eq!(t.read("/c.toml"), "a.b = 3 # dotted\na.c = 2\n[x]\ny = 1\n");
    let h = t.host(ExecMode::Plan);
    assert_eq!(
        toml::get(&h, "/c.toml", &KeyPath::Text(String::new())).unwrap(),
        json!({"a": {"b": 3, "c": 2}, "x": {"y": 1}})
    );
}

/// A `[section` line without its `]` is an error naming file:line:col in every function,
/// not a line silently kept: its keys would be read from, and written to, the section
/// before it (`ini::set` would append a second `[sec]`). The file stays as it is.
#[test]
fn ini_unclosed_section_header_is_a_parse_error() {
    let t = TestHost::new();
    let text = "[a]\nk=1\n  [sec\nk=2\n";
    t.file("/bad.ini", text);
    let msg = "/bad.ini:3:7: invalid INI: unclosed section header, expected `]`";
    let h = t.host(ExecMode::Plan);
    assert_eq!(
        ini::get(&h, "/bad.ini", "sec", "k")
            .unwrap_err()
            .to_string(),
        msg
    );
    drop(h);
    for mode in [ExecMode::Plan, ExecMode::Apply] {
        let mut h = t.host(mode);
        assert_eq!(
            ini::set(&mut h, "/bad.ini", "sec", "k", "3")
                .unwrap_err()
                .to_string(),
            msg
        );
        assert_eq!(
            ini::remove(&mut h, "/bad.ini", "a", "k")
                .unwrap_err()
                .to_string(),
            msg
        );
        assert_eq!(h.changed(), 0);
    }
    assert_eq!(t.read("/bad.ini"), text);
}

/// A key that is not an index, on an array, is named as the user wrote it (not as the
/// internal `Key("-")`), and nothing changes.
#[test]
fn json_set_names_a_non_index_key_on_an_array_as_written() {
    let t = TestHost::new();
    t.file("/n.json", "{\"b\": [1]}\n");
    for mode in [ExecMode::Plan, ExecMode::Apply] {
        let mut h = t.host(mode);
        let key = KeyPath::Text("/b/-".into());
        let e = json::set(&mut h, "/n.json", &key, &json!(2)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid key path: /n.json: b is an array: key \"-\" is not an index"
        );
    }
    assert_eq!(t.read("/n.json"), "{\"b\": [1]}\n");
}

/// A CRLF file keeps its line endings: `ini::set` changes only the value (its line keeps
/// `\r\n`), and new keys and sections are written with `\r\n` too.
#[test]
fn ini_set_keeps_crlf_line_endings() {
    let t = TestHost::new();
    t.file("/c.ini", "[s]\r\nk=1\r\nj=2\r\n");
    assert!(apply(&t, |h| ini::set(h, "/c.ini", "s", "k", "5")));
    assert_eq!(t.read("/c.ini"), "[s]\r\nk=5\r\nj=2\r\n");
    assert!(apply(&t, |h| ini::set(h, "/c.ini", "s", "n", "6")));
    assert!(apply(&t, |h| ini::set(h, "/c.ini", "t", "m", "7")));
    assert_eq!(
        t.read("/c.ini"),
        "[s]\r\nk=5\r\nj=2\r\nn=6\r\n\r\n[t]\r\nm=7\r\n"
    );
    assert!(!apply(&t, |h| ini::set(h, "/c.ini", "t", "m", "7")));
    assert_eq!(
        ini::get(&t.host(ExecMode::Plan), "/c.ini", "s", "k").unwrap(),
        Some("5".into())
    );
    assert!(apply(&t, |h| ini::remove(h, "/c.ini", "s", "j")));
    assert_eq!(t.read("/c.ini"), "[s]\r\nk=5\r\nn=6\r\n\r\n[t]\r\nm=7\r\n");
}

/// An empty value on a CRLF line is replaced before the `\r`, not after it.
#[test]
fn ini_set_replaces_an_empty_crlf_value_before_the_cr() {
    let t = TestHost::new();
    t.file("/e.ini", "[s]\r\nk=\r\n");
    assert!(apply(&t, |h| ini::set(h, "/e.ini", "s", "k", "v")));
    assert_eq!(t.read("/e.ini"), "[s]\r\nk=v\r\n");
}

/// A CRLF TOML file keeps `\r\n` (toml_edit writes `\n`): a set changes one line, not all.
#[test]
fn toml_set_keeps_crlf_line_endings() {
    let t = TestHost::new();
    t.file("/c.toml", "a = 1\r\n[b]\r\nc = 2\r\n");
    assert!(apply(&t, |h| toml::set(
        h,
        "/c.toml",
        &KeyPath::Text("b.d".into()),
        &json!(3)
    )));
    assert_eq!(t.read("/c.toml"), "a = 1\r\n[b]\r\nc = 2\r\nd = 3\r\n");
    assert!(apply(&t, |h| toml::remove(
        h,
        "/c.toml",
        &KeyPath::Text("a".into())
    )));
    assert_eq!(t.read("/c.toml"), "[b]\r\nc = 2\r\nd = 3\r\n");
}

/// `ini::get` trims values, so a value with leading or trailing blanks cannot be kept: it
/// grew by one blank on every run (`k= v`, `k=  v`, ...). It is an error naming the key.
#[test]
fn ini_set_refuses_a_value_with_surrounding_blanks() {
    let t = TestHost::new();
    t.file("/w.ini", "[s]\nk=v\n");
    for v in [" v", "v ", "\tv"] {
        let mut h = t.host(ExecMode::Apply);
        assert_eq!(
            ini::set(&mut h, "/w.ini", "s", "k", v)
                .unwrap_err()
                .to_string(),
            format!(
                "invalid INI value: /w.ini: the value of \"k\" must not start or end with blanks, got {v:?}"
            )
        );
    }
    assert_eq!(t.read("/w.ini"), "[s]\nk=v\n");
    assert!(!apply(&t, |h| ini::set(h, "/w.ini", "s", "k", "v")));
}
