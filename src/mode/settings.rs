//! The agent's environment (agent-contract.md section 3): parsed once at start.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

use crate::logs::sink::LogFormat;

/// Default `SKYHOOK_ROOT_DIR` (state root, a host path).
pub const DEFAULT_STATE_ROOT: &str = "/etc/skyhook";
/// Default `SKYHOOK_LOG_DIR` (log root, a host path).
pub const DEFAULT_LOG_ROOT: &str = "/var/log/skyhook";
/// Default `SKYHOOK_DATA_DIR` (legacy copy source, on the agent's side).
pub const DEFAULT_DATA_DIR: &str = "/skyhook-package";
/// Default `SKYHOOK_AGENT_BUFFER_LIMIT` in bytes.
pub const DEFAULT_BUFFER_LIMIT: usize = 8192;
pub use crate::process::DEFAULT_PATH;
/// Default `SKYHOOK_SCRIPT_TIMEOUT`: a `.rhai` step's wall-clock deadline, in seconds.
pub const DEFAULT_SCRIPT_TIMEOUT_SECS: u64 = 600;
/// Largest accepted `SKYHOOK_SCRIPT_TIMEOUT`, in seconds (one year).
pub const MAX_SCRIPT_TIMEOUT_SECS: u64 = 365 * 24 * 3600;

/// A setting whose value is out of its range or of the wrong shape. Reported before
/// anything is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {name} value {value:?}: expected {expected}")]
pub struct SettingError {
    /// The variable.
    pub name: &'static str,
    /// Its value (at most 80 characters of it).
    pub value: String,
    /// What is accepted.
    pub expected: String,
}

fn quoted(v: &str) -> String {
    match v.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &v[..i]),
        None => v.to_string(),
    }
}

/// Parse `SKYHOOK_SCRIPT_TIMEOUT`: whole seconds from 1 to [`MAX_SCRIPT_TIMEOUT_SECS`];
/// unset or empty gives the default.
///
/// # Errors
/// [`SettingError`] for anything else.
pub fn parse_script_timeout(value: Option<&str>) -> Result<Duration, SettingError> {
    match value.map(str::trim) {
        None | Some("") => Ok(Duration::from_secs(DEFAULT_SCRIPT_TIMEOUT_SECS)),
        Some(v) => match v.parse::<u64>() {
            Ok(secs) if (1..=MAX_SCRIPT_TIMEOUT_SECS).contains(&secs) => {
                Ok(Duration::from_secs(secs))
            }
            _ => Err(SettingError {
                name: "SKYHOOK_SCRIPT_TIMEOUT",
                value: quoted(v),
                expected: format!("whole seconds from 1 to {MAX_SCRIPT_TIMEOUT_SECS}"),
            }),
        },
    }
}

/// The agent's settings, read from its environment.
///
/// Booleans are true if and only if the value lowercased equals `true` (Python's parsing);
/// empty path values count as unset (the Go rewrite's rule, section 3).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `SKYHOOK_RESOURCE_ID` as given (empty when unset).
    pub resource_id: String,
    /// `SKYHOOK_ROOT_DIR`: the state root, a host path.
    pub state_root: PathBuf,
    /// `SKYHOOK_LOG_DIR`: the log root, a host path.
    pub log_root: PathBuf,
    /// `SKYHOOK_DATA_DIR`: the legacy copy source, on the agent's side.
    pub data_dir: PathBuf,
    /// `SKYHOOK_AGENT_WRITE_LOGS` (default true).
    pub write_logs: bool,
    /// `SKYHOOK_AGENT_BUFFER_LIMIT` in bytes (default 8192; non-integers and values < 1 warn
    /// and use the default). With the plain log format (the Go agent's, which dropped the
    /// variable) any value is accepted and ignored: always the default.
    pub buffer_limit: usize,
    /// `SKYHOOK_AGENT_LOG_FORMAT`: `prefixed` (default, the Python agent's `[out]`/`[err]`
    /// and time on every line) or `plain` (the Go agent's lines as written), ASCII case
    /// ignored.
    pub log_format: LogFormat,
    /// `COPY_RESOLV` (default true).
    pub copy_resolv: bool,
    /// `OVERLAY_ALWAYS_RUN_STEP` (default false).
    pub always_run_step: bool,
    /// `SKYHOOK_SCRIPT_TIMEOUT`: the wall-clock deadline of each `.rhai` step (default
    /// 600 s); commands a script runs default to what remains of it.
    pub script_timeout: Duration,
    /// The agent's whole environment, in order, passed to every step (8.3).
    pub env: Vec<(OsString, OsString)>,
    /// Warnings produced while parsing (printed on stderr by the caller).
    pub warnings: Vec<String>,
    /// Record the unified diff of each file content change a `.rhai` step makes, in its
    /// list of changes (`skyhook-run --package --apply --diff`). Never from the environment:
    /// false for the agent.
    pub diffs: bool,
}

fn truthy(v: Option<&OsStr>, default: bool) -> bool {
    match v {
        None => default,
        Some(v) => v.to_string_lossy().to_lowercase() == "true",
    }
}

impl Settings {
    /// Parse settings from an environment (normally `std::env::vars_os()`; `skyhook-run`:
    /// its own plus `--env`). Nothing is read from the process environment itself.
    ///
    /// # Errors
    /// [`SettingError`] for a value out of range (`SKYHOOK_SCRIPT_TIMEOUT`).
    pub fn from_env(
        env: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<Settings, SettingError> {
        let env: Vec<(OsString, OsString)> = env.into_iter().collect();
        let get = |k: &str| -> Option<&OsStr> {
            env.iter()
                .rev()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_os_str())
        };
        let path = |k: &str, d: &str| -> PathBuf {
            match get(k) {
                Some(v) if !v.is_empty() => PathBuf::from(v),
                _ => PathBuf::from(d),
            }
        };
        let mut warnings = Vec::new();
        let log_format = match get("SKYHOOK_AGENT_LOG_FORMAT").map(|v| v.to_string_lossy()) {
            None => LogFormat::Prefixed,
            Some(v) if v.trim().is_empty() => LogFormat::Prefixed,
            Some(v) => LogFormat::parse(v.trim()).ok_or_else(|| SettingError {
                name: "SKYHOOK_AGENT_LOG_FORMAT",
                value: quoted(&v),
                expected: "prefixed (the default: [out]/[err] and time on every line) or plain (lines as the step wrote them)".into(),
            })?,
        };
        let buffer_limit = match get("SKYHOOK_AGENT_BUFFER_LIMIT") {
            None => DEFAULT_BUFFER_LIMIT,
            Some(_) if log_format == LogFormat::Plain => DEFAULT_BUFFER_LIMIT,
            Some(v) => match v.to_string_lossy().trim().parse::<i64>() {
                Ok(n) if n >= 1 => usize::try_from(n).unwrap_or(DEFAULT_BUFFER_LIMIT),
                _ => {
                    warnings.push(format!(
                        "SKYHOOK_AGENT_BUFFER_LIMIT={} is not a positive integer; using {DEFAULT_BUFFER_LIMIT}",
                        v.to_string_lossy()
                    ));
                    DEFAULT_BUFFER_LIMIT
                }
            },
        };
        let state_root = path("SKYHOOK_ROOT_DIR", DEFAULT_STATE_ROOT);
        let log_root = path("SKYHOOK_LOG_DIR", DEFAULT_LOG_ROOT);
        for (name, dir) in [
            ("SKYHOOK_ROOT_DIR", &state_root),
            ("SKYHOOK_LOG_DIR", &log_root),
        ] {
            if !dir.is_absolute() {
                return Err(SettingError {
                    name,
                    value: quoted(&dir.to_string_lossy()),
                    expected: "an absolute host path".into(),
                });
            }
        }
        let script_timeout = parse_script_timeout(
            get("SKYHOOK_SCRIPT_TIMEOUT")
                .map(|v| v.to_string_lossy())
                .as_deref(),
        )?;
        Ok(Settings {
            resource_id: get("SKYHOOK_RESOURCE_ID")
                .map(|v| v.to_string_lossy().into_owned())
                .unwrap_or_default(),
            state_root,
            log_root,
            data_dir: path("SKYHOOK_DATA_DIR", DEFAULT_DATA_DIR),
            write_logs: truthy(get("SKYHOOK_AGENT_WRITE_LOGS"), true),
            buffer_limit,
            log_format,
            copy_resolv: truthy(get("COPY_RESOLV"), true),
            always_run_step: truthy(get("OVERLAY_ALWAYS_RUN_STEP"), false),
            script_timeout,
            env,
            warnings,
            diffs: false,
        })
    }

    /// The value of a variable in the agent's environment.
    pub fn var(&self, name: &str) -> Option<&OsStr> {
        self.env
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_os_str())
    }
}

/// `SKYHOOK_RESOURCE_ID` split into its parts (section 3.1, the Go rewrite's parser).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceId {
    /// The whole id, e.g. `gpu-init-<uid>-3_tuning_1.1.4`.
    pub raw: String,
    /// Text between the first and the last `_`.
    pub package: String,
    /// Text after the last `_`.
    pub version: String,
}

/// An unusable `SKYHOOK_RESOURCE_ID`.
#[derive(Debug, thiserror::Error)]
pub enum ResourceIdError {
    /// Unset or empty.
    #[error(
        "SKYHOOK_RESOURCE_ID is not set: it must be <id>_<package>_<version> (the operator sets it, e.g. gpu-init-<uid>-3_tuning_1.1.4)"
    )]
    Unset,
    /// Not of the expected shape.
    #[error(
        "SKYHOOK_RESOURCE_ID={value:?} is invalid: expected <id>_<package>_<version>, one path component (no `/`, no control characters such as a trailing newline, not starting with `.`, at most 255 bytes) with a non-empty package and version"
    )]
    Invalid {
        /// The value as given.
        value: String,
    },
}

fn is_component(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && !s.contains('/')
        && s != "."
        && s != ".."
        && !s.chars().any(char::is_control)
}

impl ResourceId {
    /// Parse `<id>_<package>_<version>`: the package is between the first and the last `_`,
    /// the version after the last `_`.
    ///
    /// # Errors
    /// Fewer than two `_`, or a package/version that is empty, `.`, `..` or contains `/`.
    pub fn parse(raw: &str) -> Result<ResourceId, ResourceIdError> {
        if raw.is_empty() {
            return Err(ResourceIdError::Unset);
        }
        let err = || ResourceIdError::Invalid { value: quoted(raw) };
        let first = raw.find('_').ok_or_else(err)?;
        let last = raw.rfind('_').ok_or_else(err)?;
        if first == last {
            return Err(err());
        }
        let package = &raw[first + 1..last];
        let version = &raw[last + 1..];
        // The whole id names the interrupt marker directory, so it must be one component too.
        if !is_component(package)
            || !is_component(version)
            || !is_component(raw)
            || raw.starts_with('.')
        {
            return Err(err());
        }
        Ok(ResourceId {
            raw: raw.to_string(),
            package: package.to_string(),
            version: version.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Settings {
        Settings::from_env(
            pairs
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        )
        .unwrap()
    }

    #[test]
    fn script_timeout_is_ranged_and_never_overflows() {
        assert_eq!(env(&[]).script_timeout, Duration::from_secs(600));
        assert_eq!(
            env(&[("SKYHOOK_SCRIPT_TIMEOUT", " 30 ")]).script_timeout,
            Duration::from_secs(30)
        );
        for bad in ["0", "-1", "1.5", "abc", "18446744073709551615", "31536001"] {
            let e = Settings::from_env([(
                OsString::from("SKYHOOK_SCRIPT_TIMEOUT"),
                OsString::from(bad),
            )])
            .unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "invalid SKYHOOK_SCRIPT_TIMEOUT value {bad:?}: expected whole seconds from 1 to 31536000"
                )
            );
        }
        let long = "9".repeat(500);
        let e = parse_script_timeout(Some(&long)).unwrap_err();
        assert!(e.to_string().len() < 200, "{e}");
    }

    #[test]
    fn defaults() {
        let s = env(&[]);
        assert_eq!(s.state_root, PathBuf::from("/etc/skyhook"));
        assert_eq!(s.log_root, PathBuf::from("/var/log/skyhook"));
        assert_eq!(s.data_dir, PathBuf::from("/skyhook-package"));
        assert!(s.write_logs && s.copy_resolv && !s.always_run_step);
        assert_eq!(s.buffer_limit, 8192);
    }

    #[test]
    fn booleans_and_empty_paths() {
        let s = env(&[
            ("SKYHOOK_AGENT_WRITE_LOGS", "yes"),
            ("COPY_RESOLV", "FALSE"),
            ("OVERLAY_ALWAYS_RUN_STEP", "TRUE"),
            ("SKYHOOK_ROOT_DIR", ""),
        ]);
        assert!(!s.write_logs && !s.copy_resolv && s.always_run_step);
        assert_eq!(s.state_root, PathBuf::from("/etc/skyhook"));
    }

    #[test]
    fn bad_buffer_limit_warns() {
        for bad in ["abc", "0", "-5", ""] {
            let s = env(&[("SKYHOOK_AGENT_BUFFER_LIMIT", bad)]);
            assert_eq!(s.buffer_limit, 8192, "{bad}");
            assert_eq!(s.warnings.len(), 1, "{bad}");
        }
        assert_eq!(env(&[("SKYHOOK_AGENT_BUFFER_LIMIT", "4")]).buffer_limit, 4);
    }

    #[test]
    fn log_format_and_the_ignored_buffer_limit() {
        assert_eq!(env(&[]).log_format, LogFormat::Prefixed);
        assert_eq!(
            env(&[("SKYHOOK_AGENT_LOG_FORMAT", " ")]).log_format,
            LogFormat::Prefixed
        );
        assert_eq!(
            env(&[("SKYHOOK_AGENT_LOG_FORMAT", "Plain")]).log_format,
            LogFormat::Plain
        );
        // Plain: the Go agent dropped SKYHOOK_AGENT_BUFFER_LIMIT; any value is accepted
        // (no warning) and ignored.
        for v in ["4", "abc", "0", "-5", ""] {
            let s = env(&[
                ("SKYHOOK_AGENT_BUFFER_LIMIT", v),
                ("SKYHOOK_AGENT_LOG_FORMAT", "plain"),
            ]);
            assert_eq!((s.buffer_limit, s.warnings.len()), (8192, 0), "{v:?}");
        }
        let e = Settings::from_env([(
            OsString::from("SKYHOOK_AGENT_LOG_FORMAT"),
            OsString::from("v7"),
        )])
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid SKYHOOK_AGENT_LOG_FORMAT value \"v7\": expected prefixed (the default: [out]/[err] and time on every line) or plain (lines as the step wrote them)"
        );
    }

    #[test]
    fn resource_id() {
        let r = ResourceId::parse("sky-0000-1_demo_1.0.0").unwrap();
        assert_eq!((r.package.as_str(), r.version.as_str()), ("demo", "1.0.0"));
        let r = ResourceId::parse("a_b_c_d").unwrap();
        assert_eq!((r.package.as_str(), r.version.as_str()), ("b_c", "d"));
        for bad in [
            "",
            "nounderscore",
            "a_b",
            "a__1",
            "a_pkg_",
            "a_../x_1",
            "a_.._1",
            "a_p_..",
            "sky-0000-1_demo_1.0.0\n",
            "sky_de\tmo_1",
        ] {
            assert!(ResourceId::parse(bad).is_err(), "{bad:?}");
        }
        let e = ResourceId::parse(&format!("a_b_{}", "9".repeat(10_000))).unwrap_err();
        assert!(e.to_string().len() < 400, "one readable line: {e}");
        for (k, v) in [
            ("SKYHOOK_ROOT_DIR", "etc/skyhook"),
            ("SKYHOOK_LOG_DIR", "./log"),
        ] {
            let e = Settings::from_env([(OsString::from(k), OsString::from(v))]).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("invalid {k} value {v:?}: expected an absolute host path")
            );
        }
    }
}
