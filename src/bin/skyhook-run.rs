//! `skyhook-run`: the local tool for package authors. See `skyhook-run --help`; the command
//! line and everything behind it is [`skyhook::cli::run`].

/// Counts each thread's allocations, so that a script run's memory can be bounded
/// ([`skyhook::script::memory`], `max_memory`).
#[global_allocator]
static ALLOCATOR: skyhook::script::memory::CountingAlloc = skyhook::script::memory::CountingAlloc;

fn main() -> std::process::ExitCode {
    // Adopt the orphans of commands, so that nothing a script started outlives it.
    if let Err(e) = skyhook::process::reaper::enable_subreaper() {
        eprintln!("skyhook-run: warning: cannot become a child subreaper: {e}");
    }
    skyhook::cli::run::main(std::env::args_os()).into()
}
