//! Mounts and disks: `mount::` (`/etc/fstab` entries, the host's live mount table and systemd
//! mount units).

pub mod mount;
pub mod unit;

#[cfg(test)]
mod host_ns_tests;
#[cfg(test)]
mod mount_tests;
#[cfg(test)]
mod unit_tests;
