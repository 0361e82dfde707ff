//! `.rhai` steps in the agent: compiled ahead while the package is validated, run in-process
//! with the host API, with the same header, result lines, log sink, flags and `returncodes`
//! rules as a process step.
//!
//! Which steps are scripts:
//! - a step whose `path` ends in `.rhai`;
//! - shellscript compatibility: a step that is the shellscript package's dispatcher
//!   (`shellscript_run.sh STAGE`) when `configmaps/STAGE.rhai` exists in the copy dir; the
//!   dispatcher script itself then does not run (without a `.rhai` configMap it runs as before).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::host::effect::InterruptRequest;
use crate::host::root::HostRoot;
use crate::host::{ExecMode, Host, HostOptions};
use crate::logs::redact::Redactor;
use crate::logs::sink::StepLogFiles;
use crate::package::{Mode, Package, Step};
use crate::runner::script::{ScriptRunner, SinkOutput};
use crate::script::context::StepContext;
use crate::script::engine::{Limits, ScriptEngine};
use crate::script::host_api::HostApi;
use crate::script::resolver::ModuleStore;
use crate::script::run::{CompiledScript, compile_source};

use super::error::{AgentError, render_chain};
use super::mode::{ModeRun, lossy_env};

/// The file name of the shellscript package's dispatcher.
pub const SHELLSCRIPT_DISPATCHER: &str = "shellscript_run.sh";

/// Compiled scripts of one mode, by the step's index in the mode.
pub type StepScripts = HashMap<usize, CompiledScript>;

/// The agent's script engine: built once per process, then shared and immutable.
///
/// # Errors
/// A malformed `SKYHOOK_SCRIPT_TIMEOUT`.
pub fn engine() -> Result<Arc<ScriptEngine>, AgentError> {
    static ENGINE: OnceLock<Result<Arc<ScriptEngine>, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            Limits::from_env()
                .map(|l| Arc::new(ScriptEngine::new(l)))
                .map_err(|e| render_chain(&e))
        })
        .clone()
        .map_err(AgentError::Script)
}

/// The script a step runs, if it is a script step: `skyhook_dir/<path>` for a `.rhai` path,
/// `configmaps/<STAGE>.rhai` for the shellscript dispatcher when that file exists.
///
/// # Errors
/// A failure to look the configMap up under the root.
pub fn script_path(
    root: &HostRoot,
    copy_dir: &Path,
    step: &Step,
) -> Result<Option<PathBuf>, AgentError> {
    if step.path.ends_with(".rhai") {
        return Ok(Some(copy_dir.join("skyhook_dir").join(&step.path)));
    }
    let is_dispatcher = Path::new(&step.path)
        .file_name()
        .is_some_and(|n| n == SHELLSCRIPT_DISPATCHER);
    let stage = step.arguments.first().filter(|s| {
        !s.is_empty() && !s.starts_with("env:") && !s.contains('/') && *s != "." && *s != ".."
    });
    if let (true, Some(stage)) = (is_dispatcher, stage) {
        let candidate = copy_dir.join("configmaps").join(format!("{stage}.rhai"));
        if matches!(root.metadata(&candidate)?, Some(m) if m.is_file()) {
            return Ok(Some(candidate));
        }
    }
    Ok(None)
}

/// Compile every script step of `mode` (and its imports), before any state is written.
///
/// # Errors
/// [`AgentError::Script`] with `file:line:col: message` for the first script that does not
/// compile; a read failure under the root.
pub fn compile_mode_scripts(
    root: &HostRoot,
    copy_dir: &Path,
    pkg: &Package,
    mode: Mode,
) -> Result<StepScripts, AgentError> {
    let mut out = StepScripts::new();
    // One module store (and engine) for every script of the mode, made on first use.
    let mut shared: Option<(Arc<ScriptEngine>, Arc<ModuleStore>)> = None;
    let mut compile = |path: &Path| -> Result<CompiledScript, AgentError> {
        let (engine, store) = match &shared {
            Some(s) => s.clone(),
            None => {
                let store = Arc::new(
                    ModuleStore::new(root.display_path(&copy_dir.join("skyhook_dir")))
                        .with_configmaps(root.display_path(&copy_dir.join("configmaps")))
                        .shown_as(
                            copy_dir.join("skyhook_dir"),
                            Some(copy_dir.join("configmaps")),
                        ),
                );
                shared.insert((engine()?, store)).clone()
            }
        };
        let source = String::from_utf8(root.read(path)?)
            .map_err(|_| AgentError::Script(format!("{}: not valid UTF-8", path.display())))?;
        compile_source(&engine, &path.display().to_string(), &source, store)
            .map_err(|e| AgentError::Script(e.to_string()))
    };
    for (index, step) in pkg.steps(mode).iter().enumerate() {
        if let Some(path) = script_path(root, copy_dir, step)? {
            out.insert(index, compile(&path)?);
        }
    }
    // A `.rhai` step may run the configMap script of its stage (`skyhook/shellscript` imports
    // `configmap/<stage>`): compile it now too, so a syntax error there changes nothing. (The
    // shellscript dispatcher's own stage script was compiled above already.)
    let stage_script = copy_dir
        .join("configmaps")
        .join(format!("{}.rhai", mode.as_str().replace('-', "_")));
    let shown = stage_script.display().to_string();
    if !out.is_empty()
        && !out.values().any(|c| c.file() == shown)
        && matches!(root.metadata(&stage_script)?, Some(m) if m.is_file())
    {
        compile(&stage_script)?;
    }
    Ok(out)
}

/// What a script step produced.
#[derive(Debug)]
pub struct ScriptStepResult {
    /// Success: no error, the return code accepted, and in a check mode no drift.
    pub ok: bool,
    /// The status shown in the `FAILED` line (the script's code, 1 after an error).
    pub status: i32,
    /// Interrupts requested (run by the agent after the flag is written; never in checks).
    pub interrupts: Vec<InterruptRequest>,
}

/// One script step of a mode run.
pub struct ScriptStep<'a> {
    /// The mode run it belongs to (host root, settings, resource id, copy dir, mode).
    pub run: &'a ModeRun<'a>,
    /// The package.
    pub package: &'a Package,
    /// The step.
    pub step: &'a Step,
}

impl ScriptStep<'_> {
    /// Run the script: Apply executor in run modes, Check executor in check modes (pending
    /// changes are drift and fail the step, each listed on the step's stderr).
    ///
    /// # Errors
    /// The host root cannot be reopened, or the console cannot be duplicated.
    pub async fn run(
        &self,
        script: &CompiledScript,
        args: &[String],
        env: Vec<(OsString, OsString)>,
        previous_version: Option<String>,
        logs: Option<StepLogFiles>,
        redactor: Redactor,
    ) -> Result<ScriptStepResult, AgentError> {
        let engine = engine()?;
        let env = lossy_env(&env);
        let get = |k: &str| {
            env.iter()
                .rev()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        let step_root = self.run.copy_dir.join("skyhook_dir");
        let (skyhook_dir, step_root) = if self.step.on_host {
            (self.run.copy_dir.to_path_buf(), step_root)
        } else {
            (
                self.run.root.display_path(self.run.copy_dir),
                self.run.root.display_path(&step_root),
            )
        };
        let ctx = StepContext {
            mode: self.run.mode.as_str().to_string(),
            name: self.step.name.clone(),
            args: args.to_vec(),
            package_name: self.package.package_name.clone(),
            package_version: self.package.package_version.clone(),
            previous_version,
            skyhook_dir: skyhook_dir.display().to_string(),
            step_root: step_root.display().to_string(),
            resource_id: self.run.id.raw.clone(),
            node_order: get("SKYHOOK_NODE_ORDER").and_then(|v| v.trim().parse().ok()),
            dry_run: false,
            env: env.iter().cloned().collect::<BTreeMap<_, _>>(),
        };
        let exec_mode = if self.run.mode.is_check() {
            ExecMode::Check
        } else {
            ExecMode::Apply
        };
        let session_root =
            HostRoot::open(self.run.root.mount()).map_err(|source| AgentError::OpenRoot {
                path: self.run.root.mount().to_path_buf(),
                source,
            })?;
        let options = HostOptions {
            env: env.clone(),
            configmaps_dir: Some(
                self.run
                    .root
                    .display_path(&self.run.copy_dir.join("configmaps")),
            ),
            node_metadata_dir: Some(
                self.run
                    .root
                    .display_path(&self.run.copy_dir.join("node-metadata")),
            ),
            commands_chrooted: self.step.on_host,
            deadline: Some(Instant::now() + engine.limits().timeout),
            secrets_dir: get("SKYHOOK_SECRETS_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/var/run/secrets/skyhook")),
            allowed_secrets: crate::host::secrets::parse_allowlist(
                &get("SKYHOOK_ALLOWED_SECRETS").unwrap_or_default(),
            ),
            resource_id: self.run.id.raw.clone(),
            redactor: Some(redactor.clone()),
            ..HostOptions::default()
        };
        let api = Arc::new(HostApi::new(Host::new(session_root, exec_mode, options)));
        let output = Arc::new(
            SinkOutput::console(logs, Some(redactor.clone()))
                .map_err(|e| AgentError::Script(render_chain(&e)))?,
        );
        // The script runs on the blocking pool while this task awaits it, so the runtime keeps
        // polling its drivers: a SIGTERM during the step is recorded at once (section 11), as
        // for a process step.
        let runner = ScriptRunner { engine };
        let outcome = {
            let file = script.file().to_string();
            let (script, ctx, api, output) =
                (script.clone(), ctx.clone(), api.clone(), output.clone());
            tokio::task::spawn_blocking(move || {
                runner.run(&script, &ctx, api, output, Arc::new(AtomicBool::new(false)))
            })
            .await
            .map_err(|e| AgentError::Script(format!("{file}: script runner: {e}")))?
        };
        let mut ok = !outcome.failed() && self.step.accepts(outcome.code);
        let mut status = outcome.code;
        let mut interrupts = Vec::new();
        match api.finish() {
            Ok(report) => {
                let drift = report.drift();
                if !drift.is_empty() {
                    let mut text = format!(
                        "drift: {} pending change(s), the host is not in the state this script describes:\n",
                        drift.len()
                    );
                    for change in drift {
                        text.push_str(&format!("  ~ {}\n", change.summary));
                    }
                    crate::script::output::ScriptOutput::stderr(&*output, text.as_bytes());
                    ok = false;
                    if status == 0 {
                        status = 1;
                    }
                }
                if !self.run.mode.is_check() {
                    interrupts = report.interrupts.clone();
                }
            }
            Err(e) => {
                let msg = format!(
                    "{}: deferred host actions failed: {}\n",
                    script.file(),
                    redactor.redact(&render_chain(&e))
                );
                crate::script::output::ScriptOutput::stderr(&*output, msg.as_bytes());
                ok = false;
                if status == 0 {
                    status = 1;
                }
            }
        }
        for e in output.finish() {
            eprintln!("skyhook-agent: {}", render_chain(&e));
        }
        Ok(ScriptStepResult {
            ok,
            status,
            interrupts,
        })
    }
}
