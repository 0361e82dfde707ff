//! `ini::`: read and edit INI-style files (systemd units and drop-ins, `containers.conf`-like
//! files, `crudini` territory) line by line, keeping every other byte.
//!
//! The format read: `[section]` headers (name trimmed); `key=value` lines (spaces around
//! `=` allowed and kept; key and value trimmed; the first `=` splits); lines starting with
//! `#` or `;` (after blanks) are comments; keys before the first header are in section `""`.
//! Keys and section names are case-sensitive (systemd's rule). Anything else (blank lines,
//! lines without `=`) is kept and is not a key; a value is one line (systemd's trailing `\`
//! continuations are not joined). Sections of the same name count as one (systemd merges
//! them). A line starting with `[` without a `]` is an error (`file:line:col: invalid INI:
//! unclosed section header`), in every function.
//!
//! Repeated keys: [`get`] returns the *last* value (the one that wins for a systemd
//! setting); [`set`] rewrites the *first* line of the key and removes the others, so the
//! key has exactly that one value afterwards; [`remove`] removes every line of the key.
//! A changed line keeps its key and spacing (`Key = old` → `Key = new`); a new key goes
//! after the last non-blank line of its section (the last section of that name), written
//! `key=value`, or `key = value` when the file's first key line is spaced so; a new section
//! goes at the end of the file after a blank line (section `""` keys before the first
//! header). A rewritten file ends with a newline; a CRLF file keeps `\r\n` on every line
//! (new lines included).
//!
//! Mutations are one [`crate::host::effects::effect::Effect::WriteFile`] through
//! `structured::rewrite` (the path lock of `fs::` edits) (apply under the path's lock; plan: a diff, later
//! reads see it; check: drift). `set` creates a missing file (and its missing parent
//! directories, as `fs::write` does).

use std::path::Path;

use crate::host::Host;
use crate::host::files::fs::host_path;
use crate::host::files::structured::StructuredError;
use crate::host::root::error::{HostError, Result};

/// One line of the file, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Section(String),
    Entry {
        key: String,
        /// Byte offset of the value in the line (after `=` and blanks).
        value_at: usize,
    },
    Other,
}

fn classify(line: &str) -> Kind {
    // A CRLF line's `\r` is not part of its value (offsets stay valid: only a suffix goes).
    let line = line.strip_suffix('\r').unwrap_or(line);
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
        return Kind::Other;
    }
    if let Some(inner) = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return Kind::Section(inner.trim().to_string());
    }
    match line.find('=') {
        Some(eq) if !line[..eq].trim().is_empty() => {
            let after = &line[eq + 1..];
            let value_at = eq + 1 + (after.len() - after.trim_start().len());
            Kind::Entry {
                key: line[..eq].trim().to_string(),
                value_at,
            }
        }
        _ => Kind::Other,
    }
}

fn value_of(line: &str, value_at: usize) -> &str {
    line[value_at..].trim_end()
}

/// The parsed lines: each with its section.
struct Doc {
    lines: Vec<String>,
    kinds: Vec<Kind>,
    /// The section of each line (a header line belongs to its own section).
    sections: Vec<String>,
    /// `"\r"` when the file's first line ends with CRLF (new lines are written so), else `""`.
    cr: &'static str,
}

impl Doc {
    /// # Errors
    /// [`StructuredError::Parse`] for a line starting with `[` that has no `]` (an unclosed
    /// section header: its keys would silently land in the section before it).
    fn parse(path: &Path, text: &str) -> Result<Doc, StructuredError> {
        // Split on `\n` only: a CRLF file's lines keep their `\r` (classify and value_of
        // trim it), so lines this module does not change are written back as they were.
        let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
        if text.is_empty() || text.ends_with('\n') {
            lines.pop();
        }
        if let Some((i, l)) = lines
            .iter()
            .enumerate()
            .find(|(_, l)| l.trim_start().starts_with('[') && !l.contains(']'))
        {
            return Err(StructuredError::Parse {
                path: path.to_path_buf(),
                format: "INI",
                line: i + 1,
                column: l.trim_end().chars().count() + 1,
                message: "unclosed section header, expected `]`".into(),
            });
        }
        let kinds: Vec<Kind> = lines.iter().map(|l| classify(l)).collect();
        let mut cur = String::new();
        let sections = kinds
            .iter()
            .map(|k| {
                if let Kind::Section(s) = k {
                    cur = s.clone();
                }
                cur.clone()
            })
            .collect();
        let cr = if lines.first().is_some_and(|l| l.ends_with('\r')) {
            "\r"
        } else {
            ""
        };
        Ok(Doc {
            lines,
            kinds,
            sections,
            cr,
        })
    }

    /// Line indices of `key` in `section`, in file order.
    fn entries(&self, section: &str, key: &str) -> Vec<usize> {
        (0..self.lines.len())
            .filter(|&i| {
                self.sections[i] == section
                    && matches!(&self.kinds[i], Kind::Entry { key: k, .. } if k == key)
            })
            .collect()
    }

    fn render(&self) -> String {
        let mut out = self.lines.join("\n");
        if !out.is_empty() {
            out.push('\n');
        }
        out
    }

    /// `=` or ` = `, as the file's first key line writes it.
    fn separator(&self) -> &'static str {
        let spaced = self
            .lines
            .iter()
            .zip(&self.kinds)
            .find_map(|(l, k)| match k {
                Kind::Entry { value_at, .. } => {
                    let eq = l.find('=').unwrap_or(0);
                    Some(l[..eq].ends_with(' ') || (*value_at > eq + 1))
                }
                _ => None,
            });
        if spaced == Some(true) { " = " } else { "=" }
    }
}

fn check_name(path: &Path, what: &'static str, s: &str, is_key: bool) -> Result<()> {
    let bad = |why: &str| {
        Err(HostError::Invalid {
            what,
            message: format!("{}: {s:?} {why}", path.display()),
        })
    };
    if s.contains(['\n', '\r']) {
        return bad("must be one line");
    }
    if s.trim() != s {
        return bad("must not start or end with blanks");
    }
    if is_key {
        if s.is_empty() {
            return bad("must not be empty");
        }
        if s.contains('=') || s.starts_with(['#', ';', '[']) {
            return bad("must not contain = or start with #, ; or [");
        }
    } else if s.contains([']', '[']) {
        return bad("must not contain [ or ]");
    }
    Ok(())
}

/// `ini::get(path, section, key)`: the value of `key` in `section` (`""`: before any
/// header), trimmed; the last one when repeated; `None` when the file, section or key is
/// missing.
///
/// # Errors
/// Relative path; [`HostError::NotText`]; as [`crate::host::files::fs::read`].
pub fn get(h: &Host, p: &str, section: &str, key: &str) -> Result<Option<String>, StructuredError> {
    let path = host_path(p)?;
    let Some(text) = crate::host::files::structured::read_text(h, &path)? else {
        return Ok(None);
    };
    let doc = Doc::parse(&path, &text)?;
    Ok(doc
        .entries(section, key)
        .last()
        .map(|&i| match &doc.kinds[i] {
            Kind::Entry { value_at, .. } => value_of(&doc.lines[i], *value_at).to_string(),
            _ => unreachable!("entries are entries"),
        }))
}

host_fn! {
    /// The value of `key` in `[section]` (`""`: before any header), trimmed, the last one when
    /// repeated; `()` when missing. `#` and `;` start comments. A line starting with `[` without
    /// `]` is an error naming `file:line:col` (in `set` and `remove` too).
    #[host(ns = "ini", effects = ReadsHost)]
    fn get(h: &mut Host, path: S, section: S, key: S) -> rhai::Dynamic {
        Ok(convert::opt(super::get(h, &path, &section, &key)?))
    }
}

/// `ini::set(path, section, key, value)`: make `key` in `section` have exactly `value`
/// (module docs: the first line rewritten, repeats removed; a new key at the end of the
/// section; a new section at the end of the file).
///
/// # Errors
/// Relative path; a key that is empty, has `=` or starts with `#`, `;` or `[`; a section
/// with `[` or `]`; a multi-line key, section or value; a value starting or ending with
/// blanks; [`HostError::NotText`]; as
/// [`crate::host::files::fs::write`].
pub fn set(
    h: &mut Host,
    p: &str,
    section: &str,
    key: &str,
    value: &str,
) -> Result<bool, StructuredError> {
    let path = host_path(p)?;
    check_name(&path, "INI section", section, false)?;
    check_name(&path, "INI key", key, true)?;
    if value.contains(['\n', '\r']) {
        return Err(HostError::Invalid {
            what: "INI value",
            message: format!("{}: the value of {key:?} must be one line", path.display()),
        }
        .into());
    }
    if value.trim() != value {
        // `get` trims values: such a value could never read back, and was written anew
        // (one blank more) on every run.
        return Err(HostError::Invalid {
            what: "INI value",
            message: format!(
                "{}: the value of {key:?} must not start or end with blanks, got {value:?}",
                path.display()
            ),
        }
        .into());
    }
    crate::host::files::structured::rewrite(h, &path, |cur| {
        let mut doc = Doc::parse(&path, cur.unwrap_or(""))?;
        let found = doc.entries(section, key);
        if let Some((&first, repeats)) = found.split_first() {
            if let Kind::Entry { value_at, .. } = doc.kinds[first]
                && repeats.is_empty()
                && value_of(&doc.lines[first], value_at) == value
            {
                // Already so: the file stays as it is (a missing final newline included).
                return Ok(None);
            }
            for &i in repeats.iter().rev() {
                doc.lines.remove(i);
            }
            let Kind::Entry { value_at, .. } = doc.kinds[first] else {
                unreachable!("entries are entries")
            };
            let line = &doc.lines[first];
            if value_of(line, value_at) != value {
                let cr = if line.ends_with('\r') { "\r" } else { "" };
                doc.lines[first] = format!("{}{value}{cr}", &line[..value_at]);
            }
            return Ok(Some(doc.render()));
        }
        let entry = format!("{key}{}{value}{}", doc.separator(), doc.cr);
        let is_header = |i: usize| matches!(doc.kinds[i], Kind::Section(_));
        let last_header = (0..doc.lines.len())
            .rfind(|&i| matches!(&doc.kinds[i], Kind::Section(s) if s == section));
        if section.is_empty() || last_header.is_some() {
            // After the last non-blank line of the section (its last header's run).
            let start = last_header.map_or(0, |i| i + 1);
            let end = (start..doc.lines.len())
                .find(|&i| is_header(i))
                .unwrap_or(doc.lines.len());
            let at = (start..end)
                .rfind(|&i| !doc.lines[i].trim().is_empty())
                .map_or(start, |i| i + 1);
            doc.lines.insert(at, entry);
        } else {
            if doc.lines.last().is_some_and(|l| !l.trim().is_empty()) {
                doc.lines.push(doc.cr.to_string());
            }
            doc.lines.push(format!("[{section}]{}", doc.cr));
            doc.lines.push(entry);
        }
        Ok(Some(doc.render()))
    })
}

host_fn! {
    /// Give `key` exactly `value` (string, number or bool): its first line is rewritten in place
    /// (spacing kept) and repeats removed; a new key goes after the section's last line, a new
    /// section at the end of the file. Creates a missing file. A value starting or ending with
    /// blanks is an error (`get` trims values).
    #[host(ns = "ini", effects = [Write])]
    fn set(h: &mut Host, path: S, section: S, key: S, value: D as "?") -> bool {
        let value = ini_value(&value)?;
        Ok(super::set(h, &path, &section, &key, &value)?)
    }
}

/// `ini::remove(path, section, key)`: remove every line of `key` in `section`. Unchanged
/// when the file, section or key is absent; the section's header stays.
///
/// # Errors
/// Relative path; [`HostError::NotText`]; as [`crate::host::files::fs::write`].
pub fn remove(h: &mut Host, p: &str, section: &str, key: &str) -> Result<bool, StructuredError> {
    let path = host_path(p)?;
    crate::host::files::structured::rewrite(h, &path, |cur| {
        let Some(cur) = cur else { return Ok(None) };
        let mut doc = Doc::parse(&path, cur)?;
        let found = doc.entries(section, key);
        if found.is_empty() {
            return Ok(None);
        }
        for &i in found.iter().rev() {
            doc.lines.remove(i);
        }
        Ok(Some(doc.render()))
    })
}

host_fn! {
    /// Remove every line of `key` in `[section]` (the header stays); absent is unchanged.
    #[host(ns = "ini", effects = [Write])]
    fn remove(h: &mut Host, path: S, section: S, key: S) -> bool {
        Ok(super::remove(h, &path, &section, &key)?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert;
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Dynamic, Dynamic as D, ImmutableString as S};
}
use prelude::*;

/// An INI value: a string, or a number or bool written in decimal / `true`/`false`.
fn ini_value(d: &Dynamic) -> Result<String, String> {
    convert::scalar(d, "value")
}

host_fns!(get, set, remove);
