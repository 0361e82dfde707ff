//! `skyhook-run`'s [`main`]: parses the command line ([`super::run_args`]) and dispatches each
//! form: a script or a package on this machine ([`super::run_local`]) or on a node
//! ([`super::run_remote`]), `check`, `new`, `completions` and `man` ([`super::docs`]).
//! Exit statuses: the one table, [`super::exit`].

use std::ffi::OsString;

use clap::Parser;

use super::exit::{CliError, ExitStatus};
use super::run_args::{Cli, Command};

/// The clap command of `skyhook-run` (for completions, man pages and tests).
pub fn command() -> clap::Command {
    super::run_args::command()
}

/// Run `skyhook-run` with `args` (the program name first, as `std::env::args_os`).
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitStatus {
    // Diagnostics on stderr when SKYHOOK_LOG is set (stdout stays the plan or JSON document).
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    if let Err(e) = crate::diag::init(&env) {
        eprintln!("WARNING: {e}; running without diagnostics");
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0; anything else is a usage error.
            return super::stdout::status("skyhook-run", e.print(), ExitStatus::of_clap(&e));
        }
    };
    match &cli.command {
        Some(Command::Check { files }) => super::run_local::check(files),
        Some(Command::Plan(a)) => super::plan::run(a),
        Some(Command::Completions { shell }) => {
            super::docs::completions(*shell, &mut command(), "skyhook-run")
        }
        Some(Command::Man { dir }) => {
            let pages = [
                ("skyhook-run.1", command()),
                ("skyhook-agent.1", super::agent::command()),
                (
                    "skyhook-agent-serve.1",
                    super::serve::command().name("skyhook-agent-serve"),
                ),
            ];
            match super::docs::write_man_pages(dir, pages) {
                Ok(paths) => {
                    let list: String = paths.iter().map(|p| format!("{}\n", p.display())).collect();
                    super::stdout::status(
                        "skyhook-run",
                        super::stdout::print(&list),
                        ExitStatus::Done,
                    )
                }
                Err(e) => report(e),
            }
        }
        Some(Command::New { name, configmaps }) => {
            match crate::local::scaffold::write(std::path::Path::new(""), name, configmaps) {
                Ok(dir) => super::stdout::status(
                    "skyhook-run",
                    super::stdout::print(&format!(
                        "skyhook-run: wrote package {}\n",
                        dir.display()
                    )),
                    ExitStatus::Done,
                ),
                Err(e) => report(e.into()),
            }
        }
        None if cli.skyhook_cr.is_some() && cli.package.is_none() => super::run_local::usage_error(
            cli.output == super::run_args::Output::Json,
            "--skyhook-cr judges the interrupts of a package's steps: it goes with --package DIR, \
             not a SCRIPT",
        ),
        None => match &cli.remote {
            Some(url) => super::run_remote::run(&cli, url),
            None => super::run_local::run(&cli),
        },
    }
}

/// Print an error (`skyhook-run: error: ...`) and map it.
fn report(e: CliError) -> ExitStatus {
    eprintln!("skyhook-run: error: {}", crate::chain::render(&e));
    e.exit_status()
}
