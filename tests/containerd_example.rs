//! The `examples/containerd-nvidia` package through `skyhook-run`: plan, apply, a clean
//! second plan, and a check that fails after the runtime entry is edited by hand.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn skyhook_run() -> Command {
    Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
}

fn manifest(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const CONFIG: &str = "# containerd config\nversion = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\"\n\n  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n    runtime_type = \"io.containerd.runc.v2\"\n";

const CONFIGURED: &str = "# containerd config\nversion = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"nvidia\"\n\n  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n    runtime_type = \"io.containerd.runc.v2\"\n\n  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n    runtime_type = \"io.containerd.runc.v2\"\n\n    [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\n      BinaryName = \"/usr/bin/nvidia-container-runtime\"\n";

fn run(step: &str, root: &Path, extra: &[&str]) -> Output {
    skyhook_run()
        .arg(manifest(&format!(
            "examples/containerd-nvidia/skyhook_dir/{step}.rhai"
        )))
        .arg("--root")
        .arg(root)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn containerd_example_plan_apply_check() {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("etc/containerd/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, CONFIG).unwrap();

    let plan = run("config", root.path(), &[]);
    assert_eq!(plan.status.code(), Some(0), "{plan:?}");
    let out = text(&plan.stdout);
    assert!(
        out.contains("+  default_runtime_name = \"nvidia\"\n"),
        "{out}"
    );
    assert!(out.ends_with("Plan: 3 to change, 1 unchanged.\n"), "{out}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), CONFIG);

    let apply = run("config", root.path(), &["--apply"]);
    assert_eq!(apply.status.code(), Some(0), "{apply:?}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), CONFIGURED);

    let again = run("config", root.path(), &[]);
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    assert!(
        text(&again.stdout).ends_with("Plan: 0 to change, 2 unchanged.\n"),
        "{}",
        text(&again.stdout)
    );
    let check = run("config_check", root.path(), &["--mode", "config-check"]);
    assert_eq!(check.status.code(), Some(0), "{check:?}");

    std::fs::write(
        &config,
        CONFIGURED.replace("/usr/bin/nvidia-container-runtime", "/usr/bin/runc"),
    )
    .unwrap();
    let check = run("config_check", root.path(), &["--mode", "config-check"]);
    assert_eq!(check.status.code(), Some(1), "{check:?}");
    assert!(
        text(&check.stderr).contains(
            "ERROR: /etc/containerd/config.toml: runtime nvidia options.BinaryName is /usr/bin/runc, expected /usr/bin/nvidia-container-runtime"
        ),
        "{}",
        text(&check.stderr)
    );
}

#[test]
fn containerd_example_package_plan_declares_the_restart() {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("etc/containerd/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, "version = 2\n").unwrap();
    let out = skyhook_run()
        .arg("--package")
        .arg(manifest("examples/containerd-nvidia"))
        .args(["--mode", "config", "--root"])
        .arg(root.path())
        .arg("--skyhook-cr")
        .arg(manifest("examples/containerd-nvidia/skyhook.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = text(&out.stdout);
    for line in [
        "+[plugins.\"io.containerd.grpc.v1.cri\".containerd]",
        "+default_runtime_name = \"nvidia\"",
        "+BinaryName = \"/usr/bin/nvidia-container-runtime\"",
        "note: config.rhai: requested interrupt restart_services [containerd] is declared in the Skyhook CR (interrupt (type: service, services: [containerd])): the operator runs it in its interrupt stage",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing {line:?} in\n{stdout}"
        );
    }
    assert!(
        stdout.ends_with("Plan: 3 to change, 1 unchanged.\n"),
        "{stdout}"
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "version = 2\n");
    assert!(!root.path().join("var").exists());
}
