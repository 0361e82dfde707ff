//! The log sink: the chunked relay of step output with labels and timestamps
//! (agent-contract 9.3), the per-step log files (6.5) and their retention.
//!
//! - [`sink`]: [`Relay`] (the per-stream algorithm), [`StreamSink`] (console + file),
//!   [`open_step_logs`] (O_EXCL log files, next free second on collision).
//! - [`retention`]: [`prune`] (keep the newest logs of a step, with their `.err` files).
//! - [`error`]: [`LogError`], the error of both.

pub mod error;
pub mod retention;
pub mod sink;

pub use error::LogError;
pub use retention::prune;
pub use sink::{Label, Relay, StepLogFiles, StreamSink, open_step_logs};
