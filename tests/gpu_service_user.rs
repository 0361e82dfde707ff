//! The example package `examples/gpu-service-user` through `skyhook-run` on a fake node
//! root: the plan (every account file's diff, the root untouched), the apply (exact entries,
//! modes and owners), a clean second plan, a passing check, and a failing check after the
//! user was deleted by hand.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// 2025-12-01T00:00:00Z: new shadow entries get lastchg 20423.
const EPOCH: &str = "SOURCE_DATE_EPOCH=1764547200";

const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
                      systemd-network:x:998:998:systemd Network Management:/:/usr/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nsudo:x:27:\nshadow:x:42:\nsystemd-network:x:998:\n";
const SHADOW: &str = "root:*:19000:0:99999:7:::\nsystemd-network:!*:19000::::::\n";
const GSHADOW: &str = "root:*::\nsudo:*::\nshadow:*::\nsystemd-network:!::\n";

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// An Ubuntu node: the account files (shadow files 0640 root:shadow), 0 hugepages.
fn node_root() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    write(
        r,
        "etc/os-release",
        "ID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"24.04\"\n",
    );
    write(r, "etc/passwd", PASSWD);
    write(r, "etc/group", GROUP);
    write(r, "etc/shadow", SHADOW);
    write(r, "etc/gshadow", GSHADOW);
    for f in ["etc/shadow", "etc/gshadow"] {
        std::fs::set_permissions(r.join(f), std::fs::Permissions::from_mode(0o640)).unwrap();
        std::os::unix::fs::chown(r.join(f), Some(0), Some(42)).unwrap();
    }
    write(
        r,
        "etc/login.defs",
        "UID_MIN 1000\nUID_MAX 60000\nHOME_MODE 0750\n",
    );
    write(r, "proc/sys/vm/nr_hugepages", "0\n");
    write(r, "proc/sys/kernel/osrelease", "6.8.0\n");
    std::fs::create_dir_all(r.join("var/lib")).unwrap();
    d
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

/// Every entry under `root` with kind, mode, owner, mtime and content.
fn tree(root: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let content = if m.is_file() {
                format!("{:?}", std::fs::read(&p).unwrap())
            } else {
                String::new()
            };
            out.push(format!(
                "{} {:o} {}:{} {}.{} {content}",
                p.strip_prefix(base).unwrap().display(),
                m.mode(),
                m.uid(),
                m.gid(),
                m.mtime(),
                m.mtime_nsec()
            ));
            if m.is_dir() {
                walk(base, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

fn meta(root: &Path, rel: &str) -> (u32, u32, u32) {
    let m = std::fs::metadata(root.join(rel)).unwrap();
    (m.mode() & 0o7777, m.uid(), m.gid())
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap()
}

const USER_LINE: &str = "gpuops:x:997:997:GPU operations:/var/lib/gpuops:/usr/sbin/nologin";

#[test]
fn plan_apply_clean_replan_and_check_after_a_manual_userdel() {
    require_root!();
    let node = node_root();
    let root = node.path();
    let before = tree(root);

    // the plan: every file's diff, nothing touched
    let out = skyhook_run(root, &["--mode", "apply", "--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let plan = lines(&out);
    for line in [
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
        "INFO: gpu-service-user: 9 change(s)",
        "Plan: 9 to change, 0 unchanged.",
    ] {
        assert!(
            plan.iter().any(|l| l == line),
            "missing {line:?} in\n{plan:#?}"
        );
    }
    assert_eq!(tree(root), before, "the plan changed the root");

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
    assert_eq!(meta(root, "etc/.pwd.lock").0, 0o600);

    // a second plan has nothing to do, and the check passes
    let out = skyhook_run(root, &["--mode", "apply", "--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        lines(&out).last().map(String::as_str),
        Some("Plan: 0 to change, 5 unchanged.")
    );
    let out = skyhook_run(root, &["--mode", "apply-check"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).ends_with("Plan: 0 to change, 5 unchanged.\n"),
        "{out:?}"
    );

    // `userdel gpuops` by hand: its passwd, shadow, group and gshadow entries are gone; the
    // check fails with the four files as drift and changes nothing
    std::fs::write(root.join("etc/passwd"), PASSWD).unwrap();
    std::fs::write(root.join("etc/group"), GROUP).unwrap();
    std::fs::write(root.join("etc/shadow"), SHADOW).unwrap();
    std::fs::write(root.join("etc/gshadow"), GSHADOW).unwrap();
    let deleted = tree(root);
    let out = skyhook_run(root, &["--mode", "apply-check"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let check = lines(&out);
    for line in [
        "~ update /etc/group",
        "~ update /etc/gshadow",
        "~ update /etc/passwd",
        &format!("+{USER_LINE}"),
        "~ update /etc/shadow",
        "failed: 4 pending change(s)",
        "Plan: 4 to change, 3 unchanged.",
    ] {
        assert!(
            check.iter().any(|l| l == line),
            "missing {line:?} in\n{check:#?}"
        );
    }
    assert_eq!(tree(root), deleted, "the check changed the root");

    // the next apply repairs exactly that
    let out = skyhook_run(root, &["--mode", "apply", "--apply"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(read(root, "etc/passwd"), format!("{PASSWD}{USER_LINE}\n"));
    let out = skyhook_run(root, &["--mode", "apply-check"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).ends_with("Plan: 0 to change, 5 unchanged.\n"),
        "{out:?}"
    );
}

/// Two `skyhook-run --apply` processes adding different users to the same account files at
/// the same time lose none (the path locks and the fcntl lock on `/etc/.pwd.lock` serialize
/// their read-compare-writes across processes).
#[test]
fn two_processes_adding_users_lose_none() {
    require_root!();
    let node = node_root();
    let root = node.path();
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
