//! What is generated from the clap definitions for a shell or a reader: completion scripts
//! (`skyhook-agent completions SHELL`, `skyhook-run completions SHELL`) and man pages
//! (`skyhook-run man DIR`).

use std::io::Write;
use std::path::Path;

use super::exit::{CliError, ExitStatus};

/// Print the completion script of `cmd` for `shell` on stdout, for the binary `bin`.
pub fn completions(shell: clap_complete::Shell, cmd: &mut clap::Command, bin: &str) -> ExitStatus {
    let script = completion_script(shell, cmd, bin);
    match std::io::stdout().write_all(script.as_bytes()) {
        Ok(()) => ExitStatus::Done,
        // `skyhook-run completions bash | head`: the reader has what it wanted.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitStatus::Done,
        Err(e) => {
            eprintln!("{bin}: cannot write the completion script: {e}");
            ExitStatus::Failure
        }
    }
}

/// The completion script of `cmd` for `shell`, as text.
pub fn completion_script(
    shell: clap_complete::Shell,
    cmd: &mut clap::Command,
    bin: &str,
) -> String {
    let mut script = Vec::new();
    clap_complete::generate(shell, cmd, bin, &mut script);
    String::from_utf8_lossy(&script).into_owned()
}

/// The man page of `cmd` (roff), from the same definition as its `--help`.
pub fn man_page(cmd: clap::Command) -> Vec<u8> {
    let mut roff = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = clap_mangen::Man::new(cmd).render(&mut roff);
    roff
}

/// Write each `(file name, command)` page of `pages` into `dir` (created if missing) and
/// print their paths.
///
/// # Errors
/// [`CliError::File`] naming the directory or page that cannot be written.
pub fn write_man_pages<const N: usize>(
    dir: &Path,
    pages: [(&str, clap::Command); N],
) -> Result<(), CliError> {
    std::fs::create_dir_all(dir).map_err(|source| CliError::File {
        what: "man page directory",
        path: dir.to_path_buf(),
        source,
    })?;
    for (name, cmd) in pages {
        let path = dir.join(name);
        std::fs::write(&path, man_page(cmd)).map_err(|source| CliError::File {
            what: "man page",
            path: path.clone(),
            source,
        })?;
        println!("{}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--mode` completes to the modes (it offered file names).
    #[test]
    fn skyhook_run_bash_completion_offers_the_modes_for_mode() {
        let script = completion_script(
            clap_complete::Shell::Bash,
            &mut super::super::run::command(),
            "skyhook-run",
        );
        let at = script.find("--mode)").expect("a --mode case");
        let case = &script[at..at + script[at..].find(";;").unwrap()];
        assert!(
            case.contains("compgen -W \"uninstall uninstall-check upgrade upgrade-check apply apply-check config config-check interrupt post-interrupt post-interrupt-check\""),
            "{case}"
        );
    }

    /// `skyhook-agent completions SHELL`: the first word completes to the modes and forms.
    #[test]
    fn skyhook_agent_completion_offers_the_modes_and_forms() {
        let script = completion_script(
            clap_complete::Shell::Bash,
            &mut super::super::agent::completion_command(),
            "skyhook-agent",
        );
        for word in [
            "apply-check",
            "post-interrupt",
            "validate",
            "serve",
            "completions",
        ] {
            assert!(script.contains(word), "{word}: {script}");
        }
    }

    /// NAME is `name \- about` and DESCRIPTION has text, in both pages.
    #[test]
    fn man_pages_have_a_name_and_a_description() {
        for (cmd, name) in [
            (
                super::super::run::command(),
                "skyhook\\-run \\- Run Skyhook Rhai step scripts",
            ),
            (
                super::super::agent::command(),
                "skyhook\\-agent \\- Skyhook node agent",
            ),
        ] {
            let page = String::from_utf8(man_page(cmd)).unwrap();
            let after = |h: &str| {
                let at = page.find(h).unwrap_or_else(|| panic!("{h}: {page}")) + h.len();
                page[at..].lines().next().unwrap_or("").to_string()
            };
            assert!(after(".SH NAME\n").starts_with(name), "{page}");
            let description = after(".SH DESCRIPTION\n");
            assert!(
                description.len() > 20 && !description.starts_with(".SH"),
                "{page}"
            );
        }
    }
}
