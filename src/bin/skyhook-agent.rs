//! `skyhook-agent`: drop-in replacement for the Python Skyhook node agent.
//!
//! See `skyhook-agent --help` and docs/agent.md. All logic lives in [`skyhook::agent`].

fn main() {
    let code = skyhook::agent::main(std::env::args_os().skip(1), std::env::vars_os());
    std::process::exit(code);
}
