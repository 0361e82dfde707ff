//! Tests of the script layer through its public API: limits, resolver, context, output,
//! results.

use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rhai::Engine;

use super::*;
use crate::step::{ScriptOutcome, ScriptRunOptions, run_script, run_script_with};

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn ctx() -> StepContext {
    StepContext {
        mode: "apply".into(),
        name: "main.rhai".into(),
        args: vec!["a".into(), "b c".into()],
        package_name: "tuning".into(),
        package_version: "1.2.3".into(),
        previous_version: None,
        skyhook_dir: "/skyhook/tuning".into(),
        step_root: "/skyhook/tuning/root".into(),
        resource_id: "node1_tuning_1.2.3".into(),
        node_order: Some(2),
        dry_run: false,
        env: [("A".to_string(), "alpha".to_string())].into(),
    }
}

/// Write `main.rhai` with `source` into `dir` and compile it as a step of package dir `dir`.
fn compile_main(
    engine: &ScriptEngine,
    dir: &Path,
    source: &str,
) -> Result<CompiledScript, ScriptError> {
    write(dir, "main.rhai", source);
    compile_step(engine, &dir.join("main.rhai"), dir)
}

/// Run `script` with [`ctx`], its output captured, no cancel.
fn run_compiled(engine: &ScriptEngine, script: &CompiledScript) -> ScriptOutcome {
    let out = Arc::new(CaptureOutput::new());
    run_script(engine, script, &ctx(), out, crate::process::Cancel::new())
}

/// Write `main.rhai` (plus `files`) into a fresh dir, compile it with `limits`.
fn compile_with(
    limits: Limits,
    main: &str,
    files: &[(&str, &str)],
) -> (
    tempfile::TempDir,
    ScriptEngine,
    Result<CompiledScript, ScriptError>,
) {
    let dir = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        write(dir.path(), rel, text);
    }
    let engine = ScriptEngine::new(limits);
    let compiled = compile_main(&engine, dir.path(), main);
    (dir, engine, compiled)
}

/// The path of `rel` in `dir`, as errors name it.
fn shown(dir: &tempfile::TempDir, rel: &str) -> String {
    dir.path().join(rel).display().to_string()
}

/// A step that did not compile: its error and the dir of its files.
struct Refused {
    dir: tempfile::TempDir,
    e: ScriptError,
}

impl Refused {
    fn main(&self) -> String {
        shown(&self.dir, "main.rhai")
    }
    fn file(&self, rel: &str) -> String {
        shown(&self.dir, rel)
    }
}

/// Compile `main` (plus `files`) with `limits`, which must fail.
fn refused_with(limits: Limits, main: &str, files: &[(&str, &str)]) -> Refused {
    let (dir, _engine, compiled) = compile_with(limits, main, files);
    let e = compiled
        .err()
        .unwrap_or_else(|| panic!("{main:?} should not compile"));
    Refused { dir, e }
}

/// Compile `main` (plus `files`) with the default limits, which must fail.
fn refused(main: &str, files: &[(&str, &str)]) -> Refused {
    refused_with(Limits::default(), main, files)
}

struct Ran {
    dir: tempfile::TempDir,
    outcome: ScriptOutcome,
    out: Arc<CaptureOutput>,
}

impl Ran {
    fn main(&self) -> String {
        shown(&self.dir, "main.rhai")
    }
    fn file(&self, rel: &str) -> String {
        shown(&self.dir, rel)
    }
    fn err(&self) -> &ScriptError {
        self.outcome
            .error
            .as_ref()
            .expect("the run should have failed")
    }
    fn stdout(&self) -> String {
        String::from_utf8(self.out.stdout_bytes()).unwrap()
    }
    fn stderr(&self) -> String {
        String::from_utf8(self.out.stderr_bytes()).unwrap()
    }
}

fn run_opts(
    limits: Limits,
    main: &str,
    files: &[(&str, &str)],
    f: impl FnOnce(&mut ScriptRunOptions),
) -> Ran {
    let (dir, engine, compiled) = compile_with(limits, main, files);
    let script = compiled.unwrap_or_else(|e| panic!("compile failed: {e}"));
    let out = Arc::new(CaptureOutput::new());
    let mut opts = ScriptRunOptions::new(out.clone(), crate::process::Cancel::new());
    f(&mut opts);
    let outcome = run_script_with(&engine, &script, &ctx(), &opts);
    Ran { dir, outcome, out }
}

fn run(main: &str, files: &[(&str, &str)]) -> Ran {
    run_opts(Limits::default(), main, files, |_| {})
}

/// Run `main` alone with `limits`.
fn run_limited(limits: Limits, main: &str) -> Ran {
    run_opts(limits, main, &[], |_| {})
}

/// Limits with no operations limit (for loops that must run into another).
fn unbounded_operations() -> Limits {
    Limits {
        max_operations: u64::MAX,
        ..Limits::default()
    }
}

/// Assert the run failed at `limit` in `main.rhai`, on a line within `lines`, with
/// `message`, and wrote its error (only) to stderr.
fn assert_limit(r: &Ran, limit: Limit, message: &str, lines: RangeInclusive<usize>) {
    let e = r.err();
    assert_eq!(e.kind, ScriptErrorKind::Limit(limit));
    assert_eq!(e.message, message);
    assert_eq!(e.file, r.main());
    assert!(e.line.is_some_and(|l| lines.contains(&l)), "{e}");
    assert_eq!(r.stderr(), format!("{e}\n"));
}

fn assert_at(err: &ScriptError, file: &str, line: usize, col: usize) {
    assert_eq!(
        (err.file.as_str(), err.line, err.column),
        (file, Some(line), Some(col)),
        "error was: {err}"
    );
}

// ---- limits -------------------------------------------------------------------------

#[test]
fn infinite_loop_hits_operations_limit() {
    let limits = Limits {
        max_operations: 10_000,
        ..Limits::default()
    };
    let r = run_limited(limits, "let x = 0;\nloop {\n    x += 1;\n}\n");
    assert_limit(
        &r,
        Limit::Operations,
        "operations limit exceeded (max_operations = 10000)",
        2..=3,
    );
    assert_eq!(r.outcome.code, 1);
}

#[test]
fn infinite_loop_hits_deadline() {
    let limits = Limits {
        timeout: Duration::from_millis(200),
        ..unbounded_operations()
    };
    let start = Instant::now();
    let r = run_limited(limits, "let x = 0;\nloop {\n    x += 1;\n}\n");
    let elapsed = start.elapsed();
    let e = r.err();
    assert_eq!(e.kind, ScriptErrorKind::Timeout);
    assert_eq!(
        e.message,
        "step deadline exceeded (0.2 s; SKYHOOK_SCRIPT_TIMEOUT)"
    );
    assert!(e.line.is_some_and(|l| (2..=3).contains(&l)), "{e}");
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
}

#[test]
fn run_timeout_overrides_engine_timeout() {
    let r = run_opts(unbounded_operations(), "loop {}", &[], |o| {
        o.timeout = Some(Duration::from_millis(50));
    });
    assert_eq!(r.err().kind, ScriptErrorKind::Timeout);
    assert_eq!(
        r.err().message,
        "step deadline exceeded (0.05 s; SKYHOOK_SCRIPT_TIMEOUT)"
    );
}

#[test]
fn cancel_flag_stops_the_run() {
    let cancel = crate::process::Cancel::new();
    cancel.abort(crate::process::CancelReason::Remote("test".into()));
    let r = run_opts(Limits::default(), "loop {}", &[], |o| {
        o.cancel = cancel.clone()
    });
    assert_eq!(r.err().kind, ScriptErrorKind::Cancelled);
    assert_eq!(
        r.err().to_string(),
        format!("{}:1:6: step cancelled", r.main())
    );
}

#[test]
fn cancel_from_another_thread() {
    let cancel = crate::process::Cancel::new();
    let c = cancel.clone();
    // The script signals it is running through print; the output sink sets the flag.
    struct CancelOnPrint(crate::process::Cancel);
    impl ScriptOutput for CancelOnPrint {
        fn stdout(&self, _: &[u8]) {
            self.0
                .abort(crate::process::CancelReason::Remote("test".into()));
        }
        fn stderr(&self, _: &[u8]) {}
    }
    let (_dir, engine, compiled) = compile_with(unbounded_operations(), "print(1);\nloop {}", &[]);
    let mut opts = ScriptRunOptions::new(Arc::new(CancelOnPrint(c)), cancel);
    opts.timeout = Some(Duration::from_secs(30));
    let outcome = run_script_with(&engine, &compiled.unwrap(), &ctx(), &opts);
    assert_eq!(outcome.error.unwrap().kind, ScriptErrorKind::Cancelled);
}

#[test]
fn closure_recursion_hits_call_levels() {
    let r = run("let f = |g| g.call(g);\nf.call(f);\n", &[]);
    let e = r.err();
    assert_eq!(e.kind, ScriptErrorKind::Limit(Limit::CallLevels));
    assert_eq!(
        e.message,
        "call depth limit exceeded: too deep recursion through functions, closures or \
         function pointers (max_call_levels = 64)"
    );
    assert_eq!(e.file, r.main());
    assert!(e.line.is_some(), "{e}");
}

#[test]
fn function_pointer_recursion_hits_call_levels() {
    let r = run(
        "fn again(p) {\n    p.call(p)\n}\nlet p = Fn(\"again\");\np.call(p)\n",
        &[],
    );
    let e = r.err();
    assert_eq!(e.kind, ScriptErrorKind::Limit(Limit::CallLevels));
    assert_at(e, &r.main(), 5, 3);
}

#[test]
fn recursion_up_to_the_limit_works() {
    // 63 nested calls below the top level: within max_call_levels = 64, on any build.
    let r = run(
        "fn depth(n) { if n == 0 { 0 } else { 1 + depth(n - 1) } }\ndepth(63)\n",
        &[],
    );
    assert!(r.outcome.error.is_none(), "{:?}", r.outcome.error);
    assert_eq!(r.outcome.code, 63);
}

#[test]
fn doubling_string_hits_string_size() {
    let r = run("let s = \"x\";\nloop { s += s; }\n", &[]);
    assert_limit(
        &r,
        Limit::StringSize,
        "string size limit exceeded (max_string_size = 33554432 bytes)",
        2..=2,
    );
}

#[test]
fn growing_array_and_map_hit_their_limits() {
    let limits = Limits {
        max_array_size: 100,
        max_map_size: 10,
        ..Limits::default()
    };
    let r = run_limited(
        limits.clone(),
        "let a = [];\nfor i in 0..1000 { a.push(i); }\n",
    );
    assert_eq!(r.err().kind, ScriptErrorKind::Limit(Limit::ArraySize));
    assert_eq!(r.err().line, Some(2));
    let r = run_limited(
        limits.clone(),
        "let m = #{a:1,b:2,c:3,d:4,e:5,f:6};\nlet n = #{g:7,h:8,i:9,j:10,k:11};\nm += n;\n",
    );
    assert_eq!(r.err().kind, ScriptErrorKind::Limit(Limit::MapSize));
    assert_eq!(
        r.err().to_string(),
        format!(
            "{}:3:3: map size limit exceeded (max_map_size = 10 properties)",
            r.main()
        )
    );
    // A literal over the limit is refused at compile time.
    let e = refused_with(
        limits,
        "let m = #{a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9,j:10,k:11};",
        &[],
    )
    .e;
    assert_eq!(e.kind, ScriptErrorKind::Limit(Limit::MapSize));
    assert_eq!((e.line, e.column), (Some(1), Some(54)));
}

/// Rhai never measures map keys: a map grown by fresh 1 MB keys is stopped by the memory
/// limit (about 130 keys in), long before the operations limit would.
#[test]
fn map_grown_by_large_keys_hits_the_memory_limit() {
    let r = run(
        "let m = #{};\nlet v = \"x\";\nv.pad(1000000, 'x');\nfor i in 0..100000 {\n    m[v + i] = i;\n}\n",
        &[],
    );
    assert_limit(
        &r,
        Limit::Memory,
        "memory limit exceeded: the script holds more than 256 MiB (max_memory)",
        4..=5,
    );
}

/// Values spread over many variables, each within Rhai's per-value limits, are bounded by
/// the memory limit all together.
#[test]
fn many_large_variables_hit_the_memory_limit() {
    let limits = Limits {
        max_memory: 64 << 20,
        ..Limits::default()
    };
    let mut src = String::from("let s = \"x\";\ns.pad(1000000, 'x');\n");
    for i in 0..200 {
        src.push_str(&format!("let v{i} = s + {i};\n"));
    }
    src.push_str("print(\"unreachable\");\n");
    let r = run_limited(limits, &src);
    let e = r.err();
    assert_eq!(
        e.to_string().split_once(": ").map(|(_, m)| m),
        Some("memory limit exceeded: the script holds more than 64 MiB (max_memory)")
    );
    // About 1 to 2 MB per variable: stopped somewhere after the 30th, before the last.
    assert!(e.line.is_some_and(|l| (30..200).contains(&l)), "{e}");
    assert_eq!(r.stdout(), "");
}

/// `m[k] = v` stores another reference to `v`'s string, not a copy: 100,000 keys referring
/// to one 1 MB string take a few MB, and the memory limit (here 64 MiB) counts the string
/// once, so the loop runs to its end. Rhai's own size check counts every reference: handing
/// such a map to a function fails with the string limit.
#[test]
fn map_of_one_shared_string_costs_one_string() {
    let limits = Limits {
        max_memory: 64 << 20,
        ..Limits::default()
    };
    let grow = "let m = #{};\nlet v = \"x\";\nv.pad(1000000, 'x');\nfor i in 0..100000 {\n    m[\"k\" + i] = v;\n}\n";
    let r = run_limited(limits.clone(), &format!("{grow}7\n"));
    assert!(r.outcome.error.is_none(), "{:?}", r.outcome.error);
    assert_eq!(r.outcome.code, 7);
    let r = run_limited(limits, &format!("{grow}m.len()\n"));
    assert_eq!(
        r.err().to_string(),
        format!(
            "{}:7:3: string size limit exceeded (max_string_size = 33554432 bytes)",
            r.main()
        )
    );
}

const OUTPUT_LIMIT: &str = "output limit exceeded: the script wrote more than 64 MiB with print, debug and log:: (max_output)";

/// Printing a 30 MB string in an endless loop stops at the output limit (64 MiB per run):
/// two prints are written, the third is not, and the run ends at the loop.
#[test]
fn endless_large_prints_stop_at_the_output_limit() {
    let r = run(
        "let s = \"x\";\ns.pad(30000000, 'x');\nloop {\n    print(s);\n}\n",
        &[],
    );
    assert_limit(&r, Limit::Output, OUTPUT_LIMIT, 3..=4);
    let out = r.out.stdout_bytes();
    assert_eq!(out.len(), 2 * 30_000_001);
}

/// Every output call counts, both streams together: `log::` fails at the call that would
/// pass the limit, a `print` or `debug` past it stops the run before its next operation, and
/// one as the last thing the script does still fails the run.
#[test]
fn output_limit_counts_print_debug_and_log() {
    let limits = Limits {
        max_output: 20,
        ..Limits::default()
    };
    let limit = "output limit exceeded: the script wrote more than 20 bytes with print, debug and \
                 log:: (max_output)";
    // 6 + 6 + 12 > 20: the third call fails where it is.
    let r = run_limited(
        limits.clone(),
        "print(\"hello\");\ndebug(\"world\");\nlog::info(\"abc\");\nprint(\"never\");\n",
    );
    assert_eq!(r.err().to_string(), format!("{}:3:6: {limit}", r.main()));
    assert_eq!(
        (r.stdout(), r.stderr()),
        ("hello\n".to_string(), format!("world\n{}\n", r.err()))
    );
    // A print past the limit: stopped before the next statement runs.
    let r = run_limited(
        limits.clone(),
        "print(\"0123456789abcdefghij\");\nprint(\"after\");\n",
    );
    assert_eq!(r.err().kind, ScriptErrorKind::Limit(Limit::Output));
    assert_eq!(r.err().line, Some(2), "{}", r.err());
    assert_eq!(r.stdout(), "");
    // The last statement: no later operation, the run fails when it ends.
    let r = run_limited(
        limits.clone(),
        "let x = 1;\ndebug(\"0123456789abcdefghij\");",
    );
    assert_eq!(r.err().to_string(), format!("{}: {limit}", r.main()));
    // Within the limit nothing changes.
    let r = run_limited(limits, "print(\"0123456789abcdefghi\"); 3");
    assert!(r.outcome.error.is_none(), "{:?}", r.outcome.error);
    assert_eq!((r.outcome.code, r.stdout().len()), (3, 20));
}

/// Small prints without end, no operations limit: the output limit ends the run, not the
/// deadline.
#[test]
fn endless_small_prints_stop_at_the_output_limit() {
    let limits = Limits {
        max_output: 1 << 20,
        ..unbounded_operations()
    };
    let started = Instant::now();
    let r = run_limited(limits, "loop { print(\"x\"); }");
    assert_eq!(
        r.err().to_string(),
        format!(
            "{}:1:8: output limit exceeded: the script wrote more than 1 MiB with print, debug \
             and log:: (max_output)",
            r.main()
        )
    );
    assert_eq!(r.out.stdout_bytes().len(), 1 << 20);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn deep_expression_hits_expression_depth() {
    let deep = format!("let x = {}1{};\n", "(".repeat(200), ")".repeat(200));
    let r = refused(&deep, &[]);
    let e = &r.e;
    assert_eq!(e.kind, ScriptErrorKind::Limit(Limit::ExprDepth));
    assert_eq!(
        e.message,
        "expression nesting limit exceeded (max_expr_depth = 64, 32 in functions)"
    );
    assert_eq!(e.file, r.main());
    assert_eq!(e.line, Some(1));
    assert!(e.column.is_some());

    // Inside a function the lower limit applies.
    let in_fn = format!("fn f() {{\n  {}1{}\n}}\n", "(".repeat(40), ")".repeat(40));
    let e = refused(&in_fn, &[]).e;
    assert_eq!(e.kind, ScriptErrorKind::Limit(Limit::ExprDepth));
    assert_eq!(e.line, Some(2));
}

#[test]
fn too_many_variables() {
    let limits = Limits {
        max_variables: 5,
        ..Limits::default()
    };
    let r = run_limited(
        limits,
        "let a = 1; let b = 2; let c = 3; let d = 4; let e = 5; let f = 6;",
    );
    assert_eq!(r.err().kind, ScriptErrorKind::Limit(Limit::Variables));
}

#[test]
fn eval_is_a_parse_error() {
    let r = refused("let x = 1;\nlet y = eval(\"x\");\n", &[]);
    let e = &r.e;
    assert_eq!(e.kind, ScriptErrorKind::Syntax);
    assert_eq!(e.line, Some(2));
    assert_eq!(e.file, r.main());
    assert!(e.message.contains("eval"), "{e}");
}

#[test]
fn eval_through_a_function_pointer_is_refused() {
    let r = run("let f = Fn(\"eval\");\nf.call(\"40 + 2\")\n", &[]);
    assert_eq!(r.outcome.code, 1);
    assert_eq!(
        r.err().to_string(),
        format!("{}:1:12: 'eval' is a reserved keyword", r.main())
    );
}

// ---- resolver -----------------------------------------------------------------------

#[test]
fn stdlib_import_works_and_sees_step() {
    let r = run(
        "import \"skyhook/hello\" as h;\nprint(h::greet(\"world\"));\nprint(h::GREETING);\n",
        &[],
    );
    assert!(r.outcome.error.is_none(), "{:?}", r.outcome.error);
    assert_eq!(r.stdout(), "hello, world (from main.rhai)\nhello\n");
}

#[test]
fn relative_imports_work() {
    let files = [
        (
            "lib/util.rhai",
            "fn twice(x) { x * 2 }\nexport const NAME = step().package_name;\n",
        ),
        (
            "lib/other.rhai",
            "import \"lib/util\" as u;\nfn four() { u::twice(2) }\n",
        ),
    ];
    let r = run(
        "import \"lib/util\" as a;\nimport \"./lib/util.rhai\" as b;\nimport \"lib/other\" as o;\n\
         print(a::twice(3));\nprint(b::NAME);\nprint(o::four());\n",
        &files,
    );
    assert!(r.outcome.error.is_none(), "{:?}", r.outcome.error);
    assert_eq!(r.stdout(), "6\ntuning\n4\n");
}

#[test]
fn parent_and_absolute_imports_are_refused() {
    let r = refused("let x = 1;\nimport \"../x\" as x;\n", &[]);
    assert_eq!(r.e.kind, ScriptErrorKind::Import);
    assert_eq!(
        r.e.to_string(),
        format!(
            "{}:2:1: cannot import \"../x\": module paths must not contain `..`",
            r.main()
        )
    );

    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "abs.rhai", "export const X = 1;");
    let abs = outside.path().join("abs.rhai").display().to_string();
    let r = refused(&format!("import \"{abs}\" as x;\n"), &[]);
    let main = r.main();
    assert_eq!(
        r.e.to_string(),
        format!(
            "{main}:1:1: cannot import \"{abs}\": module paths must be relative to the package \
             directory"
        )
    );
}

/// An import path with a control character is refused on one line: a `\n` in it never splits
/// the error (and `skyhook-run check`'s diagnostic) over two lines (a case of `tests/fuzz`'s
/// `rhai_lint`).
#[test]
fn import_paths_with_control_characters_are_refused_on_one_line() {
    let r = refused("import \"sk\0yhook/\\nning\" as t;\nt::apply();\n", &[]);
    assert_eq!(r.e.kind, ScriptErrorKind::Import);
    let main = r.main();
    assert_eq!(
        r.e.to_string(),
        format!(
            "{main}:1:1: cannot import \"sk\\0yhook/\\nning\": module paths must not contain \
             control characters"
        )
    );
}

#[test]
fn symlinks_cannot_leave_the_base_dir() {
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.rhai", "export const X = 42;");
    let target = outside.path().join("secret.rhai");
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("pkg");
    std::fs::create_dir(&base).unwrap();
    std::os::unix::fs::symlink(&target, base.join("abs.rhai")).unwrap();
    // A relative link climbing out of the base: <tmp>/pkg/rel.rhai -> ../<outside>/secret.rhai
    let rel_target = Path::new("..")
        .join("..")
        .join(target.strip_prefix("/").unwrap());
    std::os::unix::fs::symlink(&rel_target, base.join("rel.rhai")).unwrap();
    std::fs::create_dir(base.join("lib")).unwrap();
    std::os::unix::fs::symlink(outside.path(), base.join("lib/out")).unwrap();
    // A link that stays inside works.
    write(&base, "real.rhai", "export const X = 7;");
    std::os::unix::fs::symlink("real.rhai", base.join("inside.rhai")).unwrap();

    let engine = ScriptEngine::default();
    for spec in ["abs", "rel", "lib/out/secret"] {
        let e =
            compile_main(&engine, &base, &format!("import \"{spec}\" as m;\nm::X\n")).unwrap_err();
        assert_eq!(e.kind, ScriptErrorKind::Import, "{spec}: {e}");
        assert_eq!((e.line, e.column), (Some(1), Some(1)), "{e}");
        assert!(
            e.message
                .starts_with(&format!("cannot import \"{spec}\": ")),
            "{e}"
        );
    }
    let script = compile_main(&engine, &base, "import \"inside\" as m;\nm::X\n").unwrap();
    let o = run_compiled(&engine, &script);
    assert!(o.error.is_none(), "{:?}", o.error);
    assert_eq!(o.code, 7);
}

#[test]
fn error_inside_module_reports_module_position() {
    let files = [(
        "lib/bad.rhai",
        "fn boom() {\n    let x = 1;\n    throw \"kaput\";\n}\n",
    )];
    let r = run("import \"lib/bad\" as b;\n\nb::boom();\n", &files);
    let e = r.err();
    assert_eq!(e.kind, ScriptErrorKind::Runtime);
    assert_eq!(e.message, "kaput");
    assert_at(e, &r.file("lib/bad.rhai"), 3, 5);
    assert_eq!(
        r.stderr(),
        format!("{}:3:5: kaput\n", r.file("lib/bad.rhai"))
    );
}

#[test]
fn error_in_module_top_level_reports_module_position() {
    let files = [("lib/top.rhai", "let a = 1;\nlet b = a + undefined_thing;\n")];
    let r = run("import \"lib/top\" as t;\n", &files);
    let e = r.err();
    assert_eq!(e.message, "Variable not found: undefined_thing");
    assert_at(e, &r.file("lib/top.rhai"), 2, 13);
}

#[test]
fn syntax_error_in_module_reports_module_position() {
    let r = refused(
        "import \"lib/broken\" as b;\n",
        &[("lib/broken.rhai", "fn ok() { 1 }\nfn bad( { }\n")],
    );
    assert_eq!(r.e.kind, ScriptErrorKind::Syntax);
    assert_eq!(r.e.file, r.file("lib/broken.rhai"));
    assert_eq!(r.e.line, Some(2));
}

#[test]
fn cyclic_imports_are_refused_at_compile_time() {
    let r = refused(
        "import \"a\" as a;\n",
        &[
            ("a.rhai", "import \"b\" as b;\n"),
            ("b.rhai", "\nimport \"a\" as a;\n"),
        ],
    );
    let p = |f: &str| r.file(f);
    assert_eq!(
        r.e.to_string(),
        format!(
            "{}:2:1: cannot import \"a\": cyclic import ({} -> {} -> {} -> {})",
            p("b.rhai"),
            p("main.rhai"),
            p("a.rhai"),
            p("b.rhai"),
            p("a.rhai")
        )
    );
}

#[test]
fn dynamic_import_is_resolved_at_run_time() {
    let r = run(
        "let name = \"lib/\" + \"dyn\";\nimport name as d;\nprint(d::X);\nlet n2 = \"nope\";\nimport n2 as n;\n",
        &[("lib/dyn.rhai", "export const X = \"dynamic\";")],
    );
    assert_eq!(r.stdout(), "dynamic\n");
    let e = r.err();
    assert_eq!(e.kind, ScriptErrorKind::Import);
    assert_eq!(e.line, Some(5));
    assert!(e.message.starts_with("cannot import \"nope\": "), "{e}");
}

#[test]
fn unknown_stdlib_module() {
    assert_eq!(
        refused("import \"skyhook/nope\" as n;", &[]).e.message,
        "cannot import \"skyhook/nope\": no embedded module named \"nope\" (available: hello, kdump, shellscript, tuned, tuning, containerd)"
    );
}

#[test]
fn every_stdlib_module_compiles() {
    let engine = ScriptEngine::default();
    for (name, source) in STDLIB {
        let store = Arc::new(ModuleStore::new("/nonexistent"));
        compile_source(&engine, &format!("stdlib/{name}.rhai"), source, store)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

// ---- compile_step -------------------------------------------------------------------

#[test]
fn syntax_error_position() {
    let r = refused("let x = 1;\nlet y = ;\n", &[]);
    assert_eq!(r.e.kind, ScriptErrorKind::Syntax);
    assert_at(&r.e, &r.main(), 2, 9);
}

#[test]
fn missing_import_fails_before_running() {
    let r = refused(
        "print(\"side effect\");\nfn f() {\n    import \"lib/missing\" as m;\n}\n",
        &[],
    );
    let e = &r.e;
    assert_eq!(e.kind, ScriptErrorKind::Import);
    assert_at(e, &r.main(), 3, 5);
    let missing = r.file("lib/missing.rhai");
    assert!(
        e.message
            .starts_with(&format!("cannot import \"lib/missing\": {missing}: ")),
        "{e}"
    );
}

#[test]
fn unreadable_script_is_an_io_error() {
    let engine = ScriptEngine::default();
    let dir = tempfile::tempdir().unwrap();
    let e = compile_step(&engine, &dir.path().join("nope.rhai"), dir.path()).unwrap_err();
    assert_eq!(e.kind, ScriptErrorKind::Io);
    assert_eq!(
        e.to_string(),
        format!(
            "{}: cannot read script: No such file or directory (os error 2)",
            dir.path().join("nope.rhai").display()
        )
    );
    let e = compile_step(&engine, dir.path(), dir.path()).unwrap_err();
    assert_eq!(e.kind, ScriptErrorKind::Io);
}

// ---- context ------------------------------------------------------------------------

#[test]
fn step_constant_and_function() {
    let r = run(
        "fn from_fn() { step().resource_id }\n\
         import \"lib/m\" as m;\n\
         print(step.mode);\nprint(step.is_check);\nprint(step.name);\nprint(step.args);\n\
         print(step.package_name + \" \" + step.package_version);\n\
         print(type_of(step.previous_version));\nprint(step.skyhook_dir);\nprint(step.step_root);\n\
         print(step.node_order);\nprint(step.dry_run);\nprint(from_fn());\nprint(m::order());\n\
         print(step == step());\n",
        &[("lib/m.rhai", "fn order() { step().node_order + 1 }\n")],
    );
    assert!(r.outcome.error.is_none(), "{:?}", r.outcome.error);
    assert_eq!(
        r.stdout(),
        "apply\nfalse\nmain.rhai\n[\"a\", \"b c\"]\ntuning 1.2.3\n()\n/skyhook/tuning\n\
         /skyhook/tuning/root\n2\nfalse\nnode1_tuning_1.2.3\n3\ntrue\n"
    );
}

#[test]
fn step_is_constant() {
    let r = run("step.mode = \"x\";\n", &[]);
    assert!(r.outcome.failed());
}

#[test]
fn env_lookup() {
    let r = run(
        "print(env(\"A\"));\nprint(type_of(env(\"B\")));\nprint(env(\"B\", \"dflt\"));\nprint(env(\"A\", \"dflt\"));\n",
        &[],
    );
    assert_eq!(r.stdout(), "alpha\n()\ndflt\nalpha\n");
}

// ---- output -------------------------------------------------------------------------

#[test]
fn print_debug_and_log_chunks() {
    let r = run(
        "print(\"out\");\ndebug(\"err\");\ndebug([1, \"a\"]);\nprint(42);\n\
         log::info(\"i\");\nlog::warn(\"w\");\nlog::error(`e ${1 + 1}`);\nlog::info(5);\n",
        &[],
    );
    assert!(r.outcome.error.is_none(), "{:?}", r.outcome.error);
    let chunks: Vec<(Stream, String)> = r
        .out
        .chunks()
        .into_iter()
        .map(|(s, b)| (s, String::from_utf8(b).unwrap()))
        .collect();
    use Stream::*;
    let expect = [
        (Stdout, "out\n"),
        (Stderr, "err\n"),
        (Stderr, "[1, \"a\"]\n"),
        (Stdout, "42\n"),
        (Stdout, "INFO: i\n"),
        (Stderr, "WARN: w\n"),
        (Stderr, "ERROR: e 2\n"),
        (Stdout, "INFO: 5\n"),
    ];
    let expect: Vec<(Stream, String)> = expect.iter().map(|(s, t)| (*s, t.to_string())).collect();
    assert_eq!(chunks, expect);
}

// ---- results ------------------------------------------------------------------------

#[test]
fn fail_ends_the_step_with_its_message() {
    let r = run(
        "print(\"before\");\nfn check() { fail(\"x\"); }\ntry { check(); } catch (e) { print(\"caught\"); }\nprint(\"after\");\n0\n",
        &[],
    );
    let e = r.err();
    assert!(e.is_fail());
    assert_eq!(e.kind, ScriptErrorKind::Failed);
    assert_eq!(e.message, "x");
    assert_eq!(r.outcome.code, 1);
    assert_eq!(r.stdout(), "before\n");
    assert_eq!(r.stderr(), format!("{e}\n"));
    assert!(r.stderr().ends_with(": x\n"));
}

#[test]
fn return_codes() {
    assert_eq!(run("3", &[]).outcome.code, 3);
    let r = run("let x = 1;\nif x == 1 { return 4; }\n5\n", &[]);
    assert_eq!((r.outcome.code, r.outcome.failed()), (4, false));
    let r = run("\"done\"", &[]);
    assert_eq!((r.outcome.code, r.outcome.failed()), (0, false));
    let r = run("let x = 1;", &[]);
    assert_eq!((r.outcome.code, r.outcome.failed()), (0, false));
    let r = run("throw \"no\";\n", &[]);
    assert_eq!((r.outcome.code, r.outcome.failed()), (1, true));
    assert_eq!(r.err().to_string(), format!("{}:1:1: no", r.main()));
    let r = run("5000000000", &[]);
    assert_eq!((r.outcome.code, r.outcome.failed()), (1, true));
    assert_eq!(
        r.err().message,
        "script returned 5000000000, which is not a valid return code"
    );
}

/// A host with one function and a change counter, as the host layer will plug in.
struct TestHost {
    changes: std::sync::atomic::AtomicI64,
}

impl ScriptHost for TestHost {
    fn register(&self, engine: &mut Engine, run: &RunHandle) -> RunBinding {
        let mut m = rhai::Module::new();
        let left = run.deadline.saturating_duration_since(Instant::now());
        m.set_native_fn("remaining_ok", move || Ok(left > Duration::from_secs(1)));
        m.set_native_fn(
            "refuse",
            |ctx: rhai::NativeCallContext, p: &str| -> Result<bool, Box<rhai::EvalAltResult>> {
                Err(host_error(&ctx, format!("failed to write {p}: denied")))
            },
        );
        engine.register_static_module("fs", m.into());
        RunBinding::none()
    }
    fn changed(&self) -> i64 {
        self.changes.fetch_add(1, Ordering::SeqCst) + 1
    }
}

#[test]
fn host_bindings_and_changed() {
    let host = Arc::new(TestHost { changes: 0.into() });
    let r = run_opts(
        Limits::default(),
        "print(fs::remaining_ok());\nprint(changed());\nprint(changed());\n\n  fs::refuse(\"/etc/x\");\n",
        &[],
        |o| o.host = host.clone(),
    );
    assert_eq!(r.stdout(), "true\n1\n2\n");
    let e = r.err();
    assert_eq!(e.kind, ScriptErrorKind::Runtime);
    assert_eq!(
        e.to_string(),
        format!("{}:5:7: failed to write /etc/x: denied", r.main())
    );
}

#[test]
fn changed_without_host_is_zero() {
    assert_eq!(run("changed()", &[]).outcome.code, 0);
}

#[test]
fn engine_is_shared_across_threads() {
    let engine = Arc::new(ScriptEngine::default());
    let dir = tempfile::tempdir().unwrap();
    let script = compile_main(
        &engine,
        dir.path(),
        "import \"skyhook/hello\" as h;\nh::greet(\"x\").len()",
    );
    let script = Arc::new(script.unwrap());
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (engine, script) = (engine.clone(), script.clone());
            std::thread::spawn(move || {
                let o = run_compiled(&engine, &script);
                (o.code, o.error.map(|e| e.to_string()))
            })
        })
        .collect();
    for h in handles {
        let (code, err) = h.join().unwrap();
        assert_eq!(
            (code, err),
            ("hello, x (from main.rhai)".len() as i32, None)
        );
    }
}

/// Per-run overhead of a trivial script through `run_script` (context setup, engine
/// assembly, script thread, evaluation). Run with
/// `cargo test --release --lib script::tests::bench_trivial_run_overhead -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_trivial_run_overhead() {
    let engine = ScriptEngine::default();
    let dir = tempfile::tempdir().unwrap();
    let script = compile_main(&engine, dir.path(), "let x = 1;").unwrap();
    let c = ctx();
    let cancel = crate::process::Cancel::new();
    let mut times = Vec::with_capacity(1000);
    for _ in 0..1100 {
        let out = Arc::new(CaptureOutput::new());
        let t = Instant::now();
        let o = run_script(&engine, &script, &c, out, cancel.clone());
        times.push(t.elapsed());
        assert!(!o.failed());
    }
    let mut times = times.split_off(100);
    times.sort();
    println!(
        "trivial run_script over {} runs: median {:?}, p90 {:?}, max {:?}",
        times.len(),
        times[times.len() / 2],
        times[times.len() * 9 / 10],
        times[times.len() - 1]
    );
}

/// A host whose binding panics: the run fails, the process survives.
struct PanickingHost;

impl ScriptHost for PanickingHost {
    fn register(&self, engine: &mut Engine, _run: &RunHandle) -> RunBinding {
        engine.register_fn("explode", || -> i64 { panic!("binding bug") });
        RunBinding::none()
    }
    fn changed(&self) -> i64 {
        0
    }
}

#[test]
fn a_panicking_binding_fails_the_step_only() {
    let r = run_opts(Limits::default(), "print(1);\nexplode()\n", &[], |o| {
        o.host = Arc::new(PanickingHost);
    });
    let e = r.err();
    assert_eq!(e.kind, ScriptErrorKind::Internal);
    assert_eq!(
        e.to_string(),
        format!("{}: script runtime panicked: binding bug", r.main())
    );
    assert_eq!(r.outcome.code, 1);
    assert_eq!(r.stdout(), "1\n");
}
