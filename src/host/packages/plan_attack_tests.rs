//! Attacks on the preflight's plan (issue 28, principle 6): a step whose apply succeeds
//! must not be refused by its plan. Package and service functions run commands too.

use crate::host::effects::report::ExecMode;
use crate::host::testutil::TestHost;
use crate::script::errors::ScriptErrorKind;
use crate::script::host_api::tests::{apt_stubs, run};

/// A root whose `apt-get install nginx` also makes `/etc/nginx/` (as the package does).
fn nginx_root() -> TestHost {
    let t = TestHost::new();
    apt_stubs(&t);
    t.install("/usr/bin/mkdir");
    t.stub(
        "apt-get",
        r##"mode=; for a; do case "$a" in install|remove) mode=$a ;; -*) ;; *) if [ "$mode" = install ]; then echo i > "/state/pkg-$a"; mkdir -p "/etc/$a"; echo "# $a" > "/etc/$a/$a.conf"; fi ;; esac; done; :"##,
    );
    t
}

/// The message of the error `step` fails with when run on `t` in `mode` (`ends` says
/// where it must end).
fn error_of(t: &TestHost, mode: ExecMode, step: &str, ends: &str) -> (ScriptErrorKind, String) {
    let ran = run(t, mode, step);
    let e = ran.outcome.error.as_ref().expect(ends);
    (e.kind.clone(), e.message.clone())
}

/// [`error_of`] a plan of `step`, which must be unknown (not a refusal).
fn unknown_in_plan(t: &TestHost, step: &str, ends: &str) -> String {
    let (kind, m) = error_of(t, ExecMode::Plan, step, ends);
    assert_eq!(
        kind,
        ScriptErrorKind::PlanUnknown,
        "the plan refused the step: {m}"
    );
    m
}

/// [`error_of`] `step` in `mode`, which must not be unknown (a refusal).
fn refused(t: &TestHost, mode: ExecMode, step: &str, ends: &str) -> String {
    let (kind, m) = error_of(t, mode, step, ends);
    assert_ne!(kind, ScriptErrorKind::PlanUnknown, "{m}");
    m
}

/// Run `step` on `t` in apply mode: it succeeds.
fn apply_succeeds(t: &TestHost, step: &str) {
    let apply = run(t, ExecMode::Apply, step);
    assert!(apply.outcome.error.is_none(), "{:?}", apply.outcome.error);
}

const STEP: &str = r#"pkg::install("nginx");
fs::chmod("/etc/nginx/nginx.conf", 0o640);
fs::ensure_line("/etc/nginx/nginx.conf", "worker_processes 4;");
"#;

/// `pkg::install` runs the package manager, which makes files the step then edits. Was:
/// the plan did not count it as a command it did not run (only `run` and `sh` were), so
/// it planned the edit against the host as it was (no `/etc/nginx`) and refused the step
/// the apply runs: `the plan refused the step: fs::chmod: /etc/nginx/nginx.conf does not
/// exist`. Now a failure that depends on the host after any command the plan did not run
/// (packages, services and the other actions included) is unknown; the named/missing-path
/// rule stays `run`/`sh`'s, so dry runs after a package install keep their content.
#[test]
fn a_plan_does_not_refuse_an_edit_of_what_pkg_install_makes() {
    let t = nginx_root();
    let m = unknown_in_plan(&t, STEP, "the plan ends at the chmod");
    assert!(
        m.starts_with(
            "fs::chmod: unknown in the plan: /etc/nginx/nginx.conf does not exist, as the host is before install packages nginx (apt) (planned at main.rhai:1), which only the apply runs"
        ),
        "{m}"
    );
    apply_succeeds(&t, STEP);
    assert_eq!(
        std::fs::read_to_string(t.p("/etc/nginx/nginx.conf")).unwrap(),
        "# nginx\nworker_processes 4;\n"
    );
}

/// A command that changes a path it does not name (a vendor script turning the file
/// `/etc/app.conf` into a directory), then a write below it: the plan reads the existing,
/// unnamed path as it was and refuses the step the apply runs (`/etc/app.conf` is a file).
/// Was refused (`fs::write: failed to resolve /etc/app.conf/x ...: Not a directory`): a
/// command made unknown only the paths it names and missing ones (7d96930). Now the
/// write's failure, which depends on the host, is unknown.
#[test]
fn a_plan_does_not_refuse_a_write_below_what_an_unnamed_command_made_a_directory() {
    let t = TestHost::new();
    t.install_sh();
    t.install("/usr/bin/mkdir");
    t.install("/usr/bin/rm");
    t.file("/etc/app.conf", "old\n");
    t.stub("setup", "rm /etc/app.conf; mkdir /etc/app.conf");
    let step = "run([\"setup\"]);\nfs::write(\"/etc/app.conf/x\", \"y\\n\");\n";
    let m = unknown_in_plan(&t, step, "the plan ends at the write");
    assert!(
        m.starts_with("fs::write: unknown in the plan: ")
            && m.contains("/etc/app.conf/x")
            && m.contains(
                ", as the host is before setup (planned at main.rhai:1), which only the apply runs"
            ),
        "{m}"
    );
    apply_succeeds(&t, step);
    assert_eq!(t.read("/etc/app.conf/x"), "y\n");
}

/// After a command the plan did not run, a failure that does not depend on the host still
/// fails the plan: a bad argument (a relative path) and `fail()` are refusals, not unknown.
#[test]
fn a_plan_still_fails_what_does_not_depend_on_the_host_after_a_planned_command() {
    let t = nginx_root();
    let m = refused(
        &t,
        ExecMode::Plan,
        "pkg::install(\"nginx\");\nfs::write(\"etc/x\", \"y\\n\");\n",
        "a relative path fails",
    );
    assert!(
        m.starts_with("fs::write: paths must be absolute: \"etc/x\""),
        "{m}"
    );
    let step = "run([\"true\"]);\nfail(\"no\");\n";
    refused(&t, ExecMode::Plan, step, "fail() fails");
}

/// A check judges the host as it is: after a recorded package install, a read of what the
/// package would make is an error there, not unknown (only plans turn failures unknown).
#[test]
fn a_check_does_not_turn_failures_unknown() {
    let t = nginx_root();
    let m = refused(&t, ExecMode::Check, STEP, "the file does not exist");
    assert!(
        m.starts_with("fs::chmod: /etc/nginx/nginx.conf does not exist"),
        "{m}"
    );
}
