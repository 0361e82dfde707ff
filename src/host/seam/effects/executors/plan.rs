//! The plan and check executor: records each effect in the session's read [`Overlay`] and
//! performs nothing. A command that is not a query gets a planned output
//! ([`CmdOutput::planned`]); check mode records exactly like plan mode (its report's changes
//! are the drift).

use super::Executor;
use crate::host::effects::context::Context;
use crate::host::effects::effect::Effect;
use crate::host::effects::exec::CmdOutput;
use crate::host::effects::overlay::Overlay;
use crate::host::effects::report::ExecMode;
use crate::host::root::error::Result;

/// The plan or check executor: the overlay of what the session planned.
#[derive(Debug)]
pub struct Plan {
    mode: ExecMode,
    overlay: Overlay,
}

impl Plan {
    /// A plan executor reporting as `mode` (plan or check), with an empty overlay.
    pub fn new(mode: ExecMode) -> Plan {
        Plan {
            mode,
            overlay: Overlay::default(),
        }
    }
}

impl Executor for Plan {
    fn mode(&self) -> ExecMode {
        self.mode
    }

    fn execute(&mut self, cx: &Context, effect: &Effect) -> Result<Option<CmdOutput>> {
        self.overlay.record(&cx.root, effect)?;
        Ok(match effect {
            Effect::Command { .. } | Effect::GuardedCommand { .. } => Some(CmdOutput::planned()),
            _ => None,
        })
    }

    fn overlay(&self) -> Option<&Overlay> {
        Some(&self.overlay)
    }

    fn overlay_mut(&mut self) -> Option<&mut Overlay> {
        Some(&mut self.overlay)
    }
}
