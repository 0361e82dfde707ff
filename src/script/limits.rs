//! The resource limits of one script run ([`Limits`]): what the engine applies
//! ([`super::engine`]) and what a limit error names ([`super::errors::Limit`]).

use std::time::Duration;

/// The environment variable that overrides [`Limits::timeout`], in whole seconds.
pub const TIMEOUT_ENV: &str = "SKYHOOK_SCRIPT_TIMEOUT";

/// Resource limits of a script run. Every field is applied explicitly to the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Rhai operations per run (statements, expressions, loop iterations), module
    /// evaluation included. Default 5,000,000: under a second of pure script work in a
    /// release build. Measured: every shipped stdlib module and `examples/` package step
    /// (the stdlib and `skyhook-run` test suites) runs within 20,000 operations, so the
    /// margin is 250 times. It is also what bounds a map grown by `m[k] = v` in a loop
    /// (see [`Limits::max_map_size`]): about 11 operations per new key, so at most ~450,000
    /// keys, ~40 MB, where the former 100,000,000 let such a loop reach 600 MB.
    pub max_operations: u64,
    /// Nested calls of script functions, closures and function pointers. Default 64.
    pub max_call_levels: usize,
    /// Nesting depth of expressions at the top level (parse time). Default 64.
    pub max_expr_depth: usize,
    /// Nesting depth of expressions inside function bodies (parse time). Default 32.
    pub max_function_expr_depth: usize,
    /// Length of one string in bytes. Default 32 MiB (a large configuration file).
    pub max_string_size: usize,
    /// Elements of one array. Default 50,000 (a file of 50,000 lines split into lines fits).
    /// Rhai re-measures an array on every `push`, so growing one element by element costs
    /// quadratic time: 50,000 pushes take about 0.5 s in a release build, where the former
    /// limit of 1,000,000 was never reached before the deadline.
    pub max_array_size: usize,
    /// Properties of one object map. Default 100,000. Rhai 1.27 checks it when a map is built,
    /// merged (`+=`, `mixin`) or stored in another value, not when `m[k] = v` adds a property;
    /// such growth is bounded by [`Limits::max_operations`] until the next check, and its
    /// bytes (keys, which Rhai never measures, included) by [`Limits::max_memory`].
    pub max_map_size: usize,
    /// Modules imported per run (every `import` executed counts). Default 64.
    pub max_modules: usize,
    /// Variables in scope at any instant. Default 10,000.
    pub max_variables: usize,
    /// Script functions defined in one script or module (parse time). Default 1,000.
    pub max_functions: usize,
    /// Bytes of memory one run may hold, all values together. Default 256 MiB.
    ///
    /// Measured by the allocator, not estimated from values ([`crate::script::memory`]): the
    /// bytes allocated and not yet freed by the run's thread since the run started, checked
    /// before every Rhai operation. So it counts what Rhai's size limits do not see (map
    /// keys, many variables, call frames, captured values, host call results, planned
    /// writes) and counts a string shared by several values once. A run may overshoot by
    /// what one operation allocates (one host call: at most a
    /// [`MAX_READ_BYTES`](crate::host::files::fs::MAX_READ_BYTES) file or two
    /// [`CAPTURE_LIMIT`](crate::host::system::cmd::CAPTURE_LIMIT) command streams; one string
    /// operation: about two [`Limits::max_string_size`]). 256 MiB is eight times the largest
    /// string and ten thousand times what the shipped modules use (under 1 MiB), and keeps a
    /// runaway step well below the memory of the smallest node.
    pub max_memory: usize,
    /// Bytes of output one run may write through `print`, `debug` and `log::` (both streams
    /// together, prefixes and newlines included). Default 64 MiB: a thousand times what the
    /// shipped modules print, twice the largest string; a step's logs and the console stay
    /// bounded whatever the script prints. Beyond it the run stops (see
    /// [`crate::script::output`]); output of commands run with `stream: true` is not counted.
    pub max_output: usize,
    /// Wall-clock deadline of one run when the run gives none ([`ScriptRunOptions::timeout`]:
    /// the agent and `skyhook-run` pass the run's `SKYHOOK_SCRIPT_TIMEOUT`). Default 600 s.
    ///
    /// [`ScriptRunOptions::timeout`]: crate::step::ScriptRunOptions::timeout
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_operations: 5_000_000,
            max_call_levels: 64,
            max_expr_depth: 64,
            max_function_expr_depth: 32,
            max_string_size: 32 * 1024 * 1024,
            max_array_size: 50_000,
            max_map_size: 100_000,
            max_modules: 64,
            max_variables: 10_000,
            max_functions: 1_000,
            max_memory: 256 << 20,
            max_output: 64 << 20,
            timeout: Duration::from_secs(600),
        }
    }
}
