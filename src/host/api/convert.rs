//! Conversions between Rhai values and the host layer's types. Every failure is a message
//! naming the argument (the caller adds the function name and position).

use std::collections::BTreeMap;

use rhai::{Array, Dynamic, ImmutableString, Map};

/// `d` as a string; strings only.
pub fn string(d: &Dynamic, what: &str) -> Result<String, String> {
    match d.clone().into_immutable_string() {
        Ok(s) => Ok(s.to_string()),
        Err(t) => Err(format!("{what} must be a string, got {t}")),
    }
}

/// A scalar rendered as text: a string as it is, an integer, float or bool in decimal.
pub fn scalar(d: &Dynamic, what: &str) -> Result<String, String> {
    if d.is_string() {
        return string(d, what);
    }
    if d.is_int() || d.is_float() || d.is_bool() {
        return Ok(d.to_string());
    }
    Err(format!(
        "{what} must be a string or a number, got {}",
        d.type_name()
    ))
}

/// `()` → `None`, else [`scalar`].
pub fn opt_scalar(d: &Dynamic, what: &str) -> Result<Option<String>, String> {
    if d.is_unit() {
        Ok(None)
    } else {
        scalar(d, what).map(Some)
    }
}

/// A permission mode: an integer (`0o644`) or a string of octal digits (`"0644"`, `"644"`,
/// `"0o644"`), at most `0o7777`.
pub fn mode(d: &Dynamic) -> Result<u32, String> {
    let bad = || {
        format!(
            "mode must be an integer such as 0o644 or an octal string such as \"0644\", got {}",
            if d.is_string() {
                format!("{:?}", d.to_string())
            } else {
                d.to_string()
            }
        )
    };
    let n = if let Ok(i) = d.as_int() {
        u32::try_from(i).map_err(|_| bad())?
    } else if d.is_string() {
        let s = d.to_string();
        let digits = s.trim().trim_start_matches("0o");
        if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return Err(bad());
        }
        u32::from_str_radix(digits, 8).map_err(|_| bad())?
    } else {
        return Err(bad());
    };
    if n > 0o7777 {
        return Err(bad());
    }
    Ok(n)
}

/// An array of strings (`what` names the argument in messages).
pub fn strings(a: &Array, what: &str) -> Result<Vec<String>, String> {
    a.iter()
        .enumerate()
        .map(|(i, d)| string(d, &format!("{what}[{i}]")))
        .collect()
}

/// A string (one item) or an array of strings.
pub fn string_or_array(d: &Dynamic, what: &str) -> Result<Vec<String>, String> {
    if d.is_string() {
        return Ok(vec![string(d, what)?]);
    }
    match d.read_lock::<Array>() {
        Some(a) => strings(&a, what),
        None => Err(format!(
            "{what} must be a string or an array of strings, got {}",
            d.type_name()
        )),
    }
}

/// Fail on a key of `opts` that is not in `allowed` (typos must not pass silently).
pub fn check_keys(opts: &Map, allowed: &[&str]) -> Result<(), String> {
    for k in opts.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(format!(
                "unknown option {:?} (expected one of: {})",
                k.as_str(),
                allowed.join(", ")
            ));
        }
    }
    Ok(())
}

/// A bool option (`()` or absent → `default`).
pub fn opt_bool(opts: &Map, key: &str, default: bool) -> Result<bool, String> {
    match opts.get(key) {
        None => Ok(default),
        Some(d) if d.is_unit() => Ok(default),
        Some(d) => d
            .as_bool()
            .map_err(|t| format!("option {key} must be a bool, got {t}")),
    }
}

/// An optional string option.
pub fn opt_string(opts: &Map, key: &str) -> Result<Option<String>, String> {
    match opts.get(key) {
        None => Ok(None),
        Some(d) if d.is_unit() => Ok(None),
        Some(d) => string(d, &format!("option {key}")).map(Some),
    }
}

/// A string for scripts.
pub fn s(v: impl Into<ImmutableString>) -> Dynamic {
    Dynamic::from(v.into())
}

/// `Some(s)` → string, `None` → `()`.
pub fn opt(v: Option<String>) -> Dynamic {
    v.map_or(Dynamic::UNIT, s)
}

/// An array of strings for scripts.
pub fn array(v: Vec<String>) -> Array {
    v.into_iter().map(s).collect()
}

/// A string map for scripts.
pub fn map(v: BTreeMap<String, String>) -> Map {
    v.into_iter().map(|(k, v)| (k.into(), s(v))).collect()
}

/// A JSON value for scripts (objects → maps, arrays → arrays, null → `()`; integers that
/// fit `i64` → int, other numbers → float).
pub fn json(v: serde_json::Value) -> Dynamic {
    use serde_json::Value;
    match v {
        Value::Null => Dynamic::UNIT,
        Value::Bool(b) => Dynamic::from(b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Dynamic::from(i),
            None => Dynamic::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(x) => s(x),
        Value::Array(a) => Dynamic::from_array(a.into_iter().map(json).collect()),
        Value::Object(o) => Dynamic::from_map(json_map(o)),
    }
}

/// A JSON object for scripts.
pub fn json_map(o: serde_json::Map<String, serde_json::Value>) -> Map {
    o.into_iter().map(|(k, v)| (k.into(), json(v))).collect()
}

/// A script value as JSON for the structured-config edits (`toml::set`, `json::set`):
/// `()` → null, bool, int, float (finite), string (a char as a one-character string),
/// array, map (keys in the map's order: sorted); `what` names the argument in messages.
pub fn to_json(d: &Dynamic, what: &str) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    if d.is_unit() {
        return Ok(Value::Null);
    }
    if let Ok(b) = d.as_bool() {
        return Ok(Value::Bool(b));
    }
    if let Ok(i) = d.as_int() {
        return Ok(Value::from(i));
    }
    if let Ok(f) = d.as_float() {
        return serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| format!("{what} is {f}, which cannot be stored (not finite)"));
    }
    if d.is_string() || d.is_char() {
        return Ok(Value::String(d.to_string()));
    }
    if let Some(a) = d.read_lock::<Array>() {
        return a
            .iter()
            .enumerate()
            .map(|(i, x)| to_json(x, &format!("{what}[{i}]")))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array);
    }
    if let Some(m) = d.read_lock::<Map>() {
        return m
            .iter()
            .map(|(k, x)| Ok((k.to_string(), to_json(x, &format!("{what}.{k}"))?)))
            .collect::<Result<serde_json::Map<_, _>, String>>()
            .map(Value::Object);
    }
    Err(format!(
        "{what} must be a string, number, bool, array, map or (), got {}",
        d.type_name()
    ))
}

/// The text Rhai gives a call that no registered overload of a function matches:
/// `Function not found: <name> (<type>, <type>, ...)`.
const NOT_FOUND: &str = "Function not found: ";

/// Rhai's rendering of a call's argument type in a [`NOT_FOUND`] signature, in words: `a
/// string` for `&str | ImmutableString | String`, `an int` for `i64`, ...
fn given_type(t: &str) -> String {
    match t.trim() {
        "&str | ImmutableString | String" | "string" => "a string".into(),
        "i64" | "int" => "an int".into(),
        "f64" | "float" => "a float".into(),
        "bool" => "a bool".into(),
        "map" | "Map" => "a map".into(),
        "array" | "Array" => "an array".into(),
        "()" => "() (no value)".into(),
        "Fn" | "FnPtr" => "a function pointer".into(),
        "char" => "a char".into(),
        "blob" => "a blob".into(),
        other => other.to_string(),
    }
}

/// Whether Rhai's rendering `given` of an argument fits the reference type `expected`
/// (`String`, `int`, `bool`, `Map`, `Array`; `?`: several types, always fits).
fn fits(expected: &str, given: &str) -> bool {
    let given = given_type(given);
    match expected {
        "String" => given == "a string",
        "int" => given == "an int",
        "float" => given == "a float",
        "bool" => given == "a bool",
        "Map" => given == "a map",
        "Array" => given == "an array",
        _ => true,
    }
}

/// The reference type `expected` in words; a map parameter of a function with options shows
/// its first keys: `an options map #{source, fstype, …}`.
fn expected_type(expected: &str, options: &[&str]) -> String {
    match expected {
        "String" => "a string".into(),
        "int" => "an int".into(),
        "float" => "a float".into(),
        "bool" => "a bool".into(),
        "Array" => "an array".into(),
        "Map" if options.is_empty() => "a map".into(),
        "Map" => {
            let mut keys = options
                .iter()
                .take(2)
                .copied()
                .collect::<Vec<_>>()
                .join(", ");
            if options.len() > 2 {
                keys.push_str(", …");
            }
            format!("an options map #{{{keys}}}")
        }
        other => other.to_string(),
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, ... (1-based).
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// Rewrite Rhai's message for a call of a host function that no overload matches
/// (`Function not found: mount::ensure (&str | ImmutableString | String, ...)`) into one
/// naming the parameter and the type the reference `functions` give it:
/// `mount::ensure: the 2nd argument (opts) must be an options map #{source, fstype, …}, got
/// a string`; a call with an argument count no overload has:
/// `fs::write expects 2 or 3 arguments, got 1`.
///
/// `None` when `message` is not such a message or the function is not in `functions` (a
/// script's own function, a Rhai built-in): the caller keeps Rhai's message.
pub fn explain_not_found(message: &str, functions: &[super::FnDoc]) -> Option<String> {
    let sig = message.strip_prefix(NOT_FOUND)?;
    let (name, rest) = sig.split_once(" (")?;
    let args = rest.strip_suffix(')')?;
    let given: Vec<&str> = if args.trim().is_empty() {
        Vec::new()
    } else {
        args.split(", ").collect()
    };
    let rows: Vec<&super::FnDoc> = functions
        .iter()
        .filter(|d| !d.script_layer && d.full_name() == name)
        .collect();
    if rows.is_empty() {
        return None;
    }
    let Some(row) = rows.iter().find(|d| d.params.len() == given.len()) else {
        let mut counts: Vec<usize> = rows.iter().map(|d| d.params.len()).collect();
        counts.sort_unstable();
        counts.dedup();
        let counts: Vec<String> = counts.iter().map(ToString::to_string).collect();
        let counts = match counts.as_slice() {
            [one] => one.clone(),
            [init @ .., last] => format!("{} or {last}", init.join(", ")),
            [] => return None,
        };
        return Some(format!(
            "{name} expects {counts} argument{}, got {}",
            if counts == "1" { "" } else { "s" },
            given.len()
        ));
    };
    let (i, (param, expected)) = row
        .params
        .iter()
        .enumerate()
        .find(|(i, (_, t))| !fits(t, given[*i]))?;
    Some(format!(
        "{name}: the {} argument ({param}) must be {}, got {}",
        ordinal(i + 1),
        expected_type(expected, row.options),
        given_type(given[i])
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rhai's signatures as it renders them: strings as `&str | ImmutableString | String`,
    /// other types by their short names.
    #[test]
    fn not_found_messages_name_parameter_and_type() {
        let f = crate::script::host_api::FUNCTIONS;
        let s = "&str | ImmutableString | String";
        assert_eq!(
            explain_not_found(&format!("Function not found: fs::write ({s}, i64)"), f).as_deref(),
            Some("fs::write: the 2nd argument (content) must be a string, got an int")
        );
        assert_eq!(
            explain_not_found(
                &format!("Function not found: mount::ensure ({s}, array)"),
                f
            )
            .as_deref(),
            Some(
                "mount::ensure: the 2nd argument (opts) must be an options map #{source, fstype, …}, got an array"
            )
        );
        assert_eq!(
            explain_not_found("Function not found: fs::write ()", f).as_deref(),
            Some("fs::write expects 2 or 3 arguments, got 0")
        );
        // Not a host function, or not Rhai's message: left as it is.
        assert_eq!(
            explain_not_found(&format!("Function not found: mine ({s})"), f),
            None
        );
        assert_eq!(explain_not_found("Variable not found: x", f), None);
        assert_eq!(ordinal(1), "1st");
        assert_eq!(ordinal(12), "12th");
        assert_eq!(ordinal(23), "23rd");
    }

    #[test]
    fn modes() {
        assert_eq!(mode(&Dynamic::from(0o644_i64)), Ok(0o644));
        assert_eq!(mode(&s("0644")), Ok(0o644));
        assert_eq!(mode(&s("755")), Ok(0o755));
        assert_eq!(mode(&s("0o600")), Ok(0o600));
        assert_eq!(
            mode(&s("0968")).unwrap_err(),
            "mode must be an integer such as 0o644 or an octal string such as \"0644\", got \"0968\""
        );
        assert!(mode(&Dynamic::from(0o10000_i64)).is_err());
        assert!(mode(&Dynamic::from(-1_i64)).is_err());
        assert!(mode(&Dynamic::from(true)).is_err());
    }

    #[test]
    fn lists_and_json() {
        assert_eq!(string_or_array(&s("a"), "names"), Ok(vec!["a".to_string()]));
        let a: Array = vec![s("a"), Dynamic::from(1_i64)];
        assert_eq!(
            string_or_array(&Dynamic::from_array(a), "names").unwrap_err(),
            "names[1] must be a string, got i64"
        );
        let d = json(serde_json::json!({"a": [1, 2.5, null, true, "x"]}));
        assert_eq!(d.to_string(), "#{\"a\": [1, 2.5, (), true, \"x\"]}");
    }
}
