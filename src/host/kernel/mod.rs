//! Kernel and boot: `kmod::` (kernel modules and the initramfs), `sysctl::`, `grub::`,
//! `ulimit::` ([`tuning`]) and the interrupts a step requests (`interrupt::`).

pub mod interrupt;
pub mod kmod;
pub mod tuning;
