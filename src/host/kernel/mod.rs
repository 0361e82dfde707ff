//! Kernel and boot: `kernel::` (installed kernels and the one grub boots next, [`boot`]),
//! `dkms::` (the DKMS tree, [`dkms`]), `gpu::` (the NVIDIA GPUs and driver, [`gpu`]), `kmod::` (kernel modules and the initramfs), `sysctl::`, `grub::`,
//! `ulimit::` ([`tuning`]), the sysctl values kept for `sysctl::restore` ([`sysctl_record`])
//! and the interrupts a step requests (`interrupt::`).

pub mod boot;
pub mod dkms;
pub mod gpu;
pub mod interrupt;
#[cfg(test)]
pub(crate) mod interrupt_script_tests;
pub mod kmod;
#[cfg(test)]
pub(crate) mod kmod_script_tests;
pub mod sysctl_record;
pub mod tuning;
#[cfg(test)]
pub(crate) mod tuning_script_tests;
