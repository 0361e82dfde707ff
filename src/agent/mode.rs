//! One mode of one package as the agent runs it ([`ModeRun`]): legacy copy, load, compile,
//! expected files, the undo of journals a killed step left, the preflight, the package
//! lock, the `root_dir` overlay, `START`, then the shared mode loop
//! ([`crate::mode::ModeLoop`], the layer below the agent and `skyhook-run`).

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use crate::host::root::HostRoot;
use crate::mode::{Applying, ModeLoop, ModeOutcome, PackageMode};
use crate::package::{self, Mode, Package};
use crate::process::Cancel;
use crate::state::flags;
use crate::step::invocation::ConsoleStreams;
use crate::step::{AgentRunner, ProcessRunner, ScriptRunner};

use super::error::AgentError;
use super::prepare;
use super::site::PackageSite;
use crate::mode::console::Console;
use crate::mode::coverage::{self, Declarations};
use crate::mode::settings::{ResourceId, Settings};

pub mod preflight;

/// `stopping before the first step: SIGTERM received during the preflight` when `cancel`
/// was stopped (the warning a run stopped during the preflight ends with), else `None`.
pub(crate) fn stopped_during_preflight(cancel: &Cancel) -> Option<String> {
    cancel.is_stopped().then(|| {
        let why = cancel
            .reason()
            .map_or_else(|| "stopped".to_string(), |r| r.to_string());
        format!("stopping before the first step: {why} during the preflight")
    })
}

/// Undo the journals of `.rhai` steps that did not end ([`crate::host::effects::journal::recover`])
/// and remove the staging directories of `fs::extract` calls that did not end
/// ([`crate::host::files::archive::sweep_staging`]), one line each on `console`; a failure is
/// a warning, not a failed run.
pub fn recover_journals(root: &crate::host::root::HostRoot, console: &Console) {
    match crate::host::effects::journal::recover(root) {
        Ok(lines) => lines.iter().for_each(|l| console.say(l)),
        Err(e) => console.warn(&format!("not undone: {}", crate::chain::render(&e))),
    }
    match crate::host::files::archive::sweep_staging(root) {
        Ok(lines) => lines.iter().for_each(|l| console.say(l)),
        Err(e) => console.warn(&crate::chain::render(&e)),
    }
}

/// Load and validate `config.json` and the step files of `site` (section 4 item 2, 5).
/// Returns the package and the loader's warnings (already trimmed).
///
/// # Errors
/// Unreadable or invalid config, missing step files.
pub fn load_package(site: &PackageSite<'_>) -> Result<(Package, Vec<String>), AgentError> {
    let config = site.config_path();
    let shown = site.shown(&config);
    let bytes = site.read(&config)?;
    let loaded = package::load::parse(&shown, &bytes)?;
    let step_root = site.step_root();
    let lookup_error = std::cell::RefCell::new(None);
    package::load::check_step_files(&shown, &loaded.package, |p| {
        match site.is_file(&step_root.join(p)) {
            Ok(b) => b,
            Err(e) => {
                lookup_error.borrow_mut().get_or_insert(e);
                false
            }
        }
    })?;
    if let Some(e) = lookup_error.into_inner() {
        return Err(e);
    }
    let warnings = loaded
        .warnings
        .iter()
        .map(|w| w.trim_start().to_string())
        .collect();
    Ok((loaded.package, warnings))
}

/// Everything one agent mode run needs.
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
    /// Stop requests (SIGTERM).
    pub cancel: &'a Cancel,
    /// The agent's console.
    pub console: &'a Console,
    /// What the Skyhook CR declares; `None`: the copy dir's node metadata
    /// (`node-metadata/packages.json`).
    pub declarations: Option<Declarations>,
    /// Run the [`Preflight`](preflight::Preflight) before the lock and `START`
    /// (false: the caller has run it already, e.g. on the package directory the copy was
    /// made from).
    pub preflight: bool,
}

impl ModeRun<'_> {
    /// Run the mode end to end ([`ModeRun::run_recorded`]). Returns true when the mode
    /// succeeded (exit 0).
    ///
    /// # Errors
    /// Preparation and state failures (exit 1). Step failures are `Ok(false)`.
    pub async fn run(&self) -> Result<bool, AgentError> {
        Ok(self.run_recorded().await?.is_some_and(|o| o.ok))
    }

    /// Run the mode end to end: legacy copy, load, compile, expected files, undo of the
    /// journals a killed step left, preflight (validate, plan), lock, overlay, `START`, then
    /// the [`ModeLoop`]. Returns what happened to each step, or `None` when
    /// the run stopped while waiting for the package lock (a failure: exit 1).
    ///
    /// # Errors
    /// Preparation and state failures (exit 1). Step failures are `Ok` with `ok == false`.
    pub async fn run_recorded(&self) -> Result<Option<ModeOutcome>, AgentError> {
        prepare::legacy_copy(self.root, self.copy_dir, &self.settings.data_dir)?;
        let site = PackageSite::Copy {
            root: self.root,
            copy_dir: self.copy_dir,
        };
        let (pkg, warnings) = load_package(&site)?;
        for w in &warnings {
            self.console.warn(w);
        }
        for (mode, steps) in &pkg.modes {
            for s in steps.iter().filter(|s| !s.on_host) {
                self.console.warn(&format!(
                    "step {} ({}) has on_host: false: it runs in the agent's filesystem with the host under {}, not chrooted into the host",
                    s.path,
                    mode.as_str(),
                    self.root.mount().display()
                ));
            }
        }
        // The process's set-up for scripts, beside the compile (the preflight's plan and the
        // apply both need it).
        if self.preflight
            && pkg
                .steps(self.mode)
                .iter()
                .any(|s| s.path.ends_with(".rhai"))
        {
            preflight::prepare_process();
        }
        let engine = crate::step::engine();
        let scripts = site.compile_mode_scripts(&engine, &pkg, self.mode)?;
        let declarations = match &self.declarations {
            Some(d) => d.clone(),
            None => Declarations::from_node_metadata(
                self.root,
                self.copy_dir,
                &coverage::lookup_names(&self.id.raw, &pkg.package_name),
            )
            .map_err(AgentError::NodeMetadata)?,
        };
        let overlays = !matches!(self.mode, Mode::Uninstall | Mode::UninstallCheck);
        if overlays {
            site.check_expected_files(&pkg.expected_config_files)?;
        }
        // A `.rhai` step cut short (SIGKILL) left its undo journal: its files are put back
        // before anything else, the preflight's plan included (it would plan against a
        // half-changed host). Each journal is locked by its live step, so this needs no
        // package lock.
        recover_journals(self.root, self.console);
        if self.preflight {
            let preflight = preflight::Preflight {
                mode: self.mode,
                package: &pkg,
                site: &site,
                settings: self.settings,
                scripts: &scripts,
                engine: &engine,
                root: self.root,
                resource_id: &self.id.raw,
                declarations: declarations.clone(),
                cancel: self.cancel,
            };
            let failure = preflight.run().await?;
            // A stop (SIGTERM) during the preflight ends the run before anything is written
            // (no lock, overlay, `START`, flag or history); the plan it aborted may have
            // failed the step being planned: not the package's fault.
            if let Some(why) = stopped_during_preflight(self.cancel) {
                self.console.warn(&why);
                return Ok(None);
            }
            if let Some(failure) = failure {
                return Err(failure.report(self.console, self.mode));
            }
        }
        let Some(lock) = prepare::package_lock(
            self.root,
            &self.settings.state_root,
            &pkg.package_name,
            self.cancel,
            self.console,
        )
        .await?
        else {
            return Ok(None);
        };
        crate::state::check_not_dangling(
            self.root,
            &flags::flags_dir(&self.settings.state_root),
            "flags directory",
        )?;
        if self.settings.write_logs {
            let log_dir = self
                .settings
                .log_root
                .join(&pkg.package_name)
                .join(&pkg.package_version);
            crate::state::check_not_dangling(self.root, &log_dir, "log directory")?;
        }
        // The overlay changes host files a running holder's steps may read: only under the lock.
        if overlays {
            prepare::overlay(self.root, self.copy_dir)?;
        }
        let keeper = crate::state::lock::LockKeeper::start(self.root, &lock)?;
        flags::write_start(self.root, &self.settings.state_root)?;
        let console: Arc<dyn ConsoleStreams> = Arc::new(self.console.clone());
        let runner = AgentRunner {
            process: ProcessRunner::new(self.settings.buffer_limit)
                .with_log_format(self.settings.log_format),
            script: ScriptRunner {
                engine,
                root: self.root.mount().to_path_buf(),
                opened: self.root.try_clone().ok().map(Arc::new),
                log_format: self.settings.log_format,
                start: Default::default(),
            },
            console,
        };
        let span = tracing::info_span!(
            "mode",
            mode = self.mode.as_str(),
            package = %pkg.package_name,
            version = %pkg.package_version
        );
        let mode_loop = ModeLoop::new(
            PackageMode {
                mode: self.mode,
                package: &pkg,
                site: &site,
                scripts: &scripts,
                resource_id: &self.id.raw,
                declarations,
            },
            self.settings,
            self.root,
            &runner,
            self.console,
            self.cancel,
            Some(Applying {
                lock_keeper: &keeper,
                lock_fd: lock.as_raw_fd(),
                node_metadata_dir: self.root.display_path(&self.copy_dir.join("node-metadata")),
            }),
        );
        let outcome = tracing::Instrument::instrument(mode_loop.run(), span).await?;
        keeper.stop()?;
        drop(lock);
        Ok(Some(outcome))
    }
}
