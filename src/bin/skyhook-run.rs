//! `skyhook-run`: the local tool for package authors.
//!
//! For now one subcommand: `skyhook-run check FILE...` compiles each script the way the
//! agent does before running a step (syntax, parse-time limits, every static import
//! resolved under the script's own directory) without running anything, and prints each
//! error as `file:line:col: message` on stderr.
//!
//! Exit codes (interface): 0 every file compiled, 1 at least one did not, 2 usage error.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use skyhook::script::{Limits, ScriptEngine, compile_step};

/// Every file compiled.
const EXIT_OK: u8 = 0;
/// At least one file had an error.
const EXIT_ERRORS: u8 = 1;
/// Bad command line.
const EXIT_USAGE: u8 = 2;

/// Run and check Skyhook Rhai step scripts.
#[derive(Debug, Parser)]
#[command(name = "skyhook-run", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compile scripts and their imports without running them; print each error as
    /// file:line:col: message. Relative imports resolve in each script's directory.
    Check {
        /// The .rhai files to check.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0; anything else is a usage error.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { EXIT_OK });
        }
    };
    match cli.command {
        Command::Check { files } => ExitCode::from(check(&files)),
    }
}

fn check(files: &[PathBuf]) -> u8 {
    // Limits that matter at compile time do not depend on the timeout, so the environment
    // is not consulted here.
    let engine = ScriptEngine::new(Limits::default());
    let mut code = EXIT_OK;
    for file in files {
        let base = match file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if let Err(e) = compile_step(&engine, file, base) {
            eprintln!("{e}");
            code = EXIT_ERRORS;
        }
    }
    code
}
