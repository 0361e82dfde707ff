//! Request validation, pure: the body of a start (`POST /v1/executions`) and of a cancel
//! checked field by field into what a run needs, or the [`Refusal`] to answer with. Nothing
//! here reads a file, spawns, or needs a runtime; [`super::exec::Service::start`] calls these
//! checks in order between the ones that touch the host (the id's uniqueness, the secrets,
//! the workdir inside the root), so a request with several faults gets the first one's
//! refusal.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::ring::Gap;
use super::secrets::{SecretError, SecretRef, env_name};
use crate::host::ExecMode;
use crate::redact::Redactor;
use crate::script::{CompiledScript, ModuleStore, ScriptEngine};

/// Most environment entries a step gets (the request's `env`, its `secrets`, `PATH`).
pub const MAX_ENV_ENTRIES: usize = 1024;

/// Most bytes of a step's environment and command together, each entry counted as
/// `NAME=value` plus its NUL: half of the usual 2 MiB `ARG_MAX`, so an exec never fails
/// with `E2BIG`.
pub const MAX_ENV_BYTES: usize = 1 << 20;

/// Most bytes of one `NAME=value` entry or of the command, its NUL included: Linux's
/// `MAX_ARG_STRLEN` (32 pages of 4 KiB), past which an exec fails with `E2BIG`.
pub const MAX_ARG_BYTES: usize = 32 * 4096;

/// A refused request: HTTP status, JSON body, extra headers. Never carries a secret value.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The status code (400, 403, 404, 409, 410, 413, 422, 429, 500, 503).
    pub status: u16,
    /// `{"error": "...", ...}`.
    pub body: Value,
    /// Extra headers (`Retry-After` on a 429).
    pub headers: Vec<(&'static str, String)>,
}

impl Refusal {
    /// `status` with `body` and no extra header.
    pub(super) fn new(status: u16, body: Value) -> Refusal {
        Refusal {
            status,
            body,
            headers: Vec::new(),
        }
    }

    /// `400 {"error": "bad request", "detail"}`.
    pub(super) fn bad(detail: impl std::fmt::Display) -> Refusal {
        Refusal::new(
            400,
            json!({"error": "bad request", "detail": detail.to_string()}),
        )
    }

    /// `404 {"error": "not found"}`.
    pub fn not_found() -> Refusal {
        Refusal::new(404, json!({"error": "not found"}))
    }

    /// `409 {"error": "execution exists", "id"}`.
    pub(super) fn exists(id: &str) -> Refusal {
        Refusal::new(409, json!({"error": "execution exists", "id": id}))
    }

    /// `410 {"error": "gap", "wanted", "oldest"}`.
    pub fn gap(g: Gap) -> Refusal {
        Refusal::new(
            410,
            json!({"error": "gap", "wanted": g.wanted, "oldest": g.oldest}),
        )
    }

    /// `403` for a secret the allowlist refuses, `422` for one that cannot be used:
    /// `{"error", "name", "key"}`, never a value.
    pub(super) fn secret(e: &SecretError) -> Refusal {
        let (name, key) = e.coordinate();
        let status = if matches!(e, SecretError::NotAllowed { .. }) {
            403
        } else {
            422
        };
        Refusal::new(
            status,
            json!({"error": e.to_string(), "name": name, "key": key}),
        )
    }
}

/// The kind of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A shell line.
    Sh,
    /// A Rhai script.
    Rhai,
    /// A read-only package plan (`super::plan`).
    #[serde(rename = "package_plan")]
    PackagePlan,
}

impl Kind {
    /// `"sh"` or `"rhai"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Sh => "sh",
            Kind::Rhai => "rhai",
            Kind::PackagePlan => super::plan::KIND,
        }
    }
}

/// The body of `POST /v1/executions` (unknown fields refused).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// `[A-Za-z0-9._-]{1,128}`, chosen by the engine.
    pub id: String,
    /// `sh` or `rhai`.
    pub kind: Kind,
    /// kind sh: the shell line.
    #[serde(default)]
    pub command: Option<String>,
    /// kind rhai: the script text.
    #[serde(default)]
    pub script: Option<String>,
    /// kind rhai: `apply` (default), `plan` or `check`.
    #[serde(default)]
    pub mode: Option<String>,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Secret coordinates resolved on the host.
    #[serde(default)]
    pub secrets: Vec<SecretRef>,
    /// Host path to run in (default the service's workdir).
    #[serde(default)]
    pub workdir: Option<String>,
    /// Wall-clock limit in seconds (then SIGTERM, grace, SIGKILL; exit `{"error":"timeout"}`).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// kind rhai: the name errors and plan positions give the script (an extension: the
    /// client's file name, so a remote plan reads as a local one); default `<id>.rhai`. At
    /// most 255 bytes, no control characters.
    #[serde(default)]
    pub script_name: Option<String>,
}

impl StartRequest {
    /// The generic part of a `package_plan` start (`super::plan` has the rest).
    pub(super) fn plan(id: String, timeout_s: Option<f64>) -> StartRequest {
        StartRequest {
            id,
            kind: Kind::PackagePlan,
            command: None,
            script: None,
            mode: None,
            env: BTreeMap::new(),
            secrets: Vec::new(),
            workdir: None,
            timeout_s,
            script_name: None,
        }
    }
}

impl From<super::plan::PlanRefusal> for Refusal {
    fn from(r: super::plan::PlanRefusal) -> Refusal {
        Refusal::new(r.status, r.body)
    }
}

/// True for a valid execution id.
pub fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The start body parsed: JSON of the request's shape (unknown fields refused) with a
/// valid id.
///
/// # Errors
/// `400` for malformed JSON, an unknown field or a bad id.
pub fn parse(body: &[u8]) -> Result<StartRequest, Refusal> {
    let req: StartRequest = serde_json::from_slice(body).map_err(Refusal::bad)?;
    if !valid_id(&req.id) {
        return Err(Refusal::bad("id must match [A-Za-z0-9._-]{1,128}"));
    }
    Ok(req)
}

/// The fields every kind has, checked: the timeout and the workdir as a host path (not yet
/// resolved inside the root).
#[derive(Debug, Clone, PartialEq)]
pub struct Common {
    /// `timeout_s` as a duration.
    pub timeout: Option<Duration>,
    /// The request's `workdir`, else `default_workdir`.
    pub workdir: PathBuf,
}

/// Check `env` (variable names, no NUL in a value), `timeout_s` (in (0, 7 days]) and
/// `workdir` (absolute; `default_workdir` when absent).
///
/// # Errors
/// `400` naming the first bad field.
pub fn common(req: &StartRequest, default_workdir: &std::path::Path) -> Result<Common, Refusal> {
    for (k, v) in &req.env {
        if !env_name(k) || v.contains('\0') {
            return Err(Refusal::bad(format!("invalid env entry {k:?}")));
        }
    }
    let timeout = match req.timeout_s {
        None => None,
        Some(t) if t > 0.0 && t <= 7.0 * 86400.0 => Some(Duration::from_secs_f64(t)),
        Some(_) => return Err(Refusal::bad("timeout_s must be in (0, 604800]")),
    };
    let workdir = match &req.workdir {
        Some(w) if !w.starts_with('/') => {
            return Err(Refusal::bad("workdir must be an absolute host path"));
        }
        Some(w) => PathBuf::from(w),
        None => default_workdir.to_path_buf(),
    };
    Ok(Common { timeout, workdir })
}

/// The step's environment: `PATH` ([`crate::process::DEFAULT_PATH`]), then the request's
/// `env` (sorted by name), then the resolved secrets `values` (`(env, value)`), an entry
/// removing an earlier one of the same name and going last; checked to fit an exec with the command
/// ([`check_exec_size`]).
///
/// # Errors
/// `413` when it would not fit.
pub fn environment(
    req: &StartRequest,
    values: &[(String, String)],
) -> Result<Vec<(String, String)>, Refusal> {
    let mut env: Vec<(String, String)> = vec![("PATH".into(), crate::process::DEFAULT_PATH.into())];
    for (k, v) in req.env.iter().chain(values.iter().map(|(k, v)| (k, v))) {
        env.retain(|(n, _)| n != k);
        env.push((k.clone(), v.clone()));
    }
    check_exec_size(&env, req.command.as_deref())?;
    Ok(env)
}

/// What a Rhai `secret(name, key)` may answer: only the request's coordinates, with the
/// `values` resolved for them (in the same order): `(name, key, value)`.
pub fn declared(req: &StartRequest, values: &[(String, String)]) -> Vec<(String, String, String)> {
    req.secrets
        .iter()
        .zip(values)
        .map(|(r, (_, v))| (r.name.clone(), r.key.clone(), v.clone()))
        .collect()
}

/// A sh request's command: present, no `script` or `mode`, no NUL.
///
/// # Errors
/// `400` naming what is wrong.
pub fn sh_command(req: &StartRequest) -> Result<String, Refusal> {
    if req.script.is_some() || req.mode.is_some() {
        return Err(Refusal::bad("kind sh takes command, not script or mode"));
    }
    let Some(command) = req.command.clone() else {
        return Err(Refusal::bad("kind sh needs command"));
    };
    if command.contains('\0') {
        return Err(Refusal::bad("command contains NUL"));
    }
    Ok(command)
}

/// A Rhai request checked: its script, executor and file name.
#[derive(Debug, Clone, PartialEq)]
pub struct RhaiRequest<'a> {
    /// The script text.
    pub script: &'a str,
    /// Apply, Plan or Check (`mode`, default apply).
    pub exec: ExecMode,
    /// The name its errors and plan positions use (`script_name`, default `<id>.rhai`).
    pub file: String,
}

/// A Rhai request's fields: a `script` and no `command`, a known `mode`, a usable
/// `script_name`.
///
/// # Errors
/// `400` naming what is wrong.
pub fn rhai(req: &StartRequest) -> Result<RhaiRequest<'_>, Refusal> {
    if req.command.is_some() {
        return Err(Refusal::bad("kind rhai takes script, not command"));
    }
    let Some(script) = &req.script else {
        return Err(Refusal::bad("kind rhai needs script"));
    };
    let exec = match req.mode.as_deref().unwrap_or("apply") {
        "apply" => ExecMode::Apply,
        "plan" => ExecMode::Plan,
        "check" => ExecMode::Check,
        other => {
            return Err(Refusal::bad(format!(
                "mode {other:?}: expected apply, plan or check"
            )));
        }
    };
    let file = match &req.script_name {
        None => format!("{}.rhai", req.id),
        Some(n) if n.is_empty() || n.len() > 255 || n.chars().any(char::is_control) => {
            return Err(Refusal::bad(
                "script_name must be 1 to 255 bytes without control characters",
            ));
        }
        Some(n) => n.clone(),
    };
    Ok(RhaiRequest { script, exec, file })
}

/// Compile a Rhai request's script with `engine`. Only the embedded stdlib
/// (`skyhook/...`) can be imported: a relative import would read the server's own
/// filesystem, outside the host root.
///
/// # Errors
/// `422 {"error": "script does not compile", "message", "line", "column"}`, the message
/// redacted with `redactor`.
pub fn compile(
    engine: &ScriptEngine,
    rhai: &RhaiRequest<'_>,
    redactor: &Redactor,
) -> Result<CompiledScript, Refusal> {
    let store = Arc::new(ModuleStore::stdlib_only());
    crate::script::compile_source(engine, &rhai.file, rhai.script, store).map_err(|e| {
        Refusal::new(
            422,
            json!({"error": "script does not compile",
                   "message": redactor.redact(&e.message),
                   "line": e.line, "column": e.column}),
        )
    })
}

/// `413` when the environment (`NAME=value` entries, secrets included) and the command
/// would not fit an exec: more than [`MAX_ENV_ENTRIES`] entries, an entry or the command of
/// [`MAX_ARG_BYTES`] or more, or [`MAX_ENV_BYTES`] in all. The refusal names variables,
/// never values.
///
/// # Errors
/// As above.
pub fn check_exec_size(env: &[(String, String)], command: Option<&str>) -> Result<(), Refusal> {
    let too_large = |detail: String| {
        Refusal::new(
            413,
            json!({"error": "environment too large", "detail": detail,
                   "max_env_entries": MAX_ENV_ENTRIES, "max_env_bytes": MAX_ENV_BYTES,
                   "max_arg_bytes": MAX_ARG_BYTES}),
        )
    };
    if env.len() > MAX_ENV_ENTRIES {
        return Err(too_large(format!(
            "{} environment entries, at most {MAX_ENV_ENTRIES}",
            env.len()
        )));
    }
    let mut total = 0;
    for (k, v) in env {
        let n = k.len() + 1 + v.len() + 1;
        if n >= MAX_ARG_BYTES {
            return Err(too_large(format!(
                "env {k:?} is {n} bytes, each entry must be under {MAX_ARG_BYTES}"
            )));
        }
        total += n;
    }
    if let Some(c) = command {
        if c.len() + 1 >= MAX_ARG_BYTES {
            return Err(too_large(format!(
                "command is {} bytes, it must be under {MAX_ARG_BYTES}",
                c.len() + 1
            )));
        }
        total += c.len() + 1;
    }
    if total > MAX_ENV_BYTES {
        return Err(too_large(format!(
            "environment and command are {total} bytes, at most {MAX_ENV_BYTES}"
        )));
    }
    Ok(())
}

/// The grace of a cancel body (`{"grace_s": N}`, N in [0, 3600]; an empty or all-blank
/// body is `default`).
///
/// # Errors
/// `400` for a body that is not that JSON, or a grace out of range.
pub fn cancel_grace(body: &[u8], default: Duration) -> Result<Duration, Refusal> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct CancelBody {
        grace_s: Option<f64>,
    }
    let grace = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let b: CancelBody = serde_json::from_slice(body).map_err(Refusal::bad)?;
        b.grace_s
    };
    match grace {
        None => Ok(default),
        Some(g) if (0.0..=3600.0).contains(&g) => Ok(Duration::from_secs_f64(g)),
        Some(_) => Err(Refusal::bad("grace_s must be in [0, 3600]")),
    }
}

#[cfg(test)]
#[path = "tests/request_tests.rs"]
mod tests;
