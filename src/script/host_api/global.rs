//! The global functions: commands (`run`, `query`, `sh`) over [`crate::host::cmd`], secrets
//! (`secret`, `secret_env`) over [`crate::host::secrets`], `changed()` (registered by the
//! script layer) and the value helpers `sha256` and `to_json` over [`crate::host::text`]:
//! each one's reference row and binding, and their tests through Rhai.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rhai::{Array, Dynamic, ImmutableString as S, Map};

use super::convert::{self, check_keys, opt_bool, opt_string};
use super::docs::EffectKind::*;
use super::docs::Effects::*;
use super::docs::FnDoc;
use super::docs::{ARGV, NAME, OPTS, script_layer};
use crate::host::cmd::{self, CmdOutput, Guard, OutputSink, RunOptions, StreamTo};
use crate::host::{secrets, text};
use crate::script::output::ScriptOutput;

/// The option keys of `query` (and the unguarded part of `run`/`sh`); the binding checks
/// options against these lists, so the docs and the checker cannot drift from it.
pub(crate) const RUN_KEYS: &[&str] = &[
    "check",
    "input",
    "env",
    "cwd",
    "timeout",
    "read_only",
    "stream",
];
/// The option keys of `run`/`sh`: [`RUN_KEYS`] and the guards (`query` takes none).
pub(crate) const GUARDED_RUN_KEYS: &[&str] = &[
    "check",
    "input",
    "env",
    "cwd",
    "timeout",
    "read_only",
    "stream",
    "creates",
    "removes",
    "unless",
    "onlyif",
];

/// The run's output as the sink of a streamed command: each chunk goes to the step's stdout
/// or stderr as it arrives.
struct ToScriptOutput(Arc<dyn ScriptOutput>);

impl OutputSink for ToScriptOutput {
    fn stdout(&self, bytes: &[u8]) {
        self.0.stdout(bytes);
    }
    fn stderr(&self, bytes: &[u8]) {
        self.0.stderr(bytes);
    }
}

/// The guard options of `run`/`sh`, in the order they are evaluated.
const GUARD_KEYS: [&str; 4] = ["creates", "removes", "unless", "onlyif"];

/// The guards of `m` (`creates`/`removes`: a path string; `unless`/`onlyif`: an argv array);
/// `()` values are ignored.
fn guards(m: &Map) -> Result<Vec<Guard>, String> {
    let mut out = Vec::new();
    for key in GUARD_KEYS {
        match m.get(key) {
            None => {}
            Some(d) if d.is_unit() => {}
            Some(d) => match key {
                "creates" | "removes" => {
                    let Some(p) = opt_string(m, key)? else {
                        continue;
                    };
                    if !p.starts_with('/') {
                        return Err(format!("option {key} must be an absolute path, got {p:?}"));
                    }
                    out.push(if key == "creates" {
                        Guard::Creates(p)
                    } else {
                        Guard::Removes(p)
                    });
                }
                _ => {
                    let Some(a) = d.read_lock::<Array>() else {
                        return Err(format!(
                            "option {key} must be an argv array, got {}",
                            d.type_name()
                        ));
                    };
                    let argv = convert::strings(&a, key)?;
                    if argv.first().is_none_or(String::is_empty) {
                        return Err(format!("option {key} needs at least a program name"));
                    }
                    out.push(if key == "unless" {
                        Guard::Unless(argv)
                    } else {
                        Guard::Onlyif(argv)
                    });
                }
            },
        }
    }
    Ok(out)
}

/// `#{check, input, env, cwd, timeout, read_only, stream}` and, unless `query`, the guards
/// `#{creates, removes, unless, onlyif}` (a guarded command is a change). The timeout
/// (seconds, int or float) is capped by what remains of the run's deadline; without one, the
/// session's deadline (tightened to the run's) applies. `stream: true` forwards the
/// command's output to `output`, the run's.
fn run_opts(
    m: &Map,
    deadline: Instant,
    output: &Arc<dyn ScriptOutput>,
    query: bool,
) -> Result<RunOptions, String> {
    check_keys(m, if query { RUN_KEYS } else { GUARDED_RUN_KEYS })?;
    let guards = if query { Vec::new() } else { guards(m)? };
    if !guards.is_empty() && opt_bool(m, "read_only", false)? {
        return Err(
            "a guarded command cannot be read_only (guards are for commands that change something)"
                .into(),
        );
    }
    let mut env = Vec::new();
    match m.get("env") {
        None => {}
        Some(d) if d.is_unit() => {}
        Some(d) => {
            let Some(em) = d.read_lock::<Map>() else {
                return Err(format!("option env must be a map, got {}", d.type_name()));
            };
            for (k, v) in em.iter() {
                env.push((k.to_string(), convert::scalar(v, &format!("env.{k}"))?));
            }
        }
    }
    let timeout = match m.get("timeout") {
        None => None,
        Some(d) if d.is_unit() => None,
        Some(d) => {
            let secs = if let Ok(i) = d.as_int() {
                i as f64
            } else if let Ok(f) = d.as_float() {
                f
            } else {
                return Err(format!(
                    "option timeout must be a number of seconds, got {}",
                    d.type_name()
                ));
            };
            if !secs.is_finite() || secs <= 0.0 {
                return Err(format!(
                    "option timeout must be a positive number of seconds, got {secs}"
                ));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            Some(Duration::from_secs_f64(secs.min(1e9)).min(left))
        }
    };
    Ok(RunOptions {
        check: opt_bool(m, "check", false)?,
        input: opt_string(m, "input")?.map(String::into_bytes),
        env,
        cwd: opt_string(m, "cwd")?,
        timeout,
        read_only: opt_bool(m, "read_only", false)?,
        stream: opt_bool(m, "stream", false)?
            .then(|| StreamTo(Arc::new(ToScriptOutput(output.clone())))),
        guards,
    })
}

/// `#{code, stdout, stderr, ok, planned, skipped}`: `planned` is true for a recorded
/// command, `skipped` for a guarded command whose guard said it is done. Always present:
/// reading a missing property is an error in scripts.
pub(crate) fn output_map(o: CmdOutput) -> Map {
    let mut m = Map::new();
    m.insert("code".into(), Dynamic::from(i64::from(o.code)));
    m.insert("stdout".into(), convert::s(o.stdout));
    m.insert("stderr".into(), convert::s(o.stderr));
    m.insert("ok".into(), Dynamic::from(o.ok));
    m.insert("planned".into(), Dynamic::from(o.planned));
    m.insert("skipped".into(), Dynamic::from(o.skipped));
    m
}

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(super) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "",
    "Commands, secrets and counters (global functions)",
    "Commands run chrooted in the host root, in their own process group, with the step's environment only. Their result is a map `#{code, stdout, stderr, ok, planned}`: output is captured whole and returned when the command ends, unless `stream: true` relays it live (and keeps only the last 64 KiB of each stream in the result).",
)];

/// The functions of this file's namespaces, in reference order: each one's reference row
/// and its registration.
pub(super) const FUNCTIONS: &[FnDoc] = &[
    host_fn!(
        "",
        "run",
        &[ARGV],
        "Map",
        Submits(&[Command]),
        "Run `argv` (no shell) chrooted in the host root with the step's environment: `#{code, stdout, stderr, ok, planned}` (`planned` is true when the command was recorded, not run). A missing program is an error.",
        |h, argv: Array| {
            let argv = convert::strings(&argv, "argv")?;
            Ok(output_map(cmd::run(h, &argv, &RunOptions::default())?))
        }
    ),
    host_fn!(
        "",
        "run",
        &[ARGV, OPTS],
        "Map",
        Submits(&[Command, GuardedCommand]),
        "As `run(argv)` with `#{check, input, env, cwd, timeout, read_only, stream}`: `check` throws on a non-zero code (command and stderr tail), `timeout` in seconds kills the process group (default and cap: what remains of the step's deadline), `read_only` marks a query, `stream: true` writes the command's stdout and stderr to the step's as they arrive (the agent's logs timestamp each chunk; nothing when the command is only planned) and keeps only the last 64 KiB of each in the result. Guards make the command a change: `creates: path` (done when the path exists), `removes: path` (done when it does not), `unless: argv` (done when that command exits 0), `onlyif: argv` (done when it exits non-zero). Guards are queries, evaluated in every mode (chrooted like the command, with its `env`, `cwd`, `timeout`); when one says done the command is skipped, counted unchanged and returns `skipped: true`; otherwise it runs (apply), is planned as a change `run: useradd gpuops (unless id gpuops)` (plan) or is drift (check).",
        options = GUARDED_RUN_KEYS,
        api = run,
        |h, argv: Array, o: Map| {
            let argv = convert::strings(&argv, "argv")?;
            let o = run_opts(&o, run.deadline, &run.output, false)?;
            Ok(output_map(cmd::run(h, &argv, &o)?))
        }
    ),
    host_fn!(
        "",
        "query",
        &[ARGV],
        "Map",
        RunsReadOnly,
        "`run(argv)` with `read_only: true`: executed in plan and check mode too.",
        |h, argv: Array| {
            let argv = convert::strings(&argv, "argv")?;
            Ok(output_map(cmd::query(h, &argv, &RunOptions::default())?))
        }
    ),
    host_fn!(
        "",
        "query",
        &[ARGV, OPTS],
        "Map",
        RunsReadOnly,
        "`run(argv, opts)` with `read_only: true`.",
        options = RUN_KEYS,
        api = run,
        |h, argv: Array, o: Map| {
            let argv = convert::strings(&argv, "argv")?;
            let o = run_opts(&o, run.deadline, &run.output, true)?;
            Ok(output_map(cmd::query(h, &argv, &o)?))
        }
    ),
    host_fn!(
        "",
        "sh",
        &[("script", "String")],
        "Map",
        Submits(&[Command]),
        "`run([\"/bin/bash\", \"-c\", script])`.",
        |h, script: S| Ok(output_map(cmd::sh(h, &script, &RunOptions::default())?))
    ),
    host_fn!(
        "",
        "sh",
        &[("script", "String"), OPTS],
        "Map",
        Submits(&[Command, GuardedCommand]),
        "`run([\"/bin/bash\", \"-c\", script], opts)`, guards included (summary `sh: <script> (creates /path)`).",
        options = GUARDED_RUN_KEYS,
        api = run,
        |h, script: S, o: Map| {
            let o = run_opts(&o, run.deadline, &run.output, false)?;
            Ok(output_map(cmd::sh(h, &script, &o)?))
        }
    ),
    host_fn!(
        "",
        "secret",
        &[NAME, ("key", "String")],
        "String",
        ReadsAgent,
        "`<SKYHOOK_SECRETS_DIR>/<name>/<key>`; `name` must be in `SKYHOOK_ALLOWED_SECRETS`. The key is opened confined to `<SKYHOOK_SECRETS_DIR>/<name>`: symlinks inside it (the kubelet's `..data`) are followed, one pointing out of it is not found. A regular file of at most 1 MiB. The value is redacted (`***`) from output, logs, plans and errors.",
        |h, n: S, k: S| Ok(Dynamic::from(S::from(secrets::secret(h, &n, &k)?)))
    ),
    host_fn!(
        "",
        "secret_env",
        &[("var", "String")],
        "String",
        ReadsAgent,
        "The step environment's variable `var` (error when unset), redacted like `secret`.",
        |h, v: S| Ok(Dynamic::from(S::from(secrets::secret_env(h, &v)?)))
    ),
    script_layer(
        "",
        "changed",
        &[],
        "int",
        ReadsAgent,
        "How many changes this step has made (apply) or would make (plan, check) so far; actions are not counted.",
    ),
    host_fn!(
        "",
        "sha256",
        &[("text", "String")],
        "String",
        Computes,
        "The SHA-256 of the text's UTF-8 bytes, 64 lowercase hex digits (as `sha256sum` prints).",
        |_h, t: S| Ok(convert::s(text::sha256_hex(&t)))
    ),
    host_fn!(
        "",
        "to_json",
        &[("value", "?")],
        "String",
        Computes,
        "`value` (a map, array, string, number, bool or `()`) as pretty-printed JSON: two-space indent, map keys in the map's order (sorted: Rhai maps are ordered by key), `()` as `null`, no final newline. The inverse of Rhai's `parse_json(text)` (JSON `null` → `()`).",
        |_h, v: Dynamic| Ok(convert::s(text::to_json(&convert::to_json(&v, "value")?)))
    ),
    host_fn!(
        "",
        "to_json",
        &[("map", "Map")],
        "String",
        Computes,
        "The same for a map; also called as a method, `m.to_json()` (which replaces Rhai's one-line form).",
        |_h, v: Map| Ok(convert::s(text::to_json(&convert::to_json(
            &Dynamic::from_map(v),
            "value"
        )?)))
    ),
];

#[cfg(test)]
pub(super) mod tests {
    /// One call of each function of this file, for
    /// [`super::super::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(in super::super) const SAMPLES: &[&str] = &[
        r#"run(["hello", "x"])"#,
        r#"run(["hello", "x"], #{unless: ["false"]})"#,
        r#"query(["hello", "q"])"#,
        r#"query(["hello", "q"], #{check: true})"#,
        r#"sh("echo x")"#,
        r#"sh("echo x", #{creates: "/made"})"#,
        r#"secret("db", "password")"#,
        r#"secret_env("TOKEN")"#,
        r#"sha256("x")"#,
        r#"to_json(1)"#,
        r#"to_json(#{a: 1})"#,
    ];
}
