//! Commands and OS facts: `cmd::` (commands run inside the host root) and `os::` (the
//! host's release, architecture and kernel).

pub mod cmd;
pub mod os;
