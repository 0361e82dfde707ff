//! SIGTERM/SIGINT handling (agent-contract.md section 11).
//!
//! The handler only *stops* the run's [`Cancel`] token: the running step is not signalled
//! (the package's `gracefulShutdown` is the time it has to finish; the kubelet SIGKILLs after
//! that), and the mode loop starts no further step. Steps run in their own process group, so
//! a terminal's Ctrl-C does not reach them either.

use tokio::signal::unix::{SignalKind, signal};

use crate::mode::console::Console;
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
            on_signal(name, &task, &console);
        }
    });
    Ok(())
}

/// One signal, `name`: say so on `console`'s stderr and stop `cancel` with that signal as
/// the reason (the mode loop names it when it stops before the next step).
fn on_signal(name: &'static str, cancel: &Cancel, console: &Console) {
    console.error(&format!(
        "skyhook-agent: received {name}: the running step may finish, no further step will start"
    ));
    cancel.stop(CancelReason::Signal(name));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason is the signal received (a SIGINT was reported as SIGTERM).
    #[test]
    fn the_reason_names_the_signal() {
        for name in ["SIGINT", "SIGTERM"] {
            let cancel = Cancel::new();
            let (console, recorded) = Console::memory();
            on_signal(name, &cancel, &console);
            assert_eq!(
                cancel.reason().map(|r| r.to_string()),
                Some(format!("{name} received"))
            );
            assert!(
                recorded.stderr().contains(&format!("received {name}:")),
                "{}",
                recorded.stderr()
            );
        }
    }
}
