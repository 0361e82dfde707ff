//! The effects layer: the session ([`session::Host`]) that every host API area works through,
//! with its read view (the root overlaid by the session's pending effects, and facts such as
//! [`os_release`]), the [`effect::Effect`] it submits for every change, and the executors that
//! act on them by [`report::ExecMode`]: apply performs (`apply`, with the batching of line
//! edits in `batch`, commands through [`exec`] and downloads through `download`), plan and
//! check record over a read overlay and render diffs (`plan`, `textdiff`, `hashes`). The
//! [`report::Report`] is what a session changed, would change or found drifted.

pub(crate) mod appendbuf;
pub(crate) mod apply;
pub(crate) mod batch;
pub(crate) mod download;
pub mod effect;
pub mod exec;
pub(crate) mod hashes;
pub(crate) mod line_edit;
pub(crate) mod lines;
pub mod os_release;
pub(crate) mod plan;
pub mod report;
pub mod session;
pub(crate) mod textdiff;

#[cfg(test)]
mod batch_failure_tests;
#[cfg(test)]
mod batch_spelling_tests;
#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod lines_render_tests;
