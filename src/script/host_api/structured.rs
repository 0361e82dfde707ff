//! `toml::`, `json::`, `ini::` (structured config files) over [`crate::host::files::toml`],
//! [`crate::host::files::json`] and [`crate::host::files::ini`], and `regex::` over [`crate::host::files::text`]:
//! each function's reference row and binding, and their tests through Rhai.

use crate::host::api::host_fn;
use rhai::{Array, Dynamic, ImmutableString as S, Map};

use crate::host::api::convert;
use crate::host::api::docs::EffectKind::*;
use crate::host::api::docs::Effects::*;
use crate::host::api::docs::FnDoc;
use crate::host::api::docs::{KEY_PATH, P};
use crate::host::files::structured::{KeyPath, Seg};
use crate::host::files::{ini, json, text, toml};

type D = Dynamic;

/// A key path: a string (TOML dotted key / JSON Pointer) or an array of strings (keys) and
/// non-negative integers (array indices).
fn key_path(d: &Dynamic) -> Result<KeyPath, String> {
    if d.is_string() {
        return Ok(KeyPath::Text(d.to_string()));
    }
    let Some(a) = d.read_lock::<Array>() else {
        return Err(format!(
            "key_path must be a string or an array of keys, got {}",
            d.type_name()
        ));
    };
    a.iter()
        .enumerate()
        .map(|(i, s)| {
            if s.is_string() {
                Ok(Seg::Key(s.to_string()))
            } else if let Ok(n) = s.as_int() {
                usize::try_from(n)
                    .map(Seg::Index)
                    .map_err(|_| format!("key_path[{i}] is a negative index ({n})"))
            } else {
                Err(format!(
                    "key_path[{i}] must be a string (key) or an integer (index), got {}",
                    s.type_name()
                ))
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .map(KeyPath::Segments)
}

/// An INI value: a string, or a number or bool written in decimal / `true`/`false`.
fn ini_value(d: &Dynamic) -> Result<String, String> {
    convert::scalar(d, "value")
}

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(super) const NAMESPACES: &[(&str, &str, &str)] = &[
    (
        "toml",
        "TOML files — `toml::`",
        "Edits keep comments and layout (over the `toml_edit` crate): a one-key change is a one-line diff, a new key is indented like its table's keys, a new table is placed after its last sibling table and formatted like it. `key_path` is an array of keys taken literally (`[\"plugins\", \"io.containerd.grpc.v1.cri\", \"containerd\"]`; integers index arrays, in `get` only) or one TOML dotted-key string (`plugins.\"io.containerd.grpc.v1.cri\".containerd`: keys with dots are quoted, so it is unambiguous). Every write is one atomic file write under the path's lock, a diff in a plan, drift in a check.",
    ),
    (
        "json",
        "JSON files — `json::`",
        "Key order, the indentation unit and the final newline are kept; the rest of the layout is normalised to that pretty-printed form on the first change (a one-line file stays on one line). `key_path` is an array of keys and integer indices, or a JSON Pointer (RFC 6901) string.",
    ),
    (
        "ini",
        "INI files — `ini::`",
        "systemd units and other INI-style files, edited line by line: every line but the changed ones stays byte for byte. Keys and sections are case-sensitive; sections of the same name count as one; lines without `=` are kept and are not keys.",
    ),
    (
        "regex",
        "Regular expressions — `regex::`",
        "Pure helpers, the same in every mode, with the Rust `regex` crate's syntax (no look-around or backreferences; matching is linear time). Rhai's own `parse_json(text)` reads JSON text into a map; `to_json(value)` (above, with the commands) writes one back, pretty-printed.",
    ),
];

/// The functions of this file's namespaces, in reference order: each one's reference row
/// and its registration.
pub(super) const FUNCTIONS: &[FnDoc] = &[
    host_fn!(
        "toml",
        "get",
        &[P, KEY_PATH],
        "?",
        ReadsHost,
        "The value at `key_path` (a table as a map, an array of tables as an array of maps, dates as strings), or `()` when the file or key is missing; `[]` is the whole document. A parse error names `file:line:col`.",
        |h, p: S, k: D| Ok(convert::json(toml::get(h, &p, &key_path(&k)?)?))
    ),
    host_fn!(
        "toml",
        "set",
        &[P, KEY_PATH, ("value", "?")],
        "bool",
        Submits(&[Write]),
        "Set the value (string, int, float, bool, array, map); missing tables are created (implicit: only the deepest gets a `[header]`); a map becomes a table, merged into an existing one (keys it does not name are kept); an equal value is unchanged. Only the changed or added lines differ; comments, order and layout stay. Creates a missing file.",
        |h, p: S, k: D, v: D| {
            let v = convert::to_json(&v, "value")?;
            Ok(toml::set(h, &p, &key_path(&k)?, &v)?)
        }
    ),
    host_fn!(
        "toml",
        "remove",
        &[P, KEY_PATH],
        "bool",
        Submits(&[Write]),
        "Remove a key or a whole table (with its sub-tables); absent is unchanged.",
        |h, p: S, k: D| Ok(toml::remove(h, &p, &key_path(&k)?)?)
    ),
    host_fn!(
        "toml",
        "ensure_table",
        &[P, KEY_PATH],
        "bool",
        Submits(&[Write]),
        "Make `key_path` a table, adding `[a.b]` when missing; an error when something else is there.",
        |h, p: S, k: D| Ok(toml::ensure_table(h, &p, &key_path(&k)?)?)
    ),
    host_fn!(
        "toml",
        "parse",
        &[("text", "String")],
        "Map",
        Computes,
        "A TOML text (e.g. the stdout of `containerd config dump`) as a map; a parse error names `<text>:line:col`.",
        |_h, t: S| Ok(convert::json(toml::parse(
            &t,
            std::path::Path::new("<text>")
        )?))
    ),
    host_fn!(
        "json",
        "get",
        &[P, KEY_PATH],
        "?",
        ReadsHost,
        "The value at `key_path` (an array of keys and indices, or a JSON Pointer `\"/a/0\"`), or `()` when the file or key is missing (JSON `null` reads as `()` too).",
        |h, p: S, k: D| Ok(convert::json(json::get(h, &p, &key_path(&k)?)?))
    ),
    host_fn!(
        "json",
        "set",
        &[P, KEY_PATH, ("value", "?")],
        "bool",
        Submits(&[Write]),
        "Set the value (`()` is `null`), creating missing objects; a map merges into an existing object. The file keeps its key order (new keys last), indentation unit (tab or N spaces, detected) and final newline. Creates a missing file.",
        |h, p: S, k: D, v: D| {
            let v = convert::to_json(&v, "value")?;
            Ok(json::set(h, &p, &key_path(&k)?, &v)?)
        }
    ),
    host_fn!(
        "json",
        "remove",
        &[P, KEY_PATH],
        "bool",
        Submits(&[Write]),
        "Remove an object key or an array element; absent is unchanged.",
        |h, p: S, k: D| Ok(json::remove(h, &p, &key_path(&k)?)?)
    ),
    host_fn!(
        "ini",
        "get",
        &[P, ("section", "String"), ("key", "String")],
        "?",
        ReadsHost,
        "The value of `key` in `[section]` (`\"\"`: before any header), trimmed, the last one when repeated; `()` when missing. `#` and `;` start comments. A line starting with `[` without `]` is an error naming `file:line:col` (in `set` and `remove` too).",
        |h, p: S, s: S, k: S| Ok(convert::opt(ini::get(h, &p, &s, &k)?))
    ),
    host_fn!(
        "ini",
        "set",
        &[P, ("section", "String"), ("key", "String"), ("value", "?")],
        "bool",
        Submits(&[Write]),
        "Give `key` exactly `value` (string, number or bool): its first line is rewritten in place (spacing kept) and repeats removed; a new key goes after the section's last line, a new section at the end of the file. Creates a missing file. A value starting or ending with blanks is an error (`get` trims values).",
        |h, p: S, s: S, k: S, v: D| {
            let v = ini_value(&v)?;
            Ok(ini::set(h, &p, &s, &k, &v)?)
        }
    ),
    host_fn!(
        "ini",
        "remove",
        &[P, ("section", "String"), ("key", "String")],
        "bool",
        Submits(&[Write]),
        "Remove every line of `key` in `[section]` (the header stays); absent is unchanged.",
        |h, p: S, s: S, k: S| Ok(ini::remove(h, &p, &s, &k)?)
    ),
    host_fn!(
        "regex",
        "is_match",
        &[("pattern", "String"), ("text", "String")],
        "bool",
        Computes,
        "Whether `pattern` (Rust `regex` syntax) matches anywhere in `text`; an invalid pattern is an error naming it.",
        |_h, p: S, t: S| Ok(text::is_match(&p, &t)?)
    ),
    host_fn!(
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
    host_fn!(
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
    host_fn!(
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

#[cfg(test)]
#[path = "structured_tests.rs"]
pub(super) mod tests;
