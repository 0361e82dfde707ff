//! Commands and OS facts: [`cmd`] (the global `run`, `query` and `sh`: commands run inside
//! the host root), `os::` (the host's release, architecture and kernel) and `lib::` (the
//! dynamic linker's libraries, [`libs`]).

pub mod cmd;
#[cfg(test)]
pub(crate) mod global_script_tests;
pub mod libs;
pub mod os;
#[cfg(test)]
pub(crate) mod os_script_tests;
