//! The host API through Rhai: every function in apply, plan and check mode, errors,
//! secrets, the registration/table agreement and the generated docs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::host::report::ExecMode;
use crate::host::root::HostRoot;
use crate::host::testutil::{TestHost, tree};
use crate::host::{HostOptions, Report};
use crate::script::{
    CaptureOutput, ModuleStore, RunOptions, ScriptEngine, ScriptOutcome, StepContext,
    compile_source, run_script_with,
};

/// One finished run.
struct Ran {
    outcome: ScriptOutcome,
    report: Report,
    out: Arc<CaptureOutput>,
}

impl Ran {
    fn stdout(&self) -> String {
        String::from_utf8(self.out.stdout_bytes()).unwrap()
    }
    fn stderr(&self) -> String {
        String::from_utf8(self.out.stderr_bytes()).unwrap()
    }
    fn error(&self) -> String {
        self.outcome
            .error
            .as_ref()
            .expect("the run should have failed")
            .to_string()
    }
    fn ok(self) -> Self {
        assert!(
            self.outcome.error.is_none(),
            "script failed: {:?}\n{}",
            self.outcome.error,
            self.stderr()
        );
        self
    }
}

fn opts_for(t: &TestHost) -> HostOptions {
    HostOptions {
        configmaps_dir: Some(t.dir.path().join("configmaps")),
        node_metadata_dir: Some(t.dir.path().join("node-metadata")),
        secrets_dir: t.dir.path().join("secrets"),
        ..HostOptions::default()
    }
}

fn run_with(t: &TestHost, mode: ExecMode, src: &str, o: HostOptions) -> Ran {
    let host = Host::new(HostRoot::open(&t.root).unwrap(), mode, o);
    let api = HostApi::new(host);
    let engine = ScriptEngine::default();
    let script = compile_source(
        &engine,
        "main.rhai",
        src,
        Arc::new(ModuleStore::new(t.dir.path())),
    )
    .unwrap();
    let out = Arc::new(CaptureOutput::new());
    let mut opts = RunOptions::new(
        api.redacting_output(out.clone()),
        crate::process::Cancel::new(),
    );
    opts.host = Arc::new(api.clone());
    let ctx = StepContext {
        name: "main.rhai".into(),
        ..Default::default()
    };
    let outcome = run_script_with(&engine, &script, &ctx, &opts);
    let report = api.finish().unwrap();
    Ran {
        outcome,
        report,
        out,
    }
}

fn run(t: &TestHost, mode: ExecMode, src: &str) -> Ran {
    run_with(t, mode, src, opts_for(t))
}

fn snapshot(t: &TestHost) -> std::collections::BTreeMap<PathBuf, String> {
    let mut m = tree(&t.root);
    m.remove(Path::new("stub.log"));
    m
}

/// `calls` pushed into `r` and printed, `changed()` returned: the script form of every
/// mode test.
fn script(calls: &[&str]) -> String {
    let mut s = String::from("let r = [];\n");
    for c in calls {
        s.push_str(&format!("r.push({c});\n"));
    }
    s.push_str("print(r);\nchanged()\n");
    s
}

fn bools(v: bool, n: usize) -> String {
    format!("[{}]\n", vec![v.to_string(); n].join(", "))
}

/// Plan, check, apply, apply again, check, plan again over `calls` (each a mutation that
/// changes the fresh root): a plan and a check leave the root byte-identical and list the
/// changes; apply returns true for each and `changed()` counts them; the second apply
/// returns false for each; the check after apply passes. Returns the plan's report.
fn all_modes(t: &TestHost, calls: &[&str]) -> Report {
    let src = script(calls);
    let n = calls.len();
    let before = snapshot(t);
    let plan = run(t, ExecMode::Plan, &src).ok();
    assert_eq!(snapshot(t), before, "a plan changed the root");
    assert_eq!(plan.stdout(), bools(true, n));
    assert_eq!(plan.outcome.code as usize, n);
    assert_eq!(plan.report.changes.len(), n, "{:?}", plan.report.changes);

    let check = run(t, ExecMode::Check, &src).ok();
    assert_eq!(snapshot(t), before, "a check changed the root");
    assert_eq!(check.report.drift().len(), n);

    let apply = run(t, ExecMode::Apply, &src).ok();
    assert_eq!(apply.stdout(), bools(true, n));
    assert_eq!(apply.outcome.code as usize, n);

    let again = run(t, ExecMode::Apply, &src).ok();
    assert_eq!(again.stdout(), bools(false, n), "second apply changed");
    assert_eq!(again.outcome.code, 0);
    assert!(again.report.changes.is_empty());

    let check = run(t, ExecMode::Check, &src).ok();
    assert!(check.report.drift().is_empty(), "drift after apply");
    let plan2 = run(t, ExecMode::Plan, &src).ok();
    assert!(plan2.report.changes.is_empty());
    plan.report
}

#[test]
fn fs_mutations_all_modes() {
    let t = TestHost::new();
    t.file(
        "/etc/passwd",
        "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
    );
    t.file("/etc/group", "root:x:0:\nnogroup:x:65534:\n");
    t.file(
        "/etc/app/old.conf",
        "x=1\nkeep\nx=2\n# BEGIN skyhook gone\nz\n# END skyhook gone\n",
    );
    t.file("/etc/app/keep.conf", "k\n");
    t.file("/etc/app/r.conf", "a=0\nz\na=1\n");
    t.file("/etc/app/trash", "t");
    t.file("/etc/app/tree/a/b", "b");
    let plan = all_modes(
        &t,
        &[
            r#"fs::mkdir("/etc/app/sub")"#,
            r#"fs::mkdir("/etc/app/d", 0o700)"#,
            r#"fs::write("/etc/app/a.conf", "a=1\n")"#,
            r#"fs::write("/etc/app/b.conf", "b\n", #{mode: "0600", owner: "nobody", group: 65534})"#,
            r#"fs::ensure_line("/etc/app/l.conf", "b=2")"#,
            r#"fs::ensure_line("/etc/app/r.conf", "a=3", #{regex: "^a=", create: false})"#,
            r#"fs::remove_line("/etc/app/old.conf", "^x=")"#,
            r#"fs::ensure_block("/etc/app/l.conf", "net", "c=1\nd=2")"#,
            r#"fs::remove_block("/etc/app/old.conf", "gone")"#,
            r#"fs::copy("/etc/app/a.conf", "/etc/app/c.conf")"#,
            r#"fs::copy("/etc/app/keep.conf", "/etc/app/e.conf", #{mode: 0o640})"#,
            r#"fs::chmod("/etc/app/keep.conf", "0640")"#,
            r#"fs::chown("/etc/app/keep.conf", "nobody", ())"#,
            r#"fs::symlink("a.conf", "/etc/app/link")"#,
            r#"fs::remove("/etc/app/trash")"#,
            r#"fs::remove_all("/etc/app/tree")"#,
        ],
    );
    // The plan lists the diff of a written file.
    let a = plan
        .changes
        .iter()
        .find(|c| c.target == "/etc/app/a.conf" && c.diff.is_some())
        .expect("a diff for a.conf");
    assert!(a.diff.as_ref().unwrap().contains("+a=1\n"), "{a:?}");
    assert_eq!(t.read("/etc/app/a.conf"), "a=1\n");
    assert_eq!(
        t.read("/etc/app/l.conf"),
        "b=2\n# BEGIN skyhook net\nc=1\nd=2\n# END skyhook net\n"
    );
    assert_eq!(t.read("/etc/app/r.conf"), "a=0\nz\na=3\n");
    assert_eq!(t.read("/etc/app/old.conf"), "keep\n");
    assert_eq!(t.read("/etc/app/c.conf"), t.read("/etc/app/a.conf"));
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(t.p("/etc/app/b.conf")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.uid(), m.gid()), (0o600, 65534, 65534));
    let m = std::fs::metadata(t.p("/etc/app/keep.conf")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.uid()), (0o640, 65534));
    assert_eq!(
        std::fs::read_link(t.p("/etc/app/link")).unwrap(),
        Path::new("a.conf")
    );
    assert!(!t.p("/etc/app/tree").exists() && !t.p("/etc/app/trash").exists());
}

#[test]
fn fs_append_is_a_change_every_time_and_plans_nothing() {
    let t = TestHost::new();
    let src = r#"print(fs::append("/var/log/x", "line\n")); print(fs::append("/var/log/x", ""));"#;
    let before = snapshot(&t);
    let p = run(&t, ExecMode::Plan, src).ok();
    assert_eq!(snapshot(&t), before);
    assert_eq!(p.stdout(), "true\nfalse\n");
    run(&t, ExecMode::Apply, src).ok();
    let r = run(&t, ExecMode::Apply, src).ok();
    assert_eq!(r.stdout(), "true\nfalse\n");
    assert_eq!(t.read("/var/log/x"), "line\nline\n");
}

#[test]
fn fs_queries_see_planned_writes() {
    let t = TestHost::new();
    t.file("/etc/d/b", "bee");
    t.file("/etc/d/a.conf", "A");
    let src = r#"
        fs::write("/etc/d/c.conf", "planned");
        let st = fs::stat("/etc/d/b");
        print([fs::exists("/etc/d/c.conf"), fs::is_file("/etc/d/b"), fs::is_dir("/etc/d"),
               fs::exists("/nope")]);
        print([fs::read("/etc/d/c.conf"), fs::read_or("/nope", "dflt")]);
        print(fs::list("/etc/d"));
        print(fs::glob("/etc/*/*.conf"));
        print([st.kind, st.size, st.mode]);
    "#;
    let expect = "[true, true, true, false]\n[\"planned\", \"dflt\"]\n\
                  [\"a.conf\", \"b\", \"c.conf\"]\n[\"/etc/d/a.conf\", \"/etc/d/c.conf\"]\n\
                  [\"file\", 3, 420]\n";
    let before = snapshot(&t);
    let r = run(&t, ExecMode::Plan, src).ok();
    assert_eq!(r.stdout(), expect);
    assert_eq!(snapshot(&t), before);
    std::fs::set_permissions(
        t.p("/etc/d/b"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let r = run(&t, ExecMode::Apply, src).ok();
    assert_eq!(r.stdout(), expect);
}

#[test]
fn errors_carry_position_path_and_function() {
    let t = TestHost::new();
    let r = run(
        &t,
        ExecMode::Apply,
        "let x = 1;\nlet y = fs::read(\"/etc/missing\");\n",
    );
    assert_eq!(
        r.error(),
        "main.rhai:2:13: fs::read: /etc/missing does not exist"
    );
    let r = run(&t, ExecMode::Plan, "\n  fs::write(\"etc/x\", \"\");");
    assert_eq!(
        r.error(),
        "main.rhai:2:7: fs::write: paths must be absolute: \"etc/x\""
    );
    // Catchable, and the message is the value caught.
    let r = run(
        &t,
        ExecMode::Apply,
        r#"try { fs::list("rel") } catch (e) { print(e) }"#,
    )
    .ok();
    assert_eq!(r.stdout(), "fs::list: paths must be absolute: \"rel\"\n");
    // Argument errors name the option.
    let r = run(&t, ExecMode::Apply, r#"fs::write("/x", "", #{mod: 1})"#);
    assert_eq!(
        r.error(),
        "main.rhai:1:5: fs::write: unknown option \"mod\" (expected one of: mode, owner, group)"
    );
    let r = run(&t, ExecMode::Apply, r#"fs::chmod("/x", "rw")"#);
    assert!(
        r.error().contains("mode must be an integer"),
        "{}",
        r.error()
    );
    let r = run(
        &t,
        ExecMode::Apply,
        r#"fs::ensure_line("/x", "l", #{create: false})"#,
    );
    assert_eq!(
        r.error(),
        "main.rhai:1:5: fs::ensure_line: /x does not exist"
    );
}

#[test]
fn commands_run_plan_and_query() {
    let t = TestHost::new();
    t.install_sh();
    t.stub("hello", "echo out-$1; echo err >&2; exit ${2:-0}");
    let src = r#"
        let a = run(["hello", "x"]);
        let b = run(["hello", "y", "3"], #{env: #{V: 1}});
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
    let actions: Vec<&str> = p
        .report
        .actions
        .iter()
        .map(|a| a.summary.as_str())
        .collect();
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
    // check: true throws with the command and its stderr.
    let r = run(
        &t,
        ExecMode::Apply,
        "\n run([\"hello\", \"z\", \"4\"], #{check: true})",
    );
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
    let mut opts = RunOptions::new(out, crate::process::Cancel::new());
    opts.host = Arc::new(api.clone());
    opts.timeout = Some(Duration::from_millis(300));
    let started = Instant::now();
    let outcome = run_script_with(&engine, &script, &StepContext::default(), &opts);
    let err = outcome.error.expect("timed out").to_string();
    assert!(
        err.starts_with("main.rhai:1:1: run: command /bin/sh -c 'read x < /fifo' timed out after"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    api.finish().unwrap();
}

#[test]
fn services_all_modes_and_actions() {
    let t = TestHost::new();
    t.systemctl_stub();
    std::fs::write(t.p("/state/old.active"), "yes\n").unwrap();
    std::fs::write(t.p("/state/old.enabled"), "yes\n").unwrap();
    let plan = all_modes(
        &t,
        &[
            r#"service::start("nginx")"#,
            r#"service::enable("nginx")"#,
            r#"service::stop("old")"#,
            r#"service::disable("old")"#,
            r#"service::drop_in("kubelet", "10-x.conf", "[Service]\nX=1\n")"#,
        ],
    );
    // The drop-in's daemon-reload is an action in the plan, not a change.
    assert!(
        plan.actions
            .iter()
            .any(|a| a.summary.contains("daemon-reload")),
        "{:?}",
        plan.actions
    );
    let r = run(
        &t,
        ExecMode::Apply,
        r#"print([service::is_active("nginx"), service::is_enabled("old")]);"#,
    )
    .ok();
    assert_eq!(r.stdout(), "[true, false]\n");
    // Actions run every time in apply, are recorded in plan, never drift in check.
    let src = r#"service::restart("nginx"); service::reload("nginx"); service::daemon_reload(); changed()"#;
    t.clear_calls();
    let p = run(&t, ExecMode::Plan, src).ok();
    assert_eq!(p.report.actions.len(), 3);
    assert!(t.calls().is_empty());
    let c = run(&t, ExecMode::Check, src).ok();
    assert!(c.report.drift().is_empty());
    let a = run(&t, ExecMode::Apply, src).ok();
    assert_eq!(a.outcome.code, 0, "actions are not counted by changed()");
    assert_eq!(
        t.calls(),
        vec![
            "systemctl restart nginx",
            "systemctl reload nginx",
            "systemctl daemon-reload"
        ]
    );
    // Removing the drop-in: a change, plus one deferred reload run at finish even when the
    // script then fails.
    t.clear_calls();
    let r = run(
        &t,
        ExecMode::Apply,
        r#"service::remove_drop_in("kubelet", "10-x.conf"); throw "boom";"#,
    );
    assert!(r.error().ends_with("boom"));
    assert_eq!(t.calls(), vec!["systemctl daemon-reload"]);
    assert!(
        !t.p("/etc/systemd/system/kubelet.service.d/10-x.conf")
            .exists()
    );
}

#[test]
fn config_node_and_secrets() {
    let t = TestHost::new();
    let cm = t.dir.path().join("configmaps");
    std::fs::create_dir_all(&cm).unwrap();
    std::fs::write(cm.join("a"), "one\n# c\n\n two \n").unwrap();
    std::fs::write(cm.join("kv"), "x = 1\ny=2\n").unwrap();
    std::fs::write(cm.join("bad"), "k=v\nnovalue\n").unwrap();
    let md = t.dir.path().join("node-metadata");
    std::fs::create_dir_all(&md).unwrap();
    std::fs::write(md.join("labels.json"), r#"{"gpu": "a100", "n": 2}"#).unwrap();
    let sd = t.dir.path().join("secrets/db");
    std::fs::create_dir_all(&sd).unwrap();
    std::fs::write(sd.join("password"), "s3cr3t-pw").unwrap();
    let src = r#"
        print([config::has("a"), config::has("zz"), config::get("zz"), config::names()]);
        print([config::lines("a"), config::kv("kv")]);
        print([node::labels(), node::annotations(), node::packages()]);
        let pw = secret("db", "password");
        let tok = secret_env("TOKEN");
        print(`pw=${pw} tok=${tok}`);
        print(pw.len());
    "#;
    let mut o = opts_for(&t);
    o.allowed_secrets = vec!["db".into()];
    o.env.push(("TOKEN".into(), "tok-123".into()));
    let r = run_with(&t, ExecMode::Plan, src, o.clone()).ok();
    assert_eq!(
        r.stdout(),
        "[true, false, (), [\"a\", \"bad\", \"kv\"]]\n\
         [[\"one\", \"two\"], #{\"x\": \"1\", \"y\": \"2\"}]\n\
         [#{\"gpu\": \"a100\", \"n\": 2}, #{}, #{}]\n\
         pw=*** tok=***\n9\n"
    );
    let r = run_with(&t, ExecMode::Apply, "\nconfig::kv(\"bad\")", o.clone());
    assert_eq!(
        r.error(),
        "main.rhai:2:9: config::kv: configMap \"bad\" line 2: expected key=value, got \"novalue\""
    );
    // A secret never appears in an error, nor in the error written to stderr.
    let r = run_with(
        &t,
        ExecMode::Apply,
        "let pw = secret(\"db\", \"password\");\nfs::read(`/etc/${pw}`)",
        o.clone(),
    );
    assert_eq!(
        r.error(),
        "main.rhai:2:5: fs::read: /etc/*** does not exist"
    );
    assert!(!r.stderr().contains("s3cr3t"), "{}", r.stderr());
    let r = run_with(&t, ExecMode::Apply, r#"secret("other", "k")"#, o.clone());
    assert_eq!(
        r.error(),
        "main.rhai:1:1: secret: secret \"other\" is not in SKYHOOK_ALLOWED_SECRETS (asked for key \"k\")"
    );
    // A plan that writes a secret into a file shows it redacted.
    let r = run_with(
        &t,
        ExecMode::Plan,
        r#"fs::write("/etc/app.conf", "pw=" + secret_env("TOKEN") + "\n")"#,
        o,
    )
    .ok();
    let red = crate::host::secrets::Redactor::new();
    red.add("tok-123");
    assert!(r.report.render_text(&red).contains("+pw=***\n"));
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

fn mkfifo(p: &Path) {
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

/// Every host call that reads a whole file refuses a FIFO (which would block the step past
/// its deadline), a character device like `/dev/zero` (which would fill memory) and a file
/// above `MAX_READ_BYTES`, promptly and with an error naming the path and the limit; under
/// the host root and for agent-side files (configMaps, node metadata, secrets) alike.
#[test]
fn whole_file_reads_refuse_fifos_devices_and_huge_files() {
    let t = TestHost::new();
    t.file("/etc/ok", "fine\n");
    mkfifo(&t.p("/etc/fifo"));
    let big = std::fs::File::create(t.p("/etc/big")).unwrap();
    big.set_len(crate::host::fs::MAX_READ_BYTES + 1).unwrap();
    // mknod needs CAP_MKNOD: the device case is checked only where it can be made.
    let zero = nix::sys::stat::mknod(
        &t.p("/etc/zero"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 5),
    )
    .is_ok();
    let cm = t.dir.path().join("configmaps");
    std::fs::create_dir_all(&cm).unwrap();
    mkfifo(&cm.join("fifo"));
    let md = t.dir.path().join("node-metadata");
    std::fs::create_dir_all(&md).unwrap();
    mkfifo(&md.join("labels.json"));
    let sd = t.dir.path().join("secrets/db");
    std::fs::create_dir_all(&sd).unwrap();
    mkfifo(&sd.join("fifo"));
    let mut o = opts_for(&t);
    o.allowed_secrets = vec!["db".into()];

    let started = Instant::now();
    // Uncaught: the step fails at the call with the whole message.
    let r = run_with(
        &t,
        ExecMode::Apply,
        "let x = 1;\nfs::read(\"/etc/fifo\")",
        o.clone(),
    );
    assert_eq!(
        r.error(),
        "main.rhai:2:5: fs::read: /etc/fifo is a fifo, not a regular file (only regular files are read)"
    );
    let r = run_with(&t, ExecMode::Apply, r#"fs::read("/etc/big")"#, o.clone());
    assert_eq!(
        r.error(),
        "main.rhai:1:5: fs::read: /etc/big is too large to read: 67108865 bytes, more than the \
         limit of 67108864 bytes (64 MiB)"
    );
    // Every other whole-file reader, in plan mode too (reads go through the overlay).
    let src = r#"
        let calls = [
            || fs::read_or("/etc/fifo", "d"),
            || fs::ensure_line("/etc/fifo", "x"),
            || fs::ensure_block("/etc/big", "id", "x"),
            || fs::append("/etc/fifo", "x"),
            || fs::copy("/etc/fifo", "/etc/copy"),
            || fs::write("/etc/fifo", "x"),
            || config::get("fifo"),
            || node::labels(),
            || secret("db", "fifo"),
        ];
        for c in calls { try { c.call(); print("read?"); } catch (e) { print(e); } }
        print(fs::read("/etc/ok"));
    "#;
    let fifo = |p: &str| format!("{p} is a fifo, not a regular file (only regular files are read)");
    let agent = |rel: &str| t.dir.path().join(rel).display().to_string();
    let expected = [
        format!("fs::read_or: {}", fifo("/etc/fifo")),
        format!("fs::ensure_line: {}", fifo("/etc/fifo")),
        "fs::ensure_block: /etc/big is too large to read: 67108865 bytes, more than the limit \
         of 67108864 bytes (64 MiB)"
            .to_string(),
        format!("fs::append: {}", fifo("/etc/fifo")),
        format!("fs::copy: {}", fifo("/etc/fifo")),
        format!("fs::write: {}", fifo("/etc/fifo")),
        format!("config::get: {}", fifo(&agent("configmaps/fifo"))),
        format!(
            "node::labels: {}",
            fifo(&agent("node-metadata/labels.json"))
        ),
        format!("secret: {}", fifo(&agent("secrets/db/fifo"))),
        "fine\n".to_string(),
    ];
    for mode in [ExecMode::Plan, ExecMode::Apply] {
        let r = run_with(&t, mode, src, o.clone()).ok();
        assert_eq!(r.stdout(), expected.join("\n") + "\n", "{mode:?}");
    }
    if zero {
        let r = run_with(&t, ExecMode::Apply, r#"fs::read("/etc/zero")"#, o.clone());
        assert_eq!(
            r.error(),
            "main.rhai:1:5: fs::read: /etc/zero is a character device, not a regular file (only \
             regular files are read)"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
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

/// A binary configMap read as text is an error naming it (not U+FFFD replacements);
/// `config::has` still sees it.
#[test]
fn binary_configmap_read_as_text_is_an_error() {
    let t = TestHost::new();
    let cm = t.dir.path().join("configmaps");
    std::fs::create_dir_all(&cm).unwrap();
    std::fs::write(cm.join("blob"), b"ok\n\xff\xfe\x00").unwrap();
    let r = run(
        &t,
        ExecMode::Plan,
        "print(config::has(\"blob\"));\nconfig::get(\"blob\")",
    );
    assert_eq!(r.stdout(), "true\n");
    assert_eq!(
        r.error(),
        "main.rhai:2:9: config::get: configMap \"blob\" is not UTF-8 text (invalid byte at \
         offset 3); binary configMaps cannot be read as text"
    );
    for f in ["lines", "kv"] {
        let r = run(&t, ExecMode::Plan, &format!("config::{f}(\"blob\")"));
        assert!(
            r.error().contains("configMap \"blob\" is not UTF-8 text"),
            "{}",
            r.error()
        );
    }
}

/// Registration log vs. table, and every logged function really is in its module.
#[test]
fn every_registered_function_is_documented_and_vice_versa() {
    let t = TestHost::new();
    let api = HostApi::new(t.host(ExecMode::Plan));
    let handle = crate::script::RunHandle {
        deadline: Instant::now(),
        cancel: crate::process::Cancel::new(),
        output: Arc::new(CaptureOutput::new()),
    };
    let reg = api.modules(&handle);
    for r in &reg.log {
        assert!(reg.modules[r.ns].contains_fn(r.hash), "{r:?} not in module");
    }
    let mut registered: Vec<(String, usize)> = reg
        .log
        .iter()
        .map(|r| (fname(r.ns, &r.name), r.params))
        .collect();
    registered.sort();
    let mut documented: Vec<(String, usize)> = FUNCTIONS
        .iter()
        .filter(|d| !d.script_layer)
        .map(|d| (d.full_name(), d.params.len()))
        .collect();
    documented.sort();
    assert_eq!(registered, documented);
    // The script layer's own functions in the table exist too.
    for d in FUNCTIONS.iter().filter(|d| d.script_layer) {
        let r = run(&t, ExecMode::Apply, &format!("{}()", d.name)).ok();
        assert_eq!(r.outcome.code, 0);
    }
    // Every namespace of the table has a section.
    for d in FUNCTIONS {
        assert!(docs_namespaces().contains(&d.ns), "{}", d.ns);
    }
}

/// Every script-layer function of the reference is callable in a run with its arity.
#[test]
fn script_functions_are_registered() {
    let t = TestHost::new();
    for d in SCRIPT_FUNCTIONS {
        let args = vec!["\"x\""; d.params.len()].join(", ");
        let r = run(&t, ExecMode::Apply, &format!("{}({args});", d.full_name()));
        if d.name == "fail" {
            assert!(
                r.outcome.error.as_ref().is_some_and(|e| e.is_fail()),
                "{d:?}"
            );
        } else {
            let r = r.ok();
            assert_eq!(r.outcome.code, 0, "{d:?}");
        }
    }
}

/// The option keys the table records (which `skyhook-run check` enforces) are exactly those
/// each binding accepts: an unknown key is refused with the binding's own list.
#[test]
fn documented_option_keys_are_the_bindings_keys() {
    let t = TestHost::new();
    let mut seen = 0;
    for d in FUNCTIONS.iter().filter(|d| !d.options.is_empty()) {
        let args: Vec<&str> = d
            .params
            .iter()
            .map(|(_, ty)| match *ty {
                "Map" => "#{__bogus: 1}",
                "Array" => "[\"true\"]",
                _ => "\"/x\"",
            })
            .collect();
        let src = format!("{}({});", d.full_name(), args.join(", "));
        let r = run(&t, ExecMode::Plan, &src);
        assert!(
            r.error().ends_with(&format!(
                "unknown option \"__bogus\" (expected one of: {})",
                d.options.join(", ")
            )),
            "{src}: {}",
            r.error()
        );
        seen += 1;
    }
    assert_eq!(seen, 19);
}

fn docs_namespaces() -> Vec<&'static str> {
    super::docs::NAMESPACES.iter().map(|n| n.0).collect()
}

fn check_generated(rel: &str, text: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    if std::env::var_os("SKYHOOK_UPDATE_DOCS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == text,
        "{rel} is stale: regenerate it with \
         `SKYHOOK_UPDATE_DOCS=1 cargo test --lib script::host_api::tests::docs`"
    );
}

#[test]
fn docs_reference_is_up_to_date() {
    let md = render_markdown();
    assert!(md.contains("| `fs::write(path, content, opts)` | `bool` |"));
    for (name, _) in crate::script::resolver::STDLIB {
        assert!(
            md.contains(&format!("### `skyhook/{name}`")),
            "stdlib module {name} not listed"
        );
    }
    assert!(
        md.contains("`config_check()`"),
        "tuning's stage functions listed"
    );
    check_generated("docs/host-api.md", &md);
}

#[test]
fn docs_definitions_are_up_to_date() {
    let d = render_definitions();
    assert!(d.contains("module fs {\n"));
    assert!(d.contains("    fn write(path: String, content: String) -> bool;\n"));
    check_generated("docs/skyhook.d.rhai", &d);
}

fn apt_stubs(t: &TestHost) {
    t.install_sh();
    std::fs::create_dir_all(t.p("/state")).unwrap();
    t.file(
        "/etc/os-release",
        "ID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"24.04\"\n",
    );
    t.stub(
        "dpkg-query",
        r#"for last; do :; done
if [ -s "/state/pkg-$last" ]; then printf 'install ok installed\t1.2-3'; else exit 1; fi"#,
    );
    t.stub(
        "apt-get",
        r#"mode=; for a; do case "$a" in install|remove) mode=$a ;; -*) ;; *) if [ "$mode" = install ]; then echo i > "/state/pkg-$a"; elif [ "$mode" = remove ]; then : > "/state/pkg-$a"; fi ;; esac; done; :"#,
    );
}

#[test]
fn packages_all_modes() {
    let t = TestHost::new();
    apt_stubs(&t);
    std::fs::write(t.p("/state/pkg-old"), "i\n").unwrap();
    all_modes(
        &t,
        &[
            r#"pkg::install("curl")"#,
            r#"pkg::install(["jq", "vim"], #{update: true})"#,
            r#"pkg::remove(["old", "never-installed"])"#,
        ],
    );
    let r = run(
        &t,
        ExecMode::Apply,
        r#"print([pkg::manager(), pkg::installed("jq"), pkg::installed("old"), pkg::version("curl"), pkg::version("old")]);"#,
    )
    .ok();
    assert_eq!(r.stdout(), "[\"apt\", true, false, \"1.2-3\", ()]\n");
    let r = run(&t, ExecMode::Apply, r#"pkg::install(#{})"#);
    assert_eq!(
        r.error(),
        "main.rhai:1:6: pkg::install: names must be a string or an array of strings, got map"
    );
    let r = run(
        &t,
        ExecMode::Apply,
        r#"pkg::install("x", #{upgrade: true})"#,
    );
    assert!(
        r.error().contains("unknown option \"upgrade\""),
        "{}",
        r.error()
    );
    t.file("/etc/os-release", "ID=arch\n");
    let r = run(&t, ExecMode::Apply, r#"print(type_of(pkg::manager()))"#).ok();
    assert_eq!(r.stdout(), "()\n");
}

#[test]
fn os_facts() {
    let t = TestHost::new();
    t.file(
        "/etc/os-release",
        "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\nVERSION_ID=\"9.3\"\n",
    );
    t.file("/proc/sys/kernel/osrelease", "6.1.0-test\n");
    t.file("/proc/cmdline", "ro quiet\n");
    t.file("/etc/hostname", "node-7\n");
    let r = run(
        &t,
        ExecMode::Plan,
        r#"print([os::id(), os::version(), os::family(), os::kernel(), os::hostname(), os::cmdline(), os::release().ID_LIKE, os::arch() != ""]);"#,
    )
    .ok();
    assert_eq!(
        r.stdout(),
        "[\"rocky\", \"9.3\", \"rhel\", \"6.1.0-test\", \"node-7\", \"ro quiet\", \"rhel centos fedora\", true]\n"
    );
}

#[test]
fn sysctl_grub_ulimit_all_modes() {
    let t = TestHost::new();
    t.install_sh();
    t.stub("update-grub", ":");
    t.file("/etc/os-release", "ID=ubuntu\n");
    t.file("/proc/sys/vm/swappiness", "60\n");
    t.file("/proc/sys/net/ipv4/ip_local_port_range", "32768\t60999\n");
    t.file(
        "/etc/default/grub.d/old.cfg",
        "GRUB_CMDLINE_LINUX_DEFAULT=\"${GRUB_CMDLINE_LINUX_DEFAULT} quiet\"\n",
    );
    let plan = all_modes(
        &t,
        &[
            r#"sysctl::set("vm.swappiness", 10)"#,
            r#"sysctl::persist("90-x.conf", #{"vm.swappiness": 10, "net.core.somaxconn": "4096"})"#,
            r#"grub::set_cmdline("tuning", ["hugepages=16", "iommu=pt"])"#,
            r#"grub::remove("old")"#,
            r#"ulimit::persist("90-x.conf", [#{domain: "*", type: "soft", item: "nofile", value: 65536}, "* hard nofile 65536"])"#,
        ],
    );
    assert!(
        plan.actions
            .iter()
            .any(|a| a.summary.contains("update-grub")),
        "{:?}",
        plan.actions
    );
    assert_eq!(t.read("/proc/sys/vm/swappiness"), "10\n");
    assert_eq!(
        t.read("/etc/sysctl.d/90-x.conf"),
        "net.core.somaxconn = 4096\nvm.swappiness = 10\n"
    );
    assert_eq!(
        t.read("/etc/default/grub.d/tuning.cfg"),
        "GRUB_CMDLINE_LINUX_DEFAULT=\"${GRUB_CMDLINE_LINUX_DEFAULT} hugepages=16 iommu=pt\"\n"
    );
    assert_eq!(
        t.read("/etc/security/limits.d/90-x.conf"),
        "* soft nofile 65536\n* hard nofile 65536\n"
    );
    let r = run(
        &t,
        ExecMode::Apply,
        r#"print([sysctl::get("vm.swappiness"), sysctl::get("no.such"), sysctl::set("net.ipv4.ip_local_port_range", "32768 60999")]);"#,
    )
    .ok();
    assert_eq!(r.stdout(), "[\"10\", (), false]\n");
    let r = run(&t, ExecMode::Apply, "\nsysctl::set(\"no.such\", 1)");
    assert_eq!(
        r.error(),
        "main.rhai:2:9: sysctl::set: unknown sysctl key \"no.such\" (no /proc/sys/no/such)"
    );
    let r = run(
        &t,
        ExecMode::Apply,
        r#"ulimit::persist("x", ["* soft nofile"])"#,
    );
    assert!(r.error().contains("must have four fields"), "{}", r.error());
}

#[test]
fn interrupts_are_recorded_not_run() {
    let t = TestHost::new();
    t.install_sh();
    t.stub("reboot", ":");
    t.stub("systemctl", ":");
    let src = r#"interrupt::restart_services(["containerd", "kubelet"]); interrupt::restart_services("x"); interrupt::restart_all_services(); interrupt::reboot(); changed()"#;
    for mode in [ExecMode::Apply, ExecMode::Plan, ExecMode::Check] {
        let before = snapshot(&t);
        let r = run(&t, mode, src).ok();
        assert_eq!(r.outcome.code, 0);
        assert_eq!(snapshot(&t), before);
        assert!(t.calls().is_empty(), "{:?}", t.calls());
        assert!(r.report.drift().is_empty());
        let json = serde_json::to_value(&r.report.interrupts).unwrap();
        assert_eq!(
            json,
            serde_json::json!([
                {"type": "restart_services", "services": ["containerd", "kubelet"]},
                {"type": "restart_services", "services": ["x"]},
                {"type": "restart_all_services"},
                {"type": "reboot"}
            ])
        );
    }
}

#[test]
fn finish_twice_and_calls_after_finish() {
    let t = TestHost::new();
    let api = HostApi::new(t.host(ExecMode::Apply));
    let rep = api.finish().unwrap();
    assert!(rep.changes.is_empty());
    let e = api.finish().unwrap_err();
    assert_eq!(e.to_string(), "host session already finished");
    assert_eq!(api.changed(), 0);
}

/// `cargo test --release --lib script::host_api::tests::bench -- --ignored --nocapture`
#[test]
#[ignore]
fn bench_ensure_line_and_plan() {
    let t = TestHost::new();
    let n = 10_000;
    let src = format!(
        "for i in 0..{n} {{ fs::ensure_line(\"/etc/bench.conf\", `line ${{i % 100}}`); }}\nchanged()"
    );
    let started = Instant::now();
    let r = run(&t, ExecMode::Apply, &src).ok();
    let total = started.elapsed();
    assert_eq!(r.outcome.code, 100);
    println!(
        "ensure_line x{n} (apply, one file, 100 distinct lines): {total:?} total, {:?} per call",
        total / n
    );
    let src =
        "for i in 0..200 { fs::write(`/etc/plan/f${i}.conf`, `value = ${i}\\n`); }\nchanged()";
    let started = Instant::now();
    let r = run(&t, ExecMode::Plan, src).ok();
    let total = started.elapsed();
    assert_eq!(r.outcome.code, 200);
    let text = r.report.render_text(&crate::host::secrets::Redactor::new());
    println!(
        "plan of 200 fs::write: {total:?} (report {} bytes, render {:?})",
        text.len(),
        {
            let s = Instant::now();
            let _ = r.report.render_text(&crate::host::secrets::Redactor::new());
            s.elapsed()
        }
    );
}

#[test]
fn redacting_output_handles_secrets_and_characters_split_across_chunks() {
    // regression: each chunk was redacted (and UTF-8 decoded) on its own, so a streamed
    // command's secret or multi-byte character split across two reads slipped through or
    // was mangled
    let d = tempfile::tempdir().unwrap();
    let api = HostApi::new(Host::new(
        HostRoot::open(d.path()).unwrap(),
        ExecMode::Apply,
        HostOptions::default(),
    ));
    api.redactor().add("topsecret");
    let capture = Arc::new(crate::script::CaptureOutput::new());
    {
        let out = api.redacting_output(capture.clone());
        out.stdout(b"pass: top");
        out.stdout(b"secret\ncaf\xc3");
        out.stdout(b"\xa9 ");
        out.stderr(b"ends with top");
    }
    assert_eq!(capture.stdout_bytes(), "pass: ***\ncafé ".as_bytes());
    // the held-back "top" is released when the output is dropped
    assert_eq!(capture.stderr_bytes(), b"ends with top");
}

/// A root with `/bin/sh` and `useradd`/`id` stubs over `/users`.
fn users_root() -> TestHost {
    let t = TestHost::new();
    t.install_sh();
    t.stub("useradd", "echo \"$1\" >> /users");
    t.stub(
        "id",
        "[ -e /users ] || exit 1\nwhile read u; do [ \"$u\" = \"$1\" ] && exit 0; done < /users\nexit 1",
    );
    t
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
    let plan = run(&t, ExecMode::Plan, GUARDED).ok();
    assert_eq!(snapshot(&t), before);
    assert_eq!(plan.stdout(), "before\nskipped=false planned=true\n");
    assert_eq!(plan.outcome.code, 2);
    let summaries: Vec<(&str, &str, Option<crate::host::Position>)> = plan
        .report
        .changes
        .iter()
        .map(|c| (c.kind.as_str(), c.summary.as_str(), c.position.clone()))
        .collect();
    assert_eq!(
        summaries,
        [
            (
                "guarded_command",
                "run: useradd gpuops (unless id gpuops)",
                pos(2)
            ),
            (
                "guarded_command",
                "sh: echo made > /made (creates /made)",
                pos(4)
            ),
        ]
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

#[test]
fn kmod_functions_all_modes_from_rhai() {
    let t = TestHost::new();
    t.install_sh();
    t.file("/etc/os-release", "ID=ubuntu\n");
    t.file("/proc/modules", "");
    t.stub("update-initramfs", ":");
    t.stub("modprobe", r#"echo "$1 1 0 - Live 0x0" >> /proc/modules"#);
    let plan = all_modes(
        &t,
        &[
            r#"kmod::blacklist("nouveau", #{disable: true})"#,
            r#"kmod::options("nouveau", #{modeset: 0})"#,
            r#"kmod::options("nvidia", "NVreg_PreserveVideoMemoryAllocations=1", #{file: "nvidia-pm"})"#,
            r#"kmod::load_at_boot("nvidia_uvm", #{file: "nvidia"})"#,
            r#"kmod::load("nvidia_uvm")"#,
        ],
    );
    let actions: Vec<&str> = plan.actions.iter().map(|a| a.summary.as_str()).collect();
    assert_eq!(actions, ["update-initramfs -u"]);
    assert_eq!(
        t.read("/etc/modprobe.d/nouveau.conf"),
        "options nouveau modeset=0\n"
    );
    assert_eq!(
        t.read("/etc/modprobe.d/nvidia-pm.conf"),
        "options nvidia NVreg_PreserveVideoMemoryAllocations=1\n"
    );
    assert_eq!(t.read("/etc/modules-load.d/nvidia.conf"), "nvidia_uvm\n");
    assert_eq!(t.calls(), ["modprobe nvidia_uvm", "update-initramfs -u"]);
}

#[test]
fn mount_functions_from_rhai_plan_and_errors() {
    let t = TestHost::new();
    t.file("/etc/fstab", "# empty\n");
    t.file("/proc/1/mountinfo", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n");
    let r = run(
        &t,
        ExecMode::Plan,
        r#"let c = mount::ensure("/data", #{source: "/dev/sdb1", fstype: "ext4", options: ["noatime", "nofail"], pass: 2});
print(c);
print(mount::is_mounted("/data"));
let i = mount::info("/data");
print(`${i.source} ${i.fstype} ${i.options}`);
print(mount::info("/nothing"));
print(mount::info("/").source);"#,
    )
    .ok();
    assert_eq!(
        r.stdout(),
        "true\ntrue\n/dev/sdb1 ext4 noatime,nofail\n\n/dev/sda1\n"
    );
    assert_eq!(
        r.report.changes[0].diff.as_deref(),
        Some(
            "--- a/etc/fstab\n+++ b/etc/fstab\n@@ -1 +1,2 @@\n # empty\n+/dev/sdb1 /data ext4 noatime,nofail 0 2\n"
        )
    );
    let r = run(
        &t,
        ExecMode::Plan,
        r#"mount::ensure("/data", #{source: "/dev/sdb1", fstype: "ext4", state: "gone"})"#,
    );
    assert!(
        r.error().ends_with(
            "mount::ensure: option state must be \"mounted\" or \"present\", got \"gone\""
        ),
        "{}",
        r.error()
    );
    let r = run(
        &t,
        ExecMode::Plan,
        r#"mount::ensure("/data", #{fstype: "ext4"})"#,
    );
    assert!(
        r.error()
            .ends_with("mount::ensure: option source is required (#{source, fstype})"),
        "{}",
        r.error()
    );
    let r = run(&t, ExecMode::Plan, r#"kmod::options("nouveau", 1)"#);
    assert!(
        r.error()
            .ends_with("kmod::options: opts must be a string, got i64 (or a map)"),
        "{}",
        r.error()
    );
}

#[test]
fn fs_fetch_all_modes_and_its_options() {
    use crate::host::fetch_tests::{BODY, Reply, Server, sha};
    let t = TestHost::new();
    let srv = Server::plain(|p| match p {
        "/tool" => Reply::Body(BODY.to_vec()),
        _ => Reply::Status("404 Not Found"),
    });
    let call = format!(
        r#"fs::fetch("{}", "/opt/bin/tool", #{{sha256: "{}", mode: 0o755, timeout: 30, max_bytes: 1024}})"#,
        srv.url("/tool"),
        sha(BODY)
    );
    let plan = all_modes(&t, &[&call]);
    assert_eq!(plan.changes[0].kind, "fetch");
    assert_eq!(srv.requests(), vec!["/tool"]);
    assert_eq!(std::fs::read(t.p("/opt/bin/tool")).unwrap(), BODY);

    let r = run(
        &t,
        ExecMode::Plan,
        r#"fs::fetch("http://x/a", "/a", #{sha: "x"})"#,
    );
    assert_eq!(
        r.error(),
        "main.rhai:1:5: fs::fetch: unknown option \"sha\" (expected one of: sha256, mode, owner, group, timeout, max_bytes)"
    );
    let r = run(
        &t,
        ExecMode::Plan,
        r#"fs::fetch("http://x/a", "/a", #{sha256: "00", timeout: 0})"#,
    );
    assert_eq!(
        r.error(),
        "main.rhai:1:5: fs::fetch: option timeout must be a positive number of seconds, got 0"
    );
    let url = srv.url("/nope");
    let r = run(
        &t,
        ExecMode::Apply,
        &format!(r#"fs::fetch("{url}", "/a", #{{sha256: "{}"}})"#, sha(BODY)),
    );
    assert_eq!(
        r.error(),
        format!(
            "main.rhai:1:5: fs::fetch: failed to download {url}: server answered 404 Not Found"
        )
    );
}

#[test]
fn pkg_repo_and_hold_from_scripts() {
    let t = TestHost::new();
    apt_stubs(&t);
    t.stub(
        "apt-mark",
        r#"case "$1" in
  showhold) if [ -e /state/held ]; then read v < /state/held; echo "$v"; fi ;;
  hold) echo "$2" > /state/held ;;
esac"#,
    );
    let src = r#"print([
        pkg::repo("r", #{url: "https://r.example/apt", suites: ["noble"], components: "main",
                         key: "-----BEGIN PGP PUBLIC KEY BLOCK-----\nk\n-----END PGP PUBLIC KEY BLOCK-----"}),
        pkg::hold("jq"),
    ]);"#;
    let plan = run(&t, ExecMode::Plan, src).ok();
    assert_eq!(plan.stdout(), "[true, true]\n");
    let kinds: Vec<&str> = plan
        .report
        .changes
        .iter()
        .map(|c| c.kind.as_str())
        .collect();
    assert_eq!(kinds, vec!["write", "write", "package_hold"]);
    assert_eq!(plan.report.changes[2].summary, "hold packages jq (apt)");
    assert_eq!(
        run(&t, ExecMode::Apply, src).ok().stdout(),
        "[true, true]\n"
    );
    assert_eq!(
        run(&t, ExecMode::Apply, src).ok().stdout(),
        "[false, false]\n"
    );
    assert_eq!(
        t.read("/etc/apt/sources.list.d/r.sources"),
        "# Managed by skyhook (pkg::repo \"r\").\nTypes: deb\nURIs: https://r.example/apt\nSuites: noble\nComponents: main\nSigned-By: /etc/apt/keyrings/r.asc\n"
    );
    assert_eq!(
        t.read("/etc/apt/keyrings/r.asc"),
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\nk\n-----END PGP PUBLIC KEY BLOCK-----\n"
    );
    let r = run(
        &t,
        ExecMode::Plan,
        r#"pkg::repo("r", #{url: "u", suite: "noble"})"#,
    );
    assert_eq!(
        r.error(),
        "main.rhai:1:6: pkg::repo: unknown option \"suite\" (expected one of: url, suites, components, arch, key, key_url, key_sha256, enabled)"
    );
    let r = run(
        &t,
        ExecMode::Plan,
        r#"pkg::repo("r", #{url: "u", suites: 1})"#,
    );
    assert_eq!(
        r.error(),
        "main.rhai:1:6: pkg::repo: option suites must be a string or an array of strings, got i64"
    );
}

#[path = "structured_tests.rs"]
mod structured;

/// `user::` and `group::` through Rhai: the issue's script (a system user, then `fs::chown`
/// and `fs::write` with its name) in plan, check and apply mode; `user::info`; option and
/// argument errors with the function name.
#[test]
fn users_and_groups_through_rhai() {
    let t = TestHost::new();
    t.file(
        "/etc/passwd",
        "root:x:0:0:root:/root:/bin/bash\nubuntu:x:1000:1000::/home/ubuntu:/bin/bash\n",
    );
    t.file("/etc/group", "root:x:0:\nvideo:x:44:\nubuntu:x:1000:\n");
    t.file("/srv/data/model.bin", "weights");
    std::fs::create_dir_all(t.p("/var/lib")).unwrap();
    let src = script(&[
        "group::ensure(\"gpuops\", #{system: true})",
        "user::ensure(\"gpuops\", #{system: true, group: \"gpuops\", groups: [\"video\"], home: \"/var/lib/gpuops\", create_home: true, comment: \"GPU ops\"})",
        "fs::chown(\"/srv/data\", \"gpuops\", \"gpuops\")",
        "user::ensure(\"alice\", #{uid: 2000, shell: \"/bin/sh\", create_home: false})",
    ]);
    let before = snapshot(&t);
    let report = run(&t, ExecMode::Plan, &src).ok().report;
    assert_eq!(snapshot(&t), before, "a plan changed the root");
    let check = run(&t, ExecMode::Check, &src).ok();
    assert_eq!(check.report.drift().len(), 8);
    assert_eq!(snapshot(&t), before, "a check changed the root");
    let apply = run(&t, ExecMode::Apply, &src).ok();
    assert_eq!(apply.stdout(), bools(true, 4));
    let again = run(&t, ExecMode::Apply, &src).ok();
    assert_eq!(again.stdout(), bools(false, 4));
    assert!(
        run(&t, ExecMode::Check, &src)
            .ok()
            .report
            .drift()
            .is_empty()
    );
    assert_eq!(
        report
            .changes
            .iter()
            .map(|c| c.summary.as_str())
            .collect::<Vec<_>>(),
        vec![
            "update /etc/group",
            "update /etc/passwd",
            "update /etc/group",
            "create directory /var/lib/gpuops (mode 0750)",
            "chown /var/lib/gpuops 0:0 -> 999:999",
            "chown /srv/data 0:0 -> 999:999",
            "update /etc/passwd",
            "update /etc/group",
        ]
    );
    assert_eq!(
        t.read("/etc/passwd"),
        "root:x:0:0:root:/root:/bin/bash\nubuntu:x:1000:1000::/home/ubuntu:/bin/bash\n\
         gpuops:!:999:999:GPU ops:/var/lib/gpuops:/usr/sbin/nologin\n\
         alice:!:2000:2000::/home/alice:/bin/sh\n"
    );
    assert_eq!(
        t.read("/etc/group"),
        "root:x:0:\nvideo:x:44:gpuops\nubuntu:x:1000:\ngpuops:!:999:\nalice:!:2000:\n"
    );
    let r = run(
        &t,
        ExecMode::Plan,
        "let i = user::info(\"gpuops\");\n\
         print(`${i.uid} ${i.gid} ${i.group} ${i.groups} ${i.home} ${i.shell} ${i.comment}`);\n\
         print(user::info(\"nobody\") == ());\n\
         print(user::exists(\"alice\"));\nprint(group::exists(\"gpuops\"));\n\
         print(user::remove(\"alice\"));\nprint(user::exists(\"alice\"));\n\
         print(group::remove(\"video\"));",
    )
    .ok();
    assert_eq!(
        r.stdout(),
        "999 999 gpuops [\"video\"] /var/lib/gpuops /usr/sbin/nologin GPU ops\ntrue\ntrue\ntrue\ntrue\nfalse\ntrue\n"
    );
    for (src, msg) in [
        (
            "user::ensure(\"gpuops\", #{system: \"yes\"})",
            "user::ensure: option system must be a bool, got string",
        ),
        (
            "user::ensure(\"gpuops\", #{uid: -1})",
            "user::ensure: option uid must be in 0..=4294967294, got -1",
        ),
        (
            "user::ensure(\"gpuops\", #{groups: [1]})",
            "user::ensure: option groups[0] must be a string, got i64",
        ),
        (
            "user::ensure(\"Gpu\")",
            "user::ensure: invalid user name: \"Gpu\" must match [a-z_][a-z0-9_-]*[$]? and have at most 32 characters",
        ),
        (
            "user::ensure(\"bob\", #{uid: 1000})",
            "user::ensure: invalid uid: 1000 is taken by user \"ubuntu\" (in /etc/passwd)",
        ),
        (
            "group::ensure(\"ops\", #{gid: 44})",
            "group::ensure: invalid gid: 44 is taken by group \"video\" (in /etc/group)",
        ),
        (
            "group::remove(\"gpuops\")",
            "group::remove: invalid group: cannot remove group \"gpuops\": it is the primary group of user \"gpuops\"",
        ),
        (
            "user::remove(\"gpuops\", #{home: true})",
            "user::remove: unknown option \"home\" (expected one of: remove_home)",
        ),
    ] {
        // Rhai puts a namespaced call at the function name, after `ns::`.
        let col = src.find("::").unwrap() + 3;
        let r = run(&t, ExecMode::Plan, src);
        assert_eq!(r.error(), format!("main.rhai:1:{col}: {msg}"), "{src}");
    }
}

/// A map of module options must render `key=value` words modprobe reads back as written: a
/// key that is empty or has `=` or blanks, or a value with blanks, is an error naming the
/// option (they became `options nouveau =1` or `options nouveau a=x y`, which modprobe
/// parses as other parameters). Nothing is written.
#[test]
fn kmod_options_map_rejects_keys_and_values_that_are_not_one_word() {
    let t = TestHost::new();
    for (src, want) in [
        (
            r#"kmod::options("nouveau", #{"": 1})"#,
            "main.rhai:1:7: kmod::options: option key \"\" must be a non-empty word without `=` or blanks",
        ),
        (
            r#"kmod::options("nouveau", #{"a b": 1})"#,
            "main.rhai:1:7: kmod::options: option key \"a b\" must be a non-empty word without `=` or blanks",
        ),
        (
            r#"kmod::options("nouveau", #{a: "x y"})"#,
            "main.rhai:1:7: kmod::options: option a: value \"x y\" must be one word without blanks",
        ),
    ] {
        let r = run(&t, ExecMode::Apply, src);
        assert_eq!(r.error(), want, "{src}");
    }
    assert!(!t.p("/etc/modprobe.d").exists());
}

/// The namespace files' effect samples, in reference order.
const EFFECT_SAMPLES: &[&[&str]] = &[
    super::global::tests::SAMPLES,
    super::fs::tests::SAMPLES,
    super::service::tests::SAMPLES,
    super::pkg::tests::SAMPLES,
    super::os::tests::SAMPLES,
    super::tuning::tests::SAMPLES,
    super::interrupt::tests::SAMPLES,
    super::config::tests::SAMPLES,
    super::mount::tests::SAMPLES,
    super::kmod::tests::SAMPLES,
    super::structured::tests::SAMPLES,
    super::users::tests::SAMPLES,
];

/// A root in which every effect sample runs and every mutating one changes something: stub
/// commands (`hello`, systemctl, apt, grub, initramfs, modprobe), files to edit and remove,
/// a held package, a mounted `/old` in fstab and the mount table, users and groups,
/// configMaps, node metadata and a secret.
fn effects_root() -> TestHost {
    let t = TestHost::new();
    t.systemctl_stub();
    apt_stubs(&t);
    t.stub("hello", "echo out-$1");
    t.stub("false", "exit 1");
    t.stub("apt-mark", r#"[ "$1" = showhold ] && echo held; :"#);
    t.stub("update-grub", ":");
    t.stub("update-initramfs", ":");
    t.stub("modprobe", ":");
    std::fs::write(t.p("/state/old.active"), "yes\n").unwrap();
    std::fs::write(t.p("/state/old.enabled"), "yes\n").unwrap();
    std::fs::write(t.p("/state/pkg-old"), "i\n").unwrap();
    std::fs::write(t.p("/state/pkg-held"), "i\n").unwrap();
    t.file("/etc/a.conf", "x=1\n");
    t.file(
        "/etc/blocks.conf",
        "# BEGIN skyhook old\no\n# END skyhook old\n",
    );
    t.file("/srv/tree/f", "f");
    t.file(
        "/etc/systemd/system/kubelet.service.d/10-x.conf",
        "[Service]\n",
    );
    t.file("/etc/apt/sources.list.d/gone.sources", "Types: deb\n");
    t.file("/proc/sys/vm/swappiness", "60\n");
    t.file("/proc/sys/kernel/osrelease", "6.1.0-test\n");
    t.file("/proc/cmdline", "ro quiet\n");
    t.file("/etc/hostname", "node-7\n");
    t.file(
        "/etc/default/grub.d/old.cfg",
        "GRUB_CMDLINE_LINUX_DEFAULT=\"q\"\n",
    );
    t.file("/etc/fstab", "/dev/sdc1 /old ext4 defaults 0 0\n");
    t.file(
        "/proc/1/mountinfo",
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n23 22 8:33 / /old rw - ext4 /dev/sdc1 rw\n",
    );
    t.file("/proc/modules", "");
    t.file("/etc/modprobe.d/floppy.conf", "blacklist floppy\n");
    t.file(
        "/etc/modprobe.d/blacklist-floppy.conf",
        "blacklist floppy\n",
    );
    t.file("/etc/modprobe.d/old.conf", "options old a=1\n");
    t.file("/etc/modules-load.d/old.conf", "old\n");
    t.file("/etc/c.toml", "[a]\nx = 1\n");
    t.file("/etc/d.json", "{\n  \"a\": 1\n}\n");
    t.file("/etc/u.conf", "[Service]\nUser=x\n");
    t.file(
        "/etc/passwd",
        "root:x:0:0:root:/root:/bin/bash\nubuntu:x:1000:1000::/home/ubuntu:/bin/bash\n",
    );
    t.file("/etc/group", "root:x:0:\nvideo:x:44:\nubuntu:x:1000:\n");
    let cm = t.dir.path().join("configmaps");
    std::fs::create_dir_all(&cm).unwrap();
    std::fs::write(cm.join("a"), "k=v\n").unwrap();
    std::fs::create_dir_all(t.dir.path().join("node-metadata")).unwrap();
    let sd = t.dir.path().join("secrets/db");
    std::fs::create_dir_all(&sd).unwrap();
    std::fs::write(sd.join("password"), "pw").unwrap();
    t
}

/// `ns::name` and the number of arguments of a sample call `ns::name(a, b, ...)`.
fn sample_call(sample: &str) -> (&str, usize) {
    let (name, args) = sample.split_once('(').unwrap();
    let (mut depth, mut quoted, mut n, mut any) = (0, false, 0, false);
    for c in args.strip_suffix(')').unwrap().chars() {
        any = true;
        match c {
            '"' => quoted = !quoted,
            _ if quoted => {}
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => n += 1,
            _ => {}
        }
    }
    (name, if any { n + 1 } else { 0 })
}

/// Every function's declared [`Effects`] is what it really submits: each sample call runs
/// alone in plan mode and the changes, actions and interrupts the report lists at its
/// position are of the declared kinds (none for a read; at least one for a function that
/// submits, whose sample changes the root), each a change or an action as its kind's
/// behaviour says. Every function of the reference has a sample.
#[test]
fn declared_effects_are_the_submitted_ones() {
    use crate::host::fetch_tests::{BODY, Reply, Server, sha};
    use crate::host::report::Item;
    let srv = Server::plain(|_| Reply::Body(BODY.to_vec()));
    let t = effects_root();
    let mut sampled = std::collections::BTreeSet::new();
    let mut problems: Vec<String> = Vec::new();
    for sample in EFFECT_SAMPLES.iter().copied().flatten() {
        let (name, arity) = sample_call(sample);
        let d = FUNCTIONS
            .iter()
            .find(|d| d.full_name() == name && d.params.len() == arity)
            .unwrap_or_else(|| panic!("{sample}: no function {name} with {arity} arguments"));
        sampled.insert((name, arity));
        let call = sample
            .replace("{URL}", &srv.url("/tool"))
            .replace("{SHA}", &sha(BODY));
        let mut o = opts_for(&t);
        o.allowed_secrets = vec!["db".into()];
        o.env.push(("TOKEN".into(), "tok".into()));
        let ran = run_with(&t, ExecMode::Plan, &format!("let r = {call};\n"), o);
        if let Some(e) = &ran.outcome.error {
            problems.push(format!("{sample}: {e}"));
            continue;
        }
        let report = &ran.report;
        let at_call = |p: &Option<crate::host::Position>| p.as_ref().is_some_and(|p| p.line == 1);
        let mut seen: Vec<(&str, Modes)> = Vec::new();
        seen.extend(
            report
                .changes
                .iter()
                .filter(|c| at_call(&c.position))
                .map(|c| (c.kind.as_str(), Modes::Change)),
        );
        seen.extend(
            report
                .actions
                .iter()
                .filter(|a| at_call(&a.position))
                .map(|a| (a.kind.as_str(), Modes::Action)),
        );
        seen.extend(report.items.iter().filter_map(|i| match i {
            Item::Interrupt { position, .. } if at_call(position) => {
                Some(("interrupt", Modes::Interrupt))
            }
            _ => None,
        }));
        let kinds = d.effects.kinds();
        if seen.is_empty() != kinds.is_empty() {
            problems.push(format!(
                "{sample}: declared {:?}, submitted {seen:?}",
                d.effects
            ));
        }
        for (kind, recorded) in seen {
            let Some(declared) = kinds.iter().find(|k| k.name() == kind) else {
                problems.push(format!(
                    "{sample}: submitted {kind}, declared {:?}",
                    d.effects
                ));
                continue;
            };
            let behaves = declared.modes();
            if behaves != recorded && behaves != Modes::Command {
                problems.push(format!(
                    "{sample}: {kind} recorded as {recorded:?}, its kind says {behaves:?}"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let missing: Vec<String> = FUNCTIONS
        .iter()
        .filter(|d| !d.script_layer && !sampled.contains(&(d.full_name().as_str(), d.params.len())))
        .map(|d| d.call())
        .collect();
    assert!(
        missing.is_empty(),
        "functions without an effect sample: {missing:?}"
    );
}
