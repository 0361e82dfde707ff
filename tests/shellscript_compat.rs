//! The shellscript compatibility mode (`stdlib/shellscript.rhai`, the `examples/shellscript`
//! package) against the bash package shaped like the public one (`tests/fixtures/shellscript`:
//! its dispatcher `shellscript_run.sh STAGE` sources `configmaps/STAGE.sh`), both run by the
//! agent on fresh fake roots with the same configMap scripts. Each case compares what a user
//! sees: the script's output lines, the step's exit status, the agent's exit status and the
//! files changed on the host (the copy dir's own files included, state and logs excluded).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::util::*;

/// The two packages run side by side.
#[derive(Clone, Copy, Debug)]
enum Pkg {
    /// `tests/fixtures/shellscript`: the public package's shape, bash dispatcher.
    Bash,
    /// `examples/shellscript`: `.rhai` steps calling `skyhook/shellscript`.
    Port,
}

/// What one run of a mode showed: the step's output lines (the relay's `[out]`/`[err]`
/// prefix and time stripped, the port's own change list left out), the step's exit status
/// (from `SUCEEDED:`/`FAILED:`), the agent's exit status, and the host files (path and
/// content) added, changed or removed outside the agent's state and log folders.
#[derive(Debug, PartialEq)]
struct Seen {
    output: Vec<String>,
    step_code: i32,
    agent_code: i32,
    changed: Vec<String>,
}

/// Host files (path → content, `dir` for a directory) of the fake root outside the agent's
/// state and logs and the package's own step files (which differ by construction).
fn host_files(fr: &FakeRoot) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let rel = format!("/{}", p.strip_prefix(base).unwrap().to_string_lossy());
            if [
                "/t/state",
                "/t/log",
                "/t/pkg/skyhook_dir",
                "/t/pkg/config.json",
            ]
            .iter()
            .any(|x| rel == *x)
            {
                continue;
            }
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                out.insert(rel, "dir".into());
                walk(base, &p, out);
            } else if ft.is_symlink() {
                out.insert(rel, format!("-> {}", fs::read_link(&p).unwrap().display()));
            } else {
                out.insert(rel, String::from_utf8_lossy(&fs::read(&p).unwrap()).into());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(fr.root(), fr.root(), &mut out);
    out
}

/// A fake root holding package `pkg` at `/t/pkg` with `configmaps` (key, script text).
fn setup(pkg: Pkg, configmaps: &[(&str, &str)]) -> FakeRoot {
    let mut fr = FakeRoot::new();
    fr.set_env("SKYHOOK_RESOURCE_ID", "sky-0000-1_shellscript_1.0.0");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = match pkg {
        Pkg::Bash => manifest.join("tests/fixtures/shellscript"),
        Pkg::Port => manifest.join("examples/shellscript"),
    };
    copy_tree(&src.join("skyhook_dir"), &fr.t("pkg/skyhook_dir")).expect("copy skyhook_dir");
    fs::copy(src.join("config.json"), fr.t("pkg/config.json")).expect("copy config.json");
    fs::create_dir_all(fr.t("pkg/configmaps")).expect("configmaps");
    for (key, text) in configmaps {
        fr.write(&format!("/t/pkg/configmaps/{key}"), text);
    }
    fr
}

/// Run `mode` of `pkg` on a fresh root with `configmaps`; what it showed.
fn seen(pkg: Pkg, configmaps: &[(&str, &str)], mode: &str) -> Seen {
    let fr = setup(pkg, configmaps);
    let before = host_files(&fr);
    let r = fr.run(mode);
    let after = host_files(&fr);
    let mut changed: Vec<String> = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    changed.extend(
        before
            .keys()
            .filter(|k| !after.contains_key(*k))
            .map(|k| format!("{k}: removed")),
    );
    let prefix = re(&format!(r"^\[(out|err)\]{TS} ?"));
    // The agent's result line, and the port's own list of what the step changed (after
    // the script's output).
    let own = re(r"^(SUCEEDED: |FAILED: |> ran: |not undone: |~ run: |Apply: \d+ changed)");
    let output = r
        .all()
        .lines()
        .filter(|l| prefix.is_match(l))
        .map(|l| prefix.replace(l, "").into_owned())
        .filter(|l| !own.is_match(l) && !l.is_empty())
        .collect();
    let result = re(r"(SUCEEDED|FAILED): .*$");
    let line = r
        .lines()
        .into_iter()
        .rev()
        .find(|l| result.is_match(l))
        .unwrap_or_else(|| panic!("{pkg:?} {mode}: no result line\n{}", r.all()))
        .to_string();
    let step_code = if line.contains("SUCEEDED: ") {
        0
    } else {
        line.rsplit(' ')
            .next()
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("{pkg:?} {mode}: no code in {line:?}"))
    };
    Seen {
        output,
        step_code,
        agent_code: r.code,
        changed,
    }
}

/// Run `mode` of both packages with the same `configmaps`; assert they showed the same,
/// and that the bash package showed `expected` (so the case tests what it means to).
#[track_caller]
fn same(configmaps: &[(&str, &str)], mode: &str, expected: &Seen) {
    let bash = seen(Pkg::Bash, configmaps, mode);
    assert_eq!(&bash, expected, "the bash package, {mode}");
    let port = seen(Pkg::Port, configmaps, mode);
    assert_eq!(port, bash, "the port differs from the bash package, {mode}");
}

fn lines(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A top-level `return` ends the sourced script early: the commands after it do not run.
#[test]
fn shellscript_compat_top_level_return_ends_the_script() {
    require_root!();
    let script = "echo before\nreturn 0\necho after\necho skipped > /etc/skipped\n";
    same(
        &[("apply.sh", script)],
        "apply",
        &Seen {
            output: lines(&["before"]),
            step_code: 0,
            agent_code: 0,
            changed: vec![],
        },
    );
    // `return N` is the step's exit status.
    let script = "echo checking\nif true; then return 3; fi\necho unreachable\n";
    same(
        &[("apply_check.sh", script)],
        "apply-check",
        &Seen {
            output: lines(&["checking"]),
            step_code: 3,
            agent_code: 1,
            changed: vec![],
        },
    );
}

/// `$1` is the stage (as the package's step argument passes it), `$#` is 1, `$0` the
/// dispatcher.
#[test]
fn shellscript_compat_first_argument_is_the_stage() {
    require_root!();
    let script = "echo \"stage=$1 count=$# file=$file\"\necho \"dispatcher=${0##*/}\"\n";
    for (mode, key, stage) in [
        ("apply", "apply.sh", "apply"),
        ("config-check", "config_check.sh", "config_check"),
        ("uninstall", "uninstall.sh", "uninstall"),
    ] {
        same(
            &[(key, script)],
            mode,
            &Seen {
                output: lines(&[
                    &format!("stage={stage} count=1 file={stage}"),
                    "dispatcher=shellscript_run.sh",
                ]),
                step_code: 0,
                agent_code: 0,
                changed: vec![],
            },
        );
    }
}

/// The script runs in the step's working directory, the copy dir: `pwd` and relative paths.
#[test]
fn shellscript_compat_working_directory_is_the_copy_dir() {
    require_root!();
    let script = "pwd\necho made > made-here.txt\nls configmaps\n";
    same(
        &[("apply.sh", script)],
        "apply",
        &Seen {
            output: lines(&["/t/pkg", "apply.sh"]),
            step_code: 0,
            agent_code: 0,
            changed: lines(&["/t/pkg/made-here.txt: made\n"]),
        },
    );
}

/// The script's exit status is the step's: `return N`, `exit N`, the last command's.
#[test]
fn shellscript_compat_exit_status_is_the_scripts() {
    require_root!();
    same(
        &[("upgrade.sh", "echo upgrading\nreturn 4\n")],
        "upgrade",
        &Seen {
            output: lines(&["upgrading"]),
            step_code: 4,
            agent_code: 1,
            changed: vec![],
        },
    );
    same(
        &[("apply.sh", "echo failing >&2\nexit 7\necho unreachable\n")],
        "apply",
        &Seen {
            output: lines(&["failing"]),
            step_code: 7,
            agent_code: 1,
            changed: vec![],
        },
    );
    same(
        &[(
            "config.sh",
            "mkdir -p /etc/cfg\necho on > /etc/cfg/x\nfalse\n",
        )],
        "config",
        &Seen {
            output: vec![],
            step_code: 1,
            agent_code: 1,
            changed: lines(&["/etc/cfg: dir", "/etc/cfg/x: on\n"]),
        },
    );
    same(
        &[("apply_check.sh", "test -e /etc/never\n")],
        "apply-check",
        &Seen {
            output: vec![],
            step_code: 1,
            agent_code: 1,
            changed: vec![],
        },
    );
}

/// A stage without a script: the public dispatcher's message on stdout, exit status 0.
#[test]
fn shellscript_compat_missing_script_message_and_status() {
    require_root!();
    for (mode, stage) in [("config", "config"), ("upgrade-check", "upgrade_check")] {
        same(
            &[("apply.sh", "echo unrelated\n")],
            mode,
            &Seen {
                output: vec![format!(
                    "Could not find file /t/pkg/configmaps/{stage}.sh was this in the configmap?"
                )],
                step_code: 0,
                agent_code: 0,
                changed: vec![],
            },
        );
    }
}

/// `skyhook-run --package examples/shellscript --mode apply-check --configmaps DIR`: the
/// configMaps folder is outside the root and the copy dir is only planned, so bash sources
/// the text from its standard input, from `/`, with `$1` the stage and `return` ending it.
/// (Before: the planned copy was taken for a file on disk; bash exited 127, "No such file".)
#[test]
fn shellscript_compat_configmaps_outside_the_root() {
    require_root!();
    let fr = FakeRoot::new();
    fs::create_dir(fr.host("/proc")).unwrap();
    fs::create_dir(fr.host("/dev")).unwrap();
    std::os::unix::fs::symlink("/proc/self/fd/0", fr.host("/dev/stdin")).unwrap();
    let cm = tempfile::tempdir().unwrap();
    fs::write(
        cm.path().join("apply_check.sh"),
        "echo \"stage=$1 count=$# pwd=$(pwd)\"\nreturn 3\necho unreachable\n",
    )
    .unwrap();
    let before = host_files(&fr);
    let proc_dir = fr.host("/proc");
    let out = std::process::Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            "mount -t proc proc \"$1\" && shift && exec \"$@\"",
            "-",
        ])
        .arg(&proc_dir)
        .arg(env!("CARGO_BIN_EXE_skyhook-run"))
        .arg("--package")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/shellscript"))
        .args(["--mode", "apply-check", "--root"])
        .arg(fr.root())
        .arg("--configmaps")
        .arg(cm.path())
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        stdout,
        "==> step apply_check: apply_check.rhai\nstage=apply_check count=1 pwd=/\n\
         failed: return code 3\nPlan: 0 to change, 0 unchanged.\n",
    );
    assert_eq!(host_files(&fr), before);
}
