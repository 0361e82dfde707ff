//! Tests of `toml::`, `json::`, `ini::`: exact resulting text, plan/check/apply behaviour.

use std::path::Path;

use serde_json::json;

use crate::host::structured::KeyPath;
use crate::host::testutil::{TestHost, tree};
use crate::host::{ExecMode, ini, json, toml};

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
    f: impl FnOnce(&mut crate::host::Host) -> crate::host::error::Result<bool>,
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
