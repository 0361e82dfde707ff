//! `.rhai` steps in the agent: compile-ahead, apply/check from one script, result lines and
//! logs like a bash step, `returncodes`, `fail()`, interrupts requested by scripts,
//! shellscript compatibility (`configmaps/STAGE.rhai`) and secret redaction.

use serde_json::json;

use crate::util::*;

fn rhai_step(path: &str, args: &[&str]) -> serde_json::Value {
    step(path.trim_end_matches(".rhai"), path, args)
}

/// A package whose apply and apply-check both run `apply.rhai`.
fn one_script(fr: &FakeRoot, body: &str) {
    fr.write_config(&config(json!({
        "apply": [rhai_step("apply.rhai", &["x"])],
        "apply-check": [rhai_step("apply.rhai", &["x"])],
    })));
    fr.write_step("apply.rhai", body);
}

/// The flag of [`one_script`]'s apply step once it succeeded.
fn apply_x_flag() -> String {
    format!(
        "/t/state/flags/demo/1.0.0/apply.rhai_{}",
        marker("['x']_[0]")
    )
}

/// The `.log` files of step `step` of package demo 1.0.0 (named `STEP-FTS.log`), their
/// contents in the order of their names (oldest first).
fn step_logs(fr: &FakeRoot, step: &str) -> Vec<String> {
    let mut logs = fr.logs_matching(&format!(r"{}-{FTS}\.log", regex::escape(step)));
    logs.sort();
    logs.iter()
        .map(|l| fr.read(&format!("/t/log/demo/1.0.0/{l}")))
        .collect()
}

/// An apply of the package on `fr` that fails before any step starts, its error at
/// `position`: exit 1, the position in stderr, no state written. The run.
fn refused_before_start(fr: &FakeRoot, position: &str) -> Run {
    let r = fr.run("apply");
    r.code(1);
    assert!(r.stderr.contains(position), "stderr: {}", r.stderr);
    assert!(
        !fr.exists("/t/state"),
        "state written despite an error found before start: {}",
        r.stderr
    );
    r
}

/// A root ready for interrupts ([`FakeRoot::interrupt_setup`]) with [`one_script`] `body`
/// and, when given, the operator's node metadata `packages.json`.
fn interrupt_host(body: &str, packages_json: Option<&str>) -> FakeRoot {
    let mut fr = FakeRoot::new();
    fr.interrupt_setup();
    one_script(&fr, body);
    if let Some(json) = packages_json {
        fr.write("/t/pkg/node-metadata/packages.json", json);
    }
    fr
}

/// A package whose apply is bash step `foo.sh` (`script`) and check `foo_check.sh` (exit
/// 0), run with `API_TOKEN=secret` listed in `SKYHOOK_REDACT_ENV`.
fn redacting_package(script: &str, secret: &str) -> FakeRoot {
    let mut fr = FakeRoot::new();
    fr.write_config(&config(json!({
        "apply": [step("foo", "foo.sh", &[])],
        "apply-check": [step("foo_check", "foo_check.sh", &[])],
    })));
    fr.write_step("foo.sh", script);
    fr.write_step("foo_check.sh", "#!/bin/sh\nexit 0\n");
    fr.set_env("API_TOKEN", secret);
    fr.set_env("SKYHOOK_REDACT_ENV", "API_TOKEN");
    fr
}

const WRITE_CONF: &str = r#"
print(`mode=${step.mode} arg=${step.args[0]}`);
if fs::write("/etc/demo.conf", "k=v\n") { print("wrote"); }
"#;

#[test]
fn rhai_apply_then_check_from_the_same_script() {
    require_root!();
    let fr = FakeRoot::new();
    one_script(&fr, WRITE_CONF);

    // check before apply: the pending write is drift, the check fails, nothing changes
    let r = fr.run("apply-check");
    r.code(1)
        .has_line("apply-check apply.rhai ['x'] [0] Idempotence.Auto True")
        .has_line_ending("FAILED: apply.rhai x 1");
    // the drift log lists each drifted change once, with its position and diff
    assert_eq!(
        r.stderr
            .matches("~ create /etc/demo.conf (mode 0644)  # ")
            .count(),
        1,
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("apply.rhai:3\n"), "{}", r.stderr);
    assert!(r.stderr.contains("  +++ b/etc/demo.conf\n"), "{}", r.stderr);
    assert!(r.stderr.contains("  +k=v\n"), "{}", r.stderr);
    assert!(!fr.exists("/etc/demo.conf"));
    assert_eq!(fr.read("/t/state/flags/check_results"), "apply.rhai True");

    // apply: the file is written, the flag is a normal flag, the log has [out] lines (the
    // script's, then what the step changed)
    let r = fr.run("apply");
    r.code(0)
        .has_line("apply apply.rhai ['x'] [0] Idempotence.Auto True")
        .has_line_ending("SUCEEDED: apply.rhai x");
    assert_eq!(fr.read("/etc/demo.conf"), "k=v\n");
    assert!(fr.exists(&apply_x_flag()));
    // one log from the failed check, one from the apply (same step path, same directory)
    let logs = step_logs(&fr, "apply.rhai");
    assert_eq!(logs.len(), 2, "{logs:?}");
    assert_full_match(
        &logs[1],
        &format!(
            concat!(
                r"\[out\]{TS} mode=apply arg=x\n\[out\]{TS} wrote\n",
                r"\[out\]{TS} ~ create /etc/demo\.conf \(mode 0644\)  # /t/pkg/skyhook_dir/apply\.rhai:3\n",
                r"\[out\]{TS} Apply: 1 changed, 0 unchanged\.\n\[out\]{TS} "
            ),
            TS = TS
        ),
    );

    // second apply: skipped by its flag; check now passes and records history
    fr.run("apply")
        .code(0)
        .has_line_between("Skipping apply.rhai because ", " exists.");
    fr.run("apply-check")
        .code(0)
        .has_line_ending("SUCEEDED: apply.rhai x");
    assert_eq!(fr.read("/t/state/flags/check_results"), "apply.rhai False");
    assert!(fr.exists("/t/state/flags/apply-check_ALL_CHECKED"));
    assert!(
        fr.read("/t/state/history/demo.json")
            .starts_with(r#"{"current-version": "1.0.0""#)
    );
}

/// Three changes, one into a missing directory, between two prints.
const THREE_CHANGES: &str = r#"print("start");
fs::write("/etc/demo.d/a.conf", "a=1\n");
fs::write("/etc/b.conf", "b=2\n", #{mode: 0o600});
fs::remove("/etc/old.conf");
print("end");
"#;

/// A run-mode `.rhai` step lists what it changed on its stdout after its own output, as
/// step output lines (console and `.log` alike): one line per change with the script line
/// that made it, then the summary. A rerun that changes nothing says nothing more.
#[test]
fn rhai_apply_lists_each_change_with_its_line() {
    require_root!();
    let mut fr = FakeRoot::new();
    fr.write_mode("/etc/b.conf", "b=1\n", 0o644);
    fr.write("/etc/old.conf", "x\n");
    one_script(&fr, THREE_CHANGES);
    let r = fr.run("apply");
    r.code(0);
    let prefix = re(&format!(r"\[(out|err)\]{TS} "));
    let strip = |s: &str| prefix.replace_all(s, "").into_owned();
    let at = "/t/pkg/skyhook_dir/apply.rhai";
    let listed = format!(
        "start\n\
         end\n\
         + mkdir /etc/demo.d\n\
         ~ create /etc/demo.d/a.conf (mode 0644)  # {at}:2\n\
         ~ update /etc/b.conf (mode 0644 -> 0600)  # {at}:3\n\
         ~ remove /etc/old.conf  # {at}:4\n\
         Apply: 3 changed, 0 unchanged.\n"
    );
    let logs = step_logs(&fr, "apply.rhai");
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(strip(&logs[0]), listed);
    // on the console, right before the result line
    assert!(
        strip(&r.stdout).contains(&format!("{listed}SUCEEDED: apply.rhai x\n")),
        "{}",
        r.stdout
    );
    assert_eq!(fr.read("/etc/b.conf"), "b=2\n");
    assert!(!fr.exists("/etc/old.conf"));

    // nothing left to change: the step's output is its own
    fr.set_env("OVERLAY_ALWAYS_RUN_STEP", "true");
    let r = fr.run("apply");
    r.code(0);
    assert!(
        strip(&r.stdout).contains("start\nend\nSUCEEDED: apply.rhai x\n"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("Apply:"), "{}", r.stdout);
}

#[test]
fn rhai_syntax_error_changes_nothing() {
    require_root!();
    let fr = FakeRoot::new();
    one_script(&fr, "let x = 1;\nlet y = ;\n");
    refused_before_start(&fr, "/t/pkg/skyhook_dir/apply.rhai:2:9:");
    assert!(!fr.exists("/t/log"));
}

#[test]
fn rhai_missing_import_is_found_before_start() {
    require_root!();
    let fr = FakeRoot::new();
    one_script(&fr, "import \"lib/nope\" as n;\nprint(1);\n");
    refused_before_start(&fr, "apply.rhai:1:");
}

#[test]
fn rhai_fail_and_return_codes() {
    require_root!();
    let fr = FakeRoot::new();
    one_script(&fr, "fail(\"the host is not ready\");\n");
    let r = fr.run("apply");
    r.code(1).has_line_ending("FAILED: apply.rhai x 1");
    assert!(r.stderr.contains("the host is not ready"), "{}", r.stderr);
    assert!(!fr.exists(&apply_x_flag()));

    // an integer value is the return code, checked against returncodes
    let mut fr = FakeRoot::new();
    let mut s = rhai_step("apply.rhai", &[]);
    s["returncodes"] = json!([0, 3]);
    fr.write_config(&config(json!({"apply": [s.clone()], "apply-check": [s]})));
    fr.write_step("apply.rhai", "3\n");
    fr.run("apply")
        .code(0)
        .has_line_ending("SUCEEDED: apply.rhai ");
    fr.write_step("apply.rhai", "4\n");
    fr.set_env("OVERLAY_ALWAYS_RUN_STEP", "true");
    fr.run("apply")
        .code(1)
        .has_line_ending("FAILED: apply.rhai  4");
}

/// A command that exits non-zero fails the step: `run(["nvidia-smi", "-L"])` exiting 9 is
/// `FAILED` (exit 1, no flag, the script stops there); with `ok: [0, 9]` the script expects
/// the code, reads it and the step succeeds.
#[test]
fn a_failing_command_fails_the_rhai_step() {
    require_root!();
    let fr = FakeRoot::new();
    let calls = format!("{T}/calls");
    fr.stub(
        "/usr/bin",
        "nvidia-smi",
        &calls,
        &[ExitRule {
            arg: 1,
            value: "-L",
            code: 9,
        }],
    );
    one_script(
        &fr,
        "run([\"nvidia-smi\", \"-L\"]);\nfs::write(\"/etc/after.conf\", \"x\\n\");\n",
    );
    let r = fr.run("apply");
    r.code(1).has_line_ending("FAILED: apply.rhai x 1");
    assert!(!r.stdout.contains("SUCEEDED"), "{}", r.stdout);
    assert!(
        r.stderr
            .contains("apply.rhai:1:1: run: command nvidia-smi -L failed with exit code 9"),
        "{}",
        r.stderr
    );
    assert!(!fr.exists("/etc/after.conf"));
    assert!(!fr.exists(&apply_x_flag()));
    assert_eq!(fr.calls().as_deref(), Some("nvidia-smi -L\n"));

    one_script(
        &fr,
        "let r = run([\"nvidia-smi\", \"-L\"], #{ok: [0, 9]});\nfs::write(\"/etc/after.conf\", \"code=\" + r.code);\n",
    );
    fr.run("apply")
        .code(0)
        .has_line_ending("SUCEEDED: apply.rhai x");
    assert_eq!(fr.read("/etc/after.conf"), "code=9");
}

/// A step never interrupts the node itself: a requested interrupt that the package's
/// Skyhook CR does not declare (the operator's node metadata) fails the step with the CR lines
/// to add; a declared one is left to the operator; without node metadata a warning. No
/// systemctl or reboot runs in any of these cases.
#[test]
fn rhai_requested_interrupts_are_judged_never_run() {
    require_root!();
    let body = "if fs::write(\"/etc/demo.conf\", \"k=v\\n\") { interrupt::restart_services([\"containerd\"]); }\n";
    let flag = "/t/state/flags/demo/1.0.0/apply.rhai_Wyd4J11fWzBd";

    // Not declared: the package is listed without an interrupt.
    let fr = interrupt_host(body, Some(r#"{"demo": {"version": "1.0.0"}}"#));
    let r = fr.run("apply");
    r.code(1).has_line_ending("FAILED: apply.rhai x 1");
    assert!(
        r.stderr.contains(
            "/t/pkg/skyhook_dir/apply.rhai:1: requested interrupt restart_services [containerd] is not declared for package demo in the Skyhook CR, so the operator would not drain the node for it; nothing was interrupted. Add to spec.packages.demo: interrupt: {type: service, services: [containerd]}"
        ),
        "{}",
        r.stderr
    );
    assert_eq!(fr.calls(), None, "nothing interrupted");
    assert!(!fr.exists(flag), "no flag for a failed step");

    // Declared: left to the operator.
    let fr = interrupt_host(
        body,
        Some(r#"{"demo": {"interrupt": {"type": "service", "services": ["containerd"]}}}"#),
    );
    let r = fr.run("apply");
    r.code(0)
        .has_line_ending("SUCEEDED: apply.rhai x")
        .has_line_ending("apply.rhai: requested interrupt restart_services [containerd] is declared in the Skyhook CR (interrupt (type: service, services: [containerd])): the operator runs it in its interrupt stage");
    assert_eq!(fr.calls(), None);
    assert!(fr.exists(flag));

    // No node metadata: a warning, the step succeeds, nothing runs.
    let fr = interrupt_host(body, None);
    let r = fr.run("apply");
    r.code(0);
    assert!(
        r.stderr.contains("cannot be checked (no node metadata"),
        "{}",
        r.stderr
    );
    assert_eq!(fr.calls(), None);
}

/// A declared reboot is recorded with the boot id; post-interrupt-check fails while the node
/// still runs that boot, passes (and forgets the record) once it changed.
#[test]
fn requested_reboot_is_verified_by_post_interrupt_check() {
    require_root!();
    let mut fr = FakeRoot::new();
    fr.interrupt_setup();
    fr.write_config(&config(json!({
        "apply": [rhai_step("apply.rhai", &["x"])],
        "apply-check": [rhai_step("apply.rhai", &["x"])],
        "post-interrupt-check": [rhai_step("pic.rhai", &[])],
    })));
    fr.write_step("apply.rhai", "interrupt::reboot();\n");
    fr.write_step("pic.rhai", "0\n");
    fr.write(
        "/t/pkg/node-metadata/packages.json",
        r#"{"packages": {"demo": {"interrupt": {"type": "reboot"}}}}"#,
    );
    fr.write("/proc/sys/kernel/random/boot_id", "boot-one\n");
    fr.run("apply").code(0);
    assert_eq!(fr.calls(), None, "the agent never reboots in apply");
    assert_eq!(
        fr.read("/t/state/interrupts/requested/demo.reboot"),
        "boot-one\n"
    );
    let r = fr.run("post-interrupt-check");
    r.code(1);
    assert!(
        r.stderr.contains("post-interrupt-check: the requested reboot has not happened: the node still runs boot boot-one"),
        "{}",
        r.stderr
    );
    assert!(!fr.exists("/t/state/flags/post-interrupt-check_ALL_CHECKED"));
    fr.write("/proc/sys/kernel/random/boot_id", "boot-two\n");
    fr.run("post-interrupt-check").code(0);
    assert!(!fr.exists("/t/state/interrupts/requested/demo.reboot"));
    assert!(fr.exists("/t/state/flags/post-interrupt-check_ALL_CHECKED"));
}

#[test]
fn shellscript_dispatcher_runs_configmap_rhai_when_present() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_config(&config(json!({
        "apply": [step("apply", "shellscript_run.sh", &["apply"])],
        "apply-check": [step("apply_check", "shellscript_run.sh", &["apply_check"])],
    })));
    fr.write_step(
        "shellscript_run.sh",
        "#!/bin/sh\nstage=$1\nif [ -f \"$SKYHOOK_DIR/configmaps/$stage.sh\" ]; then . \"$SKYHOOK_DIR/configmaps/$stage.sh\"; else echo \"bash dispatcher: no $stage.sh\"; fi\n",
    );
    fr.write(
        "/t/pkg/configmaps/apply.rhai",
        "fs::write(\"/etc/from-rhai\", \"yes\\n\");\nprint(\"rhai apply\");\n",
    );
    let r = fr.run("apply");
    r.code(0)
        .has_line("apply shellscript_run.sh ['apply'] [0] Idempotence.Auto True")
        .has_line_ending("SUCEEDED: shellscript_run.sh apply");
    assert!(r.stdout.contains("rhai apply"), "{}", r.stdout);
    assert!(!r.stdout.contains("bash dispatcher"), "{}", r.stdout);
    assert_eq!(fr.read("/etc/from-rhai"), "yes\n");
    // no apply_check.rhai: the package's own dispatcher runs
    let r = fr.run("apply-check");
    r.code(0);
    assert!(
        r.stdout.contains("bash dispatcher: no apply_check.sh"),
        "{}",
        r.stdout
    );
}

#[test]
fn redact_env_hides_values_in_bash_step_output_and_logs() {
    require_root!();
    let fr = redacting_package("#!/bin/sh\necho \"token is $API_TOKEN\"\n", "s3cr3t-value");
    let r = fr.run("apply");
    r.code(0);
    assert!(r.stdout.contains("token is ***"), "{}", r.stdout);
    assert!(!r.stdout.contains("s3cr3t-value"));
    let log = &step_logs(&fr, "foo.sh")[0];
    assert!(
        log.contains("token is ***") && !log.contains("s3cr3t-value"),
        "{log}"
    );
}

#[test]
fn broken_configmap_stage_script_is_found_before_start() {
    require_root!();
    let fr = FakeRoot::new();
    one_script(&fr, "import \"skyhook/shellscript\" as s;\ns::apply()\n");
    fr.write("/t/pkg/configmaps/apply.rhai", "print(1);\nlet = 2;\n");
    refused_before_start(&fr, "/t/pkg/configmaps/apply.rhai:2:");

    // fixed: the shellscript module runs it in the step's own runtime
    fr.write(
        "/t/pkg/configmaps/apply.rhai",
        "fs::write(\"/etc/via-module\", \"1\\n\");\nprint(\"configmap rhai ran\");\n",
    );
    let r = fr.run("apply");
    r.code(0).has_line_ending("SUCEEDED: apply.rhai x");
    assert!(r.stdout.contains("configmap rhai ran"), "{}", r.stdout);
    assert_eq!(fr.read("/etc/via-module"), "1\n");
}

#[test]
fn redaction_holds_when_a_secret_spans_reads() {
    // regression: a value split across two pipe reads was printed in clear
    require_root!();
    let mut fr = redacting_package(
        "#!/bin/sh\nprintf 'password: %s\\n' \"$API_TOKEN\"\nprintf 'to' >&2\nprintf 'pic\\n' >&2\n",
        "topsecretvalue",
    );
    // every read is at most 4 bytes, so the 14-byte value always spans reads
    fr.set_env("SKYHOOK_AGENT_BUFFER_LIMIT", "4");
    let r = fr.run("apply");
    r.code(0);
    assert!(
        !r.stdout.contains("topsecretvalue") && !r.stdout.contains("topse"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("password: ***"), "{}", r.stdout);
    // a held-back prefix of the value that turns out not to be it is released intact
    assert!(r.stderr.contains("topic"), "{}", r.stderr);
    let log = &step_logs(&fr, "foo.sh")[0];
    assert!(
        log.contains("password: ***") && !log.contains("topsecret"),
        "{log}"
    );
}

#[test]
fn validate_compiles_rhai_steps_and_imports() {
    // regression: validate said "valid" for a package whose .rhai step did not compile
    let fr = FakeRoot::new();
    one_script(&fr, "import \"lib/helper\" as h;\nh::greet();\n");
    fr.write(
        "/t/pkg/skyhook_dir/lib/helper.rhai",
        "fn greet() { print(1); }\n",
    );
    let config = fr.root().join("t/pkg/config.json");
    let config = config.to_str().unwrap();
    fr.run_args(&["validate", config]).code(0);
    fr.write(
        "/t/pkg/skyhook_dir/lib/helper.rhai",
        "fn greet() { let = 1; }\n",
    );
    let r = fr.run_args(&["validate", config]);
    r.code(1);
    assert!(r.stderr.contains("lib/helper.rhai:1:"), "{}", r.stderr);
    fr.write("/t/pkg/skyhook_dir/apply.rhai", "let x = 1;\nlet y = ;\n");
    let r = fr.run_args(&["validate", config]);
    r.code(1);
    assert!(r.stderr.contains("apply.rhai:2:9:"), "{}", r.stderr);
}

#[test]
fn validate_runs_the_checker_over_rhai_steps() {
    let fr = FakeRoot::new();
    one_script(
        &fr,
        "let x = 1;\nfs::wrte(\"/etc/x\", \"y\");\nservcie::restart(\"x\");\n",
    );
    let config = fr.root().join("t/pkg/config.json");
    let config = config.to_str().unwrap();
    let r = fr.run_args(&["validate", config]);
    r.code(1);
    let step = fr.root().join("t/pkg/skyhook_dir/apply.rhai");
    assert!(
        r.stderr.contains(&format!(
            "{}:2:1: error: unknown function fs::wrte (did you mean fs::write?)\n{}:3:1: error: \
             unknown module servcie (did you mean service?)\n",
            step.display(),
            step.display()
        )),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(&format!(
            "skyhook-agent: error: {config}: invalid: 2 errors in .rhai steps"
        )),
        "{}",
        r.stderr
    );
    assert!(!r.stdout.contains("valid: package"), "{}", r.stdout);
    // warnings only: valid, exit 0, each warning printed
    fr.write(
        "/t/pkg/skyhook_dir/apply.rhai",
        "let s = \" a \";\nlet t = s.trim();\n",
    );
    let r = fr.run_args(&["validate", config]);
    r.code(0);
    assert!(
        r.stderr.contains(&format!(
            "WARNING: {}:2:11: warning: trim() changes its object in place",
            step.display()
        )),
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains("valid: package"), "{}", r.stdout);
}

#[test]
fn module_errors_name_host_paths_like_step_errors() {
    // regression: import errors showed the agent-side path under the root mount
    require_root!();
    let fr = FakeRoot::new();
    one_script(&fr, "import \"lib/helper\" as h;\nh::boom();\n");
    fr.write(
        "/t/pkg/skyhook_dir/lib/helper.rhai",
        "fn boom() {\n    let x = 1 + \"a\" - 2;\n}\n",
    );
    let r = fr.run("apply");
    r.code(1);
    // the script error goes to the step's stderr (console and .log.err)
    assert!(
        r.stderr.contains("/t/pkg/skyhook_dir/lib/helper.rhai:2:"),
        "stderr: {}",
        r.stderr
    );
    assert!(!r.stderr.contains(&fr.root_str()), "{}", r.stderr);
}

/// Wait (bounded) until `rx` yields a line satisfying `want`.
fn wait_line(
    rx: &std::sync::mpsc::Receiver<String>,
    want: impl Fn(&str) -> bool,
    what: &str,
) -> Result<(), String> {
    loop {
        match rx.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(l) if want(&l) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(format!("no {what} line ({e})")),
        }
    }
}

#[test]
fn sigterm_during_a_rhai_step_stops_before_the_next() {
    // regression: the runtime did not poll its signal driver while a script ran, so a SIGTERM
    // during a .rhai step was noticed only after the next step had run
    require_root!();
    use nix::sys::signal::{Signal, kill};
    let fr = FakeRoot::new();
    fr.write_config(&config(json!({
        "apply": [rhai_step("s1.rhai", &[]), rhai_step("s2.rhai", &[])],
        "apply-check": [rhai_step("s1.rhai", &[])],
    })));
    // s1 blocks on a fifo until the test has sent SIGTERM and seen the agent record it (in
    // the apply: the preflight's plan of the step runs its queries too)
    fr.write_step(
        "s1.rhai",
        "if !step.dry_run { query([\"/bin/sh\", \"-c\", \"read x < /t/go\"]); }\nprint(\"s1 done\");\n",
    );
    fr.write_step("s2.rhai", "fs::write(\"/t/s2-ran\", \"x\");\n");
    nix::unistd::mkfifo(
        &fr.host("/t/go"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .expect("mkfifo");
    let mut child = fr.spawn("apply");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (out_lines, stdout) = line_reader(child.stdout.take().expect("stdout"));
    let (err_lines, stderr) = line_reader(child.stderr.take().expect("stderr"));
    let fail = |e: String, child: &mut std::process::Child| -> ! {
        let _ = kill(pid, Signal::SIGKILL);
        let _ = child.wait();
        panic!("{e}");
    };
    if let Err(e) = wait_line(&out_lines, |l| l.starts_with("apply s1.rhai "), "s1 header") {
        fail(e, &mut child);
    }
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    // recorded while s1 is still blocked
    if let Err(e) = wait_line(
        &err_lines,
        |l| l.contains("received SIGTERM"),
        "SIGTERM notice",
    ) {
        fail(e, &mut child);
    }
    std::fs::write(fr.host("/t/go"), "go\n").expect("release s1");
    let status = child.wait().expect("wait");
    let (out, err) = (stdout.join().unwrap(), stderr.join().unwrap());
    assert_eq!(exit_code(status), 1, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("SUCEEDED: s1.rhai "), "{out}");
    assert!(!out.contains("apply s2.rhai"), "{out}");
    assert!(!fr.exists("/t/s2-ran"));
    assert!(fr.exists(&format!(
        "/t/state/flags/demo/1.0.0/s1.rhai_{}",
        marker("[]_[0]")
    )));
}
