//! Small pure helpers for scripts: `sha256(text)` and `regex::` (the `regex` crate's
//! syntax: <https://docs.rs/regex/latest/regex/#syntax>). They read nothing and change
//! nothing, the same in every mode.

use crate::host::root::error::{HostError, Result};

/// `sha256(text)`: the SHA-256 digest of the UTF-8 bytes of `text` as 64 lowercase hex
/// digits (no `sha256:` prefix; compare `sha256sum`'s first field).
pub fn sha256_hex(text: &str) -> String {
    let tag = crate::host::root::digest::sha256_tag(text.as_bytes());
    tag["sha256:".len()..].to_string()
}

fn compile(pattern: &str) -> Result<regex::Regex> {
    regex::Regex::new(pattern).map_err(|source| HostError::Regex {
        pattern: pattern.into(),
        source,
    })
}

/// `regex::is_match(pattern, text)`: whether `pattern` matches anywhere in `text` (anchor
/// with `^`/`$` for a whole match).
///
/// # Errors
/// [`HostError::Regex`] naming the pattern, with the compile error.
pub fn is_match(pattern: &str, text: &str) -> Result<bool> {
    Ok(compile(pattern)?.is_match(text))
}

/// `regex::captures(pattern, text)`: the first match's groups, `[whole, group 1, ...]`
/// (`None` for a group that did not take part), or `None` when there is no match.
///
/// # Errors
/// As [`is_match`].
pub fn captures(pattern: &str, text: &str) -> Result<Option<Vec<Option<String>>>> {
    let re = compile(pattern)?;
    Ok(re.captures(text).map(|c| {
        c.iter()
            .map(|m| m.map(|m| m.as_str().to_string()))
            .collect()
    }))
}

/// A named group of a match: its name and the text it matched (`None`: it did not take
/// part).
pub type NamedGroup = (String, Option<String>);

/// `regex::named(pattern, text)`: the first match's named groups as `(name, value)` pairs
/// in pattern order (`None` for a group that did not take part), or `None` when there is
/// no match.
///
/// # Errors
/// As [`is_match`].
pub fn named(pattern: &str, text: &str) -> Result<Option<Vec<NamedGroup>>> {
    let re = compile(pattern)?;
    Ok(re.captures(text).map(|c| {
        re.capture_names()
            .flatten()
            .map(|n| (n.to_string(), c.name(n).map(|m| m.as_str().to_string())))
            .collect()
    }))
}

/// `regex::replace(pattern, text, replacement)`: `text` with every match replaced;
/// `$1`, `${name}` in `replacement` insert groups (`$$` a `$`).
///
/// # Errors
/// As [`is_match`].
pub fn replace(pattern: &str, text: &str, replacement: &str) -> Result<String> {
    Ok(compile(pattern)?
        .replace_all(text, replacement)
        .into_owned())
}

/// `to_json(value)`: `value` as pretty-printed JSON (two-space indent, keys in the map's
/// order, which for a Rhai map is sorted; no final newline). `()` is `null`.
pub fn to_json(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// The script rows of this file's functions: each one's reference entry and Rhai
/// registration (`host_fn!`, [`crate::host::api`]).
pub(crate) mod rows {
    use rhai::{Array, Dynamic, ImmutableString as S, Map};

    use crate::host::api::convert;
    use crate::host::api::docs::Effects::*;
    use crate::host::api::docs::FnDoc;
    use crate::host::api::host_row;
    use crate::host::files::text;

    /// The reference's sections of the namespaces in this file.
    pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[(
        "regex",
        "Regular expressions — `regex::`",
        "Pure helpers, the same in every mode, with the Rust `regex` crate's syntax (no look-around or backreferences; matching is linear time). Rhai's own `parse_json(text)` reads JSON text into a map; `to_json(value)` (above, with the commands) writes one back, pretty-printed.",
    )];

    /// The `host_fn!` rows of the functions in this file.
    pub(crate) const FUNCTIONS: &[FnDoc] = &[
        host_row!(
            "",
            "sha256",
            &[("text", "String")],
            "String",
            Computes,
            "The SHA-256 of the text's UTF-8 bytes, 64 lowercase hex digits (as `sha256sum` prints).",
            |_h, t: S| Ok(convert::s(text::sha256_hex(&t)))
        ),
        host_row!(
            "",
            "to_json",
            &[("value", "?")],
            "String",
            Computes,
            "`value` (a map, array, string, number, bool or `()`) as pretty-printed JSON: two-space indent, map keys in the map's order (sorted: Rhai maps are ordered by key), `()` as `null`, no final newline. The inverse of Rhai's `parse_json(text)` (JSON `null` → `()`).",
            |_h, v: Dynamic| Ok(convert::s(text::to_json(&convert::to_json(&v, "value")?)))
        ),
        host_row!(
            "",
            "to_json",
            &[("map", "Map")],
            "String",
            Computes,
            "The same for a map; also called as a method, `m.to_json()` (which replaces Rhai's one-line form).",
            |_h, v: Map| Ok(convert::s(text::to_json(&convert::to_json(
                &Dynamic::from_map(v),
                "value"
            )?)))
        ),
        host_row!(
            "regex",
            "is_match",
            &[("pattern", "String"), ("text", "String")],
            "bool",
            Computes,
            "Whether `pattern` (Rust `regex` syntax) matches anywhere in `text`; an invalid pattern is an error naming it.",
            |_h, p: S, t: S| Ok(text::is_match(&p, &t)?)
        ),
        host_row!(
            "regex",
            "captures",
            &[("pattern", "String"), ("text", "String")],
            "?",
            Computes,
            "The first match as `[whole, group1, ...]` (`()` for a group that did not match), or `()` when nothing matches.",
            |_h, p: S, t: S| Ok(match text::captures(&p, &t)? {
                None => Dynamic::UNIT,
                Some(groups) =>
                    Dynamic::from_array(groups.into_iter().map(convert::opt).collect::<Array>()),
            })
        ),
        host_row!(
            "regex",
            "named",
            &[("pattern", "String"), ("text", "String")],
            "?",
            Computes,
            "The first match's named groups `(?P<name>...)` as a map (`()` for a group that did not match), or `()` when nothing matches.",
            |_h, p: S, t: S| Ok(match text::named(&p, &t)? {
                None => Dynamic::UNIT,
                Some(groups) => Dynamic::from_map(
                    groups
                        .into_iter()
                        .map(|(n, v)| (n.into(), convert::opt(v)))
                        .collect::<Map>()
                ),
            })
        ),
        host_row!(
            "regex",
            "replace",
            &[
                ("pattern", "String"),
                ("text", "String"),
                ("replacement", "String"),
            ],
            "String",
            Computes,
            "`text` with every match replaced; `$1` or `${name}` in `replacement` insert groups, `$$` a `$`.",
            |_h, p: S, t: S, w: S| Ok(convert::s(text::replace(&p, &t, &w)?))
        ),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_match(r"^\d+$", "123").unwrap());
        assert!(!is_match(r"^\d+$", "12a").unwrap());
        assert_eq!(
            captures(r"(\w+)=(\d+)?", "a=").unwrap(),
            Some(vec![Some("a=".into()), Some("a".into()), None])
        );
        assert_eq!(captures(r"x", "abc").unwrap(), None);
        assert_eq!(
            named(r"(?P<k>\w+)=(?P<v>\w+)", "key=val").unwrap(),
            Some(vec![
                ("k".into(), Some("key".into())),
                ("v".into(), Some("val".into()))
            ])
        );
        assert_eq!(replace(r"(\d+)", "a1b22", "<$1>").unwrap(), "a<1>b<22>");
        let e = is_match("(", "x").unwrap_err();
        assert!(
            crate::chain::render(&e).starts_with("invalid regex \"(\": regex parse error:"),
            "{}",
            crate::chain::render(&e)
        );
    }
}
