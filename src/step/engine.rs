//! The one script engine every front end (agent, dry run, serve, skyhook-run) runs steps with.

use std::sync::Arc;

use crate::script::{Limits, ScriptEngine};

/// The engine steps are compiled and run with (built once per run or server; every limit
/// but the deadline, which is per step).
pub fn engine() -> Arc<ScriptEngine> {
    Arc::new(ScriptEngine::new(Limits::default()))
}
