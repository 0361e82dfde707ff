//! The sealed seam: an area's reads go through the session's view, so a plan's later call
//! sees what an earlier call of the same plan changed.

use crate::host::ExecMode;
use crate::host::files::fs;
use crate::host::mounts::disk;
use crate::host::mounts::mount_script_tests::tests::block_root;

/// `disk::info` of a by-label link an earlier call of the plan makes resolves through the
/// planned link to the device it names, as the apply will.
#[test]
fn a_plan_resolves_a_device_through_a_link_it_planned() {
    let t = block_root();
    let mut h = t.host(ExecMode::Plan);
    assert!(fs::symlink(&mut h, "/dev/nvme1n1", "/dev/disk/by-label/data").unwrap());
    let info = disk::info(&mut h, "/dev/disk/by-label/data").unwrap();
    assert_eq!(
        info.map(|d| d.path),
        Some("/dev/nvme1n1".to_string()),
        "the plan's read skipped its own planned link"
    );
}
