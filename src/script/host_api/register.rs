//! [`HostApi`] as the script layer's [`ScriptHost`]: each run's engine gets one Rhai module
//! per namespace, registered from the rows of [`FUNCTIONS`] over the step's session.

use rhai::Engine;

use super::{FUNCTIONS, HostApi};
use crate::host::api::Registrar;
use crate::script::bindings::{RunHandle, ScriptHost};

impl ScriptHost for HostApi {
    fn register(&self, engine: &mut Engine, run: &RunHandle) {
        modules(self, run).install(engine);
    }

    fn changed(&self) -> i64 {
        HostApi::changed(self)
    }
}

/// The modules of every host function, closures over `api`'s session and `run` (deadline,
/// output), with the registration log.
pub(crate) fn modules(api: &HostApi, run: &RunHandle) -> Registrar {
    let api = api.for_run(run.deadline, run.output.clone());
    let mut r = Registrar::default();
    for f in FUNCTIONS {
        (f.register)(&mut r, &api);
    }
    r
}
