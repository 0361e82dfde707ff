//! `skyhook-agent validate CONFIG_JSON`: a package checked as the agent would load it, and
//! its `.rhai` steps as `skyhook-run check` checks them, without touching a host.

use std::path::Path;

use crate::package;

use super::error::render_chain;
use super::site;
use crate::mode::console::Console;

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
