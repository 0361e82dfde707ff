//! The embedded JSON Schema v1 of config.json (contract 5.1), compiled once.
//!
//! Two files under `src/package/schema/v1/` are embedded with `include_str!`:
//! `skyhook-agent.schema.json` (top level, `modes`) and `step.schema.json` (one step). The
//! step schema is inserted as `$defs/step` of the top-level schema when the validator is built,
//! so no `$ref` ever leaves the document. Draft 2020-12; `"type": "integer"` accepts integral
//! floats (`1.0`) as the Python agent's check did.

use std::sync::OnceLock;

use jsonschema::Validator;
use serde_json::Value;

/// The top-level schema of config.json v1, as embedded.
pub const PACKAGE_SCHEMA_V1: &str = include_str!("schema/v1/skyhook-agent.schema.json");
/// The step schema of config.json v1, as embedded.
pub const STEP_SCHEMA_V1: &str = include_str!("schema/v1/step.schema.json");

/// One schema violation: where in the document, and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer into config.json (`/modes/apply/0/returncodes`; empty for the document).
    pub pointer: String,
    /// The validator's description (`[] has less than 1 item`).
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "at the top level: {}", self.message)
        } else {
            write!(f, "at {}: {}", self.pointer, self.message)
        }
    }
}

fn build() -> Result<Validator, String> {
    let mut top: Value =
        serde_json::from_str(PACKAGE_SCHEMA_V1).map_err(|e| format!("package schema: {e}"))?;
    let mut step: Value =
        serde_json::from_str(STEP_SCHEMA_V1).map_err(|e| format!("step schema: {e}"))?;
    if let Some(obj) = step.as_object_mut() {
        // `$schema` belongs to a resource root only; the embedded copy is a subschema.
        obj.remove("$schema");
    }
    let defs = top
        .get_mut("$defs")
        .and_then(Value::as_object_mut)
        .ok_or("package schema has no $defs")?;
    defs.insert("step".to_string(), step);
    jsonschema::draft202012::options()
        .build(&top)
        .map_err(|e| format!("embedded schema does not compile: {e}"))
}

/// The compiled v1 validator, built on first use.
///
/// # Errors
/// Only when the embedded schema itself is broken (a build defect; the message says what).
pub fn validator_v1() -> Result<&'static Validator, String> {
    static VALIDATOR: OnceLock<Result<Validator, String>> = OnceLock::new();
    VALIDATOR.get_or_init(build).as_ref().map_err(Clone::clone)
}

/// Validate a parsed config.json against schema v1: the violations in the validator's order
/// (at most [`MAX_COUNTED`]; the first [`MAX_WORDED`] with their message, capped at
/// [`MAX_QUOTED_CHARS`]). Empty when the document is valid.
///
/// # Errors
/// When the embedded schema does not compile (see [`validator_v1`]).
pub fn validate_v1(doc: &Value) -> Result<Vec<Violation>, String> {
    let validator = validator_v1()?;
    // Only the first violations are worded (the validator's message quotes the offending
    // value, which may be megabytes); the rest are counted, up to MAX_COUNTED.
    Ok(validator
        .iter_errors(doc)
        .take(MAX_COUNTED)
        .enumerate()
        .map(|(i, e)| {
            let pointer = e.instance_path().as_str().to_string();
            let message = if i < MAX_WORDED {
                cap(readable_pattern_error(
                    &pointer,
                    e.instance(),
                    e.to_string(),
                ))
            } else {
                String::new()
            };
            Violation {
                pointer: cap(pointer),
                message,
            }
        })
        .collect())
}

/// Violations worded in full (the rest keep only their pointer).
pub const MAX_WORDED: usize = 10;
/// Violations counted at most.
pub const MAX_COUNTED: usize = 1000;

/// Longest part of a violation quoted in a message, in characters: the validator quotes the
/// offending value, which may be megabytes long.
pub const MAX_QUOTED_CHARS: usize = 200;

/// `s` cut to [`MAX_QUOTED_CHARS`] characters (`...` marks a cut).
fn cap(s: String) -> String {
    match s.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

/// The validator words a pattern mismatch by quoting the whole regex; for the two patterns of
/// schema v1 say what is expected instead.
fn readable_pattern_error(pointer: &str, instance: &Value, message: String) -> String {
    if !message.contains(" does not match ") {
        return message;
    }
    if pointer == "/package_version" {
        format!(
            "{instance} is not a semantic version: expected MAJOR.MINOR.PATCH with an optional -PRERELEASE and +BUILD, no leading zeros (e.g. 1.0.0, 1.0.0-dev, 1.0.0+build1)"
        )
    } else if pointer.starts_with("/modes/") && pointer.ends_with("/name") {
        format!("{instance} is not a valid step name: use letters, digits, `_`, `-` and `.`")
    } else {
        message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pkg(step: Value) -> Value {
        json!({"schema_version": "v1", "package_name": "demo", "package_version": "1.0.0",
               "expected_config_files": [], "modes": {"apply": [step]}})
    }

    fn step() -> Value {
        json!({"name": "foo", "path": "foo.sh", "arguments": [], "returncodes": [0],
               "on_host": true, "idempotence": false, "upgrade_step": false})
    }

    #[test]
    fn valid_document_passes() {
        assert_eq!(validate_v1(&pkg(step())).unwrap(), vec![]);
    }

    #[test]
    fn integral_float_is_an_integer() {
        let mut s = step();
        s["returncodes"] = serde_json::from_str("[1.0, 1e0]").unwrap();
        assert_eq!(validate_v1(&pkg(s.clone())).unwrap(), vec![]);
        s["returncodes"] = serde_json::from_str("[1.5]").unwrap();
        let v = validate_v1(&pkg(s)).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].pointer, "/modes/apply/0/returncodes/0");
    }

    #[test]
    fn every_violation_has_its_pointer() {
        let mut s = step();
        s["returncodes"] = json!([]);
        s["name"] = json!("bad name");
        s.as_object_mut().unwrap().remove("on_host");
        let mut doc = pkg(s);
        doc["package_version"] = json!("1.0");
        let mut pointers: Vec<_> = validate_v1(&doc)
            .unwrap()
            .into_iter()
            .map(|v| v.pointer)
            .collect();
        pointers.sort();
        assert_eq!(
            pointers,
            vec![
                "/modes/apply/0",
                "/modes/apply/0/name",
                "/modes/apply/0/returncodes",
                "/package_version"
            ]
        );
    }

    #[test]
    fn semver_pattern() {
        for good in [
            "1.0.0",
            "1.0.0-dev",
            "1.0.0+build1",
            "2024.12.19",
            "0.10.3-rc.1",
        ] {
            let mut d = pkg(step());
            d["package_version"] = json!(good);
            assert_eq!(validate_v1(&d).unwrap(), vec![], "{good}");
        }
        for bad in ["1.0", "a", "1.0.0-", "1.0.0_", "2024.01.01", "01.0.0"] {
            let mut d = pkg(step());
            d["package_version"] = json!(bad);
            let v = validate_v1(&d).unwrap();
            assert_eq!(v.len(), 1, "{bad}");
            assert_eq!(v[0].pointer, "/package_version");
        }
    }

    #[test]
    fn extra_properties_allowed_env_strings_only() {
        let mut s = step();
        s["extra"] = json!(1);
        s["env"] = json!({"A": "1"});
        let mut d = pkg(s.clone());
        d["root_dir"] = json!("/");
        d["other"] = json!({});
        assert_eq!(validate_v1(&d).unwrap(), vec![]);
        s["env"] = json!({"A": 1});
        let v = validate_v1(&pkg(s)).unwrap();
        assert_eq!(v[0].pointer, "/modes/apply/0/env/A");
    }

    #[test]
    fn missing_top_level_key_reported_at_root() {
        let v = validate_v1(&json!({"schema_version": "v1"})).unwrap();
        assert_eq!(v.len(), 4);
        assert!(v.iter().all(|v| v.pointer.is_empty()));
        assert!(v[0].to_string().starts_with("at the top level: "));
    }
}
