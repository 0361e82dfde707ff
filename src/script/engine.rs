//! The Rhai engine: packages, limits, `eval` off, and the per-run hooks.
//!
//! [`ScriptEngine`] is built once (the package modules are built once, on first use, and
//! shared) and is immutable afterwards; share it as `Arc<ScriptEngine>` (a clone shares the frozen parts
//! too). Each run gets its own `rhai::Engine`, assembled from the frozen parts in a few
//! microseconds, because the hooks that differ per run (the output sink, the deadline and
//! cancel flag in `on_progress`, `step()`, `env()`) are closures that Rhai stores in the
//! engine itself; the host modules are built once and installed shared
//! (`crate::script::host_api`). A per-run engine also means concurrent runs share nothing
//! mutable.
//!
//! # Packages
//!
//! The engine starts from `Engine::new_raw()` (no functions at all) and gets only:
//!
//! | package | why |
//! |---|---|
//! | `CorePackage` | operators, `type_of`, ranges and iterators for `for` loops, `Fn`/`call`/`curry`, basic strings, `print`/`debug` formatting |
//! | `LogicPackage` | comparisons, `min`/`max` across number types |
//! | `MoreStringPackage` | `split`, `trim`, `contains`, `replace`, `sub_string`, `pad`, ...: scripts edit config text |
//! | `BasicArrayPackage` | `push`, `sort`, `filter`, `map`, `join`, ...: lines, argument lists |
//! | `BasicMapPackage` | `keys`, `values`, `contains`, merging: host API results and configMap key/values |
//! | `BasicMathPackage` | `parse_int`, `parse_float`, `to_int`, `abs`, rounding: numbers read from files |
//! | `BasicTimePackage` | `timestamp()` / `elapsed`: measuring waits inside a step |
//!
//! Left out: `BitFieldPackage` and `BasicBlobPackage` (no host API takes bits or blobs) and
//! the debugging package. Nothing in these packages touches files, processes or the
//! network; every such capability comes from the host bindings.
//!
//! # Limits
//!
//! Every limit is set explicitly ([`Limits`]): Rhai's defaults differ between debug and
//! release builds. Parse-time limits (expression depth, number of functions, string literal
//! size) are enforced by [`compile_step`](super::compile_step); the rest while running.
//! On top of Rhai's limits, the run's memory ([`Limits::max_memory`]) and output
//! ([`Limits::max_output`]) are checked in `on_progress` before every operation, and a
//! wall-clock deadline and a cancel flag every [`PROGRESS_CHECK_EVERY`] operations. A blocking host call does not
//! tick `on_progress`; host calls keep their own timeouts (commands default to what remains
//! of the deadline, see [`RunHandle::deadline`](super::RunHandle)).

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use rhai::packages::{
    BasicArrayPackage, BasicMapPackage, BasicMathPackage, BasicTimePackage, CorePackage,
    LogicPackage, MoreStringPackage, Package,
};
use rhai::{Dynamic, Engine, OptimizationLevel, Shared};

use super::errors::Stop;
use super::limits::Limits;
use super::memory;
use super::output::CappedOutput;

/// How often (in Rhai operations) `on_progress` looks at the clock and the cancel flag:
/// often enough to stop a tight loop within microseconds of the deadline, rarely enough
/// that reading the clock costs nothing measurable.
pub const PROGRESS_CHECK_EVERY: u64 = 256;

/// The script engine: limits and package modules, frozen. Cheap to share (`Arc`, or a
/// clone, which shares the frozen parts), safe to use from several threads at once.
#[derive(Clone)]
pub struct ScriptEngine {
    parts: Arc<Parts>,
}

/// What every clone of a [`ScriptEngine`] shares: the limits, and the rest built on first
/// use ([`ScriptEngine::built`]), so a run with no `.rhai` step builds no engine.
struct Parts {
    limits: Limits,
    built: OnceLock<Built>,
}

/// The package modules and the parse-only engine.
struct Built {
    packages: Vec<Shared<rhai::Module>>,
    /// Parse-only engine: same symbols, limits and optimisation as run engines.
    compiler: Engine,
}

impl std::fmt::Debug for ScriptEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptEngine")
            .field("limits", &self.parts.limits)
            .finish_non_exhaustive()
    }
}

impl Default for ScriptEngine {
    fn default() -> Self {
        ScriptEngine::new(Limits::default())
    }
}

impl ScriptEngine {
    /// The engine with `limits`. The package modules (about a millisecond) and the
    /// parse-only engine are built on first use: the first compile or run.
    pub fn new(limits: Limits) -> Self {
        ScriptEngine {
            parts: Arc::new(Parts {
                limits,
                built: OnceLock::new(),
            }),
        }
    }

    /// The package modules and the parse-only engine, built on the first call.
    fn built(&self) -> &Built {
        self.parts.built.get_or_init(|| {
            let packages = vec![
                CorePackage::new().as_shared_module(),
                LogicPackage::new().as_shared_module(),
                MoreStringPackage::new().as_shared_module(),
                BasicArrayPackage::new().as_shared_module(),
                BasicMapPackage::new().as_shared_module(),
                BasicMathPackage::new().as_shared_module(),
                BasicTimePackage::new().as_shared_module(),
            ];
            let mut compiler = Engine::new_raw();
            configure(&self.parts.limits, &packages, &mut compiler);
            Built { packages, compiler }
        })
    }

    /// Whether the package modules and the parse-only engine were built (a compile or a
    /// run happened).
    pub fn is_built(&self) -> bool {
        self.parts.built.get().is_some()
    }

    /// The limits runs are held to.
    pub fn limits(&self) -> &Limits {
        &self.parts.limits
    }

    /// The parse-only engine used by [`compile_step`](super::compile_step) and the module
    /// resolver.
    pub(crate) fn compiler(&self) -> &Engine {
        &self.built().compiler
    }

    /// A fresh engine for one run: the frozen configuration plus the memory, output,
    /// deadline and cancel hook. Call it on the thread that runs the script: the run's memory
    /// is what that thread holds beyond what it held here ([`memory::thread_net`]). `output`
    /// is the run's capped output, which the caller hooks up with the per-run functions
    /// (output, context, host bindings, resolver).
    pub(crate) fn run_engine(
        &self,
        deadline: Instant,
        cancel: crate::process::Cancel,
        output: Arc<CappedOutput>,
    ) -> Engine {
        let mut engine = Engine::new_raw();
        configure(&self.parts.limits, &self.built().packages, &mut engine);
        let base = memory::thread_net();
        let max_memory = isize::try_from(self.parts.limits.max_memory).unwrap_or(isize::MAX);
        engine.on_progress(move |ops| {
            // One thread-local read: cheap enough for every operation, and a loop allocating
            // a large string per operation cannot get far past the limit.
            if memory::thread_net().saturating_sub(base) > max_memory {
                return Some(Dynamic::from(Stop::Memory));
            }
            if output.exceeded() {
                return Some(Dynamic::from(Stop::Output));
            }
            if ops % PROGRESS_CHECK_EVERY != 0 {
                return None;
            }
            if cancel.is_aborted() {
                return Some(Dynamic::from(Stop::Cancelled));
            }
            if Instant::now() >= deadline {
                return Some(Dynamic::from(Stop::Deadline));
            }
            None
        });
        engine
    }
}

/// Everything that is the same for every engine: packages, limits, `eval` off, the names of
/// Rhai's own types ([`name_builtin_types`]).
fn configure(limits: &Limits, packages: &[Shared<rhai::Module>], engine: &mut Engine) {
    for p in packages {
        engine.register_global_module(p.clone());
    }
    name_builtin_types(engine);
    let l = limits;
    engine
        .set_max_operations(l.max_operations)
        .set_max_call_levels(l.max_call_levels)
        .set_max_expr_depths(l.max_expr_depth, l.max_function_expr_depth)
        .set_max_string_size(l.max_string_size)
        .set_max_array_size(l.max_array_size)
        .set_max_map_size(l.max_map_size)
        .set_max_modules(l.max_modules)
        .set_max_variables(l.max_variables)
        .set_max_functions(l.max_functions)
        .set_optimization_level(OptimizationLevel::Simple)
        // `m.key` / `m["key"]` of a missing key is an error at its position, not `()`.
        .set_fail_on_invalid_map_property(true);
    // `eval` would run code that compile_step never saw; as a disabled symbol it is a
    // parse error wherever it appears.
    engine.disable_symbol("eval");
}

/// Register on the engine's own namespace the names scripts see for Rhai's own value types
/// (`string`, `array`, `i64`, ...: what `type_of` and error messages show), as Rhai maps
/// them already. Rhai maps a value's type to its name on every method-style call of a name
/// a script function could have (`s.trim()`, `a.push(x)`: its typed method hash), asking
/// each global and static module in turn (the ~30 host namespaces) for a custom type of that
/// name and, when none has one, its own table; with the names on the engine's namespace,
/// the first module asked answers (about 5 % of the gke port's plan, issue 31).
fn name_builtin_types(engine: &mut Engine) {
    let types = [
        "()",
        "bool",
        "string",
        "char",
        "i64",
        "f64",
        "array",
        "blob",
        "map",
        "Fn",
        "timestamp",
        std::any::type_name::<std::ops::Range<rhai::INT>>(),
        std::any::type_name::<std::ops::RangeInclusive<rhai::INT>>(),
    ];
    for t in types {
        let shown = engine.map_type_name(t).to_string();
        engine.register_type_with_name_raw(t, shown);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn every_limit_is_applied() {
        let limits = Limits {
            max_operations: 11,
            max_call_levels: 12,
            max_expr_depth: 13,
            max_function_expr_depth: 14,
            max_string_size: 15,
            max_array_size: 16,
            max_map_size: 17,
            max_modules: 18,
            max_variables: 19,
            max_functions: 20,
            max_memory: 21,
            max_output: 22,
            timeout: Duration::from_secs(1),
        };
        let se = ScriptEngine::new(limits);
        for e in [
            se.compiler(),
            &se.run_engine(
                Instant::now(),
                crate::process::Cancel::new(),
                Arc::new(CappedOutput::new(
                    Arc::new(crate::script::CaptureOutput::new()),
                    1,
                )),
            ),
        ] {
            assert_eq!(e.max_operations(), 11);
            assert_eq!(e.max_call_levels(), 12);
            assert_eq!(e.max_expr_depth(), 13);
            assert_eq!(e.max_function_expr_depth(), 14);
            assert_eq!(e.max_string_size(), 15);
            assert_eq!(e.max_array_size(), 16);
            assert_eq!(e.max_map_size(), 17);
            assert_eq!(e.max_modules(), 18);
            assert_eq!(e.max_variables(), 19);
            assert_eq!(e.max_functions(), 20);
        }
    }

    /// The packages and the parse-only engine are built on first use only: a run with no
    /// `.rhai` step builds none (issue 31, start-up item 2).
    #[test]
    fn the_engine_is_built_on_first_use() {
        let se = ScriptEngine::default();
        let shared = se.clone();
        assert_eq!(se.limits().max_operations, Limits::default().max_operations);
        assert!(!se.is_built());
        let _ = shared.compiler();
        assert!(se.is_built());
    }

    /// Run `src` with the default limits; the error message and how long it took.
    /// The error of running `src` with the default limits (the named limit, not the 600 s
    /// deadline, must end it; how long that takes is a benchmark question).
    fn run_default(src: &str) -> Option<String> {
        use crate::script::{CaptureOutput, ModuleStore, StepContext, compile_source};
        use crate::step::{ScriptRunOptions, run_script_with};
        let engine = ScriptEngine::default();
        let d = tempfile::tempdir().unwrap();
        let store = Arc::new(ModuleStore::new(d.path()));
        let script = compile_source(&engine, "grow.rhai", src, store).unwrap();
        let opts = ScriptRunOptions::new(
            Arc::new(CaptureOutput::new()),
            crate::process::Cancel::new(),
        );
        let r = run_script_with(&engine, &script, &StepContext::default(), &opts);
        r.error.map(|e| e.to_string())
    }

    /// The names scripts see for Rhai's own types, in `type_of` and in a missing
    /// function's signature, are Rhai's (`name_builtin_types` registers them as Rhai maps
    /// them).
    #[test]
    fn builtin_types_keep_their_names() {
        let err = run_default(
            "let f = Fn(\"x\");\nlet t = timestamp();\n\
             throw [type_of(()), type_of(true), type_of(\"s\"), type_of('c'), type_of(1),\n\
             type_of(1.5), type_of([]), type_of(#{}), type_of(f), type_of(t), type_of(0..2),\n\
             type_of(0..=2)];\n",
        );
        assert_eq!(
            err.as_deref(),
            Some(
                "grow.rhai:3:1: [\"()\", \"bool\", \"string\", \"char\", \"i64\", \"f64\", \"array\", \"map\", \"Fn\", \"timestamp\", \"range\", \"range=\"]"
            )
        );
        let err = run_default("let a = [1];\na.nope(2.0, #{}, ());\n").unwrap();
        assert!(err.contains("nope (array, f64, map, ())"), "{err}");
    }

    /// Pushing to an array in an endless loop hits the array limit (about 3 s in a debug
    /// build, 0.5 s in release), not the 600 s deadline.
    #[test]
    fn endless_push_stops_at_the_array_limit() {
        let err = run_default("let a = [];\nloop { a.push(1); }\n");
        assert_eq!(
            err.as_deref(),
            Some("grow.rhai:2:10: array size limit exceeded (max_array_size = 50000 elements)")
        );
    }

    /// Adding map keys in an endless loop (which Rhai does not size-check) hits the
    /// operations limit (about 6 s in a debug build, under 1 s in release).
    #[test]
    fn endless_map_growth_stops_at_the_operations_limit() {
        let err = run_default("let m = #{};\nlet i = 0;\nloop { m[`k${i}`] = i; i += 1; }\n");
        let err = err.unwrap();
        assert!(
            err.ends_with("operations limit exceeded (max_operations = 5000000)"),
            "{err}"
        );
    }
}
