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

/// `interrupt::restart_all_services()`.
///
/// # Errors
/// None in practice.
pub fn restart_all_services(h: &mut Host) -> Result<()> {
    h.submit(Effect::Interrupt(InterruptRequest::RestartAllServices))
        .map(|_| ())
}
