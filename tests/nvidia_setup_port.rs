//! The Rhai port of nvidia-setup (`examples/nvidia-setup`) run by the agent on the fake
//! GPU-node hosts of `tests/fakehosts`; the shared fake-node helpers are in `nvidia_ports`.
//!
//! The package supports Ubuntu 24.04 (the x86_64 H100 and arm64 GB200 EKS hosts): every stage
//! the operator runs (apply, apply-check; the kernel install with its reboot interrupt and
//! post-interrupt-check), a second apply and a `skyhook-run` plan that change nothing, drift
//! caught by apply-check, the host files as expected. Elsewhere (Ubuntu 22.04, Amazon Linux
//! 2023, COS) and with bad configMaps or flags it fails before changing anything.
//!
//! The EFA installer comes from the host layer's mirror (`/usr/share/fakehost/mirror`), packed
//! as a real tar.gz and served on 127.0.0.1 (`NVIDIA_EFA_URL`), since `fs::fetch` downloads in
//! the agent, not with the host's curl.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::symlink;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::nvidia_ports::{
    etc, etc_but_skyhook, manifest, node, ok, package_run, payload, realistic_block_devices,
};
use crate::util::{FakeRoot, Run, T, run_to_end};

const SETUP_ID: &str = "setup-0000-1_nvidia_setup_0.2.1";

/// The resource id the operator gives the kernel package of `skyhook.yaml`: the middle field
/// is the CR's package name, not config.json's `package_name`.
const KERNEL_ID: &str = "setup-0000-1_nvidia-setup-kernel_0.2.1";
const EFA_TARBALL: &str = "aws-efa-installer-1.47.0.tar.gz";
const RAID_UNIT: &str = "/etc/systemd/system/mnt-k8s\\x2ddisks-0.mount";

/// A loopback HTTP server answering every GET with one body (at most 64 requests; it stops
/// when dropped).
struct Mirror {
    url: String,
    stop: Arc<AtomicBool>,
    addr: std::net::SocketAddr,
}

impl Mirror {
    fn serve(name: &str, body: Vec<u8>) -> Mirror {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().take(64) {
                if halt.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut conn) = conn else { return };
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                loop {
                    line.clear();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                }
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(&body);
            }
        });
        Mirror {
            url: format!("http://{addr}/{name}"),
            stop,
            addr,
        }
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

/// The layer's fake EFA installer archive (a script the layer's fake tar runs) as the real
/// tar.gz the AWS mirror serves: its files unpacked by running it, then packed.
fn efa_tarball(host: &str) -> Vec<u8> {
    let fake = manifest()
        .join("tests/fakehosts")
        .join(host)
        .join("usr/share/fakehost/mirror")
        .join(EFA_TARBALL);
    let dir = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("sh")
        .arg(&fake)
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(st.success(), "unpack {}", fake.display());
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    b.append_dir_all("aws-efa-installer", dir.path().join("aws-efa-installer"))
        .unwrap();
    b.into_inner().unwrap().finish().unwrap()
}

/// A fake Ubuntu GPU node with the port at `$T/pkg` and `configmaps`: a boot id, its block
/// devices as a node has them (`realistic_block_devices`), and the EFA mirror on loopback.
fn setup_node(host: &str, configmaps: &[(&str, &str)]) -> (FakeRoot, Mirror) {
    let mut fr = node(host, "nvidia-setup", configmaps, SETUP_ID);
    fr.write("/proc/sys/kernel/random/boot_id", "boot-1\n");
    if fr.exists("/dev/disk/by-id") {
        realistic_block_devices(fr.root());
    }
    let mirror = Mirror::serve(EFA_TARBALL, efa_tarball("ubuntu-24.04-eks-x86_64"));
    fr.set_env("NVIDIA_EFA_URL", &mirror.url);
    (fr, mirror)
}

/// The stub calls the layer recorded so far.
fn stub_calls(fr: &FakeRoot) -> String {
    fr.read_opt("/var/log/stub-calls.log").unwrap_or_default()
}

/// [`package_run`] of the setup package (`SKYHOOK_RESOURCE_ID` [`SETUP_ID`]).
fn skyhook_run(fr: &FakeRoot, mode: &str, extra: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    package_run(fr, SETUP_ID, mode, extra, env)
}

/// The descendants' pids of `pid` (its tasks' `children` lists), empty when it has none.
fn children(pid: u32) -> String {
    let mut all = String::new();
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            all += &fs::read_to_string(t.path().join("children")).unwrap_or_default();
        }
    }
    all
}

/// The operator's reboot interrupt on the fake node: the agent issues `reboot` (the layer's
/// stub boots grub's saved kernel), and once it returned the shutdown's SIGTERM ends the
/// agent, as on a node; the node then runs boot `boot_id`. Waits at most 30 s.
fn reboot(fr: &FakeRoot, full: &str, boot_id: &str) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    use std::time::{Duration, Instant};
    let r = fr.root_str();
    let node_restart = payload(r#"{"type":"node_restart"}"#);
    let child = fr.spawn_args(&["interrupt", &r, &format!("{T}/pkg"), &node_restart]);
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(stub_calls(fr).lines().any(|l| l == "reboot") && children(pid).trim().is_empty()) {
        if Instant::now() > deadline {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            panic!("reboot was not run within 30 s: {}", stub_calls(fr));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).unwrap();
    let run = run_to_end(child);
    assert_eq!(run.code, 0, "interrupt: {}", run.all());
    assert_eq!(fr.read("/usr/share/fakehost/kernel-release").trim(), full);
    fr.write("/proc/sys/kernel/random/boot_id", format!("{boot_id}\n"));
}

#[track_caller]
fn failed(run: Run, what: &str, message: &str) -> Run {
    assert_ne!(run.code, 0, "{what}: expected a failure\n{}", run.all());
    assert!(
        run.all().contains(message),
        "{what}: expected {message:?}\n{}",
        run.all()
    );
    run
}

const CHRONY_SERVER: &str = "server 169.254.169.123 prefer iburst minpoll 4 maxpoll 4";

/// The files apply leaves on every supported host, whatever its disks and EFA state.
#[track_caller]
fn assert_common_files(fr: &FakeRoot, host: &str) {
    assert_eq!(
        fr.read("/etc/profile.d/ofi-aws.sh"),
        "PATH=$PATH:/opt/amazon/ofi-nccl/bin\n",
        "{host}"
    );
    assert_eq!(
        fr.read("/etc/ld.so.conf.d/000_ofi_aws.conf"),
        "/opt/amazon/ofi-nccl/lib\n",
        "{host}"
    );
    let chrony = fr.read("/etc/chrony/chrony.conf");
    assert_eq!(
        chrony.lines().filter(|l| *l == CHRONY_SERVER).count(),
        1,
        "{host}: {chrony}"
    );
    assert!(
        !chrony.lines().any(|l| l.starts_with("pool ")),
        "{host}: {chrony}"
    );
    assert!(chrony.contains("driftfile /var/lib/chrony/chrony.drift\n"));
    assert!(fr.exists("/run/fake-systemd/active/chrony"), "{host}");
    for p in ["curl", "git", "wget", "gpg", "chrony"] {
        assert!(
            fr.exists(&format!("/var/lib/fakepkg/{p}.list")),
            "{host}: {p}"
        );
    }
    assert!(fr.exists("/opt/amazon/efa/lib/libfabric.so.1"), "{host}");
    assert!(!fr.exists("/var/cache/nvidia-setup"), "{host}");
}

/// apply, apply-check, a second apply and a plan that change nothing, drift, on the two
/// supported hosts: H100 on x86_64 (two instance store disks: RAID0, mounts, EFA installed)
/// and GB200 on arm64 (no local disks, EFA already there).
#[test]
fn nvidia_setup_every_stage_on_ubuntu_24_04() {
    require_root!();
    for (host, accelerator) in [
        ("ubuntu-24.04-eks-x86_64", "h100"),
        ("ubuntu-24.04-eks-arm64", "gb200"),
    ] {
        let (fr, mirror) = setup_node(host, &[("service", "eks\n"), ("accelerator", accelerator)]);
        let x86 = host.ends_with("x86_64");
        let kernel = fr.read("/usr/share/fakehost/kernel-release");
        let kernel = kernel.trim();
        let what = |stage: &str| format!("{host}: {stage}");

        let apply = ok(fr.run("apply"), &what("apply"));
        let out = apply.all();
        assert!(
            out.contains(&format!(
                "nvidia-setup eks-{accelerator}: kernel {kernel}, EFA 1.47.0"
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!("kernel {kernel} meets {kernel}")),
            "{out}"
        );
        assert_common_files(&fr, host);
        let calls = stub_calls(&fr);
        assert!(calls.contains(" upgrade -y\n"), "{calls}");
        if x86 {
            assert!(
                out.contains("warning: fs::fetch:"),
                "unpinned download warned: {out}"
            );
            assert!(calls.contains("efa_installer.sh -y\n"), "{calls}");
            assert!(calls.contains("\nldconfig\n"), "{calls}");
            // RAID0 of both instance store disks, xfs, mounted by a unit, data moved.
            assert!(
                calls.contains("/dev/nvme1n1 /dev/nvme2n1"),
                "mdadm --create of both disks: {calls}"
            );
            assert!(
                calls.contains("mkfs.xfs -l su=8b /dev/md/kubernetes"),
                "{calls}"
            );
            assert_eq!(
                fr.read(RAID_UNIT),
                "[Unit]\nDescription=Mount EC2 Instance Store NVMe disk RAID0\nRequires=dev-md-kubernetes.device\nAfter=dev-md-kubernetes.device\n\n[Mount]\nWhat=UUID=3f1c2a9e-5b7d-4e21-9a0c-6d8e7f9b1a2c\nWhere=/mnt/k8s-disks/0\nType=xfs\nOptions=defaults,noatime\n\n[Install]\nWantedBy=multi-user.target\n"
            );
            for (unit, what_dir) in [
                ("var-lib-kubelet.mount", "/mnt/k8s-disks/0/kubelet"),
                ("var-lib-containerd.mount", "/mnt/k8s-disks/0/containerd"),
                ("var-log-pods.mount", "/mnt/k8s-disks/0/pods"),
            ] {
                let text = fr.read(&format!("/etc/systemd/system/{unit}"));
                assert!(
                    text.contains(&format!("What={what_dir}\n")),
                    "{unit}: {text}"
                );
                assert!(text.contains("Type=none\nOptions=bind\n"), "{unit}: {text}");
                assert!(
                    fr.exists(&format!("/run/fake-systemd/active/{unit}")),
                    "{unit}"
                );
            }
            assert_eq!(
                fr.read("/mnt/k8s-disks/0/kubelet/config.yaml"),
                fr.read("/var/lib/kubelet/config.yaml")
            );
            assert!(
                fr.exists("/mnt/k8s-disks/0/containerd/io.containerd.metadata.v1.bolt/meta.db")
            );
            assert!(calls.contains(" stop kubelet\n"), "{calls}");
            assert!(calls.contains(" stop containerd\n"), "{calls}");
            for s in ["kubelet", "containerd"] {
                assert!(
                    fr.exists(&format!("/run/fake-systemd/active/{s}")),
                    "{s} restarted"
                );
            }
            assert!(
                fr.read("/.aws/mdadm.conf")
                    .starts_with("ARRAY /dev/md/kubernetes ")
            );
        } else {
            assert!(out.contains("EFA already installed, skipping"), "{out}");
            assert!(!calls.contains("efa_installer"), "{calls}");
            assert!(
                out.contains("no NVMe instance storage disks found, skipping the local disk setup"),
                "{out}"
            );
            assert!(!calls.contains("mdadm"), "{calls}");
        }
        ok(fr.run("apply-check"), &what("apply-check"));

        // A second apply changes nothing: no download, installer, RAID, copy or restart.
        let before = etc(&fr);
        let calls_before = stub_calls(&fr);
        let again = ok(fr.run("apply"), &what("apply again"));
        assert!(
            again.stdout.contains("Apply: 0 changed,"),
            "{}",
            again.all()
        );
        assert_eq!(etc(&fr), before, "{host}: a second apply changed /etc");
        let new_calls = stub_calls(&fr)[calls_before.len()..].to_string();
        for absent in [
            "efa_installer",
            "mdadm --create",
            "mkfs",
            " stop ",
            "ldconfig\n",
        ] {
            assert!(
                !new_calls.contains(absent),
                "{host}: {absent} again: {new_calls}"
            );
        }
        let (code, plan) = skyhook_run(&fr, "apply", &[], &[("NVIDIA_EFA_URL", &mirror.url)]);
        assert_eq!(code, 0, "{plan}");
        assert!(plan.contains("Plan: 0 to change,"), "{host}: {plan}");

        // Drift: the chrony server line taken out, a pool back.
        let chrony = fr.read("/etc/chrony/chrony.conf");
        fr.write(
            "/etc/chrony/chrony.conf",
            chrony.replace(CHRONY_SERVER, "pool ntp.ubuntu.com iburst"),
        );
        let drift = failed(fr.run("apply-check"), &what("drift chrony"), "problem(s)");
        assert!(
            drift.all().contains(&format!(
                "/etc/chrony/chrony.conf lacks \"{CHRONY_SERVER}\""
            )),
            "{}",
            drift.all()
        );
        assert!(
            drift
                .all()
                .contains("/etc/chrony/chrony.conf still has \"pool ntp.ubuntu.com iburst\""),
            "{}",
            drift.all()
        );
        ok(fr.run("apply"), &what("apply after drift"));
        assert_common_files(&fr, host);
        ok(fr.run("apply-check"), &what("apply-check after drift"));
    }
}

/// Drift of the disk setup is caught: a bind mount that is not active fails apply-check
/// naming its unit (the bash check only looked for /usr/local/bin/setup-local-disks), and
/// apply mounts it again without copying or stopping anything else.
#[test]
fn nvidia_setup_disk_drift_is_caught_and_repaired() {
    require_root!();
    let (fr, _mirror) = setup_node(
        "ubuntu-24.04-eks-x86_64",
        &[("service", "eks"), ("accelerator", "h100")],
    );
    ok(fr.run("apply"), "apply");
    fs::remove_file(fr.host("/run/fake-systemd/active/var-lib-containerd.mount")).unwrap();
    failed(
        fr.run("apply-check"),
        "bind mount stopped",
        "var-lib-containerd.mount is not active",
    );
    ok(fr.run("apply"), "apply again");
    assert!(fr.exists("/run/fake-systemd/active/var-lib-containerd.mount"));
    ok(fr.run("apply-check"), "apply-check");
}

/// EFA is one condition for apply and apply-check: a leftover `/opt/amazon/efa` without
/// libfabric does not skip the installer (the bash package skipped on any of its three
/// criteria). An efa dkms module installed only for another kernel fails apply-check naming
/// it; installed for the running kernel it passes (the bash dkms test could never pass).
#[test]
fn nvidia_setup_efa_is_installed_and_checked_on_one_condition() {
    require_root!();
    let (fr, _mirror) = setup_node(
        "ubuntu-24.04-eks-x86_64",
        &[("service", "eks"), ("accelerator", "h100")],
    );
    fs::create_dir_all(fr.host("/opt/amazon/efa")).unwrap();
    let apply = ok(fr.run("apply"), "apply over a leftover /opt/amazon/efa");
    assert!(
        stub_calls(&fr).contains("efa_installer.sh -y\n"),
        "{}",
        apply.all()
    );
    assert!(fr.exists("/opt/amazon/efa/lib/libfabric.so.1"));
    ok(fr.run("apply-check"), "apply-check");

    let dkms = "/var/lib/dkms/efa";
    fr.write(
        &format!("{dkms}/2.13.0/6.8.0-1021-aws/x86_64/module/efa.ko"),
        "fake module\n",
    );
    symlink(
        "2.13.0/6.8.0-1021-aws/x86_64",
        fr.host(&format!("{dkms}/kernel-6.8.0-1021-aws-x86_64")),
    )
    .unwrap();
    failed(
        fr.run("apply-check"),
        "efa module for another kernel",
        "dkms has the efa module (2.13.0 installed for 6.8.0-1021-aws) but not installed for the running kernel 6.14.0-1018-aws",
    );
    fr.write(
        &format!("{dkms}/2.13.0/6.14.0-1018-aws/x86_64/module/efa.ko"),
        "fake module\n",
    );
    symlink(
        "2.13.0/6.14.0-1018-aws/x86_64",
        fr.host(&format!("{dkms}/kernel-6.14.0-1018-aws-x86_64")),
    )
    .unwrap();
    ok(fr.run("apply-check"), "efa module for the running kernel");
}

/// The host of the kernel install: running `old`, whose image is the only one in /boot and
/// in the base image's package list (the package's kernel is only in the fake apt mirror).
fn older_kernel_host(host: &str, old: &str) -> (FakeRoot, Mirror) {
    let (mut fr, mirror) = setup_node(host, &[("service", "eks"), ("accelerator", "h100")]);
    for e in fs::read_dir(fr.host("/boot")).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("vmlinuz-") {
            fs::remove_file(e.path()).unwrap();
        }
    }
    fr.write(&format!("/boot/vmlinuz-{old}"), "fake kernel\n");
    fr.write("/usr/share/fakehost/kernel-release", format!("{old}\n"));
    let base = fr.read("/usr/share/fakehost/dpkg-base");
    let kept: String = base
        .lines()
        .filter(|l| !l.starts_with("linux-"))
        .map(|l| format!("{l}\n"))
        .collect();
    fr.write("/usr/share/fakehost/dpkg-base", kept);
    // The node metadata as the operator writes it for examples/nvidia-setup/skyhook.yaml:
    // keyed by the CR's package names.
    fr.write(
        &format!("{T}/pkg/node-metadata/packages.json"),
        r#"{"agentVersion": "v6.3.0", "packages": {
            "nvidia-setup-kernel": {"name": "nvidia-setup-kernel", "version": "0.2.1",
                "image": "ghcr.io/nvidia/skyhook-packages/nvidia-setup", "interrupt": {"type": "reboot"}},
            "nvidia-setup-full": {"name": "nvidia-setup-full", "version": "0.2.1",
                "image": "ghcr.io/nvidia/skyhook-packages/nvidia-setup"}}}"#,
    );
    fr.set_env("SKYHOOK_RESOURCE_ID", KERNEL_ID);
    (fr, mirror)
}

/// NVIDIA_SETUP_INSTALL_KERNEL=true with NVIDIA_PIN_KERNEL=true on both architectures: apply
/// installs the kernel, makes it grub's saved default, pins and holds it and requests the
/// reboot; apply-check passes before the reboot, post-interrupt-check fails until the node
/// booted the kernel (the fake reboot boots grub's saved entry) and passes after; a second
/// apply changes nothing.
#[test]
fn nvidia_setup_kernel_install_reboot_and_post_interrupt_check() {
    require_root!();
    for (host, full) in [
        ("ubuntu-24.04-eks-x86_64", "6.14.0-1018-aws"),
        ("ubuntu-24.04-eks-arm64", "6.14.0-1018-aws-64k"),
    ] {
        let (mut fr, _mirror) = older_kernel_host(host, "6.8.0-1021-aws");
        // Without the install the running kernel is refused, exactly or as "at least".
        failed(
            fr.run("apply"),
            host,
            &format!(
                "current kernel 6.8.0-1021-aws does not match required {full} (exact match required)"
            ),
        );
        fr.set_env("NVIDIA_SETUP_KERNEL_ALLOW_NEWER", "true");
        failed(
            fr.run("apply"),
            host,
            &format!("current kernel 6.8.0-1021-aws is not >= required {full}"),
        );
        fr.unset_env("NVIDIA_SETUP_KERNEL_ALLOW_NEWER");
        assert!(!stub_calls(&fr).contains("apt-get"), "{host}: nothing ran");

        fr.set_env("NVIDIA_SETUP_INSTALL_KERNEL", "true");
        fr.set_env("NVIDIA_PIN_KERNEL", "true");
        let apply = ok(fr.run("apply"), &format!("{host}: kernel install"));
        assert!(
            apply.all().contains(&format!(
                "kernel {full} installed and set as grub's default; a reboot boots it (running 6.8.0-1021-aws)"
            )),
            "{}",
            apply.all()
        );
        let pkgs = [
            format!("linux-image-{full}"),
            format!("linux-headers-{full}"),
            format!("linux-modules-{full}"),
            format!("linux-modules-extra-{full}"),
        ];
        for p in &pkgs {
            assert!(
                fr.exists(&format!("/var/lib/fakepkg/{p}.list")),
                "{host}: {p}"
            );
        }
        assert!(fr.exists(&format!("/boot/vmlinuz-{full}")));
        assert_eq!(
            fr.read("/boot/grub/grubenv"),
            format!(
                "# GRUB Environment Block\nsaved_entry=Advanced options for Ubuntu>Ubuntu, with Linux {full}\n"
            )
        );
        assert!(
            fr.read("/etc/default/grub")
                .contains("\nGRUB_DEFAULT=saved\n")
                || fr
                    .read("/etc/default/grub")
                    .starts_with("GRUB_DEFAULT=saved\n")
        );
        let pin = fr.read("/etc/apt/preferences.d/pin-kernel");
        assert!(
            pin.starts_with(&format!(
                "Package: linux-image-{full}\nPin: version 6.14.0-1018.*\nPin-Priority: 1001\n\nPackage: linux-headers-{full}\n"
            )),
            "{pin}"
        );
        let holds = fr.read("/var/lib/fakepkg/holds");
        for p in &pkgs {
            assert!(holds.lines().any(|l| l == p), "{host}: {p} held: {holds}");
        }
        assert_eq!(
            fr.read("/t/state/interrupts/requested/nvidia_setup.reboot"),
            "boot-1\n"
        );
        // The install only: no upgrade, EFA or disks.
        let calls = stub_calls(&fr);
        assert!(
            !calls.contains("upgrade") && !calls.contains("mdadm"),
            "{calls}"
        );

        ok(
            fr.run("apply-check"),
            &format!("{host}: apply-check before the reboot"),
        );
        failed(
            fr.run("post-interrupt-check"),
            host,
            "the requested reboot has not happened",
        );

        reboot(&fr, full, "boot-2");
        let pic = ok(
            fr.run("post-interrupt-check"),
            &format!("{host}: post-interrupt-check"),
        );
        assert!(
            pic.all().contains(&format!("running kernel {full}")),
            "{}",
            pic.all()
        );

        let before = etc(&fr);
        let again = ok(fr.run("apply"), &format!("{host}: kernel install again"));
        assert!(!again.stdout.contains(" ~ "), "{}", again.all());
        let env = [
            ("NVIDIA_SETUP_INSTALL_KERNEL", "true"),
            ("NVIDIA_PIN_KERNEL", "true"),
            ("SKYHOOK_RESOURCE_ID", KERNEL_ID),
        ];
        let (code, plan) = skyhook_run(&fr, "apply", &[], &env);
        assert_eq!(code, 0, "{plan}");
        assert!(plan.contains("Plan: 0 to change, "), "{host}: {plan}");
        assert!(
            again
                .all()
                .contains(&format!("kernel {full} installed and running"))
        );
        assert_eq!(etc(&fr), before);

        // The second package of the README's pair: the kernel now meets the requirement.
        fr.unset_env("NVIDIA_SETUP_INSTALL_KERNEL");
        fr.unset_env("NVIDIA_PIN_KERNEL");
        let full_apply = ok(
            fr.run("apply"),
            &format!("{host}: full apply on the new kernel"),
        );
        assert!(
            full_apply
                .all()
                .contains(&format!("kernel {full} meets {full}"))
        );
    }
}

/// A running kernel of a newer upstream version with an older ABI number (6.17.0-1007
/// against 6.14.0-1018) is accepted with NVIDIA_SETUP_KERNEL_ALLOW_NEWER=true and refused
/// without it.
#[test]
fn nvidia_setup_allow_newer_compares_upstream_versions() {
    require_root!();
    let (mut fr, _mirror) = setup_node(
        "ubuntu-24.04-eks-x86_64",
        &[("service", "eks"), ("accelerator", "h100")],
    );
    fr.write("/usr/share/fakehost/kernel-release", "6.17.0-1007-aws\n");
    failed(
        fr.run("apply-check"),
        "exact",
        "current kernel 6.17.0-1007-aws does not match required 6.14.0-1018-aws",
    );
    fr.set_env("NVIDIA_SETUP_KERNEL_ALLOW_NEWER", "true");
    let run = failed(fr.run("apply-check"), "newer allowed", "problem(s)");
    assert!(
        run.all()
            .contains("kernel 6.17.0-1007-aws meets 6.14.0-1018-aws (newer allowed)"),
        "{}",
        run.all()
    );
}

/// apply-check lists every problem, as the README says: on a fresh node whose kernel is
/// not the package's, the kernel is the first problem and the others (nothing applied yet)
/// follow; the count covers them all. (Before: the kernel mismatch ended the check, the
/// other problems unlisted.)
#[test]
fn nvidia_setup_apply_check_lists_every_problem_a_wrong_kernel_too() {
    require_root!();
    let errors = |run: &Run| -> Vec<String> {
        run.all()
            .lines()
            .filter_map(|l| l.split_once("ERROR: ").map(|(_, e)| e.to_string()))
            .collect()
    };
    let (mut fr, _mirror) = setup_node(
        "ubuntu-24.04-eks-x86_64",
        &[("service", "eks"), ("accelerator", "h100")],
    );
    // The package's kernel running: the problems of a node nothing was applied to.
    let right = failed(fr.run("apply-check"), "fresh node", "problem(s)");
    let others = errors(&right);
    assert!(
        others.iter().any(|e| e.contains("chrony")),
        "{}",
        right.all()
    );
    // Another kernel running: the same problems, the kernel's first.
    fr.write("/usr/share/fakehost/kernel-release", "6.17.0-1007-aws\n");
    let wrong = failed(fr.run("apply-check"), "wrong kernel", "problem(s)");
    let kernel = "current kernel 6.17.0-1007-aws does not match required 6.14.0-1018-aws (exact match required). Set NVIDIA_SETUP_KERNEL_ALLOW_NEWER=true to allow a newer kernel, or NVIDIA_SETUP_INSTALL_KERNEL=true to install the exact kernel.";
    let mut want = vec![kernel.to_string()];
    want.extend(others.iter().cloned());
    assert_eq!(errors(&wrong), want, "{}", wrong.all());
    assert!(
        wrong.all().contains(&format!(
            "{} problem(s), the first: {kernel}",
            others.len() + 1
        )),
        "{}",
        wrong.all()
    );

    // The bash package's test hook is not honoured, and says so (README).
    fr.set_env("SKIP_SYSTEM_OPERATIONS", "true");
    let skip = failed(fr.run("apply-check"), "skip hook", "problem(s)");
    assert!(
        skip.all().contains(
            "WARN: SKIP_SYSTEM_OPERATIONS is set but this port does not honour it: every operation runs."
        ),
        "{}",
        skip.all()
    );
    assert_eq!(errors(&skip), want);
}

/// Unsupported hosts, missing or empty configMaps, an unknown combination and a bad flag
/// fail apply with a message naming them, and change nothing under /etc.
#[test]
fn nvidia_setup_bad_hosts_and_inputs_fail_clearly_and_change_nothing() {
    require_root!();
    let eks_h100: &[(&str, &str)] = &[("service", "eks"), ("accelerator", "h100")];
    // (host, configMaps, an environment variable, the message)
    type Case<'a> = (
        &'a str,
        &'a [(&'a str, &'a str)],
        Option<(&'a str, &'a str)>,
        &'a str,
    );
    let cases: &[Case] = &[
        (
            "ubuntu-22.04",
            eks_h100,
            None,
            "unsupported distribution: Ubuntu 22.04.5 LTS (ID=ubuntu, VERSION_ID=22.04); nvidia-setup supports Ubuntu 24.04",
        ),
        (
            "amazon-linux-2023",
            eks_h100,
            None,
            "unsupported distribution: Amazon Linux 2023.9.20251027 (ID=amzn, VERSION_ID=2023)",
        ),
        (
            "cos-117",
            eks_h100,
            None,
            "unsupported distribution: Container-Optimized OS from Google (ID=cos, VERSION_ID=117)",
        ),
        (
            "ubuntu-24.04-eks-x86_64",
            &[("accelerator", "h100")],
            None,
            "Expected config file service not found in configmaps directory.",
        ),
        (
            "ubuntu-24.04-eks-x86_64",
            &[("service", "eks"), ("accelerator", " \n")],
            None,
            "configMap \"accelerator\" is empty",
        ),
        (
            "ubuntu-24.04-eks-x86_64",
            &[("service", "gke"), ("accelerator", "h100")],
            None,
            "unsupported combination: service=gke accelerator=h100 (supported: eks-gb200, eks-h100)",
        ),
        (
            "ubuntu-24.04-eks-x86_64",
            eks_h100,
            Some(("NVIDIA_PIN_KERNEL", "yes")),
            "environment variable NVIDIA_PIN_KERNEL is \"yes\": expected true or false",
        ),
    ];
    for (host, configmaps, env, message) in cases {
        let (mut fr, _mirror) = setup_node(host, configmaps);
        if let Some((k, v)) = env {
            fr.set_env(k, v);
        }
        let etc_before = etc(&fr);
        for mode in ["apply", "apply-check"] {
            failed(fr.run(mode), &format!("{host} {mode}"), message);
        }
        assert_eq!(etc_but_skyhook(&fr), etc_before, "{message}");
        assert_eq!(stub_calls(&fr), "", "{message}: nothing ran");
    }
}
