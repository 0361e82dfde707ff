//! `json::`: read and edit JSON files keeping their key order, indentation and final
//! newline, over `serde_json` (built with `preserve_order`, so objects keep the file's key
//! order and new keys go at the end of their object).
//!
//! A changed file is written back pretty-printed with the file's indentation unit, detected
//! from its first indented line (a tab, or that many spaces; two spaces for a new file), or
//! on one line when the file was on one line; it ends with a newline when the file did (a
//! new file does). A file already in that shape (the usual `json.dumps(indent=2)`,
//! `jq .`, `JSON.stringify(v, null, 2)` output) therefore changes only where the value
//! changed. Other whitespace (arrays kept on one line, spaces before `:`) is normalised on
//! the first change.
//!
//! Key paths ([`KeyPath`]): an array of keys (literal, dots included) and integer indices,
//! or one string as a JSON Pointer (RFC 6901: `/a/b/0`, `~1` for `/`, `~0` for `~`; `""` is
//! the whole document). Values as in [`crate::host::files::structured`]; `Null` is JSON `null`.
//! Setting an object onto an existing object *merges* it (each key set recursively, other
//! keys kept); any other value replaces.
//!
//! Mutations are one [`crate::host::effects::effect::Effect::WriteFile`] through
//! `structured::rewrite` (the path lock of `fs::` edits) (apply under the path's lock; plan: a diff, later
//! reads see it; check: drift). A missing file reads as absent: `set` creates it (an object
//! at the top, and missing parent directories as `fs::write` does).

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::host::Host;
use crate::host::files::fs::host_path;
use crate::host::files::structured::StructuredError;
use crate::host::files::structured::{KeyPath, Seg, bad_key, json_kind, show};
use crate::host::root::error::Result;

/// `json::get(path, key_path)`: the value at `key_path`, `Null` when the file, a key or an
/// index is missing (a JSON `null` reads as `Null` too).
///
/// # Errors
/// Relative path; [`StructuredError::Parse`] (`file:line:col`); an invalid JSON Pointer; as
/// [`crate::host::files::fs::read`].
pub fn get(h: &Host, p: &str, key: &KeyPath) -> Result<Value, StructuredError> {
    let path = host_path(p)?;
    let segs = segments(&path, key)?;
    let Some(text) = crate::host::files::structured::read_text(h, &path)? else {
        return Ok(Value::Null);
    };
    let doc = parse_doc(&path, &text)?;
    Ok(at(&doc, &segs).cloned().unwrap_or(Value::Null))
}

host_fn! {
    /// The value at `key_path` (an array of keys and indices, or a JSON Pointer `"/a/0"`), or `()`
    /// when the file or key is missing (JSON `null` reads as `()` too).
    #[host(ns = "json", effects = ReadsHost)]
    fn get(h: &mut Host, path: S, key_path: D as "?") -> rhai::Dynamic {
        Ok(convert::json(super::get(h, &path, &crate::host::files::structured::key_path(&key_path)?)?))
    }
}

/// `json::set(path, key_path, value)`: set the value at `key_path`, creating missing
/// objects on the way; an object merges into an existing object. An empty key path sets
/// (or merges into) the whole document. Unchanged when equal.
///
/// # Errors
/// Relative path; [`StructuredError::Parse`]; a step through something that is not an object (for
/// a key) or an array (for an index); an index past the end; as [`crate::host::files::fs::write`].
pub fn set(h: &mut Host, p: &str, key: &KeyPath, value: &Value) -> Result<bool, StructuredError> {
    let path = host_path(p)?;
    let segs = segments(&path, key)?;
    crate::host::files::structured::rewrite(h, &path, |cur| {
        let (mut doc, style) = match cur {
            Some(text) => (parse_doc(&path, text)?, Style::of(text)),
            None => (Value::Object(Default::default()), Style::default()),
        };
        let before = cur.is_some().then(|| doc.clone());
        set_in(&path, &mut doc, &segs, 0, value)?;
        // An equal value leaves the file as it is, whatever its layout.
        if before.as_ref() == Some(&doc) {
            return Ok(None);
        }
        Ok(Some(style.render(&doc)))
    })
}

host_fn! {
    /// Set the value (`()` is `null`), creating missing objects; a map merges into an existing
    /// object. The file keeps its key order (new keys last), indentation unit (tab or N spaces,
    /// detected) and final newline. Creates a missing file.
    #[host(ns = "json", effects = [Write])]
    fn set(h: &mut Host, path: S, key_path: D as "?", value: D as "?") -> bool {
        let value = convert::to_json(&value, "value")?;
        Ok(super::set(h, &path, &crate::host::files::structured::key_path(&key_path)?, &value)?)
    }
}

/// `json::remove(path, key_path)`: remove an object's key or an array's element (later
/// elements move up). Unchanged when the file or the key is absent.
///
/// # Errors
/// Relative path; [`StructuredError::Parse`]; an empty key path; as [`crate::host::files::fs::write`].
pub fn remove(h: &mut Host, p: &str, key: &KeyPath) -> Result<bool, StructuredError> {
    let path = host_path(p)?;
    let segs = segments(&path, key)?;
    let Some((last, parents)) = segs.split_last() else {
        return Err(bad_key(&path, "must not be empty"));
    };
    crate::host::files::structured::rewrite(h, &path, |cur| {
        let Some(text) = cur else { return Ok(None) };
        let mut doc = parse_doc(&path, text)?;
        let mut node = &mut doc;
        for seg in parents {
            let next = match node {
                Value::Object(o) => match seg {
                    Seg::Key(k) => o.get_mut(k),
                    Seg::Index(_) => None,
                },
                Value::Array(a) => as_index(seg).and_then(|i| a.get_mut(i)),
                _ => None,
            };
            match next {
                Some(n) => node = n,
                None => return Ok(None),
            }
        }
        let removed = match (last, node) {
            (Seg::Key(k), Value::Object(o)) => o.shift_remove(k).is_some(),
            (seg, Value::Array(a)) => match as_index(seg).filter(|i| *i < a.len()) {
                Some(i) => {
                    a.remove(i);
                    true
                }
                None => false,
            },
            _ => false,
        };
        Ok(removed.then(|| Style::of(text).render(&doc)))
    })
}

host_fn! {
    /// Remove an object key or an array element; absent is unchanged.
    #[host(ns = "json", effects = [Write])]
    fn remove(h: &mut Host, path: S, key_path: D as "?") -> bool {
        Ok(super::remove(h, &path, &crate::host::files::structured::key_path(&key_path)?)?)
    }
}

fn parse_doc(path: &Path, text: &str) -> Result<Value, StructuredError> {
    serde_json::from_str(text).map_err(|e| StructuredError::Parse {
        path: path.to_path_buf(),
        format: "JSON",
        line: e.line(),
        column: e.column(),
        message: strip_position(&e.to_string()),
    })
}

/// serde_json's message without its ` at line L column C` suffix (the error shows both).
fn strip_position(m: &str) -> String {
    match m.rfind(" at line ") {
        Some(i) => m[..i].to_string(),
        None => m.to_string(),
    }
}

/// The key path as segments; a string is a JSON Pointer.
fn segments(path: &Path, key: &KeyPath) -> Result<Vec<Seg>> {
    match key {
        KeyPath::Segments(s) => Ok(s.clone()),
        KeyPath::Text(t) if t.is_empty() => Ok(Vec::new()),
        KeyPath::Text(t) if !t.starts_with('/') => Err(bad_key(
            path,
            format!(
                "{t:?} is not a JSON Pointer (it must start with /, e.g. \"/a/b/0\"); or give an array of keys"
            ),
        )),
        KeyPath::Text(t) => Ok(t[1..]
            .split('/')
            .map(|raw| Seg::Key(raw.replace("~1", "/").replace("~0", "~")))
            .collect()),
    }
}

/// The value at `segs` in `v` (a numeric key indexes an array, as in a JSON Pointer).
fn at<'a>(v: &'a Value, segs: &[Seg]) -> Option<&'a Value> {
    segs.iter().try_fold(v, |cur, seg| match cur {
        Value::Object(o) => match seg {
            Seg::Key(k) => o.get(k),
            Seg::Index(_) => None,
        },
        Value::Array(a) => as_index(seg).and_then(|i| a.get(i)),
        _ => None,
    })
}

/// A key that indexes an array: digits without a leading zero (RFC 6901), or `Index`.
fn as_index(seg: &Seg) -> Option<usize> {
    match seg {
        Seg::Index(i) => Some(*i),
        Seg::Key(k) if k == "0" || (!k.starts_with('0') && !k.is_empty()) => k.parse().ok(),
        Seg::Key(_) => None,
    }
}

fn set_in(path: &Path, node: &mut Value, segs: &[Seg], depth: usize, value: &Value) -> Result<()> {
    let Some((seg, rest)) = segs[depth..].split_first().map(|(s, _)| (s, depth + 1)) else {
        merge(node, value);
        return Ok(());
    };
    let here = || show(&segs[..depth]);
    let shown_here = || {
        if depth == 0 {
            "the document".to_string()
        } else {
            here()
        }
    };
    match node {
        Value::Array(a) => {
            let Some(i) = as_index(seg) else {
                return Err(bad_key(
                    path,
                    format!(
                        "{} is an array: key {} is not an index",
                        shown_here(),
                        match seg {
                            Seg::Key(k) => format!("{k:?}"),
                            Seg::Index(i) => i.to_string(),
                        }
                    ),
                ));
            };
            let len = a.len();
            let Some(child) = a.get_mut(i) else {
                return Err(bad_key(
                    path,
                    format!(
                        "{}: index {i} is out of range (the array has {len} element{})",
                        shown_here(),
                        if len == 1 { "" } else { "s" }
                    ),
                ));
            };
            set_in(path, child, segs, rest, value)
        }
        Value::Object(o) => {
            let k = match seg {
                Seg::Key(k) => k.clone(),
                Seg::Index(i) => {
                    return Err(bad_key(
                        path,
                        format!("{} is an object: index {i} needs an array", shown_here()),
                    ));
                }
            };
            let child = o.entry(k).or_insert_with(|| {
                if rest < segs.len() {
                    Value::Object(Default::default())
                } else {
                    Value::Null
                }
            });
            if rest == segs.len() && !(child.is_object() && value.is_object()) {
                *child = value.clone();
                return Ok(());
            }
            set_in(path, child, segs, rest, value)
        }
        other => Err(bad_key(
            path,
            format!(
                "{} is {}, not an object or array",
                shown_here(),
                json_kind(other)
            ),
        )),
    }
}

/// Merge `value` into `node`: objects key by key (recursively), anything else replaces.
fn merge(node: &mut Value, value: &Value) {
    match (node, value) {
        (Value::Object(o), Value::Object(v)) => {
            for (k, x) in v {
                match o.get_mut(k) {
                    Some(cur) => merge(cur, x),
                    None => {
                        o.insert(k.clone(), x.clone());
                    }
                }
            }
        }
        (node, value) => *node = value.clone(),
    }
}

/// How a file is laid out: its indentation unit (`None`: all on one line) and whether it
/// ends with a newline.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Style {
    indent: Option<String>,
    final_newline: bool,
}

impl Default for Style {
    fn default() -> Self {
        Style {
            indent: Some("  ".into()),
            final_newline: true,
        }
    }
}

impl Style {
    fn of(text: &str) -> Style {
        let body = text.trim_end();
        let indent = if !body.contains('\n') {
            None
        } else {
            let unit = body
                .lines()
                .skip(1)
                .map(|l| {
                    let n = l.len() - l.trim_start_matches([' ', '\t']).len();
                    &l[..n]
                })
                .find(|ws| !ws.is_empty())
                .map(|ws| {
                    if ws.starts_with('\t') {
                        "\t".to_string()
                    } else {
                        ws.chars().take_while(|c| *c == ' ').collect()
                    }
                });
            Some(unit.unwrap_or_else(|| "  ".into()))
        };
        Style {
            indent,
            final_newline: text.ends_with('\n'),
        }
    }

    fn render(&self, v: &Value) -> String {
        let mut out = match &self.indent {
            None => serde_json::to_string(v).unwrap_or_default(),
            Some(unit) => {
                let mut buf = Vec::new();
                let fmt = serde_json::ser::PrettyFormatter::with_indent(unit.as_bytes());
                let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
                // Serialising a Value into memory cannot fail.
                let _ = v.serialize(&mut ser);
                String::from_utf8(buf).unwrap_or_default()
            }
        };
        if self.final_newline {
            out.push('\n');
        }
        out
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert;
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Dynamic as D, ImmutableString as S};
}
use prelude::*;

host_fns!(get, set, remove);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_style() {
        assert_eq!(
            Style::of("{\n    \"a\": 1\n}\n"),
            Style {
                indent: Some("    ".into()),
                final_newline: true
            }
        );
        assert_eq!(
            Style::of("{\n\t\"a\": [\n\t\t1\n\t]\n}"),
            Style {
                indent: Some("\t".into()),
                final_newline: false
            }
        );
        assert_eq!(
            Style::of("{\"a\": 1}\n"),
            Style {
                indent: None,
                final_newline: true
            }
        );
    }
}
