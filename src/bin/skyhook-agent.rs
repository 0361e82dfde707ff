//! `skyhook-agent`: drop-in replacement for the Python Skyhook node agent.
//!
//! See `skyhook-agent --help` and docs/agent.md. All logic lives in [`skyhook::agent`].

fn main() {
    // Adopt the orphans of step processes, so that nothing a step started outlives it.
    if let Err(e) = skyhook::process::reaper::enable_subreaper() {
        eprintln!("skyhook-agent: warning: cannot become a child subreaper: {e}");
    }
    let code = skyhook::agent::main(std::env::args_os().skip(1), std::env::vars_os());
    std::process::exit(code);
}
