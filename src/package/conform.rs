//! A fast conformance test of config.json against schema v1, written out by hand from the
//! two embedded schema files, so that a valid document does not pay for compiling the schema
//! (about half of a bash-only start-up's instructions).
//!
//! [`conforms_v1`] returning `true` means the compiled schema ([`super::schema::validate_v1`])
//! finds no violation; `false` means "ask the schema", which then words every violation. So a
//! refusal and its message always come from the schema itself; this check only lets a valid
//! document skip it. The schema keywords it mirrors: `type` (object, array, string, boolean,
//! integer), `required`, `properties`, `items`, `minItems`, `additionalProperties` (`env`)
//! and the two `pattern`s (`package_version`, step `name`), written as matchers below. Extra
//! properties are allowed everywhere, as in the schema. `src/package/conform_tests.rs` runs a
//! corpus of bad documents and mutated ones through both and requires the same verdict.

use serde_json::{Map, Value};

/// The top-level keys schema v1 requires.
const REQUIRED_TOP: [&str; 5] = [
    "schema_version",
    "package_name",
    "package_version",
    "expected_config_files",
    "modes",
];

/// The step keys schema v1 requires.
const REQUIRED_STEP: [&str; 7] = [
    "name",
    "path",
    "arguments",
    "returncodes",
    "on_host",
    "idempotence",
    "upgrade_step",
];

/// The keys of `modes` the schema gives a step list (others are unconstrained by it; the
/// loader refuses them after).
const MODE_KEYS: [&str; 11] = [
    "uninstall",
    "uninstall-check",
    "upgrade",
    "upgrade-check",
    "apply",
    "apply-check",
    "config",
    "config-check",
    "interrupt",
    "post-interrupt",
    "post-interrupt-check",
];

/// True when `doc` satisfies schema v1 (so [`super::schema::validate_v1`] would return no
/// violation); false otherwise, when the caller asks the compiled schema for the wording.
pub fn conforms_v1(doc: &Value) -> bool {
    let Some(top) = doc.as_object() else {
        return false;
    };
    if !has_all(top, &REQUIRED_TOP) {
        return false;
    }
    top.iter().all(|(key, v)| match key.as_str() {
        "schema_version" | "root_dir" | "package_name" => v.is_string(),
        "package_version" => v.as_str().is_some_and(is_semver),
        "expected_config_files" => is_string_array(v),
        "modes" => v.as_object().is_some_and(|modes| {
            modes.iter().all(|(mode, steps)| {
                !MODE_KEYS.contains(&mode.as_str())
                    || steps
                        .as_array()
                        .is_some_and(|steps| steps.iter().all(step_conforms))
            })
        }),
        _ => true,
    })
}

fn has_all(obj: &Map<String, Value>, keys: &[&str]) -> bool {
    keys.iter().all(|k| obj.contains_key(*k))
}

fn is_string_array(v: &Value) -> bool {
    v.as_array().is_some_and(|a| a.iter().all(Value::is_string))
}

/// JSON Schema's `integer` as the validator decides it (draft 2020-12, no arbitrary
/// precision): an `i64`/`u64`, or a float with no fractional part (`1.0`, `1e0`).
fn is_integer(v: &Value) -> bool {
    v.as_number()
        .is_some_and(|n| n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0))
}

fn step_conforms(step: &Value) -> bool {
    let Some(obj) = step.as_object() else {
        return false;
    };
    if !has_all(obj, &REQUIRED_STEP) {
        return false;
    }
    obj.iter().all(|(key, v)| match key.as_str() {
        "name" => v.as_str().is_some_and(is_step_name),
        "path" => v.is_string(),
        "arguments" => is_string_array(v),
        "returncodes" => v
            .as_array()
            .is_some_and(|codes| !codes.is_empty() && codes.iter().all(is_integer)),
        "on_host" | "idempotence" | "upgrade_step" | "requires_interrupt" => v.is_boolean(),
        "env" => v
            .as_object()
            .is_some_and(|env| env.values().all(Value::is_string)),
        _ => true,
    })
}

/// The step name pattern `^[a-zA-Z0-9_\-.]+$`.
fn is_step_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// A numeric identifier of semver: `0` or digits without a leading zero.
fn is_number_id(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

/// An identifier of `[0-9a-zA-Z-]+`.
fn is_alnum_id(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A pre-release identifier: `0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*`, i.e. a numeric
/// identifier, or an alphanumeric one with at least one non-digit.
fn is_prerelease_id(s: &str) -> bool {
    is_number_id(s) || (is_alnum_id(s) && !s.bytes().all(|b| b.is_ascii_digit()))
}

/// The `package_version` pattern of schema v1 (semantic versioning 2.0):
/// `MAJOR.MINOR.PATCH`, each `0|[1-9][0-9]*`, then an optional `-` and dot-separated
/// pre-release identifiers, then an optional `+` and dot-separated build identifiers
/// (`[0-9a-zA-Z-]+`), and nothing else (`$` matches only at the very end).
fn is_semver(s: &str) -> bool {
    // The identifiers' characters exclude `+` and `.`, so the first `+` starts the build and
    // the first `-` after the core starts the pre-release.
    let (rest, build) = match s.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (s, None),
    };
    if let Some(build) = build
        && !build.split('.').all(is_alnum_id)
    {
        return false;
    }
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    if let Some(pre) = pre
        && !pre.split('.').all(is_prerelease_id)
    {
        return false;
    }
    let mut parts = core.split('.');
    let three = (0..3).all(|_| parts.next().is_some_and(is_number_id));
    three && parts.next().is_none()
}

#[cfg(test)]
#[path = "conform_tests.rs"]
mod tests;
