//! Parity of the two drivers of the one mode loop: the agent (`skyhook-agent MODE R COPY`)
//! and the author's dry run (`skyhook-run --package DIR --mode MODE --root R --output json`)
//! must decide the same thing for every step of a mode on the same host state: skipped by
//! its flag, ran, failed before running (an unset `env:` variable), or not reached. Also:
//! a step whose log file cannot be written (a full tmpfs) still succeeds, with the write
//! error reported (contract 9.3).

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::util::*;

const SKYHOOK_RUN: &str = env!("CARGO_BIN_EXE_skyhook-run");

/// What a case expects for one step of its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// Skipped because its flag exists.
    Skip,
    /// Ran and succeeded (`SUCEEDED:`; dry run `process` or a `rhai` that is ok).
    Run,
    /// Ran and failed (`FAILED:`; only for `.rhai` steps, whose outcome the dry run knows).
    RunFails,
    /// Failed before running: the `env:` variable is unset.
    MissingEnv(&'static str),
    /// Not reached after an earlier failure.
    NotRun,
}

/// What one side decided for one step, normalised so the agent's and the dry run's can be
/// compared.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decided {
    /// The flag that made it skip (a host path).
    Skipped(String),
    /// Ran: its arguments (after `env:` substitution, joined by spaces) and, when known, the
    /// outcome (the dry run knows it only for `.rhai` steps).
    Ran {
        args: Option<String>,
        ok: Option<bool>,
    },
    /// The agent's message for the unset variable.
    MissingEnv(String),
    NotRun,
}

/// One package directory on disk: `config.json`, `skyhook_dir/`, maybe `configmaps/`.
#[derive(Clone, Copy)]
enum Pkg {
    /// The package built by [`demo_package`].
    Demo,
    /// A package from `tests/fixtures/`.
    Fixture(&'static str),
}

struct Case {
    what: &'static str,
    pkg: Pkg,
    mode: &'static str,
    env: &'static [(&'static str, &'static str)],
    /// Indices of the mode's steps whose flags exist before the run.
    flags: &'static [usize],
    /// Host files that exist before the run.
    files: &'static [(&'static str, &'static str)],
    want: &'static [Want],
    /// Lines the agent must print (the reason a flagged step ran anyway).
    notes: &'static [&'static str],
}

fn bash(body: &str) -> String {
    format!("#!/bin/sh\n{body}\n")
}

/// `demo` 1.0.0: bash steps, `env:` arguments, an idempotent step and `.rhai` steps whose
/// outcome depends on the host (`/etc/demo/block` fails `a3.rhai`, a missing
/// `/etc/demo/a.conf` fails the check `c1.rhai`).
fn demo_package(fr: &FakeRoot) {
    let mut a4 = step("a4", "a4.sh", &[]);
    a4["idempotence"] = json!(true);
    fr.write_config(&config(json!({
        "apply": [
            step("a1", "a1.sh", &["x"]),
            step("a2", "a2.sh", &["env:NODE_NAME", "z"]),
            step("a3", "a3.rhai", &["y"]),
            a4,
        ],
        "apply-check": [
            step("c1", "c1.rhai", &[]),
            step("c2", "c2.sh", &[]),
            step("c3", "c3.sh", &["env:NODE_NAME"]),
            step("c4", "c4.sh", &[]),
        ],
        "config": [step("k1", "k1.sh", &["x"]), step("k2", "k2.rhai", &[])],
        "config-check": [step("kc", "ok_check.sh", &[])],
        "uninstall": [step("u1", "u1.sh", &[])],
        "uninstall-check": [step("uc", "ok_check.sh", &[])],
        "upgrade": [step("g1", "g1.sh", &[])],
        "upgrade-check": [step("gc", "ok_check.sh", &[])],
    })));
    for s in [
        "a1.sh",
        "a2.sh",
        "a4.sh",
        "c2.sh",
        "c3.sh",
        "c4.sh",
        "k1.sh",
        "u1.sh",
        "g1.sh",
        "ok_check.sh",
    ] {
        fr.write_step(s, &bash("echo \"step output: $*\""));
    }
    fr.write_step(
        "a3.rhai",
        "if fs::exists(\"/etc/demo/block\") { fail(\"blocked by /etc/demo/block\"); }\n\
         fs::write(\"/etc/demo/a.conf\", `a=${step.args[0]}\\n`);\n",
    );
    fr.write_step(
        "c1.rhai",
        "if !fs::exists(\"/etc/demo/a.conf\") { fail(\"/etc/demo/a.conf is missing\"); }\n",
    );
    fr.write_step("k2.rhai", "print(`configuring in ${step.mode}`);\n");
}

fn install(fr: &FakeRoot, pkg: Pkg) {
    match pkg {
        Pkg::Demo => demo_package(fr),
        Pkg::Fixture(name) => {
            let src = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures")
                .join(name);
            copy_tree(&src, &fr.t("pkg")).expect("copy the fixture package");
        }
    }
}

/// Python's `repr` of a list of plain strings (no quotes or backslashes in them).
fn repr_list(items: &[Value]) -> String {
    let inner: Vec<String> = items
        .iter()
        .map(|a| format!("'{}'", a.as_str().expect("string argument")))
        .collect();
    format!("[{}]", inner.join(", "))
}

/// Host path of the flag of `step` (a config.json step object) of package `name` `version`.
fn flag_host_path(name: &str, version: &str, step: &Value) -> String {
    let args = repr_list(step["arguments"].as_array().expect("arguments"));
    let codes: Vec<String> = step["returncodes"]
        .as_array()
        .expect("returncodes")
        .iter()
        .map(|c| c.to_string())
        .collect();
    format!(
        "{T}/state/flags/{name}/{version}/{}_{}",
        step["path"].as_str().expect("path"),
        marker(&format!("{args}_[{}]", codes.join(", ")))
    )
}

/// Assert two [`tree`] listings are equal, naming the entries that differ.
#[track_caller]
fn assert_same_tree(before: &[String], after: &[String], ctx: &str) {
    let gone: Vec<&str> = before
        .iter()
        .filter(|e| !after.contains(e))
        .map(String::as_str)
        .collect();
    let new: Vec<&str> = after
        .iter()
        .filter(|e| !before.contains(e))
        .map(String::as_str)
        .collect();
    assert!(
        gone.is_empty() && new.is_empty(),
        "{ctx}: the dry run changed the root\n--- before ---\n{}\n--- after ---\n{}",
        gone.join("\n"),
        new.join("\n"),
    );
}

/// The agent's decision per step of `mode`, read from its stdout: `Skipping <path> because
/// <flag> exists.`, or the header `<mode> <path> [...` followed by `SUCEEDED: <path> <args>`,
/// `FAILED: <path> ...` or `<path>: Expected environment variable did not exist: NAME`;
/// nothing at all for a step not reached. Steps are read in order.
fn agent_decisions(stdout: &str, mode: &str, steps: &[Value]) -> Vec<Decided> {
    // An agent line may follow the dangling `[out]<TS> ` prefix of the step's output (9.3).
    let relay = re(r"\A\[(?:out|err)\]{TS} ");
    let lines: Vec<&str> = stdout
        .lines()
        .map(|l| relay.find(l).map_or(l, |m| &l[m.end()..]))
        .collect();
    let mut at = 0;
    let mut out = Vec::new();
    for s in steps {
        let path = s["path"].as_str().expect("path");
        let skip_prefix = format!("Skipping {path} because ");
        let header = format!("{mode} {path} [");
        let found = lines[at..]
            .iter()
            .position(|l| l.starts_with(&skip_prefix) || l.starts_with(&header))
            .map(|i| i + at);
        let Some(i) = found else {
            let mentioned: Vec<&&str> = lines[at..].iter().filter(|l| l.contains(path)).collect();
            assert!(
                mentioned.is_empty(),
                "agent: {path} not decided but mentioned after line {at}: {mentioned:?}\n{stdout}"
            );
            out.push(Decided::NotRun);
            continue;
        };
        if let Some(rest) = lines[i].strip_prefix(&skip_prefix) {
            let flag = rest
                .strip_suffix(" exists.")
                .unwrap_or_else(|| panic!("agent: odd skip line {:?}", lines[i]));
            out.push(Decided::Skipped(flag.to_string()));
            at = i + 1;
            continue;
        }
        let ok_prefix = format!("SUCEEDED: {path} ");
        let fail_prefix = format!("FAILED: {path} ");
        let env_prefix = format!("{path}: Expected environment variable did not exist: ");
        let end = lines[i + 1..]
            .iter()
            .position(|l| {
                l.starts_with(&ok_prefix)
                    || l.starts_with(&fail_prefix)
                    || l.starts_with(&env_prefix)
            })
            .map(|j| j + i + 1)
            .unwrap_or_else(|| panic!("agent: {path} has a header but no outcome\n{stdout}"));
        let line = lines[end];
        out.push(if let Some(args) = line.strip_prefix(&ok_prefix) {
            Decided::Ran {
                args: Some(args.to_string()),
                ok: Some(true),
            }
        } else if line.starts_with(&fail_prefix) {
            Decided::Ran {
                args: None,
                ok: Some(false),
            }
        } else {
            // Every missing name has its line; the dry run joins them with "; ".
            let mut msgs = vec![line.to_string()];
            let mut k = end + 1;
            while k < lines.len() && lines[k].starts_with(&env_prefix) {
                msgs.push(lines[k].to_string());
                k += 1;
            }
            Decided::MissingEnv(msgs.join("; "))
        });
        at = end + 1;
    }
    out
}

/// The dry run's decision per step (the `root_dir/` overlay entry left out), checked to be
/// the mode's steps in order.
fn dry_run_decisions(plan: &Value, steps: &[Value]) -> Vec<Decided> {
    let planned: Vec<&Value> = plan["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("no steps array: {plan:#}"))
        .iter()
        .filter(|s| s["kind"] != "overlay")
        .collect();
    assert_eq!(planned.len(), steps.len(), "dry run steps: {plan:#}");
    planned
        .iter()
        .zip(steps)
        .map(|(p, s)| {
            assert_eq!(p["path"], s["path"], "dry run step order: {plan:#}");
            assert_eq!(p["name"], s["name"], "dry run step order: {plan:#}");
            let args = || {
                let a: Vec<&str> = p["args"]
                    .as_array()
                    .expect("args")
                    .iter()
                    .map(|a| a.as_str().expect("string arg"))
                    .collect();
                Some(a.join(" "))
            };
            match p["kind"].as_str().expect("kind") {
                "skipped" => Decided::Skipped(p["flag"].as_str().expect("flag").to_string()),
                "process" => Decided::Ran {
                    args: args(),
                    ok: None,
                },
                "rhai" => Decided::Ran {
                    args: args(),
                    ok: Some(p["result"]["ok"].as_bool().expect("result.ok")),
                },
                "failed" => Decided::MissingEnv(p["error"].as_str().expect("error").to_string()),
                "not_run" => Decided::NotRun,
                k => panic!("unexpected step kind {k}: {plan:#}"),
            }
        })
        .collect()
}

/// `want` as a decision of `step` (for the fields both sides know exactly).
fn matches_want(d: &Decided, want: Want, step: &Value, flag: &str) -> bool {
    let path = step["path"].as_str().expect("path");
    match (want, d) {
        (Want::Skip, Decided::Skipped(f)) => f == flag,
        (Want::Run, Decided::Ran { ok, .. }) => *ok != Some(false),
        (Want::RunFails, Decided::Ran { ok, .. }) => *ok == Some(false),
        (Want::MissingEnv(name), Decided::MissingEnv(m)) => {
            *m == format!("{path}: Expected environment variable did not exist: {name}")
        }
        (Want::NotRun, Decided::NotRun) => true,
        _ => false,
    }
}

fn run_case(case: &Case) {
    let ctx = format!("case {:?} ({})", case.what, case.mode);
    let mut fr = FakeRoot::new();
    install(&fr, case.pkg);
    let cfg: Value =
        serde_json::from_str(&fr.read(&format!("{T}/pkg/config.json"))).expect("config.json");
    let (name, version) = (
        cfg["package_name"].as_str().expect("name").to_string(),
        cfg["package_version"]
            .as_str()
            .expect("version")
            .to_string(),
    );
    fr.set_env(
        "SKYHOOK_RESOURCE_ID",
        &format!("sky-0000-1_{name}_{version}"),
    );
    for (k, v) in case.env {
        fr.set_env(k, v);
    }
    let steps: Vec<Value> = cfg["modes"][case.mode]
        .as_array()
        .unwrap_or_else(|| panic!("{ctx}: no such mode"))
        .clone();
    assert_eq!(steps.len(), case.want.len(), "{ctx}: one Want per step");
    let flags: Vec<String> = steps
        .iter()
        .map(|s| flag_host_path(&name, &version, s))
        .collect();
    for &i in case.flags {
        fr.write(
            &flags[i],
            format!(
                "last_run: 2025-01-01T00:00:00.000001\nstep_always_runs: {}",
                if steps[i]["idempotence"] == true {
                    "True"
                } else {
                    "False"
                }
            ),
        );
    }
    for (path, content) in case.files {
        fr.write(path, content);
    }

    // The dry run first, on the state the agent will see: it must write nothing.
    let before = tree(fr.root());
    let out = Command::new(SKYHOOK_RUN)
        .arg("--package")
        .arg(fr.t("pkg"))
        .args(["--mode", case.mode, "--output", "json", "--root"])
        .arg(fr.root())
        .env_clear()
        .envs(fr.env_vars())
        .current_dir(fr.root())
        .stdin(Stdio::null())
        .output()
        .expect("run skyhook-run");
    let dry_stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{ctx}: skyhook-run stdout is not one JSON document ({e}): {:?}\nstderr: {dry_stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_same_tree(&before, &tree(fr.root()), &ctx);

    let run = fr.run(case.mode);

    let agent = agent_decisions(&run.stdout, case.mode, &steps);
    let dry = dry_run_decisions(&plan, &steps);
    let report = || {
        format!(
            "{ctx}\nwant  {:?}\nagent {agent:?}\ndry   {dry:?}\n--- agent stdout ---\n{}\n--- agent stderr ---\n{}\n--- dry run ---\n{plan:#}\n{dry_stderr}",
            case.want, run.stdout, run.stderr
        )
    };
    for (i, s) in steps.iter().enumerate() {
        let (a, d, w) = (&agent[i], &dry[i], case.want[i]);
        // The agent shows the flag in its own filesystem (root mount + host path, as the
        // Python agent); the dry run reports the host path.
        let agent_flag = format!("{}{}", fr.root_str(), flags[i]);
        assert!(
            matches_want(a, w, s, &agent_flag),
            "agent, step {i}: {}",
            report()
        );
        assert!(
            matches_want(d, w, s, &flags[i]),
            "dry run, step {i}: {}",
            report()
        );
        // Where both know a detail, they agree on it: the arguments a step ran with and the
        // outcome of a `.rhai` step.
        if let (Decided::Ran { args: aa, ok: ao }, Decided::Ran { args: da, ok: dok }) = (a, d) {
            if let (Some(aa), Some(da)) = (aa, da) {
                assert_eq!(aa, da, "step {i} arguments: {}", report());
            }
            if dok.is_some() {
                assert_eq!(ao, dok, "step {i} outcome: {}", report());
            }
        }
    }
    for note in case.notes {
        run.has_line(note);
    }
    let failed = case
        .want
        .iter()
        .any(|w| matches!(w, Want::RunFails | Want::MissingEnv(_)));
    assert_eq!(
        run.code,
        i32::from(failed),
        "agent exit status: {}",
        report()
    );
    assert_eq!(plan["ok"], json!(!failed), "dry run ok: {}", report());
    assert_eq!(
        out.status.code(),
        Some(i32::from(failed)),
        "dry run exit: {}",
        report()
    );
}

const HISTORY: &str = "/t/state/history/demo.json";
const HISTORY_090: &str = r#"{"current-version": "0.9.0", "history": [{"version": "0.9.0", "time": "2025-01-01T00:00:00+00:00"}]}"#;
const ALWAYS: &str = "OVERLAY_ALWAYS_RUN_STEP";
const IDEMPOTENT: &str = "Flag exists but idempotence is Idempotence.Disabled so running step.";
const NO_IDEMPOTENCE: &str = "Flag exists but CONFIG, UNINSTALL, and UPGRADE mode don't support idempotence so running step anyway.";

#[test]
fn agent_and_dry_run_decide_the_same_steps() {
    require_root!();
    use Want::*;
    let node = &[("NODE_NAME", "n1")];
    let cases = [
        Case {
            what: "fresh host",
            pkg: Pkg::Demo,
            mode: "apply",
            env: node,
            flags: &[],
            files: &[],
            want: &[Run, Run, Run, Run],
            notes: &[],
        },
        Case {
            what: "flags for a1, a3 (rhai) and a4 (idempotence: true)",
            pkg: Pkg::Demo,
            mode: "apply",
            env: node,
            flags: &[0, 2, 3],
            files: &[],
            want: &[Skip, Run, Skip, Run],
            notes: &[IDEMPOTENT],
        },
        Case {
            what: "every flag, OVERLAY_ALWAYS_RUN_STEP=true",
            pkg: Pkg::Demo,
            mode: "apply",
            env: &[("NODE_NAME", "n1"), (ALWAYS, "true")],
            flags: &[0, 1, 2, 3],
            files: &[],
            want: &[Run, Run, Run, Run],
            notes: &[],
        },
        Case {
            what: "flag for a1, NODE_NAME unset",
            pkg: Pkg::Demo,
            mode: "apply",
            env: &[],
            flags: &[0],
            files: &[],
            want: &[Skip, MissingEnv("NODE_NAME"), NotRun, NotRun],
            notes: &[],
        },
        Case {
            what: "the rhai step fails on this host",
            pkg: Pkg::Demo,
            mode: "apply",
            env: node,
            flags: &[],
            files: &[("/etc/demo/block", "")],
            want: &[Run, Run, RunFails, NotRun],
            notes: &[],
        },
        Case {
            what: "config ignores flags",
            pkg: Pkg::Demo,
            mode: "config",
            env: &[],
            flags: &[0, 1],
            files: &[],
            want: &[Run, Run],
            notes: &[NO_IDEMPOTENCE],
        },
        Case {
            what: "uninstall ignores flags",
            pkg: Pkg::Demo,
            mode: "uninstall",
            env: &[],
            flags: &[0],
            files: &[],
            want: &[Run],
            notes: &[NO_IDEMPOTENCE],
        },
        Case {
            what: "upgrade ignores flags",
            pkg: Pkg::Demo,
            mode: "upgrade",
            env: &[],
            flags: &[0],
            // A node that had 0.9.0 (without a history directory the dry run creates one:
            // see `dry_run_of_upgrade_writes_no_history_state`).
            files: &[(HISTORY, HISTORY_090)],
            want: &[Run],
            notes: &[NO_IDEMPOTENCE],
        },
        Case {
            what: "failed checks do not stop later checks (flags are not looked at)",
            pkg: Pkg::Demo,
            mode: "apply-check",
            env: &[],
            flags: &[0, 1, 2, 3],
            files: &[],
            want: &[RunFails, Run, MissingEnv("NODE_NAME"), Run],
            notes: &[],
        },
        Case {
            what: "every check passes",
            pkg: Pkg::Demo,
            mode: "apply-check",
            env: node,
            flags: &[],
            files: &[("/etc/demo/a.conf", "a=y\n")],
            want: &[Run, Run, Run, Run],
            notes: &[],
        },
        Case {
            what: "shellscript fixture: idempotence: true runs despite its flag",
            pkg: Pkg::Fixture("shellscript"),
            mode: "apply",
            env: &[],
            flags: &[0],
            files: &[],
            want: &[Run],
            notes: &[IDEMPOTENT],
        },
        Case {
            what: "tuning fixture: apply is skipped by its flag",
            pkg: Pkg::Fixture("tuning"),
            mode: "apply",
            env: &[],
            flags: &[0],
            files: &[],
            want: &[Skip],
            notes: &[],
        },
    ];
    for case in &cases {
        run_case(case);
    }
}

/// `skyhook-run --package --mode upgrade` reads the history for the previous version; a dry
/// run writes nothing, so it must neither create `<state root>/history/` on a fresh node nor
/// move a corrupt history file to `.backup` (the agent does both, contract 6.3). Regression:
/// the dry run used the agent's writing history read.
#[test]
fn dry_run_of_upgrade_writes_no_history_state() {
    require_root!();
    for history in [None, Some("{not json")] {
        let fr = FakeRoot::new();
        demo_package(&fr);
        if let Some(h) = history {
            fr.write(HISTORY, h);
        }
        let before = tree(fr.root());
        let out = Command::new(SKYHOOK_RUN)
            .arg("--package")
            .arg(fr.t("pkg"))
            .args(["--mode", "upgrade", "--output", "json", "--root"])
            .arg(fr.root())
            .env_clear()
            .envs(fr.env_vars())
            .stdin(Stdio::null())
            .output()
            .expect("run skyhook-run");
        let plan: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        assert_eq!(plan["steps"][0]["kind"], "process", "{plan:#}");
        assert_eq!(plan["steps"][0]["args"], json!([]), "{plan:#}");
        assert_eq!(out.status.code(), Some(0), "{plan:#}");
        assert_same_tree(&before, &tree(fr.root()), &format!("history {history:?}"));
    }
}

/// 16000 lines of 63 `x` and a newline: 1 024 000 bytes on stdout.
const BIG_BASH: &str = "#!/bin/bash\nline=$(printf '%063d' 0 | tr 0 x)\nfor i in {1..16000}; do echo \"$line\"; done\n";
/// 20000 lines of 60 `x`: about 1.2 MB printed.
const BIG_RHAI: &str = "let s = \"\";\ns.pad(60, 'x');\nfor i in 0..20000 { print(s); }\n";

/// A step's log files live on a 64 KiB tmpfs (`SKYHOOK_LOG_DIR`, mounted in a private mount
/// namespace) and the step prints about 1 MB: the log write fails with ENOSPC. Contract 9.3:
/// output errors do not change a step's outcome — the error is named on stderr, the console
/// still gets every line, the step succeeds, its flag is written and the agent exits 0. The
/// same for a bash step and a `.rhai` step.
#[test]
fn bash_step_log_write_failure_is_reported() {
    require_root!();
    for (path, body, lines) in [("big.sh", BIG_BASH, 16000), ("big.rhai", BIG_RHAI, 20000)] {
        let mut fr = FakeRoot::new();
        fr.set_env("SKYHOOK_LOG_DIR", "/var/log/skyhook");
        fr.write_config(&config(json!({
            "apply": [step("big", path, &[])],
            "apply-check": [step("big_check", "big_check.sh", &[])],
        })));
        fr.write_step(path, body);
        fr.write_step("big_check.sh", "#!/bin/sh\nexit 0\n");
        let logs = fr.host("/var/log/skyhook");
        fs::create_dir_all(&logs).expect("create the log mount point");
        let r = fr.root_str();
        let run = fr.run_unshared(
            &format!(
                "mount -t tmpfs -o size=64k skyhook-test-logs '{}'",
                logs.display()
            ),
            &["apply", &r, "/t/pkg"],
        );
        let ctx = format!(
            "{path}\n--- stderr ---\n{}\n--- stdout (last 300 bytes) ---\n{}",
            run.stderr,
            &run.stdout[run.stdout.len().saturating_sub(300)..]
        );
        assert_eq!(run.code, 0, "exit status: {ctx}");
        run.has_line(&format!("apply {path} [] [0] Idempotence.Auto True"));
        run.has_line_ending(&format!("SUCEEDED: {path} "));
        // Every line reached the console although the log file could not take them.
        let xs = format!(
            " {}",
            "x".repeat(if path.ends_with(".sh") { 63 } else { 60 })
        );
        assert_eq!(
            run.stdout.lines().filter(|l| l.ends_with(&xs)).count(),
            lines,
            "console lines: {ctx}"
        );
        // The failed write is named once: the agent's prefix, the log file and ENOSPC.
        let errors: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.starts_with("skyhook-agent: "))
            .collect();
        assert_eq!(errors.len(), 1, "log write errors: {ctx}");
        assert_full_match(
            errors[0],
            &format!(
                r"skyhook-agent: failed to write step output to /var/log/skyhook/demo/1\.0\.0/{}-{{FTS}}\.log: No space left on device \(os error 28\)",
                regex::escape(path)
            ),
        );
        // The step's flag is written (it succeeded); START too.
        assert!(
            fr.exists(&format!("{T}/state/flags/demo/1.0.0/{path}_W11fWzBd")),
            "no flag: {ctx}"
        );
        // The tmpfs went away with the namespace: nothing reached the disk below it.
        assert_eq!(fr.list("/var/log/skyhook"), Vec::<String>::new(), "{ctx}");
    }
}
