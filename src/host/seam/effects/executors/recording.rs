//! The recording executor: a test double that performs nothing and keeps every effect in
//! the order the session submitted it. Reads go to the real root (there is no overlay), so
//! an area behaves as in apply mode up to the effects it submits; commands get a planned
//! output ([`CmdOutput::planned`]).

use super::Executor;
use crate::host::effects::context::Context;
use crate::host::effects::effect::Effect;
use crate::host::effects::exec::CmdOutput;
use crate::host::effects::report::ExecMode;
use crate::host::root::error::Result;

/// The recording executor ([`crate::host::Host::recording`]); it reports as apply mode.
#[derive(Debug, Default)]
pub struct Recording {
    effects: Vec<Effect>,
}

impl Executor for Recording {
    fn mode(&self) -> ExecMode {
        ExecMode::Apply
    }

    fn execute(&mut self, _cx: &Context, effect: &Effect) -> Result<Option<CmdOutput>> {
        self.effects.push(effect.clone());
        Ok(match effect {
            Effect::Command { .. } | Effect::GuardedCommand { .. } => Some(CmdOutput::planned()),
            _ => None,
        })
    }

    fn recorded(&self) -> Option<&[Effect]> {
        Some(&self.effects)
    }
}
