//! `run`, `query`, `sh` bindings over [`crate::host::cmd`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use rhai::{Array, Dynamic, ImmutableString, Map};

use super::convert::{self, check_keys, opt_bool, opt_string};
use super::{Api, Registrar};
use crate::host::cmd::{self, CmdOutput, OutputSink, RunOptions, StreamTo};
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

/// `#{check, input, env, cwd, timeout, read_only, stream}`. The timeout (seconds, int or
/// float) is capped by what remains of the run's deadline; without one, the session's
/// deadline (tightened to the run's) applies. `stream: true` forwards the command's output to
/// `output`, the run's.
fn run_opts(
    m: &Map,
    deadline: Instant,
    output: &Arc<dyn ScriptOutput>,
) -> Result<RunOptions, String> {
    check_keys(
        m,
        &[
            "check",
            "input",
            "env",
            "cwd",
            "timeout",
            "read_only",
            "stream",
        ],
    )?;
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
    })
}

/// `#{code, stdout, stderr, ok, planned}`; `planned` is true for a recorded command. Always
/// present: reading a missing property is an error in scripts.
pub(crate) fn output_map(o: CmdOutput) -> Map {
    let mut m = Map::new();
    m.insert("code".into(), Dynamic::from(i64::from(o.code)));
    m.insert("stdout".into(), convert::s(o.stdout));
    m.insert("stderr".into(), convert::s(o.stderr));
    m.insert("ok".into(), Dynamic::from(o.ok));
    m.insert("planned".into(), Dynamic::from(o.planned));
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
        let o = run_opts(&o, d, &out_run)?;
        Ok(output_map(cmd::run(h, &argv, &o)?))
    });
    bind!(r, api, "", "query", |h, argv: Array| {
        let argv = convert::strings(&argv, "argv")?;
        Ok(output_map(cmd::query(h, &argv, &RunOptions::default())?))
    });
    bind!(r, api, "", "query", |h, argv: Array, o: Map| {
        let argv = convert::strings(&argv, "argv")?;
        let o = run_opts(&o, d, &out_query)?;
        Ok(output_map(cmd::query(h, &argv, &o)?))
    });
    bind!(r, api, "", "sh", |h, script: S| Ok(output_map(cmd::sh(
        h,
        &script,
        &RunOptions::default()
    )?)));
    bind!(r, api, "", "sh", |h, script: S, o: Map| {
        let o = run_opts(&o, d, &out_sh)?;
        Ok(output_map(cmd::sh(h, &script, &o)?))
    });
}
