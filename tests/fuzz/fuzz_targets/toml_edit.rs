//! The TOML edit (`host::files::toml::{set, get, remove}`) in plan mode over a throwaway host root,
//! as a step editing a configMap-driven TOML file does. Input: the key path (a TOML dotted
//! key) on the first line, a JSON value on the second, the document after. Invariants: a set
//! that succeeds reads back (`get`) as the value (an object: merged, so its keys read back);
//! a remove that succeeds reads back as absent; the edited document always parses again.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use skyhook::host::root::HostRoot;
use skyhook::host::files::structured::KeyPath;
use skyhook::host::files::toml;
use skyhook::host::{ExecMode, Host, HostOptions};

const FILE: &str = "/etc/fuzz.toml";

fn root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir").keep();
        std::fs::create_dir_all(dir.join("etc")).expect("etc");
        dir
    })
}

/// Whether every key of `want` reads back in `got` (recursively for objects).
fn contains(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| g.get(k).is_some_and(|gv| contains(gv, v))),
        _ => got == want,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(3, '\n');
    let (Some(key), Some(value), doc) = (parts.next(), parts.next(), parts.next()) else {
        return;
    };
    let Ok(value) = serde_json::from_str::<Value>(value) else {
        return;
    };
    let doc = doc.unwrap_or("");
    let root = root();
    std::fs::write(root.join("etc/fuzz.toml"), doc).expect("write the document");
    let mut h = Host::new(
        HostRoot::open(root).expect("open the root"),
        ExecMode::Plan,
        HostOptions::default(),
    );
    let key = KeyPath::Text(key.to_string());
    let parsed = toml::parse(doc, std::path::Path::new(FILE));
    if toml::set(&mut h, FILE, &key, &value).is_ok() {
        assert!(parsed.is_ok(), "set on a document that does not parse");
        let got = toml::get(&h, FILE, &key).expect("the edited document parses");
        assert!(contains(&got, &value), "set {value} read back as {got}");
    }
    if toml::remove(&mut h, FILE, &key).is_ok() {
        let got = toml::get(&h, FILE, &key).expect("the edited document parses");
        assert_eq!(got, Value::Null, "removed key reads back");
    }
    let _ = h.finish();
});
