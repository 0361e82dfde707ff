use std::sync::Arc;

use super::script::{End, run_step};
use super::*;
use crate::host::root::HostRoot;
use crate::host::{Host, HostOptions};
use crate::script::host_api::HostApi;
use crate::script::{CaptureOutput, ModuleStore, ScriptEngine, StepContext, compile_source};

#[test]
fn exec_mode_follows_check_modes_then_apply() {
    assert_eq!(exec_mode(Mode::Apply, false), ExecMode::Plan);
    assert_eq!(exec_mode(Mode::Config, true), ExecMode::Apply);
    assert_eq!(exec_mode(Mode::ApplyCheck, false), ExecMode::Check);
    assert_eq!(exec_mode(Mode::UninstallCheck, true), ExecMode::Check);
}

#[test]
fn script_configmaps_default_to_the_package_layout() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("pkg/skyhook_dir")).unwrap();
    std::fs::create_dir_all(d.path().join("pkg/configmaps")).unwrap();
    let mut run = ScriptRun {
        script: d.path().join("pkg/skyhook_dir/apply.rhai"),
        root: d.path().to_path_buf(),
        mode: Mode::Apply,
        apply: false,
        configmaps: None,
        env: Vec::new(),
        args: Vec::new(),
    };
    assert_eq!(run.configmaps_dir(), Some(d.path().join("pkg/configmaps")));
    run.script = d.path().join("apply.rhai");
    assert_eq!(run.configmaps_dir(), None);
    run.configmaps = Some(d.path().join("cm"));
    assert_eq!(run.configmaps_dir(), Some(d.path().join("cm")));
}

/// Two steps on one session: the second sees the first's planned write, each step's report
/// holds only its own effects, and the host stays untouched.
#[test]
fn one_session_across_steps_keeps_the_plan_overlay() {
    let d = tempfile::tempdir().unwrap();
    let engine = ScriptEngine::default();
    let store = Arc::new(ModuleStore::new(d.path()));
    let first = compile_source(
        &engine,
        "first.rhai",
        "fs::write(\"/etc/a.conf\", \"one\\n\"); service::drop_in(\"x\", \"a.conf\", \"[Service]\\n\");",
        store.clone(),
    )
    .unwrap();
    let second = compile_source(
        &engine,
        "second.rhai",
        "print(fs::read(\"/etc/a.conf\")); fs::write(\"/etc/a.conf\", \"one\\n\");",
        store,
    )
    .unwrap();
    let host = Host::new(
        HostRoot::open(d.path()).unwrap(),
        ExecMode::Plan,
        HostOptions::default(),
    );
    let api = HostApi::new(host);
    let out = Arc::new(CaptureOutput::new());
    let ctx = StepContext {
        dry_run: true,
        ..Default::default()
    };
    let a = run_step(
        &engine,
        &first,
        &ctx,
        &api,
        out.clone(),
        |c| c == 0,
        End::Step,
    );
    assert!(a.ok, "{a:?}");
    let changes: Vec<&str> = a
        .report
        .changes
        .iter()
        .map(|c| c.summary.as_str())
        .collect();
    assert_eq!(
        changes,
        [
            "create /etc/a.conf (mode 0644)",
            "create /etc/systemd/system/x.service.d/a.conf (mode 0644)"
        ]
    );
    // the drop-in's daemon-reload ran (was planned) at the end of the first step
    let actions: Vec<&str> = a
        .report
        .actions
        .iter()
        .map(|c| c.summary.as_str())
        .collect();
    assert_eq!(actions, ["systemctl daemon-reload"]);

    let b = run_step(
        &engine,
        &second,
        &ctx,
        &api,
        out.clone(),
        |c| c == 0,
        End::Step,
    );
    assert!(b.ok, "{b:?}");
    assert_eq!(out.stdout_bytes(), b"one\n\n");
    assert!(b.report.changes.is_empty() && b.report.actions.is_empty());
    assert_eq!(b.report.unchanged, 1);
    let rest = api.finish().unwrap();
    assert!(rest.changes.is_empty() && rest.actions.is_empty());
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}
