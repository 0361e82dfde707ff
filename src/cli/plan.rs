//! `skyhook-run plan --skyhook-cr CR.yaml --nodes NODES`: a fleet preview
//! ([`crate::fleet`], docs/fleet.md): [`run`] with the arguments of
//! [`super::run_args::PlanArgs`].

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::PathBuf;

use crate::fleet::run::{Options, plan_bodies, preview_with_plans};
use crate::fleet::{Cr, load_nodes};
use crate::package::Mode;
use crate::process::Cancel;

use super::exit::ExitStatus;
use super::run_args::{Output, PlanArgs};

fn fail(e: &dyn std::fmt::Display, status: ExitStatus) -> ExitStatus {
    eprintln!("skyhook-run: error: {e}");
    status
}

/// The inputs of a preview, checked: the CR, the selected and excluded nodes, each
/// package's start body, the options.
pub(crate) struct Inputs {
    /// The CR.
    pub(crate) cr: Cr,
    /// Every node of NODES.
    pub(crate) nodes: Vec<crate::fleet::Node>,
    /// Per package: name, version, start body.
    pub(crate) bodies: Vec<(String, String, serde_json::Value)>,
    /// How to reach the nodes.
    pub(crate) options: Options,
}

/// Check the arguments and read every input.
///
/// # Errors
/// The message and its status (2 for a bad option value, 1 for a bad file).
pub(crate) fn inputs(a: &PlanArgs) -> Result<Inputs, (String, ExitStatus)> {
    let usage = |m: String| (m, ExitStatus::Usage);
    let bad = |e: &dyn std::fmt::Display| (e.to_string(), ExitStatus::Failure);
    let mut modes = Vec::new();
    let names: Vec<&str> = if a.modes.is_empty() {
        vec!["apply", "config"]
    } else {
        a.modes.iter().map(String::as_str).collect()
    };
    for m in names {
        match Mode::parse(m) {
            Some(Mode::Interrupt) => {
                return Err(usage(
                    "--mode interrupt: interrupts are the operator's; the plan lists the ones the CR declares"
                        .into(),
                ));
            }
            Some(mode) => modes.push(mode),
            None => return Err(usage(format!("--mode {m}: unknown mode"))),
        }
    }
    if a.parallel == 0 {
        return Err(usage("--parallel must be at least 1".into()));
    }
    let token = match &a.token_file {
        Some(f) => std::fs::read_to_string(f)
            .map_err(|e| bad(&format!("{}: {e}", f.display())))?
            .trim()
            .to_string(),
        None => String::new(),
    };
    let cr = Cr::load(&a.skyhook_cr).map_err(|e| bad(&e))?;
    let nodes = load_nodes(&a.nodes, a.address_template.as_deref()).map_err(|e| bad(&e))?;
    let dirs: BTreeMap<String, PathBuf> = a
        .packages
        .iter()
        .map(|(k, v)| (k.clone(), PathBuf::from(v)))
        .collect();
    for k in dirs.keys() {
        if !cr.packages.iter().any(|p| &p.name == k) {
            return Err(usage(format!(
                "--package {k}=...: {} has no package {k}",
                a.skyhook_cr.display()
            )));
        }
    }
    let bodies = plan_bodies(&cr, &dirs, &modes).map_err(|e| bad(&e))?;
    Ok(Inputs {
        cr,
        nodes,
        bodies,
        options: Options {
            modes,
            parallel: a.parallel,
            timeout: a.node_timeout,
            max_stream: a.max_stream,
            token,
            tls_ca: a.tls_ca.clone(),
            tls_client: a.tls_cert.clone().zip(a.tls_key.clone()),
        },
    })
}

/// Run a preview and print it.
pub(crate) fn run(a: &PlanArgs) -> ExitStatus {
    let inp = match inputs(a) {
        Ok(i) => i,
        Err((m, s)) => return fail(&m, s),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&e, ExitStatus::Failure),
    };
    let tty = std::io::stderr().is_terminal();
    let stop = Cancel::new();
    let preview = rt.block_on(async {
        let s2 = stop.clone();
        let sig = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                s2.abort(crate::process::CancelReason::Signal("SIGINT"));
            }
        });
        let mut progress = |done: usize, total: usize| {
            if tty {
                eprint!("\rplanning: {done}/{total} nodes");
            }
        };
        let r = preview_with_plans(
            &inp.cr,
            inp.nodes.clone(),
            inp.bodies.clone(),
            &inp.options,
            a.output == Output::Json,
            &stop,
            &mut progress,
        )
        .await;
        sig.abort();
        r
    });
    if tty {
        eprint!("\r\x1b[K");
    }
    let text = match a.output {
        Output::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&preview.to_json()).unwrap_or_default()
        ),
        Output::Text => preview.render_text(),
    };
    let (_, changes, _, _, failed) = preview.counts();
    let status = if !preview.unfinished.is_empty() {
        ExitStatus::Interrupted
    } else if failed > 0 {
        ExitStatus::Failure
    } else if a.detailed_exitcode && changes > 0 {
        ExitStatus::Changes
    } else {
        ExitStatus::Done
    };
    // The process ends next: every node's answer is left to the exit instead of freed one
    // allocation at a time (on this thread, after the last answer: the preview's tail).
    std::mem::forget(preview);
    std::mem::forget(inp);
    super::stdout::status("skyhook-run", super::stdout::print(&text), status)
}
