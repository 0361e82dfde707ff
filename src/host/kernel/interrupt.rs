//! Interrupts: `interrupt::reboot()`, `restart_services(names)`, `restart_all_services()`.
//!
//! Collected into the [`crate::host::Report`] in every mode, never run here: the agent runs
//! them after the step succeeded and its flag is written, with its `interrupt` mode's
//! commands and once-per-SKYHOOK_RESOURCE_ID markers. Never drift in a check.

use crate::host::Host;
use crate::host::effects::effect::{Effect, InterruptRequest};
use crate::host::root::error::Result;

/// `interrupt::reboot()`.
///
/// # Errors
/// None in practice (the signature matches the other effects).
pub fn reboot(h: &mut Host) -> Result<()> {
    h.submit(Effect::Interrupt(InterruptRequest::Reboot))
        .map(|_| ())
}

host_fn! {
    /// Declare that the step's changes need a reboot: the step fails unless the package's Skyhook
    /// CR declares a reboot (`interrupt` or `configInterrupts`), which the operator then runs in
    /// its interrupt stage; post-interrupt-check fails until the boot id changed.
    #[host(ns = "interrupt", effects = [Interrupt])]
    fn reboot(h: &mut Host) -> () {
        Ok(super::reboot(h)?)
    }
}

/// `interrupt::restart_services(names)`.
///
/// # Errors
/// None in practice.
pub fn restart_services(h: &mut Host, names: &[String]) -> Result<()> {
    h.submit(Effect::Interrupt(InterruptRequest::RestartServices {
        services: names.to_vec(),
    }))
    .map(|_| ())
}

host_fn! {
    /// Declare that a service (or an array of services) must be restarted: the step fails unless
    /// the CR declares it (`type: service` with those units, `restartAllServices` or a reboot).
    #[host(ns = "interrupt", effects = [Interrupt])]
    fn restart_services(h: &mut Host, names: Dynamic) -> () {
        let names = convert::string_or_array(&names, "names")?;
        Ok(super::restart_services(h, &names)?)
    }
}

/// `interrupt::restart_all_services()`.
///
/// # Errors
/// None in practice.
pub fn restart_all_services(h: &mut Host) -> Result<()> {
    h.submit(Effect::Interrupt(InterruptRequest::RestartAllServices))
        .map(|_| ())
}

host_fn! {
    /// Restart all services after the step succeeded.
    #[host(ns = "interrupt", effects = [Interrupt])]
    fn restart_all_services(h: &mut Host) -> () {
        Ok(super::restart_all_services(h)?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert;
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::Dynamic;
}
use prelude::*;

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "interrupt",
    "Interrupts — `interrupt::`",
    "A step never interrupts the node itself: the operator cordons and drains a node only for packages whose Skyhook CR declares an `interrupt` (or `configInterrupts`). After the step succeeded, each request is compared with the package's entry in `SKYHOOK_DIR/node-metadata/packages.json` (`skyhook-run`: `--skyhook-cr FILE`): declared → one line saying the operator runs it; not declared → the step fails with the CR lines to add; no node metadata → a warning. Restarting a service as part of ordinary work is `service::restart`, an action.",
)];

host_fns!(reboot, restart_services, restart_all_services);
