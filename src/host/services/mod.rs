//! Services: `service::` (systemd units: state queries, enable, start, restart, drop-ins).

pub mod service;
