//! `examples/nouveau-blacklist` through `skyhook-run` on a fake root: the package plan, the
//! agent's apply flow (chrooted, a recording `update-initramfs`), a clean second plan, and
//! the apply-check failing after the module options file is edited by hand.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::FakeRoot;

fn skyhook_run() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_skyhook-run"));
    c.env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    c
}

fn manifest(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

fn stdout_of(out: &Output) -> String {
    text(&out.stdout)
}

#[test]
fn nouveau_blacklist_example_plan_apply_clean_plan_and_check() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write("/etc/os-release", "ID=ubuntu\nID_LIKE=debian\n");
    fr.stub("/usr/sbin", "update-initramfs", "/t/calls", &[]);
    let pkg = manifest("examples/nouveau-blacklist");
    let cr = pkg.join("skyhook.yaml");
    let script = pkg.join("skyhook_dir/apply.rhai");

    // The package plan: every file, the one regeneration, the declared reboot; nothing
    // written.
    let out = skyhook_run()
        .arg("--package")
        .arg(&pkg)
        .args(["--mode", "apply", "--detailed-exitcode", "--root"])
        .arg(fr.root())
        .arg("--skyhook-cr")
        .arg(&cr)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let plan = stdout_of(&out);
    for line in [
        "~ create /etc/modprobe.d/blacklist-nouveau.conf (mode 0644)",
        "+blacklist nouveau",
        "+install nouveau /bin/false",
        "~ create /etc/modprobe.d/nouveau.conf (mode 0644)",
        "+options nouveau modeset=0",
        "~ create /etc/modules-load.d/nvidia.conf (mode 0644)",
        "+nvidia_modeset",
        "! interrupt: reboot",
        "> would run: update-initramfs -u",
    ] {
        assert!(
            plan.lines()
                .any(|l| l.split_once("  # ").map_or(l, |(l, _pos)| l) == line),
            "missing {line:?} in\n{plan}"
        );
    }
    assert!(
        plan.ends_with("\nPlan: 6 to change, 0 unchanged, 1 action.\n"),
        "{plan}"
    );
    assert_eq!(fr.read_opt("/etc/modprobe.d/nouveau.conf"), None);
    assert_eq!(fr.calls(), None);
    // The same plan as JSON follows docs/plan.schema.json (the new kinds included).
    let out = skyhook_run()
        .arg("--package")
        .arg(&pkg)
        .args(["--mode", "apply", "--output", "json", "--root"])
        .arg(fr.root())
        .arg("--skyhook-cr")
        .arg(&cr)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(manifest("docs/plan.schema.json")).unwrap())
            .unwrap();
    let validator = jsonschema::draft202012::options().build(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let actions = &v["steps"][0]["result"]["actions"];
    assert_eq!(actions[0]["kind"], "initramfs_update", "{v:#}");
    assert_eq!(actions[0]["summary"], "update-initramfs -u");

    // Apply through the agent's flow.
    let out = skyhook_run()
        .arg("--package")
        .arg(&pkg)
        .args(["--mode", "apply", "--apply", "--root"])
        .arg(fr.root())
        .arg("--skyhook-cr")
        .arg(&cr)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        fr.read("/etc/modprobe.d/blacklist-nouveau.conf"),
        "blacklist nouveau\ninstall nouveau /bin/false\n"
    );
    assert_eq!(
        fr.read("/etc/modprobe.d/nouveau.conf"),
        "options nouveau modeset=0\n"
    );
    assert_eq!(
        fr.read("/etc/modules-load.d/nvidia.conf"),
        "nvidia\nnvidia_uvm\nnvidia_drm\nnvidia_modeset\n"
    );
    assert_eq!(fr.calls().as_deref(), Some("update-initramfs -u\n"));
    assert_eq!(
        fr.read_opt("/var/lib/skyhook/.deferred/initramfs.json"),
        None
    );

    // A second plan of the step finds nothing to do (and requests no reboot).
    let out = skyhook_run()
        .arg(&script)
        .args(["--detailed-exitcode", "--root"])
        .arg(fr.root())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        stdout_of(&out).ends_with("Plan: 0 to change, 6 unchanged.\n"),
        "{}",
        stdout_of(&out)
    );
    // The apply-check passes, then fails once the options line is edited by hand.
    let check = || {
        skyhook_run()
            .arg(&script)
            .args(["--mode", "apply-check", "--root"])
            .arg(fr.root())
            .output()
            .unwrap()
    };
    let out = check();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    fr.write(
        "/etc/modprobe.d/nouveau.conf",
        "options nouveau modeset=1\n",
    );
    let out = check();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let report = stdout_of(&out);
    assert!(
        report.contains("-options nouveau modeset=1\n+options nouveau modeset=0\n"),
        "{report}"
    );
    assert_eq!(
        fr.read("/etc/modprobe.d/nouveau.conf"),
        "options nouveau modeset=1\n"
    );
    assert_eq!(fr.calls().as_deref(), Some("update-initramfs -u\n"));
}
