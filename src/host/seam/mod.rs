//! The sealed seam: root confinement ([`root`]) and the session with its executors
//! ([`effects`]), the only code that may perform a mutating root operation.
//!
//! The write side of [`root::HostRoot`] is `pub(in crate::host::seam)`: the areas (the
//! other folders of `src/host`) are not below this module, so a direct write from one is a
//! compile error. `crate::host` re-exports both as `host::root` and `host::effects` for their
//! read items. The agent's own files (state, logs, the package copy) are written through
//! [`root::AgentFiles`], the one named door outside the seam.

pub mod effects;
pub mod root;
