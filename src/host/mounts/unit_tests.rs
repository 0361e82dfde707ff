//! Tests of the mount units (`mount::unit`, `bind`, `remove_unit`, `unit_name`) on throwaway
//! roots with the recording `systemctl` stub of [`TestHost::systemctl_stub`].

use std::path::Path;

use crate::host::ExecMode;
use crate::host::Host;
use crate::host::mounts::mount::MountState;
use crate::host::mounts::mount_tests::plan_of_every_mode;
use crate::host::mounts::unit::{self, UnitSpec};
use crate::host::tests::s;
use crate::host::testutil::TestHost;

/// Known names, as `systemd-escape --path --suffix=mount` (systemd 252) prints them; it also
/// refuses a `..` component.
#[test]
fn unit_names_follow_systemd_path_escaping() {
    for (path, want) in [
        ("/mnt/k8s-disks/0", "mnt-k8s\\x2ddisks-0.mount"),
        ("/var/lib/kubelet", "var-lib-kubelet.mount"),
        ("/var/log/pods", "var-log-pods.mount"),
        ("/var/lib/containerd", "var-lib-containerd.mount"),
        ("/", "-.mount"),
        ("//", "-.mount"),
        ("//var//log/./pods/", "var-log-pods.mount"),
        ("/.hidden/x.y", "\\x2ehidden-x.y.mount"),
        ("/a b/c\\d", "a\\x20b-c\\x5cd.mount"),
        ("/mnt/data_1:x", "mnt-data_1:x.mount"),
        ("/mnt/é", "mnt-\\xc3\\xa9.mount"),
        ("/home/~user+1", "home-\\x7euser\\x2b1.mount"),
    ] {
        assert_eq!(unit::unit_name(path).unwrap(), want, "{path}");
    }
    assert_eq!(
        unit::unit_name("mnt/x").unwrap_err().to_string(),
        "paths must be absolute: \"mnt/x\""
    );
    assert_eq!(
        unit::unit_name("/mnt/../x").unwrap_err().to_string(),
        "invalid mount point: \"/mnt/../x\" has a `..` component (a unit name is made from a normalized path)"
    );
    let long = format!("/{}", "a".repeat(250));
    assert_eq!(
        unit::unit_name(&long).unwrap_err().to_string(),
        format!(
            "invalid mount point: {long:?}: its unit name is 256 bytes, systemd takes at most 255"
        )
    );
}

fn raid_spec() -> UnitSpec {
    UnitSpec {
        description: Some("Mount EC2 Instance Store NVMe disk RAID0".into()),
        requires: vec!["dev-md-kubernetes.device".into()],
        after: vec!["dev-md-kubernetes.device".into()],
        options: "defaults,noatime".into(),
        ..UnitSpec::new("UUID=1b2c", "xfs")
    }
}

#[test]
fn render_writes_sections_and_keys_in_a_fixed_order() {
    assert_eq!(
        unit::render(Path::new("/mnt/k8s-disks"), &raid_spec()).unwrap(),
        "[Unit]\nDescription=Mount EC2 Instance Store NVMe disk RAID0\n\
         Requires=dev-md-kubernetes.device\nAfter=dev-md-kubernetes.device\n\n\
         [Mount]\nWhat=UUID=1b2c\nWhere=/mnt/k8s-disks\nType=xfs\nOptions=defaults,noatime\n\n\
         [Install]\nWantedBy=multi-user.target\n"
    );
    // Defaults: no Unit keys; `%` is escaped for systemd's specifiers.
    let spec = UnitSpec::new("/srv/100%", "none");
    assert_eq!(
        unit::render(Path::new("/a b"), &spec).unwrap(),
        "[Unit]\n\n[Mount]\nWhat=/srv/100%%\nWhere=/a b\nType=none\nOptions=defaults\n\n\
         [Install]\nWantedBy=multi-user.target\n"
    );
    let bad = |spec: UnitSpec| {
        unit::render(Path::new("/x"), &spec)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        bad(UnitSpec::new("/dev/sdb\nExecStart=/bin/sh", "xfs")),
        "invalid mount source (what): \"/dev/sdb\\nExecStart=/bin/sh\" (must be one non-empty line, not ending in a backslash)"
    );
    assert_eq!(
        bad(UnitSpec::new("/dev/sdb", "x fs")),
        "invalid filesystem type: \"x fs\" (must not contain whitespace)"
    );
    assert_eq!(
        bad(UnitSpec {
            after: vec!["a/b.service".into()],
            ..UnitSpec::new("/dev/sdb", "xfs")
        }),
        "invalid after unit: \"a/b.service\" (a unit name has no `/`)"
    );
    assert_eq!(
        bad(UnitSpec {
            wanted_by: vec![],
            ..UnitSpec::new("/dev/sdb", "xfs")
        }),
        "invalid wanted_by: no unit given (the mount unit would not start at boot)"
    );
}

/// A root with sh and the recording `systemctl` stub (unit state under `/state`).
fn unit_host() -> TestHost {
    let t = TestHost::new();
    t.systemctl_stub();
    t
}

const RAID_UNIT: &str = "/etc/systemd/system/mnt-k8s\\x2ddisks.mount";

/// [`plan_of_every_mode`]: plan and check change nothing and agree, apply does what the
/// plan said, the second apply and the check find nothing to do. Returns the plan's change
/// summaries, then its action summaries (after `|`).
fn every_mode(
    t: &TestHost,
    f: impl Fn(&mut Host) -> crate::host::root::error::Result<bool>,
) -> Vec<String> {
    let plan = plan_of_every_mode(t, f);
    let actions = plan.actions.iter().map(|a| format!("| {}", a.summary));
    plan.changes
        .iter()
        .map(|c| c.summary.clone())
        .chain(actions)
        .collect()
}

#[test]
fn unit_writes_the_file_creates_the_mount_point_reloads_enables_and_starts() {
    let t = unit_host();
    let planned = every_mode(&t, |h| unit::unit(h, "/mnt/k8s-disks", &raid_spec()));
    assert_eq!(
        planned,
        [
            format!("create {RAID_UNIT} (mode 0644)"),
            "create directory /mnt/k8s-disks (mode 0755)".into(),
            "enable service mnt-k8s\\x2ddisks.mount".into(),
            "start service mnt-k8s\\x2ddisks.mount".into(),
            "| systemctl daemon-reload".into(),
        ]
    );
    assert_eq!(
        t.read(RAID_UNIT),
        unit::render(Path::new("/mnt/k8s-disks"), &raid_spec()).unwrap()
    );
    assert!(t.p("/mnt/k8s-disks").is_dir());
    // Applied once: the reload ran before the first systemctl call that needed it.
    let calls: Vec<String> = t
        .calls()
        .into_iter()
        .filter(|c| !c.starts_with("systemctl is-"))
        .collect();
    assert_eq!(
        calls,
        s(&[
            "systemctl daemon-reload",
            "systemctl enable mnt-k8s\\x2ddisks.mount",
            "systemctl start mnt-k8s\\x2ddisks.mount",
        ])
    );

    // A changed spec: only the file and the reload (the unit is enabled and active).
    t.clear_calls();
    let mut h = t.host(ExecMode::Apply);
    let spec = UnitSpec {
        options: "defaults".into(),
        ..raid_spec()
    };
    assert!(unit::unit(&mut h, "/mnt/k8s-disks", &spec).unwrap());
    let rep = h.finish().unwrap();
    let summaries: Vec<&str> = rep.change_summaries();
    assert_eq!(summaries, [format!("update {RAID_UNIT}").as_str()]);
    assert_eq!(rep.actions[0].summary, "systemctl daemon-reload");
    assert!(t.read(RAID_UNIT).contains("\nOptions=defaults\n"));

    // The unit stopped behind our back: drift, and an apply starts it again.
    t.file("/state/mnt-k8s\\x2ddisks.mount.active", "no\n");
    let mut h = t.host(ExecMode::Check);
    assert!(unit::unit(&mut h, "/mnt/k8s-disks", &spec).unwrap());
    let rep = h.finish().unwrap();
    let drift: Vec<String> = rep.drift().iter().map(|c| c.summary.clone()).collect();
    assert_eq!(drift, ["start service mnt-k8s\\x2ddisks.mount"]);
}

#[test]
fn unit_state_present_writes_without_enabling_and_reloads_at_the_end() {
    let t = unit_host();
    let spec = UnitSpec {
        state: MountState::Present,
        ..raid_spec()
    };
    let planned = every_mode(&t, |h| unit::unit(h, "/mnt/k8s-disks", &spec));
    assert_eq!(
        planned,
        [
            format!("create {RAID_UNIT} (mode 0644)"),
            "create directory /mnt/k8s-disks (mode 0755)".into(),
            "| systemctl daemon-reload".into(),
        ]
    );
    assert_eq!(t.calls(), s(&["systemctl daemon-reload"]));
}

#[test]
fn bind_is_a_unit_of_type_none_with_bind_options() {
    let t = unit_host();
    let spec = UnitSpec {
        description: Some("Mount kubelet on EC2 Instance Store NVMe RAID0".into()),
        ..UnitSpec::new("", "")
    };
    every_mode(&t, |h| {
        unit::bind(h, "/mnt/k8s-disks/kubelet", "/var/lib/kubelet", &spec)
    });
    assert_eq!(
        t.read("/etc/systemd/system/var-lib-kubelet.mount"),
        "[Unit]\nDescription=Mount kubelet on EC2 Instance Store NVMe RAID0\n\n\
         [Mount]\nWhat=/mnt/k8s-disks/kubelet\nWhere=/var/lib/kubelet\nType=none\nOptions=bind\n\n\
         [Install]\nWantedBy=multi-user.target\n"
    );
    let ro = UnitSpec {
        options: "ro".into(),
        ..spec.clone()
    };
    let mut h = t.host(ExecMode::Plan);
    assert!(unit::bind(&mut h, "/srv/a", "/var/log/pods", &ro).unwrap());
    h.finish().unwrap();
    let mut h = t.host(ExecMode::Apply);
    unit::bind(&mut h, "/srv/a", "/var/log/pods", &ro).unwrap();
    h.finish().unwrap();
    assert!(
        t.read("/etc/systemd/system/var-log-pods.mount")
            .contains("\nType=none\nOptions=bind,ro\n")
    );
    let mut h = t.host(ExecMode::Plan);
    assert_eq!(
        unit::bind(&mut h, "srv/a", "/var/log/pods", &ro)
            .unwrap_err()
            .to_string(),
        "paths must be absolute: \"srv/a\""
    );
}

#[test]
fn remove_unit_stops_disables_removes_and_reloads() {
    let t = unit_host();
    let mut h = t.host(ExecMode::Apply);
    unit::unit(&mut h, "/mnt/k8s-disks", &raid_spec()).unwrap();
    h.finish().unwrap();
    t.clear_calls();
    let planned = every_mode(&t, |h| unit::remove_unit(h, "/mnt/k8s-disks"));
    assert_eq!(
        planned,
        [
            "stop service mnt-k8s\\x2ddisks.mount".to_string(),
            "disable service mnt-k8s\\x2ddisks.mount".into(),
            format!("remove {RAID_UNIT}"),
            "| systemctl daemon-reload".into(),
        ]
    );
    assert!(!t.p(RAID_UNIT).exists());
    assert!(t.p("/mnt/k8s-disks").is_dir(), "the mount point stays");
    let mut h = t.host(ExecMode::Plan);
    assert_eq!(
        unit::remove_unit(&mut h, "/").unwrap_err().to_string(),
        "invalid mount point: / cannot be managed"
    );
}
