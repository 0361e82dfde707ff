//! `skyhook-agent`: drop-in replacement for the Python Skyhook node agent. See
//! `skyhook-agent --help` and docs/agent.md; the command line and everything behind it is
//! [`skyhook::cli::agent`].

/// Counts each thread's allocations, so that a script run's memory can be bounded
/// ([`skyhook::script::memory`], `max_memory`).
#[global_allocator]
static ALLOCATOR: skyhook::script::memory::CountingAlloc = skyhook::script::memory::CountingAlloc;

fn main() -> std::process::ExitCode {
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
        println!("skyhook-agent {}", skyhook::cli::agent::VERSION);
        return std::process::ExitCode::SUCCESS;
    }
    skyhook::cli::agent::main(args, std::env::vars_os()).into()
}
