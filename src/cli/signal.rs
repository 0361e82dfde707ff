//! Signals during `skyhook-run ... --apply` (a script or a package): the first stops the
//! run, the second ends the process at once.

use super::exit::ExitStatus;

/// During a script's `--apply`, the first SIGTERM or SIGINT aborts `cancel`: the script
/// stops at its next operation or command (a running command is ended as on a timeout), and
/// the session's end still writes what it holds (batched line edits, deferred work), so
/// what was reported as changed is on disk; the run exits 1. A second signal exits at once
/// (143 for SIGTERM, 130 for SIGINT). The handlers are in place when this returns.
pub fn abort_on_signals(cancel: &crate::process::Cancel) {
    let cancel = cancel.clone();
    watch(move |name| {
        eprintln!(
            "skyhook-run: received {name}: stopping the script; what it changed so far is \
             written (a second signal exits at once)"
        );
        cancel.abort(crate::process::CancelReason::Signal(name));
    });
}

/// During a package's `--apply`, the agent's own handlers take the first SIGTERM or SIGINT
/// (no further step starts); the second exits at once (143 for SIGTERM, 130 for SIGINT), as
/// for a script. The handlers are in place when this returns. Signals that arrive before
/// the first is taken count as one (tokio coalesces them), so the line printed when it is
/// taken tells the user (and a test) that the next one exits.
pub fn exit_on_second_signal() {
    watch(|name| eprintln!("skyhook-run: received {name}: a second signal exits at once"));
}

/// Register SIGTERM and SIGINT handlers (in place on return), then on a thread of their own
/// call `first` with the first signal's name and exit with 143/130 on the next.
fn watch(first: impl FnOnce(&'static str) + Send + 'static) {
    use tokio::signal::unix::{SignalKind, signal};
    let registered = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .and_then(|rt| {
            let guard = rt.enter();
            let streams = (
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
            );
            drop(guard);
            Ok((rt, streams))
        });
    let (rt, (mut term, mut int)) = match registered {
        Ok(r) => r,
        Err(e) => {
            eprintln!("skyhook-run: warning: no signal handling: {e}");
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            rt.block_on(async move {
                let mut first = Some(first);
                loop {
                    let (name, code) = tokio::select! {
                        _ = term.recv() => ("SIGTERM", ExitStatus::Terminated),
                        _ = int.recv() => ("SIGINT", ExitStatus::Interrupted),
                    };
                    match first.take() {
                        Some(f) => f(name),
                        None => {
                            eprintln!("skyhook-run: received {name} again: exiting now");
                            std::process::exit(i32::from(code.code()));
                        }
                    }
                }
            });
        });
    if let Err(e) = spawned {
        eprintln!("skyhook-run: warning: no signal handling: {e}");
    }
}
