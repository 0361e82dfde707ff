//! The command lines of the three commands, side by side: `skyhook-agent` ([`agent`]),
//! `skyhook-agent serve` ([`serve`]) and `skyhook-run` ([`run`]), their clap definitions and
//! what each form dispatches to, with one exit-status table for all three ([`exit`]).
//! The binaries (`src/bin/*`) only install the allocator and the subreaper and call
//! [`agent::main`] or [`run::main`].

pub mod agent;
pub mod docs;
pub mod exit;
pub(crate) mod plan;
pub mod run;
pub mod run_args;
pub mod run_local;
pub mod run_remote;
pub mod serve;
pub mod signal;
pub(crate) mod stdout;
