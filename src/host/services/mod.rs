//! Services: `service::` (systemd units: state queries, enable, start, restart, drop-ins);
//! `tuned_adm::` (the TuneD profile: active, activate, off, verify).

pub mod service;
pub mod tuned;
