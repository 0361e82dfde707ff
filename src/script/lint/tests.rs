//! The checker on a corpus of broken scripts, with exact positions.

use std::sync::Arc;

use super::*;

fn check(src: &str) -> Vec<String> {
    let d = tempfile::tempdir().unwrap();
    let engine = ScriptEngine::default();
    check_source(&engine, "t.rhai", src, Arc::new(ModuleStore::new(d.path())))
        .unwrap()
        .iter()
        .map(Diagnostic::to_string)
        .collect()
}

/// `(script, expected diagnostics)`: each broken script with its exact findings.
const CORPUS: &[(&str, &[&str])] = &[
    // Typo'd host functions, at the start of the qualified name.
    (
        "fs::wrte(\"/x\", \"y\");",
        &["t.rhai:1:1: error: unknown function fs::wrte (did you mean fs::write?)"],
    ),
    (
        "let ok = true;\nif ok {\n    service::restrat(\"x\");\n}\n",
        &["t.rhai:3:5: error: unknown function service::restrat (did you mean service::restart?)"],
    ),
    // Wrong argument counts.
    (
        "let a = fs::write(\"/x\");",
        &["t.rhai:1:9: error: fs::write expects 2 or 3 arguments, got 1"],
    ),
    (
        "service::daemon_reload(\"x\");",
        &["t.rhai:1:1: error: service::daemon_reload expects 0 arguments, got 1"],
    ),
    (
        "run();",
        &["t.rhai:1:1: error: run expects 1 or 2 arguments, got 0"],
    ),
    (
        "fn f(a, b) { a + b }\nf(1);\n",
        &["t.rhai:2:1: error: f expects 2 arguments, got 1"],
    ),
    (
        "log::info(\"a\", \"b\");",
        &["t.rhai:1:1: error: log::info expects 1 argument, got 2"],
    ),
    // Unknown modules and functions.
    (
        "servcie::restart(\"x\");",
        &["t.rhai:1:1: error: unknown module servcie (did you mean service?)"],
    ),
    ("  zzz::f();", &["t.rhai:1:3: error: unknown module zzz"]),
    (
        "let n = 1;\nprnt(n);\n",
        &["t.rhai:2:1: error: unknown function prnt (did you mean print?)"],
    ),
    (
        "fn helper() { 1 }\nfn main() { helpr() }\n",
        &["t.rhai:2:13: error: unknown function helpr (did you mean helper?)"],
    ),
    // Imported modules: their exported functions.
    (
        "import \"skyhook/tuning\" as t;\nt::confg();\n",
        &[
            "t.rhai:2:1: error: unknown function t::confg in module \"skyhook/tuning\" (did you mean t::config?)",
        ],
    ),
    (
        "import \"skyhook/hello\" as h;\nh::greet();\n",
        &["t.rhai:2:1: error: h::greet expects 1 argument, got 0"],
    ),
    // Option keys of literal maps, at the key.
    (
        "fs::write(\"/x\", \"y\", #{mode: 0o644, onwer: \"root\"});",
        &[
            "t.rhai:1:37: error: fs::write: unknown option onwer (did you mean owner? accepted: mode, owner, group)",
        ],
    ),
    (
        "let r = run([\"true\"],\n    #{chekc: true});\n",
        &[
            "t.rhai:2:7: error: run: unknown option chekc (did you mean check? accepted: check, ok, input, env, cwd, timeout, read_only, stream, creates, removes, unless, onlyif)",
        ],
    ),
    (
        "pkg::install(\"x\", #{upgrade: true});",
        &["t.rhai:1:21: error: pkg::install: unknown option upgrade (accepted: update)"],
    ),
    // Traps.
    (
        "let s = `a\\nb`;",
        &[
            "t.rhai:1:9: warning: backtick string contains \\n, which Rhai keeps as a backslash and an `n` (backtick strings have no escapes): break the line in the string itself, or use \"...\\n...\"",
        ],
    ),
    (
        "let n = 1;\nfs::write(\"/x\", `n=${n}\\n`);\n",
        &[
            "t.rhai:2:17: warning: backtick string contains \\n, which Rhai keeps as a backslash and an `n` (backtick strings have no escapes): break the line in the string itself, or use \"...\\n...\"",
        ],
    ),
    (
        "let s = \" a \";\nlet t = s.trim();\n",
        &[
            "t.rhai:2:11: warning: trim() changes its object in place and returns (), but the result is assigned to a variable: call `s.trim(..);` as a statement, then use `s`",
        ],
    ),
    (
        "let s = \"a\";\nprint(s.make_upper());\n",
        &[
            "t.rhai:2:9: warning: make_upper() changes its object in place and returns (), but the result is passed as an argument: call `s.make_upper(..);` as a statement, then use `s`",
        ],
    ),
    (
        "fn f(s) { return s.replace(\"a\", \"b\"); }\n",
        &[
            "t.rhai:1:20: warning: replace() changes its object in place and returns (), but the result is returned: call `s.replace(..);` as a statement, then use `s`",
        ],
    ),
    (
        "let s = \"a\";\nlet n = s.trim().len();\n",
        &[
            "t.rhai:2:11: warning: trim() changes its object in place and returns (), but the result is the object of the next call: call `s.trim(..);` as a statement, then use `s`",
        ],
    ),
    (
        "let s = \"a\";\nif s.trim() == \"\" { print(1); }\n",
        &[
            "t.rhai:2:6: warning: trim() changes its object in place and returns (), but the result is used in an expression: call `s.trim(..);` as a statement, then use `s`",
        ],
    ),
    (
        "let s = \"a\";\ns.trm();\n",
        &["t.rhai:2:3: warning: unknown method trm (did you mean trim?)"],
    ),
    (
        "let lines = [\" a\"];\nlet t = lines.map(|l| l.trim());\nlet s = \"x\";\ns.trim();\n",
        &[
            "t.rhai:2:25: warning: trim() changes its object in place and returns (), but the result is returned: call `l.trim(..);` as a statement, then use `l`",
        ],
    ),
    (
        "fn clean(s) {\n    let x = 1;\n    s.trim()\n}\nlet s = \"x\";\ns.trim();\n",
        &[
            "t.rhai:3:7: warning: trim() changes its object in place and returns (), but the result is returned: call `s.trim(..);` as a statement, then use `s`",
        ],
    ),
    // A command result that accepts any exit code, thrown away.
    (
        "query([\"systemctl\", \"is-active\", \"x\"]);\n",
        &[
            "t.rhai:1:1: warning: query() returns any exit code, but its result is thrown away, so a failing command passes silently: read it (`if query(..).ok { .. }`), add `#{check: true}` to fail the step on a non-zero exit, or use run()",
        ],
    ),
    (
        "if true {\n    run([\"modprobe\", \"-r\", \"x\"], #{check: false});\n}\nconst O = #{check: false};\nsh(\"x\", O);\n",
        &[
            "t.rhai:2:5: warning: run() with check: false accepts any exit code, but its result is thrown away, so a failing command passes silently: read its `code`, or list the codes the script expects in `ok` instead of check: false",
            "t.rhai:5:1: warning: sh() with check: false accepts any exit code, but its result is thrown away, so a failing command passes silently: read its `code`, or list the codes the script expects in `ok` instead of check: false",
        ],
    ),
    // Several findings, in source order.
    (
        "fs::wrte(\"/a\", \"b\");\nlet x = fs::read();\n",
        &[
            "t.rhai:1:1: error: unknown function fs::wrte (did you mean fs::write?)",
            "t.rhai:2:9: error: fs::read expects 1 argument, got 0",
        ],
    ),
];

#[test]
fn corpus_of_broken_scripts() {
    for (src, expected) in CORPUS {
        assert_eq!(&check(src), expected, "script:\n{src}");
    }
}

/// Correct uses of the same things report nothing.
#[test]
fn correct_scripts_are_clean() {
    for src in [
        "fs::write(\"/x\", \"y\", #{mode: 0o644, owner: \"root\"});",
        "let s = \" a \";\ns.trim();\nlet t = s;\n",
        "let a = [3, 1];\na.sort();\nprint(a);\n",
        "let s = \"a\\nb\";\nlet t = `a\nb`;\n",
        "import \"skyhook/tuning\" as t;\nif step.mode == \"config\" { t::config(); }\n",
        "let f = |x| x + 1;\nprint(f(1));\nprint(f.call(2));\n",
        "let name = \"skyhook/\" + \"hello\";\nimport name as h;\nh::anything(1, 2);\n",
        "fn f(x) { x * 2 }\nprint(f(2));\nprint(type_of(f(1)));\n",
        "log::info(\"a\");\nlog::warn(\"b\");\nprint(env(\"X\", \"d\"));\nprint(step().name);\n",
        "let r = run([\"true\"], #{check: true, timeout: 5});\nprint(r.planned);\nprint(changed());\n",
        "const OPTS = #{update: true};\npkg::install(\"x\", OPTS);\n",
        // Commands whose code is checked, or read.
        "run([\"a\"]);\nsh(\"b\", #{timeout: 5});\nrun([\"grep\", \"-q\", \"x\", \"/f\"], #{ok: [0, 1]});\n\
         query([\"a\"], #{check: true});\nquery([\"a\"], #{ok: [0, 2]});\n\
         let r = query([\"a\"]);\nprint(r.ok);\nif query([\"a\"]).ok { print(1); }\n\
         let c = run([\"a\"], #{check: false}).code;\nlet v = if c > 0 { query([\"b\"]) } else { query([\"c\"]) };\n\
         fn probe() { query([\"a\"]) }\nprint(probe());\nlet o = #{check: false};\nrun([\"a\"], o);\n",
        "let m = #{a: 1};\nif \"a\" in m { print(m.a); }\nprint(m.get(\"b\") ?? 0);\n",
    ] {
        assert_eq!(check(src), Vec::<String>::new(), "script:\n{src}");
    }
}

/// A constant options map folded into the call is checked too (at the map).
#[test]
fn constant_options_maps_are_checked() {
    assert_eq!(
        check("const OPTS = #{updat: true};\npkg::install(\"x\", OPTS);\n"),
        vec![
            "t.rhai:2:19: error: pkg::install: unknown option updat (did you mean update? accepted: update)"
                .to_string()
        ]
    );
}

/// A relative module's exported functions, private ones excluded.
#[test]
fn relative_modules_export_their_public_functions() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("lib")).unwrap();
    std::fs::write(
        d.path().join("lib/util.rhai"),
        "fn greet(x) { x }\nprivate fn secret() { 1 }\n",
    )
    .unwrap();
    let engine = ScriptEngine::default();
    let found: Vec<String> = check_source(
        &engine,
        "t.rhai",
        "import \"lib/util\" as u;\nu::greet(1);\nu::secret();\nu::gret(1);\n",
        Arc::new(ModuleStore::new(d.path())),
    )
    .unwrap()
    .iter()
    .map(Diagnostic::to_string)
    .collect();
    assert_eq!(
        found,
        vec![
            "t.rhai:3:1: error: unknown function u::secret in module \"lib/util\"",
            "t.rhai:4:1: error: unknown function u::gret in module \"lib/util\" (did you mean u::greet?)",
        ]
    );
}

/// `check_step` also checks the package modules a step imports (recursively, each once, in
/// its own file), not the shipped ones.
#[test]
fn check_step_walks_imported_package_modules() {
    let d = tempfile::tempdir().unwrap();
    let w = |rel: &str, text: &str| {
        let p = d.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w(
        "apply.rhai",
        "import \"lib/a\" as a;\nimport \"lib/b\" as b;\nimport \"skyhook/hello\" as h;\na::f();\n",
    );
    w(
        "lib/a.rhai",
        "import \"lib/b\" as b;\nfn f() { b::g(); fs::wrte(\"/x\", \"\"); }\n",
    );
    w("lib/b.rhai", "fn g() { let s = `x\\n`; s }\n");
    let engine = ScriptEngine::default();
    let store = Arc::new(ModuleStore::new(d.path()));
    let (_, found) = check_step(
        &engine,
        &Checker::new(),
        &d.path().join("apply.rhai"),
        store,
    )
    .unwrap();
    let base = d.path().display().to_string();
    let found: Vec<String> = found
        .iter()
        .map(|x| x.to_string().replace(&base, "<d>"))
        .collect();
    assert_eq!(
        found,
        vec![
            "<d>/lib/a.rhai:2:18: error: unknown function fs::wrte (did you mean fs::write?)",
            "<d>/lib/b.rhai:1:18: warning: backtick string contains \\n, which Rhai keeps as a \
             backslash and an `n` (backtick strings have no escapes): break the line in the \
             string itself, or use \"...\\n...\"",
        ]
    );
}

/// A missing map property is a run-time error at the property (the engine sets
/// `fail_on_invalid_map_property`); `in` and `get` are the ways to read optional keys.
#[test]
fn missing_map_property_fails_at_its_position() {
    use crate::script::{CaptureOutput, StepContext, compile_source};
    use crate::step::run_script;
    let engine = ScriptEngine::default();
    let d = tempfile::tempdir().unwrap();
    let store = Arc::new(ModuleStore::new(d.path()));
    let run = |src: &str| {
        let script = compile_source(&engine, "t.rhai", src, store.clone()).unwrap();
        let out = Arc::new(CaptureOutput::new());
        let o = run_script(
            &engine,
            &script,
            &StepContext::default(),
            out.clone(),
            crate::process::Cancel::new(),
        );
        (
            o.error.map(|e| e.to_string()),
            String::from_utf8(out.stdout_bytes()).unwrap(),
        )
    };
    let (err, _) = run("let s = #{pages: 1};\nlet text = `n=${s.hugepages}`;\n");
    assert_eq!(
        err.as_deref(),
        Some(
            "t.rhai:2:19: Property not found: hugepages (the map has no such key: test it with \
             `\"hugepages\" in m`, or read it with `m.get(\"hugepages\")`, which is () when \
             missing)"
        )
    );
    let (err, _) = run("let s = #{};\nlet x = s[\"k\"];\n");
    let err = err.unwrap();
    assert!(
        err.starts_with("t.rhai:2:11: Property not found: k ("),
        "{err}"
    );
    let (err, out) = run("let s = #{a: 1};\nprint(\"b\" in s);\nprint(s.get(\"b\") ?? 7);\n");
    assert_eq!((err, out.as_str()), (None, "false\n7\n"));
}

/// The Rhai function table was generated for the Rhai version in Cargo.lock.
#[test]
fn rhai_table_matches_the_locked_rhai() {
    let lock = include_str!("../../../Cargo.lock");
    let at = lock.find("name = \"rhai\"\n").expect("rhai in Cargo.lock");
    let version = lock[at..].lines().nth(1).unwrap();
    assert_eq!(version, format!("version = \"{RHAI_VERSION}\""));
    // a few functions scripts use all the time
    let c = Checker::new();
    for (name, n) in [
        ("trim", 1),
        ("split", 2),
        ("contains", 2),
        ("parse_int", 1),
        ("keys", 1),
    ] {
        assert!(c.knows("", name, n), "{name}/{n}");
    }
    assert!(c.knows("fs", "write", 3) && c.knows("log", "info", 1) && !c.knows("fs", "write", 1));
}

#[test]
fn suggestions() {
    assert_eq!(suggest("wrte", ["write", "read"]), Some("write"));
    assert_eq!(suggest("servcie", ["service", "fs"]), Some("service"));
    assert_eq!(suggest("zzz", ["fs", "pkg"]), None);
    assert_eq!(distance("ab", "ba"), 1);
    assert_eq!(distance("", "abc"), 3);
}

/// Every shipped module and every example script checks clean: no false positives.
#[test]
fn stdlib_and_examples_are_clean() {
    let engine = ScriptEngine::default();
    let d = tempfile::tempdir().unwrap();
    for (name, src) in crate::script::STDLIB {
        let found = check_source(
            &engine,
            &format!("stdlib/{name}.rhai"),
            src,
            Arc::new(ModuleStore::new(d.path())),
        )
        .unwrap();
        assert!(found.is_empty(), "stdlib/{name}.rhai: {found:#?}");
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut files = Vec::new();
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rhai") {
                files.push(p);
            }
        }
    }
    assert!(files.len() >= 5, "{files:?}");
    let checker = Checker::new();
    for f in files {
        let store = Arc::new(ModuleStore::new(f.parent().unwrap()));
        let (_, found) = check_step(&engine, &checker, &f, store).unwrap();
        assert!(found.is_empty(), "{}: {found:#?}", f.display());
    }
}
