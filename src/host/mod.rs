//! The host API: root-confined files, commands, services, packages, OS facts,
//! sysctl/grub/ulimit, interrupts, configMaps, node metadata and secrets, as
//! `docs/host-api.md` specifies them for scripts. Each function is plain Rust over a
//! session; beside it, its `host_fn!` item binds it into Rhai (and is its reference row).
//!
//! One session ([`Host`]) per step. Every mutation is an [`effects::effect::Effect`] handed to
//! the session's executor, chosen by [`ExecMode`]: apply performs it, plan records it over a
//! read overlay and renders diffs, check records it as drift. The functions of each area
//! (`files::fs::write(&mut host, ...)`) mirror the script names one to one, so a row only
//! converts arguments and results.
//!
//! The folders are layers; a module imports only from its own layer or lower ones:
//!
//! | layer | folder | what |
//! |---|---|---|
//! | 1 | [`root`] | root confinement over pathrs, durability (`fsync1`), path locks, deferred-work records, whole-file reads, [`HostError`] |
//! | 2 | [`effects`] | the session ([`Host`]) and its read view, [`effects::effect::Effect`], the apply and plan/check executors, the command and download primitives, [`Report`] |
//! | 3 | [`api`] | [`api::HostApi`] (a session as scripts see it), the `host_fn!` item, Rhai value conversions, [`api::ScriptOutput`] |
//! | 4 | [`files`] | `fs::`, `toml::`, `json::`, `ini::`, `regex::`, `sha256`, `to_json`, configMaps (`config::`) and node metadata (`node::`) |
//! | 4 | [`system`] | the commands (`run`, `query`, `sh`), `os::`, `lib::` |
//! | 4 | [`services`], [`packages`], [`kernel`], [`users`], [`mounts`], [`fetch`], [`secrets`] | the other API areas |
//!
//! [`root`] and [`effects`] live in one private folder, `src/host/seam/`, re-exported here:
//! the write side of [`root::HostRoot`] is `pub(in crate::host::seam)`, so an area cannot
//! compile a direct write; the agent's own files outside `host` are written through
//! [`root::AgentFiles`].
//!
//! An area may use another area (`pkg::repo` downloads with [`fetch`], the structured edits
//! write through [`files::fs`]); no lower layer imports a higher one.

pub mod api;
pub mod fetch;
pub mod files;
pub mod kernel;
pub mod mounts;
pub mod packages;
mod seam;
pub mod secrets;
pub mod services;
pub mod system;
pub mod users;

pub use seam::{effects, root};

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod testutil;

pub use effects::describe::render_diff;
pub use effects::report::{ExecMode, Position, Report};
pub use effects::session::{Host, HostOptions, PlanCarry, StartMemo, Stat};
pub use root::error::HostError;
