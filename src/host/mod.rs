//! The host API in plain Rust (no Rhai here): root-confined files, commands, services,
//! packages, OS facts, sysctl/grub/ulimit, interrupts, configMaps, node metadata and secrets,
//! as `docs/host-api.md` specifies them for scripts.
//!
//! One session ([`Host`]) per step. Every mutation is an [`effect::Effect`] handed to the
//! session's executor, chosen by [`ExecMode`]: apply performs it, plan records it over a read
//! overlay and renders diffs, check records it as drift. The functions of each area
//! (`fs::write(&mut host, ...)`) mirror the script names one to one, so the binding layer
//! is thin.
//!
//! | module | area |
//! |---|---|
//! | [`root`] | root confinement over pathrs (every file access) |
//! | [`session`] | [`Host`], [`HostOptions`], the view and the executor dispatch |
//! | [`effect`] | [`effect::Effect`] and its parts |
//! | [`deferred`] | write-ahead records of deferred work, run by the next session after a crash |
//! | [`pathlock`] | cross-process locks held across a read-modify-write of a host file |
//! | [`digest`] | SHA-256 content hashes for reports (`hashes`: once per file per report) |
//! | `textdiff` | unified diffs on a window around the change |
//! | `apply`, `plan` | the executors (private) |
//! | [`report`] | [`Report`], [`ExecMode`] |
//! | [`fs`], [`cmd`], [`service`], [`pkg`], [`os`], [`tuning`], [`interrupt`] | the API areas |
//! | [`config`], [`secrets`] | configMaps and node metadata; secrets and the [`secrets::Redactor`] |
//! | [`mount`], [`kmod`] | fstab and the host's mount table; kernel modules and the initramfs |
//! | [`fetch`] | downloads verified by SHA-256 (`fs::fetch`) |
//! | [`pkgrepo`] | package repositories and holds (`pkg::repo`, `remove_repo`, `hold`, `unhold`) |
//! | [`toml`], [`json`], [`ini`] ([`structured`]: key paths, the shared read-modify-write) | format-preserving structured config edits |
//! | [`text`] | pure helpers: `sha256`, `regex::`, `to_json` |
//! | [`user`], [`group`], [`userdb`] | local users and groups (the account files, edited through effects) |

mod appendbuf;
mod apply;
mod batch;
pub mod cmd;
pub mod config;
pub mod deferred;
pub mod digest;
pub mod durability;
pub mod effect;
pub mod error;
pub mod fetch;
pub mod fs;
pub mod group;
mod hashes;
pub mod ini;
pub mod interrupt;
pub mod json;
pub mod kmod;
mod lines;
pub mod mount;
pub mod os;
pub mod pathlock;
pub mod pkg;
pub mod pkgrepo;
mod plan;
pub mod report;
pub mod root;
pub mod run_dirs;
pub mod secrets;
pub mod service;
pub mod session;
pub mod structured;
pub mod text;
mod textdiff;
pub mod toml;
pub mod tuning;
pub mod user;
pub mod userdb;

#[cfg(test)]
mod batch_failure_tests;
#[cfg(test)]
mod batch_spelling_tests;
#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod durability_dotdot_tests;
#[cfg(test)]
pub(crate) mod fetch_tests;
#[cfg(test)]
mod lines_render_tests;
#[cfg(test)]
mod mkdir_tests;
#[cfg(test)]
mod pkgrepo_tests;
#[cfg(test)]
mod structured_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_mounts;
#[cfg(test)]
pub(crate) mod testutil;
#[cfg(test)]
mod user_tests;

pub use error::HostError;
pub use plan::render_diff;
pub use report::{ExecMode, Position, Report};
pub use session::{Host, HostOptions, Stat};
