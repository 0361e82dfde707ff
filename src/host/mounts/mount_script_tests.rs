//! The `mount` rows' tests through Rhai.

pub(crate) mod tests {
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// One call of each function of this file, for
    /// [`crate::script::host_api::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(crate) const SAMPLES: &[&str] = &[
        r#"mount::ensure("/data", #{source: "/dev/sdb1", fstype: "ext4"})"#,
        r#"mount::remove("/old")"#,
        r#"mount::is_mounted("/old")"#,
        r#"mount::info("/old")"#,
        r#"disk::list()"#,
        r#"disk::info("/dev/sdb")"#,
        r#"disk::fstype("/dev/sdb")"#,
        r#"disk::uuid("/dev/sdb")"#,
        r#"fs::mkfs("/dev/sdb", "xfs", #{options: ["-f"]})"#,
        r#"fs::mkfs("/dev/sdb", "xfs")"#,
        r#"raid::create("r0", ["/dev/sdb", "/dev/sdd"], #{level: 0})"#,
        r#"raid::info("/dev/md/r0")"#,
        r#"raid::scan()"#,
        r#"raid::assemble()"#,
        r#"mount::unit("/mnt/k8s-disks", #{what: "UUID=1b2c", type: "xfs"})"#,
        r#"mount::bind("/mnt/k8s-disks/kubelet", "/var/lib/kubelet")"#,
        r#"mount::bind("/mnt/k8s-disks/pods", "/var/log/pods", #{options: ["ro"]})"#,
        r#"mount::remove_unit("/mnt/old")"#,
        r#"mount::unit_name("/mnt/k8s-disks/0")"#,
    ];

    /// A host root with the sysfs, `/dev` and udev layout of a host with two NVMe
    /// namespaces (the first partitioned, its partition mounted at `/data` with an xfs
    /// filesystem udev knows) and an md array of the second, as the kernel lays them out:
    /// `/sys/class/block/*` symlinks into `/sys/devices`, `device` the controller's link,
    /// `/dev/disk/by-id` and `/dev/md/<name>` relative symlinks.
    pub(crate) fn block_root() -> TestHost {
        use std::os::unix::fs::symlink;
        let t = TestHost::new();
        let pci = "/sys/devices/pci0000:00/0000:00:1e.0/nvme";
        for (n, serial, sectors, dev) in [
            (1, "AWS11C6E2A9F0B3D4E5F", "3749999616", "259:0"),
            (2, "AWS21C6E2A9F0B3D4E5F", "3749999616", "259:2"),
        ] {
            let ctrl = format!("{pci}/nvme{n}");
            t.file(
                &format!("{ctrl}/model"),
                "Amazon EC2 NVMe Instance Storage        \n",
            );
            t.file(&format!("{ctrl}/serial"), &format!("{serial}\n"));
            let ns = format!("{ctrl}/nvme{n}n1");
            t.file(&format!("{ns}/size"), &format!("{sectors}\n"));
            t.file(&format!("{ns}/dev"), &format!("{dev}\n"));
            t.file(&format!("{ns}/wwid"), &format!("nvme.1d0f-{n}\n"));
            symlink(format!("../../nvme{n}"), t.p(&format!("{ns}/device"))).unwrap();
            t.block_device(&format!("/dev/nvme{n}n1"), n * 8);
        }
        let ns1 = format!("{pci}/nvme1/nvme1n1");
        t.file(&format!("{ns1}/nvme1n1p1/partition"), "1\n");
        t.file(&format!("{ns1}/nvme1n1p1/size"), "2048\n");
        t.file(&format!("{ns1}/nvme1n1p1/dev"), "259:1\n");
        t.block_device("/dev/nvme1n1p1", 9);
        t.file("/sys/devices/virtual/block/md127/size", "7499999232\n");
        t.file("/sys/devices/virtual/block/md127/dev", "9:127\n");
        t.file("/sys/devices/virtual/block/md127/md/level", "raid0\n");
        t.file("/sys/devices/virtual/block/md127/md/array_state", "clean\n");
        std::fs::create_dir_all(t.p("/sys/devices/virtual/block/md127/slaves")).unwrap();
        symlink(
            "../../../../pci0000:00/0000:00:1e.0/nvme/nvme2/nvme2n1",
            t.p("/sys/devices/virtual/block/md127/slaves/nvme2n1"),
        )
        .unwrap();

        t.block_device("/dev/md127", 127);
        std::fs::create_dir_all(t.p("/sys/class/block")).unwrap();
        // `/sys/class/block/x` -> `../../devices/...`
        let up = format!("../..{}", &pci["/sys".len()..]);
        for (name, target) in [
            ("nvme1n1", format!("{up}/nvme1/nvme1n1")),
            ("nvme1n1p1", format!("{up}/nvme1/nvme1n1/nvme1n1p1")),
            ("nvme2n1", format!("{up}/nvme2/nvme2n1")),
            ("md127", "../../devices/virtual/block/md127".to_string()),
        ] {
            symlink(&target, t.p(&format!("/sys/class/block/{name}"))).unwrap();
        }
        std::fs::create_dir_all(t.p("/dev/disk/by-id")).unwrap();
        std::fs::create_dir_all(t.p("/dev/md")).unwrap();
        for (link, target) in [
            (
                "/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS11C6E2A9F0B3D4E5F",
                "../../nvme1n1",
            ),
            (
                "/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS11C6E2A9F0B3D4E5F-part1",
                "../../nvme1n1p1",
            ),
            (
                "/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS21C6E2A9F0B3D4E5F",
                "../../nvme2n1",
            ),
            ("/dev/disk/by-id/md-name-kubernetes", "../../md127"),
            ("/dev/md/kubernetes", "../md127"),
        ] {
            symlink(target, t.p(link)).unwrap();
        }
        t.file(
            "/run/udev/data/b259:1",
            "S:disk/by-id/nvme-x-part1\nE:ID_FS_TYPE=xfs\nE:ID_FS_UUID=3f1c2a9e-5b7d-4e21-9a0c-6d8e7f9b1a2c\nE:ID_SERIAL_SHORT=ignored\n",
        );
        t.file(
            "/proc/1/mountinfo",
            "22 1 259:0 / / rw - ext4 /dev/root rw\n40 22 259:1 / /data rw,noatime - xfs /dev/nvme1n1p1 rw\n",
        );
        t
    }

    /// `lsblk` and `blkid` answering from `/fs/<name>` (`<fstype> <uuid>`), `mkfs.<t>`
    /// writing it, as the util-linux tools answer from the device itself.
    pub(crate) fn fs_stubs(t: &TestHost) {
        t.install_sh();
        std::fs::create_dir_all(t.p("/fs")).unwrap();
        t.stub(
            "lsblk",
            r#"for a; do d=$a; done; n=${d##*/}; [ -f /fs/$n ] && read ty u < /fs/$n; echo "$ty""#,
        );
        t.stub(
            "blkid",
            r#"for a; do d=$a; done; n=${d##*/}; [ -f /fs/$n ] || exit 2; read ty u < /fs/$n; case "$*" in *UUID*) echo $u ;; *) echo $ty ;; esac"#,
        );
        for ty in ["xfs", "ext4"] {
            t.stub(
                &format!("mkfs.{ty}"),
                &format!(
                    r#"for a; do d=$a; done; n=${{d##*/}}; echo "{ty} uuid-{ty}-$n" > /fs/$n"#
                ),
            );
        }
    }

    #[test]
    fn mount_functions_from_rhai_plan_and_errors() {
        let t = TestHost::new();
        t.file("/etc/fstab", "# empty\n");
        t.file("/proc/1/mountinfo", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n");
        let r = run(
            &t,
            ExecMode::Plan,
            r#"let c = mount::ensure("/data", #{source: "/dev/sdb1", fstype: "ext4", options: ["noatime", "nofail"], pass: 2});
    print(c);
    print(mount::is_mounted("/data"));
    let i = mount::info("/data");
    print(`${i.source} ${i.fstype} ${i.options}`);
    print(mount::info("/nothing"));
    print(mount::info("/").source);"#,
        )
        .ok();
        assert_eq!(
            r.stdout(),
            "true\ntrue\n/dev/sdb1 ext4 noatime,nofail\n\n/dev/sda1\n"
        );
        assert_eq!(
            r.report.changes[0].diff.as_deref(),
            Some(
                "--- a/etc/fstab\n+++ b/etc/fstab\n@@ -1 +1,2 @@\n # empty\n+/dev/sdb1 /data ext4 noatime,nofail 0 2\n"
            )
        );
        let r = run(
            &t,
            ExecMode::Plan,
            r#"mount::ensure("/data", #{source: "/dev/sdb1", fstype: "ext4", state: "gone"})"#,
        );
        assert!(
            r.error().ends_with(
                "mount::ensure: option state must be \"mounted\" or \"present\", got \"gone\""
            ),
            "{}",
            r.error()
        );
        let r = run(
            &t,
            ExecMode::Plan,
            r#"mount::ensure("/data", #{fstype: "ext4"})"#,
        );
        assert!(
            r.error()
                .ends_with("mount::ensure: option source is required (#{source, fstype})"),
            "{}",
            r.error()
        );
        let r = run(&t, ExecMode::Plan, r#"kmod::options("nouveau", 1)"#);
        assert!(
            r.error()
                .ends_with("kmod::options: opts must be a string, got i64 (or a map)"),
            "{}",
            r.error()
        );
    }
    /// A plan of `mount::unit` and `mount::bind` runs through after a service action, a
    /// package index refresh and an upgrade the plan did not run: none makes unit state
    /// unknown (only an install, removal or command does).
    #[test]
    fn mount_unit_plans_after_service_actions_and_an_update_or_upgrade() {
        let t = TestHost::new();
        apt_stubs(&t);
        t.systemctl_stub();
        let r = run(
            &t,
            ExecMode::Plan,
            r#"service::restart("chronyd"); pkg::update(); pkg::upgrade();
    print(mount::unit("/mnt/k8s-disks", #{what: "UUID=1b2c", type: "xfs"}));
    print(mount::bind("/mnt/k8s-disks/kubelet", "/var/lib/kubelet", #{unit: true}));
    print("end");"#,
        );
        assert_eq!(r.outcome.error.as_ref().map(|e| e.message.clone()), None);
        assert_eq!(r.stdout(), "true\ntrue\nend\n");
        assert!(!t.p("/etc/systemd/system/mnt-k8s\\x2ddisks.mount").exists());
    }

    /// The mount-unit calls from Rhai: options as strings or arrays, the unit written as
    /// given, the unit name, and clear errors for a missing or wrong option.
    #[test]
    fn mount_unit_functions_from_rhai() {
        let t = TestHost::new();
        t.systemctl_stub();
        let r = run(
            &t,
            ExecMode::Apply,
            r#"print(mount::unit_name("/mnt/k8s-disks/0"));
    print(mount::unit("/mnt/k8s-disks", #{what: "UUID=1b2c", type: "xfs", options: ["defaults", "noatime"],
        description: "RAID0", requires: "dev-md-kubernetes.device", after: ["dev-md-kubernetes.device"]}));
    print(mount::bind("/mnt/k8s-disks/kubelet", "/var/lib/kubelet", #{unit: true, state: "present"}));
    print(mount::unit("/mnt/k8s-disks", #{what: "UUID=1b2c", type: "xfs", options: "defaults,noatime",
        description: "RAID0", requires: ["dev-md-kubernetes.device"], after: "dev-md-kubernetes.device"}));"#,
        )
        .ok();
        assert_eq!(r.stdout(), "mnt-k8s\\x2ddisks-0.mount\ntrue\ntrue\nfalse\n");
        assert_eq!(
            t.read("/etc/systemd/system/mnt-k8s\\x2ddisks.mount"),
            "[Unit]\nDescription=RAID0\nRequires=dev-md-kubernetes.device\nAfter=dev-md-kubernetes.device\n\n\
             [Mount]\nWhat=UUID=1b2c\nWhere=/mnt/k8s-disks\nType=xfs\nOptions=defaults,noatime\n\n\
             [Install]\nWantedBy=multi-user.target\n"
        );
        assert!(
            t.read("/etc/systemd/system/var-lib-kubelet.mount")
                .contains("\nWhat=/mnt/k8s-disks/kubelet\nWhere=/var/lib/kubelet\nType=none\nOptions=bind\n")
        );
        // state "present": not enabled, not started.
        assert!(!t.p("/state/var-lib-kubelet.mount.active").exists());
        for (call, want) in [
            (
                r#"mount::unit("/x", #{type: "xfs"})"#,
                "mount::unit: option what is required (#{what, type})",
            ),
            (
                r#"mount::bind("/a", "/x", #{unit: false})"#,
                "mount::bind: option unit: false is not supported (a bind mount is kept as a systemd mount unit)",
            ),
            (
                r#"mount::unit("/x", #{what: "/a", type: "none", wanted_by: 1})"#,
                "mount::unit: option wanted_by must be a string or an array of strings, got i64",
            ),
            (
                r#"mount::unit_name("x")"#,
                "mount::unit_name: paths must be absolute: \"x\"",
            ),
        ] {
            let r = run(&t, ExecMode::Plan, call);
            assert!(r.error().ends_with(want), "{call}: {}", r.error());
        }
    }

    /// A call no overload takes names the function, the parameter and the type it wants,
    /// at the call's position, instead of Rhai's `Function not found: ... (&str | ...)`.
    #[test]
    fn wrong_argument_type_names_the_parameter_and_type() {
        let t = TestHost::new();
        t.file("/etc/fstab", "# empty\n");
        let r = run(
            &t,
            ExecMode::Plan,
            "let x = 1;\nmount::ensure(\"/data\", \"UUID=1234\")",
        );
        assert_eq!(
            r.error(),
            "main.rhai:2:1: mount::ensure: the 2nd argument (opts) must be an options map #{source, fstype, …}, got a string"
        );
        let r = run(&t, ExecMode::Plan, "fs::write(1, \"x\")");
        assert!(
            r.error()
                .ends_with("fs::write: the 1st argument (path) must be a string, got an int"),
            "{}",
            r.error()
        );
        let r = run(&t, ExecMode::Plan, "mount::remove()");
        assert!(
            r.error()
                .ends_with("mount::remove expects 1 argument, got 0"),
            "{}",
            r.error()
        );
    }

    /// An mdadm answering from `/md-members` (what `--create` recorded), as mdadm reads an
    /// array's superblocks: `--create` makes `/dev/md/<name>`, `--detail` prints the level,
    /// state and member table, `--detail --scan` one ARRAY line.
    fn mdadm_stub(t: &TestHost) {
        std::fs::create_dir_all(t.p("/dev/md")).unwrap();
        t.install("/usr/bin/mknod");
        t.stub(
            "mdadm",
            r#"case "$1" in
  --create) for a; do case $a in /dev/md/*) md=$a ;; /dev/*) echo $a >> /md-members ;; esac; done; mknod "$md" b 240 200 ;;
  --detail)
    if [ "$2" = --scan ]; then [ -f /md-members ] && echo "ARRAY /dev/md/r0 metadata=1.2 name=node:r0"; exit 0; fi
    [ -e "$2" ] || { echo "mdadm: cannot open $2" >&2; exit 1; }
    echo "        Raid Level : raid0"; echo "             State : clean"
    echo "    Number   Major   Minor   RaidDevice State"
    i=0; while read d; do echo "       $i       8       $i        $i      active sync   $d"; i=$((i+1)); done < /md-members ;;
  --assemble) exit 1 ;;
esac"#,
        );
    }

    #[test]
    fn disk_list_reads_sysfs_by_id_udev_and_the_mount_table() {
        let t = block_root();
        fs_stubs(&t);
        let r = run(
            &t,
            ExecMode::Plan,
            r#"for d in disk::list() {
    print(`${d.name}|${d.path}|${d.kind}|${d.size}|${d.model}|${d.serial}|${d.by_id}|${d.fstype}|${d.uuid}|${d.mountpoints}`);
}"#,
        )
        .ok();
        let by_id = "/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS";
        assert_eq!(
            r.stdout(),
            format!(
                "md127|/dev/md127|md|3839999606784|||[\"/dev/disk/by-id/md-name-kubernetes\"]|||[]
nvme1n1|/dev/nvme1n1|disk|1919999803392|Amazon EC2 NVMe Instance Storage|AWS11C6E2A9F0B3D4E5F|[\"{by_id}11C6E2A9F0B3D4E5F\"]|||[\"/\"]
nvme1n1p1|/dev/nvme1n1p1|part|1048576|Amazon EC2 NVMe Instance Storage|AWS11C6E2A9F0B3D4E5F|[\"{by_id}11C6E2A9F0B3D4E5F-part1\"]|xfs|3f1c2a9e-5b7d-4e21-9a0c-6d8e7f9b1a2c|[\"/data\"]
nvme2n1|/dev/nvme2n1|disk|1919999803392|Amazon EC2 NVMe Instance Storage|AWS21C6E2A9F0B3D4E5F|[\"{by_id}21C6E2A9F0B3D4E5F\"]|||[]
"
            )
        );
        assert!(r.report.changes.is_empty() && r.report.actions.is_empty());
        // Without sysfs: nothing.
        let r = run(&TestHost::new(), ExecMode::Plan, "print(disk::list())").ok();
        assert_eq!(r.stdout(), "[]\n");
    }

    #[test]
    fn disk_info_fstype_uuid_resolve_links_and_reject_bad_devices() {
        let t = block_root();
        fs_stubs(&t);
        std::fs::write(t.p("/fs/nvme2n1"), "ext4 e-1\n").unwrap();
        let r = run(
            &t,
            ExecMode::Apply,
            r#"let i = disk::info("/dev/md/kubernetes");
print(`${i.name} ${i.path} ${i.kind}`);
let i = disk::info("/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS21C6E2A9F0B3D4E5F");
print(`${i.name} ${i.serial} ${i.fstype} ${i.uuid}`);
print(disk::info("/dev/nvme9n1"));
print(disk::fstype("/dev/nvme1n1p1") + " " + disk::uuid("/dev/nvme1n1p1"));
print(disk::fstype("/dev/nvme2n1") + " " + disk::uuid("/dev/nvme2n1"));
print(`[${disk::fstype("/dev/nvme1n1")}] [${disk::uuid("/dev/nvme1n1")}]`);
let a = raid::info("/dev/md/kubernetes");
print(`${a.path} ${a.level} ${a.devices} ${a.state}`);
print(raid::info("/dev/nvme1n1"));"#,
        )
        .ok();
        assert_eq!(
            r.stdout(),
            "md127 /dev/md127 md\nnvme2n1 AWS21C6E2A9F0B3D4E5F ext4 e-1\n\nxfs 3f1c2a9e-5b7d-4e21-9a0c-6d8e7f9b1a2c\next4 e-1\n[] []\n/dev/md/kubernetes raid0 [\"/dev/nvme2n1\"] clean\n\n"
        );
        for (call, want) in [
            (
                r#"disk::fstype("/etc/passwd")"#,
                "disk::fstype: invalid device: \"/etc/passwd\" is not a device path under /dev",
            ),
            (
                r#"disk::info("/dev/../etc/shadow")"#,
                "disk::info: invalid device: \"/dev/../etc/shadow\" is not a device path under /dev",
            ),
            (
                r#"disk::uuid("/dev/nvme9n1")"#,
                "disk::uuid: /dev/nvme9n1 does not exist",
            ),
            (
                r#"raid::info("dev/md0")"#,
                "raid::info: paths must be absolute: \"dev/md0\"",
            ),
        ] {
            let r = run(&t, ExecMode::Plan, call);
            assert!(r.error().ends_with(want), "{call}: {}", r.error());
        }
    }

    /// A new array and its filesystem through every mode: the plan's two lines, drift in a
    /// check, mdadm and mkfs run once by apply, nothing the second time.
    #[test]
    fn raid_create_and_mkfs_in_every_mode() {
        let t = TestHost::new();
        fs_stubs(&t);
        mdadm_stub(&t);
        t.block_device("/dev/sdb", 16);
        t.block_device("/dev/sdc", 32);
        std::fs::create_dir_all(t.p("/dev/disk/by-id")).unwrap();
        std::os::unix::fs::symlink("../../sdc", t.p("/dev/disk/by-id/ata-disk-2")).unwrap();
        let plan = all_modes(
            &t,
            &[
                r#"raid::create("r0", ["/dev/sdb", "/dev/disk/by-id/ata-disk-2"], #{level: 0, metadata: "1.2"})"#,
                r#"fs::mkfs("/dev/md/r0", "xfs", #{options: ["-f", "-l", "su=8b"]})"#,
            ],
        );
        let lines: Vec<&str> = plan.change_summaries();
        assert_eq!(
            lines,
            [
                "raid /dev/md/r0 level 0 from [/dev/sdb, /dev/sdc]: mdadm --create --run --force --verbose /dev/md/r0 --level=0 --name=r0 --raid-devices=2 --metadata=1.2 /dev/sdb /dev/disk/by-id/ata-disk-2",
                "mkfs xfs on /dev/md/r0: mkfs.xfs -f -l su=8b /dev/md/r0",
            ]
        );
        let made: Vec<String> = t
            .calls()
            .into_iter()
            .filter(|c| c.starts_with("mdadm --create") || c.starts_with("mkfs"))
            .collect();
        assert_eq!(
            made,
            [
                "mdadm --create --run --force --verbose /dev/md/r0 --level=0 --name=r0 --raid-devices=2 --metadata=1.2 /dev/sdb /dev/disk/by-id/ata-disk-2",
                "mkfs.xfs -f -l su=8b /dev/md/r0",
            ]
        );
        assert_eq!(t.read("/fs/r0"), "xfs uuid-xfs-r0\n");
        let r = run(
            &t,
            ExecMode::Apply,
            r#"let a = raid::info("/dev/md/r0");
print(`${a.level} ${a.devices} ${a.state}`);
print(raid::scan());
print(disk::uuid("/dev/md/r0"));
print(raid::assemble());"#,
        )
        .ok();
        assert_eq!(
            r.stdout(),
            "raid0 [\"/dev/disk/by-id/ata-disk-2\", \"/dev/sdb\"] clean\nARRAY /dev/md/r0 metadata=1.2 name=node:r0\n\nuuid-xfs-r0\nfalse\n"
        );
    }

    /// In a plan, calls after a planned array and filesystem see them.
    #[test]
    fn a_plan_sees_its_planned_array_and_filesystem() {
        let t = TestHost::new();
        fs_stubs(&t);
        mdadm_stub(&t);
        t.block_device("/dev/sdb", 16);
        let r = run(
            &t,
            ExecMode::Plan,
            r#"print(raid::info("/dev/md/r0"));
print(raid::create("r0", ["/dev/sdb"], #{}));
let a = raid::info("/dev/md/r0");
print(`${a.level} ${a.devices} ${a.state}`);
print(`[${disk::fstype("/dev/md/r0")}]`);
print(fs::mkfs("/dev/md/r0", "xfs"));
print(disk::fstype("/dev/md/r0"));
print(fs::mkfs("/dev/md/r0", "xfs"));
print(raid::create("r0", ["/dev/sdb"], #{level: 0}));
print(disk::info("/dev/md/r0").kind);"#,
        )
        .ok();
        assert_eq!(
            r.stdout(),
            "\ntrue\nraid0 [\"/dev/sdb\"] planned\n[]\ntrue\nxfs\nfalse\nfalse\nmd\n"
        );
        assert_eq!(r.report.changes.len(), 2);
        assert_eq!(r.report.unchanged, 2);
        assert!(!t.p("/dev/md/r0").exists());
    }

    #[test]
    fn raid_create_unchanged_conflict_and_member_errors() {
        let t = block_root();
        fs_stubs(&t);
        let r = run(
            &t,
            ExecMode::Check,
            r#"raid::create("kubernetes", ["/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS21C6E2A9F0B3D4E5F"], #{level: 0})"#,
        )
        .ok();
        assert!(r.report.drift().is_empty());
        assert_eq!(r.report.unchanged, 1);
        std::fs::write(t.p("/fs/nvme2n1"), "xfs u\n").unwrap();
        for (call, want) in [
            (
                r#"raid::create("kubernetes", ["/dev/nvme1n1"], #{})"#,
                "raid::create: invalid raid array: /dev/md/kubernetes exists as raid0 from [/dev/nvme2n1], not level 0 from [/dev/nvme1n1] (remove it first)",
            ),
            (
                r#"raid::create("kubernetes", ["/dev/nvme2n1"], #{level: 1})"#,
                "raid::create: invalid raid array: /dev/md/kubernetes exists as raid0 from [/dev/nvme2n1], not level 1 from [/dev/nvme2n1] (remove it first)",
            ),
            (
                r#"raid::create("data", ["/dev/nvme1n1p1"], #{})"#,
                "raid::create: invalid raid devices: member /dev/nvme1n1p1 is mounted at /data (force: true does not override that)",
            ),
            (
                r#"raid::create("data", ["/dev/nvme2n1"], #{})"#,
                "raid::create: invalid raid devices: member /dev/nvme2n1 has a filesystem: xfs (force: true creates /dev/md/data over it)",
            ),
            (
                r#"raid::create("data", ["/dev/nvme9n1"], #{})"#,
                "raid::create: invalid raid devices: member /dev/nvme9n1 of /dev/md/data does not exist",
            ),
            (
                r#"raid::create("data", ["/dev/nvme1n1", "/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS11C6E2A9F0B3D4E5F"], #{})"#,
                "raid::create: invalid raid devices: /dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS11C6E2A9F0B3D4E5F and /dev/nvme1n1 are the same device /dev/nvme1n1",
            ),
            (
                r#"raid::create("data", [], #{})"#,
                "raid::create: invalid raid devices: /dev/md/data needs at least one member device",
            ),
            (
                r#"raid::create("a/b", ["/dev/nvme1n1"], #{})"#,
                "raid::create: invalid array name: \"a/b\" (letters, digits, _, - and . only, e.g. \"kubernetes\")",
            ),
            (
                r#"raid::create("data", ["/dev/nvme1n1"], #{level: "raid0"})"#,
                "raid::create: invalid raid level: \"raid0\" (a number: 0, 1, 5, 10)",
            ),
            (
                r#"raid::create("data", ["/dev/nvme1n1"], #{chunk: 512})"#,
                "raid::create: unknown option \"chunk\" (expected one of: level, metadata, force)",
            ),
        ] {
            let r = run(&t, ExecMode::Plan, call);
            assert!(r.error().ends_with(want), "{call}: {}", r.error());
            assert!(r.report.changes.is_empty(), "{call}");
        }
        // force: over the member's filesystem.
        let r = run(
            &t,
            ExecMode::Plan,
            r#"raid::create("data", ["/dev/nvme2n1"], #{force: true})"#,
        )
        .ok();
        assert_eq!(r.report.changes.len(), 1);
    }

    /// `fs::mkfs` and `raid::create` write only to a block device inside the root's `/dev`
    /// that nothing uses, `force` or not: a `/dev` name that is a symlink to a regular file
    /// (inside `/dev` or out of it), a disk whose partition is mounted, a disk held by an md
    /// array are each refused naming the device, the partition and its mount point, the
    /// holder; nothing is planned.
    #[test]
    fn mkfs_and_raid_refuse_what_is_not_an_unused_block_device() {
        use std::os::unix::fs::symlink;
        let t = block_root();
        fs_stubs(&t);
        mdadm_stub(&t);
        // The kernel's link from a member to its array, and the root filesystem on another
        // disk than nvme1n1, whose partition is mounted at /data.
        let nvme2n1 = "/sys/devices/pci0000:00/0000:00:1e.0/nvme/nvme2/nvme2n1";
        std::fs::create_dir_all(t.p(&format!("{nvme2n1}/holders"))).unwrap();
        symlink(
            "../../../../../../virtual/block/md127",
            t.p(&format!("{nvme2n1}/holders/md127")),
        )
        .unwrap();
        let mountinfo = t.read("/proc/1/mountinfo");
        t.file(
            "/proc/1/mountinfo",
            &mountinfo.replace(
                "22 1 259:0 / / rw - ext4 /dev/root rw",
                "22 1 8:1 / / rw - ext4 /dev/sda1 rw",
            ),
        );
        t.file("/dev/sdx.img", "");
        symlink("sdx.img", t.p("/dev/sdx")).unwrap();
        t.file("/var/lib/disk.img", "");
        symlink("/var/lib/disk.img", t.p("/dev/sdy")).unwrap();
        let never = "(a filesystem is never made on a device in use, not even with force)";
        for (call, want) in [
            (
                r#"fs::mkfs("/dev/sdx", "xfs")"#,
                "fs::mkfs: invalid device: /dev/sdx is not a block device (a regular file)"
                    .to_string(),
            ),
            (
                r#"fs::mkfs("/dev/sdy", "xfs", #{force: true, options: ["-f"]})"#,
                "fs::mkfs: invalid device: /dev/sdy leads out of /dev (a symlink to outside it)"
                    .to_string(),
            ),
            (
                r#"raid::create("r1", ["/dev/sdx"], #{force: true})"#,
                "raid::create: invalid raid devices: member /dev/sdx is not a block device (a regular file)"
                    .to_string(),
            ),
            (
                r#"fs::mkfs("/dev/nvme1n1", "xfs", #{force: true, options: ["-f"]})"#,
                format!(
                    "fs::mkfs: invalid device: /dev/nvme1n1 has partition /dev/nvme1n1p1 mounted at /data {never}"
                ),
            ),
            (
                r#"fs::mkfs("/dev/nvme2n1", "xfs", #{force: true, options: ["-f"]})"#,
                format!("fs::mkfs: invalid device: /dev/nvme2n1 is held by /dev/md127 {never}"),
            ),
            (
                r#"raid::create("r1", ["/dev/nvme2n1"], #{force: true})"#,
                "raid::create: invalid raid devices: member /dev/nvme2n1 is held by /dev/md127 (force: true does not override that)"
                    .to_string(),
            ),
        ] {
            let r = run(&t, ExecMode::Plan, call);
            assert!(r.error().ends_with(&want), "{call}: {}", r.error());
            assert!(r.report.changes.is_empty(), "{call}");
        }
        // The root filesystem's disk is mounted itself (by major:minor, /dev/root).
        t.file("/proc/1/mountinfo", &mountinfo);
        let r = run(
            &t,
            ExecMode::Plan,
            r#"raid::create("r1", ["/dev/nvme1n1"], #{force: true})"#,
        );
        assert!(
            r.error().ends_with(
                "raid::create: invalid raid devices: member /dev/nvme1n1 is mounted at / (force: true does not override that)"
            ),
            "{}",
            r.error()
        );
    }

    /// The device is the kernel's, not its name: a block node the step made under another
    /// name in the root's `/dev` (`mknod /dev/alias b <disk's major:minor>`) is the disk,
    /// whose partition is mounted at `/data` and whose other disk an md array holds: both
    /// refused as through their kernel names, by `fs::mkfs` and `raid::create`, `force` or
    /// not; nothing runs. (The layout's sysfs `dev` numbers are those of its 240:N nodes.)
    #[test]
    fn mkfs_and_raid_refuse_a_disk_by_another_node_name() {
        use std::os::unix::fs::symlink;
        let t = block_root();
        fs_stubs(&t);
        mdadm_stub(&t);
        let pci = "/sys/devices/pci0000:00/0000:00:1e.0/nvme";
        t.file(&format!("{pci}/nvme1/nvme1n1/dev"), "240:8\n");
        t.file(&format!("{pci}/nvme1/nvme1n1/nvme1n1p1/dev"), "240:9\n");
        t.file(&format!("{pci}/nvme2/nvme2n1/dev"), "240:16\n");
        std::fs::create_dir_all(t.p(&format!("{pci}/nvme2/nvme2n1/holders"))).unwrap();
        symlink(
            "../../../../../../virtual/block/md127",
            t.p(&format!("{pci}/nvme2/nvme2n1/holders/md127")),
        )
        .unwrap();
        t.file(
            "/proc/1/mountinfo",
            "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 240:9 / /data rw,noatime - xfs /dev/nvme1n1p1 rw\n",
        );
        t.block_device("/dev/alias", 8);
        t.block_device("/dev/alias2", 16);
        t.clear_calls();
        for (call, want) in [
            (
                r#"fs::mkfs("/dev/alias", "xfs", #{force: true, options: ["-f"]})"#,
                "fs::mkfs: invalid device: /dev/alias has partition /dev/nvme1n1p1 mounted at /data (a filesystem is never made on a device in use, not even with force)",
            ),
            (
                r#"raid::create("r1", ["/dev/alias"], #{force: true})"#,
                "raid::create: invalid raid devices: member /dev/alias has partition /dev/nvme1n1p1 mounted at /data (force: true does not override that)",
            ),
            (
                r#"fs::mkfs("/dev/alias2", "xfs", #{force: true, options: ["-f"]})"#,
                "fs::mkfs: invalid device: /dev/alias2 is held by /dev/md127 (a filesystem is never made on a device in use, not even with force)",
            ),
        ] {
            for mode in [ExecMode::Plan, ExecMode::Apply] {
                let r = run(&t, mode, call);
                assert!(r.error().ends_with(want), "{call}: {}", r.error());
                assert!(r.report.changes.is_empty(), "{call}");
            }
        }
        assert!(
            !t.calls()
                .iter()
                .any(|c| c.starts_with("mkfs") || c.starts_with("mdadm --create")),
            "{:?}",
            t.calls()
        );
    }

    #[test]
    fn mkfs_none_same_other_force_and_mounted() {
        let t = block_root();
        fs_stubs(&t);
        std::fs::write(t.p("/fs/nvme2n1"), "ext4 e-1\n").unwrap();
        t.clear_calls();
        let r = run(
            &t,
            ExecMode::Apply,
            r#"print(fs::mkfs("/dev/nvme2n1", "ext4", #{options: ["-F"]}))"#,
        )
        .ok();
        assert_eq!(r.stdout(), "false\n");
        assert!(
            !t.calls().iter().any(|c| c.starts_with("mkfs")),
            "{:?}",
            t.calls()
        );
        let r = run(&t, ExecMode::Apply, r#"fs::mkfs("/dev/nvme2n1", "xfs")"#);
        assert!(
            r.error().ends_with("fs::mkfs: invalid device: /dev/nvme2n1 already has a filesystem: ext4, not xfs (force: true replaces it)"),
            "{}",
            r.error()
        );
        assert_eq!(t.read("/fs/nvme2n1"), "ext4 e-1\n");
        let by_id = "/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS21C6E2A9F0B3D4E5F";
        let call = format!(r#"fs::mkfs("{by_id}", "xfs", #{{options: ["-f"], force: true}})"#);
        let plan = run(&t, ExecMode::Plan, &call).ok();
        assert_eq!(
            plan.report.changes[0].summary,
            format!("mkfs xfs on /dev/nvme2n1 (replacing ext4): mkfs.xfs -f {by_id}")
        );
        // (The stub mkfs does not follow links: apply names the device itself.)
        let call = r#"fs::mkfs("/dev/nvme2n1", "xfs", #{options: ["-f"], force: true})"#;
        let check = run(&t, ExecMode::Check, call).ok();
        assert_eq!(check.report.drift().len(), 1);
        run(&t, ExecMode::Apply, call).ok();
        assert_eq!(t.read("/fs/nvme2n1"), "xfs uuid-xfs-nvme2n1\n");
        let again = run(&t, ExecMode::Apply, call).ok();
        assert!(again.report.changes.is_empty());
        assert_eq!(again.report.unchanged, 1);
        // Never on a mounted device, even with force; a bad type; a missing device.
        for (call, want) in [
            (
                r#"fs::mkfs("/dev/nvme1n1p1", "xfs", #{force: true})"#,
                "fs::mkfs: invalid device: /dev/nvme1n1p1 is mounted at /data (a filesystem is never made on a device in use, not even with force)",
            ),
            (
                r#"fs::mkfs("/dev/nvme1n1", "xfs", #{force: true})"#,
                "fs::mkfs: invalid device: /dev/nvme1n1 is mounted at / (a filesystem is never made on a device in use, not even with force)",
            ),
            (
                r#"fs::mkfs("/dev/nvme1n1", "x fs")"#,
                "fs::mkfs: invalid filesystem type: \"x fs\" (letters, digits and _ only, e.g. \"xfs\")",
            ),
            (
                r#"fs::mkfs("/dev/nvme9n1", "xfs")"#,
                "fs::mkfs: invalid device: /dev/nvme9n1 does not exist",
            ),
            (
                r#"fs::mkfs("/tmp/img", "xfs")"#,
                "fs::mkfs: invalid device: \"/tmp/img\" is not a device path under /dev",
            ),
        ] {
            let r = run(&t, ExecMode::Plan, call);
            assert!(r.error().ends_with(want), "{call}: {}", r.error());
        }
    }
}
