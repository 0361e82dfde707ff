//! Signals during `skyhook-run SCRIPT --apply`: the first stops the script, the second
//! ends the process.

use super::exit::ExitStatus;

/// During a script's `--apply`, the first SIGTERM or SIGINT aborts `cancel`: the script
/// stops at its next operation or command (a running command is ended as on a timeout), and
/// the session's end still writes what it holds (batched line edits, deferred work), so
/// what was reported as changed is on disk; the run exits 1. A second signal exits at once
/// (143 for SIGTERM, 130 for SIGINT). The handlers are registered by a thread of their own;
/// a signal before they are in place has its default effect.
pub fn abort_on_signals(cancel: &crate::process::Cancel) {
    let cancel = cancel.clone();
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            use tokio::signal::unix::{SignalKind, signal};
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let (Ok(mut term), Ok(mut int)) = (
                    signal(SignalKind::terminate()),
                    signal(SignalKind::interrupt()),
                ) else {
                    return;
                };
                let mut received = false;
                loop {
                    let (name, code) = tokio::select! {
                        _ = term.recv() => ("SIGTERM", ExitStatus::Terminated),
                        _ = int.recv() => ("SIGINT", ExitStatus::Interrupted),
                    };
                    if received {
                        eprintln!("skyhook-run: received {name} again: exiting now");
                        std::process::exit(i32::from(code.code()));
                    }
                    received = true;
                    eprintln!(
                        "skyhook-run: received {name}: stopping the script; what it changed so \
                         far is written (a second signal exits at once)"
                    );
                    cancel.abort(crate::process::CancelReason::Signal(name));
                }
            });
        });
    if let Err(e) = spawned {
        eprintln!("skyhook-run: warning: no signal handling: {e}");
    }
}
