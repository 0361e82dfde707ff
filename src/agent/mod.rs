//! The agent: one run of one mode (or interrupt) of one package (agent-contract.md sections
//! 2-12), and `validate`.
//!
//! [`run`] keeps the startup order of section 2 after the arguments (parsed by the command
//! line, `cli::agent`): an unknown mode prints its warning and succeeds before anything else
//! is validated, so an older agent survives a newer operator whatever the environment; then
//! `SKYHOOK_RESOURCE_ID`, `COPY_RESOLV`, the banner, the mode or interrupt.

pub mod args;
pub mod banner;
pub mod console;
pub mod coverage;
pub mod env;
pub mod error;
pub mod interrupt;
pub mod mode;
pub mod prepare;
pub mod settings;
pub mod signal;
pub mod site;
pub mod step_logs;

use std::path::Path;

use crate::host::root::HostRoot;
use crate::package::{self, Mode};

use args::{RunArgs, UsageError};
use console::Console;
use error::{AgentError, render_chain};
use interrupt::{Interrupt, InterruptRun};
use mode::ModeRun;
use settings::{ResourceId, Settings};

/// `skyhook-agent validate CONFIG_JSON`: schema, step rules, step files and `.rhai` steps (with
/// their imports) compiled and checked by [`crate::script::lint`] (each finding printed as
/// `file:line:col: error: ...` on stderr, warnings as `WARNING: file:line:col: warning: ...`),
/// touching nothing. `true` when valid (warnings allowed), `false` when invalid (any error).
pub fn validate(config: &Path, console: &Console) -> bool {
    let bytes = match site::read_local(config) {
        Ok(b) => b,
        Err(e) => {
            console.error(&format!("skyhook-agent: error: {}", render_chain(&e)));
            return false;
        }
    };
    let result = package::load::parse(config, &bytes).and_then(|loaded| {
        let step_root = config
            .parent()
            .unwrap_or(Path::new("."))
            .join("skyhook_dir");
        package::load::check_step_files(config, &loaded.package, |p| step_root.join(p).is_file())?;
        Ok((loaded, step_root))
    });
    // `.rhai` steps and their imports compile as they will before a run (configMaps are
    // supplied at deploy time, so `configmap/...` imports are not checked here), then go
    // through the static checker of `skyhook-run check`.
    let result = result
        .map_err(|e| render_chain(&e))
        .and_then(|(loaded, step_root)| {
            let store = std::sync::Arc::new(crate::script::ModuleStore::new(&step_root));
            let engine = crate::step::engine();
            let checker = crate::script::lint::Checker::new();
            let mut seen = std::collections::HashSet::new();
            let mut found = Vec::new();
            let mut interrupt_warnings = Vec::new();
            for (_, step) in loaded.package.all_steps() {
                // a script used by several modes (apply and its check) is compiled once
                if step.path.ends_with(".rhai") && seen.insert(step.path.as_str()) {
                    let (compiled, d) = crate::script::lint::check_step(
                        &engine,
                        &checker,
                        &step_root.join(&step.path),
                        store.clone(),
                    )
                    .map_err(|e| e.to_string())?;
                    // a module imported by several steps is reported once
                    for x in d {
                        if !found.contains(&x) {
                            found.push(x);
                        }
                    }
                    for (name, line, col) in compiled.namespaced_calls("interrupt") {
                        let request = match name.as_str() {
                            "reboot" => "interrupt: {type: reboot}",
                            "restart_services" => "interrupt: {type: service, services: [...]}",
                            "restart_all_services" => "interrupt: {type: restartAllServices}",
                            _ => continue,
                        };
                        interrupt_warnings.push(format!(
                            "{}:{line}:{col}: step {} can request interrupt::{name}(): the package's Skyhook CR must declare it ({request}, or a configInterrupts entry), else the step fails on the node",
                            compiled.file(),
                            step.path
                        ));
                    }
                }
            }
            Ok((loaded, found, interrupt_warnings))
        });
    let result = result.and_then(|(loaded, found, interrupt_warnings)| {
        for d in &found {
            match d.severity {
                crate::script::lint::Severity::Warning => console.warn(&d.to_string()),
                crate::script::lint::Severity::Error => console.error(&d.to_string()),
            }
        }
        match crate::script::lint::errors(&found).count() {
            0 => Ok((loaded, interrupt_warnings)),
            n => Err(format!(
                "{}: invalid: {n} error{} in .rhai steps",
                config.display(),
                if n == 1 { "" } else { "s" }
            )),
        }
    });
    match result {
        Ok((loaded, interrupt_warnings)) => {
            for w in loaded.warnings.iter().chain(&interrupt_warnings) {
                console.warn(w.trim_start());
            }
            let p = &loaded.package;
            let steps: usize = p.modes.iter().map(|(_, s)| s.len()).sum();
            console.say(&format!(
                "{}: valid: package {} {}, {} modes, {} steps",
                config.display(),
                p.package_name,
                p.package_version,
                p.modes.len(),
                steps
            ));
            if !p.expected_config_files.is_empty() {
                console.say(&format!(
                    "expected configMap files (checked at run time): {}",
                    p.expected_config_files.join(", ")
                ));
            }
            true
        }
        Err(message) => {
            console.error(&format!("skyhook-agent: error: {message}"));
            false
        }
    }
}

/// Run one mode or interrupt. `Ok(true)` = exit 0, `Ok(false)` = exit 1.
///
/// # Errors
/// Anything that stops the run before or between steps (see [`AgentError`]).
pub fn run(args: &RunArgs, settings: &Settings, console: &Console) -> Result<bool, AgentError> {
    for w in &settings.warnings {
        console.warn(w);
    }
    let mode = Mode::parse(&args.mode);
    let unknown_mode = || {
        let all: Vec<&str> = Mode::ALL.iter().map(|m| m.as_str()).collect();
        console.error(&format!(
            "WARNING:root:This version of the Agent doesn't support the {} mode. Options are: {}.",
            args.mode,
            all.join(",")
        ));
        Ok(true)
    };
    // An unknown mode exits 0 for the operator's forward compatibility (section 2): after the
    // banner and the resolver copy as Python does when the resource id is usable, at once
    // (nothing written, no banner) when it is not.
    let id = match (ResourceId::parse(&settings.resource_id), mode) {
        (Ok(id), _) => id,
        (Err(_), None) => return unknown_mode(),
        (Err(e), Some(_)) => return Err(e.into()),
    };
    let root = HostRoot::open(&args.root).map_err(|source| AgentError::OpenRoot {
        path: args.root.clone(),
        source,
    })?;
    if settings.copy_resolv {
        prepare::copy_resolv(&root, Path::new("/etc/resolv.conf"))?;
    }
    console.write_out(banner::render(args, settings, &id).as_bytes());
    let Some(mode) = mode else {
        return unknown_mode();
    };
    if mode != Mode::Interrupt && args.payload.is_some() {
        console.warn(&format!(
            "interrupt data given for mode {}: ignored",
            mode.as_str()
        ));
    }
    let interrupt = match (mode, &args.payload) {
        (Mode::Interrupt, Some(p)) => Some(Interrupt::decode(p)?),
        (Mode::Interrupt, None) => return Err(UsageError::Count.into()),
        _ => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AgentError::Runtime)?;
    rt.block_on(async {
        let cancel = crate::process::Cancel::new();
        signal::install(&cancel, console).map_err(AgentError::Runtime)?;
        match interrupt {
            Some(i) => {
                // Upstream (NodeWright 0d61d428): interrupt pods have no init container, so the
                // legacy copy runs here too; without a data dir either, the commands run from
                // `/` as documented (the interrupt itself needs no package files).
                match prepare::legacy_copy(&root, &args.copy_dir, &settings.data_dir) {
                    Ok(_) | Err(prepare::PrepareError::MissingDataDir { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
                let Some(lock) = prepare::package_lock(
                    &root,
                    &settings.state_root,
                    &id.package,
                    &cancel,
                    console,
                )
                .await?
                else {
                    return Ok(false);
                };
                let keeper = crate::state::lock::LockKeeper::start(&root, &lock)?;
                let ok = InterruptRun {
                    root: &root,
                    settings,
                    id: &id,
                    copy_dir: &args.copy_dir,
                    cancel: &cancel,
                    console,
                }
                .run(&i)
                .await?;
                keeper.stop()?;
                drop(lock);
                Ok(ok)
            }
            None => {
                ModeRun {
                    root: &root,
                    settings,
                    id: &id,
                    copy_dir: &args.copy_dir,
                    mode,
                    cancel: &cancel,
                    console,
                    declarations: None,
                    preflight: true,
                }
                .run()
                .await
            }
        }
    })
}

#[cfg(test)]
mod tests;
