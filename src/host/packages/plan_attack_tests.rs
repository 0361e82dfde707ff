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

const STEP: &str = r#"pkg::install("nginx");
fs::chmod("/etc/nginx/nginx.conf", 0o640);
fs::ensure_line("/etc/nginx/nginx.conf", "worker_processes 4;");
"#;

/// Fault: `pkg::install` runs the package manager, which makes files the step then edits;
/// the plan does not count it as a command it did not run (only `run` and `sh` are), so
/// it plans the edit against the host as it was (no `/etc/nginx`) and refuses the step
/// the apply runs: `the plan refused the step: fs::chmod: /etc/nginx/nginx.conf does not
/// exist`. `pkg::remove`, `pkg::upgrade` and `service::` start/restart go the same way
/// (not noted either; not tested here).
/// Noting those effects as planned commands in `Host::submit` fixes it, but then every
/// read of a missing path after a planned install is unknown, and the stdlib tuned
/// example's dry run ends after its package install (`script::stdlib_tests::
/// tuned_on_every_distribution` fails): a change of what dry runs show, for the
/// coordinator to decide.
#[test]
#[ignore = "issue 28: the plan does not treat pkg::install/remove/upgrade and service actions as commands it did not run (principle 6); the fix narrows dry runs of the examples"]
fn a_plan_does_not_refuse_an_edit_of_what_pkg_install_makes() {
    let t = nginx_root();
    let plan = run(&t, ExecMode::Plan, STEP);
    if let Some(e) = &plan.outcome.error {
        assert_eq!(
            e.kind,
            ScriptErrorKind::PlanUnknown,
            "the plan refused the step: {}",
            e.message
        );
    }
    let apply = run(&t, ExecMode::Apply, STEP);
    assert!(apply.outcome.error.is_none(), "{:?}", apply.outcome.error);
    assert_eq!(
        std::fs::read_to_string(t.p("/etc/nginx/nginx.conf")).unwrap(),
        "# nginx\nworker_processes 4;\n"
    );
}

/// A command that changes a path it does not name (a vendor script turning the file
/// `/etc/app.conf` into a directory), then a write below it: the plan reads the existing,
/// unnamed path as it was and refuses the step the apply runs (`/etc/app.conf` is a file).
/// By the design of 7d96930 (a command makes unknown only the paths it names and missing
/// ones); principle 6 asks for what it *may* have touched.
#[test]
#[ignore = "issue 28: a planned command makes unknown only the paths it names; an existing path it changes without naming is planned as it was (principle 6)"]
fn a_plan_does_not_refuse_a_write_below_what_an_unnamed_command_made_a_directory() {
    let t = TestHost::new();
    t.install_sh();
    t.install("/usr/bin/mkdir");
    t.install("/usr/bin/rm");
    t.file("/etc/app.conf", "old\n");
    t.stub("setup", "rm /etc/app.conf; mkdir /etc/app.conf");
    let step = "run([\"setup\"]);\nfs::write(\"/etc/app.conf/x\", \"y\\n\");\n";
    let plan = run(&t, ExecMode::Plan, step);
    if let Some(e) = &plan.outcome.error {
        assert_eq!(
            e.kind,
            ScriptErrorKind::PlanUnknown,
            "the plan refused the step: {}",
            e.message
        );
    }
    let apply = run(&t, ExecMode::Apply, step);
    assert!(apply.outcome.error.is_none(), "{:?}", apply.outcome.error);
    assert_eq!(t.read("/etc/app.conf/x"), "y\n");
}
