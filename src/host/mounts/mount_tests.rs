//! Tests of `mount::` and `kmod::` on throwaway roots: recording stubs for `mount`, `umount`,
//! `modprobe`, `update-initramfs` and `dracut`, a fake `/proc/1/mountinfo` and
//! `/proc/modules` under the root.

use std::path::Path;

use crate::host::ExecMode;
use crate::host::effects::effect::Effect;
use crate::host::kernel::kmod::{self, BlacklistOptions, FileOptions};
use crate::host::mounts::mount::{self, MountSpec, MountState};
use crate::host::tests::{all_modes, s, snapshot};
use crate::host::testutil::TestHost;
use crate::host::{Host, Report};

/// [`all_modes`] for calls that make several changes each (fstab, directory, mount, unit):
/// plan and check leave the root byte-identical and agree, apply does what the plan did,
/// a second apply changes nothing, a check after it finds no drift. Returns the plan's
/// report.
pub(super) fn plan_of_every_mode(
    t: &TestHost,
    f: impl Fn(&mut Host) -> crate::host::root::error::Result<bool>,
) -> Report {
    let before = snapshot(t);
    let run = |mode| -> (bool, Report) {
        let mut h = t.host(mode);
        let c = f(&mut h).unwrap();
        (c, h.finish().unwrap())
    };
    let (planned, plan) = run(ExecMode::Plan);
    assert_eq!(snapshot(t), before, "a plan changed the root");
    assert!(planned);
    let (checked, check) = run(ExecMode::Check);
    assert_eq!(snapshot(t), before, "a check changed the root");
    assert!(checked);
    assert_eq!(check.drift().len(), plan.changes.len());
    let (applied, rep) = run(ExecMode::Apply);
    assert!(applied);
    assert_eq!(rep.changes.len(), plan.changes.len());
    let (again, rep) = run(ExecMode::Apply);
    assert!(
        !again && rep.changes.is_empty(),
        "second apply changed: {rep:?}"
    );
    let (_, check) = run(ExecMode::Check);
    assert!(check.drift().is_empty(), "drift after apply: {check:?}");
    plan
}

/// [`plan_of_every_mode`]'s plan's change summaries.
fn every_mode(
    t: &TestHost,
    f: impl Fn(&mut Host) -> crate::host::root::error::Result<bool>,
) -> Vec<String> {
    let plan = plan_of_every_mode(t, f);
    plan.changes.iter().map(|c| c.summary.clone()).collect()
}

const ROOT_MOUNT: &str = "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n";
const FSTAB: &str = "# /etc/fstab: static file system information.\n#\n# <file system> <mount point>   <type>  <options>       <dump>  <pass>\nUUID=1234   /               ext4    errors=remount-ro 0       1\n\n/swap.img\tnone\tswap\tsw\t0\t0\n";

/// A root with sh, the fstab above, a mount table with `/` only, and stubs: `mount <path>`
/// adds the fstab line's filesystem to the mount table (`mount -o remount` only logs),
/// `umount <path>` takes it out.
fn mount_host() -> TestHost {
    let t = TestHost::new();
    t.install_sh();
    t.file("/etc/fstab", FSTAB);
    t.file("/proc/1/mountinfo", ROOT_MOUNT);
    t.stub(
        "mount",
        r#"[ "$1" = -o ] && exit 0
while read src mp fs rest; do
  if [ "$mp" = "$1" ]; then echo "99 22 8:17 / $mp rw,relatime - $fs $src rw" >> /proc/1/mountinfo; fi
done < /etc/fstab"#,
    );
    t.stub(
        "umount",
        r#"out=
while IFS= read -r l; do set -- $l; [ "$5" = "$target" ] || out="$out$l
"; done < /proc/1/mountinfo
printf '%s' "$out" > /proc/1/mountinfo"#,
    );
    // `umount`'s body reads the target from `$target`: set it before `set --` clobbers $1.
    let p = t.p("/usr/bin/umount");
    let body = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, body.replacen("out=\n", "target=$1\nout=\n", 1)).unwrap();
    t
}

fn spec(source: &str, fstype: &str, options: &str) -> MountSpec {
    MountSpec {
        source: source.into(),
        fstype: fstype.into(),
        options: options.into(),
        dump: 0,
        pass: 2,
        state: MountState::Mounted,
    }
}

#[test]
fn mount_ensure_in_every_mode_keeps_fstab_lines_byte_for_byte() {
    let t = mount_host();
    let sp = spec("UUID=abcd-ef", "ext4", "defaults,noatime");
    let planned = every_mode(&t, |h| {
        mount::ensure(h, "/data", &sp).map_err(session_error)
    });
    assert_eq!(
        planned,
        [
            "update /etc/fstab",
            "create directory /data (mode 0755)",
            "mount /data"
        ]
    );
    assert_eq!(
        t.read("/etc/fstab"),
        format!("{FSTAB}UUID=abcd-ef /data ext4 defaults,noatime 0 2\n")
    );
    assert!(t.p("/data").is_dir());
    // One mount, by the apply; the second apply and the checks found it mounted.
    assert_eq!(t.calls(), s(&["mount /data"]));
    assert_eq!(
        t.read("/proc/1/mountinfo"),
        format!("{ROOT_MOUNT}99 22 8:17 / /data rw,relatime - ext4 UUID=abcd-ef rw\n")
    );
}

#[test]
fn mount_plan_records_fstab_dir_and_mount_and_later_reads_see_it() {
    let t = mount_host();
    let before = snapshot(&t);
    let mut h = t.host(ExecMode::Plan);
    assert!(!mount::is_mounted(&h, "/data").unwrap());
    assert!(mount::ensure(&mut h, "/data", &spec("/dev/nvme1n1", "xfs", "defaults")).unwrap());
    assert!(mount::is_mounted(&h, "/data").unwrap());
    let info = mount::info(&h, "/data").unwrap().unwrap();
    assert_eq!(
        (
            info.source.as_str(),
            info.fstype.as_str(),
            info.options.as_str()
        ),
        ("/dev/nvme1n1", "xfs", "defaults")
    );
    // A planned unmount is seen too.
    assert!(mount::remove(&mut h, "/data").unwrap());
    assert!(!mount::is_mounted(&h, "/data").unwrap());
    let rep = h.finish().unwrap();
    let changes: Vec<(&str, &str)> = rep
        .changes
        .iter()
        .map(|c| (c.kind.as_str(), c.summary.as_str()))
        .collect();
    assert_eq!(
        changes,
        [
            ("write", "update /etc/fstab"),
            ("mkdir", "create directory /data (mode 0755)"),
            ("mount", "mount /data"),
            ("mount", "umount /data"),
            ("write", "update /etc/fstab"),
        ]
    );
    assert_eq!(
        rep.changes[0].diff.as_deref().unwrap().lines().last(),
        Some("+/dev/nvme1n1 /data xfs defaults 0 2")
    );
    assert_eq!(snapshot(&t), before);
    assert!(t.calls().is_empty());
}

#[test]
fn mount_check_drifts_when_the_filesystem_is_not_mounted() {
    let t = mount_host();
    let sp = spec("/dev/sdb1", "ext4", "defaults");
    let mut h = t.host(ExecMode::Apply);
    assert!(mount::ensure(&mut h, "/data", &sp).unwrap());
    h.finish().unwrap();
    // Someone unmounted it: the mount table no longer lists it.
    t.file("/proc/1/mountinfo", ROOT_MOUNT);
    let mut h = t.host(ExecMode::Check);
    assert!(mount::ensure(&mut h, "/data", &sp).unwrap());
    let rep = h.finish().unwrap();
    let drift: Vec<&str> = rep.drift().iter().map(|c| c.summary.as_str()).collect();
    assert_eq!(drift, ["mount /data"]);
    // Apply mounts it again, and only that.
    t.clear_calls();
    let mut h = t.host(ExecMode::Apply);
    assert!(mount::ensure(&mut h, "/data", &sp).unwrap());
    assert_eq!(h.finish().unwrap().changes.len(), 1);
    assert_eq!(t.calls(), s(&["mount /data"]));
}

#[test]
fn mount_changed_options_remount_and_replace_the_line_in_place() {
    let t = mount_host();
    t.file(
        "/etc/fstab",
        "# keep\n/dev/sdb1  /data  ext4  defaults  0  0\n# keep too\n/dev/sdb1 /data ext4 ro 0 0\n",
    );
    t.file(
        "/proc/1/mountinfo",
        &format!("{ROOT_MOUNT}40 22 8:17 / /data rw - ext4 /dev/sdb1 rw\n"),
    );
    let mut h = t.host(ExecMode::Apply);
    let mut sp = spec("/dev/sdb1", "ext4", "defaults");
    sp.pass = 0;
    // Same fields (other spacing): unchanged; the duplicate line is dropped, so remount.
    assert!(mount::ensure(&mut h, "/data", &sp).unwrap());
    assert_eq!(
        t.read("/etc/fstab"),
        "# keep\n/dev/sdb1  /data  ext4  defaults  0  0\n# keep too\n"
    );
    sp.options = "noatime,nofail".into();
    assert!(mount::ensure(&mut h, "/data", &sp).unwrap());
    assert!(!mount::ensure(&mut h, "/data", &sp).unwrap());
    h.finish().unwrap();
    assert_eq!(
        t.read("/etc/fstab"),
        "# keep\n/dev/sdb1 /data ext4 noatime,nofail 0 0\n# keep too\n"
    );
    assert_eq!(
        t.calls(),
        s(&["mount -o remount /data", "mount -o remount /data"])
    );
}

#[test]
fn mount_conflicting_source_is_an_error_that_changes_nothing() {
    let t = mount_host();
    t.file(
        "/proc/1/mountinfo",
        &format!("{ROOT_MOUNT}40 22 8:33 / /data rw - xfs /dev/sdc1 rw\n"),
    );
    std::fs::create_dir(t.p("/data")).unwrap();
    let before = snapshot(&t);
    for mode in [ExecMode::Plan, ExecMode::Check, ExecMode::Apply] {
        let mut h = t.host(mode);
        let e = mount::ensure(&mut h, "/data", &spec("/dev/sdb1", "ext4", "defaults")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/data is mounted from /dev/sdc1 (xfs), not /dev/sdb1 (ext4): unmount it first (mount::remove) or change the source"
        );
        h.finish().unwrap();
    }
    assert_eq!(snapshot(&t), before);
    // A UUID source that resolves under the root to the mounted device is the same source.
    std::fs::create_dir_all(t.p("/dev/disk/by-uuid")).unwrap();
    t.file("/dev/sdc1", "");
    std::os::unix::fs::symlink("../../sdc1", t.p("/dev/disk/by-uuid/u-1")).unwrap();
    let mut h = t.host(ExecMode::Plan);
    assert!(mount::ensure(&mut h, "/data", &spec("UUID=u-1", "xfs", "defaults")).unwrap());
    let rep = h.finish().unwrap();
    let kinds: Vec<&str> = rep.change_summaries();
    // Mounted already: the new fstab line, then a remount to apply it.
    assert_eq!(kinds, ["update /etc/fstab", "mount -o remount /data"]);
    // Bad input is a clear error.
    let mut h = t.host(ExecMode::Plan);
    assert_eq!(
        mount::ensure(&mut h, "data", &spec("/dev/x", "ext4", "defaults"))
            .unwrap_err()
            .to_string(),
        "paths must be absolute: \"data\""
    );
    assert_eq!(
        mount::ensure(&mut h, "/x", &spec("/dev/x", "ext 4", "defaults"))
            .unwrap_err()
            .to_string(),
        "invalid filesystem type: \"ext 4\""
    );
    assert_eq!(
        mount::remove(&mut h, "/..").unwrap_err().to_string(),
        "invalid mount point: / cannot be managed"
    );
}

#[test]
fn mount_present_only_writes_fstab_and_remove_unmounts_then_drops_the_line() {
    let t = mount_host();
    let mut sp = spec("LABEL=scratch", "ext4", "defaults");
    sp.state = MountState::Present;
    let planned = every_mode(&t, |h| {
        mount::ensure(h, "/scratch", &sp).map_err(session_error)
    });
    assert_eq!(
        planned,
        ["update /etc/fstab", "create directory /scratch (mode 0755)"]
    );
    assert!(t.calls().is_empty());
    assert_eq!(t.read("/proc/1/mountinfo"), ROOT_MOUNT);
    // Now mount it, then remove it in every mode.
    sp.state = MountState::Mounted;
    let mut h = t.host(ExecMode::Apply);
    assert!(mount::ensure(&mut h, "/scratch", &sp).unwrap());
    h.finish().unwrap();
    t.clear_calls();
    let planned = every_mode(&t, |h| mount::remove(h, "/scratch"));
    assert_eq!(planned, ["umount /scratch", "update /etc/fstab"]);
    assert_eq!(t.calls(), s(&["umount /scratch"]));
    assert_eq!(t.read("/etc/fstab"), FSTAB);
    assert_eq!(t.read("/proc/1/mountinfo"), ROOT_MOUNT);
    assert!(t.p("/scratch").is_dir(), "the directory stays");
}

#[test]
fn mount_points_with_escapes() {
    let t = mount_host();
    t.file(
        "/proc/1/mountinfo",
        &format!("{ROOT_MOUNT}41 22 8:17 / /mnt/my\\040disk rw,noatime - ext4 /dev/sdb1 rw\n"),
    );
    let h = t.host(ExecMode::Apply);
    assert!(mount::is_mounted(&h, "/mnt/my disk").unwrap());
    assert!(mount::is_mounted(&h, "/mnt/my disk/").unwrap());
    assert!(!mount::is_mounted(&h, "/mnt/my").unwrap());
    let info = mount::info(&h, "/mnt/my disk").unwrap().unwrap();
    assert_eq!(
        (info.options.as_str(), info.super_options.as_str()),
        ("rw,noatime", "rw")
    );
    drop(h);
    let mut h = t.host(ExecMode::Apply);
    let mut sp = spec("/dev/sdb1", "ext4", "defaults");
    sp.state = MountState::Present;
    assert!(mount::ensure(&mut h, "/mnt/my disk", &sp).unwrap());
    h.finish().unwrap();
    assert_eq!(
        t.read("/etc/fstab"),
        format!("{FSTAB}/dev/sdb1 /mnt/my\\040disk ext4 defaults 0 2\n")
    );
    // A malformed table is an error naming it.
    t.file("/proc/1/mountinfo", "garbage\n");
    let h = t.host(ExecMode::Apply);
    assert_eq!(
        mount::is_mounted(&h, "/data").unwrap_err().to_string(),
        "invalid mount table /proc/1/mountinfo: line 1: expected `id parent major:minor root mount-point options [optional...] - fstype source super-options`, got \"garbage\""
    );
}

// ---- kmod ----

fn kmod_host(os_release: &str) -> TestHost {
    let t = TestHost::new();
    t.install_sh();
    t.file("/etc/os-release", os_release);
    t.file(
        "/proc/modules",
        "nvidia_uvm 1904640 0 - Live 0x0000000000000000\n",
    );
    t.stub("update-initramfs", ":");
    t.stub("dracut", ":");
    t.stub(
        "modprobe",
        r#"echo "$1 16384 0 - Live 0x0" >> /proc/modules"#,
    );
    t
}

fn nouveau(h: &mut crate::host::Host) -> Result<Vec<bool>, crate::host::api::CallError> {
    let disable = BlacklistOptions {
        file: None,
        disable: true,
    };
    Ok(vec![
        kmod::blacklist(h, "nouveau", &disable)?,
        kmod::options(h, "nouveau", "modeset=0", &FileOptions::default())?,
        kmod::load_at_boot(h, "nvidia", &FileOptions::default())?,
        kmod::load_at_boot(
            h,
            "nvidia-drm",
            &FileOptions {
                file: Some("nvidia".into()),
            },
        )?,
    ])
}

fn records(t: &TestHost) -> Option<String> {
    std::fs::read_to_string(t.p("/var/lib/skyhook/.deferred/initramfs.json")).ok()
}

#[test]
fn kmod_files_in_every_mode_and_one_update_initramfs_on_debian() {
    let t = kmod_host("ID=ubuntu\nID_LIKE=debian\n");
    let changed = all_modes(&t, nouveau);
    assert_eq!(changed, [true, true, true, true]);
    assert_eq!(
        t.read("/etc/modprobe.d/blacklist-nouveau.conf"),
        "blacklist nouveau\ninstall nouveau /bin/false\n"
    );
    assert_eq!(
        t.read("/etc/modprobe.d/nouveau.conf"),
        "options nouveau modeset=0\n"
    );
    assert_eq!(
        t.read("/etc/modules-load.d/nvidia.conf"),
        "nvidia\nnvidia-drm\n"
    );
    // Two modprobe.d changes, one regeneration; none for the second apply.
    assert_eq!(t.calls(), s(&["update-initramfs -u"]));
    assert_eq!(records(&t), None);
}

#[test]
fn kmod_plan_lists_the_regeneration_as_an_action() {
    let t = kmod_host("ID=ubuntu\n");
    let mut h = t.host(ExecMode::Plan);
    nouveau(&mut h).unwrap();
    let rep = h.finish().unwrap();
    let actions: Vec<(&str, &str)> = rep
        .actions
        .iter()
        .map(|a| (a.kind.as_str(), a.summary.as_str()))
        .collect();
    assert_eq!(actions, [("initramfs_update", "update-initramfs -u")]);
    assert!(t.calls().is_empty());
}

#[test]
fn kmod_rhel_runs_dracut() {
    let t = kmod_host("ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n");
    let mut h = t.host(ExecMode::Apply);
    assert!(kmod::options(&mut h, "nouveau", "modeset=0", &FileOptions::default()).unwrap());
    assert!(kmod::blacklist(&mut h, "nouveau", &BlacklistOptions::default()).unwrap());
    // modules-load.d alone schedules nothing.
    h.finish().unwrap();
    assert_eq!(t.calls(), s(&["dracut -f"]));
    t.clear_calls();
    let mut h = t.host(ExecMode::Apply);
    assert!(kmod::load_at_boot(&mut h, "nvidia", &FileOptions::default()).unwrap());
    h.finish().unwrap();
    assert!(t.calls().is_empty());
}

#[test]
fn kmod_check_drifts_after_options_edited_by_hand() {
    let t = kmod_host("ID=ubuntu\n");
    let mut h = t.host(ExecMode::Apply);
    assert!(kmod::options(&mut h, "nouveau", "modeset=0", &FileOptions::default()).unwrap());
    h.finish().unwrap();
    t.file(
        "/etc/modprobe.d/nouveau.conf",
        "# tuned by hand\noptions nouveau modeset=1\n",
    );
    t.clear_calls();
    let before = snapshot(&t);
    let mut h = t.host(ExecMode::Check);
    assert!(kmod::options(&mut h, "nouveau", "modeset=0", &FileOptions::default()).unwrap());
    let rep = h.finish().unwrap();
    let drift: Vec<&str> = rep.drift().iter().map(|c| c.summary.as_str()).collect();
    assert_eq!(drift, ["update /etc/modprobe.d/nouveau.conf"]);
    assert_eq!(
        rep.drift()[0].diff.as_deref(),
        Some(
            "--- a/etc/modprobe.d/nouveau.conf\n+++ b/etc/modprobe.d/nouveau.conf\n@@ -1,2 +1,2 @@\n # tuned by hand\n-options nouveau modeset=1\n+options nouveau modeset=0\n"
        )
    );
    assert_eq!(snapshot(&t), before);
    assert!(t.calls().is_empty());
}

#[test]
fn failed_update_initramfs_is_recorded_and_rerun_by_the_next_session() {
    let t = kmod_host("ID=debian\n");
    std::fs::remove_file(t.p("/usr/bin/update-initramfs")).unwrap();
    let mut h = t.host(ExecMode::Apply);
    assert!(kmod::blacklist(&mut h, "nouveau", &BlacklistOptions::default()).unwrap());
    // Written ahead: the record exists before the step ends.
    assert_eq!(
        records(&t).as_deref(),
        Some("{\"action\":\"initramfs_update\"}\n")
    );
    let (_, res) = h.finish_with_report();
    assert_eq!(
        res.unwrap_err().to_string(),
        "failed to run update-initramfs -u: program not found"
    );
    assert_eq!(
        records(&t).as_deref(),
        Some("{\"action\":\"initramfs_update\"}\n")
    );
    // Plan and check show it as an action, not drift, and leave the record.
    let before = snapshot(&t);
    for mode in [ExecMode::Plan, ExecMode::Check] {
        let mut h = t.host(mode);
        assert!(!kmod::blacklist(&mut h, "nouveau", &BlacklistOptions::default()).unwrap());
        let rep = h.finish().unwrap();
        assert!(rep.changes.is_empty());
        let actions: Vec<&str> = rep.action_summaries();
        assert_eq!(actions, ["update-initramfs -u"]);
    }
    assert_eq!(snapshot(&t), before);
    // The next apply session runs it once although nothing changed, and drops the record.
    t.stub("update-initramfs", ":");
    let rep = t.host(ExecMode::Apply).finish().unwrap();
    assert_eq!(t.calls(), s(&["update-initramfs -u"]));
    assert_eq!(rep.summary(), "Apply: 0 changed, 0 unchanged, 1 action.");
    assert_eq!(records(&t), None);
    t.clear_calls();
    t.host(ExecMode::Apply).finish().unwrap();
    assert!(t.calls().is_empty());
}

#[test]
fn kmod_shared_file_keeps_other_lines_and_removal_helpers() {
    let t = kmod_host("ID=ubuntu\n");
    t.file(
        "/etc/modprobe.d/nvidia.conf",
        "# site settings\noptions nvidia NVreg_X=1\ninstall nouveau /bin/true\n",
    );
    let f = || FileOptions {
        file: Some("nvidia.conf".into()),
    };
    let mut h = t.host(ExecMode::Apply);
    let bl = BlacklistOptions {
        file: Some("nvidia".into()),
        disable: true,
    };
    assert!(kmod::blacklist(&mut h, "nouveau", &bl).unwrap());
    assert!(kmod::options(&mut h, "nouveau", "modeset=0  foo=1", &f()).unwrap());
    // `-` and `_` are one name; word-wise equal lines are kept as written.
    assert!(!kmod::options(&mut h, "nouveau", "modeset=0 foo=1", &f()).unwrap());
    assert_eq!(
        t.read("/etc/modprobe.d/nvidia.conf"),
        "# site settings\noptions nvidia NVreg_X=1\ninstall nouveau /bin/false\nblacklist nouveau\noptions nouveau modeset=0 foo=1\n"
    );
    assert!(kmod::unblacklist(&mut h, "nouveau", &f()).unwrap());
    assert!(kmod::remove_options(&mut h, "nouveau", &f()).unwrap());
    assert!(!kmod::remove_options(&mut h, "nouveau", &f()).unwrap());
    assert_eq!(
        t.read("/etc/modprobe.d/nvidia.conf"),
        "# site settings\noptions nvidia NVreg_X=1\n"
    );
    // A file left without lines is removed.
    assert!(kmod::load_at_boot(&mut h, "nvidia_drm", &FileOptions::default()).unwrap());
    assert!(
        !kmod::load_at_boot(
            &mut h,
            "nvidia-drm",
            &FileOptions {
                file: Some("nvidia_drm".into())
            }
        )
        .unwrap()
    );
    assert!(
        kmod::unload_at_boot(
            &mut h,
            "nvidia-drm",
            &FileOptions {
                file: Some("nvidia_drm".into())
            }
        )
        .unwrap()
    );
    assert!(!t.p("/etc/modules-load.d/nvidia_drm.conf").exists());
    h.finish().unwrap();
    assert_eq!(t.calls(), s(&["update-initramfs -u"]));
    // Bad input.
    let mut h = t.host(ExecMode::Plan);
    assert_eq!(
        kmod::blacklist(&mut h, "nou veau", &BlacklistOptions::default())
            .unwrap_err()
            .to_string(),
        "invalid kernel module name: \"nou veau\" (letters, digits, `-` and `_` only)"
    );
    assert_eq!(
        kmod::options(&mut h, "nouveau", " ", &FileOptions::default())
            .unwrap_err()
            .to_string(),
        "invalid module options: \" \" (one or more `key=value` words on one line)"
    );
    assert_eq!(
        kmod::options(
            &mut h,
            "nouveau",
            "a=1",
            &FileOptions {
                file: Some("../x".into())
            }
        )
        .unwrap_err()
        .to_string(),
        "invalid kmod file name: \"../x\" must be a single file name"
    );
}

#[test]
fn kmod_load_is_a_change_when_the_module_table_says_not_loaded() {
    let t = kmod_host("ID=ubuntu\n");
    let changed = all_modes(&t, |h| {
        Ok(vec![
            kmod::load(h, "nvidia-uvm")?,
            kmod::load(h, "nvidia")?,
            !kmod::loaded(h, "nvidia")?,
        ])
    });
    assert_eq!(changed, [false, true, false]);
    assert_eq!(t.calls(), s(&["modprobe nvidia"]));
    // Without /proc/modules the state cannot be told: modprobe is an action every time.
    std::fs::remove_file(t.p("/proc/modules")).unwrap();
    t.clear_calls();
    let mut h = t.host(ExecMode::Check);
    assert!(!kmod::loaded(&h, "nvidia").unwrap());
    assert!(kmod::load(&mut h, "nvidia").unwrap());
    let rep = h.finish().unwrap();
    assert!(rep.drift().is_empty());
    let actions: Vec<(&str, &str)> = rep
        .actions
        .iter()
        .map(|a| (a.kind.as_str(), a.summary.as_str()))
        .collect();
    assert_eq!(actions, [("module_load", "modprobe nvidia")]);
    assert!(!Path::new(&t.p("/stub.log")).exists());
}

#[test]
fn a_modprobe_file_is_not_written_when_the_initramfs_record_cannot_be() {
    let t = kmod_host("ID=ubuntu\n");
    // The records' directory is a file: no record, so no modprobe.d change (write-ahead
    // order), and no regeneration pending; modules-load.d needs no record.
    t.file("/var/lib/skyhook/.deferred", "not a directory");
    let mut h = t.host(ExecMode::Apply);
    assert!(kmod::blacklist(&mut h, "nouveau", &BlacklistOptions::default()).is_err());
    assert!(kmod::options(&mut h, "nouveau", "modeset=0", &FileOptions::default()).is_err());
    assert!(kmod::load_at_boot(&mut h, "nvidia", &FileOptions::default()).unwrap());
    h.finish().unwrap();
    assert!(!t.p("/etc/modprobe.d/blacklist-nouveau.conf").exists());
    assert!(!t.p("/etc/modprobe.d/nouveau.conf").exists());
    assert!(t.calls().is_empty(), "{:?}", t.calls());
}

#[test]
fn initramfs_work_survives_a_crash_after_the_modprobe_file_was_written() {
    let t = kmod_host("ID=fedora\n");
    let mut h = t.host(ExecMode::Apply);
    assert!(kmod::options(&mut h, "nouveau", "modeset=0", &FileOptions::default()).unwrap());
    // The agent dies before the end of the step: nothing ran, the record stays.
    std::mem::forget(h);
    assert!(t.calls().is_empty());
    assert_eq!(
        records(&t).as_deref(),
        Some("{\"action\":\"initramfs_update\"}\n")
    );
    // The next session (any step, nothing to change) runs it once and drops the record.
    let mut h = t.host(ExecMode::Apply);
    assert!(!kmod::options(&mut h, "nouveau", "modeset=0", &FileOptions::default()).unwrap());
    h.finish().unwrap();
    assert_eq!(t.calls(), s(&["dracut -f"]));
    assert_eq!(records(&t), None);
}

#[test]
fn kmod_removals_in_every_mode() {
    let t = kmod_host("ID=ubuntu\n");
    t.file(
        "/etc/modprobe.d/blacklist-nouveau.conf",
        "blacklist nouveau\ninstall nouveau /bin/false\n",
    );
    t.file(
        "/etc/modprobe.d/nouveau.conf",
        "# keep me\noptions nouveau modeset=0\n",
    );
    t.file("/etc/modules-load.d/nvidia.conf", "nvidia\nnvidia-uvm\n");
    let changed = all_modes(&t, |h| {
        let d = FileOptions::default();
        let nvidia = FileOptions {
            file: Some("nvidia".into()),
        };
        Ok(vec![
            kmod::unblacklist(h, "nouveau", &d)?,
            kmod::remove_options(h, "nouveau", &d)?,
            kmod::unload_at_boot(h, "nvidia_uvm", &nvidia)?,
        ])
    });
    assert_eq!(changed, [true, true, true]);
    assert!(!t.p("/etc/modprobe.d/blacklist-nouveau.conf").exists());
    assert_eq!(t.read("/etc/modprobe.d/nouveau.conf"), "# keep me\n");
    assert_eq!(t.read("/etc/modules-load.d/nvidia.conf"), "nvidia\n");
    assert_eq!(t.calls(), s(&["update-initramfs -u"]));
}

/// A source starting with `#` would make the fstab line a comment: the next run would not
/// find it and append it again (every run a change). It is an error, and nothing changes.
#[test]
fn mount_source_starting_with_hash_is_refused() {
    let t = TestHost::new();
    t.file("/etc/fstab", "/dev/sda1 / ext4 defaults 0 1\n");
    for mode in [ExecMode::Plan, ExecMode::Apply] {
        let mut h = t.host(mode);
        let e = mount::ensure(&mut h, "/mnt/q", &spec("#x", "xfs", "defaults")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid mount source: \"#x\" (a source starting with # would make the fstab line a comment)"
        );
        assert_eq!(h.changed(), 0);
    }
    assert_eq!(t.read("/etc/fstab"), "/dev/sda1 / ext4 defaults 0 1\n");
    assert!(!t.p("/mnt").exists());
}

/// The exact effects `mount::ensure` and `mount::remove` submit, recorded in a plan: the
/// fstab line (a file write), the mount, then the unmount and the line's removal; the planned
/// mount state answers `is_mounted` through the read view.
#[test]
fn mount_submits_exact_effects_and_reads_the_planned_mount() {
    let t = mount_host();
    let mut h = t.host(ExecMode::Plan);
    h.record_effects();
    assert!(mount::ensure(&mut h, "/data", &spec("/dev/nvme1n1", "xfs", "defaults")).unwrap());
    assert!(mount::is_mounted(&h, "/data").unwrap());
    assert!(mount::remove(&mut h, "/data").unwrap());
    assert!(!mount::is_mounted(&h, "/data").unwrap());
    let kinds: Vec<String> = h
        .recorded_effects()
        .iter()
        .map(|e| match e {
            Effect::Mount { .. } => format!("{e:?}"),
            _ => format!("{} {}", e.kind(), e.target()),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "write /etc/fstab",
            "mkdir /data",
            "Mount { path: \"/data\", op: Mount }",
            "Mount { path: \"/data\", op: Unmount }",
            "write /etc/fstab"
        ]
    );
    assert!(t.calls().is_empty(), "a plan ran {:?}", t.calls());
}

/// The session's error of a `mount::ensure` failure (a conflict fails the test).
fn session_error(e: mount::MountError) -> crate::host::HostError {
    match e {
        mount::MountError::Host(e) => e,
        e => panic!("unexpected: {e}"),
    }
}
