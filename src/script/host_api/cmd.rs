//! `run`, `query`, `sh` bindings over [`crate::host::system::cmd`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use rhai::{Array, Dynamic, ImmutableString, Map};

use super::convert::{self, check_keys, opt_bool, opt_string};
use super::{Api, Registrar};
use crate::host::system::cmd::{self, CmdOutput, Guard, OutputSink, RunOptions, StreamTo};
use crate::script::output::ScriptOutput;

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
    check_keys(
        m,
        if query {
            super::docs::RUN_KEYS
        } else {
            super::docs::GUARDED_RUN_KEYS
        },
    )?;
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

pub(crate) fn register(r: &mut Registrar, api: &Api) {
    type S = ImmutableString;
    let d = api.deadline;
    // One handle on the run's output per binding that may stream.
    let (out_run, out_query, out_sh) = (api.output.clone(), api.output.clone(), api.output.clone());
    bind!(r, api, "", "run", |h, argv: Array| {
        let argv = convert::strings(&argv, "argv")?;
        Ok(output_map(cmd::run(h, &argv, &RunOptions::default())?))
    });
    bind!(r, api, "", "run", |h, argv: Array, o: Map| {
        let argv = convert::strings(&argv, "argv")?;
        let o = run_opts(&o, d, &out_run, false)?;
        Ok(output_map(cmd::run(h, &argv, &o)?))
    });
    bind!(r, api, "", "query", |h, argv: Array| {
        let argv = convert::strings(&argv, "argv")?;
        Ok(output_map(cmd::query(h, &argv, &RunOptions::default())?))
    });
    bind!(r, api, "", "query", |h, argv: Array, o: Map| {
        let argv = convert::strings(&argv, "argv")?;
        let o = run_opts(&o, d, &out_query, true)?;
        Ok(output_map(cmd::query(h, &argv, &o)?))
    });
    bind!(r, api, "", "sh", |h, script: S| Ok(output_map(cmd::sh(
        h,
        &script,
        &RunOptions::default()
    )?)));
    bind!(r, api, "", "sh", |h, script: S, o: Map| {
        let o = run_opts(&o, d, &out_sh, false)?;
        Ok(output_map(cmd::sh(h, &script, &o)?))
    });
}
