//! CLI conventions of both binaries: `--version` with the git revision and build date,
//! `skyhook-run completions SHELL` generated from the clap definitions.

use std::process::Command;

use crate::util::{AGENT, re_full};

const RUN: &str = env!("CARGO_BIN_EXE_skyhook-run");

fn out(bin: &str, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(bin)
        .args(args)
        .output()
        .expect("run the binary");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn version_has_revision_and_build_date() {
    for (bin, name) in [(AGENT, "skyhook-agent"), (RUN, "skyhook-run")] {
        for flag in ["--version", "-V"] {
            let (code, stdout, _) = out(bin, &[flag]);
            assert_eq!(code, 0, "{name} {flag}");
            let pattern = format!(
                r"{name} {} \((?:[0-9a-f]{{7,40}}|unknown), built \d{{4}}-\d\d-\d\d\)\n",
                regex::escape(env!("CARGO_PKG_VERSION"))
            );
            assert!(
                re_full(&pattern).is_match(&stdout),
                "{name} {flag}: {stdout:?} !~ {pattern}"
            );
        }
    }
}

#[test]
fn completions_for_bash_zsh_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, stdout, stderr) = out(RUN, &["completions", shell]);
        assert_eq!(code, 0, "{shell}: {stderr}");
        for word in ["skyhook-run", "package", "detailed-exitcode", "check"] {
            assert!(stdout.contains(word), "{shell} completions lack {word}");
        }
    }
    let (code, _, stderr) = out(RUN, &["completions", "tcsh"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("invalid value 'tcsh'"), "{stderr}");
}
