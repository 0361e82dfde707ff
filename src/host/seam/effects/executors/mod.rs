//! The executors: what becomes of each [`Effect`] a session submits. One interface,
//! [`Executor`], with one implementation per [`ExecMode`] plus a recording double:
//!
//! - [`apply::Apply`] performs the effect on the host (files through the root, commands
//!   through [`crate::host::effects::exec`], downloads through [`download`]);
//! - [`plan::Plan`] records it in a read [`Overlay`] (plan and check mode), so later reads of
//!   the session see it, and performs nothing;
//! - [`recording::Recording`] performs nothing and keeps every effect in order; reads go to
//!   the real root. Tests assert an area's effects with it.
//!
//! The session ([`crate::host::Host`]) picks its executor once, when it is built, and hands it
//! every validated effect with the lower [`Context`] (root, options, directories to fsync);
//! an executor never sees the session. Deferred work (reloads, regenerations) is the
//! session's; so is the batching of line edits, whose one write per file the session hands
//! to [`Executor::execute_batched`] when it flushes (the session's batch, [`crate::host::effects::session`]).

pub(crate) mod apply;
pub(crate) mod download;
mod executor;
pub(crate) mod plan;
pub(crate) mod recording;
#[cfg(test)]
mod tests;

pub(crate) use executor::{Deferred, Executor};
