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

host_fn! {
    /// The SHA-256 of the text's UTF-8 bytes, 64 lowercase hex digits (as `sha256sum` prints).
    #[host(ns = "", effects = Computes)]
    fn sha256(_h: &mut Host, text: S) -> rhai::Dynamic as "String" {
        Ok(convert::s(super::sha256_hex(&text)))
    }
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

host_fn! {
    /// Whether `pattern` (Rust `regex` syntax) matches anywhere in `text`; an invalid pattern is an
    /// error naming it.
    #[host(ns = "regex", effects = Computes)]
    fn is_match(_h: &mut Host, pattern: S, text: S) -> bool {
        Ok(super::is_match(&pattern, &text)?)
    }
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

host_fn! {
    /// The first match as `[whole, group1, ...]` (`()` for a group that did not match), or `()`
    /// when nothing matches.
    #[host(ns = "regex", effects = Computes)]
    fn captures(_h: &mut Host, pattern: S, text: S) -> rhai::Dynamic {
        Ok(match super::captures(&pattern, &text)? {
                None => Dynamic::UNIT,
                Some(groups) =>
                    Dynamic::from_array(groups.into_iter().map(convert::opt).collect::<Array>()),
            })
    }
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

host_fn! {
    /// The first match's named groups `(?P<name>...)` as a map (`()` for a group that did not
    /// match), or `()` when nothing matches.
    #[host(ns = "regex", effects = Computes)]
    fn named(_h: &mut Host, pattern: S, text: S) -> rhai::Dynamic {
        Ok(match super::named(&pattern, &text)? {
                None => Dynamic::UNIT,
                Some(groups) => Dynamic::from_map(
                    groups
                        .into_iter()
                        .map(|(n, v)| (n.into(), convert::opt(v)))
                        .collect::<Map>()
                ),
            })
    }
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

host_fn! {
    /// `text` with every match replaced; `$1` or `${name}` in `replacement` insert groups, `$$` a
    /// `$`.
    #[host(ns = "regex", effects = Computes)]
    fn replace(_h: &mut Host, pattern: S, text: S, replacement: S) -> rhai::Dynamic as "String" {
        Ok(convert::s(super::replace(&pattern, &text, &replacement)?))
    }
}

/// `to_json(value)`: `value` as pretty-printed JSON (two-space indent, keys in the map's
/// order, which for a Rhai map is sorted; no final newline). `()` is `null`.
pub fn to_json(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

host_fn! {
    /// `value` (a map, array, string, number, bool or `()`) as pretty-printed JSON: two-space
    /// indent, map keys in the map's order (sorted: Rhai maps are ordered by key), `()` as `null`,
    /// no final newline. The inverse of Rhai's `parse_json(text)` (JSON `null` → `()`).
    #[host(ns = "", effects = Computes)]
    fn to_json(_h: &mut Host, value: Dynamic) -> rhai::Dynamic as "String" {
        Ok(convert::s(super::to_json(&convert::to_json(&value, "value")?)))
    }

    /// The same for a map; also called as a method, `m.to_json()` (which replaces Rhai's one-line
    /// form).
    #[overload]
    fn to_json_of_map(_h: &mut Host, map: Map) -> rhai::Dynamic as "String" {
        let value = convert::to_json(&Dynamic::from_map(map), "value")?;
        Ok(convert::s(super::to_json(&value)))
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert;
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Array, Dynamic, ImmutableString as S, Map};
}
use prelude::*;

/// The reference's sections of the namespaces in this file.
pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "regex",
    "Regular expressions — `regex::`",
    "Pure helpers, the same in every mode, with the Rust `regex` crate's syntax (no look-around or backreferences; matching is linear time). Rhai's own `parse_json(text)` reads JSON text into a map; `to_json(value)` (above, with the commands) writes one back, pretty-printed.",
)];

host_fns!(sha256, to_json, is_match, captures, named, replace);

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
