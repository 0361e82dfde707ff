//! Diagnostics with `tracing`, off by default. The agent's stdout (agent-contract.md: headers,
//! `SUCEEDED`/`FAILED`, relayed step output) is never touched: diagnostic events go to stderr,
//! or to a file.
//!
//! | variable | meaning |
//! |---|---|
//! | `SKYHOOK_LOG` | a `RUST_LOG`-style filter (`debug`, `skyhook=trace`, `skyhook::host=debug,info`); unset or empty: no diagnostics at all |
//! | `SKYHOOK_LOG_FORMAT` | `text` (default) or `json` (one JSON object per event, for log shippers) |
//! | `SKYHOOK_LOG_FILE` | append events to this file (agent-side path) instead of stderr |
//!
//! Spans: `mode` (mode, package, version), `step` (path, index, kind), `host_api` (the
//! function, e.g. `fs::write`), `command` (argv), each with its fields on every event inside.
//! Secrets: events carry paths, names and argv; a command's argv may hold what a script put
//! there, so diagnostics are for debugging a node, not for shipping to a shared log store
//! without review.

use std::ffi::{OsStr, OsString};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

/// What [`init`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Init {
    /// `SKYHOOK_LOG` unset or empty: nothing installed.
    Off,
    /// A subscriber writing to stderr or the file was installed.
    On,
}

fn var<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsStr> {
    env.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_os_str())
        .filter(|v| !v.is_empty())
}

/// Install the diagnostics subscriber from `env` (the process environment): see the module
/// docs. A second call in the same process does nothing.
///
/// # Errors
/// A message for an invalid `SKYHOOK_LOG` filter, an unknown `SKYHOOK_LOG_FORMAT`, or a
/// `SKYHOOK_LOG_FILE` that cannot be opened for appending; the caller prints it as a warning
/// and runs without diagnostics.
pub fn init(env: &[(OsString, OsString)]) -> Result<Init, String> {
    let Some(filter) = var(env, "SKYHOOK_LOG") else {
        return Ok(Init::Off);
    };
    let filter = filter.to_string_lossy();
    let filter = EnvFilter::try_new(filter.as_ref())
        .map_err(|e| format!("SKYHOOK_LOG={filter:?} is not a valid filter: {e}"))?;
    let json = match var(env, "SKYHOOK_LOG_FORMAT").map(OsStr::to_string_lossy) {
        None => false,
        Some(f) if f == "text" => false,
        Some(f) if f == "json" => true,
        Some(f) => return Err(format!("SKYHOOK_LOG_FORMAT={f:?}: expected text or json")),
    };
    let writer = match var(env, "SKYHOOK_LOG_FILE") {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| {
                    format!(
                        "SKYHOOK_LOG_FILE={}: cannot open for appending: {e}",
                        path.to_string_lossy()
                    )
                })?;
            tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::sync::Mutex::new(file))
        }
        None => tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stderr),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(false);
    let installed = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    // Already installed (a second call, or a test harness): keep the first.
    let _ = installed;
    Ok(Init::On)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn off_unless_asked_and_bad_values_are_named() {
        assert_eq!(init(&env(&[])), Ok(Init::Off));
        assert_eq!(init(&env(&[("SKYHOOK_LOG", "")])), Ok(Init::Off));
        let e = init(&env(&[("SKYHOOK_LOG", "skyhook=notalevel")])).unwrap_err();
        assert!(
            e.starts_with("SKYHOOK_LOG=\"skyhook=notalevel\" is not a valid filter"),
            "{e}"
        );
        assert_eq!(
            init(&env(&[
                ("SKYHOOK_LOG", "debug"),
                ("SKYHOOK_LOG_FORMAT", "xml")
            ]))
            .unwrap_err(),
            "SKYHOOK_LOG_FORMAT=\"xml\": expected text or json"
        );
        let e = init(&env(&[
            ("SKYHOOK_LOG", "debug"),
            ("SKYHOOK_LOG_FILE", "/nonexistent-dir/x.log"),
        ]))
        .unwrap_err();
        assert!(
            e.starts_with("SKYHOOK_LOG_FILE=/nonexistent-dir/x.log: cannot open"),
            "{e}"
        );
    }
}
