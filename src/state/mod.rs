//! The on-host state the agent owns (agent contract section 6): step flags and the flag
//! directory's housekeeping files, the version history, interrupt markers, and the package
//! lock.
//!
//! This is the one place that knows these file formats. Every write goes through
//! [`AgentFiles`](crate::host::root::AgentFiles), the door to the agent's own files on the
//! [`HostRoot`](crate::host::root::HostRoot) (confined to the host root), and every state file
//! is replaced atomically ([`AgentFiles::write_atomic`](crate::host::root::AgentFiles::write_atomic)).

pub mod flags;
pub mod history;
pub mod interrupts;
pub mod lock;

mod dirs;
mod error;

pub use dirs::check_not_dangling;
pub use error::StateError;
