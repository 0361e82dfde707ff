//! The Rhai ports of the public GPU-node packages (`examples/nvidia-*`) run by the agent on
//! the fake GPU-node hosts of `tests/fakehosts` (README there): every stage the operator
//! runs, a second run that changes nothing, drift caught by the check, a clear failure for a
//! bad configMap, and an uninstall back to the starting files.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::util::{FakeRoot, Run, T, tree};

/// Every host layer of `tests/fakehosts`.
pub(crate) const HOSTS: &[&str] = &[
    "ubuntu-24.04-eks-x86_64",
    "ubuntu-24.04-eks-arm64",
    "ubuntu-22.04",
    "amazon-linux-2023",
    "cos-117",
];

/// Tools the host layers' stubs use, copied from this machine into the root.
pub(crate) const STUB_TOOLS: &[&str] = &[
    "sed", "grep", "ln", "basename", "dirname", "cut", "sort", "find", "xargs", "wc", "readlink",
    "tail", "mknod",
];

pub(crate) fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Copy `src` over `dst`, replacing files (never writing through the template's hard links).
pub(crate) fn overlay(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    for e in fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            overlay(&e.path(), &to);
        } else {
            let _ = fs::remove_file(&to);
            fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// Turn back into symlinks the layers' links that their snapshot flattened into small files
/// holding the target: `usr/local/bin/apt-get` (`apt`), the units enabled in
/// `etc/systemd/system/*.wants/` (an absolute unit path) and `proc/sys/kernel/{osrelease,arch}`
/// (`/usr/share/fakehost/{kernel-release,machine}`, which the fake reboot switches).
/// `dev/disk/by-id` is left to [`realistic_block_devices`].
fn relink(root: &Path) {
    let mut dirs = vec![
        root.join("usr/local/bin"),
        root.join("usr/local/sbin"),
        root.join("proc/sys/kernel"),
    ];
    if let Ok(rd) = fs::read_dir(root.join("etc/systemd/system")) {
        dirs.extend(
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "wants")),
        );
    }
    for dir in dirs {
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let meta = e.metadata().unwrap();
            if !meta.is_file() || meta.len() > 200 || meta.permissions().mode() & 0o111 != 0 {
                continue;
            }
            let target = fs::read_to_string(e.path()).unwrap_or_default();
            let named = match target.strip_prefix('/') {
                Some(abs) => root.join(abs),
                None => dir.join(&target),
            };
            if target.is_empty() || target.contains(char::is_whitespace) || !named.is_file() {
                continue;
            }
            fs::remove_file(e.path()).unwrap();
            std::os::unix::fs::symlink(&target, e.path()).unwrap();
        }
    }
}

/// Host layer `host` of `tests/fakehosts` over a minimal root, as every test sees it: the
/// layer as it is, its flattened links made symlinks again ([`relink`]), and a real
/// `/dev/null` for its stubs to write to, as on a node.
pub(crate) fn fake_host(host: &str) -> FakeRoot {
    let fr = FakeRoot::with_tools(STUB_TOOLS);
    overlay(&manifest().join("tests/fakehosts").join(host), fr.root());
    relink(fr.root());
    let null = fr.host("/dev/null");
    fs::create_dir_all(null.parent().unwrap()).unwrap();
    let _ = fs::remove_file(&null);
    nix::sys::stat::mknod(
        &null,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
    fr
}

/// A fake GPU node: [`fake_host`] with the package `example` at `$T/pkg` and `configmaps`, the
/// agent's environment for `resource_id`.
pub(crate) fn node(
    host: &str,
    example: &str,
    configmaps: &[(&str, &str)],
    resource_id: &str,
) -> FakeRoot {
    let mut fr = fake_host(host);
    overlay(&manifest().join("examples").join(example), &fr.t("pkg"));
    for (k, v) in configmaps {
        fr.write(&format!("{T}/pkg/configmaps/{k}"), v);
    }
    fr.set_env("PATH", NODE_PATH);
    fr.set_env("SKYHOOK_RESOURCE_ID", resource_id);
    fr
}

/// What a real node always has, every layer has as the tests build it, with no addition of
/// the test's own: the running kernel and machine (`/proc/sys/kernel/{osrelease,arch}`, which
/// the fake reboot switches), the package query of its package manager (`dpkg-query`,
/// `rpm -q`) and `systemctl show`.
#[test]
fn every_layer_answers_as_a_node_does() {
    use skyhook::host::packages::pkg;
    use skyhook::host::root::HostRoot;
    use skyhook::host::services::service;
    use skyhook::host::system::os;
    use skyhook::host::{ExecMode, Host, HostOptions};
    require_root!();
    for host in HOSTS {
        let fr = fake_host(host);
        let session = |mode| {
            let o = HostOptions {
                env: vec![("PATH".into(), NODE_PATH.into())],
                ..HostOptions::default()
            };
            Host::new(HostRoot::open(fr.root()).unwrap(), mode, o)
        };
        let mut h = session(ExecMode::Check);
        let release = fr.read("/usr/share/fakehost/kernel-release");
        assert_eq!(
            os::kernel(&h).unwrap(),
            release.trim(),
            "{host}: os::kernel()"
        );
        let machine = fr.read("/usr/share/fakehost/machine");
        assert_eq!(os::arch(&h).unwrap(), machine.trim(), "{host}: os::arch()");
        let props = ["LimitSTACK".to_string(), "Description".to_string()];
        let shown = service::show(&mut h, "kubelet", &props).unwrap();
        assert_eq!(shown["LimitSTACK"], "infinity", "{host}: systemctl show");
        assert!(!shown["Description"].is_empty(), "{host}: {shown:?}");
        match os::family(&h).unwrap().as_str() {
            "debian" => {
                // The base image's kernel package, from the image's package list.
                let image = format!("linux-image-{}", release.trim());
                let v = pkg::version(&h, &image).unwrap();
                assert!(
                    v.is_some_and(|v| !v.is_empty()),
                    "{host}: dpkg-query {image}"
                );
            }
            "rhel" => {
                // A package the fake dnf installed, as rpm -q knows it.
                assert_eq!(pkg::version(&h, "tuned").unwrap(), None, "{host}");
                let mut h = session(ExecMode::Apply);
                assert!(pkg::install(&mut h, &["tuned".to_string()], false).unwrap());
                h.finish().unwrap();
                let h = session(ExecMode::Check);
                let v = pkg::version(&h, "tuned").unwrap();
                assert!(v.is_some_and(|v| !v.is_empty()), "{host}: rpm -q tuned");
            }
            other => assert_eq!(pkg::manager(&h).unwrap(), None, "{host}: {other}"),
        }
    }
}

/// The base64 of an interrupt payload.
pub(crate) fn payload(json: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(json)
}

/// `/etc` of the root: path, kind, content hash, mode and owner of every entry (no times:
/// a directory's mtime changes when an entry comes and goes).
pub(crate) fn etc(fr: &FakeRoot) -> Vec<String> {
    tree(&fr.host("/etc"))
        .into_iter()
        .map(|l| l.rsplit_once(' ').expect("mtime field").0.to_string())
        .collect()
}

/// The `PATH` of a node's agent.
pub(crate) const NODE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// [`etc`] without the agent's records under `/etc/skyhook`.
pub(crate) fn etc_but_skyhook(fr: &FakeRoot) -> Vec<String> {
    etc(fr)
        .into_iter()
        .filter(|l| !l.starts_with("skyhook"))
        .collect()
}

/// A second `config` on `host` succeeds saying `says` on stdout and leaves `/etc` as the
/// first left it.
#[track_caller]
pub(crate) fn config_again_changes_nothing(fr: &FakeRoot, host: &str, says: &str) {
    let after_first = etc(fr);
    let again = ok(fr.run("config"), &format!("{host}: config again"));
    assert!(again.stdout.contains(says), "{host}: {}", again.all());
    assert_eq!(etc(fr), after_first, "{host}: a second config changed /etc");
}

/// `skyhook-run --package $T/pkg --mode MODE --root R EXTRA` (a plan unless `extra` has
/// `--apply`) with a node's environment for package `resource_id` plus `env`: its exit code
/// (-1 when killed) and its stdout then stderr.
pub(crate) fn package_run(
    fr: &FakeRoot,
    resource_id: &str,
    mode: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
        .arg("--package")
        .arg(fr.t("pkg"))
        .args(["--mode", mode, "--root"])
        .arg(fr.root())
        .args(extra)
        .env_clear()
        .env("PATH", NODE_PATH)
        .env("SKYHOOK_RESOURCE_ID", resource_id)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[track_caller]
pub(crate) fn ok(run: Run, what: &str) -> Run {
    assert_eq!(run.code, 0, "{what}:\n{}", run.all());
    run
}

pub(crate) fn live(fr: &FakeRoot, key: &str) -> String {
    fr.read(&format!("/proc/sys/{}", key.replace('.', "/")))
        .trim()
        .to_string()
}

const GKE_ID: &str = "gke-0000-1_nvidia_tuning_gke_0.2.0";

/// The sysctl file and drop-in the gke port writes (named after the whole package name).
const GKE_SYSCTL: &str = "/etc/sysctl.d/999-nvidia_tuning_gke-tuning.conf";
const GKE_DROP_IN: &str =
    "/etc/systemd/system/containerd.service.d/999-nvidia_tuning_gke-tuning.conf";

/// nvidia-tuning-gke, gb200/inference with USE_CONTAINERD=true, on every host: the
/// operator's stages, idempotence, drift, uninstall back to the starting `/etc`.
#[test]
fn nvidia_tuning_gke_every_stage_on_every_host() {
    require_root!();
    for host in HOSTS {
        let mut fr = node(
            host,
            "nvidia-tuning-gke",
            &[("accelerator", "gb200\n"), ("intent", "inference\n")],
            GKE_ID,
        );
        fr.set_env("USE_CONTAINERD", "true");
        let before = etc(&fr);
        let what = |stage: &str| format!("{host}: {stage}");

        // The operator's order for a first install; apply and apply-check are not in the
        // package and succeed with a warning, as the bash package's do.
        ok(fr.run("apply"), &what("apply"));
        ok(fr.run("apply-check"), &what("apply-check"));
        let config = ok(fr.run("config"), &what("config"));
        assert!(
            config.stdout.contains(
                "tuning nvidia_tuning_gke: sysctl changed, ulimit unchanged, services changed, grub unchanged"
            ),
            "{host}: {}",
            config.all()
        );
        // kernel.sched_* are gone since 5.13 (none of the hosts has them): skipped, named.
        assert!(
            config
                .all()
                .contains("no such key \"kernel.sched_latency_ns\" in /proc/sys, skipped"),
            "{host}: {}",
            config.all()
        );
        assert_eq!(live(&fr, "vm.swappiness"), "1", "{host}");
        assert_eq!(live(&fr, "kernel.threads-max"), "16512444", "{host}");
        assert_eq!(live(&fr, "net.ipv4.conf.all.arp_ignore"), "1", "{host}");
        let persisted = fr.read(GKE_SYSCTL);
        assert!(
            persisted.contains("vm.min_free_kbytes = 65536\n"),
            "{persisted}"
        );
        assert!(!persisted.contains("sched_latency"), "{persisted}");
        assert_eq!(fr.read(GKE_DROP_IN), "[Service]\nLimitSTACK=67108864\n");
        ok(fr.run("config-check"), &what("config-check"));

        let restart = r#"{"type":"service_restart","services":["systemd-sysctl"]}"#;
        ok(fr.interrupt(&payload(restart)), &what("interrupt"));
        ok(fr.run("post-interrupt"), &what("post-interrupt"));
        ok(
            fr.run("post-interrupt-check"),
            &what("post-interrupt-check"),
        );

        // A second config changes nothing.
        config_again_changes_nothing(
            &fr,
            host,
            "sysctl unchanged, ulimit unchanged, services unchanged, grub unchanged",
        );

        // Drift: a live value changed behind the package's back.
        fs::write(fr.host("/proc/sys/vm/swappiness"), "60\n").unwrap();
        let drift = fr.run("config-check");
        assert_eq!(drift.code, 1, "{host}: {}", drift.all());
        assert!(
            drift
                .all()
                .contains("sysctl vm.swappiness is \"60\", expected \"1\""),
            "{host}: {}",
            drift.all()
        );
        ok(fr.run("config"), &what("config after drift"));
        assert_eq!(live(&fr, "vm.swappiness"), "1", "{host}");

        ok(fr.run("uninstall"), &what("uninstall"));
        ok(fr.run("uninstall-check"), &what("uninstall-check"));
        assert!(!fr.exists(GKE_SYSCTL), "{host}");
        assert!(
            !fr.exists("/etc/systemd/system/containerd.service.d"),
            "{host}"
        );
        assert_eq!(
            etc_but_skyhook(&fr),
            before,
            "{host}: uninstall left /etc different"
        );
    }
}

/// Switching profile (h100/inference → h100/multiNodeTraining) takes back what the old one
/// set and the new one does not; without USE_CONTAINERD the gb200 drop-in is not written
/// (and one written before is removed).
#[test]
fn nvidia_tuning_gke_profile_switch_and_containerd_switch() {
    require_root!();
    let mut fr = node(
        "cos-117",
        "nvidia-tuning-gke",
        &[("accelerator", "h100"), ("intent", "inference")],
        GKE_ID,
    );
    ok(fr.run("config"), "h100/inference");
    assert!(fr.read(GKE_SYSCTL).contains("vm.swappiness = 1\n"));
    fr.write(&format!("{T}/pkg/configmaps/intent"), "multiNodeTraining");
    ok(fr.run("config"), "h100/multiNodeTraining");
    let persisted = fr.read(GKE_SYSCTL);
    assert!(!persisted.contains("swappiness"), "{persisted}");
    assert!(
        persisted.contains("net.core.default_qdisc = fq\n"),
        "{persisted}"
    );
    assert_eq!(live(&fr, "net.core.default_qdisc"), "fq");
    ok(fr.run("config-check"), "check h100/multiNodeTraining");

    fr.write(&format!("{T}/pkg/configmaps/accelerator"), "gb200");
    fr.set_env("USE_CONTAINERD", "true");
    ok(fr.run("config"), "gb200 with containerd");
    assert!(fr.exists(GKE_DROP_IN));
    fr.unset_env("USE_CONTAINERD");
    ok(fr.run("config"), "gb200 without containerd");
    assert!(!fr.exists(GKE_DROP_IN));
    ok(fr.run("config-check"), "check gb200 without containerd");
}

/// A missing, empty or unknown accelerator or intent fails config with a message naming it
/// and the choices, and changes nothing under /etc or /proc/sys.
#[test]
fn nvidia_tuning_gke_bad_configmaps_fail_clearly_and_change_nothing() {
    require_root!();
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("intent", "inference")],
            "Expected config file accelerator not found in configmaps directory.",
        ),
        (
            &[("accelerator", " \n"), ("intent", "inference")],
            "configMap \"accelerator\" is empty",
        ),
        (
            &[("accelerator", "a100"), ("intent", "inference")],
            "unknown accelerator \"a100\" (available: gb200, h100)",
        ),
        (
            &[("accelerator", "h100"), ("intent", "training")],
            "unknown intent \"training\" for accelerator \"h100\" (available: inference, multiNodeTraining)",
        ),
    ];
    for (configmaps, message) in cases {
        let fr = node("ubuntu-22.04", "nvidia-tuning-gke", configmaps, GKE_ID);
        let etc_before = etc(&fr);
        let proc_before = tree(&fr.host("/proc"));
        let run = fr.run("config");
        assert_ne!(run.code, 0, "{message}: {}", run.all());
        assert!(run.all().contains(message), "{message}: {}", run.all());
        assert_eq!(etc_but_skyhook(&fr), etc_before, "{message}");
        assert_eq!(tree(&fr.host("/proc")), proc_before, "{message}");
    }
}

/// Every script of each port (`skyhook_dir/*.rhai` and `lib/*.rhai`) passes `skyhook-run
/// check` with no error and no warning.
#[test]
fn nvidia_ports_scripts_check_clean() {
    for (example, count) in [
        ("nvidia-tuning-gke", 6),
        ("nvidia-tuned", 9),
        ("nvidia-setup", 9),
    ] {
        let dir = manifest()
            .join("examples")
            .join(example)
            .join("skyhook_dir");
        let mut files: Vec<PathBuf> = Vec::new();
        for sub in [dir.clone(), dir.join("lib")] {
            for e in fs::read_dir(&sub).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "rhai") {
                    files.push(p);
                }
            }
        }
        files.sort();
        assert_eq!(files.len(), count, "{example}: {files:?}");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
            .arg("check")
            .args(&files)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{example}: {stderr}");
        assert_eq!(stderr, "", "{example}: warnings from check");
    }
}

/// `skyhook-run` on the port: the dry run of `config` reads the package's own profiles (at
/// the copy dir `--apply` fills, planned in the overlay), changes nothing, and after
/// `--apply` plans nothing to change.
#[test]
fn nvidia_tuning_gke_through_skyhook_run_plans_applies_and_then_plans_nothing() {
    require_root!();
    let fr = node(
        "ubuntu-24.04-eks-x86_64",
        "nvidia-tuning-gke",
        &[("accelerator", "h100"), ("intent", "multiNodeTraining")],
        GKE_ID,
    );
    let skyhook_run = |extra: &[&str]| package_run(&fr, GKE_ID, "config", extra, &[]);
    let before = tree(fr.root());
    let (code, plan) = skyhook_run(&[]);
    assert_eq!(code, 0, "{plan}");
    assert!(plan.contains("profile h100/multiNodeTraining"), "{plan}");
    assert!(
        plan.contains("~ sysctl net.core.default_qdisc = fq (was fq_codel)"),
        "{plan}"
    );
    assert!(
        plan.contains("~ create /etc/sysctl.d/999-nvidia_tuning_gke-tuning.conf (mode 0644)"),
        "{plan}"
    );
    assert!(
        !plan.contains("/var/lib/skyhook/skyhook-run"),
        "the copy is not a change: {plan}"
    );
    assert_eq!(tree(fr.root()), before, "a dry run changed the root");

    let (code, applied) = skyhook_run(&["--apply"]);
    assert_eq!(code, 0, "{applied}");
    assert_eq!(live(&fr, "net.core.default_qdisc"), "fq");
    let (code, again) = skyhook_run(&[]);
    assert_eq!(code, 0, "{again}");
    assert!(again.contains("Plan: 0 to change,"), "{again}");
}

/// Turn a fake host's `/dev` into what a node shows (the layers hold a snapshot: devices as
/// plain files, `/dev/disk/by-id` entries as plain files holding their link text, no
/// `/sys`): each by-id entry becomes the relative symlink it held, and every NVMe namespace
/// in `/dev` (`nvme1n1`, ...) gets its sysfs as the kernel lays it out —
/// `/sys/class/block/<ns>` a symlink into `/sys/devices/pci0000:00/<slot>/nvme/<ctrl>/<ns>`
/// (`size` in 512-byte sectors, `dev` `259:<minor>`, `wwid`, `device` -> the controller,
/// whose `model` and `serial` come from the by-id name `nvme-<Model_words>_<serial>`) —
/// and a udev record `/run/udev/data/b259:<minor>` without a filesystem. The EBS root
/// volume a node boots from is added too (`nvme0n1`, partition `nvme0n1p1` with ext4 in
/// udev), so a script must tell it from the instance-store disks. Devices become block
/// device nodes `240:<n>` (major 240 is for local/experimental use: no driver answers it,
/// no real disk is touched), as `fs::mkfs` and `raid::create` require a block device.
/// Returns the instance-store device paths, sorted.
pub(crate) fn realistic_block_devices(root: &Path) -> Vec<String> {
    use std::os::unix::fs::symlink;
    let write = |host: &str, content: &str| {
        let p = root.join(host.trim_start_matches('/'));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let _ = fs::remove_file(&p);
        fs::write(&p, content).unwrap();
    };
    let link = |host: &str, target: &str| {
        let p = root.join(host.trim_start_matches('/'));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let _ = fs::remove_file(&p);
        symlink(target, &p).unwrap();
    };
    let by_id = root.join("dev/disk/by-id");
    fs::create_dir_all(&by_id).unwrap();
    // by-id name -> namespace, from the layer's link texts.
    let mut named: Vec<(String, String)> = Vec::new();
    for e in fs::read_dir(&by_id).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let target = match fs::read_link(e.path()) {
            Ok(t) => t.to_string_lossy().into_owned(),
            Err(_) => fs::read_to_string(e.path()).unwrap().trim().to_string(),
        };
        link(&format!("/dev/disk/by-id/{name}"), &target);
        named.push((name, target.rsplit('/').next().unwrap().to_string()));
    }
    let ebs = "nvme-Amazon_Elastic_Block_Store_vol0a1b2c3d4e5f60718";
    link(&format!("/dev/disk/by-id/{ebs}"), "../../nvme0n1");
    link(&format!("/dev/disk/by-id/{ebs}-part1"), "../../nvme0n1p1");
    named.push((ebs.to_string(), "nvme0n1".to_string()));
    let block = |host: &str, minor: u64| {
        let p = root.join(host.trim_start_matches('/'));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let _ = fs::remove_file(&p);
        nix::sys::stat::mknod(
            &p,
            nix::sys::stat::SFlag::S_IFBLK,
            nix::sys::stat::Mode::from_bits_truncate(0o660),
            nix::sys::stat::makedev(240, minor),
        )
        .unwrap();
    };
    block("/dev/nvme0n1", 0);
    block("/dev/nvme0n1p1", 1);

    let mut instance = Vec::new();
    let mut namespaces: Vec<String> = fs::read_dir(root.join("dev"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("nvme") && n.ends_with("n1"))
        .collect();
    namespaces.sort();
    for (i, ns) in namespaces.iter().enumerate() {
        let ctrl = ns.trim_end_matches("n1");
        let id = named.iter().find(|(_, t)| t == ns).map(|(n, _)| n.as_str());
        let (model, serial) = match id.and_then(|n| n.strip_prefix("nvme-")?.rsplit_once('_')) {
            Some((m, s)) => (m.replace('_', " "), s.to_string()),
            None => (
                "Amazon EC2 NVMe Instance Storage".to_string(),
                format!("AWS{i:02}"),
            ),
        };
        let dir = format!(
            "/sys/devices/pci0000:00/0000:00:{:02x}.0/nvme/{ctrl}",
            0x1e + i
        );
        let minor = i * 2;
        block(&format!("/dev/{ns}"), minor as u64 + 2);
        // Instance storage 3.84 TB (7500000000 sectors); the EBS root volume 100 GiB.
        let sectors = if ns == "nvme0n1" {
            209715200u64
        } else {
            7500000000
        };
        write(&format!("{dir}/model"), &format!("{model:<40}\n"));
        write(&format!("{dir}/serial"), &format!("{serial}\n"));
        write(&format!("{dir}/{ns}/size"), &format!("{sectors}\n"));
        write(&format!("{dir}/{ns}/dev"), &format!("259:{minor}\n"));
        write(
            &format!("{dir}/{ns}/wwid"),
            &format!("nvme.1d0f-{serial}\n"),
        );
        link(&format!("{dir}/{ns}/device"), &format!("../../{ctrl}"));
        link(
            &format!("/sys/class/block/{ns}"),
            &format!("../..{}/{ns}", &dir["/sys".len()..]),
        );
        write(
            &format!("/run/udev/data/b259:{minor}"),
            &format!(
                "E:ID_MODEL={}\nE:ID_SERIAL_SHORT={serial}\n",
                model.replace(' ', "_")
            ),
        );
        if ns == "nvme0n1" {
            let p = format!("{ns}p1");
            write(&format!("{dir}/{ns}/{p}/partition"), "1\n");
            write(&format!("{dir}/{ns}/{p}/size"), "209713119\n");
            write(
                &format!("{dir}/{ns}/{p}/dev"),
                &format!("259:{}\n", minor + 1),
            );
            link(
                &format!("/sys/class/block/{p}"),
                &format!("../..{}/{ns}/{p}", &dir["/sys".len()..]),
            );
            write(
                &format!("/run/udev/data/b259:{}", minor + 1),
                "E:ID_FS_TYPE=ext4\nE:ID_FS_UUID=0d1e2f30-4152-6374-8596-a7b8c9d0e1f2\n",
            );
        } else {
            instance.push(format!("/dev/{ns}"));
        }
    }
    instance
}

/// One `.rhai` script run in-process on a fake node's root in `mode`: its stdout, the
/// report, and the error, if any.
pub(crate) fn rhai_on(
    root: &Path,
    mode: skyhook::host::ExecMode,
    src: &str,
) -> (String, skyhook::host::Report, Option<String>) {
    use skyhook::host::{Host, HostOptions, root::HostRoot};
    use skyhook::script::{host_api::HostApi, *};
    use skyhook::step::{ScriptRunOptions, run_script_with};
    use std::sync::Arc;
    let options = HostOptions {
        env: vec![("PATH".into(), skyhook::process::DEFAULT_PATH.into())],
        ..HostOptions::default()
    };
    let api = HostApi::new(Host::new(HostRoot::open(root).unwrap(), mode, options));
    let engine = ScriptEngine::default();
    let store = Arc::new(ModuleStore::new(root));
    let script = compile_source(&engine, "main.rhai", src, store).unwrap();
    let out = Arc::new(CaptureOutput::new());
    let mut opts = ScriptRunOptions::new(
        api.redacting_output(out.clone()),
        skyhook::process::Cancel::new(),
    );
    opts.host = Arc::new(api.clone());
    let ctx = StepContext {
        name: "main.rhai".into(),
        ..Default::default()
    };
    let outcome = run_script_with(&engine, &script, &ctx, &opts);
    let report = api.finish().unwrap();
    let stdout = String::from_utf8(out.stdout_bytes()).unwrap();
    (stdout, report, outcome.error.map(|e| e.to_string()))
}

/// disk::, raid:: and fs::mkfs on the EKS x86_64 fake node made realistic: the instance
/// disks found by their by-id names, the RAID0 and its xfs planned, checked, made by the
/// layer's mdadm and mkfs.xfs (installed with apt-get), unchanged the second time.
#[test]
fn disks_raid_and_mkfs_on_the_eks_fake_node() {
    use skyhook::host::ExecMode::{Apply, Check, Plan};
    require_root!();
    let fr = node("ubuntu-24.04-eks-x86_64", "nvidia-tuning-gke", &[], GKE_ID);
    let disks = realistic_block_devices(fr.root());
    assert_eq!(disks, ["/dev/nvme1n1", "/dev/nvme2n1"]);
    let (out, _, err) = rhai_on(
        fr.root(),
        Apply,
        r#"run(["apt", "install", "-y", "mdadm", "xfsprogs"]);
for d in disk::list() {
    print(`${d.name} ${d.kind} ${d.size} ${d.model}|${d.serial} ${d.by_id} [${d.fstype}] [${d.uuid}]`);
}"#,
    );
    assert_eq!(err, None, "{out}");
    assert_eq!(
        out,
        "nvme0n1 disk 107374182400 Amazon Elastic Block Store|vol0a1b2c3d4e5f60718 [\"/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0a1b2c3d4e5f60718\"] [] []
nvme0n1p1 part 107373116928 Amazon Elastic Block Store|vol0a1b2c3d4e5f60718 [\"/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0a1b2c3d4e5f60718-part1\"] [ext4] [0d1e2f30-4152-6374-8596-a7b8c9d0e1f2]
nvme1n1 disk 3840000000000 Amazon EC2 NVMe Instance Storage|AWS11C6E2A9F0B3D4E5F [\"/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS11C6E2A9F0B3D4E5F\"] [] []
nvme2n1 disk 3840000000000 Amazon EC2 NVMe Instance Storage|AWS21C6E2A9F0B3D4E5F [\"/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS21C6E2A9F0B3D4E5F\"] [] []
"
    );
    // The setup-local-disks flow: instance disks by their by-id name, RAID0, xfs.
    let script = r#"let disks = [];
for d in disk::list() {
    if d.by_id.some(|l| l.contains("NVMe_Instance_Storage")) { disks.push(d.by_id[0]); }
}
let a = raid::create("kubernetes", disks, #{level: 0});
let f = fs::mkfs("/dev/md/kubernetes", "xfs", #{options: ["-f", "-l", "su=8b"]});
print(`${a} ${f} ${disk::fstype("/dev/md/kubernetes")} [${disk::uuid("/dev/md/kubernetes")}]`);"#;
    let (out, plan, err) = rhai_on(fr.root(), Plan, script);
    assert_eq!(err, None);
    assert_eq!(out, "true true xfs []\n");
    let lines: Vec<&str> = plan.changes.iter().map(|c| c.summary.as_str()).collect();
    let ids = "/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS";
    assert_eq!(
        lines,
        [
            format!(
                "raid /dev/md/kubernetes level 0 from [/dev/nvme1n1, /dev/nvme2n1]: mdadm --create --run --force --verbose /dev/md/kubernetes --level=0 --name=kubernetes --raid-devices=2 {ids}11C6E2A9F0B3D4E5F {ids}21C6E2A9F0B3D4E5F"
            ),
            "mkfs xfs on /dev/md/kubernetes: mkfs.xfs -f -l su=8b /dev/md/kubernetes".to_string(),
        ]
    );
    assert!(!fr.exists("/dev/md/kubernetes"), "a plan made the array");
    let (_, check, err) = rhai_on(fr.root(), Check, script);
    assert_eq!(err, None);
    assert_eq!(check.drift().len(), 2);

    let (out, _, err) = rhai_on(fr.root(), Apply, script);
    assert_eq!(err, None, "{out}");
    assert_eq!(
        out,
        "true true xfs [3f1c2a9e-5b7d-4e21-9a0c-6d8e7f9b1a2c]\n"
    );
    let calls = fr.read("/var/log/stub-calls.log");
    let made: Vec<&str> = calls
        .lines()
        .filter(|l| l.starts_with("mdadm --create") || l.starts_with("mkfs"))
        .collect();
    assert_eq!(
        made,
        [
            format!("mdadm --create --run --force --verbose /dev/md/kubernetes --level=0 --name=kubernetes --raid-devices=2 {ids}11C6E2A9F0B3D4E5F {ids}21C6E2A9F0B3D4E5F").as_str(),
            "mkfs.xfs -f -l su=8b /dev/md/kubernetes",
        ]
    );
    let (out, again, err) = rhai_on(fr.root(), Apply, script);
    assert_eq!(err, None, "{out}");
    assert_eq!(
        out,
        "false false xfs [3f1c2a9e-5b7d-4e21-9a0c-6d8e7f9b1a2c]\n"
    );
    assert!(again.changes.is_empty());
    let (_, check, _) = rhai_on(fr.root(), Check, script);
    assert!(check.drift().is_empty());
    let (out, _, err) = rhai_on(
        fr.root(),
        Plan,
        r#"let a = raid::info("/dev/md/kubernetes"); print(`${a.level} ${a.state}`); print(raid::scan());"#,
    );
    assert_eq!(err, None);
    assert_eq!(
        out,
        "raid0 clean\nARRAY /dev/md/kubernetes metadata=1.2 name=ip-10-0-12-34:kubernetes UUID=5e1d7c3a:9b2f4e61:0a8c3d17:6f4b2e90\n\n"
    );
}

/// The fake node's flattened links are links again: `apt-get` runs the layer's `apt`, and
/// kubelet is enabled as the fake systemctl and reboot see it (a symlink in the `.wants`).
#[test]
fn fake_node_links_are_symlinks() {
    let fr = node("ubuntu-24.04-eks-x86_64", "nvidia-tuning-gke", &[], "r");
    let apt_get = fr.host("/usr/local/bin/apt-get");
    assert_eq!(fs::read_link(&apt_get).unwrap(), Path::new("apt"));
    let wants = fr.host("/etc/systemd/system/multi-user.target.wants/kubelet.service");
    assert_eq!(
        fs::read_link(&wants).unwrap(),
        Path::new("/etc/systemd/system/kubelet.service")
    );
}
