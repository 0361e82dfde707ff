//! SIGTERM/SIGINT handling (agent-contract.md section 11).
//!
//! The handler only *stops* the run's [`Cancel`] token: the running step is not signalled
//! (the package's `gracefulShutdown` is the time it has to finish; the kubelet SIGKILLs after
//! that), and the mode loop starts no further step. Steps run in their own process group, so
//! a terminal's Ctrl-C does not reach them either.

use tokio::signal::unix::{SignalKind, signal};

use super::console::Console;
use crate::process::{Cancel, CancelReason};

/// Install SIGTERM and SIGINT handlers that stop `cancel` (with the reason
/// [`CancelReason::Signal`]) and print one line on `console`'s stderr per signal. Must be called inside
/// a tokio runtime with signal support enabled; the handlers live as long as the runtime.
///
/// # Errors
/// When the handlers cannot be registered.
pub fn install(cancel: &Cancel, console: &Console) -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let task = cancel.clone();
    let console = console.clone();
    tokio::spawn(async move {
        loop {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            console.error(&format!(
                "skyhook-agent: received {name}: the running step may finish, no further step will start"
            ));
            task.stop(CancelReason::Signal("SIGTERM"));
        }
    });
    Ok(())
}
