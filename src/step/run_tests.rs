//! The agent's `.rhai` step ([`ScriptRunner::run_step`]): what it lists after a step that
//! changed files, and its output relayed like a process's ([`SinkOutput`]).

use std::io::Write;
use std::sync::Mutex;

use chrono::{NaiveDate, NaiveDateTime};

use super::*;
use crate::redact::Redactor;
use crate::script::resolver::ModuleStore;

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);
impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn fixed() -> NaiveDateTime {
    NaiveDate::from_ymd_opt(2025, 1, 2)
        .unwrap()
        .and_hms_micro_opt(13, 45, 1, 123456)
        .unwrap()
}

/// A console keeping what the agent writes on each stream.
#[derive(Default)]
struct KeepConsole {
    out: Buf,
    err: Buf,
}

impl crate::step::invocation::ConsoleStreams for KeepConsole {
    fn writer(&self, label: Label) -> Box<dyn Write + Send> {
        Box::new(match label {
            Label::Out => self.out.clone(),
            _ => self.err.clone(),
        })
    }
    fn error_line(&self, line: &str) {
        self.err
            .0
            .lock()
            .unwrap()
            .extend_from_slice(format!("{line}\n").as_bytes());
    }
}

/// Run `source` as `w.rhai` on the agent's runner over `root` (plain log format, so the
/// console has the lines as written) with `spec`: the result and the console's stdout.
fn agent_step(
    root: &std::path::Path,
    source: &str,
    spec: crate::step::StepSpec,
) -> (crate::step::StepResult, String) {
    let engine = Arc::new(ScriptEngine::default());
    let script =
        crate::script::compile_source(&engine, "w.rhai", source, Arc::new(ModuleStore::new(root)))
            .unwrap();
    let inv = crate::step::StepInvocation {
        path: "w.rhai".into(),
        program: crate::step::StepProgram::Script(script),
        args: Vec::new(),
        env: Vec::new(),
        spec,
        logs: None,
        preamble: None,
        keep_fds: Vec::new(),
    };
    let console = Arc::new(KeepConsole::default());
    let runner = ScriptRunner {
        engine,
        root: root.to_path_buf(),
        opened: None,
        log_format: LogFormat::Plain,
        start: Default::default(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(runner.run_step(inv, console.clone()));
    let out = String::from_utf8(console.out.0.lock().unwrap().clone()).unwrap();
    (r, out)
}

/// Three changes between two prints; the file names hold `hunter2`, a secret.
const THREE: &str = "print(\"start\");\n\
    fs::write(\"/etc/d/hunter2.conf\", \"a=1\\n\");\n\
    fs::write(\"/etc/b.conf\", \"b=2\\n\", #{mode: 0o600});\n\
    fs::remove(\"/etc/old.conf\");\n\
    print(\"end\");\n";

/// A root with `/etc/b.conf` (`b=1`, 0644) and `/etc/old.conf`.
fn three_root() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("etc")).unwrap();
    let b = d.path().join("etc/b.conf");
    std::fs::write(&b, "b=1\n").unwrap();
    std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(d.path().join("etc/old.conf"), "x\n").unwrap();
    d
}

fn secret_spec() -> crate::step::StepBuilder {
    let env = vec![
        ("SKYHOOK_REDACT_ENV".to_string(), "TOKEN".to_string()),
        ("TOKEN".to_string(), "hunter2".to_string()),
    ];
    crate::step::StepSpec::builder("apply", true)
        .redactor(Redactor::from_env(&env))
        .env(env)
}

#[test]
fn an_applied_step_lists_what_it_changed_after_its_output() {
    let d = three_root();
    let (r, out) = agent_step(d.path(), THREE, secret_spec().build());
    assert!(r.ok, "{r:?}");
    assert_eq!(
        out,
        "start\nend\n\
         + mkdir /etc/d\n\
         ~ create /etc/d/***.conf (mode 0644)  # w.rhai:2\n\
         ~ update /etc/b.conf (mode 0644 -> 0600)  # w.rhai:3\n\
         ~ remove /etc/old.conf  # w.rhai:4\n\
         Apply: 3 changed, 0 unchanged.\n"
    );
    // Converged: the step's own output only.
    let (r, out) = agent_step(d.path(), THREE, secret_spec().build());
    assert!(r.ok && r.changes_text().is_none(), "{r:?}");
    assert_eq!(out, "start\nend\n");
}

#[test]
fn with_diffs_each_file_change_carries_its_unified_diff() {
    let d = three_root();
    let spec = secret_spec().diffs(true).build();
    let (_, out) = agent_step(d.path(), THREE, spec);
    assert_eq!(
        out,
        "start\nend\n\
         + mkdir /etc/d\n\
         ~ create /etc/d/***.conf (mode 0644)  # w.rhai:2\n\
         --- /dev/null\n+++ b/etc/d/***.conf\n@@ -0,0 +1 @@\n+a=1\n\
         ~ update /etc/b.conf (mode 0644 -> 0600)  # w.rhai:3\n\
         --- a/etc/b.conf\n+++ b/etc/b.conf\n@@ -1 +1 @@\n-b=1\n+b=2\n\
         ~ remove /etc/old.conf  # w.rhai:4\n\
         --- a/etc/old.conf\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n\
         Apply: 3 changed, 0 unchanged.\n"
    );
}

#[test]
fn failed_and_checking_steps_list_no_changes() {
    // A failed step: its error is its account; the report keeps what it did.
    let d = three_root();
    let (r, out) = agent_step(
        d.path(),
        "fs::write(\"/etc/c.conf\", \"c\\n\");\nprint(\"x\");\nthrow \"boom\";\n",
        crate::step::StepSpec::builder("apply", true).build(),
    );
    assert!(!r.ok);
    assert_eq!(r.report.changes.len(), 1);
    assert_eq!(out, "x\n");
    // A check: pending changes are drift, on stderr, not a list of changes.
    let spec = crate::step::StepSpec::builder("apply-check", true).build();
    let (r, out) = agent_step(d.path(), THREE, spec);
    assert!(!r.ok);
    assert_eq!(r.report.drift().len(), 3);
    assert_eq!(out, "start\nend\n");
}

#[test]
fn script_output_is_relayed_like_a_process_with_redaction() {
    let (con_out, file_out, con_err) = (Buf::default(), Buf::default(), Buf::default());
    let redactor = Redactor::new();
    redactor.add("hunter2");
    let out = Arc::new(SinkOutput::with_sinks(
        StreamSink::new(
            "stdout",
            Box::new(con_out.clone()),
            Some((Box::new(file_out.clone()), "/log/x.rhai.log".into())),
        ),
        StreamSink::new("stderr", Box::new(con_err.clone()), None),
        Some(redactor),
        fixed,
    ));
    let engine = Arc::new(ScriptEngine::default());
    let dir = tempfile::tempdir().unwrap();
    let script = crate::script::compile_source(
        &engine,
        "x.rhai",
        "print(\"one\"); print(\"pw=hunter2\"); debug(\"e1\");",
        Arc::new(ModuleStore::new(dir.path())),
    )
    .unwrap();
    let opts = crate::step::ScriptRunOptions::new(out.clone(), crate::process::Cancel::new());
    let outcome = crate::step::run_script_with(
        &engine,
        &script,
        &crate::script::StepContext::default(),
        &opts,
    );
    assert!(!outcome.failed());
    assert!(out.finish().is_empty());
    let ts = "2025-01-02T13:45:01.123456";
    let expected = format!("[out]{ts} one\n[out]{ts} pw=***\n[out]{ts} ");
    assert_eq!(
        String::from_utf8(con_out.0.lock().unwrap().clone()).unwrap(),
        expected
    );
    assert_eq!(
        String::from_utf8(file_out.0.lock().unwrap().clone()).unwrap(),
        expected
    );
    assert_eq!(
        String::from_utf8(con_err.0.lock().unwrap().clone()).unwrap(),
        format!("[err]{ts} e1\n[err]{ts} ")
    );
}
