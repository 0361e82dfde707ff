//! `fs::` line and block edits: `ensure_line`, `remove_line`, `ensure_block`,
//! `remove_block`, through the session's line view ([`edit_lines`]), so consecutive edits of
//! one file are written once. A part of `fs` (its rows are in `fs`'s table, in reference
//! order).

use std::path::Path;

use super::{compile, host_path, put_locked};
use crate::host::Host;
use crate::host::effects::lines::Lines;
use crate::host::effects::session::{LineEdit, edit_lines};
use crate::host::root::error::{HostError, Result};

use rhai::{ImmutableString as S, Map};

use crate::host::api::convert::{check_keys, opt_bool, opt_string};
use crate::host::api::host_fn;

/// Options of `ensure_line`.
#[derive(Debug, Clone)]
pub struct LineOptions {
    /// Replace the last line matching this regex (else append when absent).
    pub regex: Option<String>,
    /// Create a missing file (default true); false makes a missing file an error.
    pub create: bool,
}

impl Default for LineOptions {
    fn default() -> Self {
        LineOptions {
            regex: None,
            create: true,
        }
    }
}

/// `#{regex, create}`.
fn line_opts(m: &Map) -> Result<LineOptions, String> {
    check_keys(m, &["regex", "create"])?;
    Ok(LineOptions {
        regex: opt_string(m, "regex")?,
        create: opt_bool(m, "create", true)?,
    })
}

/// A read-modify-write of the lines of the text file at `path` through the session's line
/// view ([`edit_lines`]); a file whose lines no longer describe its bytes is
/// written whole as `put` writes, under the lock the edit took.
fn edit_view(
    h: &mut Host,
    path: &Path,
    change: impl Fn(&mut Lines, bool) -> Result<bool>,
) -> Result<bool> {
    match edit_lines(h, path, change)? {
        LineEdit::Done(changed) => Ok(changed),
        LineEdit::Irregular { content, lock } => {
            let changed = put_locked(h, path, content, (None, None, None), |_| Ok(()));
            drop(lock);
            changed
        }
    }
}

/// `line` as `fs::ensure_line` takes it: one line, which reads back as itself.
///
/// # Errors
/// [`HostError::Invalid`] naming the line and why.
fn one_line(line: &str) -> Result<()> {
    let why = if line.contains('\n') {
        "contains a line break (\\n)"
    } else if line.ends_with('\r') {
        "ends with a carriage return (\\r), which is read as part of the line ending"
    } else {
        return Ok(());
    };
    Err(HostError::Invalid {
        what: "line",
        message: format!(
            "{line:?} {why}: fs::ensure_line compares and adds a single line, so this one would \
             be added again on every run (use fs::ensure_block for several lines)"
        ),
    })
}

/// `fs::ensure_line(p, line, #{regex, create})`: without `regex`, append `line` when no line
/// equals it. With `regex`, replace the *last* line matching it by `line` (unchanged when it
/// already equals `line`); when none matches, append `line` unless present. In apply mode
/// the decision is made on content read under the path's lock (`edit_view`). Repeated
/// calls on one file cost O(1) each (plus the write when one changes it) without `regex`,
/// O(lines) with it.
///
/// # Errors
/// `line` is not one line (it contains `\n`, or ends with `\r`, which the next read drops):
/// [`HostError::Invalid`], nothing read or written (such a line never reads back as itself,
/// so every run would append it again); invalid regex; missing file with `create: false`
/// ([`HostError::NotFound`]); non-text file; the path's lock file cannot be created or
/// locked (apply mode).
pub fn ensure_line(h: &mut Host, p: &str, line: &str, opts: &LineOptions) -> Result<bool> {
    one_line(line)?;
    let path = host_path(p)?;
    let re = opts.regex.as_deref().map(compile).transpose()?;
    edit_view(h, &path, |lines, exists| {
        if !exists && !opts.create {
            return Err(HostError::NotFound { path: path.clone() });
        }
        let last_match = re
            .as_ref()
            .and_then(|re| lines.iter().rposition(|l| re.is_match(l)));
        match last_match {
            Some(i) if lines.get(i) == line => return Ok(false),
            Some(i) => lines.replace(i, line),
            None if lines.contains(line) => return Ok(false),
            None => lines.push(line),
        }
        Ok(true)
    })
}

host_fn! {
    /// Append `line` when no line equals it (the file is created when missing). `line` must be one
    /// line (no `\n`, no final `\r`).
    #[host(ns = "fs", effects = [Write])]
    fn ensure_line(h: &mut Host, path: S, line: S) -> bool {
        Ok(super::ensure_line(h, &path, &line, &LineOptions::default())?)
    }

    /// With `#{regex, create}`: replace the last line matching `regex` (else append when absent);
    /// `create: false` makes a missing file an error.
    #[overload(options = &["regex", "create"])]
    fn ensure_line_with_opts(h: &mut Host, path: S, line: S, opts: Map) -> bool {
        let opts = line_opts(&opts)?;
        Ok(super::ensure_line(h, &path, &line, &opts)?)
    }
}

/// `fs::remove_line(p, regex)`: remove every line matching `regex`. A missing file is
/// unchanged. In apply mode under the path's lock, as [`ensure_line`].
///
/// # Errors
/// Invalid regex; non-text file; the lock (apply mode).
pub fn remove_line(h: &mut Host, p: &str, regex: &str) -> Result<bool> {
    let path = host_path(p)?;
    let re = compile(regex)?;
    edit_view(h, &path, |lines, exists| {
        Ok(exists && lines.remove_where(|l| re.is_match(l)))
    })
}

host_fn! {
    /// Remove every line matching `regex`; a missing file is unchanged.
    #[host(ns = "fs", effects = [Write])]
    fn remove_line(h: &mut Host, path: S, regex: S) -> bool {
        Ok(super::remove_line(h, &path, &regex)?)
    }
}

fn markers(id: &str) -> Result<(String, String)> {
    if id.is_empty() || id.contains(['\n', '\r']) {
        return Err(HostError::Invalid {
            what: "block id",
            message: format!("{id:?} must be a non-empty single line"),
        });
    }
    Ok((
        format!("# BEGIN skyhook {id}"),
        format!("# END skyhook {id}"),
    ))
}

/// The line range of block `id` (BEGIN..=END), when both markers are present in order
/// (O(1) when the BEGIN marker is absent).
fn find_block(lines: &Lines, begin: &str, end: &str) -> Option<(usize, usize)> {
    let b = lines.position_from(0, begin)?;
    let e = lines.position_from(b, end)?;
    Some((b, e))
}

/// `fs::ensure_block(p, id, content)`: a managed block of `content`'s lines between
/// `# BEGIN skyhook <id>` and `# END skyhook <id>`; replaced in place when present, else
/// appended (file created when missing). In apply mode under the path's lock, as
/// [`ensure_line`], so blocks of concurrent sessions in the same file are all kept.
///
/// # Errors
/// Invalid id (empty or multi-line); non-text file; the lock (apply mode).
pub fn ensure_block(h: &mut Host, p: &str, id: &str, content: &str) -> Result<bool> {
    let path = host_path(p)?;
    let (begin, end) = markers(id)?;
    let mut block = vec![begin.as_str()];
    block.extend(content.lines());
    block.push(end.as_str());
    edit_view(h, &path, |lines, _| {
        match find_block(lines, &begin, &end) {
            Some((b, e)) if lines.range_eq(b..e + 1, &block) => return Ok(false),
            Some((b, e)) => lines.splice(b..e + 1, &block),
            None => lines.splice(lines.len()..lines.len(), &block),
        }
        Ok(true)
    })
}

host_fn! {
    /// A managed block between `# BEGIN skyhook <id>` and `# END skyhook <id>`, replaced in place
    /// or appended.
    #[host(ns = "fs", effects = [Write])]
    fn ensure_block(h: &mut Host, path: S, id: S, content: S) -> bool {
        Ok(super::ensure_block(h, &path, &id, &content)?)
    }
}

/// `fs::remove_block(p, id)`: remove the managed block `id` (markers included). Unchanged
/// when the file or the block is absent. In apply mode under the path's lock, as
/// [`ensure_line`].
///
/// # Errors
/// Invalid id; non-text file; the lock (apply mode).
pub fn remove_block(h: &mut Host, p: &str, id: &str) -> Result<bool> {
    let path = host_path(p)?;
    let (begin, end) = markers(id)?;
    edit_view(h, &path, |lines, exists| {
        let Some((b, e)) = find_block(lines, &begin, &end).filter(|_| exists) else {
            return Ok(false);
        };
        lines.splice(b..e + 1, &[]);
        Ok(true)
    })
}

host_fn! {
    /// Remove the managed block `id`, markers included.
    #[host(ns = "fs", effects = [Write])]
    fn remove_block(h: &mut Host, path: S, id: S) -> bool {
        Ok(super::remove_block(h, &path, &id)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::ExecMode;
    use crate::host::effects::effect::Effect;
    use crate::host::testutil::TestHost;

    /// The exact effects the line functions submit in a plan: one whole-file write per
    /// changing call, with the content the file would have; the planned content answers the
    /// next call through the session's line view (an unchanged call submits nothing).
    #[test]
    fn line_edits_submit_one_write_each_and_read_the_planned_lines() {
        let t = TestHost::new();
        t.file("/etc/x.conf", "a\n");
        let mut h = t.host(ExecMode::Plan);
        h.record_effects();
        let o = LineOptions::default();
        assert!(ensure_line(&mut h, "/etc/x.conf", "b", &o).unwrap());
        assert!(!ensure_line(&mut h, "/etc/x.conf", "b", &o).unwrap());
        assert!(remove_line(&mut h, "/etc/x.conf", "^a$").unwrap());
        let writes: Vec<(String, String)> = h
            .recorded_effects()
            .iter()
            .map(|e| match e {
                Effect::WriteFile { path, content, .. } => (
                    path.display().to_string(),
                    String::from_utf8_lossy(content).into_owned(),
                ),
                other => panic!("not a write: {other:?}"),
            })
            .collect();
        assert_eq!(
            writes,
            [
                ("/etc/x.conf".to_string(), "a\nb\n".to_string()),
                ("/etc/x.conf".to_string(), "b\n".to_string())
            ]
        );
        assert_eq!(t.read("/etc/x.conf"), "a\n");
    }
}
