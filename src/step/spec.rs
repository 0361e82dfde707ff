//! [`StepSpec`]: what a step is, as every front end states it (the agent's mode loop, the dry
//! run, interrupt commands, `skyhook-agent serve`, `skyhook-run SCRIPT`), made in one place,
//! [`StepSpec::builder`] → [`StepBuilder::build`]; and the one place that turns it into what a
//! `.rhai` step runs with: the script's `step` context ([`StepSpec::context`], held once),
//! the host session's options ([`StepSpec::host_options`]) and the session itself
//! ([`StepSpec::session`]). The executor a mode runs on is decided by [`exec_mode`] alone.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::host::root::HostRoot;
use crate::host::secrets::parse_allowlist;
use crate::host::{ExecMode, Host, HostOptions, StartMemo};
use crate::process::Cancel;
use crate::redact::Redactor;
use crate::script::context::StepContext;
use crate::script::host_api::HostApi;

/// Where a step's `secret(name, key)` reads come from.
#[derive(Debug, Clone, Default)]
pub enum SecretSource {
    /// Files under `SKYHOOK_SECRETS_DIR` (default `/var/run/secrets/skyhook`) whose names
    /// `SKYHOOK_ALLOWED_SECRETS` allows, both read from the step's environment.
    #[default]
    FromEnv,
    /// Only these `(name, key, value)` coordinates, resolved before the step started
    /// (`skyhook-agent serve`); no file is read.
    Declared(Vec<(String, String, String)>),
}

/// The executor of a step in `mode` (`apply`, `apply-check`, ...): a `*-check` mode always
/// runs on Check (drift fails it, nothing changes); any other mode on Apply when `apply`,
/// else on Plan (a dry run). The one place this is decided.
pub fn exec_mode(mode: &str, apply: bool) -> ExecMode {
    if mode.ends_with("-check") {
        ExecMode::Check
    } else if apply {
        ExecMode::Apply
    } else {
        ExecMode::Plan
    }
}

/// One step as its front end describes it: the script's `step` context (mode, name,
/// arguments, package, directories, resource id, node order, environment), the executor,
/// configMaps and node metadata, secrets, deadline, return codes and cancel token.
///
/// Made only by [`StepSpec::builder`]; its fields are read through its methods.
#[derive(Debug, Clone)]
pub struct StepSpec {
    /// The script's `step` context; its `dry_run` is true on the Plan executor and its
    /// `env` is [`StepSpec::env`] with the last value of each name.
    context: StepContext,
    /// The executor: Apply, Plan (a dry run) or Check (a `*-check` mode), from
    /// [`exec_mode`].
    exec: ExecMode,
    /// The step's complete environment as text (later entries win): `env()` in scripts and
    /// the environment of the commands they run.
    env: Vec<(String, String)>,
    /// Agent-side configMaps directory; `None`: no configMaps.
    configmaps_dir: Option<PathBuf>,
    /// Agent-side node metadata directory; `None`: empty maps.
    node_metadata_dir: Option<PathBuf>,
    /// Run the script's commands chrooted into the host root (`on_host`).
    commands_chrooted: bool,
    /// Where secrets come from.
    secrets: SecretSource,
    /// The step's deadline (the default command timeout is what remains of it).
    deadline: Option<Instant>,
    /// A script step's wall-clock limit (`SKYHOOK_SCRIPT_TIMEOUT`); `None`: the engine's.
    script_timeout: Option<Duration>,
    /// Return codes that count as success (the step's `returncodes`).
    returncodes: Vec<i32>,
    /// The redactor shared with the step's log sink; `None`: the session makes one from
    /// `SKYHOOK_REDACT_ENV` in [`StepSpec::env`].
    redactor: Option<Redactor>,
    /// Aborting it ends the step at its next operation.
    cancel: Cancel,
    /// A cgroup every command of the step joins (`skyhook-agent serve`).
    cgroup: Option<PathBuf>,
    /// Render file diffs in apply mode too.
    diffs: bool,
}

/// Builds the one [`StepSpec`] of a step; start with [`StepSpec::builder`].
///
/// Unset parts: an unnamed step without arguments or package, empty directories and
/// resource id, an empty environment (no node order), no configMaps or node metadata,
/// commands chrooted, secrets from the environment, no deadline, the engine's script
/// timeout, return code 0 the only success, the session's own redactor, a fresh cancel
/// token, no cgroup, no diffs in apply mode.
#[derive(Debug, Clone)]
#[must_use]
pub struct StepBuilder(StepSpec);

/// The last value of `name` in `env`.
fn env_get<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// `SKYHOOK_NODE_ORDER` of `env` as a number; `None` when unset or not an integer.
pub fn node_order(env: &[(String, String)]) -> Option<i64> {
    env_get(env, "SKYHOOK_NODE_ORDER").and_then(|v| v.trim().parse().ok())
}

impl StepSpec {
    /// A builder for a step of `mode` (`step.mode`: `apply`, `apply-check`, ...) on the
    /// executor [`exec_mode`]`(mode, apply)` decides; everything else as [`StepBuilder`]
    /// says until set.
    pub fn builder(mode: &str, apply: bool) -> StepBuilder {
        let exec = exec_mode(mode, apply);
        StepBuilder(StepSpec {
            context: StepContext {
                mode: mode.to_string(),
                dry_run: exec == ExecMode::Plan,
                ..StepContext::default()
            },
            exec,
            env: Vec::new(),
            configmaps_dir: None,
            node_metadata_dir: None,
            commands_chrooted: true,
            secrets: SecretSource::FromEnv,
            deadline: None,
            script_timeout: None,
            returncodes: vec![0],
            redactor: None,
            cancel: Cancel::new(),
            cgroup: None,
            diffs: false,
        })
    }

    /// The script's `step` context.
    pub fn context(&self) -> &StepContext {
        &self.context
    }

    /// The executor: Apply, Plan or Check.
    pub fn exec(&self) -> ExecMode {
        self.exec
    }

    /// The step's complete environment as text (later entries win).
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// The step's cancel token.
    pub fn cancel(&self) -> &Cancel {
        &self.cancel
    }

    /// The cgroup every command of the step joins, if any (`skyhook-agent serve`).
    pub fn cgroup(&self) -> Option<&Path> {
        self.cgroup.as_deref()
    }

    /// The redactor shared with the step's log sink, when the front end gave one.
    pub fn redactor(&self) -> Option<&Redactor> {
        self.redactor.as_ref()
    }

    /// A script step's wall-clock limit; `None`: the engine's.
    pub fn script_timeout(&self) -> Option<Duration> {
        self.script_timeout
    }

    /// The return code a step judged as returning one it accepts has: the first of its
    /// return codes (0 when it has none).
    pub fn first_returncode(&self) -> i32 {
        self.returncodes.first().copied().unwrap_or(0)
    }

    /// The options of the step's host session. With [`SecretSource::FromEnv`], an empty
    /// `SKYHOOK_SECRETS_DIR` counts as unset.
    pub fn host_options(&self) -> HostOptions {
        let defaults = HostOptions::default();
        let (secrets_dir, allowed_secrets, declared_secrets) = match &self.secrets {
            SecretSource::FromEnv => (
                env_get(&self.env, "SKYHOOK_SECRETS_DIR")
                    .filter(|v| !v.is_empty())
                    .map_or(defaults.secrets_dir, PathBuf::from),
                parse_allowlist(env_get(&self.env, "SKYHOOK_ALLOWED_SECRETS").unwrap_or("")),
                None,
            ),
            SecretSource::Declared(d) => (
                defaults.secrets_dir,
                defaults.allowed_secrets,
                Some(d.clone()),
            ),
        };
        HostOptions {
            env: self.env.clone(),
            configmaps_dir: self.configmaps_dir.clone(),
            node_metadata_dir: self.node_metadata_dir.clone(),
            commands_chrooted: self.commands_chrooted,
            deadline: self.deadline,
            secrets_dir,
            allowed_secrets,
            declared_secrets,
            resource_id: self.context.resource_id.clone(),
            package_lock_timeout: defaults.package_lock_timeout,
            redactor: self.redactor.clone(),
            cancel: self.cancel.clone(),
            diffs: self.diffs,
            cgroup: self.cgroup.clone(),
            undo: (self.exec == ExecMode::Apply)
                .then(|| format!("{}-{}", self.context.package_name, self.context.name)),
        }
    }

    /// True when `code` is one of the step's return codes.
    pub fn accepts(&self, code: i32) -> bool {
        self.returncodes.contains(&code)
    }

    /// A new host session over `root` on the step's executor with
    /// [`StepSpec::host_options`].
    pub fn session(&self, root: HostRoot) -> HostApi {
        HostApi::new(Host::new(root, self.exec, self.host_options()))
    }

    /// [`StepSpec::session`] for one of a run's steps, which share `memo`: no journal
    /// recovery and no deferred-work records are read again while none was written since an
    /// earlier session found none ([`Host::new_in_run`]).
    pub fn session_in_run(&self, root: HostRoot, memo: &StartMemo) -> HostApi {
        HostApi::new(Host::new_in_run(root, self.exec, self.host_options(), memo))
    }
}

impl StepBuilder {
    /// The step's name (`step.name`) and its arguments after `env:` substitution and the
    /// upgrade versions (`step.args`).
    pub fn step(mut self, name: impl Into<String>, args: Vec<String>) -> Self {
        self.0.context.name = name.into();
        self.0.context.args = args;
        self
    }

    /// The package's name and version, and the version upgraded from (upgrade modes).
    pub fn package(
        mut self,
        name: impl Into<String>,
        version: impl Into<String>,
        previous_version: Option<String>,
    ) -> Self {
        self.0.context.package_name = name.into();
        self.0.context.package_version = version.into();
        self.0.context.previous_version = previous_version;
        self
    }

    /// `SKYHOOK_DIR` and `STEP_ROOT` as the step sees them.
    pub fn dirs(mut self, skyhook_dir: impl Into<String>, step_root: impl Into<String>) -> Self {
        self.0.context.skyhook_dir = skyhook_dir.into();
        self.0.context.step_root = step_root.into();
        self
    }

    /// `SKYHOOK_RESOURCE_ID` (the script's `step.resource_id` and the session's).
    pub fn resource_id(mut self, id: impl Into<String>) -> Self {
        self.0.context.resource_id = id.into();
        self
    }

    /// The step's complete environment as text (later entries win); the script's
    /// `step.node_order` is its `SKYHOOK_NODE_ORDER` ([`node_order`]).
    pub fn env(mut self, env: Vec<(String, String)>) -> Self {
        self.0.context.node_order = node_order(&env);
        self.0.context.env = env.iter().cloned().collect();
        self.0.env = env;
        self
    }

    /// The script's `step.node_order`, overriding what [`StepBuilder::env`] read.
    pub fn node_order(mut self, order: Option<i64>) -> Self {
        self.0.context.node_order = order;
        self
    }

    /// Agent-side configMaps directory (`None`: no configMaps).
    pub fn configmaps(mut self, dir: Option<PathBuf>) -> Self {
        self.0.configmaps_dir = dir;
        self
    }

    /// Agent-side node metadata directory (`None`: empty maps).
    pub fn node_metadata(mut self, dir: Option<PathBuf>) -> Self {
        self.0.node_metadata_dir = dir;
        self
    }

    /// Run the script's commands chrooted into the host root (`on_host`).
    pub fn commands_chrooted(mut self, chrooted: bool) -> Self {
        self.0.commands_chrooted = chrooted;
        self
    }

    /// Where secrets come from.
    pub fn secrets(mut self, secrets: SecretSource) -> Self {
        self.0.secrets = secrets;
        self
    }

    /// A script step's wall-clock limit (`SKYHOOK_SCRIPT_TIMEOUT`).
    pub fn script_timeout(mut self, timeout: Duration) -> Self {
        self.0.script_timeout = Some(timeout);
        self
    }

    /// The step's deadline (the default command timeout is what remains of it).
    pub fn deadline(mut self, deadline: Instant) -> Self {
        self.0.deadline = Some(deadline);
        self
    }

    /// Return codes that count as success (the step's `returncodes`).
    pub fn returncodes(mut self, codes: Vec<i32>) -> Self {
        self.0.returncodes = codes;
        self
    }

    /// The redactor shared with the step's log sink.
    pub fn redactor(mut self, redactor: Redactor) -> Self {
        self.0.redactor = Some(redactor);
        self
    }

    /// The step's cancel token.
    pub fn cancel(mut self, cancel: Cancel) -> Self {
        self.0.cancel = cancel;
        self
    }

    /// A cgroup every command of the step joins.
    pub fn cgroup(mut self, cgroup: Option<PathBuf>) -> Self {
        self.0.cgroup = cgroup;
        self
    }

    /// Render file diffs in apply mode too.
    pub fn diffs(mut self, diffs: bool) -> Self {
        self.0.diffs = diffs;
        self
    }

    /// The step.
    pub fn build(self) -> StepSpec {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn the_executor_is_check_in_check_modes_else_apply_or_plan() {
        assert_eq!(exec_mode("apply", false), ExecMode::Plan);
        assert_eq!(exec_mode("config", true), ExecMode::Apply);
        assert_eq!(exec_mode("apply-check", false), ExecMode::Check);
        assert_eq!(exec_mode("uninstall-check", true), ExecMode::Check);
        assert_eq!(exec_mode("post-interrupt-check", true), ExecMode::Check);
    }

    #[test]
    fn secrets_from_env_take_the_last_value_and_an_empty_dir_is_the_default() {
        let spec = StepSpec::builder("apply", true)
            .env(env(&[
                ("SKYHOOK_SECRETS_DIR", "/a"),
                ("SKYHOOK_SECRETS_DIR", "/b"),
                ("SKYHOOK_ALLOWED_SECRETS", "db, tls"),
            ]))
            .build();
        let o = spec.host_options();
        assert_eq!(o.secrets_dir, PathBuf::from("/b"));
        assert_eq!(o.allowed_secrets, vec!["db".to_string(), "tls".to_string()]);
        assert!(o.declared_secrets.is_none());
        let empty = StepSpec::builder("apply", true)
            .env(env(&[("SKYHOOK_SECRETS_DIR", "")]))
            .build();
        assert_eq!(
            empty.host_options().secrets_dir,
            PathBuf::from("/var/run/secrets/skyhook")
        );
    }

    #[test]
    fn declared_secrets_ignore_the_environment() {
        let spec = StepSpec::builder("apply", true)
            .env(env(&[
                ("SKYHOOK_SECRETS_DIR", "/a"),
                ("SKYHOOK_ALLOWED_SECRETS", "db"),
            ]))
            .secrets(SecretSource::Declared(vec![(
                "db".into(),
                "pw".into(),
                "x".into(),
            )]))
            .build();
        let o = spec.host_options();
        assert_eq!(o.secrets_dir, PathBuf::from("/var/run/secrets/skyhook"));
        assert!(o.allowed_secrets.is_empty());
        assert_eq!(
            o.declared_secrets,
            Some(vec![("db".into(), "pw".into(), "x".into())])
        );
    }

    #[test]
    fn the_context_is_a_dry_run_only_on_the_plan_executor_and_env_keeps_the_last_value() {
        let e = env(&[("A", "1"), ("A", "2"), ("SKYHOOK_NODE_ORDER", " 3 ")]);
        let spec = StepSpec::builder("apply-check", true)
            .step("s", Vec::new())
            .env(e.clone())
            .build();
        assert_eq!(spec.exec(), ExecMode::Check);
        let c = spec.context();
        assert!(!c.dry_run);
        assert!(c.is_check());
        assert_eq!(c.node_order, Some(3));
        assert_eq!(c.env.get("A").map(String::as_str), Some("2"));
        let plan = StepSpec::builder("apply", false).env(e).build();
        assert_eq!(plan.exec(), ExecMode::Plan);
        assert!(plan.context().dry_run);
        assert!(!StepSpec::builder("apply", true).build().context().dry_run);
    }
}
