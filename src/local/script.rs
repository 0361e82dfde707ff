//! One `.rhai` script against a host root: [`ScriptRun`] (`skyhook-run SCRIPT --root DIR`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::host::ExecMode;
use crate::host::root::HostRoot;
use crate::host::secrets::Redactor;
use crate::package::Mode;
use crate::script::host_api::Capture;
use crate::script::{CompiledScript, ModuleStore, ScriptEngine, ScriptOutput, compile_step_in};
use crate::step::{End, ScriptStep, SecretSource, StepBuilder, StepSpec};

use super::{LocalError, env_default, env_get};

pub use crate::step::StepResult;

/// The [`StepSpec`] of a local session of `mode` (applied or not): the step environment,
/// configMaps from an agent-side folder, commands chrooted into the root, secrets settings
/// from the environment (`SKYHOOK_SECRETS_DIR`, `SKYHOOK_ALLOWED_SECRETS`), no deadline.
pub(crate) fn local_spec(
    mode: Mode,
    apply: bool,
    env: &[(String, String)],
    configmaps: Option<PathBuf>,
    resource_id: &str,
) -> StepBuilder {
    StepSpec::builder(mode.as_str(), apply)
        .env(env.to_vec())
        .configmaps(configmaps)
        .resource_id(resource_id)
        .secrets(SecretSource::FromEnv)
}

/// Open the host root.
pub(crate) fn open_root(root: &Path) -> Result<HostRoot, LocalError> {
    HostRoot::open(root).map_err(|source| LocalError::OpenRoot {
        path: root.to_path_buf(),
        source,
    })
}

/// An absolute form of `p` (relative to the working directory), `p` itself if that fails.
pub(crate) fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// One script run (`skyhook-run SCRIPT --root DIR ...`).
///
/// The step context: `mode` as given, `name` the file stem, `args`, `dry_run` in plan mode,
/// `package_name`/`package_version` empty, `resource_id` from `SKYHOOK_RESOURCE_ID` in the
/// environment (else empty), `skyhook_dir` the `SKYHOOK_DIR` of the environment, else the
/// configMaps folder's parent, else the script's directory; `step_root` the `STEP_ROOT`
/// of the environment, else the script's directory. Both are also put into the step
/// environment when it lacks them, as the agent does.
#[derive(Debug, Clone)]
pub struct ScriptRun {
    /// The script (a file on this machine; relative imports resolve in its directory).
    pub script: PathBuf,
    /// The host root.
    pub root: PathBuf,
    /// The step's mode (`step.mode`); a `*-check` mode runs on the Check executor.
    pub mode: Mode,
    /// Apply the changes (otherwise a dry run).
    pub apply: bool,
    /// The configMaps folder (may lie outside the root). `None`: the package's
    /// `configmaps/` when the script lies in a package's `skyhook_dir/`, else none.
    pub configmaps: Option<PathBuf>,
    /// The step environment (`env()` in scripts; commands get it too).
    pub env: Vec<(String, String)>,
    /// The step's arguments (`step.args`).
    pub args: Vec<String>,
    /// Aborting it ends the script at its next operation or command (Ctrl-C).
    pub cancel: crate::process::Cancel,
    /// Record script output in the report's ordered list ([`Capture`]); `None`: output is
    /// only written.
    pub capture: Option<Capture>,
    /// Render file diffs in apply mode too (`--apply --diff`; plans always have them).
    pub diffs: bool,
}

/// The deadline of a `.rhai` step run with `env`: its last `SKYHOOK_SCRIPT_TIMEOUT`, read
/// as the agent reads it (whole seconds; unset or blank: the 600 s default).
///
/// # Errors
/// A value the agent refuses (not a whole number of seconds from 1 to a year).
pub fn script_timeout(env: &[(String, String)]) -> Result<std::time::Duration, LocalError> {
    crate::mode::settings::parse_script_timeout(env_get(env, "SKYHOOK_SCRIPT_TIMEOUT"))
        .map_err(|e| crate::agent::error::AgentError::from(e).into())
}

impl ScriptRun {
    /// The executor this run uses ([`crate::step::exec_mode`]).
    pub fn exec_mode(&self) -> ExecMode {
        crate::step::exec_mode(self.mode.as_str(), self.apply)
    }

    /// The configMaps folder used: [`ScriptRun::configmaps`], or `../configmaps` beside a
    /// `skyhook_dir` the script lies in, when that exists.
    pub fn configmaps_dir(&self) -> Option<PathBuf> {
        if let Some(c) = &self.configmaps {
            return Some(absolute(c));
        }
        let dir = absolute(&self.script);
        let dir = dir.parent()?;
        if dir.file_name()? != "skyhook_dir" {
            return None;
        }
        let cm = dir.parent()?.join("configmaps");
        cm.is_dir().then_some(cm)
    }

    /// Compile the script and its imports (nothing runs).
    ///
    /// # Errors
    /// [`LocalError::Compile`] (`file:line:col: message`).
    pub fn compile(&self, engine: &ScriptEngine) -> Result<CompiledScript, LocalError> {
        let base = match self.script.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut store = ModuleStore::new(base);
        if let Some(cm) = self.configmaps_dir() {
            store = store.with_configmaps(cm);
        }
        Ok(compile_step_in(engine, &self.script, Arc::new(store))?)
    }

    /// Compile and run the script once, on a new session over the root; script output goes
    /// to `output` redacted (every secret read and every `SKYHOOK_REDACT_ENV` value replaced
    /// by `***`). Returns the outcome and the session's redactor (for rendering the report).
    ///
    /// # Errors
    /// The script does not compile, or the root cannot be opened (nothing ran then).
    pub fn run(
        &self,
        engine: &ScriptEngine,
        output: Arc<dyn ScriptOutput>,
    ) -> Result<(StepResult, Redactor), LocalError> {
        let timeout = script_timeout(&self.env)?;
        let compiled = self.compile(engine)?;
        let root = open_root(&self.root)?;
        let script_dir = absolute(&self.script)
            .parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
        let configmaps = self.configmaps_dir();
        let mut env = self.env.clone();
        let skyhook_dir = configmaps
            .as_ref()
            .and_then(|c| c.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| script_dir.clone());
        env_default(&mut env, "SKYHOOK_DIR", skyhook_dir.display().to_string());
        env_default(&mut env, "STEP_ROOT", script_dir.display().to_string());
        let resource_id = env_get(&env, "SKYHOOK_RESOURCE_ID")
            .unwrap_or("")
            .to_string();
        let name = self
            .script
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let spec = local_spec(self.mode, self.apply, &env, configmaps, &resource_id)
            .step(name, self.args.clone())
            .dirs(
                env_get(&env, "SKYHOOK_DIR").unwrap_or(""),
                env_get(&env, "STEP_ROOT").unwrap_or(""),
            )
            .cancel(self.cancel.clone())
            .diffs(self.diffs)
            .script_timeout(timeout)
            .build();
        let api = spec.session(root);
        let redactor = api.redactor().clone();
        let output = match self.capture {
            Some(c) => api.capture_output(output, c),
            None => output,
        };
        let output = api.redacting_output(output);
        let outcome = ScriptStep {
            engine,
            script: &compiled,
            spec: &spec,
            api: &api,
            end: End::Session,
            list_drift: false,
        }
        .run(output);
        Ok((outcome, redactor))
    }
}
