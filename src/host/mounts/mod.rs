//! Mounts and disks: `mount::` (`/etc/fstab` entries, the host's live mount table and systemd
//! mount units), `disk::` (block devices) with `fs::mkfs`, and `raid::` (md arrays).

pub mod disk;
pub mod mount;
pub mod raid;
pub mod unit;

#[cfg(test)]
mod host_ns_tests;
#[cfg(test)]
pub(crate) mod mount_script_tests;
#[cfg(test)]
mod mount_tests;
#[cfg(test)]
mod unit_tests;
