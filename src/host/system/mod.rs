//! Commands and OS facts: `cmd::` (commands run inside the host root), `os::` (the host's
//! release, architecture and kernel) and `lib::` (the dynamic linker's libraries, [`libs`]).

pub mod cmd;
pub mod libs;
pub mod os;
