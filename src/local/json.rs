//! Errors as JSON (`docs/plan.schema.json`): `{file, line, column, message}`.

/// An error message as JSON, `{file, line, column, message}` (`docs/plan.schema.json`):
/// the parts of `file:line:col: message` (or `file:line: message`, the script errors'
/// form); `file`, `line` and `column` null for a message without a position (e.g. the
/// failure of deferred work), whose `message` is then the whole text.
pub fn error_json(text: &str) -> serde_json::Value {
    static POSITIONED: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = POSITIONED.get_or_init(|| {
        regex::Regex::new(r"(?s)^(.+?):(\d+)(?::(\d+))?: (.*)$").expect("valid regex")
    });
    let num = |m: Option<regex::Match<'_>>| m.and_then(|m| m.as_str().parse::<u64>().ok());
    match re.captures(text.trim_end()) {
        Some(c) => serde_json::json!({
            "file": &c[1],
            "line": num(c.get(2)),
            "column": num(c.get(3)),
            "message": &c[4],
        }),
        None => serde_json::json!({
            "file": null,
            "line": null,
            "column": null,
            "message": text.trim_end(),
        }),
    }
}

/// The error of a compile failure as JSON (as [`error_json`], from its parts).
pub fn script_error_json(e: &crate::script::ScriptError) -> serde_json::Value {
    serde_json::json!({
        "file": e.file,
        "line": e.line,
        "column": e.column,
        "message": e.message,
    })
}
