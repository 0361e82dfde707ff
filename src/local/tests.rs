use std::path::PathBuf;
use std::sync::Arc;

use super::*;
use crate::host::ExecMode;
use crate::host::root::HostRoot;
use crate::package::Mode;
use crate::script::{CaptureOutput, ModuleStore, ScriptEngine, compile_source};
use crate::step::{End, ScriptStep, StepSpec};

#[test]
fn exec_mode_follows_check_modes_then_apply() {
    let exec_mode = |m: Mode, apply| crate::step::exec_mode(m.as_str(), apply);
    assert_eq!(exec_mode(Mode::Apply, false), ExecMode::Plan);
    assert_eq!(exec_mode(Mode::Config, true), ExecMode::Apply);
    assert_eq!(exec_mode(Mode::ApplyCheck, false), ExecMode::Check);
    assert_eq!(exec_mode(Mode::UninstallCheck, true), ExecMode::Check);
    assert_eq!(exec_mode(Mode::PostInterruptCheck, true), ExecMode::Check);
    assert_eq!(exec_mode(Mode::PostInterrupt, true), ExecMode::Apply);
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
        cancel: crate::process::Cancel::new(),
        capture: None,
        diffs: false,
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
    let spec = StepSpec::builder("apply", false).build();
    let api = spec.session(HostRoot::open(d.path()).unwrap());
    let out = Arc::new(CaptureOutput::new());
    let step = |script| ScriptStep {
        engine: &engine,
        script,
        spec: &spec,
        api: &api,
        end: End::Step,
        list_drift: false,
    };
    let a = step(&first).run(out.clone());
    assert!(a.ok, "{a:?}");
    let changes: Vec<&str> = a.report.change_summaries();
    assert_eq!(
        changes,
        [
            "create /etc/a.conf (mode 0644)",
            "create /etc/systemd/system/x.service.d/a.conf (mode 0644)"
        ]
    );
    // the drop-in's daemon-reload ran (was planned) at the end of the first step
    let actions: Vec<&str> = a.report.action_summaries();
    assert_eq!(actions, ["systemctl daemon-reload"]);

    let b = step(&second).run(out.clone());
    assert!(b.ok, "{b:?}");
    assert_eq!(out.stdout_bytes(), b"one\n\n");
    assert!(b.report.changes.is_empty() && b.report.actions.is_empty());
    assert_eq!(b.report.unchanged, 1);
    let rest = api.finish().unwrap();
    assert!(rest.changes.is_empty() && rest.actions.is_empty());
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}

/// `examples/hello` copied into `d/pkg`, plus a `.rhai` apply step that reads the overlay.
fn hello_with_reader(d: &std::path::Path) -> std::path::PathBuf {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello");
    let pkg = d.join("pkg");
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(&pkg)
        .status()
        .unwrap();
    assert!(status.success());
    let config = std::fs::read_to_string(pkg.join("config.json")).unwrap();
    let config = config.replacen(
        "\"apply\": [",
        "\"apply\": [\n      {\"name\": \"show\", \"path\": \"show.rhai\", \"arguments\": [], \"returncodes\": [0], \"on_host\": true, \"idempotence\": false, \"upgrade_step\": false},",
        1,
    );
    std::fs::write(pkg.join("config.json"), config).unwrap();
    std::fs::write(
        pkg.join("skyhook_dir/show.rhai"),
        "print(fs::read(\"/etc/hello/motd\"));",
    )
    .unwrap();
    pkg
}

#[test]
fn package_plan_includes_the_root_dir_overlay() {
    let d = tempfile::tempdir().unwrap();
    let pkg = hello_with_reader(d.path());
    let root = d.path().join("root");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    // The overlay keeps the file's mtime, and the plan shows it.
    std::fs::File::options()
        .write(true)
        .open(pkg.join("root_dir/etc/hello/motd"))
        .unwrap()
        .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000))
        .unwrap();
    let engine = ScriptEngine::default();
    let run = |mode: Mode| {
        let out = Arc::new(CaptureOutput::new());
        let plan = PackageRun {
            dir: pkg.clone(),
            root: root.clone(),
            mode,
            configmaps: None,
            env: vec![("NODE_NAME".into(), "n1".into())],
            capture: None,
            skyhook_cr: None,
            diffs: false,
        }
        .plan(&engine, out.clone())
        .unwrap();
        (plan, out)
    };
    let (plan, out) = run(Mode::Apply);
    assert!(plan.ok(), "{}", plan.render_text());
    assert_eq!(plan.steps[0].name, "root_dir");
    let StepKind::Overlay(rep) = &plan.steps[0].kind else {
        panic!("{:?}", plan.steps[0].kind);
    };
    let changes: Vec<(&str, Option<&str>)> = rep
        .changes
        .iter()
        .map(|c| (c.summary.as_str(), c.diff.as_deref()))
        .collect();
    assert_eq!(
        changes,
        [
            ("create directory /etc/hello (mode 0755)", None),
            (
                "create /etc/hello/motd (mode 0644)",
                Some(
                    "--- /dev/null\n+++ b/etc/hello/motd\n@@ -0,0 +1 @@\n+Welcome to a node managed by skyhook\n"
                )
            ),
            ("set mtime /etc/hello/motd 2001-09-09T01:46:40Z", None),
        ]
    );
    // The later .rhai step sees the planned file; the host is untouched.
    assert_eq!(
        out.stdout_bytes(),
        b"Welcome to a node managed by skyhook\n\n"
    );
    assert!(plan.render_text().starts_with(
        "==> overlay root_dir/\n~ create directory /etc/hello (mode 0755)\n~ create /etc/hello/motd (mode 0644)\n"
    ));
    assert_eq!(plan.total().changes.len(), 3);
    assert_eq!(plan.to_json()["steps"][0]["kind"], "overlay");
    assert_eq!(std::fs::read_dir(root.join("etc")).unwrap().count(), 0);

    // A check mode plans it too, without counting it as drift.
    let (plan, _) = run(Mode::ApplyCheck);
    assert!(matches!(&plan.steps[0].kind, StepKind::Overlay(r) if r.changes.len() == 3));
    assert!(plan.steps[0].ok());
    // Uninstall modes do not overlay.
    let (plan, _) = run(Mode::Uninstall);
    assert!(plan.steps.iter().all(|s| s.name != "root_dir"));
    // An existing identical file (content, mode, mtime) is unchanged; a bad ancestor fails
    // the plan before the steps.
    std::fs::create_dir_all(root.join("etc/hello")).unwrap();
    std::fs::write(
        root.join("etc/hello/motd"),
        "Welcome to a node managed by skyhook\n",
    )
    .unwrap();
    std::fs::File::options()
        .write(true)
        .open(root.join("etc/hello/motd"))
        .unwrap()
        .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000))
        .unwrap();
    let (plan, _) = run(Mode::Apply);
    assert!(
        matches!(&plan.steps[0].kind, StepKind::Overlay(r) if r.changes.is_empty() && r.unchanged == 1)
    );
    std::fs::remove_dir_all(root.join("etc/hello")).unwrap();
    std::os::unix::fs::symlink("/srv/hello", root.join("etc/hello")).unwrap();
    let (plan, _) = run(Mode::Apply);
    assert!(!plan.ok());
    let StepKind::Failed { message } = &plan.steps[0].kind else {
        panic!("{:?}", plan.steps[0].kind);
    };
    assert_eq!(
        message,
        "root_dir overlay: cannot create /etc/hello: /etc/hello is a dangling symlink (its target /srv/hello does not exist)"
    );
    assert!(
        plan.steps[1..]
            .iter()
            .all(|s| matches!(s.kind, StepKind::NotRun))
    );
}

/// Two script runs in one process at once, with different `SKYHOOK_SCRIPT_TIMEOUT` in their
/// own environments: each keeps its own deadline (no global state). Both block in a chrooted
/// `read < fifo`; the 1 s run ends at its deadline while the 60 s run, started first, is
/// still waiting, and finishes once the test feeds its fifo.
#[test]
fn two_runs_with_different_deadlines_do_not_interfere() {
    let t = crate::host::testutil::TestHost::new();
    t.install_sh();
    std::fs::create_dir_all(t.p("/t")).unwrap();
    for f in ["/t/a", "/t/b"] {
        nix::unistd::mkfifo(&t.p(f), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    }
    let script = |name: &str, fifo: &str| {
        let p = t.dir.path().join(format!("{name}.rhai"));
        std::fs::write(
            &p,
            format!(
                "let r = run([\"/bin/sh\", \"-c\", \"read x < {fifo}\"], #{{check: true}});\n0"
            ),
        )
        .unwrap();
        p
    };
    let run = |script: PathBuf, secs: &str| ScriptRun {
        script,
        root: t.root.clone(),
        mode: Mode::Apply,
        apply: true,
        configmaps: None,
        env: vec![("SKYHOOK_SCRIPT_TIMEOUT".into(), secs.into())],
        args: Vec::new(),
        cancel: crate::process::Cancel::new(),
        capture: None,
        diffs: false,
    };
    let long = run(script("long", "/t/b"), "60");
    let short = run(script("short", "/t/a"), "1");
    let engine = ScriptEngine::default();
    std::thread::scope(|s| {
        let long_run = s.spawn(|| long.run(&engine, Arc::new(CaptureOutput::new())));
        let (short_outcome, _) = short.run(&engine, Arc::new(CaptureOutput::new())).unwrap();
        let err = short_outcome.error.expect("the 1 s run hits its deadline");
        assert!(
            err.contains("timed out") || err.contains("deadline"),
            "{err}"
        );
        assert!(
            !long_run.is_finished(),
            "the 60 s run must still be waiting"
        );
        // Unblock the long run's reader.
        std::fs::OpenOptions::new()
            .write(true)
            .open(t.p("/t/b"))
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"go\n"))
            .unwrap();
        let (long_outcome, _) = long_run.join().unwrap().unwrap();
        assert!(long_outcome.ok, "{long_outcome:?}");
    });
}

/// A configMaps folder entry that leads out of the folder (a key linked to a file outside,
/// or one in the volume's `..data` dir) fails the plan and the apply naming it, before
/// anything is copied: the copy into the root follows links, so its target would land in
/// the root's `configmaps/`, where `config::get` (or `fs::read`) returns what `config::get`
/// refuses to read in the folder itself.
#[test]
fn package_configmaps_leading_out_are_refused_before_the_copy() {
    let d = tempfile::tempdir().unwrap();
    let pkg = hello_with_reader(d.path());
    std::fs::write(
        pkg.join("skyhook_dir/show.rhai"),
        "print(config::get(\"k\"));",
    )
    .unwrap();
    let root = d.path().join("root");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(d.path().join("secret"), "TOP-SECRET-OUTSIDE\n").unwrap();
    let engine = ScriptEngine::default();
    for (link, at) in [("k", "k"), ("..data/k", "..data/k")] {
        let cm = d.path().join(format!("cm-{}", link.len()));
        std::fs::create_dir_all(cm.join("..data")).unwrap();
        for e in std::fs::read_dir(pkg.join("configmaps")).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), cm.join(e.file_name())).unwrap();
        }
        std::os::unix::fs::symlink(d.path().join("secret"), cm.join(link)).unwrap();
        if link != "k" {
            std::os::unix::fs::symlink("..data/k", cm.join("k")).unwrap();
        }
        let run = PackageRun {
            dir: pkg.clone(),
            root: root.clone(),
            mode: Mode::Apply,
            configmaps: Some(cm.clone()),
            env: vec![("NODE_NAME".into(), "n1".into())],
            capture: None,
            skyhook_cr: None,
            diffs: false,
        };
        let want = format!(
            "configMap {at:?} leads out of the configMaps folder {} (a symlink to outside it): nothing is copied",
            cm.display()
        );
        let out = Arc::new(CaptureOutput::new());
        let plan = run.plan(&engine, out.clone()).map(|p| p.render_text());
        assert_eq!(plan.map_err(|e| e.to_string()), Err(want.clone()));
        let console = crate::mode::Console::null();
        let applied = run.apply(&console).map(|a| a.ok);
        assert_eq!(applied.map_err(|e| e.to_string()), Err(want));
        assert!(
            !root.join("var/lib/skyhook").exists(),
            "copied into the root"
        );
    }
}
