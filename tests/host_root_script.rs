//! `scripts/make-host-root.sh`, the throwaway host root of the demos and benches: its
//! `/dev/null` is the null device, so a command writing there inside the root changes
//! nothing, run after run.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::Command;

use crate::util::tree;

fn make_host_root(dir: &Path) {
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/make-host-root.sh"))
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stderr, b"", "{}", String::from_utf8_lossy(&out.stderr));
}

/// `(char device, major:minor, mode, inode)` of `<root>/dev/null`.
fn dev_null(root: &Path) -> (bool, u64, u32, u64) {
    let m = std::fs::symlink_metadata(root.join("dev/null")).unwrap();
    (
        m.file_type().is_char_device(),
        m.rdev(),
        m.mode() & 0o7777,
        m.ino(),
    )
}

/// A stub that writes to `/dev/null`, run twice by `skyhook-run --apply` in a root made by the
/// script, leaves the root as it was: `/dev/null` is the null device (1:3, mode 0666), not a
/// regular file the first run creates. The root had an empty `/dev` before, as a root where
/// something made `/dev` has. A second run of the script keeps the device as it is.
#[test]
fn a_stub_writing_to_dev_null_in_a_made_root_is_idempotent() {
    require_root!();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(root.join("dev")).unwrap();
    make_host_root(&root);
    let null = dev_null(&root);
    assert_eq!(
        (null.0, null.1, null.2),
        (true, nix::sys::stat::makedev(1, 3), 0o666)
    );
    std::fs::write(
        root.join("usr/local/bin/nvidia-smi"),
        "#!/bin/sh\necho 'GPU 0: stub' > /dev/null 2>&1\n",
    )
    .unwrap();
    std::fs::set_permissions(
        root.join("usr/local/bin/nvidia-smi"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let script = tmp.path().join("probe.rhai");
    std::fs::write(
        &script,
        "run([\"nvidia-smi\", \"-L\"]);\nsh(\"nvidia-smi -L > /dev/null 2>&1\");\n",
    )
    .unwrap();
    let before = tree(&root);
    for run in 1..=2 {
        let out = Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            .arg(&script)
            .arg("--root")
            .arg(&root)
            .arg("--apply")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "run {run}: {out:?}");
        let after = tree(&root);
        let new: Vec<&String> = after.iter().filter(|l| !before.contains(l)).collect();
        let gone: Vec<&String> = before.iter().filter(|l| !after.contains(l)).collect();
        assert!(
            new.is_empty() && gone.is_empty(),
            "run {run} changed the root: now {new:?}, was {gone:?}"
        );
    }
    make_host_root(&root);
    assert_eq!(dev_null(&root), null);
}
