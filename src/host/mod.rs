//! The host: root-confined file access (and, later, the host API scripts call).

pub mod root;
