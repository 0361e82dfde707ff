//! `skyhook/containerd` (examples/containerd-nvidia) on config version 2 and 3 files.

use super::*;

const CONFIG: &str = "/etc/containerd/config.toml";
const RECORD: &str = "/var/lib/skyhook/containerd-nvidia.default";

/// A version 2 config as `containerd config default` lays it out (trimmed), with a comment
/// and a second runtime.
const V2: &str = r#"# containerd config, edited by hand
version = 2

[plugins]

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9"

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc" # the stock runtime
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

/// The nvidia runtime added to [`V2`]: a copy of runc with BinaryName.
const V2_NVIDIA: &str = r#"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
            SystemdCgroup = true
"#;

/// A version 3 config (containerd 2.x) without any runtime of its own.
const V3: &str = r#"version = 3

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
"#;

fn node(config: Option<&str>, conf: &str) -> Node {
    let n = Node::new("ubuntu-24.04", "debian", "containerd-nvidia");
    if let Some(c) = config {
        n.t.file(CONFIG, c);
    }
    n.configmap("containerd.conf", conf);
    n
}

const DEFAULT_CONF: &str =
    "runtime_name=nvidia\nbinary_name=/usr/bin/nvidia-container-runtime\nset_as_default=true\n";

fn restart() -> Vec<crate::host::effects::effect::InterruptRequest> {
    vec![
        crate::host::effects::effect::InterruptRequest::RestartServices {
            services: vec!["containerd".into()],
        },
    ]
}

#[test]
fn version_2_adds_only_the_runtime_and_the_default() {
    let n = node(Some(V2), DEFAULT_CONF);
    let plan = n.dry_run("containerd-nvidia", "config", "version 2");
    assert_eq!(plan.report.change_targets(), [CONFIG, RECORD, CONFIG]);
    let diff: String = plan
        .report
        .changes
        .iter()
        .filter(|c| c.target == CONFIG)
        .map(|c| c.diff.clone().unwrap())
        .collect();
    let added: Vec<&str> = diff
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .collect();
    let removed: Vec<&str> = diff
        .lines()
        .filter(|l| l.starts_with('-') && !l.starts_with("---"))
        .collect();
    assert_eq!(
        removed,
        ["-      default_runtime_name = \"runc\" # the stock runtime"]
    );
    assert_eq!(
        added,
        [
            "+        [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]",
            "+          runtime_type = \"io.containerd.runc.v2\"",
            "+",
            "+          [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]",
            "+            BinaryName = \"/usr/bin/nvidia-container-runtime\"",
            "+            SystemdCgroup = true",
            "+",
            "+      default_runtime_name = \"nvidia\" # the stock runtime",
        ]
    );
    assert_eq!(plan.report.interrupts, restart());

    let applied = n.step("containerd-nvidia", "config", false).ok();
    assert_eq!(applied.report.interrupts, restart());
    let want = V2
        .replace(
            "default_runtime_name = \"runc\"",
            "default_runtime_name = \"nvidia\"",
        )
        .replace(
            "\n  [plugins.\"io.containerd.grpc.v1.cri\".registry]",
            &format!("{V2_NVIDIA}\n  [plugins.\"io.containerd.grpc.v1.cri\".registry]"),
        );
    assert_eq!(n.t.read(CONFIG), want);
    assert_eq!(n.t.read(RECORD), "runc");

    // Second apply: nothing changes, no restart.
    let again = n.step("containerd-nvidia", "config", false).ok();
    assert!(
        again.report.changes.is_empty(),
        "{:?}",
        again.report.changes
    );
    assert!(again.report.interrupts.is_empty());
    assert!(again.stdout.contains("unchanged"), "{}", again.stdout);
    n.step("containerd-nvidia", "config-check", false).ok();

    // Uninstall restores the file byte for byte.
    let un = n.step("containerd-nvidia", "uninstall", false).ok();
    assert_eq!(un.report.interrupts, restart());
    assert_eq!(n.t.read(CONFIG), V2);
    assert!(!n.t.p(RECORD).exists());
    n.step("containerd-nvidia", "uninstall-check", false).ok();
    let un2 = n.step("containerd-nvidia", "uninstall", false).ok();
    assert!(un2.report.changes.is_empty());
}

#[test]
fn version_3_uses_the_cri_runtime_plugin() {
    let n = node(
        Some(V3),
        "set_as_default=false\noptions.SystemdCgroup=true\nbinary_name=/usr/local/nvidia/toolkit/nvidia-container-runtime\n",
    );
    n.step("containerd-nvidia", "config", false).ok();
    assert_eq!(
        n.t.read(CONFIG),
        format!(
            "{V3}
[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]
privileged_without_host_devices = false
runtime_engine = \"\"
runtime_root = \"\"
runtime_type = \"io.containerd.runc.v2\"

[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia.options]
BinaryName = \"/usr/local/nvidia/toolkit/nvidia-container-runtime\"
SystemdCgroup = true
"
        )
    );
    n.step("containerd-nvidia", "config-check", false).ok();
    n.step("containerd-nvidia", "uninstall", false).ok();
    assert_eq!(n.t.read(CONFIG), V3);
}

#[test]
fn a_missing_config_is_created_and_version_1_refused() {
    let n = node(None, "set_as_default=false\n");
    n.step("containerd-nvidia", "config", false).ok();
    assert_eq!(
        n.t.read(CONFIG),
        "version = 2

[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]
privileged_without_host_devices = false
runtime_engine = \"\"
runtime_root = \"\"
runtime_type = \"io.containerd.runc.v2\"

[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]
BinaryName = \"/usr/bin/nvidia-container-runtime\"
"
    );

    let old = node(Some("[plugins.cri]\n"), "");
    old.step("containerd-nvidia", "config", false).assert_error_has(
        "/etc/containerd/config.toml: no version (containerd config version 1) is not supported",
        "version 1",
    );
    let bad = node(Some(V2), "runtime=nvidia\n");
    assert!(
        bad.step("containerd-nvidia", "config", false)
            .error()
            .contains("containerd.conf: unknown key runtime"),
    );
}

#[test]
fn check_fails_after_a_hand_edit_and_reads_containerd_config_dump() {
    let n = node(Some(V2), DEFAULT_CONF);
    n.step("containerd-nvidia", "config", false).ok();
    // containerd itself: `config dump` prints the file (the stub logs its argv).
    n.t.stub(
        "containerd",
        "while IFS= read -r l; do echo \"$l\"; done < /etc/containerd/config.toml",
    );
    n.step("containerd-nvidia", "config-check", false).ok();
    assert!(
        n.calls()
            .contains(&"containerd --config /etc/containerd/config.toml config dump".to_string()),
        "{:?}",
        n.calls()
    );
    let edited = n.t.read(CONFIG).replace(
        "BinaryName = \"/usr/bin/nvidia-container-runtime\"",
        "BinaryName = \"/opt/x\"",
    );
    n.t.file(CONFIG, &edited);
    let r = n.step("containerd-nvidia", "config-check", false);
    assert_eq!(
        r.error(),
        "stdlib/containerd.rhai:327:5: containerd config-check: 1 problem(s), first: /etc/containerd/config.toml: runtime nvidia options.BinaryName is /opt/x, expected /usr/bin/nvidia-container-runtime",
    );
    assert!(
        r.stderr.contains(
            "ERROR: /etc/containerd/config.toml: runtime nvidia options.BinaryName is /opt/x, expected /usr/bin/nvidia-container-runtime"
        ),
        "{}",
        r.stderr
    );
}
