//! The host API through Rhai across namespaces: the harness the areas' script tests
//! use (a run over a test root in one mode, [`all_modes`]), errors, whole-file read limits,
//! redaction, finishing, the table against the registration and the bindings' option keys,
//! the declared effects against the submitted ones, and the generated docs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::host::effects::report::ExecMode;
use crate::host::root::HostRoot;
use crate::host::testutil::{TestHost, tree};
use crate::host::{Host, HostOptions, Report};
use crate::script::{CaptureOutput, ModuleStore, ScriptEngine, StepContext, compile_source};
use crate::step::{ScriptOutcome, ScriptRunOptions, run_script_with};

/// One finished run.
pub(crate) struct Ran {
    pub(crate) outcome: ScriptOutcome,
    pub(crate) report: Report,
    pub(crate) out: Arc<CaptureOutput>,
}

impl Ran {
    pub(crate) fn stdout(&self) -> String {
        String::from_utf8(self.out.stdout_bytes()).unwrap()
    }
    pub(crate) fn stderr(&self) -> String {
        String::from_utf8(self.out.stderr_bytes()).unwrap()
    }
    pub(crate) fn error(&self) -> String {
        self.outcome
            .error
            .as_ref()
            .expect("the run should have failed")
            .to_string()
    }
    pub(crate) fn ok(self) -> Self {
        assert!(
            self.outcome.error.is_none(),
            "script failed: {:?}\n{}",
            self.outcome.error,
            self.stderr()
        );
        self
    }
}

pub(crate) fn opts_for(t: &TestHost) -> HostOptions {
    HostOptions {
        configmaps_dir: Some(t.dir.path().join("configmaps")),
        node_metadata_dir: Some(t.dir.path().join("node-metadata")),
        secrets_dir: t.dir.path().join("secrets"),
        ..HostOptions::default()
    }
}

pub(crate) fn run_with(t: &TestHost, mode: ExecMode, src: &str, o: HostOptions) -> Ran {
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
    let mut opts = ScriptRunOptions::new(
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

pub(crate) fn run(t: &TestHost, mode: ExecMode, src: &str) -> Ran {
    run_with(t, mode, src, opts_for(t))
}

/// [`opts_for`] `t`, the secret `db` allowed.
fn opts_with_db_secret(t: &TestHost) -> HostOptions {
    let mut o = opts_for(t);
    o.allowed_secrets = vec!["db".into()];
    o
}

/// The agent-side directory `rel` of `t` (beside the root: configMaps, node metadata,
/// secrets), made if missing.
fn agent_dir(t: &TestHost, rel: &str) -> PathBuf {
    let d = t.dir.path().join(rel);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Assert each (mode, script, error) run on `t` with `o` fails with exactly that error.
fn assert_errors(t: &TestHost, o: &HostOptions, cases: &[(ExecMode, &str, &str)]) {
    for (mode, src, want) in cases {
        let r = run_with(t, *mode, src, o.clone());
        assert_eq!(r.error(), *want, "{mode:?} {src}");
    }
}

/// The crate's directory, where the docs and fixtures are.
fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Whether generated docs are to be rewritten (`SKYHOOK_UPDATE_DOCS=1`) rather than checked.
fn updating_docs() -> bool {
    std::env::var_os("SKYHOOK_UPDATE_DOCS").is_some_and(|v| v == "1")
}

pub(crate) fn snapshot(t: &TestHost) -> std::collections::BTreeMap<PathBuf, String> {
    let mut m = tree(&t.root);
    m.remove(Path::new("stub.log"));
    m
}

/// `calls` pushed into `r` and printed, `changed()` returned: the script form of every
/// mode test.
pub(crate) fn script(calls: &[&str]) -> String {
    let mut s = String::from("let r = [];\n");
    for c in calls {
        s.push_str(&format!("r.push({c});\n"));
    }
    s.push_str("print(r);\nchanged()\n");
    s
}

pub(crate) fn bools(v: bool, n: usize) -> String {
    format!("[{}]\n", vec![v.to_string(); n].join(", "))
}

/// Plan, check, apply, apply again, check, plan again over `calls` (each a mutation that
/// changes the fresh root): a plan and a check leave the root byte-identical and list the
/// changes; apply returns true for each and `changed()` counts them; the second apply
/// returns false for each; the check after apply passes. Returns the plan's report.
pub(crate) fn all_modes(t: &TestHost, calls: &[&str]) -> Report {
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
fn errors_carry_position_path_and_function() {
    let t = TestHost::new();
    assert_errors(
        &t,
        &opts_for(&t),
        &[
            (
                ExecMode::Apply,
                "let x = 1;\nlet y = fs::read(\"/etc/missing\");\n",
                "main.rhai:2:13: fs::read: /etc/missing does not exist",
            ),
            (
                ExecMode::Plan,
                "\n  fs::write(\"etc/x\", \"\");",
                "main.rhai:2:7: fs::write: paths must be absolute: \"etc/x\"",
            ),
            // Argument errors name the option.
            (
                ExecMode::Apply,
                r#"fs::write("/x", "", #{mod: 1})"#,
                "main.rhai:1:5: fs::write: unknown option \"mod\" (expected one of: mode, owner, group)",
            ),
            (
                ExecMode::Apply,
                r#"fs::ensure_line("/x", "l", #{create: false})"#,
                "main.rhai:1:5: fs::ensure_line: /x does not exist",
            ),
        ],
    );
    // Catchable, and the message is the value caught.
    let r = run(
        &t,
        ExecMode::Apply,
        r#"try { fs::list("rel") } catch (e) { print(e) }"#,
    )
    .ok();
    assert_eq!(r.stdout(), "fs::list: paths must be absolute: \"rel\"\n");
    let r = run(&t, ExecMode::Apply, r#"fs::chmod("/x", "rw")"#);
    assert!(
        r.error().contains("mode must be an integer"),
        "{}",
        r.error()
    );
}

pub(crate) fn mkfifo(p: &Path) {
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
    big.set_len(crate::host::files::fs::MAX_READ_BYTES + 1)
        .unwrap();
    // mknod needs CAP_MKNOD: the device case is checked only where it can be made.
    let zero = nix::sys::stat::mknod(
        &t.p("/etc/zero"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 5),
    )
    .is_ok();
    mkfifo(&agent_dir(&t, "configmaps").join("fifo"));
    mkfifo(&agent_dir(&t, "node-metadata").join("labels.json"));
    mkfifo(&agent_dir(&t, "secrets/db").join("fifo"));
    let o = opts_with_db_secret(&t);

    let started = Instant::now();
    // Uncaught: the step fails at the call with the whole message.
    assert_errors(
        &t,
        &o,
        &[
            (
                ExecMode::Apply,
                "let x = 1;\nfs::read(\"/etc/fifo\")",
                "main.rhai:2:5: fs::read: /etc/fifo is a fifo, not a regular file (only regular files are read)",
            ),
            (
                ExecMode::Apply,
                r#"fs::read("/etc/big")"#,
                "main.rhai:1:5: fs::read: /etc/big is too large to read: 67108865 bytes, more than the \
                 limit of 67108864 bytes (64 MiB)",
            ),
        ],
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
        assert_errors(
            &t,
            &o,
            &[(
                ExecMode::Apply,
                r#"fs::read("/etc/zero")"#,
                "main.rhai:1:5: fs::read: /etc/zero is a character device, not a regular file (only \
                 regular files are read)",
            )],
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

/// The host modules are built once and serve the run bound to the evaluating thread: once
/// that binding is dropped (the step ended) a host call fails cleanly, and a second step on
/// the same engine reaches its own session only.
#[test]
fn host_calls_serve_the_bound_run_only() {
    use crate::script::ScriptHost;
    let (a, b) = (TestHost::new(), TestHost::new());
    let handle = crate::script::RunHandle {
        deadline: Instant::now() + Duration::from_secs(60),
        cancel: crate::process::Cancel::new(),
        output: Arc::new(CaptureOutput::new()),
    };
    let mut e = rhai::Engine::new_raw();
    let first = HostApi::new(a.host(ExecMode::Apply));
    let bound = first.register(&mut e, &handle);
    assert!(e.eval::<bool>(r#"fs::write("/seq", "a")"#).unwrap());
    drop(bound);
    let err = e.eval::<bool>(r#"fs::exists("/seq")"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Runtime error: fs::exists: host session already finished (line 1, position 5)"
    );
    let second = HostApi::new(b.host(ExecMode::Apply));
    let bound = second.register(&mut e, &handle);
    assert!(!e.eval::<bool>(r#"fs::exists("/seq")"#).unwrap());
    assert!(e.eval::<bool>(r#"fs::write("/seq", "b")"#).unwrap());
    drop(bound);
    assert_eq!(first.finish().unwrap().changes.len(), 1);
    assert_eq!(second.finish().unwrap().changes.len(), 1);
    assert_eq!(std::fs::read_to_string(a.root.join("seq")).unwrap(), "a");
    assert_eq!(std::fs::read_to_string(b.root.join("seq")).unwrap(), "b");
}

/// Registration log vs. table, and every logged function really is in its module.
#[test]
fn every_registered_function_is_documented_and_vice_versa() {
    let t = TestHost::new();
    let reg = modules();
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
    assert_eq!(seen, 29);
}

fn docs_namespaces() -> Vec<&'static str> {
    super::reference::NAMESPACES.iter().map(|n| n.0).collect()
}

fn check_generated(rel: &str, text: &str) {
    let path = manifest().join(rel);
    if updating_docs() {
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

/// The README names every namespace of the host API (and the global functions), in
/// reference order: the list between its markers is [`reference::render_readme_list`]'s.
#[test]
fn docs_readme_lists_every_namespace() {
    use super::reference::{README_LIST_BEGIN, README_LIST_END, render_readme_list};
    let list = render_readme_list();
    for ns in [
        "fs::",
        "disk::",
        "raid::",
        "kernel::",
        "gpu::",
        "dkms::",
        "lib::",
        "version::",
    ] {
        assert!(
            list.contains(&format!("`{ns}`")),
            "{ns} missing from:\n{list}"
        );
    }
    assert!(
        list.contains("`run`") && list.contains("`secret`"),
        "{list}"
    );
    let path = manifest().join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let (Some(begin), Some(end)) = (readme.find(README_LIST_BEGIN), readme.find(README_LIST_END))
    else {
        panic!(
            "README.md: no generated host API list (markers {README_LIST_BEGIN:?} ... {README_LIST_END:?})"
        );
    };
    let start = begin + README_LIST_BEGIN.len() + 1;
    let fresh = format!("{}{list}{}", &readme[..start], &readme[end..]);
    let mut on_disk = readme.clone();
    if updating_docs() {
        std::fs::write(&path, &fresh).unwrap();
        on_disk = fresh.clone();
    }
    assert!(
        on_disk == fresh,
        "README.md's host API list is stale: regenerate it with \
         `SKYHOOK_UPDATE_DOCS=1 cargo test --lib script::host_api::tests::docs`; it should read:\n{list}"
    );
}

pub(crate) fn apt_stubs(t: &TestHost) {
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

/// A test root holding a copy of the fake host layer `name` of `tests/fakehosts/` (its
/// README lists them), with `/proc/sys/kernel/arch` written from the layer's
/// machine, as a real host's procfs has it.
pub(crate) fn fakehost(name: &str) -> TestHost {
    let layer = manifest().join("tests/fakehosts").join(name);
    assert!(layer.is_dir(), "{}: no such fake host", layer.display());
    let t = TestHost::new();
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(layer.join("."))
        .arg(&t.root)
        .status()
        .unwrap();
    assert!(st.success(), "cp -a {} failed", layer.display());
    let machine = std::fs::read_to_string(t.p("/usr/share/fakehost/machine")).unwrap();
    t.file("/proc/sys/kernel/arch", &machine);
    t
}

/// A root with `/bin/sh` and `useradd`/`id` stubs over `/users`.
pub(crate) fn users_root() -> TestHost {
    let t = TestHost::new();
    t.install_sh();
    t.stub("useradd", "echo \"$1\" >> /users");
    t.stub(
        "id",
        "[ -e /users ] || exit 1\nwhile read u; do [ \"$u\" = \"$1\" ] && exit 0; done < /users\nexit 1",
    );
    t
}

/// The namespaces' effect samples, in reference order.
const EFFECT_SAMPLES: &[&[&str]] = &[
    crate::host::system::global_script_tests::tests::SAMPLES,
    crate::host::files::fs_script_tests::tests::SAMPLES,
    crate::host::services::service_script_tests::tests::SAMPLES,
    crate::host::packages::pkg_script_tests::tests::SAMPLES,
    crate::host::system::os_script_tests::tests::SAMPLES,
    crate::host::kernel::tuning_script_tests::tests::SAMPLES,
    crate::host::kernel::interrupt_script_tests::tests::SAMPLES,
    crate::host::files::config_script_tests::tests::SAMPLES,
    crate::host::mounts::mount_script_tests::tests::SAMPLES,
    crate::host::kernel::kmod_script_tests::tests::SAMPLES,
    crate::host::files::structured_script_tests::SAMPLES,
    crate::host::users::users_script_tests::tests::SAMPLES,
    crate::host::packages::version_script_tests::tests::SAMPLES,
];

/// A root in which every effect sample runs and every mutating one changes something: stub
/// commands (`hello`, systemctl, apt, grub, initramfs, modprobe, mdadm), devices `/dev/sdb` and
/// `/dev/sdd`, files to edit and remove,
/// a held package, a mounted `/old` in fstab and the mount table, users and groups,
/// configMaps, node metadata and a secret.
fn effects_root() -> TestHost {
    let t = TestHost::new();
    t.systemctl_stub();
    apt_stubs(&t);
    for (name, body) in [
        ("hello", "echo out-$1"),
        ("false", "exit 1"),
        ("apt-mark", r#"[ "$1" = showhold ] && echo held; :"#),
        ("update-grub", ":"),
        ("update-initramfs", ":"),
        ("modprobe", ":"),
        ("mdadm", ":"),
        ("tuned-adm", ":"),
        ("grub-set-default", ":"),
        ("ldconfig", ":"),
    ] {
        t.stub(name, body);
    }
    t.block_device("/dev/sdb", 16);
    t.block_device("/dev/sdd", 48);
    for (path, content) in [
        ("/usr/lib/tuned/balanced/tuned.conf", "[main]\n"),
        ("/etc/tuned/active_profile", "old\n"),
        ("/state/old.active", "yes\n"),
        ("/state/old.enabled", "yes\n"),
        ("/state/pkg-old", "i\n"),
        ("/state/pkg-held", "i\n"),
        ("/etc/a.conf", "x=1\n"),
        (
            "/etc/blocks.conf",
            "# BEGIN skyhook old\no\n# END skyhook old\n",
        ),
        ("/srv/tree/f", "f"),
        (
            "/etc/systemd/system/kubelet.service.d/10-x.conf",
            "[Service]\n",
        ),
        ("/etc/apt/sources.list.d/gone.sources", "Types: deb\n"),
        ("/proc/sys/vm/swappiness", "60\n"),
        (
            "/etc/skyhook/sysctl-restore/unnamed.conf",
            "vm.swappiness = 30\n",
        ),
        ("/proc/sys/kernel/osrelease", "6.1.0-test\n"),
        ("/proc/cmdline", "ro quiet\n"),
        ("/etc/hostname", "node-7\n"),
        (
            "/etc/default/grub.d/old.cfg",
            "GRUB_CMDLINE_LINUX_DEFAULT=\"q\"\n",
        ),
        ("/etc/fstab", "/dev/sdc1 /old ext4 defaults 0 0\n"),
        ("/etc/systemd/system/mnt-old.mount", "[Mount]\n"),
        (
            "/proc/1/mountinfo",
            "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n23 22 8:33 / /old rw - ext4 /dev/sdc1 rw\n",
        ),
        ("/proc/modules", ""),
        // kernel::: two kernels, grub boots the newest (GRUB_DEFAULT absent: entry 0).
        ("/boot/vmlinuz-6.1.0-test", ""),
        ("/boot/vmlinuz-6.2.0-new", ""),
        ("/etc/modprobe.d/floppy.conf", "blacklist floppy\n"),
        (
            "/etc/modprobe.d/blacklist-floppy.conf",
            "blacklist floppy\n",
        ),
        ("/etc/modprobe.d/old.conf", "options old a=1\n"),
        ("/etc/modules-load.d/old.conf", "old\n"),
        ("/etc/c.toml", "[a]\nx = 1\n"),
        ("/etc/d.json", "{\n  \"a\": 1\n}\n"),
        ("/etc/u.conf", "[Service]\nUser=x\n"),
        (
            "/etc/passwd",
            "root:x:0:0:root:/root:/bin/bash\nubuntu:x:1000:1000::/home/ubuntu:/bin/bash\n",
        ),
        ("/etc/group", "root:x:0:\nvideo:x:44:\nubuntu:x:1000:\n"),
    ] {
        t.file(path, content);
    }
    std::fs::write(
        t.p("/srv/a.tar"),
        crate::host::files::fs_script_tests::tests::tar_of(&[("d/f", 'f', 0o644, "f\n")]),
    )
    .unwrap();
    std::fs::write(agent_dir(&t, "configmaps").join("a"), "k=v\n").unwrap();
    agent_dir(&t, "node-metadata");
    std::fs::write(agent_dir(&t, "secrets/db").join("password"), "pw").unwrap();
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
    use crate::host::effects::report::Item;
    use crate::host::fetch::fetch_tests::{BODY, Reply, Server, sha};
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
        let mut o = opts_with_db_secret(&t);
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
            let behaves = crate::host::api::docs::kind_modes(*declared);
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

/// The modes text of a function that submits several kinds of effect: a command when any is
/// a command, else a change when any is a change (deferred actions beside it), else an
/// action; a read by what it reads.
#[test]
fn modes_are_derived_from_the_effect_kinds() {
    use EffectKind::*;
    let modes = |e: Effects| e.modes();
    assert_eq!(
        modes(Effects::Submits(&[Write, InitramfsUpdate])),
        Modes::Change
    );
    assert_eq!(
        modes(Effects::Submits(&[Command, GuardedCommand])),
        Modes::Command
    );
    assert_eq!(modes(Effects::Submits(&[ServiceAction])), Modes::Action);
    assert_eq!(modes(Effects::Submits(&[Interrupt])), Modes::Interrupt);
    assert_eq!(modes(Effects::ReadsHost), Modes::Query);
    assert_eq!(modes(Effects::RunsReadOnly), Modes::ReadOnlyCommand);
    assert_eq!(modes(Effects::Computes), Modes::Context);
    assert_eq!(
        Modes::Change.text(),
        "change: apply performs; plan records (diff); check: drift"
    );
    // Every row that submits effects declares at least one kind.
    for d in FUNCTIONS {
        assert!(
            !matches!(d.effects, Effects::Submits(k) if k.is_empty()),
            "{}",
            d.call()
        );
    }
}

/// The list of areas is whole: every source file with a table of host functions
/// (`host_fns!(...)`, named `HOST_FNS`) is listed in `AREAS` (by its module path), the
/// script layer's `changed()` too, and every namespace of a row has its reference section.
#[test]
fn every_table_of_host_functions_is_gathered() {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = manifest().join("src");
    let mut files = Vec::new();
    walk(&src.join("host"), &mut files);
    let mut with_table: Vec<String> = files
        .iter()
        .filter(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .any(|l| l.starts_with("host_fns!(") && !l.starts_with("host_fns!(SCRIPT_FNS"))
        })
        .map(|p| {
            let rel = p.strip_prefix(&src).unwrap().with_extension("");
            let rel = rel.to_string_lossy().replace('/', "::");
            format!("crate::{}", rel.trim_end_matches("::mod"))
        })
        .collect();
    with_table.push("crate::script::bindings".into());
    with_table.sort();
    let mut listed: Vec<String> = super::reference::AREAS
        .iter()
        .map(|(path, _)| path.replace(' ', ""))
        .collect();
    listed.sort();
    assert_eq!(listed, with_table);
    let sections = docs_namespaces();
    for f in FUNCTIONS {
        assert!(sections.contains(&f.ns), "{} has no section", f.full_name());
    }
}
