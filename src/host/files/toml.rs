//! `toml::`: read and edit TOML files keeping their comments and layout, over the
//! `toml_edit` crate ([`toml_edit::DocumentMut`]).
//!
//! Only what a call changes is rewritten: setting one key changes that key's line (its
//! trailing comment kept), a new key is added at the end of its table (indented like the
//! table's other keys), a new table goes after its last sibling table (its header and keys
//! indented like that sibling's), everything else stays byte for byte.
//!
//! Key paths ([`KeyPath`]): an array of keys, each taken literally (`["plugins",
//! "io.containerd.grpc.v1.cri", "containerd"]`), or one string read as a TOML dotted key
//! (`plugins."io.containerd.grpc.v1.cri".containerd`: a key with dots must be quoted, so the
//! string form is unambiguous). Integers in an array index arrays, for [`get`] only.
//!
//! Values ([`serde_json::Value`], see [`crate::host::files::structured`]): strings, integers,
//! floats, bools, arrays; an object becomes a table: a standard table (`[a.b]`) under a
//! standard table, an inline table (`{ k = v }`) inside an inline table or an array. Setting
//! an object onto an existing table *merges* it: each of its keys is set (recursively), keys
//! it does not name are kept ([`remove`] first to replace a table whole). TOML dates and
//! times read as strings; `Null` (`()`) cannot be set.
//!
//! Every mutation is one [`crate::host::effects::effect::Effect::WriteFile`] through
//! `structured::rewrite` (the path lock of `fs::` edits): apply writes it atomically under the path's lock
//! (decided again on the file read under the lock), plan records it with a diff (and later
//! reads see it), check reports it as drift. A missing file reads as an empty document: `set`
//! and `ensure_table` create it (and its missing parent directories, as `fs::write` does).

use std::path::Path;

use serde_json::Value as J;
use toml_edit::{Decor, DocumentMut, InlineTable, Item, Table, TableLike, Value};

use crate::host::Host;
use crate::host::files::fs::host_path;
use crate::host::files::structured::StructuredError;
use crate::host::files::structured::{KeyPath, Seg, bad_key, json_at, json_kind, line_col, show};
use crate::host::root::error::{HostError, Result};

/// `toml::get(path, key_path)`: the value at `key_path` (a table as a map, an array of
/// tables as an array of maps), `Null` when the file, a key or an index is missing. An
/// empty key path is the whole document.
///
/// # Errors
/// Relative path; [`StructuredError::Parse`] (`file:line:col`); invalid key path; as
/// [`crate::host::files::fs::read`].
pub fn get(h: &Host, p: &str, key: &KeyPath) -> Result<J, StructuredError> {
    let path = host_path(p)?;
    let segs = segments(&path, key, true)?;
    let Some(text) = crate::host::files::structured::read_text(h, &path)? else {
        return Ok(J::Null);
    };
    let doc = parse_doc(&path, &text)?;
    let all = item_json(doc.as_item());
    Ok(json_at(&all, &segs).cloned().unwrap_or(J::Null))
}

host_fn! {
    /// The value at `key_path` (a table as a map, an array of tables as an array of maps, dates as
    /// strings), or `()` when the file or key is missing; `[]` is the whole document. A parse error
    /// names `file:line:col`.
    #[host(ns = "toml", effects = ReadsHost)]
    fn get(h: &mut Host, path: S, key_path: D as "?") -> rhai::Dynamic {
        Ok(convert::json(super::get(h, &path, &crate::host::files::structured::key_path(&key_path)?)?))
    }
}

/// `toml::set(path, key_path, value)`: set the value at `key_path`, creating missing tables
/// (as implicit tables: only the deepest gets a header); an object is merged into an
/// existing table (module docs). Unchanged when the value is already equal (a differently
/// written equal value, `1_000` for `1000`, is kept as written). An empty key path merges
/// an object into the document's root.
///
/// # Errors
/// Relative path; [`StructuredError::Parse`]; an invalid or empty key path with a non-object value;
/// a step of the key path that is not a table (`a.b is a string, not a table`); a `Null`
/// value; an integer outside `i64`; as [`crate::host::files::fs::write`].
pub fn set(h: &mut Host, p: &str, key: &KeyPath, value: &J) -> Result<bool, StructuredError> {
    let path = host_path(p)?;
    let segs = keys(&path, key)?;
    check_value(&path, &segs, value)?;
    if segs.is_empty() && !value.is_object() {
        return Err(bad_key(
            &path,
            "the key path is empty: only a table (a map) can be set as the whole document",
        ));
    }
    crate::host::files::structured::rewrite(h, &path, |cur| {
        let mut doc = parse_doc(&path, cur.unwrap_or(""))?;
        if segs.is_empty() {
            let J::Object(o) = value else { unreachable!() };
            let root = doc.as_item_mut();
            for (k, v) in o {
                set_in(&path, root, &[], std::slice::from_ref(k), v)?;
            }
        } else {
            set_in(&path, doc.as_item_mut(), &[], &segs, value)?;
        }
        Ok(Some(render(cur, &doc)))
    })
}

host_fn! {
    /// Set the value (string, int, float, bool, array, map); missing tables are created (implicit:
    /// only the deepest gets a `[header]`); a map becomes a table, merged into an existing one
    /// (keys it does not name are kept); an equal value is unchanged. Only the changed or added
    /// lines differ; comments, order and layout stay. Creates a missing file.
    #[host(ns = "toml", effects = [Write])]
    fn set(h: &mut Host, path: S, key_path: D as "?", value: D as "?") -> bool {
        let value = convert::to_json(&value, "value")?;
        Ok(super::set(h, &path, &crate::host::files::structured::key_path(&key_path)?, &value)?)
    }
}

/// `toml::remove(path, key_path)`: remove the key (a value or a whole table with its
/// sub-tables). Unchanged when the file or the key is absent. Tables left empty are kept
/// (`[a]` stays when its last key goes), except implicit ones, which have no header.
///
/// # Errors
/// Relative path; [`StructuredError::Parse`]; an invalid or empty key path; as
/// [`crate::host::files::fs::write`].
pub fn remove(h: &mut Host, p: &str, key: &KeyPath) -> Result<bool, StructuredError> {
    let path = host_path(p)?;
    let segs = keys(&path, key)?;
    let Some((last, parents)) = segs.split_last() else {
        return Err(bad_key(&path, "must not be empty"));
    };
    crate::host::files::structured::rewrite(h, &path, |cur| {
        let Some(cur) = cur else { return Ok(None) };
        let mut doc = parse_doc(&path, cur)?;
        let mut item = doc.as_item_mut();
        for k in parents {
            match item.as_table_like_mut().and_then(|t| t.get_mut(k)) {
                Some(next) => item = next,
                None => return Ok(None),
            }
        }
        match item.as_table_like_mut().and_then(|t| t.remove(last)) {
            Some(_) => Ok(Some(render(Some(cur), &doc))),
            None => Ok(None),
        }
    })
}

host_fn! {
    /// Remove a key or a whole table (with its sub-tables); absent is unchanged.
    #[host(ns = "toml", effects = [Write])]
    fn remove(h: &mut Host, path: S, key_path: D as "?") -> bool {
        Ok(super::remove(h, &path, &crate::host::files::structured::key_path(&key_path)?)?)
    }
}

/// `toml::ensure_table(path, key_path)`: make `key_path` a table; a missing one is created
/// with its own header (`[a.b]`, missing parents implicit). Unchanged when it is a table
/// already (standard, implicit or inline).
///
/// # Errors
/// Relative path; [`StructuredError::Parse`]; an invalid or empty key path; something other than
/// a table at `key_path` or one of its parents; as [`crate::host::files::fs::write`].
pub fn ensure_table(h: &mut Host, p: &str, key: &KeyPath) -> Result<bool, StructuredError> {
    let path = host_path(p)?;
    let segs = keys(&path, key)?;
    if segs.is_empty() {
        return Err(bad_key(&path, "must not be empty"));
    }
    crate::host::files::structured::rewrite(h, &path, |cur| {
        let mut doc = parse_doc(&path, cur.unwrap_or(""))?;
        let mut item = doc.as_item_mut();
        for (i, k) in segs.iter().enumerate() {
            let standard = item.is_table();
            if !item.is_table_like() {
                return Err(not_table(&path, &segs[..i], item).into());
            }
            let t = item.as_table_like_mut().expect("a table");
            if t.get(k).is_none_or(Item::is_none) {
                let child = if !standard {
                    Item::Value(Value::InlineTable(InlineTable::new()))
                } else {
                    let mut nt = Table::new();
                    nt.set_implicit(i + 1 < segs.len());
                    Item::Table(nt)
                };
                insert_formatted(t, standard, k, child);
            }
            item = t.get_mut(k).expect("present");
        }
        if !item.is_table_like() {
            return Err(not_table(&path, &segs, item).into());
        }
        if let Item::Table(t) = item {
            // An implicit table asked for by name gets its header.
            t.set_implicit(false);
        }
        Ok(Some(render(cur, &doc)))
    })
}

host_fn! {
    /// Make `key_path` a table, adding `[a.b]` when missing; an error when something else is there.
    #[host(ns = "toml", effects = [Write])]
    fn ensure_table(h: &mut Host, path: S, key_path: D as "?") -> bool {
        Ok(super::ensure_table(h, &path, &crate::host::files::structured::key_path(&key_path)?)?)
    }
}

/// `toml::parse(text)`: a TOML document as a value (tables as maps). `shown` names the text
/// in errors.
///
/// # Errors
/// [`StructuredError::Parse`] with `shown:line:col`.
pub fn parse(text: &str, shown: &Path) -> Result<J, StructuredError> {
    Ok(item_json(parse_doc(shown, text)?.as_item()))
}

host_fn! {
    /// A TOML text (e.g. the stdout of `containerd config dump`) as a map; a parse error names
    /// `<text>:line:col`.
    #[host(ns = "toml", effects = Computes)]
    fn parse(_h: &mut Host, text: S) -> rhai::Dynamic as "Map" {
        Ok(convert::json(super::parse(
                &text,
                std::path::Path::new("<text>")
            )?))
    }
}

/// The document's text, with `\r\n` line endings when the file had them (`toml_edit`
/// writes `\n`), so a CRLF file does not change on every line.
fn render(cur: Option<&str>, doc: &DocumentMut) -> String {
    let out = doc.to_string();
    if cur.is_some_and(|c| c.contains("\r\n")) {
        out.replace("\r\n", "\n").replace('\n', "\r\n")
    } else {
        out
    }
}

fn parse_doc(path: &Path, text: &str) -> Result<DocumentMut, StructuredError> {
    text.parse::<DocumentMut>().map_err(|e| {
        let (line, column) = line_col(text, e.span().map_or(0, |s| s.start));
        StructuredError::Parse {
            path: path.to_path_buf(),
            format: "TOML",
            line,
            column,
            message: e.message().trim().to_string(),
        }
    })
}

/// The key path as segments; a string is a dotted TOML key. `indices`: integers allowed.
fn segments(path: &Path, key: &KeyPath, indices: bool) -> Result<Vec<Seg>> {
    match key {
        KeyPath::Segments(s) => {
            if !indices && let Some(i) = s.iter().position(|s| matches!(s, Seg::Index(_))) {
                return Err(bad_key(
                    path,
                    format!(
                        "{}: array indices are only supported by toml::get",
                        show(&s[..=i])
                    ),
                ));
            }
            Ok(s.clone())
        }
        KeyPath::Text(t) if t.is_empty() => Ok(Vec::new()),
        KeyPath::Text(t) => toml_edit::Key::parse(t)
            .map(|ks| ks.iter().map(|k| Seg::Key(k.get().to_string())).collect())
            .map_err(|e| {
                bad_key(
                    path,
                    format!("{t:?} is not a TOML dotted key: {}", e.message().trim()),
                )
            }),
    }
}

/// The key path as keys only (mutations).
fn keys(path: &Path, key: &KeyPath) -> Result<Vec<String>> {
    Ok(segments(path, key, false)?
        .into_iter()
        .filter_map(|s| match s {
            Seg::Key(k) => Some(k),
            Seg::Index(_) => None,
        })
        .collect())
}

fn key_segs(keys: &[String]) -> Vec<Seg> {
    keys.iter().map(|k| Seg::Key(k.clone())).collect()
}

fn not_table(path: &Path, at: &[String], item: &Item) -> HostError {
    let kind = json_kind(&item_json(item));
    bad_key(
        path,
        format!("{} is {kind}, not a table", show(&key_segs(at))),
    )
}

/// Refuse what TOML cannot hold before touching anything: `Null` anywhere, integers
/// outside `i64`.
fn check_value(path: &Path, at: &[String], v: &J) -> Result<()> {
    let bad = |what: &str| {
        Err(HostError::Invalid {
            what: "TOML value",
            message: format!("{}: {} {what}", path.display(), show(&key_segs(at))),
        })
    };
    match v {
        J::Null => bad("is () (TOML has no null; use toml::remove)"),
        J::Number(n) if n.as_i64().is_none() && n.as_f64().is_none() => {
            bad("is a number TOML cannot hold")
        }
        J::Number(n) if n.is_u64() && n.as_i64().is_none() => bad("is larger than i64"),
        J::Array(a) => a.iter().try_for_each(|x| check_value(path, at, x)),
        J::Object(o) => o.iter().try_for_each(|(k, x)| {
            let mut at = at.to_vec();
            at.push(k.clone());
            check_value(path, &at, x)
        }),
        _ => Ok(()),
    }
}

/// Set `rest` (not empty) under `item` (at key path `at`).
fn set_in(path: &Path, item: &mut Item, at: &[String], rest: &[String], value: &J) -> Result<()> {
    let standard = item.is_table();
    if !item.is_table_like() {
        return Err(not_table(path, at, item));
    }
    let t = item.as_table_like_mut().expect("a table");
    let (k, rest) = rest.split_first().expect("not empty");
    let mut here = at.to_vec();
    here.push(k.clone());
    if !rest.is_empty() {
        if t.get(k).is_none_or(Item::is_none) {
            let child = if standard {
                let mut nt = Table::new();
                nt.set_implicit(true);
                Item::Table(nt)
            } else {
                Item::Value(Value::InlineTable(InlineTable::new()))
            };
            insert_formatted(t, standard, k, child);
        }
        return set_in(path, t.get_mut(k).expect("present"), &here, rest, value);
    }
    if let J::Object(o) = value
        && t.get(k).is_some_and(Item::is_table_like)
    {
        let existing = t.get_mut(k).expect("present");
        for (ck, cv) in o {
            set_in(path, existing, &here, std::slice::from_ref(ck), cv)?;
        }
        return Ok(());
    }
    if !value.is_object()
        && let Some(Item::Value(old)) = t.get_mut(k)
    {
        if value_json(old) != *value {
            let mut new = to_value(value);
            *new.decor_mut() = old.decor().clone();
            *old = new;
        }
        return Ok(());
    }
    insert_formatted(t, standard, k, to_item(value, standard));
    Ok(())
}

/// Insert `item` as `k` into `t`, formatted like its siblings: a value's key indented like
/// the table's last value, a table like its last sibling table (header and keys, and so on
/// down its sub-tables). Replaces an existing `k` (the replacement formatted the same way).
fn insert_formatted(t: &mut dyn TableLike, standard: bool, k: &str, mut item: Item) {
    if standard {
        if item.is_value() {
            let like = t
                .iter()
                .filter(|(n, v)| v.is_value() && *n != k)
                .last()
                .map(|(n, _)| n.to_string());
            t.insert(k, item);
            if let Some(like) = like
                && let Some(decor) = t.key(&like).map(|key| layout(key.leaf_decor(), false))
                && let Some(mut key) = t.key_mut(k)
            {
                *key.leaf_decor_mut() = decor;
            }
            return;
        }
        if let Item::Table(nt) = &mut item {
            // The last sibling table that has the new table's sub-tables, else the last one.
            let subs: Vec<String> = nt
                .iter()
                .filter(|(_, v)| v.is_table())
                .map(|(n, _)| n.to_string())
                .collect();
            let siblings: Vec<&Table> = t
                .iter()
                .filter(|(n, _)| *n != k)
                .filter_map(|(_, v)| v.as_table())
                .filter(|st| !st.is_implicit())
                .collect();
            let like = siblings
                .iter()
                .rfind(|st| subs.iter().all(|n| st.get(n).is_some_and(Item::is_table)))
                .or(siblings.last())
                .map(|st| (*st).clone());
            if let Some(like) = like {
                format_like(nt, &like);
            }
        }
    }
    t.insert(k, item);
    if !standard {
        // An inline table gained a key: lay it out as toml_edit does (`{ a = 1, b = 2 }`).
        t.fmt();
    }
}

/// The layout part of `d` (so that no comment is copied): the indentation of its prefix's
/// last line (after a newline for a table `header`) and a blank-only suffix.
fn layout(d: &Decor, header: bool) -> Decor {
    let raw = |r: Option<&toml_edit::RawString>| r.and_then(|r| r.as_str()).map(str::to_string);
    let prefix = raw(d.prefix()).map(|p| {
        let last = p.rsplit('\n').next().unwrap_or("");
        let indent = if last.trim().is_empty() { last } else { "" };
        if header {
            format!("\n{indent}")
        } else {
            indent.to_string()
        }
    });
    let suffix = raw(d.suffix()).filter(|s| s.trim().is_empty());
    let mut out = Decor::default();
    if let Some(p) = prefix {
        out.set_prefix(p);
    }
    if let Some(s) = suffix {
        out.set_suffix(s);
    }
    out
}

/// Give the new table `nt` (and its sub-tables) the header decor and key indentation of
/// the existing table `like`.
fn format_like(nt: &mut Table, like: &Table) {
    if !nt.is_implicit() {
        *nt.decor_mut() = layout(like.decor(), true);
    }
    let key_decor = like
        .iter()
        .filter(|(_, v)| v.is_value())
        .filter_map(|(n, _)| like.key(n))
        .map(|k| layout(k.leaf_decor(), false))
        .next();
    let names: Vec<String> = nt.iter().map(|(n, _)| n.to_string()).collect();
    for n in names {
        let is_value = nt.get(&n).is_some_and(Item::is_value);
        if is_value {
            if let (Some(d), Some(mut key)) = (&key_decor, nt.key_mut(&n)) {
                *key.leaf_decor_mut() = d.clone();
            }
            continue;
        }
        let sub_like = like
            .get(&n)
            .and_then(Item::as_table)
            .or_else(|| like.iter().filter_map(|(_, v)| v.as_table()).next())
            .cloned();
        match (sub_like, nt.get_mut(&n)) {
            (Some(sub_like), Some(Item::Table(st))) => format_like(st, &sub_like),
            (None, Some(Item::Table(st))) => {
                // No table to copy: one level deeper than `like`, as its keys are
                // indented relative to its header.
                let header = indent_of(like.decor()).unwrap_or_default();
                let keys = key_decor.as_ref().and_then(indent_of).unwrap_or_default();
                if let Some(step) = keys.strip_prefix(header.as_str())
                    && !step.is_empty()
                {
                    let step = step.to_string();
                    indent_table(st, &keys, &step);
                }
            }
            _ => {}
        }
    }
}

/// The blank indentation of the last line of `d`'s prefix.
fn indent_of(d: &Decor) -> Option<String> {
    let p = d.prefix()?.as_str()?;
    let last = p.rsplit('\n').next().unwrap_or("");
    last.trim().is_empty().then(|| last.to_string())
}

/// Indent table `t` (header at `indent`, its keys and sub-tables `step` deeper).
fn indent_table(t: &mut Table, indent: &str, step: &str) {
    let inner = format!("{indent}{step}");
    if !t.is_implicit() {
        t.decor_mut().set_prefix(format!("\n{indent}"));
    }
    let names: Vec<String> = t.iter().map(|(n, _)| n.to_string()).collect();
    for n in names {
        if t.get(&n).is_some_and(Item::is_value) {
            if let Some(mut key) = t.key_mut(&n) {
                key.leaf_decor_mut().set_prefix(inner.clone());
            }
        } else if let Some(Item::Table(st)) = t.get_mut(&n) {
            indent_table(st, &inner, step);
        }
    }
}

/// A new item for `v` under a standard table (`standard`) or inside an inline value.
fn to_item(v: &J, standard: bool) -> Item {
    match v {
        J::Object(o) if standard => {
            let mut t = Table::new();
            for (k, x) in o {
                t.insert(k, to_item(x, true));
            }
            Item::Table(t)
        }
        _ => Item::Value(to_value(v)),
    }
}

/// A TOML value for `v` (checked by [`check_value`] first).
fn to_value(v: &J) -> Value {
    match v {
        J::Bool(b) => Value::from(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(a) => Value::Array(a.iter().map(to_value).collect()),
        J::Object(o) => {
            let mut t = InlineTable::new();
            for (k, x) in o {
                t.insert(k, to_value(x));
            }
            Value::InlineTable(t)
        }
        // Refused by check_value.
        J::Null => Value::from(""),
    }
}

fn value_json(v: &Value) -> J {
    match v {
        Value::String(s) => J::String(s.value().clone()),
        Value::Integer(i) => J::from(*i.value()),
        Value::Float(f) => {
            let x = *f.value();
            if x.is_finite() {
                J::from(x)
            } else {
                J::String(f.to_string().trim().to_string())
            }
        }
        Value::Boolean(b) => J::Bool(*b.value()),
        Value::Datetime(d) => J::String(d.value().to_string()),
        Value::Array(a) => J::Array(a.iter().map(value_json).collect()),
        Value::InlineTable(t) => J::Object(
            t.iter()
                .map(|(k, v)| (k.to_string(), value_json(v)))
                .collect(),
        ),
    }
}

fn item_json(item: &Item) -> J {
    match item {
        Item::None => J::Null,
        Item::Value(v) => value_json(v),
        Item::Table(t) => J::Object(
            t.iter()
                .map(|(k, v)| (k.to_string(), item_json(v)))
                .collect(),
        ),
        Item::ArrayOfTables(a) => J::Array(
            a.iter()
                .map(|t| {
                    J::Object(
                        t.iter()
                            .map(|(k, v)| (k.to_string(), item_json(v)))
                            .collect(),
                    )
                })
                .collect(),
        ),
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert;
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Dynamic as D, ImmutableString as S};
}
use prelude::*;

host_fns!(get, set, remove, ensure_table, parse);
