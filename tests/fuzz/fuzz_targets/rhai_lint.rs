//! The Rhai static check of `skyhook-run check` (compile with imports resolved, then
//! `Checker::check_with_imports`) on any script text. Invariants: a compile error or
//! diagnostics, never a panic; each diagnostic is one line, names the file and points inside
//! the script.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use skyhook::script::lint::{Checker, Diagnostic};
use skyhook::script::{Limits, ModuleStore, ScriptEngine, compile_source};

const FILE: &str = "fuzz.rhai";

struct Lint {
    engine: ScriptEngine,
    checker: Checker,
    modules: std::path::PathBuf,
}

fn lint() -> &'static Lint {
    static LINT: OnceLock<Lint> = OnceLock::new();
    LINT.get_or_init(|| Lint {
        engine: ScriptEngine::new(Limits::default()),
        checker: Checker::new(),
        // Relative imports resolve here: an empty directory, so only `skyhook/` modules load.
        modules: tempfile::tempdir().expect("temp dir").keep(),
    })
}

fn check_one(d: &Diagnostic, source: &str) {
    let shown = d.to_string();
    assert!(!shown.contains('\n'), "multi-line diagnostic: {shown:?}");
    assert_eq!(d.file, FILE, "{shown}");
    if let Some(line) = d.line {
        assert!(line >= 1 && line <= source.lines().count() + 1, "{shown}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let l = lint();
    let store = Arc::new(ModuleStore::new(l.modules.clone()));
    match compile_source(&l.engine, FILE, source, store) {
        Err(e) => check_one(&Diagnostic::from_compile(&e), source),
        Ok(script) => {
            for d in l.checker.check_with_imports(&l.engine, &script, source) {
                check_one(&d, source);
            }
        }
    }
});
