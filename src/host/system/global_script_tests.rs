//! The `global` rows' tests through Rhai.

pub(crate) mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crate::host::api::HostApi;
    use crate::host::effects::report::ExecMode;
    use crate::host::root::HostRoot;
    use crate::host::testutil::TestHost;
    use crate::host::{Host, HostOptions};
    use crate::script::host_api::tests::*;
    use crate::script::{CaptureOutput, ModuleStore, ScriptEngine, StepContext, compile_source};
    use crate::step::{ScriptRunOptions, run_script_with};

    /// One call of each function of this file, for
    /// [`crate::script::host_api::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(crate) const SAMPLES: &[&str] = &[
        r#"run(["hello", "x"])"#,
        r#"run(["hello", "x"], #{unless: ["false"]})"#,
        r#"query(["hello", "q"])"#,
        r#"query(["hello", "q"], #{check: true})"#,
        r#"sh("echo x")"#,
        r#"sh("echo x", #{creates: "/made"})"#,
        r#"secret("db", "password")"#,
        r#"secret_env("TOKEN")"#,
        r#"sha256("x")"#,
        r#"to_json(1)"#,
        r#"to_json(#{a: 1})"#,
    ];

    #[test]
    fn commands_run_plan_and_query() {
        let t = TestHost::new();
        t.install_sh();
        t.stub("hello", "echo out-$1; echo err >&2; exit ${2:-0}");
        let src = r#"
            let a = run(["hello", "x"]);
            let b = run(["hello", "y", "3"], #{env: #{V: 1}, ok: [0, 3]});
            let q = query(["hello", "q"]);
            let s = sh("echo shell", #{read_only: false});
            print([a.code, a.stdout, a.stderr, a.ok, a.planned]);
            print([b.code, b.ok, q.stdout, s.planned]);
        "#;
        let before = snapshot(&t);
        let p = run(&t, ExecMode::Plan, src).ok();
        assert_eq!(snapshot(&t), before);
        assert_eq!(
            p.stdout(),
            "[0, \"\", \"\", true, true]\n[0, true, \"out-q\\n\", true]\n"
        );
        assert_eq!(t.calls(), vec!["hello q"]);
        let actions: Vec<&str> = p.report.action_summaries();
        assert_eq!(actions.len(), 3, "{actions:?}");
        assert!(p.report.changes.is_empty());
        t.clear_calls();
        let c = run(&t, ExecMode::Check, src).ok();
        assert!(c.report.drift().is_empty(), "commands are never drift");
        t.clear_calls();
        // Apply runs them; no `planned` key.
        let a = run(
            &t,
            ExecMode::Apply,
            &src.replace(
                "sh(\"echo shell\"",
                "run([\"/bin/sh\", \"-c\", \"echo shell\"]",
            ),
        )
        .ok();
        assert_eq!(
            a.stdout(),
            "[0, \"out-x\\n\", \"err\\n\", true, false]\n[3, false, \"out-q\\n\", false]\n"
        );
        assert_eq!(t.calls(), vec!["hello x", "hello y 3", "hello q"]);
        // A non-zero exit throws with the command and its stderr.
        let r = run(&t, ExecMode::Apply, "\n run([\"hello\", \"z\", \"4\"])");
        assert_eq!(
            r.error(),
            "main.rhai:2:2: run: command hello z 4 failed with exit code 4: err"
        );
        let r = run(&t, ExecMode::Apply, r#"run(["no-such-program"])"#);
        assert_eq!(
            r.error(),
            "main.rhai:1:1: run: failed to run no-such-program: program not found"
        );
        let r = run(&t, ExecMode::Apply, r#"run(["hello", 1])"#);
        assert_eq!(
            r.error(),
            "main.rhai:1:1: run: argv[1] must be a string, got i64"
        );
    }

    /// `run`/`sh` fail on an exit code the script did not list in `ok` (guarded commands
    /// too); `query` returns any code unless `check`/`ok` says otherwise; `check: false`
    /// returns any code.
    #[test]
    fn a_failing_command_fails_the_step_unless_its_code_is_expected() {
        let t = TestHost::new();
        t.install_sh();
        t.stub("hello", "echo out-$1; echo err >&2; exit ${2:-0}");
        // `sh` runs /bin/bash: the machine's sh stands in for it.
        std::os::unix::fs::symlink("sh", t.p("/bin/bash")).unwrap();
        let fails = |src: &str| run(&t, ExecMode::Apply, src).error();
        assert_eq!(
            fails(r#"run(["hello", "z", "9"])"#),
            "main.rhai:1:1: run: command hello z 9 failed with exit code 9: err"
        );
        assert_eq!(
            fails(r#"sh("echo no >&2; exit 9")"#),
            "main.rhai:1:1: sh: command /bin/bash -c 'echo no >&2; exit 9' failed with exit \
             code 9: no"
        );
        assert_eq!(
            fails(r#"run(["hello", "z", "2"], #{ok: [0, 1]})"#),
            "main.rhai:1:1: run: command hello z 2 failed with exit code 2 (accepted: 0, 1): err"
        );
        assert_eq!(
            fails(r#"sh("exit 0", #{ok: [3]})"#),
            "main.rhai:1:1: sh: command /bin/bash -c 'exit 0' failed with exit code 0 \
             (accepted: 3)"
        );
        // A guarded command that runs is checked like any other.
        assert_eq!(
            fails(r#"run(["hello", "g", "7"], #{creates: "/nope"})"#),
            "main.rhai:1:1: run: command hello g 7 failed with exit code 7: err"
        );
        assert_eq!(
            fails(r#"query(["hello", "q", "5"], #{ok: [0]})"#),
            "main.rhai:1:1: query: command hello q 5 failed with exit code 5: err"
        );
        let src = r#"
            let a = run(["hello", "a", "1"], #{ok: [0, 1]});
            let b = sh("exit 3", #{ok: [3]});
            let c = query(["hello", "c", "5"]);
            let d = run(["hello", "d", "6"], #{check: false});
            let e = run(["hello", "e", "7"], #{creates: "/nope", ok: [7]});
            print([a.code, a.ok, b.code, c.code, c.ok, d.code, e.code]);
        "#;
        let a = run(&t, ExecMode::Apply, src).ok();
        assert_eq!(a.stdout(), "[1, false, 3, 5, false, 6, 7]\n");
        // Nothing runs in a plan but the query: a planned command passes.
        t.clear_calls();
        let p = run(
            &t,
            ExecMode::Plan,
            r#"run(["hello", "z", "9"]); sh("exit 9")"#,
        )
        .ok();
        assert_eq!(p.outcome.code, 0);
        assert!(t.calls().is_empty(), "{:?}", t.calls());
        // Bad `ok`/`check` values are named.
        for (src, msg) in [
            (
                r#"run(["true"], #{ok: 1})"#,
                "run: option ok must be an array of exit codes, e.g. [0, 1], got i64",
            ),
            (
                r#"run(["true"], #{ok: []})"#,
                "run: option ok must list at least one exit code, e.g. [0, 1]",
            ),
            (
                r#"run(["true"], #{ok: [0, "1"]})"#,
                "run: option ok must be an array of exit codes (integers), got string 1",
            ),
            (
                r#"sh("true", #{ok: [0], check: false})"#,
                "sh: options check: false and ok contradict each other: ok lists the exit \
                 codes that pass the check, check: false accepts any",
            ),
        ] {
            assert_eq!(fails(src), format!("main.rhai:1:1: {msg}"), "{src}");
        }
    }

    #[test]
    fn streamed_commands_write_to_the_run_output() {
        use crate::script::Stream;
        let t = TestHost::new();
        t.install_sh();
        t.stub("hello", "echo out-$1; echo err >&2; exit ${2:-0}");
        let src = r#"
            print("before");
            let r = run(["hello", "s"], #{stream: true});
            let q = query(["hello", "q", "2"], #{stream: true});
            print([r.code, r.stdout, r.stderr, q.code, q.stdout]);
        "#;
        let of = |r: &Ran, which: Stream| -> Vec<String> {
            r.out
                .chunks()
                .into_iter()
                .filter(|(s, _)| *s == which)
                .map(|(_, b)| String::from_utf8(b).unwrap())
                .collect()
        };
        // Apply: each command's output is in the run's output, in order with the prints, and
        // still in the result.
        let a = run(&t, ExecMode::Apply, src).ok();
        assert_eq!(
            of(&a, Stream::Stdout),
            [
                "before\n",
                "out-s\n",
                "out-q\n",
                "[0, \"out-s\\n\", \"err\\n\", 2, \"out-q\\n\"]\n"
            ]
        );
        assert_eq!(of(&a, Stream::Stderr), ["err\n", "err\n"]);
        // Plan: the command is not run and streams nothing; the query streams.
        t.clear_calls();
        let p = run(&t, ExecMode::Plan, src).ok();
        assert_eq!(
            of(&p, Stream::Stdout),
            ["before\n", "out-q\n", "[0, \"\", \"\", 2, \"out-q\\n\"]\n"]
        );
        assert_eq!(of(&p, Stream::Stderr), ["err\n"]);
        assert_eq!(t.calls(), vec!["hello q 2"]);
        let r = run(&t, ExecMode::Apply, r#"run(["hello"], #{stream: 1})"#);
        assert_eq!(
            r.error(),
            "main.rhai:1:1: run: option stream must be a bool, got i64"
        );
    }

    #[test]
    fn command_timeout_defaults_to_the_run_deadline() {
        let t = TestHost::new();
        t.install_sh();
        nix::unistd::mkfifo(
            &t.p("/fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let host = Host::new(
            HostRoot::open(&t.root).unwrap(),
            ExecMode::Apply,
            HostOptions::default(),
        );
        let api = HostApi::new(host);
        let engine = ScriptEngine::default();
        let script = compile_source(
            &engine,
            "main.rhai",
            r#"run(["/bin/sh", "-c", "read x < /fifo"])"#,
            Arc::new(ModuleStore::new(t.dir.path())),
        )
        .unwrap();
        let out = Arc::new(CaptureOutput::new());
        let mut opts = ScriptRunOptions::new(out, crate::process::Cancel::new());
        opts.host = Arc::new(api.clone());
        opts.timeout = Some(Duration::from_millis(300));
        let started = Instant::now();
        let outcome = run_script_with(&engine, &script, &StepContext::default(), &opts);
        let err = outcome.error.expect("timed out").to_string();
        assert!(
            err.starts_with(
                "main.rhai:1:1: run: command /bin/sh -c 'read x < /fifo' timed out after"
            ),
            "{err}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        api.finish().unwrap();
    }

    /// A command that prints without end is stopped at the capture limit (16 MiB per stream)
    /// and the step fails at the call with the named error; `query` in plan mode alike.
    #[test]
    fn endless_command_output_stops_at_the_capture_limit() {
        let t = TestHost::new();
        let mut o = opts_for(&t);
        o.commands_chrooted = false;
        o.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
        let msg = "command /usr/bin/yes printed more than 16777216 bytes on stdout (the capture \
                   limit) and was stopped; use the stream option for large output";
        let r = run_with(
            &t,
            ExecMode::Apply,
            "let x = 1;\nrun([\"/usr/bin/yes\"]);\nprint(\"after\");",
            o.clone(),
        );
        assert_eq!(r.error(), format!("main.rhai:2:1: run: {msg}"));
        assert_eq!(r.stdout(), "");
        let r = run_with(&t, ExecMode::Plan, r#"query(["/usr/bin/yes"])"#, o);
        assert_eq!(r.error(), format!("main.rhai:1:1: query: {msg}"));
    }

    const GUARDED: &str = "print(\"before\");\n\
        let r = run([\"useradd\", \"gpuops\"], #{unless: [\"id\", \"gpuops\"]});\n\
        print(`skipped=${r.skipped ?? false} planned=${r.planned ?? false}`);\n\
        sh(\"echo made > /made\", #{creates: \"/made\"});\n\
        changed()\n";

    #[test]
    fn guarded_commands_through_rhai_in_plan_check_and_apply() {
        let t = users_root();
        let pos = |line: usize| {
            Some(crate::host::Position {
                file: "main.rhai".into(),
                line,
            })
        };
        let before = snapshot(&t);
        let plan = run(&t, ExecMode::Plan, GUARDED);
        assert_eq!(snapshot(&t), before);
        assert_eq!(plan.stdout(), "before\nskipped=false planned=true\n");
        // The second command's `creates` guard reads what the first, only planned, may have
        // made: unknown, and the plan ends there (not a failure: the step runner says so).
        let e = plan
            .outcome
            .error
            .as_ref()
            .expect("the plan ends at the guard");
        assert_eq!(e.kind, crate::script::errors::ScriptErrorKind::PlanUnknown);
        assert_eq!(
            e.message,
            "sh: /made is unknown in the plan: the command useradd gpuops (planned at main.rhai:2) is only run by the apply and may change it"
        );
        let summaries: Vec<(&str, &str, Option<crate::host::Position>)> = plan
            .report
            .changes
            .iter()
            .map(|c| (c.kind.as_str(), c.summary.as_str(), c.position.clone()))
            .collect();
        assert_eq!(
            summaries,
            [(
                "guarded_command",
                "run: useradd gpuops (unless id gpuops)",
                pos(2)
            ),]
        );
        let check = run(&t, ExecMode::Check, GUARDED).ok();
        assert_eq!(check.report.drift().len(), 2);

        // No bash in the test root: only the `run` can be applied; `sh` stays drift.
        let apply = run(
            &t,
            ExecMode::Apply,
            "run([\"useradd\", \"gpuops\"], #{unless: [\"id\", \"gpuops\"]}).ok",
        )
        .ok();
        assert_eq!(apply.report.summary(), "Apply: 1 changed, 0 unchanged.");
        assert_eq!(t.read("/users"), "gpuops\n");
        t.file("/made", "made\n");
        let check = run(&t, ExecMode::Check, GUARDED).ok();
        assert!(check.report.drift().is_empty(), "{:?}", check.report);
        assert_eq!(check.report.unchanged, 2);
        assert_eq!(check.stdout(), "before\nskipped=true planned=false\n");
        assert_eq!(check.outcome.code, 0);
    }

    #[test]
    fn guard_options_are_checked() {
        let t = TestHost::new();
        for (src, msg) in [
            (
                "run([\"true\"], #{creates: \"made\"})",
                "run: option creates must be an absolute path, got \"made\"",
            ),
            (
                "run([\"true\"], #{unless: \"id x\"})",
                "run: option unless must be an argv array, got string",
            ),
            (
                "run([\"true\"], #{onlyif: []})",
                "run: option onlyif needs at least a program name",
            ),
            (
                "run([\"true\"], #{creates: \"/x\", read_only: true})",
                "run: a guarded command cannot be read_only (guards are for commands that change something)",
            ),
        ] {
            let r = run(&t, ExecMode::Plan, src);
            assert_eq!(r.error(), format!("main.rhai:1:1: {msg}"), "{src}");
        }
        let r = run(&t, ExecMode::Plan, "query([\"true\"], #{creates: \"/x\"})");
        assert!(r.error().contains("creates"), "{}", r.error());
    }

    /// A `.rhai` step's `secret()` on a key that links out of `<secrets_dir>/<name>` fails at
    /// the call naming the coordinate; the outside content appears in no output, error or
    /// report; the kubelet `..data` layout beside it still reads.
    #[test]
    fn secret_link_out_of_its_dir_is_refused() {
        let t = TestHost::new();
        std::fs::write(t.dir.path().join("outside-file"), "outside-content").unwrap();
        let db = t.dir.path().join("secrets/db");
        std::fs::create_dir_all(db.join("..2026_12_01")).unwrap();
        std::fs::write(db.join("..2026_12_01/pw"), "kube-pw").unwrap();
        std::os::unix::fs::symlink("..2026_12_01", db.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/pw", db.join("pw")).unwrap();
        std::os::unix::fs::symlink(t.dir.path().join("outside-file"), db.join("link")).unwrap();
        let mut o = opts_for(&t);
        o.allowed_secrets = vec!["db".into()];
        let src = "print(secret(\"db\", \"pw\").len());\nprint(secret(\"db\", \"link\"));";
        let r = run_with(&t, ExecMode::Apply, src, o);
        assert_eq!(r.stdout(), "7\n");
        assert_eq!(
            r.error(),
            "main.rhai:2:7: secret: failed to read secret \"db\" key \"link\": No such file or \
             directory (os error 2)"
        );
        let all = format!("{}{}{:?}", r.stdout(), r.stderr(), r.report);
        assert!(!all.contains("outside-content"), "{all}");
    }
}
