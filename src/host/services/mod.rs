//! Services: `service::` (systemd units: state queries, enable, start, restart, drop-ins);
//! `tuned_adm::` (the TuneD profile: active, activate, off, verify).

pub mod service;
#[cfg(test)]
pub(crate) mod service_script_tests;
pub mod tuned;
