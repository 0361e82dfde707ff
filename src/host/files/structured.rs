//! What the structured-config edits (`toml::`, `json::`, `ini::`) share: key paths, the
//! read-modify-write of one text file through the session, and locating a parse error.
//!
//! Values cross this layer as [`serde_json::Value`] (the script layer converts Rhai values
//! to and from it): strings, integers (`i64`), floats, bools, arrays and objects (maps,
//! key order kept: `serde_json` is built with `preserve_order`). `Null` stands for Rhai's
//! `()` (absent).

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use crate::host::Host;
use crate::host::root::error::{HostError, Result};

/// One step of a key path: a table/object key, or an array index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    /// A key of a table (TOML), an object (JSON).
    Key(String),
    /// A 0-based array index (from a Rhai integer in the key path array).
    Index(usize),
}

/// A key path as the script gave it, before each format reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPath {
    /// An array of keys and indices: `["plugins", "io.containerd.grpc.v1.cri", "containerd"]`
    /// (a key is taken literally, dots included).
    Segments(Vec<Seg>),
    /// One string: a TOML dotted key for `toml::` (`plugins."io.containerd.grpc.v1.cri"`,
    /// quoted parts may contain dots), a JSON Pointer (RFC 6901, `/a/b/0`) for `json::`.
    Text(String),
}

impl From<Vec<Seg>> for KeyPath {
    fn from(v: Vec<Seg>) -> Self {
        KeyPath::Segments(v)
    }
}

impl From<&[&str]> for KeyPath {
    fn from(v: &[&str]) -> Self {
        KeyPath::Segments(v.iter().map(|k| Seg::Key(k.to_string())).collect())
    }
}

impl<const N: usize> From<[&str; N]> for KeyPath {
    fn from(v: [&str; N]) -> Self {
        KeyPath::from(&v[..])
    }
}

/// A key path for messages: keys joined with `.` (a key that is not a bare TOML key is
/// quoted, `plugins."io.containerd.grpc.v1.cri"`), indices as `[0]`.
pub fn show(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                let bare = !k.is_empty()
                    && k.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                if bare {
                    out.push_str(k);
                } else {
                    let _ = write!(out, "{k:?}");
                }
            }
            Seg::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

/// A failure of a structured config function (`toml::`, `json::`, `ini::`) of its own;
/// everything else is the session's [`HostError`].
#[derive(Debug, thiserror::Error)]
pub enum StructuredError {
    /// What the session failed with.
    #[error(transparent)]
    Host(#[from] HostError),

    /// A structured config file or text (`toml::parse`) does not parse; `line` and `column`
    /// are 1-based (column in characters).
    #[error("{}:{line}:{column}: invalid {format}: {message}", path.display())]
    Parse {
        /// The host path (`<text>` for a string argument).
        path: std::path::PathBuf,
        /// `TOML`, `JSON` or `INI`.
        format: &'static str,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// The parser's message.
        message: String,
    },
}

impl crate::host::api::AreaError for StructuredError {
    /// A file's content is the host's state; a `<text>` argument is not.
    fn depends_on_host(&self) -> bool {
        match self {
            StructuredError::Host(e) => e.depends_on_host(),
            StructuredError::Parse { path, .. } => path.as_os_str() != "<text>",
        }
    }
}
crate::host::api::area_error!(StructuredError);

/// [`HostError::Invalid`] about the key path of a call on `file`, as the caller's error.
pub(crate) fn bad_key<E: From<HostError>>(file: &Path, message: impl std::fmt::Display) -> E {
    E::from(HostError::Invalid {
        what: "key path",
        message: format!("{}: {message}", file.display()),
    })
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, col)
}

/// The text of `path` as the session sees it (planned writes included), `None` when the
/// file does not exist.
///
/// # Errors
/// [`HostError::NotText`]; as [`crate::host::files::fs::read`].
pub(crate) fn read_text(h: &Host, path: &Path) -> Result<Option<String>> {
    match h.view_read(path)? {
        None => Ok(None),
        Some(b) => String::from_utf8(b)
            .map(Some)
            .map_err(|_| HostError::NotText {
                path: path.to_path_buf(),
            }),
    }
}

/// A read-modify-write of the text file at `path` ([`crate::host::files::fs::edit`]): `compute`
/// gets the current text (`None`: no file) and returns the new text, or `None` when nothing
/// is to change. In apply mode a change is decided again on the file read under the path's
/// lock and written under it; the write is one [`crate::host::effects::effect::Effect::WriteFile`]
/// (plan: a diff; check: drift), keeping the file's mode and owner.
///
/// # Errors
/// Those of `compute`; [`HostError::NotText`]; as [`crate::host::files::fs::write`].
pub(crate) fn rewrite(
    h: &mut Host,
    path: &Path,
    compute: impl Fn(Option<&str>) -> Result<Option<String>, StructuredError>,
) -> Result<bool, StructuredError> {
    crate::host::files::fs::edit(h, path, |h| {
        let cur = read_text(h, path)?;
        Ok(compute(cur.as_deref())?
            .filter(|new| cur.as_deref() != Some(new.as_str()))
            .map(String::into_bytes))
    })
}

/// The value at `path` inside `v`, `None` when a key or index is missing or a step meets a
/// scalar.
pub(crate) fn json_at<'a>(v: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, seg| match (seg, cur) {
        (Seg::Key(k), Value::Object(o)) => o.get(k),
        (Seg::Index(i), Value::Array(a)) => a.get(*i),
        _ => None,
    })
}

/// A JSON type name for messages.
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "a table",
    }
}

use rhai::{Array, Dynamic};

/// A key path: a string (TOML dotted key / JSON Pointer) or an array of strings (keys) and
/// non-negative integers (array indices).
pub(crate) fn key_path(d: &Dynamic) -> Result<KeyPath, String> {
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

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[
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
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_key_paths() {
        let p = vec![
            Seg::Key("plugins".into()),
            Seg::Key("io.containerd.grpc.v1.cri".into()),
            Seg::Key("runtimes".into()),
            Seg::Index(2),
        ];
        assert_eq!(
            show(&p),
            r#"plugins."io.containerd.grpc.v1.cri".runtimes[2]"#
        );
    }

    #[test]
    fn lines_and_columns() {
        assert_eq!(line_col("ab\ncdé\nx", 0), (1, 1));
        assert_eq!(line_col("ab\ncdé\nx", 4), (2, 2));
        assert_eq!(line_col("ab\ncdé\nx", 8), (3, 1));
        assert_eq!(line_col("ab", 99), (1, 3));
    }
}
