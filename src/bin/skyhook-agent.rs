//! `skyhook-agent`: drop-in replacement for the Python Skyhook node agent.
//!
//! See `skyhook-agent --help` and docs/agent.md. All logic lives in [`skyhook::agent`].

/// Counts each thread's allocations, so that a script run's memory can be bounded
/// ([`skyhook::script::memory`], `max_memory`).
#[global_allocator]
static ALLOCATOR: skyhook::script::memory::CountingAlloc = skyhook::script::memory::CountingAlloc;

fn main() {
    // Adopt the orphans of step processes, so that nothing a step started outlives it.
    if let Err(e) = skyhook::process::reaper::enable_subreaper() {
        eprintln!("skyhook-agent: warning: cannot become a child subreaper: {e}");
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    // `--version` with the git revision and build date (build.rs). Only the exact one-word
    // forms: everything else, `--help` included, is the agent's CLI (clap there prints the
    // bare package version).
    if let [flag] = args.as_slice()
        && (flag == "--version" || flag == "-V")
    {
        println!(
            "skyhook-agent {} ({}, built {})",
            env!("CARGO_PKG_VERSION"),
            env!("SKYHOOK_GIT_REV"),
            env!("SKYHOOK_BUILD_DATE")
        );
        std::process::exit(0);
    }
    let code = skyhook::agent::main(args, std::env::vars_os());
    std::process::exit(code);
}
