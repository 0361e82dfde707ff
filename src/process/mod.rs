//! The one process primitive: everything that spawns a process (a bash step, an interrupt
//! command, a host-API `run`/`sh`/`query`, `systemctl`, package managers, deferred work)
//! goes through this module, and [`cancel::Cancel`] is how a run is stopped.

pub mod cancel;

pub use cancel::{Cancel, CancelReason};
