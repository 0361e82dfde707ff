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
    let script = String::from_utf8_lossy(&script).into_owned();
    match shell {
        clap_complete::Shell::Bash => bash_subcommand_names(&script, bin),
        clap_complete::Shell::Fish => fish_fixes(script, cmd, bin),
        _ => script,
    }
}

/// Two gaps of clap_complete's fish script. Its "needs a command" test fails while a
/// top-level option waits for its value (`skyhook-run --mode <TAB>` offered file names):
/// such a command line has no subcommand yet, so the test answers yes. And it offers no
/// values for a subcommand's positional (`completions <TAB>`): a line per such positional
/// adds them.
fn fish_fixes(script: String, cmd: &clap::Command, bin: &str) -> String {
    let mut script = script.replace("\n    or return\n", "\n    or return 0\n");
    let prefix = format!("__fish_{}", bin.replace('-', "_"));
    for sub in cmd.get_subcommands() {
        for arg in sub.get_positionals() {
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| v.get_name().to_string())
                .collect();
            if !values.is_empty() {
                script.push_str(&format!(
                    "complete -c {bin} -n \"{prefix}_using_subcommand {}\" -f -a \"{}\"\n",
                    sub.get_name(),
                    values.join(" ")
                ));
            }
        }
    }
    script
}

/// clap_complete's bash script names the states of a hyphenated binary two ways: the loop
/// that follows the words writes `skyhook__run__subcmd__new`, the case that completes reads
/// `skyhook__subcmd__run__subcmd__new` (clap-rs/clap#6421), so no subcommand of
/// `skyhook-run` or `skyhook-agent` completed. The second spelling is rewritten to the first.
fn bash_subcommand_names(script: &str, bin: &str) -> String {
    if !bin.contains('-') {
        return script.to_string();
    }
    let written = bin.replace('-', "__");
    let read = bin.replace('-', "__subcmd__");
    script.replace(&read, &written)
}

/// The man page of `cmd` (roff), from the same definition as its `--help`.
pub fn man_page(cmd: clap::Command) -> Vec<u8> {
    let mut roff = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = clap_mangen::Man::new(cmd).render(&mut roff);
    roff
}

/// Write each `(file name, command)` page of `pages` into `dir` (created if missing);
/// returns their paths.
///
/// # Errors
/// [`CliError::File`] naming the directory or page that cannot be written.
pub fn write_man_pages<const N: usize>(
    dir: &Path,
    pages: [(&str, clap::Command); N],
) -> Result<Vec<std::path::PathBuf>, CliError> {
    let mut written = Vec::new();
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
        written.push(path);
    }
    Ok(written)
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

    /// What bash offers for the last of `words` (the command first) with `script` loaded:
    /// the completion function `func` is called as bash calls it, COMPREPLY is returned. An
    /// empty reply makes bash complete file names (`-o default`).
    fn bash_complete(script: &str, func: &str, words: &[&str]) -> Vec<String> {
        let program = format!(
            "{script}\nCOMP_WORDS=(\"$@\"); COMP_CWORD=$(( $# - 1 ))\n\
             {func} \"${{COMP_WORDS[0]}}\" \"${{COMP_WORDS[COMP_CWORD]}}\" \
             \"${{COMP_WORDS[COMP_CWORD-1]}}\"\nprintf '%s\\n' \"${{COMPREPLY[@]}}\""
        );
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(program)
            .arg("bash")
            .args(words)
            .current_dir(std::env::temp_dir())
            .output()
            .expect("bash runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }

    fn agent_bash() -> String {
        completion_script(
            clap_complete::Shell::Bash,
            &mut super::super::agent::completion_command(),
            "skyhook-agent",
        )
    }

    /// Only the first word of `skyhook-agent` completes to the modes and forms (every word
    /// did); after a mode or `validate` the shell completes paths, after `completions` the
    /// shells, after `serve` its options.
    #[test]
    fn skyhook_agent_bash_completion_by_position() {
        let script = agent_bash();
        let f = "_skyhook__agent";
        let first = bash_complete(&script, f, &["skyhook-agent", ""]);
        for word in [
            "apply",
            "apply-check",
            "interrupt",
            "validate",
            "serve",
            "completions",
        ] {
            assert!(first.contains(&word.to_string()), "{word}: {first:?}");
        }
        let shells = bash_complete(&script, f, &["skyhook-agent", "completions", ""]);
        assert_eq!(
            shells,
            [
                "-h",
                "--help",
                "bash",
                "elvish",
                "fish",
                "powershell",
                "zsh"
            ]
        );
        for words in [
            &["skyhook-agent", "apply", ""][..],
            &["skyhook-agent", "apply", "/", ""],
            &["skyhook-agent", "post-interrupt-check", "/", ""],
            &["skyhook-agent", "validate", ""],
        ] {
            assert_eq!(
                bash_complete(&script, f, words),
                Vec::<String>::new(),
                "{words:?}"
            );
        }
        let serve = bash_complete(&script, f, &["skyhook-agent", "serve", "--r"]);
        assert_eq!(serve, ["--root", "--ring-lines", "--ring-bytes"]);
        let after_option = bash_complete(
            &script,
            f,
            &["skyhook-agent", "serve", "--root", "/", "--li"],
        );
        assert_eq!(after_option, ["--listen"]);
    }

    /// `skyhook-run new --` completes `new`'s options (clap_complete's hyphenated-name states
    /// made every subcommand complete nothing).
    #[test]
    fn skyhook_run_bash_completion_of_subcommands() {
        let script = completion_script(
            clap_complete::Shell::Bash,
            &mut super::super::run::command(),
            "skyhook-run",
        );
        let f = "_skyhook__run";
        let new = bash_complete(&script, f, &["skyhook-run", "new", "--"]);
        assert_eq!(new, ["--configmap", "--help"]);
        let shells = bash_complete(&script, f, &["skyhook-run", "completions", "f"]);
        assert_eq!(shells, ["fish"]);
        let modes = bash_complete(&script, f, &["skyhook-run", "--mode", "apply-c"]);
        assert_eq!(modes, ["apply-check"]);
    }

    /// What fish offers for `line` with `script` loaded (`complete -C`), run in an empty
    /// directory so that no file name is offered.
    fn fish_complete(script: &str, line: &str) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("c.fish"), script).unwrap();
        let out = std::process::Command::new("fish")
            .args(["--no-config", "-c", "source c.fish; complete -C $argv[1]"])
            .arg(line)
            .current_dir(dir.path())
            .output()
            .expect("fish runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.split('\t').next().unwrap_or("").to_string())
            .collect()
    }

    /// fish completes a top-level option's value (`--mode`, `--output`; it offered file
    /// names) and a subcommand's positional values (`completions`; it offered nothing).
    #[test]
    fn skyhook_run_fish_completion_of_values() {
        let script = completion_script(
            clap_complete::Shell::Fish,
            &mut super::super::run::command(),
            "skyhook-run",
        );
        assert_eq!(
            fish_complete(&script, "skyhook-run --mode apply-c"),
            ["apply-check"]
        );
        assert_eq!(
            fish_complete(&script, "skyhook-run --output "),
            ["json", "text"]
        );
        assert_eq!(
            fish_complete(&script, "skyhook-run completions "),
            ["bash", "elvish", "fish", "powershell", "zsh"]
        );
        assert_eq!(
            fish_complete(&script, "skyhook-run new --con"),
            ["--configmap"]
        );
        let agent = completion_script(
            clap_complete::Shell::Fish,
            &mut super::super::agent::completion_command(),
            "skyhook-agent",
        );
        assert_eq!(
            fish_complete(&agent, "skyhook-agent completions "),
            ["bash", "elvish", "fish", "powershell", "zsh"]
        );
        assert_eq!(
            fish_complete(&agent, "skyhook-agent serve --wo"),
            ["--workdir"]
        );
    }

    /// fish offers the modes and forms as the first word of `skyhook-agent` (it offered only
    /// `-h`).
    #[test]
    fn skyhook_agent_fish_completion_has_the_forms() {
        let script = completion_script(
            clap_complete::Shell::Fish,
            &mut super::super::agent::completion_command(),
            "skyhook-agent",
        );
        for word in [
            "apply-check",
            "validate",
            "serve",
            "completions",
            "-l listen",
            "-s V",
        ] {
            assert!(script.contains(word), "{word}: {script}");
        }
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
