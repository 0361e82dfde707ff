//! A failed `.rhai` step's files are put back ([`crate::host::effects::journal`]): after a
//! thrown error, a failed command, the script deadline and a cancel, the host tree is
//! byte-identical (content, mode, owner) to before, the deferred work is not run, and the
//! error lists what could not be undone. A journal left by a step that did not end is
//! undone by the next session.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{End, ScriptStep};
use crate::host::effects::context::{Context, HostOptions};
use crate::host::effects::effect::Effect;
use crate::host::effects::executors::Executor;
use crate::host::effects::executors::apply::Apply;
use crate::host::root::HostRoot;
use crate::host::testutil::{TestHost, tree};
use crate::process::{Cancel, CancelReason};
use crate::script::{
    CaptureOutput, CompiledScript, ModuleStore, ScriptEngine, ScriptOutput, compile_source,
};
use crate::step::StepSpec;
use crate::step::invocation::StepResult;

/// Ten kinds of file change: writes (new and existing), a line edit, a systemd drop-in,
/// a directory, a removal, mode and owner, a live sysctl value, a user (passwd, shadow,
/// group, gshadow), an fstab line, a tree removal, a blacklist (initramfs), a grub drop-in,
/// a symlink; then an action that cannot be undone.
const CHANGES: &str = r#"
fs::write("/etc/new.conf", "new\n");
fs::write("/etc/existing", "changed\n", #{mode: 0o600});
fs::ensure_line("/etc/edit.conf", "b=2");
service::drop_in("containerd", "10-x.conf", "[Service]\nX=1\n");
fs::mkdir("/opt/newdir/sub", 0o700);
fs::remove("/etc/gone");
fs::chmod("/etc/modeme", 0o600);
fs::chown("/etc/modeme", 1, 1);
sysctl::set("vm.swappiness", "10");
user::ensure("gpuops", #{system: true, create_home: false});
mount::ensure("/data", #{source: "UUID=abc", fstype: "ext4", state: "present"});
fs::remove_all("/opt/tree");
kmod::blacklist("nouveau");
grub::set_cmdline("99-x", ["hugepages=4"]);
fs::symlink("/etc/new.conf", "/etc/link");
service::restart("containerd");
"#;

/// A host with files for [`CHANGES`] to change and a systemctl stub (other tools are
/// missing: a deferred update-grub or update-initramfs that ran would fail the step).
fn host() -> TestHost {
    let t = TestHost::new();
    t.systemctl_stub();
    t.file("/etc/existing", "old\n");
    std::fs::set_permissions(
        t.p("/etc/existing"),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .unwrap();
    std::os::unix::fs::chown(t.p("/etc/existing"), Some(7), Some(8)).unwrap();
    t.file("/etc/edit.conf", "a=1\n");
    t.file("/etc/gone", "bye\n");
    t.file("/etc/modeme", "m\n");
    t.file("/proc/sys/vm/swappiness", "60\n");
    t.file("/proc/1/mountinfo", "");
    user_db(&t);
    t.file("/etc/fstab", "# fstab\n/dev/sda1 / ext4 defaults 0 1\n");
    t.file("/etc/os-release", "ID=ubuntu\nID_LIKE=debian\n");
    // The agent's state directory, where the path locks live.
    std::fs::create_dir_all(t.p("/var/lib/skyhook")).unwrap();
    t.file("/opt/tree/a", "A\n");
    t.file("/opt/tree/b/c", "C\n");
    std::os::unix::fs::symlink("a", t.p("/opt/tree/l")).unwrap();
    t
}

/// A user database on `t` with root alone: passwd, shadow, group, gshadow.
fn user_db(t: &TestHost) {
    t.file("/etc/passwd", "root:x:0:0:root:/root:/bin/bash\n");
    t.file("/etc/shadow", "root:*:19000:0:99999:7:::\n");
    t.file("/etc/group", "root:x:0:\n");
    t.file("/etc/gshadow", "root:*::\n");
}

/// The tree without what commands change and the lock files (skyhook's path locks, the
/// user database's `/etc/.pwd.lock`), which are kept on purpose and are no file effect.
fn snapshot(t: &TestHost) -> BTreeMap<PathBuf, String> {
    let mut m = tree(&t.root);
    m.retain(|p, _| {
        !(p.starts_with("stub.log")
            || p.starts_with("state")
            || p.starts_with("var/lib/skyhook/.locks")
            || p.starts_with("etc/.pwd.lock"))
    });
    m
}

/// Assert `after` equals `before`, naming the paths that differ.
fn assert_same(before: &BTreeMap<PathBuf, String>, after: &BTreeMap<PathBuf, String>) {
    let short = |v: Option<&String>| v.map(|s| s.chars().take(120).collect::<String>());
    let diff: Vec<String> = before
        .keys()
        .chain(after.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| {
            format!(
                "{}: {:?} -> {:?}",
                k.display(),
                short(before.get(k)),
                short(after.get(k))
            )
        })
        .collect();
    assert!(diff.is_empty(), "{diff:#?}");
}

/// Run `source` as an apply step on `t` with `spec`; `hook` sees each print.
fn run(t: &TestHost, source: &str, spec: &StepSpec, hook: Option<Hook>) -> (StepResult, String) {
    let engine = ScriptEngine::default();
    let script = compile(&engine, t, source);
    run_step(&engine, &script, spec, t, hook)
}

/// Run the compiled `script` as the step `spec` on `t`; `hook` sees each print. Returns the
/// result and the step's stderr.
fn run_step(
    engine: &ScriptEngine,
    script: &CompiledScript,
    spec: &StepSpec,
    t: &TestHost,
    hook: Option<Hook>,
) -> (StepResult, String) {
    let api = spec.session(HostRoot::open(&t.root).unwrap());
    let out = Arc::new(Hooked {
        inner: CaptureOutput::new(),
        hook,
    });
    let r = ScriptStep {
        engine,
        script,
        spec,
        api: &api,
        end: End::Session,
        list_drift: false,
    }
    .run(out.clone());
    (r, String::from_utf8(out.inner.stderr_bytes()).unwrap())
}

/// What the output does with each print besides keeping it.
type Hook = Box<dyn Fn(&[u8]) + Send + Sync>;

struct Hooked {
    inner: CaptureOutput,
    hook: Option<Hook>,
}

impl ScriptOutput for Hooked {
    fn stdout(&self, bytes: &[u8]) {
        if let Some(h) = &self.hook {
            h(bytes);
        }
        self.inner.stdout(bytes);
    }
    fn stderr(&self, bytes: &[u8]) {
        self.inner.stderr(bytes);
    }
}

fn spec() -> StepSpec {
    builder().build()
}

/// An apply step `tune.rhai` of package `demo`.
fn builder() -> crate::step::StepBuilder {
    StepSpec::builder("apply", true)
        .package("demo", "", None)
        .step("tune.rhai", Vec::new())
}

/// After a failed step: the tree as before (no deferred record either); only what ran
/// mid-step ran (the restart, and the daemon-reload a `service::` call runs first), and
/// the error lists exactly those.
fn assert_undone(t: &TestHost, before: &BTreeMap<PathBuf, String>, r: &StepResult) {
    assert!(!r.ok);
    assert_same(before, &snapshot(t));
    assert_eq!(
        t.calls(),
        vec!["systemctl daemon-reload", "systemctl restart containerd"]
    );
    let error = r.error.as_deref().unwrap();
    assert!(
        error.ends_with(
            "\nnot undone: systemctl daemon-reload\nnot undone: systemctl restart containerd"
        ),
        "{error}"
    );
    assert_eq!(error.matches("not undone:").count(), 2, "{error}");
}

#[test]
fn a_thrown_error_after_ten_file_changes_leaves_the_host_as_it_was() {
    let t = host();
    let before = snapshot(&t);
    let (r, stderr) = run(&t, &format!("{CHANGES}throw \"boom\";\n"), &spec(), None);
    assert!(r.error.as_deref().unwrap().starts_with("u.rhai:18:1: boom"));
    // The operator's log (the step's stderr) has the lines, after the error.
    assert!(
        stderr.ends_with(
            "not undone: systemctl daemon-reload\nnot undone: systemctl restart containerd\n"
        ),
        "{stderr}"
    );
    // The step changed 17 things (the drop-in's, grub's and initramfs's deferred records
    // included) and its report still lists them.
    assert!(r.report.changes.len() >= 15, "{:?}", r.report.changes);
    assert_undone(&t, &before, &r);
    assert!(!t.p("/var/lib/skyhook/.undo").exists());
}

#[test]
fn a_failed_command_is_undone_the_same_way() {
    let t = host();
    let before = snapshot(&t);
    let src = format!("{CHANGES}run([\"/bin/sh\", \"-c\", \"exit 3\"], #{{check: true}});\n");
    let (r, _) = run(&t, &src, &spec(), None);
    let error = r.error.as_deref().unwrap();
    assert!(error.contains("exit code 3"), "{error}");
    assert_undone(&t, &before, &r);
}

#[test]
fn the_script_deadline_is_undone_the_same_way() {
    let t = host();
    let before = snapshot(&t);
    // Long enough for the changes on a loaded machine; the loop then runs into it.
    let spec = builder().script_timeout(Duration::from_secs(2)).build();
    let src = format!("{CHANGES}loop {{ fs::exists(\"/etc\"); }}\n");
    let (r, _) = run(&t, &src, &spec, None);
    let error = r.error.as_deref().unwrap();
    assert!(error.contains("step deadline exceeded"), "{error}");
    assert_undone(&t, &before, &r);
}

#[test]
fn a_cancel_is_undone_the_same_way() {
    let t = host();
    let before = snapshot(&t);
    let cancel = Cancel::new();
    let spec = builder().cancel(cancel.clone()).build();
    let hook = Box::new(move |b: &[u8]| {
        if b.starts_with(b"cancel") {
            cancel.abort(CancelReason::Signal("SIGTERM"));
        }
    });
    let (r, _) = run(
        &t,
        &format!("{CHANGES}print(\"cancel\");\nloop {{ fs::exists(\"/etc\"); }}\n"),
        &spec,
        Some(hook),
    );
    let error = r.error.as_deref().unwrap();
    assert!(error.contains("step cancelled"), "{error}");
    assert_undone(&t, &before, &r);
}

#[test]
fn a_successful_step_keeps_its_changes_runs_its_deferred_work_and_drops_its_journal() {
    let t = host();
    t.stub("update-grub", "");
    t.stub("update-initramfs", "");
    let (r, _) = run(&t, CHANGES, &spec(), None);
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(t.read("/etc/existing"), "changed\n");
    assert_eq!(t.read("/proc/sys/vm/swappiness"), "10\n");
    assert!(
        t.read("/etc/fstab")
            .contains("UUID=abc /data ext4 defaults 0 0")
    );
    assert!(!t.p("/opt/tree").exists());
    assert_eq!(
        t.calls(),
        vec![
            "systemctl daemon-reload",
            "systemctl restart containerd",
            "update-grub ",
            "update-initramfs -u"
        ]
    );
    assert!(!t.p("/var/lib/skyhook/.undo").exists());
}

#[test]
fn extended_attributes_and_an_earlier_deferred_record_are_put_back() {
    let t = host();
    let f = t.p("/etc/existing");
    let set = std::process::Command::new("setfattr")
        .args(["-n", "user.tag", "-v", "keep"])
        .arg(&f)
        .status();
    let xattrs = matches!(set, Ok(s) if s.success());
    // A daemon-reload left due by an earlier session stays due.
    t.file(
        "/var/lib/skyhook/.deferred/daemon-reload.json",
        "{\"action\":\"daemon_reload\"}\n",
    );
    let before = snapshot(&t);
    let (r, _) = run(
        &t,
        "fs::write(\"/etc/existing\", \"x\\n\");\nservice::drop_in(\"a\", \"b.conf\", \"[Service]\\n\");\nthrow \"boom\";\n",
        &spec(),
        None,
    );
    assert!(!r.ok);
    assert_same(&before, &snapshot(&t));
    assert!(t.calls().is_empty(), "{:?}", t.calls());
    if xattrs {
        let out = std::process::Command::new("getfattr")
            .args(["--only-values", "-n", "user.tag"])
            .arg(&f)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "keep");
    }
}

/// The effect context of the host root of `t`, default options.
fn context(t: &TestHost) -> Context {
    Context::new(HostRoot::open(&t.root).unwrap(), HostOptions::default())
}

/// The write of `content` to `path`, mode and owner left as they are.
fn write_effect(path: &str, content: &str) -> Effect {
    Effect::WriteFile {
        path: path.into(),
        content: content.to_string().into(),
        mode: None,
        uid: None,
        gid: None,
    }
}

#[test]
fn a_journal_left_by_a_step_that_did_not_end_is_undone_by_the_next_session() {
    let t = host();
    let before = snapshot(&t);
    {
        // A step whose process died: effects journaled and performed, the journal neither
        // committed nor undone (dropping it releases its lock, as the process's death
        // would).
        let cx = context(&t);
        let mut apply = Apply::journaled("demo-tune.rhai");
        for e in [
            write_effect("/etc/existing", "k\n"),
            Effect::RemoveAll {
                path: "/opt/tree".into(),
            },
            Effect::Mkdir {
                path: "/a/b".into(),
                mode: 0o700,
            },
            Effect::Sysctl {
                key: "vm.swappiness".into(),
                value: "1".into(),
            },
        ] {
            apply.execute(&cx, &e).unwrap();
        }
        assert_eq!(t.read("/etc/existing"), "k\n");
    }
    assert_ne!(snapshot(&t), before);
    let (r, stderr) = run(&t, "print(\"hello\");\n", &spec(), None);
    assert!(r.ok, "{:?}", r.error);
    // The file, the tree (moved aside: one record), /a and /a/b (absent) and the sysctl
    // value.
    assert!(
        stderr.starts_with("undid 5 file change record(s) of demo-tune.rhai."),
        "{stderr}"
    );
    assert_same(&before, &snapshot(&t));
}

#[test]
fn a_live_steps_journal_is_left_alone_by_another_sessions_recovery() {
    let t = host();
    let cx = context(&t);
    let mut apply = Apply::journaled("demo-live");
    apply
        .execute(&cx, &write_effect("/etc/existing", "live\n"))
        .unwrap();
    let (r, stderr) = run(&t, "print(\"hello\");\n", &spec(), None);
    assert!(r.ok);
    assert!(stderr.is_empty(), "{stderr}");
    assert_eq!(t.read("/etc/existing"), "live\n");
    // Its own failure still puts the file back.
    assert_eq!(apply.undo(&cx).unwrap(), Vec::<String>::new());
    assert_eq!(t.read("/etc/existing"), "old\n");
}

#[test]
fn plan_and_check_sessions_journal_nothing() {
    let t = host();
    let before = snapshot(&t);
    let spec = StepSpec::builder("apply", false)
        .package("demo", "", None)
        .step("tune.rhai", Vec::new())
        .build();
    let (r, _) = run(&t, &format!("{CHANGES}throw \"boom\";\n"), &spec, None);
    assert!(!r.ok);
    assert_same(&before, &snapshot(&t));
    assert!(!t.p("/var/lib/skyhook/.undo").exists());
}

/// A host root on a tmpfs when `/dev/shm` is one (the loops below make thousands of
/// fsyncs), else in the temp dir.
fn shm_host() -> TestHost {
    let shm = std::path::Path::new("/dev/shm");
    let dir = match shm.is_dir() {
        true => tempfile::tempdir_in(shm).unwrap(),
        false => tempfile::tempdir().unwrap(),
    };
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("var/lib/skyhook")).unwrap();
    TestHost { dir, root }
}

/// Run the compiled `script` as an apply step of package `package` on `t`.
fn run_compiled(
    engine: &ScriptEngine,
    script: &CompiledScript,
    t: &TestHost,
    package: &str,
    hook: Option<Hook>,
) -> (StepResult, String) {
    let spec = builder().package(package, "", None).build();
    run_step(engine, script, &spec, t, hook)
}

/// `src` compiled as `u.rhai`, its modules under `t`'s temp dir.
fn compile(engine: &ScriptEngine, t: &TestHost, src: &str) -> CompiledScript {
    compile_source(
        engine,
        "u.rhai",
        src,
        Arc::new(ModuleStore::new(t.dir.path())),
    )
    .unwrap()
}

/// Step `a` of package `pkga` (which prints `edited` after its edits are on disk, then
/// fails) and step `b` of package `pkgb`, compiled once for any number of rounds.
struct TwoSteps {
    engine: ScriptEngine,
    a: CompiledScript,
    b: CompiledScript,
}

impl TwoSteps {
    fn compile(t: &TestHost, a: &str, b: &str) -> TwoSteps {
        let engine = ScriptEngine::default();
        let (a, b) = (compile(&engine, t, a), compile(&engine, t, b));
        TwoSteps { engine, a, b }
    }

    /// See [`a_fails_around_b`].
    fn run(&self, t: &TestHost, race: bool) -> (StepResult, StepResult) {
        a_fails_around_b(&self.engine, &self.a, &self.b, t, race)
    }
}

/// Run step `a` (which prints `edited` after its edits are on disk, then fails) and step
/// `b` of another package on `t`: `b` starts at once, in parallel, when `race`, else once
/// `a` printed; `a` fails only after `b` ended. Returns both results.
fn a_fails_around_b(
    engine: &ScriptEngine,
    a: &CompiledScript,
    b: &CompiledScript,
    t: &TestHost,
    race: bool,
) -> (StepResult, StepResult) {
    use std::sync::mpsc;
    let (edited, a_edited) = mpsc::channel::<()>();
    let (b_done, wait_b) = mpsc::channel::<()>();
    let wait_b = std::sync::Mutex::new(wait_b);
    let hook: Hook = Box::new(move |bytes: &[u8]| {
        if bytes.starts_with(b"edited") {
            let _ = edited.send(());
            let _ = wait_b.lock().unwrap().recv_timeout(Duration::from_secs(30));
        }
    });
    std::thread::scope(|s| {
        let ha = s.spawn(|| run_compiled(engine, a, t, "pkga", Some(hook)).0);
        if !race {
            a_edited.recv_timeout(Duration::from_secs(30)).unwrap();
        }
        let rb = run_compiled(engine, b, t, "pkgb", None).0;
        let _ = b_done.send(());
        (ha.join().unwrap(), rb)
    })
}

/// Principle 1: package A adds a line to a shared file and fails; package B adds its own
/// line meanwhile and succeeds. A's undo takes out A's line only: B's line always survives
/// (1,000 rounds, every other one with B's edit forced between A's write and A's undo, the
/// others racing). The undo used to write A's whole old file back, losing B's line.
#[test]
fn a_failed_steps_undo_keeps_another_packages_line_in_a_shared_file() {
    let t = shm_host();
    let steps = TwoSteps::compile(
        &t,
        "fs::ensure_line(\"/etc/shared.conf\", \"a=1\");\nfs::exists(\"/etc\");\nprint(\"edited\");\nthrow \"boom\";\n",
        "fs::ensure_line(\"/etc/shared.conf\", \"b=1\");\n",
    );
    let started = std::time::Instant::now();
    for round in 0..1000 {
        t.file("/etc/shared.conf", "base=0\n");
        let (ra, rb) = steps.run(&t, round % 2 == 1);
        assert!(rb.ok, "round {round}: {:?}", rb.error);
        assert!(!ra.ok);
        let now = t.read("/etc/shared.conf");
        assert_eq!(now, "base=0\nb=1\n", "round {round}: {:?}", ra.error);
        let error = ra.error.as_deref().unwrap();
        assert!(!error.contains("not undone"), "round {round}: {error}");
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "1,000 rounds took more than 10 minutes (round {round})"
        );
    }
    assert!(!t.p("/var/lib/skyhook/.undo").exists());
}

/// Principle 1 for a whole-file write (not a line edit) and for the user database: A
/// writes the shared file whole and adds a user, B adds a line and a user of its own, A
/// fails. B's line and user survive; A's whole-file write is left, said in A's error.
#[test]
fn a_failed_steps_undo_leaves_a_file_another_writer_changed_and_says_so() {
    let t = shm_host();
    user_db(&t);
    let steps = TwoSteps::compile(
        &t,
        "fs::write(\"/etc/shared.conf\", \"whole=a\\n\");\nuser::ensure(\"alice\", #{system: true, create_home: false});\nprint(\"edited\");\nthrow \"boom\";\n",
        "fs::ensure_line(\"/etc/shared.conf\", \"b=1\");\nuser::ensure(\"bob\", #{system: true, create_home: false});\n",
    );
    for round in 0..20 {
        t.file("/etc/shared.conf", "base=0\n");
        t.file("/etc/passwd", "root:x:0:0:root:/root:/bin/bash\n");
        let (ra, rb) = steps.run(&t, false);
        assert!(rb.ok, "round {round}: {:?}", rb.error);
        assert_eq!(
            t.read("/etc/shared.conf"),
            "whole=a\nb=1\n",
            "round {round}"
        );
        let passwd = t.read("/etc/passwd");
        assert!(passwd.contains("\nbob:"), "round {round}: {passwd}");
        assert!(!passwd.contains("alice"), "round {round}: {passwd}");
        let error = ra.error.as_deref().unwrap();
        assert!(
            error.contains(
                "not undone: /etc/shared.conf changed by another writer since this step wrote it"
            ),
            "round {round}: {error}"
        );
    }
}

/// Principle 2: a journal write that fails half-way (a full disk) fails the step although
/// the script caught it: later calls fail, the step fails with the journal's error, and the
/// undo restores what the step changed and nothing else. The replay used to read across
/// the partial record: the file written after the caught failure stayed changed, silently.
#[test]
fn a_caught_journal_failure_fails_the_step_and_undoes_only_whole_records() {
    let t = shm_host();
    t.file("/etc/a", "A0\n");
    t.file("/etc/b", &"B0\n".repeat(2000));
    t.file("/etc/c", "C0\n");
    let before = snapshot(&t);
    // Record 0 is /etc/a's; record 1 (/etc/b's) stops after 200 bytes, half-way through
    // its content.
    crate::host::effects::journal::fail_point::set("diskfull-tune.rhai", 1, 200);
    let engine = ScriptEngine::default();
    let script = compile(
        &engine,
        &t,
        "fs::write(\"/etc/a\", \"A1\\n\");\ntry { fs::write(\"/etc/b\", \"B1\\n\"); } catch (e) { print(`caught: ${e}`); }\nfs::write(\"/etc/c\", \"C1\\n\");\nthrow \"boom\";\n",
    );
    let (r, _) = run_compiled(&engine, &script, &t, "diskfull", None);
    assert!(!r.ok);
    assert_same(&before, &snapshot(&t));
    let error = r.error.as_deref().unwrap();
    assert!(error.contains("undo journal"), "{error}");
    assert!(error.contains("No space left on device"), "{error}");
}

/// A tmpfs named `source` of `kib` KiB mounted on `path`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// None, with a `SKIPPED` line, where no tmpfs can be mounted (not root).
    fn mount(path: &Path, kib: u32, source: &str) -> Option<Tmpfs> {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), source])
            .arg(path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("SKIPPED: cannot mount a tmpfs (not root?)");
            return None;
        }
        Some(Tmpfs(path.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A host root on its own small tmpfs (`kib` KiB), unmounted on drop (before the host's
/// temp dir goes: fields drop in order).
struct SmallFs {
    _mount: Tmpfs,
    t: TestHost,
}

impl SmallFs {
    fn new(kib: u32) -> Option<SmallFs> {
        let t = TestHost::new();
        let mount = Tmpfs::mount(&t.root, kib, "skyhook-small")?;
        std::fs::create_dir_all(t.p("/var/lib/skyhook")).unwrap();
        Some(SmallFs { _mount: mount, t })
    }
}

/// Run `source` as a step of package `cleanup` on `t`.
fn run_cleanup(t: &TestHost, source: &str) -> StepResult {
    let engine = ScriptEngine::default();
    run_compiled(&engine, &compile(&engine, t, source), t, "cleanup", None).0
}

/// Run `source`, which removes things and then throws `boom` at line `line`, as a step of
/// package `cleanup` on `t`: it fails there and lists nothing not undone.
fn removal_fails_undone(t: &TestHost, source: &str, line: u32) {
    let r = run_cleanup(t, source);
    let error = r.error.as_deref().unwrap();
    assert!(
        error.starts_with(&format!("u.rhai:{line}:1: boom")),
        "{error}"
    );
    assert!(!error.contains("not undone"), "{error}");
}

/// Run `source` as a step of package `cleanup` on `t`: it succeeds.
fn removal_succeeds(t: &TestHost, source: &str) {
    let r = run_cleanup(t, source);
    assert!(r.ok, "{:?}", r.error);
}

/// Fault 5: a cleanup step frees a full disk. On an 8 MiB filesystem with a 5 MiB file and
/// under 1 MiB free, a step removing the file succeeds (the journal moves it aside, it
/// copies nothing), and a step that removes it and then fails gets it back byte for byte.
/// The journal used to copy the file first, so the removal failed: no space left.
#[test]
fn a_step_removes_a_big_file_from_a_full_disk_and_a_failed_one_puts_it_back() {
    let Some(fs) = SmallFs::new(8 * 1024) else {
        return;
    };
    let t = &fs.t;
    let big: Vec<u8> = (0..5 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    std::fs::create_dir_all(t.p("/var/log")).unwrap();
    std::fs::write(t.p("/var/log/big"), &big).unwrap();
    // Fill what is left but about 512 KiB.
    let free = nix::sys::statvfs::statvfs(&t.root).unwrap();
    let left = free.blocks_available() * free.fragment_size();
    std::fs::write(
        t.p("/fill"),
        vec![1u8; (left as usize).saturating_sub(512 * 1024)],
    )
    .unwrap();
    removal_fails_undone(t, "fs::remove(\"/var/log/big\");\nthrow \"boom\";\n", 2);
    assert!(
        std::fs::read(t.p("/var/log/big")).unwrap() == big,
        "not restored"
    );
    removal_succeeds(t, "fs::remove(\"/var/log/big\");\n");
    assert!(!t.p("/var/log/big").exists());
    assert!(!t.p("/var/lib/skyhook/.undo").exists());
}

/// Fault 6: no size limit on removal. A 65 MiB file (sparse) is removed by a step, and put
/// back by a failed one; the removal used to fail in every mode (the 64 MiB read cap).
#[test]
fn a_file_over_64_mib_is_removed_and_put_back() {
    let t = shm_host();
    let f = std::fs::File::create(t.p("/big")).unwrap();
    f.set_len(65 * 1024 * 1024).unwrap();
    drop(f);
    removal_fails_undone(&t, "fs::remove(\"/big\");\nthrow \"boom\";\n", 2);
    assert_eq!(
        std::fs::metadata(t.p("/big")).unwrap().len(),
        65 * 1024 * 1024
    );
    removal_succeeds(&t, "fs::remove(\"/big\");\n");
    assert!(!t.p("/big").exists());
}

/// Fault 7: a stale socket and a FIFO are removed by a step (they used to fail the call
/// after START: "its removal could not be undone"), and a failed step puts them back as
/// what they were (moved aside: the same inodes).
#[test]
fn a_stale_socket_and_a_fifo_are_removed_and_put_back() {
    use std::os::unix::fs::FileTypeExt;
    let t = shm_host();
    std::fs::create_dir_all(t.p("/run/app")).unwrap();
    drop(std::os::unix::net::UnixListener::bind(t.p("/run/app/sock")).unwrap());
    nix::unistd::mkfifo(
        &t.p("/run/app/fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o640),
    )
    .unwrap();
    let removals = "fs::remove(\"/run/app/sock\");\nfs::remove(\"/run/app/fifo\");\n";
    removal_fails_undone(&t, &format!("{removals}throw \"boom\";\n"), 3);
    let ft = |p: &str| std::fs::symlink_metadata(t.p(p)).unwrap().file_type();
    assert!(ft("/run/app/sock").is_socket());
    assert!(ft("/run/app/fifo").is_fifo());
    removal_succeeds(&t, removals);
    assert!(!t.p("/run/app/sock").exists() && !t.p("/run/app/fifo").exists());
}

/// Fault 3: the journals of two killed steps are undone newest first, whatever their
/// names' order. The older step (named to sort first) wrote `one`, the newer `two` over
/// it; undoing the older first put `one` back last. Now the file ends as it was.
#[test]
fn journals_of_two_killed_steps_are_undone_newest_first() {
    let t = shm_host();
    t.file("/etc/f", "orig\n");
    let cx = context(&t);
    let write = |label: &str, content: &str| {
        // A step killed after its write: journal neither committed nor undone.
        let mut apply = Apply::journaled(label);
        apply
            .execute(&cx, &write_effect("/etc/f", content))
            .unwrap();
    };
    write("a-older", "one\n");
    write("b-newer", "two\n");
    let lines = crate::host::effects::journal::recover(&cx.root).unwrap();
    assert_eq!(t.read("/etc/f"), "orig\n", "{lines:?}");
    assert!(lines[0].contains("of b-newer."), "{lines:?}");
    assert!(lines[1].contains("of a-older."), "{lines:?}");
}

/// Point 9: no lock file is left behind by a run, succeeded or failed: the path locks'
/// `/var/lib/skyhook/.locks/*` (unlinked by their holder) and `/etc/.pwd.lock` (unlinked
/// when the user database's lock made it).
#[test]
fn no_lock_file_is_left_behind() {
    let t = host();
    let engine = ScriptEngine::default();
    let ok = compile(
        &engine,
        &t,
        "fs::ensure_line(\"/etc/edit.conf\", \"b=2\");\nuser::ensure(\"gpuops\", #{system: true, create_home: false});\nfs::write(\"/etc/x\", \"x\\n\");\n",
    );
    let failing = compile(
        &engine,
        &t,
        "fs::ensure_line(\"/etc/edit.conf\", \"c=3\");\nuser::ensure(\"other\", #{system: true, create_home: false});\nthrow \"boom\";\n",
    );
    for script in [&ok, &failing] {
        run_compiled(&engine, script, &t, "locks", None);
        let left: Vec<_> = std::fs::read_dir(t.p("/var/lib/skyhook/.locks"))
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert_eq!(left, Vec::<std::ffi::OsString>::new());
        assert!(!t.p("/etc/.pwd.lock").exists());
    }
    assert!(t.read("/etc/passwd").contains("gpuops:"));
    assert!(!t.read("/etc/passwd").contains("other:"));
}

/// Attack on principle 1: package A's write creates a directory (`/etc/new.d`, recorded
/// absent: nothing beneath it is journaled); package B writes its own file into that
/// directory and succeeds; A fails. A's undo removed the directory it created with
/// everything in it, B's file too: each entry the step makes beneath a created directory
/// is now recorded (absent), and the directory is removed only if empty after them.
#[test]
fn a_failed_steps_undo_keeps_another_packages_file_in_a_directory_it_created() {
    let t = shm_host();
    let steps = TwoSteps::compile(
        &t,
        "fs::write(\"/etc/new.d/a.conf\", \"a=1\\n\");\nprint(\"edited\");\nthrow \"boom\";\n",
        "fs::write(\"/etc/new.d/b.conf\", \"b=1\\n\");\n",
    );
    let (ra, rb) = steps.run(&t, false);
    assert!(rb.ok, "{:?}", rb.error);
    assert!(!ra.ok);
    assert!(!t.p("/etc/new.d/a.conf").exists());
    assert_eq!(
        std::fs::read_to_string(t.p("/etc/new.d/b.conf"))
            .ok()
            .as_deref(),
        Some("b=1\n"),
        "A's undo removed B's file: {:?}",
        ra.error
    );
    let e = ra.error.as_deref().unwrap();
    assert!(
        e.contains("not undone: /etc/new.d holds entries this step did not make"),
        "{e}"
    );
}

/// Attack on principle 4 (held): a removed file with a second hard link, a removed tree
/// holding a FIFO, a symlink and a file. Moved aside and renamed back, they are the same
/// inodes: the hard link still shares the file, the FIFO is still a FIFO.
#[test]
fn a_removed_hard_linked_file_and_tree_come_back_as_the_same_inodes() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let t = shm_host();
    t.file("/srv/f", "linked\n");
    std::fs::hard_link(t.p("/srv/f"), t.p("/srv/f2")).unwrap();
    t.file("/srv/tree/a", "A\n");
    std::os::unix::fs::symlink("a", t.p("/srv/tree/l")).unwrap();
    std::fs::create_dir_all(t.p("/srv/tree/sub")).unwrap();
    nix::unistd::mkfifo(
        &t.p("/srv/tree/sub/p"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let ino = |p: &str| std::fs::symlink_metadata(t.p(p)).unwrap().ino();
    let (f, tree, fifo) = (ino("/srv/f"), ino("/srv/tree"), ino("/srv/tree/sub/p"));
    removal_fails_undone(
        &t,
        "fs::remove(\"/srv/f\");\nfs::remove_all(\"/srv/tree\");\nthrow \"boom\";\n",
        3,
    );
    assert_eq!((ino("/srv/f"), ino("/srv/f2")), (f, f));
    assert_eq!(std::fs::metadata(t.p("/srv/f")).unwrap().nlink(), 2);
    assert_eq!((ino("/srv/tree"), ino("/srv/tree/sub/p")), (tree, fifo));
    assert!(
        std::fs::symlink_metadata(t.p("/srv/tree/sub/p"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert_eq!(t.read("/srv/tree/a"), "A\n");
    assert!(!t.p("/var/lib/skyhook/.undo").exists());
}

/// Attack on principle 4 across filesystems (`EXDEV`): a file, a tree with a FIFO and a
/// file on a tmpfs mounted inside the host root (not the filesystem of
/// `/var/lib/skyhook`) are removed by a step that then fails: the content is journaled
/// instead of moved, and the undo makes them again (the FIFO as a FIFO). Run it in a
/// private mount namespace (`unshare -m`) where possible; skipped without a tmpfs.
#[test]
fn a_removal_on_another_filesystem_is_put_back() {
    use std::os::unix::fs::FileTypeExt;
    let t = shm_host();
    let mnt = t.p("/mnt/other");
    std::fs::create_dir_all(&mnt).unwrap();
    let Some(_mount) = Tmpfs::mount(&mnt, 1024, "skyhook-other") else {
        return;
    };
    t.file("/mnt/other/f", "far\n");
    t.file("/mnt/other/tree/a", "A\n");
    nix::unistd::mkfifo(
        &t.p("/mnt/other/tree/p"),
        nix::sys::stat::Mode::from_bits_truncate(0o640),
    )
    .unwrap();
    removal_fails_undone(
        &t,
        "fs::remove(\"/mnt/other/f\");\nfs::remove_all(\"/mnt/other/tree\");\nthrow \"boom\";\n",
        3,
    );
    assert_eq!(t.read("/mnt/other/f"), "far\n");
    assert_eq!(t.read("/mnt/other/tree/a"), "A\n");
    let p = std::fs::symlink_metadata(t.p("/mnt/other/tree/p")).unwrap();
    assert!(p.file_type().is_fifo());
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&p.permissions()) & 0o7777,
        0o640
    );
    assert!(!t.p("/var/lib/skyhook/.undo").exists());
}
