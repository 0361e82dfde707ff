//! The example package `examples/gpu-service-user` through `skyhook-run` on a fake node
//! root (tests/util.rs [`FakeRoot`], so the chrooted `mount` stub has a shell): the plan
//! (every account file's diff, the fstab line and the mount; the root untouched), the apply
//! (exact entries, modes and owners, the fstab line, the recorded `mount` argv), a clean
//! second plan, a passing check, a failing check after the filesystem was unmounted by hand
//! and after the user was deleted by hand, each repaired by the next apply; and the step
//! failing before any change when the configMap has no `nvme-uuid`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{FakeRoot, tree};

/// 2025-12-01T00:00:00Z: new shadow entries get lastchg 20423.
const EPOCH: &str = "SOURCE_DATE_EPOCH=1764547200";

const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
                      systemd-network:x:998:998:systemd Network Management:/:/usr/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nsudo:x:27:\nshadow:x:42:\nsystemd-network:x:998:\n";
const SHADOW: &str = "root:*:19000:0:99999:7:::\nsystemd-network:!*:19000::::::\n";
const GSHADOW: &str = "root:*::\nsudo:*::\nshadow:*::\nsystemd-network:!::\n";

/// The package's `configmaps/nvme-uuid`.
const UUID: &str = "2f1c9a4e-6b1d-4c57-9a7e-3d6f0b8e5a21";
/// The fstab line apply.rhai keeps.
const FSTAB_LINE: &str =
    "UUID=2f1c9a4e-6b1d-4c57-9a7e-3d6f0b8e5a21 /data/nvme xfs defaults,nofail,noatime 0 2";
/// The node's fstab before the package: the root filesystem.
const FSTAB: &str = "# /etc/fstab: static file system information.\n\
                     UUID=0a6b8c1d-1111-4222-8333-944455556666 / ext4 errors=remount-ro 0 1\n";
/// The host init's mount table before the package: the root filesystem only.
const MOUNTINFO: &str =
    "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro\n";
/// The line the `mount` stub adds for `mount /data/nvme`.
const NVME_MOUNTINFO: &str =
    "101 22 259:3 / /data/nvme rw,noatime shared:57 - xfs /dev/nvme1n1 rw,attr2,inode64,noquota";

/// `mount` on the node: records its argv in `/t/calls`; `mount /data/nvme` (and only that
/// form: not `-o remount`) adds the filesystem to the host init's mount table.
const MOUNT_STUB: &str = "#!/bin/sh\n\
echo \"mount $*\" >> /t/calls\n\
if [ \"$#\" = 1 ] && [ \"$1\" = /data/nvme ]; then\n\
  echo '101 22 259:3 / /data/nvme rw,noatime shared:57 - xfs /dev/nvme1n1 rw,attr2,inode64,noquota' >> /proc/1/mountinfo\n\
fi\n";

/// An Ubuntu node: the account files (shadow files 0640 root:shadow), 0 hugepages, the root
/// filesystem in fstab and the mount table, the NVMe disk `/dev/nvme1n1` with its
/// `/dev/disk/by-uuid` link, and a recording `mount`.
fn node_root() -> FakeRoot {
    let fr = FakeRoot::new();
    fr.write(
        "/etc/os-release",
        "ID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"24.04\"\n",
    );
    fr.write("/etc/passwd", PASSWD);
    fr.write("/etc/group", GROUP);
    fr.write_mode("/etc/shadow", SHADOW, 0o640);
    fr.write_mode("/etc/gshadow", GSHADOW, 0o640);
    for f in ["/etc/shadow", "/etc/gshadow"] {
        std::os::unix::fs::chown(fr.host(f), Some(0), Some(42)).unwrap();
    }
    fr.write(
        "/etc/login.defs",
        "UID_MIN 1000\nUID_MAX 60000\nHOME_MODE 0750\n",
    );
    fr.write("/etc/fstab", FSTAB);
    fr.write("/proc/sys/vm/nr_hugepages", "0\n");
    fr.write("/proc/sys/kernel/osrelease", "6.8.0\n");
    fr.write("/proc/1/mountinfo", MOUNTINFO);
    fr.write("/dev/nvme1n1", "");
    std::fs::create_dir_all(fr.host("/dev/disk/by-uuid")).unwrap();
    std::os::unix::fs::symlink(
        "../../nvme1n1",
        fr.host(&format!("/dev/disk/by-uuid/{UUID}")),
    )
    .unwrap();
    fr.write_mode("/usr/bin/mount", MOUNT_STUB, 0o755);
    std::fs::create_dir_all(fr.host("/var/lib")).unwrap();
    fr
}

fn package() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gpu-service-user")
}

fn skyhook_run(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
        .arg("--package")
        .arg(package())
        .args(args)
        .args(["--env", EPOCH, "--root"])
        .arg(root)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

/// The lines of a plan without their `  # file:line` positions.
fn lines(out: &Output) -> Vec<String> {
    text(&out.stdout)
        .lines()
        .map(|l| l.split_once("  # ").map_or(l, |(l, _)| l).to_string())
        .collect()
}

fn meta(root: &Path, rel: &str) -> (u32, u32, u32) {
    let m = std::fs::metadata(root.join(rel)).unwrap();
    (m.mode() & 0o7777, m.uid(), m.gid())
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap()
}

const USER_LINE: &str = "gpuops:x:997:997:GPU operations:/var/lib/gpuops:/usr/sbin/nologin";

/// Assert every one of `want` is a line of `got`.
#[track_caller]
fn has_lines(got: &[String], want: &[&str]) {
    for line in want {
        assert!(
            got.iter().any(|l| l == line),
            "missing {line:?} in\n{got:#?}"
        );
    }
}

#[test]
fn plan_apply_clean_replan_and_checks_after_a_manual_umount_and_userdel() {
    require_root!();
    let node = node_root();
    let root = node.root();
    let before = tree(root);

    // the plan: every file's diff, the fstab line, the mount and the chown; nothing touched
    let out = skyhook_run(root, &["--mode", "apply", "--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let plan = lines(&out);
    has_lines(
        &plan,
        &[
            "==> step apply: apply.rhai",
            "~ update /etc/group",
            "+gpuops:x:997:",
            "~ update /etc/gshadow",
            "+gpuops:!::",
            "~ update /etc/passwd",
            &format!("+{USER_LINE}"),
            "~ update /etc/shadow",
            "+gpuops:!:20423::::::",
            "~ create directory /var/lib/gpuops (mode 0750)",
            "~ chown /var/lib/gpuops 0:0 -> 997:997",
            "+ mkdir /etc/sudoers.d",
            "~ create /etc/sudoers.d/gpuops (mode 0440) (owner 0:0)",
            "+gpuops ALL=(root) NOPASSWD: /usr/bin/nvidia-smi",
            "~ sysctl vm.nr_hugepages = 1024 (was 0)",
            "~ create /etc/sysctl.d/90-gpu-service-user.conf (mode 0644)",
            "+vm.nr_hugepages = 1024",
            "~ update /etc/fstab",
            &format!("+{FSTAB_LINE}"),
            "+ mkdir /data",
            "~ create directory /data/nvme (mode 0755)",
            "~ mount /data/nvme",
            "~ chown /data/nvme 0:0 -> 997:997",
            "INFO: gpu-service-user: 13 change(s)",
            "Plan: 13 to change, 0 unchanged.",
        ],
    );
    // the mount comes before the chown of its mount point
    let at = |l: &str| plan.iter().position(|p| p == l).unwrap();
    assert!(at("~ mount /data/nvme") < at("~ chown /data/nvme 0:0 -> 997:997"));
    assert_eq!(tree(root), before, "the plan changed the root");
    assert_eq!(node.calls(), None, "the plan ran a command");

    // the apply
    let out = skyhook_run(root, &["--mode", "apply", "--apply"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(read(root, "etc/passwd"), format!("{PASSWD}{USER_LINE}\n"));
    assert_eq!(read(root, "etc/group"), format!("{GROUP}gpuops:x:997:\n"));
    assert_eq!(
        read(root, "etc/shadow"),
        format!("{SHADOW}gpuops:!:20423::::::\n")
    );
    assert_eq!(read(root, "etc/gshadow"), format!("{GSHADOW}gpuops:!::\n"));
    assert_eq!(meta(root, "etc/shadow"), (0o640, 0, 42));
    assert_eq!(meta(root, "etc/gshadow"), (0o640, 0, 42));
    assert_eq!(meta(root, "var/lib/gpuops"), (0o750, 997, 997));
    assert_eq!(
        read(root, "etc/sudoers.d/gpuops"),
        "gpuops ALL=(root) NOPASSWD: /usr/bin/nvidia-smi\n"
    );
    assert_eq!(meta(root, "etc/sudoers.d/gpuops"), (0o440, 0, 0));
    assert_eq!(read(root, "proc/sys/vm/nr_hugepages"), "1024\n");
    assert_eq!(
        read(root, "etc/sysctl.d/90-gpu-service-user.conf"),
        "vm.nr_hugepages = 1024\n"
    );
    // The shadow-utils lock file the edit made is not left behind.
    assert!(!root.join("etc/.pwd.lock").exists());
    assert_eq!(read(root, "etc/fstab"), format!("{FSTAB}{FSTAB_LINE}\n"));
    assert_eq!(node.calls().as_deref(), Some("mount /data/nvme\n"));
    assert_eq!(
        read(root, "proc/1/mountinfo"),
        format!("{MOUNTINFO}{NVME_MOUNTINFO}\n")
    );
    assert_eq!(meta(root, "data/nvme"), (0o755, 997, 997));

    // a second plan has nothing to do, and the check passes
    let clean = "Plan: 0 to change, 9 unchanged.";
    let out = skyhook_run(root, &["--mode", "apply", "--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(lines(&out).last().map(String::as_str), Some(clean));
    let out = skyhook_run(root, &["--mode", "apply-check"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).ends_with(&format!("{clean}\n")),
        "{out:?}"
    );

    // `umount /data/nvme` by hand: the host's mount table no longer lists it; the check
    // fails with the mount as the only drift and changes nothing
    std::fs::write(root.join("proc/1/mountinfo"), MOUNTINFO).unwrap();
    let unmounted = tree(root);
    let out = skyhook_run(root, &["--mode", "apply-check"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let check = lines(&out);
    has_lines(
        &check,
        &[
            "~ mount /data/nvme",
            "failed: 1 pending change(s)",
            "Plan: 1 to change, 8 unchanged.",
        ],
    );
    assert_eq!(
        check.iter().filter(|l| l.starts_with("~ ")).count(),
        1,
        "{check:#?}"
    );
    assert_eq!(tree(root), unmounted, "the check changed the root");
    assert_eq!(node.calls().as_deref(), Some("mount /data/nvme\n"));
    // the next apply mounts it again, and only that
    let out = skyhook_run(root, &["--mode", "apply", "--apply"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        node.calls().as_deref(),
        Some("mount /data/nvme\nmount /data/nvme\n")
    );
    assert_eq!(read(root, "etc/fstab"), format!("{FSTAB}{FSTAB_LINE}\n"));
    let out = skyhook_run(root, &["--mode", "apply-check"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    // `userdel gpuops` by hand: its passwd, shadow, group and gshadow entries are gone; the
    // check fails with the four files as drift and changes nothing
    std::fs::write(root.join("etc/passwd"), PASSWD).unwrap();
    std::fs::write(root.join("etc/group"), GROUP).unwrap();
    std::fs::write(root.join("etc/shadow"), SHADOW).unwrap();
    std::fs::write(root.join("etc/gshadow"), GSHADOW).unwrap();
    let deleted = tree(root);
    let out = skyhook_run(root, &["--mode", "apply-check"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    has_lines(
        &lines(&out),
        &[
            "~ update /etc/group",
            "~ update /etc/gshadow",
            "~ update /etc/passwd",
            &format!("+{USER_LINE}"),
            "~ update /etc/shadow",
            "failed: 4 pending change(s)",
            "Plan: 4 to change, 7 unchanged.",
        ],
    );
    assert_eq!(tree(root), deleted, "the check changed the root");

    // the next apply repairs exactly that
    let out = skyhook_run(root, &["--mode", "apply", "--apply"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(read(root, "etc/passwd"), format!("{PASSWD}{USER_LINE}\n"));
    let out = skyhook_run(root, &["--mode", "apply-check"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).ends_with(&format!("{clean}\n")),
        "{out:?}"
    );

    // the uninstall plan unmounts and drops the fstab line (the root filesystem's is kept)
    let out = skyhook_run(root, &["--mode", "uninstall", "--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    has_lines(
        &lines(&out),
        &[
            "~ umount /data/nvme",
            "~ update /etc/fstab",
            &format!("-{FSTAB_LINE}"),
        ],
    );
}

/// A configMap without `nvme-uuid`: the plan and the apply fail naming the key, before any
/// change.
#[test]
fn a_missing_nvme_uuid_fails_naming_the_configmap_key() {
    require_root!();
    let node = node_root();
    let root = node.root();
    let cm = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
            .arg("--package")
            .arg(package())
            .args(["--mode", "apply", "--configmaps"])
            .arg(cm.path())
            .args(args)
            .arg("--root")
            .arg(root)
            .output()
            .unwrap()
    };
    let message = "gpu-service-user: configMap key nvme-uuid is missing: set it to the UUID of the node's NVMe scratch filesystem (blkid -s UUID -o value /dev/nvme1n1)";
    let before = tree(root);
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        lines(&out),
        [
            "==> step apply: apply.rhai".to_string(),
            format!(
                "failed: {}:25:5: {message}",
                package().join("skyhook_dir/apply.rhai").display()
            ),
            "Plan: 0 to change, 0 unchanged.".to_string(),
        ]
    );
    assert_eq!(tree(root), before, "the plan changed the root");

    // The apply's preflight plans the step on the package directory before anything is
    // copied: the message at the author's file; no account file, fstab or mount was touched.
    let out = run(&["--apply"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains(&format!(
            "{}:25:5: {message}\n",
            package().join("skyhook_dir/apply.rhai").display()
        )),
        "{out:?}"
    );
    assert_eq!(read(root, "etc/passwd"), PASSWD);
    assert_eq!(read(root, "etc/fstab"), FSTAB);
    assert_eq!(read(root, "proc/1/mountinfo"), MOUNTINFO);
    assert!(!root.join("data").exists());
    assert_eq!(node.calls(), None);
    assert_eq!(tree(root), before, "the refused apply changed the root");
}

/// Two `skyhook-run --apply` processes adding different users to the same account files at
/// the same time lose none (the path locks and the fcntl lock on `/etc/.pwd.lock` serialize
/// their read-compare-writes across processes).
#[test]
fn two_processes_adding_users_lose_none() {
    require_root!();
    let node = node_root();
    let root = node.root();
    let scripts = tempfile::tempdir().unwrap();
    for p in ["a", "b"] {
        std::fs::write(
            scripts.path().join(format!("{p}.rhai")),
            format!(
                "for i in 0..12 {{ user::ensure(`{p}${{i}}`, #{{groups: \"sudo\", create_home: false}}); }}\n"
            ),
        )
        .unwrap();
    }
    // Both started before either is waited for.
    let spawned: Vec<_> = ["a", "b"]
        .iter()
        .map(|p| {
            Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
                .arg(scripts.path().join(format!("{p}.rhai")))
                .args(["--apply", "--env", EPOCH, "--root"])
                .arg(root)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in spawned {
        let out = c.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    let passwd = read(root, "etc/passwd");
    let shadow = read(root, "etc/shadow");
    let group = read(root, "etc/group");
    for p in ["a", "b"] {
        for i in 0..12 {
            let n = format!("{p}{i}");
            assert!(passwd.contains(&format!("\n{n}:x:")), "{n} lost:\n{passwd}");
            assert!(
                shadow.contains(&format!("\n{n}:!:20423:")),
                "{n} lost:\n{shadow}"
            );
            assert!(group.contains(&format!("\n{n}:x:")), "{n} lost:\n{group}");
        }
    }
    assert_eq!(passwd.lines().count(), 2 + 24);
    let sudo = group.lines().find(|l| l.starts_with("sudo:")).unwrap();
    assert_eq!(sudo.split(':').nth(3).unwrap().split(',').count(), 24);
}
