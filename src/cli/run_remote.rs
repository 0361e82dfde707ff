//! `skyhook-run --remote URL SCRIPT`: the script runs on a node's remote step API
//! (`skyhook-agent serve`) through [`crate::remote::Client`]; its output and plan render as a
//! local run's.

use serde_json::{Value, json};

use super::exit::ExitStatus;
use super::run_args::{Cli, Output};
use super::run_local::{exit_code, finish, print_json, print_text};
use crate::host::ExecMode;
use crate::package::Mode;

/// `skyhook-run --remote URL --token-file F SCRIPT`: the script runs on the node behind
/// URL (`skyhook-agent serve`) in plan (default), apply (`--apply`) or check (`--mode
/// check` or a `*-check` mode) mode; its output and the plan render as a local run's.
/// Only `--env` values are sent (not this machine's environment). Ctrl-C cancels the
/// execution and waits for its exit.
pub(crate) fn run(cli: &Cli, url: &str) -> ExitStatus {
    let json_out = cli.output == Output::Json;
    let usage = |msg: &str| super::run_local::usage_error(json_out, msg);
    let Some(token_file) = &cli.token_file else {
        return usage("--remote needs --token-file FILE");
    };
    let Some(script) = cli.script.clone() else {
        return usage("--remote runs a SCRIPT (not --package)");
    };
    let mode_text = cli.mode.as_deref().unwrap_or("apply");
    let check = mode_text == "check" || mode_text.ends_with("-check");
    if !check && Mode::parse(mode_text).is_none() {
        return usage(&format!("unknown mode {mode_text:?}"));
    }
    let (remote_mode, exec) = if check {
        ("check", ExecMode::Check)
    } else if cli.apply {
        ("apply", ExecMode::Apply)
    } else {
        ("plan", ExecMode::Plan)
    };
    let fail_msg = |msg: String| {
        eprintln!("skyhook-run: error: {msg}");
        let written = if json_out {
            print_json(&json!({"ok": false, "error": msg, "exit_code": ExitStatus::Failure.code()}))
        } else {
            Ok(())
        };
        finish(written, ExitStatus::Failure)
    };
    let token = match std::fs::read_to_string(token_file) {
        Ok(t) => t,
        Err(e) => return fail_msg(format!("cannot read {}: {e}", token_file.display())),
    };
    let text = match std::fs::read_to_string(&script) {
        Ok(t) => t,
        Err(e) => return fail_msg(format!("cannot read {}: {e}", script.display())),
    };
    let client_cert = cli.tls_cert.as_deref().zip(cli.tls_key.as_deref());
    let client =
        match crate::remote::Client::with_tls(url, &token, cli.tls_ca.as_deref(), client_cert) {
            Ok(c) => c,
            Err(e) => return fail_msg(e.to_string()),
        };
    let id = format!(
        "skyhook-run-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let env: serde_json::Map<String, Value> = cli
        .env
        .iter()
        .map(|(k, v)| (k.clone(), Value::from(v.clone())))
        .collect();
    // The node names the script as we do, so errors and plan positions read as a local run's.
    let start = json!({"id": id, "kind": "rhai", "mode": remote_mode, "script": text, "env": env,
                       "script_name": script.display().to_string()});
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail_msg(format!("tokio runtime: {e}")),
    };
    let cancel = crate::process::Cancel::new();
    // The first failed write of the script's streamed stdout.
    let mut streamed: std::io::Result<()> = Ok(());
    let result = rt.block_on(async {
        let c = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("skyhook-run: interrupted: cancelling the remote execution");
                c.abort(crate::process::CancelReason::Signal("SIGINT"));
            }
        });
        let mut on_event = |v: &Value| {
            if let Some(n) = v.get("lost") {
                eprintln!(
                    "skyhook-run: {n} event(s) lost (seq {} to {}): the server's ring dropped \
                     them before they were read",
                    v["from_seq"], v["to_seq"]
                );
                return;
            }
            let Some(line) = v.get("line").and_then(Value::as_str) else {
                return;
            };
            let nl = if v.get("partial") == Some(&Value::Bool(true)) {
                ""
            } else {
                "\n"
            };
            if v["stream"] == "stdout" && !json_out {
                if let Err(e) = print_text(&format!("{line}{nl}"))
                    && streamed.is_ok()
                {
                    streamed = Err(e);
                }
            } else {
                eprint!("{line}{nl}");
            }
        };
        client.execute(&start, &cancel, &mut on_event).await
    });
    let exit_ev = match result {
        Ok(v) => v,
        Err(crate::remote::RemoteError::Status { status: 422, body })
            if body.get("line").is_some() =>
        {
            let msg = format!(
                "{}:{}:{}: {}",
                script.display(),
                body["line"],
                body["column"],
                body["message"].as_str().unwrap_or("syntax error")
            );
            eprintln!("{msg}");
            let written = if json_out {
                print_json(
                    &json!({"ok": false, "error": msg, "exit_code": ExitStatus::Failure.code()}),
                )
            } else {
                Ok(())
            };
            return finish(written, ExitStatus::Failure);
        }
        Err(e) => return fail_msg(e.to_string()),
    };
    let Some(report) = exit_ev.get("report").cloned() else {
        return fail_msg(format!(
            "the remote execution ended with {}",
            exit_ev["exit"]
        ));
    };
    let ok = report["ok"].as_bool().unwrap_or(false);
    let changes = report["changes"].as_array().map_or(0, Vec::len);
    let code = exit_code(ok, exec, changes, cli.detailed_exitcode);
    let drift = report["drift"].as_u64().unwrap_or(0);
    if drift > 0 {
        eprintln!(
            "skyhook-run: drift: {drift} pending change(s), the host is not in the state this script describes"
        );
    } else if report["error"].is_null() && !ok {
        eprintln!(
            "skyhook-run: {}: returned {}",
            script.display(),
            report["return_code"]
        );
    }
    if json_out {
        let mut v = report;
        if let Value::Object(m) = &mut v {
            m.insert("script".into(), script.display().to_string().into());
            m.insert("step_mode".into(), mode_text.into());
            m.insert("exit_code".into(), code.code().into());
        }
        finish(streamed.and(print_json(&v)), code)
    } else {
        finish(
            streamed.and(print_text(exit_ev["rendered"].as_str().unwrap_or(""))),
            code,
        )
    }
}
