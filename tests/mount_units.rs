//! `mount::unit`, `mount::bind` and `mount::remove_unit` through the library on the fake EKS
//! node of `tests/fakehosts` (`ubuntu-24.04-eks-x86_64`, whose `systemctl` stub knows `.mount`
//! units): the unit files nvidia-setup's local-disk setup writes, enabled and started once,
//! a second apply and a check that find nothing to do, and the layer's own `systemd-escape`
//! agreeing with `mount::unit_name`.

use std::fs;
use std::path::Path;

use skyhook::host::mounts::mount::MountState;
use skyhook::host::mounts::unit::{self, UnitSpec};
use skyhook::host::root::HostRoot;
use skyhook::host::{ExecMode, Host, HostOptions, Report};

use crate::nvidia_ports::fake_host;
use crate::util::FakeRoot;

const HOST: &str = "ubuntu-24.04-eks-x86_64";

/// The fake EKS node over a minimal root, as every test sees it ([`fake_host`]).
fn eks_node() -> FakeRoot {
    fake_host(HOST)
}

fn session(fr: &FakeRoot, mode: ExecMode) -> Host {
    let opts = HostOptions {
        env: vec![(
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        )],
        ..HostOptions::default()
    };
    Host::new(HostRoot::open(fr.root()).unwrap(), mode, opts)
}

/// nvidia-setup's three units: the RAID0 array at `/mnt/k8s-disks` and the kubelet and pod
/// log bind mounts onto it.
fn setup_units(h: &mut Host) -> Vec<bool> {
    let raid = UnitSpec {
        description: Some("Mount EC2 Instance Store NVMe disk RAID0".into()),
        requires: vec!["dev-md-kubernetes.device".into()],
        after: vec!["dev-md-kubernetes.device".into()],
        options: "defaults,noatime".into(),
        ..UnitSpec::new("UUID=0f6c2b1e-5d1a-4c3e-9a55-6d2f7c1b8e01", "xfs")
    };
    let bind = |what: &str| UnitSpec {
        description: Some(format!("Mount {what} on EC2 Instance Store NVMe RAID0")),
        ..UnitSpec::new("", "")
    };
    vec![
        unit::unit(h, "/mnt/k8s-disks", &raid).unwrap(),
        unit::bind(
            h,
            "/mnt/k8s-disks/kubelet",
            "/var/lib/kubelet",
            &bind("kubelet"),
        )
        .unwrap(),
        unit::bind(h, "/mnt/k8s-disks/pods", "/var/log/pods", &bind("pods")).unwrap(),
    ]
}

fn finish(h: Host) -> Report {
    h.finish().unwrap()
}

fn calls(fr: &FakeRoot) -> Vec<String> {
    fr.read_opt("/var/log/stub-calls.log")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("systemctl ") && !l.starts_with("systemctl is-"))
        .map(String::from)
        .collect()
}

#[test]
fn setup_mount_units_on_the_eks_node() {
    require_root!();
    let fr = eks_node();

    // The layer's systemd-escape prints the names mount::unit_name computes.
    for p in [
        "/mnt/k8s-disks",
        "/mnt/k8s-disks/0",
        "/var/lib/kubelet",
        "/var/log/pods",
    ] {
        let out = std::process::Command::new("chroot")
            .arg(fr.root())
            .args([
                "/usr/local/bin/systemd-escape",
                "--path",
                "--suffix=mount",
                p,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8(out.stdout).unwrap().trim_end(),
            unit::unit_name(p).unwrap()
        );
    }

    let mut h = session(&fr, ExecMode::Check);
    assert_eq!(setup_units(&mut h), [true, true, true]);
    let drift: Vec<String> = finish(h)
        .drift()
        .iter()
        .map(|c| c.summary.clone())
        .collect();
    // Per unit: the file, the mount point (the node has /var/lib/kubelet and /var/log/pods),
    // enable, start.
    assert_eq!(
        drift,
        [
            "create /etc/systemd/system/mnt-k8s\\x2ddisks.mount (mode 0644)",
            "create directory /mnt/k8s-disks (mode 0755)",
            "enable service mnt-k8s\\x2ddisks.mount",
            "start service mnt-k8s\\x2ddisks.mount",
            "create /etc/systemd/system/var-lib-kubelet.mount (mode 0644)",
            "enable service var-lib-kubelet.mount",
            "start service var-lib-kubelet.mount",
            "create /etc/systemd/system/var-log-pods.mount (mode 0644)",
            "enable service var-log-pods.mount",
            "start service var-log-pods.mount",
        ]
    );

    let mut h = session(&fr, ExecMode::Apply);
    assert_eq!(setup_units(&mut h), [true, true, true]);
    finish(h);
    assert_eq!(
        fr.read("/etc/systemd/system/mnt-k8s\\x2ddisks.mount"),
        "[Unit]\nDescription=Mount EC2 Instance Store NVMe disk RAID0\n\
         Requires=dev-md-kubernetes.device\nAfter=dev-md-kubernetes.device\n\n\
         [Mount]\nWhat=UUID=0f6c2b1e-5d1a-4c3e-9a55-6d2f7c1b8e01\nWhere=/mnt/k8s-disks\n\
         Type=xfs\nOptions=defaults,noatime\n\n[Install]\nWantedBy=multi-user.target\n"
    );
    assert_eq!(
        fr.read("/etc/systemd/system/var-log-pods.mount"),
        "[Unit]\nDescription=Mount pods on EC2 Instance Store NVMe RAID0\n\n\
         [Mount]\nWhat=/mnt/k8s-disks/pods\nWhere=/var/log/pods\nType=none\nOptions=bind\n\n\
         [Install]\nWantedBy=multi-user.target\n"
    );
    // Each new file's daemon-reload runs before its unit's enable; each unit enabled and
    // started once.
    assert_eq!(
        calls(&fr),
        [
            "systemctl daemon-reload",
            "systemctl enable mnt-k8s\\x2ddisks.mount",
            "systemctl start mnt-k8s\\x2ddisks.mount",
            "systemctl daemon-reload",
            "systemctl enable var-lib-kubelet.mount",
            "systemctl start var-lib-kubelet.mount",
            "systemctl daemon-reload",
            "systemctl enable var-log-pods.mount",
            "systemctl start var-log-pods.mount",
        ]
    );
    for name in [
        "mnt-k8s\\x2ddisks.mount",
        "var-lib-kubelet.mount",
        "var-log-pods.mount",
    ] {
        assert!(
            fr.exists(&format!("/run/fake-systemd/active/{name}")),
            "{name}"
        );
        let wants = fr.host(&format!(
            "/etc/systemd/system/multi-user.target.wants/{name}"
        ));
        assert_eq!(
            fs::read_link(&wants).unwrap(),
            Path::new("/etc/systemd/system").join(name)
        );
    }
    for dir in ["/mnt/k8s-disks", "/var/lib/kubelet", "/var/log/pods"] {
        assert!(fr.host(dir).is_dir(), "{dir}");
    }

    // Again: nothing to do, nothing run; a check finds no drift.
    let before = calls(&fr).len();
    let mut h = session(&fr, ExecMode::Apply);
    assert_eq!(setup_units(&mut h), [false, false, false]);
    assert!(finish(h).changes.is_empty());
    let mut h = session(&fr, ExecMode::Check);
    setup_units(&mut h);
    assert!(finish(h).drift().is_empty());
    assert_eq!(calls(&fr).len(), before);

    // Removing the pod log bind: stopped, disabled, file gone, reloaded.
    let mut h = session(&fr, ExecMode::Apply);
    assert!(unit::remove_unit(&mut h, "/var/log/pods").unwrap());
    finish(h);
    assert_eq!(
        calls(&fr)[before..],
        [
            "systemctl stop var-log-pods.mount",
            "systemctl disable var-log-pods.mount",
            "systemctl daemon-reload",
        ]
    );
    assert!(!fr.exists("/etc/systemd/system/var-log-pods.mount"));
    assert!(!fr.exists("/run/fake-systemd/active/var-log-pods.mount"));

    // state "present" on a fresh unit: file and reload only.
    let mut h = session(&fr, ExecMode::Apply);
    let present = UnitSpec {
        state: MountState::Present,
        ..UnitSpec::new("/dev/nvme1n1", "xfs")
    };
    assert!(unit::unit(&mut h, "/mnt/k8s-disks/1", &present).unwrap());
    finish(h);
    assert_eq!(calls(&fr).last().unwrap(), "systemctl daemon-reload");
    assert!(!fr.exists("/run/fake-systemd/active/mnt-k8s\\x2ddisks-1.mount"));
}
