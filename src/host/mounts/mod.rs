//! Mounts and disks: `mount::` (`/etc/fstab` entries and the host's live mount table).

pub mod mount;

#[cfg(test)]
mod mount_tests;
