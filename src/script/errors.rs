//! Script errors: every failure of a `.rhai` step, mapped from Rhai's `EvalAltResult` and
//! `ParseError` to one shape that renders as `file:line:col: message`.
//!
//! Rhai reports a position without a file; the file comes from the error chain: an error
//! raised inside a function defined in an imported module is wrapped in
//! `ErrorInFunctionCall` carrying that module's source name, and our resolver wraps errors
//! raised while loading a module in `ErrorInModule` with the module's file. [`ScriptError`]
//! follows the chain to the innermost error and reports that error's own file and position.

use std::fmt;
use std::time::Duration;

use rhai::{Dynamic, EvalAltResult, NativeCallContext, ParseError, ParseErrorType, Position};

use crate::host::api::{host_fns, script_fn};

use super::limits::Limits;

/// A failed step script: where (file, line, column) and what.
///
/// `Display` renders `file:line:col: message`, or `file: message` when Rhai gave no position
/// (an unreadable file, an internal failure). `file` is the script's path as given to
/// [`compile_step`](super::compile_step), an imported module's path under the base
/// directory, or `stdlib/<name>.rhai` for an embedded module.
#[derive(Debug, thiserror::Error)]
pub struct ScriptError {
    /// The file the error is in.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// What kind of failure this is (a limit, `fail()`, a syntax error, ...).
    pub kind: ScriptErrorKind,
    /// The message, lowercase where it is ours; Rhai's own messages are kept as Rhai words
    /// them (`Variable not found: x`).
    pub message: String,
    /// The underlying cause, when there is one outside Rhai (an I/O error).
    #[source]
    pub source: Option<std::io::Error>,
}

/// The kind of a [`ScriptError`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScriptErrorKind {
    /// The script or a module does not parse.
    Syntax,
    /// An uncaught runtime error (`throw`, a type error, a host API error, ...).
    Runtime,
    /// The script called `fail(msg)`; the message is `msg` exactly.
    Failed,
    /// A resource limit was hit (see [`Limit`]).
    Limit(Limit),
    /// The step's wall-clock deadline passed.
    Timeout,
    /// The step was cancelled (the cancel flag was set).
    Cancelled,
    /// An `import` could not be resolved (unknown stdlib module, missing file, a path that
    /// tries to leave the base directory, a cyclic import).
    Import,
    /// The script file could not be read.
    Io,
    /// The Rhai runtime panicked or the script thread could not be started. Never expected;
    /// kept so that such a bug fails the step instead of the agent.
    Internal,
    /// Plan mode: a host call read what a command planned before it in the step may have
    /// changed ([`crate::host::api::PlanUnknown`]). The plan of the step ends there; not a
    /// failure (the message says which call and which command).
    PlanUnknown,
}

/// A resource limit of the script engine, named after its field in [`Limits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`Limits::max_operations`].
    Operations,
    /// [`Limits::max_call_levels`] (functions, closures and function pointers).
    CallLevels,
    /// [`Limits::max_expr_depth`] / [`Limits::max_function_expr_depth`] (parse time).
    ExprDepth,
    /// [`Limits::max_string_size`].
    StringSize,
    /// [`Limits::max_array_size`].
    ArraySize,
    /// [`Limits::max_map_size`].
    MapSize,
    /// [`Limits::max_modules`].
    Modules,
    /// [`Limits::max_variables`].
    Variables,
    /// [`Limits::max_functions`] (parse time).
    Functions,
    /// [`Limits::max_memory`].
    Memory,
    /// [`Limits::max_output`].
    Output,
}

impl Limit {
    /// The limit's name as it appears in messages (the [`Limits`] field name).
    pub fn name(self) -> &'static str {
        match self {
            Limit::Operations => "max_operations",
            Limit::CallLevels => "max_call_levels",
            Limit::ExprDepth => "max_expr_depth",
            Limit::StringSize => "max_string_size",
            Limit::ArraySize => "max_array_size",
            Limit::MapSize => "max_map_size",
            Limit::Modules => "max_modules",
            Limit::Variables => "max_variables",
            Limit::Functions => "max_functions",
            Limit::Memory => "max_memory",
            Limit::Output => "max_output",
        }
    }

    /// The message for this limit with the configured values, e.g.
    /// `operations limit exceeded (max_operations = 5000000)`.
    pub fn message(self, limits: &Limits) -> String {
        match self {
            Limit::Operations => format!(
                "operations limit exceeded (max_operations = {})",
                limits.max_operations
            ),
            Limit::CallLevels => format!(
                "call depth limit exceeded: too deep recursion through functions, closures or \
                 function pointers (max_call_levels = {})",
                limits.max_call_levels
            ),
            Limit::ExprDepth => format!(
                "expression nesting limit exceeded (max_expr_depth = {}, {} in functions)",
                limits.max_expr_depth, limits.max_function_expr_depth
            ),
            Limit::StringSize => format!(
                "string size limit exceeded (max_string_size = {} bytes)",
                limits.max_string_size
            ),
            Limit::ArraySize => format!(
                "array size limit exceeded (max_array_size = {} elements)",
                limits.max_array_size
            ),
            Limit::MapSize => format!(
                "map size limit exceeded (max_map_size = {} properties)",
                limits.max_map_size
            ),
            Limit::Modules => format!(
                "module limit exceeded (max_modules = {} imports per run)",
                limits.max_modules
            ),
            Limit::Variables => format!(
                "variable limit exceeded (max_variables = {})",
                limits.max_variables
            ),
            Limit::Functions => format!(
                "function limit exceeded (max_functions = {})",
                limits.max_functions
            ),
            Limit::Memory => format!(
                "memory limit exceeded: the script holds more than {} (max_memory)",
                fmt_bytes(limits.max_memory)
            ),
            Limit::Output => format!(
                "output limit exceeded: the script wrote more than {} with print, debug and \
                 log:: (max_output)",
                fmt_bytes(limits.max_output)
            ),
        }
    }
}

/// Why a script was stopped from outside the normal error path: the token carried by
/// `ErrorTerminated`, which Rhai never lets `try`/`catch` intercept.
#[derive(Debug, Clone)]
pub(crate) enum Stop {
    /// `fail(msg)` was called: the message, and the file (the AST's source name: the script
    /// or module) and position of the call. The location travels in the token because Rhai
    /// does not wrap a termination in the call/module errors that carry positions.
    Fail(String, Option<(String, Position)>),
    /// The wall-clock deadline passed.
    Deadline,
    /// The cancel flag was set.
    Cancelled,
    /// The run holds more memory than [`Limits::max_memory`].
    Memory,
    /// The run wrote more output than [`Limits::max_output`].
    Output,
}

script_fn! {
    /// End the step as failed with `msg` at this position; it cannot be caught by
    /// `try`/`catch`.
    #[script(ns = "", effects = Computes)]
    fn fail(ctx: NativeCallContext; msg: Dynamic) -> Result<(), Box<EvalAltResult>> as "()" {
        let text = match msg.clone().into_immutable_string() {
            Ok(s) => s.to_string(),
            Err(_) => msg.to_string(),
        };
        let at = Some((
            ctx.call_source().unwrap_or_default().to_string(),
            ctx.call_position(),
        ));
        Err(Box::new(EvalAltResult::ErrorTerminated(
            Dynamic::from(Stop::Fail(text, at)),
            Position::NONE,
        )))
    }
}

host_fns!(SCRIPT_FNS: fail);

impl ScriptError {
    /// A new error with no position and no source.
    pub fn new(file: impl Into<String>, kind: ScriptErrorKind, message: impl Into<String>) -> Self {
        ScriptError {
            file: file.into(),
            line: None,
            column: None,
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Set the position from a Rhai position (no-op for `Position::NONE`).
    pub(crate) fn at(mut self, pos: Position) -> Self {
        self.line = pos.line();
        self.column = pos.position();
        self
    }

    /// Map a parse error of `file`.
    pub(crate) fn from_parse(file: &str, err: &ParseError, limits: &Limits) -> Self {
        let (kind, message) = match err.err_type() {
            ParseErrorType::ExprTooDeep => (
                ScriptErrorKind::Limit(Limit::ExprDepth),
                Limit::ExprDepth.message(limits),
            ),
            ParseErrorType::TooManyFunctions => (
                ScriptErrorKind::Limit(Limit::Functions),
                Limit::Functions.message(limits),
            ),
            other => classify_parse(other, limits),
        };
        ScriptError::new(file, kind, message).at(err.position())
    }

    /// Map a runtime error raised while running `file` (the main script).
    pub(crate) fn from_eval(file: &str, err: Box<EvalAltResult>, limits: &Limits) -> Self {
        let mut file = file.to_string();
        // The innermost known position and the file it belongs to: a wrapper's position is
        // in the file that was current *before* descending into it.
        let mut fallback: Option<(String, Position)> = None;
        let mut leaf = err;
        loop {
            leaf = match *leaf {
                EvalAltResult::ErrorInFunctionCall(_, src, inner, pos) => {
                    if !pos.is_none() {
                        fallback = Some((file.clone(), pos));
                    }
                    if !src.is_empty() {
                        file = src;
                    }
                    inner
                }
                EvalAltResult::ErrorInModule(path, inner, pos) => {
                    if !pos.is_none() {
                        fallback = Some((file.clone(), pos));
                    }
                    file = path;
                    inner
                }
                other => Box::new(other),
            };
            if !matches!(
                *leaf,
                EvalAltResult::ErrorInFunctionCall(..) | EvalAltResult::ErrorInModule(..)
            ) {
                break;
            }
        }
        let mut pos = leaf.position();
        if let EvalAltResult::ErrorTerminated(token, _) = &*leaf
            && let Some(Stop::Fail(_, Some((src, at)))) = token.clone().try_cast::<Stop>()
        {
            if !src.is_empty() {
                file = src;
            }
            pos = at;
        }
        let (kind, message) = classify(leaf, limits);
        if pos.is_none()
            && let Some((f, p)) = fallback
        {
            return ScriptError::new(f, kind, message).at(p);
        }
        ScriptError::new(file, kind, message).at(pos)
    }

    /// True when the script ended through `fail(msg)`.
    pub fn is_fail(&self) -> bool {
        self.kind == ScriptErrorKind::Failed
    }
}

/// Which size limit Rhai's description of a too-large value (`Length of string`, `Size of
/// array/BLOB`, `Size of object map`, and the literal variants) refers to.
fn data_limit(what: &str) -> Option<Limit> {
    let what = what.to_ascii_lowercase();
    if what.contains("string") {
        Some(Limit::StringSize)
    } else if what.contains("array") || what.contains("blob") {
        Some(Limit::ArraySize)
    } else if what.contains("map") {
        Some(Limit::MapSize)
    } else {
        None
    }
}

fn classify_parse(t: &ParseErrorType, limits: &Limits) -> (ScriptErrorKind, String) {
    let limit = |l: Limit| (ScriptErrorKind::Limit(l), l.message(limits));
    match t {
        ParseErrorType::ExprTooDeep => limit(Limit::ExprDepth),
        ParseErrorType::TooManyFunctions => limit(Limit::Functions),
        ParseErrorType::LiteralTooLarge(what, _) => match data_limit(what) {
            Some(l) => limit(l),
            None => (ScriptErrorKind::Syntax, t.to_string()),
        },
        other => (ScriptErrorKind::Syntax, other.to_string()),
    }
}

fn classify(mut err: Box<EvalAltResult>, limits: &Limits) -> (ScriptErrorKind, String) {
    let limit = |l: Limit| (ScriptErrorKind::Limit(l), l.message(limits));
    match &*err {
        EvalAltResult::ErrorParsing(t, _) => classify_parse(t, limits),
        EvalAltResult::ErrorTooManyOperations(_) => limit(Limit::Operations),
        EvalAltResult::ErrorStackOverflow(_) => limit(Limit::CallLevels),
        EvalAltResult::ErrorTooManyModules(_) => limit(Limit::Modules),
        EvalAltResult::ErrorTooManyVariables(_) => limit(Limit::Variables),
        EvalAltResult::ErrorDataTooLarge(what, _) => match data_limit(what) {
            Some(l) => limit(l),
            None => (ScriptErrorKind::Runtime, format!("{what} too large")),
        },
        EvalAltResult::ErrorTerminated(token, _) => match token.clone().try_cast::<Stop>() {
            Some(Stop::Fail(msg, _)) => (ScriptErrorKind::Failed, msg),
            Some(Stop::Deadline) => (
                ScriptErrorKind::Timeout,
                format!(
                    "step deadline exceeded ({}; SKYHOOK_SCRIPT_TIMEOUT)",
                    fmt_duration(limits.timeout)
                ),
            ),
            Some(Stop::Cancelled) => (ScriptErrorKind::Cancelled, "step cancelled".to_string()),
            Some(Stop::Memory) => limit(Limit::Memory),
            Some(Stop::Output) => limit(Limit::Output),
            None => match token.clone().try_cast::<crate::host::api::PlanUnknown>() {
                Some(u) => (ScriptErrorKind::PlanUnknown, u.message),
                None => (ScriptErrorKind::Runtime, "script terminated".to_string()),
            },
        },
        // Our resolver puts the whole message (`cannot import "x": reason`) in the path.
        EvalAltResult::ErrorModuleNotFound(text, _) => (ScriptErrorKind::Import, text.clone()),
        // `m.key` / `m["key"]` of a missing key (the engine fails on it instead of `()`).
        EvalAltResult::ErrorPropertyNotFound(p, _) => (
            ScriptErrorKind::Runtime,
            format!(
                "Property not found: {p} (the map has no such key: test it with `{p:?} in m`, \
                 or read it with `m.get({p:?})`, which is () when missing)"
            ),
        ),
        EvalAltResult::ErrorRuntime(value, _) => match value.clone().try_cast::<ImportFailure>() {
            Some(ImportFailure(msg)) => (ScriptErrorKind::Import, msg),
            None => (ScriptErrorKind::Runtime, runtime_text(value)),
        },
        _ => {
            err.clear_position();
            (ScriptErrorKind::Runtime, err.to_string())
        }
    }
}

/// A thrown value as text: strings as they are (`throw "x"` reads `x`), other values in
/// Rhai's display form.
fn runtime_text(value: &Dynamic) -> String {
    if value.is_string() {
        value.clone().into_string().unwrap_or_default()
    } else {
        value.to_string()
    }
}

/// `256 MiB` for whole MiB, else `1000 bytes`.
pub(crate) fn fmt_bytes(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

/// `600 s`, `0.2 s`.
pub(crate) fn fmt_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} s", d.as_secs_f64())
    }
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "{}:{l}:{c}: {}", self.file, self.message),
            (Some(l), None) => write!(f, "{}:{l}: {}", self.file, self.message),
            _ => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

pub use crate::host::api::host_error;

/// The value of the runtime error our resolver raises for an import it cannot resolve (Rhai
/// replaces an `ErrorModuleNotFound` from a resolver with its own message, losing ours).
#[derive(Debug, Clone)]
pub(crate) struct ImportFailure(pub String);

impl fmt::Display for ImportFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_with_and_without_position() {
        let e =
            ScriptError::new("a.rhai", ScriptErrorKind::Runtime, "boom").at(Position::new(3, 7));
        assert_eq!(e.to_string(), "a.rhai:3:7: boom");
        let e = ScriptError::new("a.rhai", ScriptErrorKind::Io, "cannot read");
        assert_eq!(e.to_string(), "a.rhai: cannot read");
    }

    #[test]
    fn limit_message_names_the_limit() {
        let limits = Limits::default();
        assert_eq!(
            Limit::Operations.message(&limits),
            format!(
                "operations limit exceeded (max_operations = {})",
                limits.max_operations
            )
        );
        assert_eq!(fmt_duration(Duration::from_millis(200)), "0.2 s");
        assert_eq!(fmt_duration(Duration::from_secs(600)), "600 s");
    }
}
