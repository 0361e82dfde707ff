//! The effects layer: the session ([`session::Host`]) every host API area works through,
//! with its read view (the root, seen through the executor's overlay in plan and check mode,
//! and facts such as [`os_release`]), the [`effect::Effect`] it submits for every change, and
//! the executors that act on them behind one interface (`executors`: apply, plan/check, a
//! recording double), which work on the lower [`context::Context`] and never on the session.
//! Commands run through [`exec`]; line edits are batched by the session; reports render effects as lines and diffs (`describe`, `textdiff`, `hashes`).
//! The [`report::Report`] is what a session changed, would change or found drifted.
//!
//! Import order, lowest first (no file imports a later one): `appendbuf`, `lines`,
//! `textdiff`, `context`, `exec`, `effect`, `report`, `overlay`, `hashes`,
//! `os_release`, `journal`, `executors`, `session`, `view`, `describe`.

pub(crate) mod appendbuf;
pub mod context;
pub(crate) mod describe;
pub mod effect;
pub mod exec;
pub(crate) mod executors;
pub(crate) mod hashes;
pub mod journal;
pub(crate) mod lines;
pub mod os_release;
pub(crate) mod overlay;
pub mod reads;
pub mod report;
pub mod session;
pub mod staging;
pub(crate) mod textdiff;
pub(crate) mod view;

#[cfg(test)]
mod batch_failure_tests;
#[cfg(test)]
mod batch_spelling_tests;
#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod lines_render_tests;
#[cfg(test)]
mod seam_tests;
