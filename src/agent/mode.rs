//! One mode of one package (agent-contract.md sections 4 and 7-8): preparation, the flag
//! decision, step execution, check summaries and history.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use chrono::{Local, Utc};

use crate::host::effect::InterruptRequest;
use crate::host::root::HostRoot;
use crate::logs::redact::Redactor;
use crate::logs::retention;
use crate::logs::sink::{StepLogFiles, open_step_logs};
use crate::package::{self, Mode, Package, Step};
use crate::pyfmt;
use crate::runner::process::{Outcome, ProcessRunner, ProcessSpec, RunOptions};
use crate::script::run::CompiledScript;
use crate::state::{flags, history, lock};

use super::error::AgentError;
use super::interrupt::{Interrupt, InterruptRun};
use super::prepare;
use super::script_step::{self, StepScripts};
use super::settings::{DEFAULT_PATH, ResourceId, Settings};
use super::signal::Shutdown;

/// Number of log files kept per step (section 6.5).
pub const LOGS_KEPT: usize = 5;

/// Print one line on stdout and flush (ordering with relayed step output matters).
pub(crate) fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Print one warning line on stderr.
pub(crate) fn warn(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "WARNING: {line}");
    let _ = err.flush();
}

/// An environment under construction: later `set` calls replace earlier values.
#[derive(Debug, Clone, Default)]
pub(crate) struct EnvBuilder(Vec<(OsString, OsString)>);

impl EnvBuilder {
    pub(crate) fn from_agent(settings: &Settings) -> Self {
        let mut me = EnvBuilder(Vec::new());
        for (k, v) in &settings.env {
            me.set(k, v);
        }
        if settings.var("PATH").is_none() {
            me.set("PATH", DEFAULT_PATH);
        }
        me
    }

    pub(crate) fn set(&mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) {
        let k = k.as_ref();
        if let Some(slot) = self.0.iter_mut().find(|(n, _)| n == k) {
            slot.1 = v.as_ref().to_os_string();
        } else {
            self.0.push((k.to_os_string(), v.as_ref().to_os_string()));
        }
    }

    pub(crate) fn into_vec(self) -> Vec<(OsString, OsString)> {
        self.0
    }
}

/// Create the log files of one executed step or interrupt command (6.5), or none when
/// `SKYHOOK_AGENT_WRITE_LOGS` is false. Also returns the step's older logs (newest first) for
/// [`prune_logs`] after the step, so retention does not list the directory again.
///
/// # Errors
/// The files cannot be created (the message names the path).
pub(crate) fn open_logs(
    root: &HostRoot,
    settings: &Settings,
    log_dir: &Path,
    base: &str,
) -> Result<(Option<StepLogFiles>, Vec<PathBuf>), AgentError> {
    if !settings.write_logs {
        return Ok((None, Vec::new()));
    }
    let mut logs = open_step_logs(root, log_dir, base, Utc::now())
        .map_err(|e| AgentError::Script(crate::agent::error::render_chain(&e)))?;
    let previous = std::mem::take(&mut logs.previous);
    Ok((Some(logs), previous))
}

/// Log retention after a step or interrupt command ran (6.5): of the `previous` logs (newest
/// first, from [`open_logs`]) keep [`LOGS_KEPT`]` - 1` beside the new one. A failure only warns.
pub(crate) fn prune_logs(root: &HostRoot, base: &str, previous: &[PathBuf]) {
    if let Err(e) = retention::prune_listed(root, previous, LOGS_KEPT - 1) {
        warn(&format!(
            "log retention for {base}: {}",
            crate::agent::error::render_chain(&e)
        ));
    }
}

/// What one executed step produced.
#[derive(Debug, Default)]
pub(crate) struct StepResult {
    /// The step succeeded.
    pub ok: bool,
    /// Interrupts a script step requested (run after its flag is written).
    pub interrupts: Vec<InterruptRequest>,
}

impl StepResult {
    fn failed() -> Self {
        StepResult::default()
    }
}

/// An environment as UTF-8 strings (invalid sequences replaced), for the script layer.
pub(crate) fn lossy_env(env: &[(OsString, OsString)]) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

/// Everything one mode run needs.
pub struct ModeRun<'a> {
    /// The host root.
    pub root: &'a HostRoot,
    /// Agent settings.
    pub settings: &'a Settings,
    /// The resource id.
    pub id: &'a ResourceId,
    /// The copy dir (host path).
    pub copy_dir: &'a Path,
    /// The mode.
    pub mode: Mode,
    /// Stop requests.
    pub shutdown: &'a Shutdown,
}

fn step_root(copy_dir: &Path) -> PathBuf {
    copy_dir.join("skyhook_dir")
}

/// Load and validate `<copy dir>/config.json` and the step files (section 4 item 2, 5).
/// Prints warnings on stderr.
///
/// # Errors
/// Unreadable or invalid config, missing step files.
pub fn load_package(root: &HostRoot, copy_dir: &Path) -> Result<Package, AgentError> {
    let config = copy_dir.join("config.json");
    let shown = root.display_path(&config);
    let bytes = root.read(&config)?;
    let loaded = package::load::parse(&shown, &bytes)?;
    for w in &loaded.warnings {
        warn(w.trim_start());
    }
    let sroot = step_root(copy_dir);
    package::load::check_step_files(
        &shown,
        &loaded.package,
        |p| matches!(root.metadata(&sroot.join(p)), Ok(Some(m)) if m.is_file()),
    )?;
    Ok(loaded.package)
}

impl ModeRun<'_> {
    fn flag_dir_pkg(&self, pkg: &Package) -> (String, String) {
        (pkg.package_name.clone(), pkg.package_version.clone())
    }

    fn log_dir(&self, pkg: &Package) -> PathBuf {
        self.settings
            .log_root
            .join(&pkg.package_name)
            .join(&pkg.package_version)
    }

    /// Run the mode end to end: legacy copy, load, expected files, overlay, lock, `START`, steps.
    /// Returns true when the mode succeeded (exit 0).
    ///
    /// # Errors
    /// Preparation and state failures (exit 1). Step failures are `Ok(false)`.
    pub async fn run(&self) -> Result<bool, AgentError> {
        prepare::legacy_copy(self.root, self.copy_dir, &self.settings.data_dir)?;
        let pkg = load_package(self.root, self.copy_dir)?;
        for (mode, steps) in &pkg.modes {
            for s in steps.iter().filter(|s| !s.on_host) {
                warn(&format!(
                    "step {} ({}) has on_host: false: it runs in the agent's filesystem with the host under {}, not chrooted into the host",
                    s.path,
                    mode.as_str(),
                    self.root.mount().display()
                ));
            }
        }
        let scripts = script_step::compile_mode_scripts(self.root, self.copy_dir, &pkg, self.mode)?;
        if !matches!(self.mode, Mode::Uninstall | Mode::UninstallCheck) {
            prepare::check_expected_files(self.root, self.copy_dir, &pkg.expected_config_files)?;
            prepare::overlay(self.root, self.copy_dir)?;
        }
        let _lock = lock::lock_package(self.root, &self.settings.state_root, &pkg.package_name)?;
        flags::write_start(self.root, &self.settings.state_root)?;
        if self.mode.is_check() {
            self.run_checks(&pkg, &scripts).await
        } else {
            self.run_steps(&pkg, &scripts).await
        }
    }

    fn versions(&self, pkg: &Package) -> Result<Option<(String, String)>, AgentError> {
        if !matches!(self.mode, Mode::Upgrade | Mode::UpgradeCheck) {
            return Ok(None);
        }
        let read = history::read_previous(self.root, &self.settings.state_root, &pkg.package_name)?;
        for m in &read.messages {
            say(m);
        }
        Ok(Some((read.previous, pkg.package_version.clone())))
    }

    async fn run_steps(&self, pkg: &Package, scripts: &StepScripts) -> Result<bool, AgentError> {
        let (name, ver) = self.flag_dir_pkg(pkg);
        for (index, step) in pkg.steps(self.mode).iter().enumerate() {
            if self.shutdown.check().await {
                warn(&format!("stopping before {}: SIGTERM received", step.path));
                return Ok(false);
            }
            let flag = flags::flag_path(&self.settings.state_root, &name, &ver, step);
            let versions = self.versions(pkg)?;
            if self.root.exists(&flag)? {
                let shown = self.root.display_path(&flag);
                if self.settings.always_run_step {
                    say(&format!(
                        "WARNING: {} exists for {} but OVERLAY_ALWAYS_RUN_STEP flag is set so running anyway.",
                        shown.display(),
                        step.path
                    ));
                } else if matches!(self.mode, Mode::Config | Mode::Uninstall | Mode::Upgrade) {
                    say(
                        "Flag exists but CONFIG, UNINSTALL, and UPGRADE mode don't support idempotence so running step anyway.",
                    );
                } else if step.idempotence {
                    say("Flag exists but idempotence is Idempotence.Disabled so running step.");
                } else {
                    say(&format!(
                        "Skipping {} because {} exists.",
                        step.path,
                        shown.display()
                    ));
                    continue;
                }
            }
            let result = self
                .execute(pkg, step, versions.as_ref(), scripts.get(&index))
                .await?;
            if !result.ok {
                return Ok(false);
            }
            flags::write_flag(self.root, &flag, step, Local::now().naive_local())?;
            for request in &result.interrupts {
                if !self.run_requested_interrupt(step, request).await? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    async fn run_checks(&self, pkg: &Package, scripts: &StepScripts) -> Result<bool, AgentError> {
        let steps = pkg.steps(self.mode);
        let state = &self.settings.state_root;
        if steps.is_empty() {
            warn(&format!(
                "There are no {} steps defined. This will be ran as a no-op.",
                self.mode.as_str()
            ));
        } else {
            flags::clear_all_checked(self.root, state, self.mode)?;
            let mut results = Vec::with_capacity(steps.len());
            for (index, step) in steps.iter().enumerate() {
                if self.shutdown.check().await {
                    warn(&format!("stopping before {}: SIGTERM received", step.path));
                    return Ok(false);
                }
                let versions = self.versions(pkg)?;
                let ok = self
                    .execute(pkg, step, versions.as_ref(), scripts.get(&index))
                    .await?
                    .ok;
                results.push((step.path.clone(), !ok));
            }
            flags::write_check_results(self.root, state, &results)?;
            if results.iter().any(|(_, failed)| *failed) {
                return Ok(false);
            }
            flags::set_all_checked(self.root, state, self.mode)?;
        }
        let now = Utc::now();
        let record = |version: &str| -> Result<(), AgentError> {
            for m in history::record(self.root, state, &pkg.package_name, version, now)? {
                say(&m);
            }
            Ok(())
        };
        match self.mode {
            Mode::ApplyCheck | Mode::UpgradeCheck => record(&pkg.package_version)?,
            Mode::UninstallCheck => {
                record("uninstalled")?;
                flags::remove_package_flags(self.root, state, pkg)?;
            }
            _ => {}
        }
        Ok(true)
    }

    /// Execute one step (section 8): header, `env:` substitution, chmod, process, result line,
    /// log retention. Returns whether the step succeeded.
    async fn execute(
        &self,
        pkg: &Package,
        step: &Step,
        versions: Option<&(String, String)>,
        script: Option<&CompiledScript>,
    ) -> Result<StepResult, AgentError> {
        let mut shown_args = step.arguments.clone();
        if let (true, Some((prev, cur))) = (step.upgrade_step, versions) {
            shown_args.push(prev.clone());
            shown_args.push(cur.clone());
        }
        say(&format!(
            "{} {} {} {} {} {}",
            self.mode.as_str(),
            step.path,
            pyfmt::repr_str_list(&shown_args),
            pyfmt::repr_codes(&step.returncodes),
            step.idempotence_label(),
            if step.on_host { "True" } else { "False" }
        ));

        // env: substitution from the agent's environment (8.1)
        let mut args: Vec<String> = Vec::with_capacity(shown_args.len());
        let mut missing = Vec::new();
        for a in &step.arguments {
            match a.strip_prefix("env:") {
                Some(name) => match self.settings.var(name) {
                    Some(v) => args.push(v.to_string_lossy().into_owned()),
                    None => missing.push(name.to_string()),
                },
                None => args.push(a.clone()),
            }
        }
        if !missing.is_empty() {
            for name in missing {
                say(&format!(
                    "{}: Expected environment variable did not exist: {name}",
                    step.path
                ));
            }
            return Ok(StepResult::failed());
        }
        if let (true, Some((prev, cur))) = (step.upgrade_step, versions) {
            args.push(prev.clone());
            args.push(cur.clone());
        }

        let host_program = step_root(self.copy_dir).join(&step.path);
        if script.is_none() {
            self.make_executable(&host_program)?;
        }

        let mut env = EnvBuilder::from_agent(self.settings);
        for (k, v) in &step.env {
            env.set(k, v);
        }
        if let Some((prev, cur)) = versions {
            env.set("PREVIOUS_VERSION", prev);
            env.set("CURRENT_VERSION", cur);
        }
        let (program, cwd, chroot, step_root_v, skyhook_dir_v) = if step.on_host {
            (
                host_program.clone(),
                self.copy_dir.to_path_buf(),
                Some(self.root.mount().to_path_buf()),
                step_root(self.copy_dir),
                self.copy_dir.to_path_buf(),
            )
        } else {
            (
                self.root.display_path(&host_program),
                self.root.display_path(self.copy_dir),
                None,
                self.root.display_path(&step_root(self.copy_dir)),
                self.root.display_path(self.copy_dir),
            )
        };
        env.set("STEP_ROOT", &step_root_v);
        env.set("SKYHOOK_DIR", &skyhook_dir_v);

        let env = env.into_vec();
        let redactor = Redactor::from_env(&lossy_env(&env));
        let log_dir = self.log_dir(pkg);
        let (logs, previous_logs) = open_logs(self.root, self.settings, &log_dir, &step.path)?;
        let (ok, status, interrupts) = match script {
            Some(script) => {
                let run = script_step::ScriptStep {
                    run: self,
                    package: pkg,
                    step,
                };
                let r = run
                    .run(
                        script,
                        &args,
                        env,
                        versions.map(|(p, _)| p.clone()),
                        logs,
                        redactor,
                    )
                    .await?;
                (r.ok, r.status, r.interrupts)
            }
            None => {
                let spec = ProcessSpec {
                    program,
                    args: args.iter().map(OsString::from).collect(),
                    env,
                    cwd,
                    chroot,
                    timeout: None,
                    preamble: None,
                    keep_fds: lock::held_fd(&lock::lock_path(
                        &self.settings.state_root,
                        &pkg.package_name,
                    ))
                    .into_iter()
                    .collect(),
                };
                let runner = ProcessRunner {
                    buffer_limit: self.settings.buffer_limit,
                };
                let options = RunOptions {
                    redactor: Some(redactor),
                    ..RunOptions::default()
                };
                let outcome = runner.run_with(&spec, logs, options).await.outcome;
                if let Outcome::SpawnFailed(e) = &outcome {
                    eprintln!(
                        "skyhook-agent: failed to execute {}: {e}",
                        self.root.display_path(&host_program).display()
                    );
                }
                (
                    outcome.succeeded_with(|c| step.accepts(c)),
                    outcome.display_status(),
                    Vec::new(),
                )
            }
        };
        let joined = args.join(" ");
        if ok {
            say(&format!("SUCEEDED: {} {joined}", step.path));
        } else {
            say(&format!("FAILED: {} {joined} {status}", step.path));
        }
        prune_logs(self.root, &step.path, &previous_logs);
        Ok(StepResult { ok, interrupts })
    }

    /// Run an interrupt a script step requested (`interrupt::reboot()` ...), after the step
    /// succeeded and its flag was written, with the agent's interrupt machinery (same
    /// commands, same once-per-resource-id markers).
    async fn run_requested_interrupt(
        &self,
        step: &Step,
        request: &InterruptRequest,
    ) -> Result<bool, AgentError> {
        let interrupt = match request {
            InterruptRequest::Reboot => Interrupt::NodeRestart,
            InterruptRequest::RestartServices { services } => {
                Interrupt::ServiceRestart(services.clone())
            }
            InterruptRequest::RestartAllServices => Interrupt::RestartAllServices,
        };
        say(&format!(
            "{} requested interrupt {}",
            step.path,
            interrupt.type_name()
        ));
        InterruptRun {
            root: self.root,
            settings: self.settings,
            id: self.id,
            copy_dir: self.copy_dir,
            shutdown: self.shutdown,
        }
        .run(&interrupt)
        .await
    }

    /// Add the execute bits (8.2): `mode | 0o111` on the permission bits, dropping
    /// set-uid/set-gid/sticky when a chmod is needed [fix]. Follows symlinks inside the root.
    fn make_executable(&self, host: &Path) -> Result<(), AgentError> {
        if let Some(m) = self.root.metadata(host)? {
            let mode = m.mode() & 0o7777;
            if mode & 0o111 != 0o111 {
                self.root.set_mode(host, (mode & 0o777) | 0o111)?;
            }
        }
        Ok(())
    }
}
