//! Mounts and disks: `mount::` (`/etc/fstab` entries and the host's live mount table),
//! `disk::` (block devices) with `fs::mkfs`, and `raid::` (md arrays).

pub mod disk;
pub mod mount;
pub mod raid;

#[cfg(test)]
mod mount_tests;
