//! A whole package: [`PackageRun`] (`skyhook-run --package DIR --mode MODE --root DIR`).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::agent::error::AgentError;
use crate::agent::mode::preflight::Preflight;
use crate::agent::mode::{ModeRun, load_package};
use crate::agent::site::PackageSite;
use crate::host::effects::report::Action;
use crate::host::secrets::Redactor;
use crate::host::{ExecMode, Host, PlanCarry, Report};
use crate::mode::coverage::{Declarations, DeclaredInterrupts};
use crate::mode::settings::{DEFAULT_PATH, ResourceId, Settings};
use crate::mode::{Console, Decision, ModeLoop, ModeOutcome, PackageMode};
use crate::package::Mode;
use crate::package::load::{Loaded, check_step_files, parse};
use crate::process::Cancel;
use crate::script::host_api::Capture;
use crate::script::host_api::HostApi;
use crate::script::{ScriptEngine, ScriptOutput};
use crate::state::history;
use crate::step::PlanRunner;

use super::script::{StepResult, absolute, local_spec, open_root};
use super::{LocalError, env_get};

/// Where `--package --apply` puts the package copy inside the root (the agent's copy dir):
/// `/var/lib/skyhook/skyhook-run/<name>-<version>`.
pub fn default_copy_dir(name: &str, version: &str) -> PathBuf {
    PathBuf::from(format!("/var/lib/skyhook/skyhook-run/{name}-{version}"))
}

/// One package mode run (`skyhook-run --package DIR --mode MODE`).
#[derive(Debug, Clone)]
pub struct PackageRun {
    /// The package directory on this machine (`config.json`, `skyhook_dir/`, optionally
    /// `configmaps/` and `root_dir/`).
    pub dir: PathBuf,
    /// The host root.
    pub root: PathBuf,
    /// The mode to run (`interrupt` is refused).
    pub mode: Mode,
    /// The configMaps folder (may lie outside the root); `None`: `DIR/configmaps`.
    pub configmaps: Option<PathBuf>,
    /// The step environment before per-step additions (`skyhook-run`: its own environment
    /// plus `--env`). Also the agent settings' source (`SKYHOOK_ROOT_DIR`, `SKYHOOK_LOG_DIR`,
    /// `OVERLAY_ALWAYS_RUN_STEP`, ...) and the source of `env:NAME` arguments.
    pub env: Vec<(String, String)>,
    /// Record script output in each step's ordered list ([`Capture`]; dry runs only);
    /// `None`: output is only written.
    pub capture: Option<Capture>,
    /// The Skyhook CR (YAML or JSON) whose `spec.packages.<name>` declares the package's
    /// interrupts; `None`: `DIR/node-metadata/packages.json` when present, else requested
    /// interrupts are not judged.
    pub skyhook_cr: Option<PathBuf>,
    /// `--apply --diff`: each `.rhai` step's list of what it changed carries the unified
    /// diff of each file content change (a dry run always has them).
    pub diffs: bool,
}

/// How one step of a dry run (or of `--apply`) went.
#[derive(Debug, Clone)]
pub enum StepKind {
    /// A `.rhai` step that ran on the Plan or Check executor (on Apply or Check with
    /// `--apply`).
    Script(StepResult),
    /// Any other step in a dry run: not run, listed as `would run: <path> <args>`.
    Process,
    /// Any other step with `--apply`: it ran; its result has its return code and an empty
    /// report (what a process changes is not tracked).
    ProcessRan(StepResult),
    /// Skipped, as the agent would skip it: its flag exists (a host path).
    Skipped {
        /// The flag file.
        flag: PathBuf,
    },
    /// Failed before running (an `env:` argument whose variable is unset).
    Failed {
        /// The agent's message.
        message: String,
    },
    /// Not reached: an earlier step failed (run modes stop at the first failure).
    NotRun,
    /// The package's `root_dir/` overlay, planned before the steps as the agent applies it
    /// ([`PackageRun::plan`]): its report (file writes and missing directories; in a
    /// `*-check` mode these are not drift, the agent writes them before checking).
    Overlay(Report),
}

/// One step of a dry run.
#[derive(Debug, Clone)]
pub struct PlannedStep {
    /// The step's name.
    pub name: String,
    /// Its path relative to `skyhook_dir`.
    pub path: String,
    /// Its arguments after `env:` substitution and upgrade versions (as configured when the
    /// step was not reached, was skipped or an `env:` variable is missing).
    pub args: Vec<String>,
    /// What happened.
    pub kind: StepKind,
}

impl PlannedStep {
    /// False only for a failed step (a failed script, drift, a missing `env:` variable).
    pub fn ok(&self) -> bool {
        match &self.kind {
            StepKind::Script(o) | StepKind::ProcessRan(o) => o.ok,
            StepKind::Failed { .. } => false,
            StepKind::Process
            | StepKind::Skipped { .. }
            | StepKind::NotRun
            | StepKind::Overlay(_) => true,
        }
    }

    /// `<path> <args>` (the arguments joined by spaces).
    pub fn command_line(&self) -> String {
        let mut s = self.path.clone();
        for a in &self.args {
            s.push(' ');
            s.push_str(a);
        }
        s
    }
}

/// The dry run of one mode of a package, or (exec mode Apply, or Check in a `*-check`
/// mode, from [`PackageRun::apply`]) what its steps did.
#[derive(Debug, Clone)]
pub struct PackagePlan {
    /// `package_name`.
    pub package_name: String,
    /// `package_version`.
    pub package_version: String,
    /// The mode.
    pub mode: Mode,
    /// Plan (Apply with `--apply`), or Check in a `*-check` mode.
    pub exec_mode: ExecMode,
    /// Warnings from loading config.json and reading the history file.
    pub warnings: Vec<String>,
    /// Every step of the mode, in order.
    pub steps: Vec<PlannedStep>,
    /// The session's redactor (secret values read by any step).
    pub redactor: Redactor,
}

impl PackagePlan {
    /// True when no step failed.
    pub fn ok(&self) -> bool {
        self.steps.iter().all(PlannedStep::ok)
    }

    /// Every step's report in one: changes, actions and interrupts in step order,
    /// `unchanged` summed; each process step adds an action (kind `step`, summary
    /// `<path> <args>`), since what it would do is unknown.
    pub fn total(&self) -> Report {
        let mut total = Report::new(self.exec_mode);
        for s in &self.steps {
            match &s.kind {
                StepKind::Script(o) => {
                    total.changes.extend(o.report.changes.iter().cloned());
                    total.actions.extend(o.report.actions.iter().cloned());
                    total.interrupts.extend(o.report.interrupts.iter().cloned());
                    total.unchanged += o.report.unchanged;
                }
                StepKind::Process | StepKind::ProcessRan(_) => {
                    total.actions.push(process_action(s));
                }
                StepKind::Overlay(r) => {
                    // Actions too: deferred work recorded by an earlier run is listed at the
                    // end of the session's first part.
                    total.changes.extend(r.changes.iter().cloned());
                    total.actions.extend(r.actions.iter().cloned());
                    total.unchanged += r.unchanged;
                }
                _ => {}
            }
        }
        total
    }

    /// The text form: for the `root_dir/` overlay a header `==> overlay root_dir/` and its
    /// changes; per step a header `==> step <name>: <path> <args>` and what it
    /// planned (the [`Report`] text form without its summary line: `~` changes with diffs,
    /// `> would run:` actions, `! interrupt:` lines), `> would run: <path> <args>` for a
    /// process step, `skipped: flag <path> exists` or `failed: <message>`; then the summary
    /// of [`PackagePlan::total`]. Secret values are replaced by `***`.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        for s in &self.steps {
            if let StepKind::Overlay(r) = &s.kind {
                let _ = writeln!(out, "==> overlay {}", s.path);
                out.push_str(&report_body(r, &self.redactor));
                continue;
            }
            let _ = writeln!(out, "==> step {}: {}", s.name, s.command_line());
            match &s.kind {
                StepKind::Script(o) => {
                    out.push_str(&report_body(&o.report, &self.redactor));
                    for n in &o.notes {
                        let _ = writeln!(out, "note: {n}");
                    }
                    if let Some(e) = &o.error {
                        let _ = writeln!(out, "failed: {}", self.redactor.redact(e));
                    } else if !o.ok && !o.report.drift().is_empty() {
                        let _ =
                            writeln!(out, "failed: {} pending change(s)", o.report.drift().len());
                    } else if !o.ok {
                        let _ = writeln!(out, "failed: return code {}", o.code);
                    }
                }
                StepKind::Process => {
                    let _ = writeln!(out, "> would run: {}", s.command_line());
                }
                StepKind::ProcessRan(o) => {
                    let _ = writeln!(out, "> ran: {} (return code {})", s.command_line(), o.code);
                }
                StepKind::Skipped { flag } => {
                    let _ = writeln!(out, "skipped: flag {} exists", flag.display());
                }
                StepKind::Failed { message } => {
                    let _ = writeln!(out, "failed: {message}");
                }
                StepKind::NotRun => out.push_str("not run: an earlier step failed\n"),
                StepKind::Overlay(_) => {}
            }
        }
        out.push_str(&self.total().summary());
        out.push('\n');
        self.redactor.redact(&out).into_owned()
    }

    /// The JSON form: [`PackagePlan::total`] as [`Report::to_json`] plus `package`,
    /// `version`, `package_mode`, `ok`, `warnings` and `steps` (each with `name`, `path`,
    /// `args`, `kind` — `overlay`, `rhai`, `process`, `skipped`, `failed` or `not_run` — and
    /// for a script its [`StepResult::to_json`] under `result` (for the overlay its
    /// [`Report::to_json`]), for a process step `would_run` (a dry run) or its result under
    /// `result` (`--apply`: `ok`, `return_code`, an empty report), for a skipped step its
    /// `flag`, for a failed one its `error`).
    pub fn to_json(&self) -> Value {
        let r = &self.redactor;
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|s| {
                let mut v = json!({"name": s.name, "path": s.path, "args": s.args});
                let m = v.as_object_mut().expect("object literal");
                let kind = match &s.kind {
                    StepKind::Script(o) => {
                        let mut result = o.to_json(r);
                        if let Value::Object(rm) = &mut result {
                            let errors: Vec<Value> = o
                                .error
                                .iter()
                                .map(|e| super::error_json(&r.redact(e)))
                                .collect();
                            rm.insert("errors".into(), Value::Array(errors));
                        }
                        m.insert("result".into(), result);
                        "rhai"
                    }
                    StepKind::Process => {
                        m.insert("would_run".into(), s.command_line().into());
                        "process"
                    }
                    StepKind::ProcessRan(o) => {
                        let mut result = o.to_json(r);
                        if let Value::Object(rm) = &mut result {
                            rm.insert("errors".into(), Value::Array(Vec::new()));
                        }
                        m.insert("result".into(), result);
                        "process"
                    }
                    StepKind::Skipped { flag } => {
                        m.insert("flag".into(), flag.display().to_string().into());
                        "skipped"
                    }
                    StepKind::Failed { message } => {
                        m.insert("error".into(), message.clone().into());
                        "failed"
                    }
                    StepKind::NotRun => "not_run",
                    StepKind::Overlay(rep) => {
                        m.insert("result".into(), rep.to_json(r));
                        "overlay"
                    }
                };
                m.insert("kind".into(), kind.into());
                v
            })
            .collect();
        let mut v = self.total().to_json(r);
        if let Value::Object(m) = &mut v {
            m.insert("package".into(), self.package_name.clone().into());
            m.insert("version".into(), self.package_version.clone().into());
            m.insert("package_mode".into(), self.mode.as_str().into());
            m.insert("ok".into(), self.ok().into());
            m.insert("warnings".into(), json!(self.warnings));
            m.insert("steps".into(), Value::Array(steps));
        }
        v
    }
}

/// What `skyhook-run --package DIR --apply` did ([`PackageRun::apply`]).
#[derive(Debug, Clone)]
pub struct AppliedPackage {
    /// Each step of the mode as the agent ran it: a `.rhai` step's result with the report
    /// of what it changed, a process step's result (return code only), skipped, failed or
    /// not run; exec mode Apply (Check in a `*-check` mode).
    pub steps: PackagePlan,
    /// The mode succeeded (exit 0).
    pub ok: bool,
    /// The package copy inside the root (a host path).
    pub copy_dir: PathBuf,
}

impl AppliedPackage {
    /// The JSON form: [`PackagePlan::to_json`] of the steps (`mode` `apply` or `check`;
    /// each `.rhai` step's `result` has its changes, actions and ordered `items`), with
    /// `ok` the mode's outcome, plus `apply` (true) and `copy_dir`.
    pub fn to_json(&self) -> Value {
        let mut v = self.steps.to_json();
        if let Value::Object(m) = &mut v {
            m.insert("ok".into(), self.ok.into());
            m.insert("apply".into(), true.into());
            m.insert(
                "copy_dir".into(),
                self.copy_dir.display().to_string().into(),
            );
        }
        v
    }
}

/// A report's text form without its summary line (empty, or lines ending with `\n`), in
/// the order things happened ([`Report::render_items`]).
fn report_body(r: &Report, redactor: &Redactor) -> String {
    redactor.redact(&r.render_items()).into_owned()
}

fn process_action(s: &PlannedStep) -> Action {
    Action {
        kind: "step".into(),
        target: s.path.clone(),
        summary: s.command_line(),
        position: None,
    }
}

/// The modes that do not check `expected_config_files` (as the agent).
fn checks_expected_files(mode: Mode) -> bool {
    !matches!(mode, Mode::Uninstall | Mode::UninstallCheck)
}

fn os_env(env: &[(String, String)]) -> Vec<(OsString, OsString)> {
    env.iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
}

/// Every entry of the configMaps folder `dir`, at any depth, dot-names (`..data`) included,
/// resolves inside it ([`crate::host::root::open_beneath`]: `openat2(RESOLVE_BENEATH)`), as
/// `config::get` requires of a key: the package copy (and its plan) follows links by path,
/// so an entry leading out would put its target's bytes into the root's `configmaps/`.
/// Directories are descended 16 deep at most (a link to `.` inside is no escape). A folder
/// that cannot be listed is left to the copy to report.
///
/// # Errors
/// [`LocalError::ConfigMapOutside`] naming the first entry that leads out.
fn check_configmaps_confined(dir: &Path) -> Result<(), LocalError> {
    fn walk(dir: &Path, rel: &Path, depth: usize) -> Result<(), LocalError> {
        let Ok(entries) = std::fs::read_dir(dir.join(rel)) else {
            return Ok(());
        };
        let mut names: Vec<OsString> = entries.flatten().map(|e| e.file_name()).collect();
        names.sort();
        for name in names {
            let r = rel.join(name);
            match crate::host::root::open_beneath(dir, &r, libc::O_PATH) {
                Err(e) if matches!(e.raw_os_error(), Some(libc::EXDEV | libc::ELOOP)) => {
                    return Err(LocalError::ConfigMapOutside {
                        name: r.to_string_lossy().into_owned(),
                        dir: dir.to_path_buf(),
                    });
                }
                Ok(f) if depth < 16 && f.metadata().is_ok_and(|m| m.is_dir()) => {
                    walk(dir, &r, depth + 1)?;
                }
                _ => {}
            }
        }
        Ok(())
    }
    walk(dir, Path::new(""), 0)
}

impl PackageRun {
    /// The configMaps folder: [`PackageRun::configmaps`] or `DIR/configmaps`.
    pub fn configmaps_dir(&self) -> PathBuf {
        absolute(
            self.configmaps
                .as_deref()
                .unwrap_or(&self.dir.join("configmaps")),
        )
    }

    /// Load `DIR/config.json` as the agent does (schema, step rules) and require every step
    /// file under `DIR/skyhook_dir`.
    ///
    /// # Errors
    /// [`LocalError::Agent`] (unreadable, not a regular file, too large), [`LocalError::Package`].
    pub fn load(&self) -> Result<Loaded, LocalError> {
        let config = self.dir.join("config.json");
        let bytes = crate::agent::site::read_local(&config)?;
        let loaded = parse(&config, &bytes)?;
        let sroot = self.dir.join("skyhook_dir");
        check_step_files(&config, &loaded.package, |p| sroot.join(p).is_file())?;
        Ok(loaded)
    }

    /// What the package's Skyhook CR declares ([`PackageRun::skyhook_cr`], else
    /// `DIR/node-metadata/packages.json`), for the package known by `names`
    /// ([`crate::mode::coverage::lookup_names`]).
    ///
    /// # Errors
    /// The CR or packages.json cannot be read or parsed, or the CR lacks the package.
    pub fn declarations(&self, names: &[String]) -> Result<Declarations, LocalError> {
        let bad = |what: &Path, e: String| {
            LocalError::Agent(AgentError::NodeMetadata(format!("{}: {e}", what.display())))
        };
        if let Some(cr) = &self.skyhook_cr {
            let text = std::fs::read_to_string(cr).map_err(|e| bad(cr, e.to_string()))?;
            let d = DeclaredInterrupts::from_cr(&text, names).map_err(|e| bad(cr, e))?;
            return Ok(Declarations::Known(Some(d)));
        }
        let pj = self.dir.join("node-metadata").join("packages.json");
        match std::fs::read(&pj) {
            Ok(bytes) => {
                Declarations::from_packages_json_bytes(&bytes, names).map_err(|e| bad(&pj, e))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Declarations::Unknown),
            Err(e) => Err(bad(&pj, e.to_string())),
        }
    }

    /// `SKYHOOK_RESOURCE_ID` from the environment, else `skyhook-run_<name>_<version>`.
    pub fn resource_id(&self, name: &str, version: &str) -> String {
        env_get(&self.env, "SKYHOOK_RESOURCE_ID")
            .filter(|v| !v.is_empty())
            .map_or_else(|| format!("skyhook-run_{name}_{version}"), str::to_string)
    }

    /// Dry run (or, in a `*-check` mode, check) of every step of the mode, nothing changed
    /// on the host, no state written:
    ///
    /// 1. load and validate the package, require `expected_config_files` in the configMaps
    ///    folder, compile every `.rhai` step of the mode (before anything runs);
    /// 2. one host session over the root for all steps, so later steps see the planned
    ///    writes of earlier ones (each step still ends with its own deferred work, e.g. one
    ///    `daemon-reload` per step, as in the agent);
    /// 3. the package's `root_dir/` overlay, as the agent applies it before the steps (not in
    ///    `uninstall`/`uninstall-check`): every file of `DIR/root_dir/**` written to the same
    ///    host path with its mode, missing directories created with theirs, existing ones
    ///    untouched, through the shared session (so it shows as changes with diffs, listed
    ///    first as a [`StepKind::Overlay`] entry, and later steps see it; never drift). A
    ///    failure there is a [`StepKind::Failed`] entry named `root_dir` and no step runs;
    /// 4. each step in order, as the agent would run it: a step whose flag exists (under
    ///    the state root, `SKYHOOK_ROOT_DIR`, default `/etc/skyhook`) is skipped where the
    ///    agent would skip it; `env:NAME` arguments are substituted from the environment;
    ///    a `.rhai` step runs (context as the agent's, with `dry_run` true in a plan, and
    ///    `skyhook_dir` the copy dir [`default_copy_dir`] that `--apply` would fill: the
    ///    plan's overlay has DIR's files there, unreported, so a script reading its own
    ///    package files plans as it applies); any other step is listed, not run. In a run mode the first
    ///    failing step stops the plan (the rest are [`StepKind::NotRun`]); a check runs all.
    ///
    /// The session's environment (for commands and `secret_env`) is the run's environment;
    /// each step's `env` from config.json is added to its `env()` only.
    ///
    /// # Errors
    /// Loading, an expected configMap missing, a compile error, `interrupt` mode, the root
    /// cannot be opened or the flags/history cannot be read.
    pub fn plan(
        &self,
        engine: &ScriptEngine,
        output: Arc<dyn ScriptOutput>,
    ) -> Result<PackagePlan, LocalError> {
        self.plan_carried(engine, output, &mut None, &Cancel::new())
    }

    /// [`PackageRun::plan`] in a session that starts from `carry` (what earlier modes or
    /// packages planned on this root, [`PlanCarry`]; `None`: the host as it is), leaving in
    /// `carry` what this plan adds to it, so the next mode or package plans against the
    /// host as this one would leave it. An error before the session starts leaves `carry`
    /// as it was.
    ///
    /// `cancel` stops the plan (`serve`'s cancel or `--plan-timeout`): once it is stopped no
    /// further step starts (they are [`StepKind::NotRun`]), and once aborted the running
    /// `.rhai` step ends at its next operation and its running command (a query) is ended
    /// (`SIGTERM` to its group, then `SIGKILL`).
    ///
    /// # Errors
    /// As [`PackageRun::plan`].
    pub fn plan_carried(
        &self,
        engine: &ScriptEngine,
        output: Arc<dyn ScriptOutput>,
        carry: &mut Option<PlanCarry>,
        cancel: &Cancel,
    ) -> Result<PackagePlan, LocalError> {
        if self.mode == Mode::Interrupt {
            return Err(LocalError::UnsupportedMode(self.mode.as_str().into()));
        }
        let configmaps = self.configmaps_dir();
        check_configmaps_confined(&configmaps)?;
        let mut site = PackageSite::Local {
            dir: self.dir.clone(),
            configmaps: configmaps.clone(),
            host_dir: None,
        };
        let (pkg, mut warnings) = load_package(&site)?;
        let pkg = &pkg;
        // Steps see the package where --apply would copy it, and the plan has its files there.
        if let PackageSite::Local { host_dir, .. } = &mut site {
            *host_dir = Some(default_copy_dir(&pkg.package_name, &pkg.package_version));
        }
        let scripts = site.compile_mode_scripts(engine, pkg, self.mode)?;
        if checks_expected_files(self.mode) {
            site.check_expected_files(&pkg.expected_config_files)?;
        }
        let steps = pkg.steps(self.mode);

        let root = open_root(&self.root)?;
        let rid = self.resource_id(&pkg.package_name, &pkg.package_version);
        let mut base_env = self.env.clone();
        if env_get(&base_env, "SKYHOOK_RESOURCE_ID").is_none_or(str::is_empty) {
            base_env.push(("SKYHOOK_RESOURCE_ID".into(), rid.clone()));
        }
        if env_get(&base_env, "PATH").is_none() {
            base_env.push(("PATH".into(), DEFAULT_PATH.into()));
        }
        let settings = Settings::from_env(os_env(&base_env)).map_err(AgentError::from)?;
        warnings.extend(settings.warnings.iter().cloned());
        let flag_root = open_root(&self.root)?;
        if matches!(self.mode, Mode::Upgrade | Mode::UpgradeCheck) {
            // The loop reads the history once per step (its messages go to the agent's
            // console); a plan lists them once.
            let read = history::peek_previous(&flag_root, &settings.state_root, &pkg.package_name)?;
            warnings.extend(read.messages);
        }
        let declarations = self.declarations(&crate::mode::coverage::lookup_names(
            &rid,
            &pkg.package_name,
        ))?;
        // The session's commands (queries) end on the plan's cancel too.
        let spec = local_spec(self.mode, false, &base_env, Some(configmaps.clone()), &rid)
            .cancel(cancel.clone())
            .build();
        let exec = spec.exec();
        let api = match carry.take() {
            Some(c) => HostApi::new(Host::carried(root, exec, spec.host_options(), c)),
            None => spec.session(root),
        };
        let redactor = api.redactor().clone();
        let output = match self.capture {
            Some(c) => api.capture_output(output, c),
            None => output,
        };
        let output = api.redacting_output(output);

        let mut planned = Vec::with_capacity(steps.len() + 1);
        let mut stopped = false;
        if let Some(Err(message)) =
            api.with_host(|h| crate::agent::mode::preflight::plan_package_copy(h, &site))
        {
            stopped = true;
            planned.push(PlannedStep {
                name: "package copy".into(),
                path: "skyhook_dir/".into(),
                args: Vec::new(),
                kind: StepKind::Failed {
                    message: format!("package copy: {message}"),
                },
            });
        }
        let overlay_src = self.dir.join("root_dir");
        // The agent overlays root_dir/ in every mode but the uninstall ones, before any step.
        if !stopped && checks_expected_files(self.mode) && overlay_src.is_dir() {
            let planned_overlay = api.with_host(|h| {
                let r = crate::agent::mode::preflight::plan_overlay(
                    h,
                    &site,
                    &overlay_src,
                    Path::new("/"),
                );
                let (report, deferred) = h.finish_step_with_report();
                r.and(deferred.map_err(|e| crate::script::host_api::error_chain(&e)))
                    .map(|()| report)
            });
            let kind = match planned_overlay {
                Some(Ok(report)) => StepKind::Overlay(report),
                Some(Err(message)) => {
                    stopped = true;
                    StepKind::Failed {
                        message: format!("root_dir overlay: {message}"),
                    }
                }
                None => StepKind::NotRun,
            };
            planned.push(PlannedStep {
                name: "root_dir".into(),
                path: "root_dir/".into(),
                args: Vec::new(),
                kind,
            });
        }
        if stopped {
            planned.extend(steps.iter().map(|step| PlannedStep {
                name: step.name.clone(),
                path: step.path.clone(),
                args: step.arguments.clone(),
                kind: StepKind::NotRun,
            }));
        } else {
            let planned_steps = || -> Result<Vec<PlannedStep>, LocalError> {
                let runner = PlanRunner {
                    engine,
                    api: &api,
                    output: output.clone(),
                };
                let console = Console::null();
                let mode_loop = ModeLoop::new(
                    PackageMode {
                        mode: self.mode,
                        package: pkg,
                        site: &site,
                        scripts: &scripts,
                        resource_id: &rid,
                        declarations,
                    },
                    &settings,
                    &flag_root,
                    &runner,
                    &console,
                    cancel,
                    None,
                );
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(AgentError::Runtime)?;
                let outcome = rt.block_on(mode_loop.run())?;
                let mut planned = Vec::with_capacity(steps.len());
                for (step, record) in steps.iter().zip(outcome.steps) {
                    let kind = match record.decision {
                        Decision::Ran(r) if !r.ran => StepKind::Process,
                        Decision::Ran(r) => StepKind::Script(r),
                        Decision::Skipped { flag } => StepKind::Skipped { flag },
                        Decision::MissingEnv { message } => StepKind::Failed { message },
                        Decision::NotRun => StepKind::NotRun,
                    };
                    planned.push(PlannedStep {
                        name: step.name.clone(),
                        path: step.path.clone(),
                        args: record.args,
                        kind,
                    });
                }
                Ok(planned)
            };
            match planned_steps() {
                Ok(p) => planned.extend(p),
                Err(e) => {
                    *carry = api.finish_plan();
                    return Err(e);
                }
            }
        }
        // Every step has ended its part already; this only closes the session and keeps
        // what it planned.
        *carry = api.finish_plan();
        Ok(PackagePlan {
            package_name: pkg.package_name.clone(),
            package_version: pkg.package_version.clone(),
            mode: self.mode,
            exec_mode: exec,
            warnings,
            steps: planned,
            redactor,
        })
    }

    /// Apply: the agent's own flow on this root, so bash steps run chrooted exactly as on a
    /// node.
    ///
    /// 1. load and validate the package (nothing is written when that fails);
    /// 2. replace the copy dir [`default_copy_dir`] inside the root with a fresh copy of DIR
    ///    (without `DIR/configmaps` when `--configmaps` is given), and copy the configMaps
    ///    folder into `<copy dir>/configmaps`;
    /// 3. run [`ModeRun`] with agent [`Settings`] from the environment: flags, history and
    ///    check results under `SKYHOOK_ROOT_DIR` (default `/etc/skyhook`), logs under
    ///    `SKYHOOK_LOG_DIR` (default `/var/log/skyhook`), both inside the root; the resource
    ///    id is `SKYHOOK_RESOURCE_ID`, else `skyhook-run_<name>_<version>`. Output is the
    ///    agent's, on this process's stdout and stderr (each `.rhai` step lists what it
    ///    changed, with the diffs when [`PackageRun::diffs`]). `COPY_RESOLV` is not done.
    ///
    /// Returns what each step did, whether the mode succeeded and the copy dir.
    ///
    /// # Errors
    /// Loading, `interrupt` mode, copying, and what the agent stops on.
    pub fn apply(&self, console: &Console) -> Result<AppliedPackage, LocalError> {
        if self.mode == Mode::Interrupt {
            return Err(LocalError::UnsupportedMode(self.mode.as_str().into()));
        }
        let loaded = self.load()?;
        check_configmaps_confined(&self.configmaps_dir())?;
        let pkg = &loaded.package;
        let root = open_root(&self.root)?;
        let copy_dir = default_copy_dir(&pkg.package_name, &pkg.package_version);
        let mut env = self.env.clone();
        let rid = self.resource_id(&pkg.package_name, &pkg.package_version);
        env.retain(|(k, _)| k != "SKYHOOK_RESOURCE_ID");
        env.push(("SKYHOOK_RESOURCE_ID".into(), rid.clone()));
        let mut settings = Settings::from_env(os_env(&env)).map_err(AgentError::from)?;
        settings.diffs = self.diffs;
        for w in &settings.warnings {
            console.warn(w);
        }
        let id = ResourceId::parse(&rid).map_err(AgentError::from)?;
        let declarations = self.declarations(&crate::mode::coverage::lookup_names(
            &rid,
            &pkg.package_name,
        ))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(AgentError::Runtime)?;
        let outcome = rt.block_on(async {
            let cancel = Cancel::new();
            crate::agent::signal::install(&cancel, console).map_err(AgentError::Runtime)?;
            // Journals a killed step left are undone before the preflight plans the host.
            crate::agent::mode::recover_journals(&root, console);
            if !self
                .preflight(&root, &settings, &rid, &declarations, &cancel, console)
                .await?
            {
                return Ok(None);
            }
            self.copy_package(&root, &copy_dir)?;
            let ok = ModeRun {
                root: &root,
                settings: &settings,
                id: &id,
                copy_dir: &copy_dir,
                mode: self.mode,
                cancel: &cancel,
                console,
                declarations: Some(declarations.clone()),
                preflight: false,
            }
            .run_recorded()
            .await?;
            Ok::<Option<ModeOutcome>, LocalError>(ok)
        })?;
        let ok = outcome.as_ref().is_some_and(|o| o.ok);
        // The agent ran the copy; which steps are scripts follows from DIR alike (the copy
        // holds the same files, its configmaps/ the configMaps folder's).
        let site = PackageSite::Local {
            dir: self.dir.clone(),
            configmaps: self.configmaps_dir(),
            host_dir: None,
        };
        let redactor = Redactor::new();
        // No outcome (stopped waiting for the lock): no step ran.
        let mut records = outcome.map(|o| o.steps).unwrap_or_default().into_iter();
        let mut steps = Vec::new();
        for step in pkg.steps(self.mode) {
            let (args, decision) = records.next().map_or_else(
                || (step.arguments.clone(), Decision::NotRun),
                |r| (r.args, r.decision),
            );
            let script = site.script_path(step)?.is_some();
            let kind = match decision {
                Decision::Ran(r) => {
                    redactor.add_all(&r.redactor);
                    if script {
                        StepKind::Script(r)
                    } else {
                        StepKind::ProcessRan(r)
                    }
                }
                Decision::Skipped { flag } => StepKind::Skipped { flag },
                Decision::MissingEnv { message } => StepKind::Failed { message },
                Decision::NotRun => StepKind::NotRun,
            };
            steps.push(PlannedStep {
                name: step.name.clone(),
                path: step.path.clone(),
                args,
                kind,
            });
        }
        let mut warnings: Vec<String> = loaded
            .warnings
            .iter()
            .map(|w| w.trim_start().to_string())
            .collect();
        warnings.extend(settings.warnings.iter().cloned());
        Ok(AppliedPackage {
            steps: PackagePlan {
                package_name: pkg.package_name.clone(),
                package_version: pkg.package_version.clone(),
                mode: self.mode,
                exec_mode: crate::step::exec_mode(self.mode.as_str(), true),
                warnings,
                steps,
                redactor,
            },
            ok,
            copy_dir,
        })
    }

    /// The [`Preflight`] of the mode on the package directory itself (its scripts named by
    /// their paths there; the configMaps folder; the CR's declarations), before anything is
    /// copied into the root. `Ok(false)`: stopped by a signal meanwhile.
    ///
    /// # Errors
    /// Loading, compiling, an expected configMap missing, and [`AgentError::Preflight`]
    /// after printing its error lines.
    async fn preflight(
        &self,
        root: &crate::host::root::HostRoot,
        settings: &Settings,
        rid: &str,
        declarations: &Declarations,
        cancel: &Cancel,
        console: &Console,
    ) -> Result<bool, LocalError> {
        let started = std::time::Instant::now();
        let mut site = PackageSite::Local {
            dir: absolute(&self.dir),
            configmaps: self.configmaps_dir(),
            host_dir: None,
        };
        let (pkg, _) = load_package(&site)?;
        if let PackageSite::Local { host_dir, .. } = &mut site {
            *host_dir = Some(default_copy_dir(&pkg.package_name, &pkg.package_version));
        }
        let engine = crate::step::engine();
        let scripts = site.compile_mode_scripts(&engine, &pkg, self.mode)?;
        if checks_expected_files(self.mode) {
            site.check_expected_files(&pkg.expected_config_files)?;
        }
        let failure = Preflight {
            mode: self.mode,
            package: &pkg,
            site: &site,
            settings,
            scripts: &scripts,
            engine: &engine,
            root,
            resource_id: rid,
            declarations: declarations.clone(),
            cancel,
        }
        .run()
        .await?;
        // With loading and compiling DIR, which the agent flow repeats on the copy.
        tracing::info!(
            total_us = started.elapsed().as_micros(),
            "preflight of the package directory"
        );
        // A stop during the preflight ends the run before anything is copied or written;
        // the plan it aborted may have failed the step being planned: not the package's
        // fault.
        if let Some(why) = crate::agent::mode::stopped_during_preflight(cancel) {
            console.warn(&why);
            return Ok(false);
        }
        match failure {
            Some(f) => Err(f.report(console, self.mode).into()),
            None => Ok(true),
        }
    }

    /// Replace the copy dir inside the root with a fresh copy of DIR (without
    /// `DIR/configmaps` when the configMaps folder lies elsewhere) and copy the configMaps
    /// folder into `<copy dir>/configmaps`: the walk the preflight planned
    /// ([`crate::agent::prepare::copy_package`]), undone whole when it fails.
    fn copy_package(
        &self,
        root: &crate::host::root::HostRoot,
        copy_dir: &Path,
    ) -> Result<(), LocalError> {
        let site = PackageSite::Local {
            dir: absolute(&self.dir),
            configmaps: self.configmaps_dir(),
            host_dir: Some(copy_dir.to_path_buf()),
        };
        crate::agent::prepare::copy_package(root, &site).map_err(AgentError::from)?;
        Ok(())
    }
}
