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

impl ScriptHost for HostApi {
    fn register(&self, engine: &mut Engine, run: &RunHandle) -> RunBinding {
        static MODULES: OnceLock<HostModules> = OnceLock::new();
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
