//! [`HostApi`] as the script layer's [`ScriptHost`]: the host functions' Rhai modules, one
//! per namespace, built once per process from the rows of [`FUNCTIONS`] and installed into
//! each run's engine; the run's session, deadline and output are bound to the evaluating
//! thread for the length of the evaluation (`Api::bind`), where every host function reads
//! them.

use std::sync::OnceLock;

use rhai::Engine;

use super::{FUNCTIONS, HostApi};
use crate::host::api::{HostModules, Registrar};
use crate::script::bindings::{RunBinding, RunHandle, ScriptHost};

/// The host modules of the process, built on first use.
static MODULES: OnceLock<HostModules> = OnceLock::new();

/// Build the host modules now unless they are built (for a caller that has a thread to spare
/// before the first script: the agent's preflight builds them while its static check runs).
pub fn prepare_modules() {
    MODULES.get_or_init(|| modules().into_shared());
}

impl ScriptHost for HostApi {
    fn register(&self, engine: &mut Engine, run: &RunHandle) -> RunBinding {
        MODULES
            .get_or_init(|| modules().into_shared())
            .install(engine);
        RunBinding::keep(self.for_run(run.deadline, run.output.clone()).bind())
    }

    fn changed(&self) -> i64 {
        HostApi::changed(self)
    }
}

/// The modules of every host function, with the registration log.
pub(crate) fn modules() -> Registrar {
    let mut r = Registrar::default();
    for f in FUNCTIONS {
        (f.register)(&mut r);
    }
    r
}
