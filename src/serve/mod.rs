//! The remote step API (`skyhook-agent serve`, docs/remote.md): a node
//! service that runs one step at a time for an engine it does not trust and streams the
//! result back as numbered NDJSON events.
//!
//! - [`exec::Service`] decides everything: executions by id (`registry`), validation
//!   before anything is spawned ([`request`], pure), secrets ([`secrets`]), the event rings
//!   ([`ring`], [`event`]), `--max-running`, cancel, the state dir ([`state`]), shutdown,
//!   the audit line, from its [`config::Config`]; [`execution::Execution`] is one
//!   execution, `run` runs it (TERM to the group, grace, KILL on cancel), `recover` knows
//!   an earlier server's.
//! - [`plan`]: the read-only `package_plan`, bounded by [`plan_limits`].
//! - [`auth`]: the hashed tokens file, constant-time compare, reload.
//! - [`http`]: the thin HTTP/1.1 transport (hyper) on TCP (plain or [`tls`]) and Unix
//!   sockets; [`start`]: listen and run until SIGTERM from the options the command line
//!   (`cli::serve`) checked.

pub mod auth;
pub mod config;
pub mod event;
pub mod exec;
pub mod execution;
pub mod http;
pub mod metrics;
pub mod plan;
pub mod plan_limits;
mod plan_request;
mod recover;
mod registry;
pub mod request;
pub mod ring;
mod run;
pub mod secrets;
pub mod start;
pub mod state;
pub mod tls;

pub use exec::{Config, Execution, Refusal, Service};
