//! [`run_step`]'s end of the step after a failed script: the failure of the work pending at
//! the end (here: the batched line edits' write) is written to the step's stderr too, so an
//! edit the report lists but that was not written is never silent.

use std::path::PathBuf;
use std::sync::Arc;

use super::{End, run_step};
use crate::host::root::HostRoot;
use crate::host::{ExecMode, Host, HostOptions};
use crate::script::host_api::HostApi;
use crate::script::{
    CaptureOutput, ModuleStore, RunOptions, ScriptEngine, ScriptOutput, StepContext, compile_source,
};

/// Captures output; a `poke` on stdout appends to `file` as a writer that does not take
/// skyhook's path locks (an editor) would, while the script runs.
struct PokeOnPrint {
    inner: CaptureOutput,
    file: PathBuf,
}

impl ScriptOutput for PokeOnPrint {
    fn stdout(&self, bytes: &[u8]) {
        if bytes.starts_with(b"poke") {
            let mut text = std::fs::read_to_string(&self.file).unwrap();
            text.push_str("outside\n");
            std::fs::write(&self.file, text).unwrap();
        }
        self.inner.stdout(bytes);
    }
    fn stderr(&self, bytes: &[u8]) {
        self.inner.stderr(bytes);
    }
}

#[test]
fn a_failed_flush_after_a_failed_script_is_reported_too() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("etc")).unwrap();
    let file = d.path().join("etc/f");
    std::fs::write(&file, "x\n").unwrap();
    let engine = ScriptEngine::default();
    let script = compile_source(
        &engine,
        "w.rhai",
        "fs::ensure_line(\"/etc/f\", \"a\");\nprint(\"poke\");\nthrow \"boom\";\n",
        Arc::new(ModuleStore::new(d.path())),
    )
    .unwrap();
    let host = Host::new(
        HostRoot::open(d.path()).unwrap(),
        ExecMode::Apply,
        HostOptions::default(),
    );
    let api = HostApi::new(host);
    let out = Arc::new(PokeOnPrint {
        inner: CaptureOutput::new(),
        file: file.clone(),
    });
    let o = run_step(
        &engine,
        &script,
        &StepContext::default(),
        &api,
        RunOptions::new(out.clone(), crate::process::Cancel::new()),
        |c| c == 0,
        End::Session,
    );
    assert!(!o.ok);
    // The first error is the step's error.
    assert_eq!(o.error.as_deref(), Some("w.rhai:3:1: boom"));
    // The outside writer's content is kept, the batched edit was not written ...
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x\noutside\n");
    // ... and stderr says so after the script's error.
    let stderr = String::from_utf8(out.inner.stderr_bytes()).unwrap();
    assert!(
        stderr.ends_with(
            "w.rhai: the work pending at the end of the step failed: /etc/f changed under the \
             step (by a writer that does not take skyhook's path lock) after its line edits \
             read it; its 1 pending line edit(s) were not written, the file is left as the \
             other writer made it\n"
        ),
        "{stderr}"
    );
    assert_eq!(o.report.changes.len(), 1);
}
