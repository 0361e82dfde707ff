//! Loading config.json: schema version, schema v1, mode keys, step rules (contract 5.1, 5.2).

use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

use super::conform::conforms_v1;
use super::model::{Mode, Package, ReturnCode, Step};
use super::schema::{self, Violation};
use crate::pyfmt;

/// Step keys the Python agent's step constructor accepts (contract 5.1).
const STEP_KEYS: [&str; 9] = [
    "name",
    "path",
    "arguments",
    "returncodes",
    "on_host",
    "idempotence",
    "upgrade_step",
    "env",
    "requires_interrupt",
];

/// A successfully loaded package and the warnings found on the way.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    /// The package.
    pub package: Package,
    /// Warnings, in the order found. Rule-5 warnings are the Python message text, which the
    /// Python agent logs as `WARNING:root:<text>` (they start with a space:
    /// ` foo_check.sh doesn't exist. Checks ensure that all tasks in the step will complete.`);
    /// unknown step keys give `step '<name>' of mode <mode> has unknown key '<key>'; ignored`.
    pub warnings: Vec<String>,
}

/// Why a config.json was rejected. Every message starts with the file.
///
/// Texts after the file name follow the Python agent where it has one (contract 5.1, 5.2).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackageError {
    /// Not JSON at all.
    #[error("{}: invalid JSON", file.display())]
    Json {
        /// The config file.
        file: PathBuf,
        /// The parser's error (line and column).
        #[source]
        source: serde_json::Error,
    },
    /// `schema_version` is a string other than `v1`.
    #[error("{}: Unknown skyhook-agent schema version: {version}", file.display())]
    UnknownSchemaVersion {
        /// The config file.
        file: PathBuf,
        /// The version found.
        version: String,
    },
    /// The document violates schema v1; every violation is listed with its JSON pointer.
    #[error("{}: does not match the skyhook-agent v1 schema: {}", file.display(), join_violations(violations))]
    Schema {
        /// The config file.
        file: PathBuf,
        /// Every violation found.
        violations: Vec<Violation>,
    },
    /// The embedded schema could not be compiled (a build defect, not an input error).
    #[error("{}: cannot validate: {message}", file.display())]
    SchemaUnavailable {
        /// The config file.
        file: PathBuf,
        /// What went wrong with the embedded schema.
        message: String,
    },
    /// A key of `modes` is not a mode (Python crashes with `'<key>' is not a valid Mode`).
    #[error("{}: '{key}' is not a valid Mode (valid modes: {})", file.display(), valid_modes())]
    UnknownMode {
        /// The config file.
        file: PathBuf,
        /// The unknown key.
        key: String,
    },
    /// A return code does not fit a signed 64-bit integer.
    #[error("{}: return code {value} of step {step} in mode {mode} is out of range", file.display())]
    ReturnCodeRange {
        /// The config file.
        file: PathBuf,
        /// The mode.
        mode: Mode,
        /// The step name.
        step: String,
        /// The number as written.
        value: String,
    },
    /// An upgrade step has arguments (Python fails while constructing the step).
    #[error("{}: UpgradeStep {name} can not have any arguments, but found: {arguments}", file.display())]
    UpgradeStepArguments {
        /// The config file.
        file: PathBuf,
        /// The step name.
        name: String,
        /// Python `repr` of the arguments list.
        arguments: String,
    },
    /// Rule 1: no mode has a step.
    #[error("{}: There are no defined steps.", file.display())]
    NoSteps {
        /// The config file.
        file: PathBuf,
    },
    /// Rule 2: no non-check mode key is present.
    #[error("{}: There are only check modes defined. You must define at least one of UNINSTALL, UPGRADE, APPLY, CONFIG, POST_INTERRUPT", file.display())]
    OnlyChecks {
        /// The config file.
        file: PathBuf,
    },
    /// Rule 3: a non-empty run mode without steps in its check mode.
    #[error("{}: Couldn't validate steps. There are no checks for any of the {mode} steps.", file.display())]
    MissingChecks {
        /// The config file.
        file: PathBuf,
        /// The run mode.
        mode: Mode,
    },
    /// A value the agent uses as a path component or hands to `execve` is unusable
    /// (`package_name`/`package_version` not one safe path component, a NUL byte, an
    /// argument or environment beyond the bounds of [`LIMITS`]). The value is quoted with at
    /// most 64 characters.
    #[error("{}: {what}: {why}", file.display())]
    Invalid {
        /// The config file.
        file: PathBuf,
        /// What is wrong, e.g. `package_name "a/b"`.
        what: String,
        /// Why.
        why: String,
    },
    /// Rule 4: an upgrade step outside `upgrade`/`upgrade-check`.
    #[error("{}: UpgradeStep {path} defined in the {mode} mode but can only be defined in the UPGRADE or UPGRADE_CHECK modes.", file.display())]
    UpgradeStepMode {
        /// The config file.
        file: PathBuf,
        /// The step path.
        path: String,
        /// The mode it is in.
        mode: Mode,
    },
    /// Rule 6 \[fix\]: a step path that is empty, absolute or has a `..` component.
    #[error("{}: step path '{path}' in mode {mode} must be relative to skyhook_dir without '..' components", file.display())]
    UnsafeStepPath {
        /// The config file.
        file: PathBuf,
        /// The mode.
        mode: Mode,
        /// The path as configured.
        path: String,
    },
    /// Rule 6: step files that do not exist, all listed.
    #[error("{}: Following steps did not exist:{}", file.display(), paths.join(", "))]
    MissingStepFiles {
        /// The config file.
        file: PathBuf,
        /// The missing paths, in configuration order, without repeats.
        paths: Vec<String>,
    },
}

/// Violations listed in one error line at most; the rest are counted.
const MAX_LISTED_VIOLATIONS: usize = super::schema::MAX_WORDED;

fn join_violations(v: &[Violation]) -> String {
    let mut text = v
        .iter()
        .take(MAX_LISTED_VIOLATIONS)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if v.len() > MAX_LISTED_VIOLATIONS {
        text.push_str(&format!(
            "; and {} more violations",
            v.len() - MAX_LISTED_VIOLATIONS
        ));
    }
    text
}

fn valid_modes() -> String {
    Mode::ALL
        .iter()
        .map(|m| m.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parse and validate config.json.
///
/// Order: JSON; `schema_version` (a string other than `v1` gives
/// [`PackageError::UnknownSchemaVersion`] before anything else); schema v1 (all violations
/// with their JSON pointers; a document the hand-written check of `conform.rs` finds
/// conforming skips compiling the schema, which would find none); unknown `modes` keys; building the steps (out-of-range return
/// codes, upgrade steps with arguments; unknown step keys become warnings); then rules 1-4 of
/// contract 5.2 and the rule-5 warnings (basename rule, paired check mode). Rule 6 (files
/// exist) is [`check_step_files`]. `source` names the file in every error.
///
/// # Errors
/// The first failing stage, as a [`PackageError`] variant.
pub fn parse(source: &Path, json: &[u8]) -> Result<Loaded, PackageError> {
    parse_with(source, json, conforms_v1)
}

/// [`parse`] with `conforms` deciding which documents may skip the compiled schema (only
/// documents it finds conforming; every other one is validated, and its refusal worded, by
/// the schema). Tests pass `|_| false` to run every document through the schema.
pub(super) fn parse_with(
    source: &Path,
    json: &[u8],
    conforms: fn(&Value) -> bool,
) -> Result<Loaded, PackageError> {
    let file = source.to_path_buf();
    let doc: Value = serde_json::from_slice(json).map_err(|e| PackageError::Json {
        file: file.clone(),
        source: e,
    })?;
    if let Some(Value::String(v)) = doc.get("schema_version")
        && v != "v1"
    {
        return Err(PackageError::UnknownSchemaVersion {
            file,
            version: v.clone(),
        });
    }
    // A conforming document (nearly every one) skips compiling the schema, which is about
    // half of a bash-only start-up; any other is validated, and worded, by the schema.
    let violations = if conforms(&doc) {
        Vec::new()
    } else {
        schema::validate_v1(&doc).map_err(|message| PackageError::SchemaUnavailable {
            file: file.clone(),
            message,
        })?
    };
    if !violations.is_empty() {
        return Err(PackageError::Schema { file, violations });
    }
    // The schema guarantees the shapes below; fall back to empty values defensively.
    let empty = Map::new();
    let top = doc.as_object().unwrap_or(&empty);
    let text = |k: &str| top.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let modes_obj = top
        .get("modes")
        .and_then(Value::as_object)
        .unwrap_or(&empty);

    let mut keyed = Vec::with_capacity(modes_obj.len());
    for (key, steps) in modes_obj {
        let Some(mode) = Mode::parse(key) else {
            return Err(PackageError::UnknownMode {
                file,
                key: key.clone(),
            });
        };
        keyed.push((mode, steps));
    }

    let mut warnings = Vec::new();
    let mut modes = Vec::with_capacity(keyed.len());
    for (mode, steps) in keyed {
        let list = steps.as_array().map(Vec::as_slice).unwrap_or(&[]);
        let mut out = Vec::with_capacity(list.len());
        for raw in list {
            out.push(build_step(&file, mode, raw, &mut warnings)?);
        }
        modes.push((mode, out));
    }

    let package = Package {
        schema_version: text("schema_version"),
        package_name: text("package_name"),
        package_version: text("package_version"),
        expected_config_files: top
            .get("expected_config_files")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        modes,
    };
    check_rules(&file, &package, &mut warnings)?;
    Ok(Loaded { package, warnings })
}

fn build_step(
    file: &Path,
    mode: Mode,
    raw: &Value,
    warnings: &mut Vec<String>,
) -> Result<Step, PackageError> {
    let empty = Map::new();
    let obj = raw.as_object().unwrap_or(&empty);
    let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let flag = |k: &str| obj.get(k).and_then(Value::as_bool).unwrap_or(false);
    let name = text("name");
    for key in obj.keys() {
        if !STEP_KEYS.contains(&key.as_str()) {
            warnings.push(format!(
                "step '{name}' of mode {mode} has unknown key '{key}'; ignored"
            ));
        }
    }
    let arguments: Vec<String> = obj
        .get("arguments")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let mut returncodes = Vec::new();
    for code in obj
        .get("returncodes")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        returncodes.push(
            return_code(code).ok_or_else(|| PackageError::ReturnCodeRange {
                file: file.to_path_buf(),
                mode,
                step: name.clone(),
                value: code.to_string(),
            })?,
        );
    }
    let env = obj
        .get("env")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let step = Step {
        path: text("path"),
        arguments,
        returncodes,
        on_host: flag("on_host"),
        idempotence: flag("idempotence"),
        upgrade_step: flag("upgrade_step"),
        env,
        name,
    };
    if step.upgrade_step && !step.arguments.is_empty() {
        return Err(PackageError::UpgradeStepArguments {
            file: file.to_path_buf(),
            name: step.name,
            arguments: pyfmt::repr_str_list(&step.arguments),
        });
    }
    Ok(step)
}

/// A JSON number the schema accepted as an integer: an `i64`, or an integral float in the
/// `i64` range (kept as a float for rendering).
fn return_code(v: &Value) -> Option<ReturnCode> {
    let n = v.as_number()?;
    if let Some(i) = n.as_i64() {
        return Some(ReturnCode::int(i));
    }
    if n.is_u64() {
        return None;
    }
    let f = n.as_f64()?;
    // 2^63 is exactly representable; anything at or above it does not fit.
    if f.fract() != 0.0 || f.abs() >= 9_223_372_036_854_775_808.0 {
        return None;
    }
    Some(ReturnCode {
        value: f as i64,
        float: true,
    })
}

/// The check file name rule 5 expects for a run step: `_check` inserted before the last `.` of
/// the basename (appended when it has none); directories kept.
pub fn expected_check_path(path: &str) -> String {
    let (dir, base) = match path.rfind('/') {
        Some(i) => path.split_at(i + 1),
        None => ("", path),
    };
    match base.rfind('.') {
        Some(i) => format!("{dir}{}_check{}", &base[..i], &base[i..]),
        None => format!("{dir}{base}_check"),
    }
}

/// Bounds on what a step hands to `execve` (Linux: 128 KiB per string, about 2 MiB in all).
pub struct Limits {
    /// Arguments of one step.
    pub max_args: usize,
    /// Bytes of one argument or environment value.
    pub max_value_bytes: usize,
    /// Entries of one step's `env`.
    pub max_env: usize,
    /// Entries of one step's `returncodes`.
    pub max_returncodes: usize,
    /// Bytes of arguments and environment of one step together.
    pub max_total_bytes: usize,
}

/// The bounds checked by [`parse`].
pub const LIMITS: Limits = Limits {
    max_args: 4096,
    max_value_bytes: 128 * 1024,
    max_env: 1024,
    max_returncodes: 256,
    max_total_bytes: 1024 * 1024,
};

/// `v` quoted for a message, cut to 64 characters.
fn quote_short(v: &str) -> String {
    match v.char_indices().nth(64) {
        Some((i, _)) => format!("{:?}...", &v[..i]),
        None => format!("{v:?}"),
    }
}

/// Why `v` is not one safe path component, if it is not.
fn path_component_problem(v: &str) -> Option<&'static str> {
    if v.is_empty() {
        Some("is empty")
    } else if v == "." || v == ".." {
        Some("must not be . or ..")
    } else if v.contains('/') {
        Some("must not contain /")
    } else if v.contains('\0') {
        Some("must not contain a NUL byte")
    } else if v.chars().any(char::is_control) {
        Some("must not contain control characters (newline, tab, ...)")
    } else if v.len() > 255 {
        Some("is longer than 255 bytes")
    } else {
        None
    }
}

/// What kind of character `c` is when it must not appear in a step path, which is printed
/// in output lines, flag names and `check_results`: a control character (C0, DEL, C1) or a
/// Unicode bidirectional text control (U+200E/F, U+202A–U+202E, U+2066–U+2069), which
/// reorders what a terminal shows.
fn unprintable(c: char) -> Option<&'static str> {
    if c.is_control() {
        Some("the control character")
    } else if matches!(c, '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
    {
        Some("the bidirectional text control")
    } else {
        None
    }
}

/// Rule 0 \[fix\]: values used as path parts or passed to `execve` are usable.
fn check_bounds(file: &Path, pkg: &Package) -> Result<(), PackageError> {
    let bad = |what: String, why: String| PackageError::Invalid {
        file: file.to_path_buf(),
        what,
        why,
    };
    for (field, v) in [
        ("package_name", &pkg.package_name),
        ("package_version", &pkg.package_version),
    ] {
        if let Some(why) = path_component_problem(v) {
            return Err(bad(
                format!("{field} {}", quote_short(v)),
                format!("{why} (it names the flag, history, log and lock paths)"),
            ));
        }
    }
    let l = &LIMITS;
    for (mode, step) in pkg.all_steps() {
        let at = |what: &str| format!("step {} of mode {mode}: {what}", quote_short(&step.path));
        if step.path.contains('\0') {
            return Err(bad(at("path"), "must not contain a NUL byte".into()));
        }
        if let Some((c, kind)) = step
            .path
            .chars()
            .find_map(|c| unprintable(c).map(|k| (c, k)))
        {
            return Err(bad(
                at("path"),
                format!(
                    "contains {kind} U+{:04X}: step paths must not contain control characters (newline, carriage return, tab, C1) or bidirectional text controls",
                    u32::from(c)
                ),
            ));
        }
        if step.arguments.len() > l.max_args {
            return Err(bad(
                at("arguments"),
                format!(
                    "{} arguments, more than {}",
                    step.arguments.len(),
                    l.max_args
                ),
            ));
        }
        if step.env.len() > l.max_env {
            return Err(bad(
                at("env"),
                format!("{} variables, more than {}", step.env.len(), l.max_env),
            ));
        }
        if step.returncodes.len() > l.max_returncodes {
            return Err(bad(
                at("returncodes"),
                format!(
                    "{} codes, more than {}",
                    step.returncodes.len(),
                    l.max_returncodes
                ),
            ));
        }
        let mut total = 0usize;
        for (i, a) in step.arguments.iter().enumerate() {
            total += a.len() + 1;
            if a.contains('\0') {
                return Err(bad(
                    at(&format!("argument {i}")),
                    "contains a NUL byte".into(),
                ));
            }
            if a.len() > l.max_value_bytes {
                return Err(bad(
                    at(&format!("argument {i}")),
                    format!("{} bytes, more than {}", a.len(), l.max_value_bytes),
                ));
            }
        }
        for (k, v) in &step.env {
            total += k.len() + v.len() + 2;
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(bad(
                    at(&format!("env key {}", quote_short(k))),
                    "must be non-empty without '=' or NUL".into(),
                ));
            }
            if v.contains('\0') {
                return Err(bad(
                    at(&format!("env {}", quote_short(k))),
                    "value contains a NUL byte".into(),
                ));
            }
            if v.len() > l.max_value_bytes {
                return Err(bad(
                    at(&format!("env {}", quote_short(k))),
                    format!("{} bytes, more than {}", v.len(), l.max_value_bytes),
                ));
            }
        }
        if total > l.max_total_bytes {
            return Err(bad(
                at("arguments and env"),
                format!("{total} bytes in all, more than {}", l.max_total_bytes),
            ));
        }
    }
    Ok(())
}

fn check_rules(file: &Path, pkg: &Package, warnings: &mut Vec<String>) -> Result<(), PackageError> {
    check_bounds(file, pkg)?;
    let file = || file.to_path_buf();
    // 1. some step somewhere
    if pkg.modes.iter().all(|(_, s)| s.is_empty()) {
        return Err(PackageError::NoSteps { file: file() });
    }
    // 2. a non-check mode present as a key (Python: key presence, `"apply": []` counts)
    if !Mode::RUN.iter().any(|m| pkg.has_mode_key(*m)) {
        return Err(PackageError::OnlyChecks { file: file() });
    }
    // 3. pairing
    for mode in Mode::RUN {
        let check = mode.check_mode().unwrap_or(mode);
        if !pkg.steps(mode).is_empty() && pkg.steps(check).is_empty() {
            return Err(PackageError::MissingChecks { file: file(), mode });
        }
    }
    // 4. upgrade steps only in upgrade modes
    for (mode, step) in pkg.all_steps() {
        if step.upgrade_step && !matches!(mode, Mode::Upgrade | Mode::UpgradeCheck) {
            return Err(PackageError::UpgradeStepMode {
                file: file(),
                path: step.path.clone(),
                mode,
            });
        }
    }
    // 5. warnings: a check step for each run step (basename rule, paired mode)
    for mode in Mode::RUN {
        let check = mode.check_mode().unwrap_or(mode);
        for step in pkg.steps(mode) {
            let expected = expected_check_path(&step.path);
            // A `.rhai` step may serve as its own check (run with changes held back), so
            // the same script in the check mode counts too.
            let self_checked = step.path.ends_with(".rhai")
                && pkg.steps(check).iter().any(|c| c.path == step.path);
            if !self_checked && !pkg.steps(check).iter().any(|c| c.path == expected) {
                warnings.push(format!(
                    " {expected} doesn't exist. Checks ensure that all tasks in the step will complete."
                ));
            }
        }
    }
    Ok(())
}

/// Rule 6: every step path of every mode must exist under the step root.
///
/// `exists` receives each distinct step path once, as configured. Paths that are empty, absolute,
/// or contain a `..` component are rejected first ([`PackageError::UnsafeStepPath`], \[fix\]);
/// then all missing paths are reported together, in configuration order without repeats.
///
/// # Errors
/// [`PackageError::UnsafeStepPath`] or [`PackageError::MissingStepFiles`].
pub fn check_step_files(
    source: &Path,
    pkg: &Package,
    exists: impl Fn(&str) -> bool,
) -> Result<(), PackageError> {
    for (mode, step) in pkg.all_steps() {
        let p = Path::new(&step.path);
        let unsafe_path = step.path.is_empty()
            || p.is_absolute()
            || p.components().any(|c| matches!(c, Component::ParentDir));
        if unsafe_path {
            return Err(PackageError::UnsafeStepPath {
                file: source.to_path_buf(),
                mode,
                path: step.path.clone(),
            });
        }
    }
    let mut missing: Vec<String> = Vec::new();
    // A path shared by steps (a run step and its own check, a script run with several
    // arguments) is looked up once.
    let mut checked: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for (_, step) in pkg.all_steps() {
        if checked.insert(step.path.as_str()) && !exists(&step.path) {
            missing.push(step.path.clone());
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PackageError::MissingStepFiles {
            file: source.to_path_buf(),
            paths: missing,
        })
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
