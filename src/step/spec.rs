//! [`StepSpec`]: what a step is, as every front end states it (the agent's mode loop, the dry
//! run, `skyhook-agent serve`, `skyhook-run SCRIPT`), and the one place that turns it into
//! what a `.rhai` step runs with: the script's `step` context ([`StepSpec::context`]), the
//! host session's options ([`StepSpec::host_options`]) and the session itself
//! ([`StepSpec::session`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::host::root::HostRoot;
use crate::host::secrets::parse_allowlist;
use crate::host::{ExecMode, Host, HostOptions};
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

/// One step as its front end describes it: the package, mode and step, the environment,
/// configMaps and node metadata, the executor, the deadline and the cancel token.
///
/// [`Default`] is an unnamed `apply` step on the Apply executor with an empty environment,
/// no configMaps, commands chrooted, no deadline and return code 0 its only success.
#[derive(Debug, Clone)]
pub struct StepSpec {
    /// The mode as scripts see it (`step.mode`: `apply`, `apply-check`, ...).
    pub mode: String,
    /// The executor: Apply, Plan (a dry run) or Check (a `*-check` mode).
    pub exec: ExecMode,
    /// The step's name (`step.name`).
    pub name: String,
    /// Its arguments after `env:` substitution and the upgrade versions.
    pub args: Vec<String>,
    /// The package's name; empty for a lone script.
    pub package_name: String,
    /// The package's version; empty for a lone script.
    pub package_version: String,
    /// The version upgraded from (upgrade modes).
    pub previous_version: Option<String>,
    /// `SKYHOOK_DIR` as the step sees it.
    pub skyhook_dir: String,
    /// `STEP_ROOT` as the step sees it.
    pub step_root: String,
    /// `SKYHOOK_RESOURCE_ID` (the script's `step.resource_id` and the session's).
    pub resource_id: String,
    /// `SKYHOOK_NODE_ORDER` as a number ([`node_order`]), when known.
    pub node_order: Option<i64>,
    /// The step's complete environment as text (later entries win): `env()` in scripts and
    /// the environment of the commands they run.
    pub env: Vec<(String, String)>,
    /// Agent-side configMaps directory; `None`: no configMaps.
    pub configmaps_dir: Option<PathBuf>,
    /// Agent-side node metadata directory; `None`: empty maps.
    pub node_metadata_dir: Option<PathBuf>,
    /// Run the script's commands chrooted into the host root (`on_host`).
    pub commands_chrooted: bool,
    /// Where secrets come from.
    pub secrets: SecretSource,
    /// The step's deadline (the default command timeout is what remains of it).
    pub deadline: Option<Instant>,
    /// A script step's wall-clock limit (`SKYHOOK_SCRIPT_TIMEOUT`); `None`: the engine's.
    pub script_timeout: Option<Duration>,
    /// Return codes that count as success (the step's `returncodes`).
    pub returncodes: Vec<i32>,
    /// The redactor shared with the step's log sink; `None`: the session makes one from
    /// `SKYHOOK_REDACT_ENV` in [`StepSpec::env`].
    pub redactor: Option<Redactor>,
    /// Aborting it ends the step at its next operation.
    pub cancel: Cancel,
    /// A cgroup every command of the step joins (`skyhook-agent serve`).
    pub cgroup: Option<PathBuf>,
    /// Render file diffs in apply mode too.
    pub diffs: bool,
}

impl Default for StepSpec {
    fn default() -> Self {
        StepSpec {
            mode: "apply".into(),
            exec: ExecMode::Apply,
            name: String::new(),
            args: Vec::new(),
            package_name: String::new(),
            package_version: String::new(),
            previous_version: None,
            skyhook_dir: String::new(),
            step_root: String::new(),
            resource_id: String::new(),
            node_order: None,
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
        }
    }
}

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
    /// The script's `step` context; `dry_run` is true on the Plan executor.
    pub fn context(&self) -> StepContext {
        StepContext {
            mode: self.mode.clone(),
            name: self.name.clone(),
            args: self.args.clone(),
            package_name: self.package_name.clone(),
            package_version: self.package_version.clone(),
            previous_version: self.previous_version.clone(),
            skyhook_dir: self.skyhook_dir.clone(),
            step_root: self.step_root.clone(),
            resource_id: self.resource_id.clone(),
            node_order: self.node_order,
            dry_run: self.exec == ExecMode::Plan,
            env: self.env.iter().cloned().collect(),
        }
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
            resource_id: self.resource_id.clone(),
            package_lock_timeout: defaults.package_lock_timeout,
            redactor: self.redactor.clone(),
            cancel: self.cancel.clone(),
            diffs: self.diffs,
            cgroup: self.cgroup.clone(),
            undo: (self.exec == ExecMode::Apply)
                .then(|| format!("{}-{}", self.package_name, self.name)),
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
    fn secrets_from_env_take_the_last_value_and_an_empty_dir_is_the_default() {
        let spec = StepSpec {
            env: env(&[
                ("SKYHOOK_SECRETS_DIR", "/a"),
                ("SKYHOOK_SECRETS_DIR", "/b"),
                ("SKYHOOK_ALLOWED_SECRETS", "db, tls"),
            ]),
            ..StepSpec::default()
        };
        let o = spec.host_options();
        assert_eq!(o.secrets_dir, PathBuf::from("/b"));
        assert_eq!(o.allowed_secrets, vec!["db".to_string(), "tls".to_string()]);
        assert!(o.declared_secrets.is_none());
        let empty = StepSpec {
            env: env(&[("SKYHOOK_SECRETS_DIR", "")]),
            ..StepSpec::default()
        };
        assert_eq!(
            empty.host_options().secrets_dir,
            PathBuf::from("/var/run/secrets/skyhook")
        );
    }

    #[test]
    fn declared_secrets_ignore_the_environment() {
        let spec = StepSpec {
            env: env(&[
                ("SKYHOOK_SECRETS_DIR", "/a"),
                ("SKYHOOK_ALLOWED_SECRETS", "db"),
            ]),
            secrets: SecretSource::Declared(vec![("db".into(), "pw".into(), "x".into())]),
            ..StepSpec::default()
        };
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
        let mut spec = StepSpec {
            mode: "apply-check".into(),
            exec: ExecMode::Check,
            name: "s".into(),
            env: env(&[("A", "1"), ("A", "2"), ("SKYHOOK_NODE_ORDER", " 3 ")]),
            ..StepSpec::default()
        };
        spec.node_order = node_order(&spec.env);
        let c = spec.context();
        assert!(!c.dry_run);
        assert!(c.is_check());
        assert_eq!(c.node_order, Some(3));
        assert_eq!(c.env.get("A").map(String::as_str), Some("2"));
        spec.exec = ExecMode::Plan;
        assert!(spec.context().dry_run);
    }
}
