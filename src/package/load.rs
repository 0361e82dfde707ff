//! Loading config.json: schema version, schema v1, mode keys, step rules (contract 5.1, 5.2).

use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

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
/// with their JSON pointers); unknown `modes` keys; building the steps (out-of-range return
/// codes, upgrade steps with arguments; unknown step keys become warnings); then rules 1-4 of
/// contract 5.2 and the rule-5 warnings (basename rule, paired check mode). Rule 6 (files
/// exist) is [`check_step_files`]. `source` names the file in every error.
///
/// # Errors
/// The first failing stage, as a [`PackageError`] variant.
pub fn parse(source: &Path, json: &[u8]) -> Result<Loaded, PackageError> {
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
    let violations =
        schema::validate_v1(&doc).map_err(|message| PackageError::SchemaUnavailable {
            file: file.clone(),
            message,
        })?;
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
/// `exists` receives each step's relative path as configured. Paths that are empty, absolute,
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
    for (_, step) in pkg.all_steps() {
        if !missing.contains(&step.path) && !exists(&step.path) {
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
mod tests {
    use super::*;
    use serde_json::json;

    const FILE: &str = "/pkg/config.json";

    /// Fixture P of contract 15.
    fn fixture() -> Value {
        json!({"schema_version": "v1", "root_dir": "/", "expected_config_files": [],
          "package_name": "demo", "package_version": "1.0.0",
          "modes": {
            "apply": [{"name": "foo", "path": "foo.sh", "arguments": ["a", "b"], "returncodes": [0],
                       "on_host": true, "idempotence": false, "upgrade_step": false}],
            "apply-check": [{"name": "foo_check", "path": "foo_check.sh", "arguments": [], "returncodes": [0],
                             "on_host": true, "idempotence": false, "upgrade_step": false}]}})
    }

    fn load(doc: &Value) -> Result<Loaded, PackageError> {
        parse(Path::new(FILE), doc.to_string().as_bytes())
    }

    fn err(doc: &Value) -> String {
        load(doc).unwrap_err().to_string()
    }

    fn step(name: &str, path: &str) -> Value {
        json!({"name": name, "path": path, "arguments": [], "returncodes": [0],
               "on_host": true, "idempotence": false, "upgrade_step": false})
    }

    #[test]
    fn fixture_loads() {
        let l = load(&fixture()).unwrap();
        assert_eq!(l.warnings, Vec::<String>::new());
        let p = &l.package;
        assert_eq!(p.package_name, "demo");
        assert_eq!(p.package_version, "1.0.0");
        assert_eq!(p.schema_version, "v1");
        assert_eq!(
            p.modes.iter().map(|(m, _)| *m).collect::<Vec<_>>(),
            vec![Mode::Apply, Mode::ApplyCheck]
        );
        let foo = &p.steps(Mode::Apply)[0];
        assert_eq!(foo.arguments, vec!["a", "b"]);
        assert_eq!(foo.returncodes, vec![ReturnCode::int(0)]);
        assert!(foo.on_host && !foo.idempotence && !foo.upgrade_step);
        assert!(p.steps(Mode::Config).is_empty());
        assert!(!p.has_mode_key(Mode::Config));
    }

    #[test]
    fn schema_errors_stay_one_readable_line() {
        let mut d = fixture();
        d["modes"]["apply"][0]["arguments"] = json!(vec![json!(["x".repeat(1_000)]); 5_000]);
        let e = err(&d);
        assert!(e.len() < 4000, "{} bytes", e.len());
        assert!(
            e.ends_with("; and 990 more violations"),
            "{}",
            &e[e.len() - 80..]
        );
        assert!(!e.contains('\n'));
    }

    #[test]
    fn step_paths_with_control_or_bidi_characters_are_refused_naming_step_and_character() {
        for (path, code, kind) in [
            ("a\nFAILED.sh", "U+000A", "control character"),
            ("a\r.sh", "U+000D", "control character"),
            ("a\t.sh", "U+0009", "control character"),
            ("a\u{85}.sh", "U+0085", "control character"),
            ("a\u{9b}.sh", "U+009B", "control character"),
            ("a\u{7f}.sh", "U+007F", "control character"),
            ("gpu\u{202E}hs.x", "U+202E", "bidirectional text control"),
            ("a\u{202A}.sh", "U+202A", "bidirectional text control"),
            ("a\u{2066}.sh", "U+2066", "bidirectional text control"),
            ("a\u{2069}.sh", "U+2069", "bidirectional text control"),
            ("a\u{200E}.sh", "U+200E", "bidirectional text control"),
            ("a\u{200F}.sh", "U+200F", "bidirectional text control"),
        ] {
            let mut d = fixture();
            d["modes"]["apply-check"][0]["path"] = json!(path);
            let e = err(&d);
            assert_eq!(
                e,
                format!(
                    "/pkg/config.json: step {path:?} of mode apply-check: path: contains the {kind} {code}: step paths must not contain control characters (newline, carriage return, tab, C1) or bidirectional text controls"
                )
            );
            assert!(!e.contains(['\n', '\r', '\u{202E}']), "{e:?}");
        }
        // Printable non-ASCII stays allowed.
        let mut d = fixture();
        d["modes"]["apply"][0]["path"] = json!("données/é.sh");
        d["modes"]["apply-check"][0]["path"] = json!("données/é_check.sh");
        assert!(load(&d).is_ok());
    }

    #[test]
    fn names_and_step_values_are_bounded() {
        let long = "n".repeat(300);
        for (name, why) in [
            ("", "is empty"),
            (".", "must not be . or .."),
            ("..", "must not be . or .."),
            ("a/b", "must not contain /"),
            ("a\u{0}b", "must not contain a NUL byte"),
            (
                "demo\n",
                "must not contain control characters (newline, tab, ...)",
            ),
            (long.as_str(), "is longer than 255 bytes"),
        ] {
            let mut d = fixture();
            d["package_name"] = json!(name);
            let e = err(&d);
            assert!(e.starts_with("/pkg/config.json: package_name "), "{e}");
            assert!(e.contains(why), "{name:?}: {e}");
            assert!(e.len() < 300, "one readable line: {e}");
        }
        let mut big = fixture();
        big["modes"]["apply"][0]["arguments"] = json!(["x".repeat(200 * 1024)]);
        assert_eq!(
            err(&big),
            "/pkg/config.json: step \"foo.sh\" of mode apply: argument 0: 204800 bytes, more than 131072"
        );
        let mut many = fixture();
        many["modes"]["apply"][0]["arguments"] = json!(vec!["a"; 100_000]);
        assert_eq!(
            err(&many),
            "/pkg/config.json: step \"foo.sh\" of mode apply: arguments: 100000 arguments, more than 4096"
        );
        let mut nul = fixture();
        nul["modes"]["apply"][0]["env"] = json!({"A\u{0}B": "1"});
        assert!(err(&nul).contains("must be non-empty without '=' or NUL"));
        let mut nulv = fixture();
        nulv["modes"]["apply"][0]["env"] = json!({"A": "x\u{0}"});
        assert!(err(&nulv).ends_with("value contains a NUL byte"));
        let mut total = fixture();
        total["modes"]["apply"][0]["arguments"] = json!(vec!["y".repeat(100 * 1024); 11]);
        assert!(err(&total).contains("bytes in all, more than 1048576"));
    }

    #[test]
    fn env_keeps_file_order() {
        let mut d = fixture();
        d["modes"]["apply"][0]["env"] = json!({"Z": "1", "A": "2"});
        let l = load(&d).unwrap();
        assert_eq!(
            l.package.steps(Mode::Apply)[0].env,
            vec![("Z".into(), "1".into()), ("A".into(), "2".into())]
        );
    }

    #[test]
    fn case_13a_bad_version() {
        let mut d = fixture();
        d["package_version"] = json!("1.0");
        let e = err(&d);
        assert!(
            e.starts_with("/pkg/config.json: does not match the skyhook-agent v1 schema: at /package_version: \"1.0\" is not a semantic version: expected MAJOR.MINOR.PATCH"),
            "{e}"
        );
    }

    #[test]
    fn case_13b_empty_returncodes() {
        let mut d = fixture();
        d["modes"]["apply"][0]["returncodes"] = json!([]);
        let e = err(&d);
        assert!(
            e.contains("at /modes/apply/0/returncodes: [] has less than 1 item"),
            "{e}"
        );
    }

    #[test]
    fn case_13c_no_checks() {
        let mut d = fixture();
        d["modes"].as_object_mut().unwrap().remove("apply-check");
        assert_eq!(
            err(&d),
            "/pkg/config.json: Couldn't validate steps. There are no checks for any of the apply steps."
        );
        // an empty check list is the same as a missing one
        d["modes"]["apply-check"] = json!([]);
        assert!(matches!(
            load(&d),
            Err(PackageError::MissingChecks {
                mode: Mode::Apply,
                ..
            })
        ));
    }

    #[test]
    fn case_13d_upgrade_step_in_apply() {
        let mut d = fixture();
        d["modes"]["apply"][0]["upgrade_step"] = json!(true);
        d["modes"]["apply"][0]["arguments"] = json!([]);
        assert_eq!(
            err(&d),
            "/pkg/config.json: UpgradeStep foo.sh defined in the apply mode but can only be \
             defined in the UPGRADE or UPGRADE_CHECK modes."
        );
    }

    #[test]
    fn case_13d_upgrade_step_with_fixture_arguments() {
        // Fixture P's foo has arguments: the construction error comes first (as in Python).
        let mut d = fixture();
        d["modes"]["apply"][0]["upgrade_step"] = json!(true);
        assert_eq!(
            err(&d),
            "/pkg/config.json: UpgradeStep foo can not have any arguments, but found: ['a', 'b']"
        );
    }

    #[test]
    fn case_13e_upgrade_step_arguments() {
        let mut d = fixture();
        let mut u = step("u", "u.sh");
        u["upgrade_step"] = json!(true);
        u["arguments"] = json!(["x"]);
        d["modes"]["upgrade"] = json!([u]);
        d["modes"]["upgrade-check"] = json!([step("u_check", "u_check.sh")]);
        assert_eq!(
            err(&d),
            "/pkg/config.json: UpgradeStep u can not have any arguments, but found: ['x']"
        );
    }

    #[test]
    fn case_13f_only_checks() {
        let mut d = fixture();
        d["modes"].as_object_mut().unwrap().remove("apply");
        assert_eq!(
            err(&d),
            "/pkg/config.json: There are only check modes defined. You must define at least one \
             of UNINSTALL, UPGRADE, APPLY, CONFIG, POST_INTERRUPT"
        );
    }

    #[test]
    fn case_13g_empty_apply_key_counts() {
        let mut d = fixture();
        d["modes"]["apply"] = json!([]);
        let l = load(&d).unwrap();
        assert!(l.package.has_mode_key(Mode::Apply));
        assert!(l.package.steps(Mode::Apply).is_empty());
        assert_eq!(l.package.steps(Mode::ApplyCheck).len(), 1);
    }

    #[test]
    fn no_steps_at_all() {
        let mut d = fixture();
        d["modes"] = json!({"apply": [], "apply-check": []});
        assert_eq!(err(&d), "/pkg/config.json: There are no defined steps.");
    }

    #[test]
    fn unknown_schema_version_checked_first() {
        let mut d = fixture();
        d["schema_version"] = json!("v2");
        d["package_version"] = json!("bad");
        assert_eq!(
            err(&d),
            "/pkg/config.json: Unknown skyhook-agent schema version: v2"
        );
    }

    #[test]
    fn invalid_json() {
        let e = parse(Path::new(FILE), b"{").unwrap_err();
        assert!(matches!(e, PackageError::Json { .. }));
        assert_eq!(e.to_string(), "/pkg/config.json: invalid JSON");
    }

    #[test]
    fn unknown_mode_key() {
        let mut d = fixture();
        d["modes"]["deploy"] = json!([]);
        let e = err(&d);
        assert_eq!(
            e,
            "/pkg/config.json: 'deploy' is not a valid Mode (valid modes: uninstall, \
             uninstall-check, upgrade, upgrade-check, apply, apply-check, config, config-check, \
             interrupt, post-interrupt, post-interrupt-check)"
        );
    }

    #[test]
    fn unknown_step_key_warns() {
        let mut d = fixture();
        d["modes"]["apply"][0]["timeout"] = json!(5);
        d["modes"]["apply"][0]["requires_interrupt"] = json!(true);
        let l = load(&d).unwrap();
        assert_eq!(
            l.warnings,
            vec!["step 'foo' of mode apply has unknown key 'timeout'; ignored"]
        );
    }

    #[test]
    fn missing_check_warning_basename_rule() {
        let mut d = fixture();
        d["modes"]["apply"] = json!([
            step("a", "dir.d/foo"),
            step("b", "sub/x.sh"),
            step("c", "foo.sh")
        ]);
        d["modes"]["apply-check"] = json!([step("ac", "sub/x_check.sh")]);
        // foo_check.sh only in another check mode does not count (paired mode)
        d["modes"]["config"] = json!([step("cc", "c.sh")]);
        d["modes"]["config-check"] = json!([step("cck", "foo_check.sh"), step("cx", "c_check.sh")]);
        let l = load(&d).unwrap();
        assert_eq!(
            l.warnings,
            vec![
                " dir.d/foo_check doesn't exist. Checks ensure that all tasks in the step will complete.",
                " foo_check.sh doesn't exist. Checks ensure that all tasks in the step will complete.",
            ]
        );
        assert_eq!(expected_check_path("a.b.sh"), "a.b_check.sh");
        assert_eq!(expected_check_path(".hidden"), "_check.hidden");
    }

    #[test]
    fn rhai_step_that_is_its_own_check_gets_no_warning() {
        let mut d = fixture();
        d["modes"]["apply"] = json!([step("a", "apply.rhai"), step("b", "other.rhai")]);
        d["modes"]["apply-check"] = json!([step("a", "apply.rhai")]);
        let l = load(&d).unwrap();
        assert_eq!(
            l.warnings,
            vec![
                " other_check.rhai doesn't exist. Checks ensure that all tasks in the step will complete."
            ]
        );
    }

    #[test]
    fn float_return_code_kept_as_float() {
        let text =
            fixture()
                .to_string()
                .replacen(r#""returncodes":[0]"#, r#""returncodes":[0, 1.0]"#, 1);
        assert!(text.contains("[0, 1.0]"));
        let l = parse(Path::new(FILE), text.as_bytes()).unwrap();
        let foo = &l.package.steps(Mode::Apply)[0];
        assert_eq!(
            foo.returncodes,
            vec![
                ReturnCode::int(0),
                ReturnCode {
                    value: 1,
                    float: true
                }
            ]
        );
        assert_eq!(crate::pyfmt::repr_codes(&foo.returncodes), "[0, 1.0]");
        assert!(foo.accepts(1));
    }

    #[test]
    fn huge_return_code_rejected() {
        let text = fixture().to_string().replacen(
            r#""returncodes":[0]"#,
            r#""returncodes":[18446744073709551615]"#,
            1,
        );
        let e = parse(Path::new(FILE), text.as_bytes()).unwrap_err();
        assert!(matches!(e, PackageError::ReturnCodeRange { .. }), "{e}");
    }

    #[test]
    fn step_files_missing_reported_together() {
        let mut d = fixture();
        d["modes"]["config"] = json!([step("c", "c.sh"), step("c2", "foo.sh")]);
        d["modes"]["config-check"] = json!([step("cc", "c_check.sh")]);
        let pkg = load(&d).unwrap().package;
        let present = ["foo.sh", "c_check.sh"];
        let e = check_step_files(Path::new(FILE), &pkg, |p| present.contains(&p)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/pkg/config.json: Following steps did not exist:foo_check.sh, c.sh"
        );
        check_step_files(Path::new(FILE), &pkg, |_| true).unwrap();
    }

    #[test]
    fn step_files_unsafe_paths() {
        for bad in ["/etc/x.sh", "../x.sh", "sub/../../x.sh", ""] {
            let mut d = fixture();
            d["modes"]["apply"][0]["path"] = json!(bad);
            let pkg = load(&d).unwrap().package;
            let e = check_step_files(Path::new(FILE), &pkg, |_| true).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "/pkg/config.json: step path '{bad}' in mode apply must be relative to \
                     skyhook_dir without '..' components"
                )
            );
        }
        let mut d = fixture();
        d["modes"]["apply"][0]["path"] = json!("./sub/x..y.sh");
        let pkg = load(&d).unwrap().package;
        check_step_files(Path::new(FILE), &pkg, |_| true).unwrap();
    }
}
