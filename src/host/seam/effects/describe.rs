//! What a report says about each effect: its one-line summary, the unified diff of file
//! contents ([`render_diff`]), the directories it creates on the way, and the `before` hash
//! of a file change, all read through the session's view (planned content in plan and check
//! mode), so every executor reports the same effect the same way.

use std::borrow::Cow;
use std::path::Path;

use crate::host::Host;
use crate::host::effects::effect::{Effect, GrubUpdate, quote_argv};
use crate::host::effects::overlay::normalize;
use crate::host::effects::textdiff::Appended;
use crate::host::root::error::Result;

/// A unified diff between two texts with `--- a/path` / `+++ b/path` headers (`/dev/null`
/// for a side that does not exist), or a one-line note for binary content. Equal texts give
/// an empty string. `similar`'s diff of the whole texts, computed on a window around the
/// change (`host::effects::textdiff`).
pub fn render_diff(path: &Path, old: Option<&[u8]>, new: Option<&[u8]>) -> String {
    let (a, b) = diff_headers(path, old.is_some(), new.is_some());
    let (o, n) = (old.unwrap_or_default(), new.unwrap_or_default());
    match (std::str::from_utf8(o), std::str::from_utf8(n)) {
        (Ok(o), Ok(n)) => crate::host::effects::textdiff::unified(o, n, &a, &b),
        _ => format!(
            "Binary files {a} and {b} differ ({} -> {} bytes)\n",
            o.len(),
            n.len()
        ),
    }
}

/// The diff of a planned write of `new` over `old` ([`render_diff`]); when `appended`
/// describes this write (same file, `old`'s length), at the cost of the appended lines
/// ([`crate::host::effects::textdiff::unified_appended`]), else as `render_diff`.
fn render_write_diff(
    path: &Path,
    old: Option<&[u8]>,
    new: &[u8],
    appended: Option<&Appended>,
) -> String {
    if let (Some(o), Some(h)) = (old, appended)
        && h.old_len == o.len()
        && h.path == normalize(path)
    {
        let (a, b) = diff_headers(path, true, true);
        if let Some(d) =
            crate::host::effects::textdiff::unified_appended(o, new, h.old_lines, &a, &b)
        {
            return d;
        }
    }
    render_diff(path, old, Some(new))
}

/// The `--- a/…` and `+++ b/…` header names of a diff of `path` (`/dev/null` for a side
/// that does not exist).
fn diff_headers(path: &Path, old: bool, new: bool) -> (String, String) {
    let rel = path.to_string_lossy();
    let rel = rel.trim_start_matches('/');
    let a = if old {
        format!("a/{rel}")
    } else {
        "/dev/null".into()
    };
    let b = if new {
        format!("b/{rel}")
    } else {
        "/dev/null".into()
    };
    (a, b)
}

/// The summary of a file write: `create <path> (mode 0644)` with the owner when set, or
/// `update <path>` with the mode and owner changes.
fn write_summary(
    path: &Path,
    old: Option<&crate::host::effects::overlay::Stat>,
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
) -> String {
    let p = path.display();
    let mut summary = match (old, mode) {
        (None, m) => format!("create {p} (mode {:04o})", m.unwrap_or(0o644)),
        (Some(_), _) => format!("update {p}"),
    };
    if let Some(s) = old {
        if let Some(m) = mode
            && m != s.mode
        {
            summary.push_str(&format!(" (mode {:04o} -> {:04o})", s.mode, m));
        }
        if uid.is_some_and(|u| u != s.uid) || gid.is_some_and(|g| g != s.gid) {
            summary.push_str(&format!(
                " (owner {}:{} -> {})",
                s.uid,
                s.gid,
                ids(uid, gid)
            ));
        }
    } else if uid.is_some() || gid.is_some() {
        summary.push_str(&format!(" (owner {})", ids(uid, gid)));
    }
    summary
}

fn ids(uid: Option<u32>, gid: Option<u32>) -> String {
    let f = |x: Option<u32>| x.map_or("-".to_string(), |v| v.to_string());
    format!("{}:{}", f(uid), f(gid))
}

/// The longest diff a report keeps, in bytes (1 MiB): a longer one (a large file written
/// whole) is replaced by a one-line note, so a plan of many large files holds little.
pub(crate) const DIFF_LIMIT: usize = 1 << 20;

/// The note that stands for `diff` of `target` when it is longer than [`DIFF_LIMIT`]:
/// its `---`/`+++` headers and its size.
fn too_large(diff: &str, target: &str) -> String {
    let mut lines = diff.lines();
    match (lines.next(), lines.next()) {
        (Some(a), Some(b)) if a.starts_with("--- ") && b.starts_with("+++ ") => format!(
            "Files {} and {} differ (a diff of {} bytes, more than the 1 MiB a report keeps: not shown)\n",
            &a[4..],
            &b[4..],
            diff.len()
        ),
        _ => format!(
            "{target} differs (a diff of {} bytes, more than the 1 MiB a report keeps: not shown)\n",
            diff.len()
        ),
    }
}

/// What a report says about one effect ([`Host::describe`]).
#[derive(Debug, Default)]
pub(crate) struct Described {
    /// The one-line summary.
    pub summary: String,
    /// The unified diff of file contents, when asked for.
    pub diff: Option<String>,
    /// `sha256:` of the content after, when the effect itself declares it (a fetch's
    /// verified digest). File writes get theirs from the session (`src/host/seam/effects/hashes.rs`).
    pub after: Option<String>,
    /// Missing directories the effect creates on the way, outermost first.
    pub mkdir: Vec<String>,
}

impl Host {
    /// The summary of `effect` and, for file contents when `with_diff`, its diff against the
    /// current view, and the directories it creates on the way. The content hashes are the
    /// session's ([`crate::host::effects::hashes`]).
    /// `appended`: what the line view knows about a write's content ([`Appended`]), used
    /// for its diff in plan and check mode when it matches the effect.
    pub(crate) fn describe(
        &self,
        effect: &Effect,
        with_diff: bool,
        appended: Option<&Appended>,
    ) -> Result<Described> {
        let mut d = self.summarize(effect, with_diff, appended)?;
        if let Some(diff) = &mut d.diff
            && diff.len() > DIFF_LIMIT
        {
            *diff = too_large(diff, &effect.target());
        }
        match effect {
            Effect::WriteFile { path, .. }
            | Effect::Symlink { link: path, .. }
            | Effect::Mkdir { path, .. } => {
                d.mkdir = self.missing_parents(path)?;
            }
            Effect::Fetch(f) => {
                d.after = f.sha256.as_ref().map(|s| format!("sha256:{s}"));
                d.mkdir = self.missing_parents(&f.path)?;
            }
            Effect::CopyFile { path, sha256, .. } => {
                d.after = sha256.as_ref().map(|s| format!("sha256:{s}"));
                d.mkdir = self.missing_parents(path)?;
            }
            _ => {}
        }
        Ok(d)
    }

    /// The missing ancestors of `path` as the session sees them, outermost first (host
    /// paths, lexically normalised).
    fn missing_parents(&self, path: &Path) -> Result<Vec<String>> {
        let norm = normalize(path);
        let mut missing = Vec::new();
        for anc in norm.ancestors().skip(1) {
            if self.known_dir(anc) || self.view_stat(anc, true)?.is_some() {
                break;
            }
            missing.push(anc.display().to_string());
        }
        missing.reverse();
        Ok(missing)
    }

    fn summarize(
        &self,
        effect: &Effect,
        with_diff: bool,
        appended: Option<&Appended>,
    ) -> Result<Described> {
        let (summary, diff) = match effect {
            Effect::WriteFile {
                path,
                content,
                mode,
                uid,
                gid,
            } => {
                let old_stat = self.view_stat(path, true)?;
                // Only the diff needs the old content: apply mode does not read it.
                let old = match &old_stat {
                    Some(s) if with_diff && s.kind == "file" => self.view_read_cow(path)?,
                    _ => None,
                };
                let summary = write_summary(path, old_stat.as_ref(), *mode, *uid, *gid);
                let appended = appended.filter(|_| self.plans());
                let diff = (with_diff && old.as_deref() != Some(&content[..]))
                    .then(|| render_write_diff(path, old.as_deref(), content, appended));
                (summary, diff)
            }
            Effect::CopyFile {
                src,
                path,
                mode,
                uid,
                gid,
                ..
            } => {
                // The contents are streamed, never loaded: the diff names the copy instead.
                let old_stat = self.view_stat(path, true)?;
                let summary = write_summary(path, old_stat.as_ref(), *mode, *uid, *gid);
                let diff = with_diff.then(|| {
                    let (a, b) = diff_headers(path, old_stat.is_some(), true);
                    let size = self
                        .view_stat(src, true)
                        .ok()
                        .flatten()
                        .map_or(String::new(), |s| format!(", {} bytes", s.size));
                    format!(
                        "Files {a} and {b} differ (copied from {}{size}: not diffed)\n",
                        src.display()
                    )
                });
                (summary, diff)
            }
            Effect::RemoveFile { path } => {
                let old = if with_diff {
                    self.view_read(path).ok().flatten()
                } else {
                    None
                };
                let diff = old.map(|o| render_diff(path, Some(&o), None));
                (format!("remove {}", path.display()), diff)
            }
            Effect::Mkdir { path, mode } => (
                match self.view_stat(path, true)? {
                    Some(s) => format!(
                        "chmod directory {} {:04o} -> {:04o}",
                        path.display(),
                        s.mode,
                        mode
                    ),
                    None => format!("create directory {} (mode {:04o})", path.display(), mode),
                },
                None,
            ),
            Effect::RemoveAll { path } => (format!("remove tree {}", path.display()), None),
            Effect::Chmod { path, mode } => {
                let old = self.view_stat(path, true)?.map_or(0, |s| s.mode);
                (
                    format!("chmod {} {:04o} -> {:04o}", path.display(), old, mode),
                    None,
                )
            }
            // The new time only: before it, an apply sees the write's own mtime, a plan
            // the file's earlier one.
            Effect::SetMtime { path, mtime } => (
                format!(
                    "set mtime {} {}",
                    path.display(),
                    show_mtime(
                        crate::host::effects::overlay::mtime_secs(*mtime),
                        mtime_nanos(*mtime),
                    )
                ),
                None,
            ),
            Effect::Chown { path, uid, gid } => {
                let old = self
                    .view_stat(path, true)?
                    .map_or("-:-".into(), |s| format!("{}:{}", s.uid, s.gid));
                (
                    format!("chown {} {old} -> {}", path.display(), ids(*uid, *gid)),
                    None,
                )
            }
            Effect::Symlink { target, link } => (
                format!("symlink {} -> {}", link.display(), target.display()),
                None,
            ),
            Effect::Service { name, op } => (format!("{} service {name}", op.verb()), None),
            Effect::ServiceAction { name, action } => {
                (format!("systemctl {} {name}", action.verb()), None)
            }
            Effect::DaemonReload => ("systemctl daemon-reload".into(), None),
            Effect::PackageInstall {
                manager,
                names,
                update,
            } => (
                format!(
                    "install packages {} ({}{})",
                    names.join(" "),
                    manager.name(),
                    if *update { ", after index update" } else { "" }
                ),
                None,
            ),
            Effect::PackageRemove { manager, names } => (
                format!("remove packages {} ({})", names.join(" "), manager.name()),
                None,
            ),
            Effect::Sysctl { key, value } => {
                let old = crate::host::effects::effect::sysctl_proc_path(key)
                    .and_then(|p| self.view_read(&p))
                    .ok()
                    .flatten()
                    .map(|b| String::from_utf8_lossy(&b).trim().to_string())
                    .unwrap_or_default();
                (format!("sysctl {key} = {value} (was {old})"), None)
            }
            Effect::Command { argv, .. } => (quote_argv(argv), None),
            Effect::GuardedCommand { argv, opts } => (
                crate::host::effects::exec::guarded_summary(argv, &opts.guards),
                None,
            ),
            Effect::GrubUpdate(GrubUpdate::UpdateGrub) => ("update-grub".into(), None),
            Effect::GrubUpdate(GrubUpdate::Grubby { add, remove }) => {
                let mut parts = Vec::new();
                if !add.is_empty() {
                    parts.push(format!(
                        "grubby --update-kernel=ALL --args={:?}",
                        add.join(" ")
                    ));
                }
                if !remove.is_empty() {
                    parts.push(format!(
                        "grubby --update-kernel=ALL --remove-args={:?}",
                        remove.join(" ")
                    ));
                }
                (parts.join("; "), None)
            }
            Effect::Interrupt(_) => ("interrupt".into(), None),
            Effect::Mount { path, op } => (quote_argv(&op.argv(path)), None),
            Effect::ModuleLoad { name, .. } => (format!("modprobe {name}"), None),
            Effect::InitramfsUpdate(tool) => (quote_argv(&tool.argv()), None),
            Effect::Fetch(d) => (d.summary(self.plans()), None),
            Effect::PackageUpgrade { manager, upgrade } => (
                quote_argv(&crate::host::effects::executors::apply::upgrade_command(
                    *manager, *upgrade, None,
                )),
                None,
            ),
            Effect::GrubDefault { release, old, .. } => (
                format!(
                    "grub default: {} -> {release}",
                    old.as_deref().unwrap_or("(unknown)")
                ),
                None,
            ),
            Effect::PackageHold {
                manager,
                names,
                hold,
            } => (
                format!(
                    "{} packages {} ({})",
                    if *hold { "hold" } else { "unhold" },
                    names.join(" "),
                    manager.name()
                ),
                None,
            ),
            Effect::TunedProfile { names } => {
                let was = self
                    .view_read(Path::new(
                        crate::host::effects::effect::TUNED_ACTIVE_PROFILE,
                    ))
                    .ok()
                    .flatten()
                    .map(|b| String::from_utf8_lossy(&b).trim().to_string())
                    .filter(|s| !s.is_empty());
                (
                    format!(
                        "{} (active: {})",
                        quote_argv(&crate::host::effects::effect::tuned_argv(names)),
                        was.as_deref().unwrap_or("none")
                    ),
                    None,
                )
            }
        };
        Ok(Described {
            summary,
            diff,
            ..Described::default()
        })
    }
}

impl Host {
    /// The `before` hash of a file change (module docs): for the first recorded write or
    /// removal of its file in this report, the SHA-256 of the regular file the session sees there, else
    /// `None`. Reads through the view (planned content in plan and check mode).
    ///
    /// # Errors
    /// Resolution or read failures of the file.
    pub(crate) fn hash_before(&mut self, effect: &Effect) -> Result<Option<String>> {
        let (Effect::WriteFile { path, .. }
        | Effect::CopyFile { path, .. }
        | Effect::RemoveFile { path }) = effect
        else {
            return Ok(None);
        };
        // A file counts as seen once a change of it is recorded ([`ContentHashes::note`]):
        // a write that failed leaves the next one first.
        if self.hashes.seen.contains(&normalize(path)) {
            return Ok(None);
        }
        if self.view_stat(path, true)?.is_none_or(|s| s.kind != "file") {
            return Ok(None);
        }
        if matches!(effect, Effect::CopyFile { .. } | Effect::RemoveFile { .. }) {
            // A copied-over or removed file may be of any size: its digest is streamed
            // (never read whole, no size limit).
            return Ok(self.view_digest(path)?.map(|d| format!("sha256:{d}")));
        }
        let redactor = self.redactor().clone();
        Ok(self
            .view_read_cow(path)?
            .map(|c| crate::host::effects::hashes::content_tag(&c, &redactor)))
    }

    /// [`Host::view_read`] that borrows a planned file's content from the overlay instead
    /// of copying it (plan and check mode); a file on disk is read as `view_read` reads it.
    ///
    /// # Errors
    /// As [`Host::view_read`].
    pub(crate) fn view_read_cow(&self, path: &Path) -> Result<Option<Cow<'_, [u8]>>> {
        if let Some(overlay) = self.overlay() {
            let key = overlay.key(self.host_root(), path, true)?;
            match overlay.lookup(&key) {
                Some(crate::host::effects::overlay::Node::File {
                    content: crate::host::effects::overlay::Planned::Held(content),
                    ..
                }) => return Ok(Some(Cow::Borrowed(&content[..]))),
                Some(crate::host::effects::overlay::Node::File { content, .. }) => {
                    let c = content.bytes().map_err(|e| {
                        crate::host::effects::overlay::spill_error(self.host_root(), path, e)
                    })?;
                    return Ok(Some(Cow::Owned(c.to_vec())));
                }
                _ => {}
            }
        }
        Ok(self.view_read(path)?.map(Cow::Owned))
    }
}

/// The nanoseconds of `t` past [`mtime_secs`].
fn mtime_nanos(t: std::time::SystemTime) -> u32 {
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.subsec_nanos(),
        Err(e) => match e.duration().subsec_nanos() {
            0 => 0,
            n => 1_000_000_000 - n,
        },
    }
}

/// An mtime as a plan line shows it: `2024-12-05T10:00:00Z`, with the nanoseconds when
/// there are any (`...00.123456789Z`); seconds since the epoch outside chrono's range.
fn show_mtime(secs: i64, nanos: u32) -> String {
    match chrono::DateTime::from_timestamp(secs, nanos) {
        Some(t) if nanos == 0 => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Some(t) => t.format("%Y-%m-%dT%H:%M:%S%.9fZ").to_string(),
        None => format!("@{secs}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn diff_exact() {
        let d = render_diff(
            Path::new("/etc/x.conf"),
            Some(b"a\nb\nc\n"),
            Some(b"a\nB\nc\n"),
        );
        assert_eq!(
            d,
            "--- a/etc/x.conf\n+++ b/etc/x.conf\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
        );
        let d = render_diff(Path::new("/n"), None, Some(b"x\n"));
        assert_eq!(d, "--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n");
    }

    #[test]
    fn write_diff_uses_an_appended_hint_only_when_it_matches() {
        let old: String = (0..50).map(|i| format!("l{i}\n")).collect();
        let new = format!("{old}x\n");
        let p = Path::new("/etc/f");
        let want = render_diff(p, Some(old.as_bytes()), Some(new.as_bytes()));
        assert_eq!(
            want,
            "--- a/etc/f\n+++ b/etc/f\n@@ -48,3 +48,4 @@\n l47\n l48\n l49\n+x\n"
        );
        let hint = |path: &str, old_len, old_lines| Appended {
            path: PathBuf::from(path),
            old_len,
            old_lines,
        };
        let d = |h: &Appended| render_write_diff(p, Some(old.as_bytes()), new.as_bytes(), Some(h));
        assert_eq!(d(&hint("/etc/f", old.len(), 50)), want);
        // Another file or another length: not this write's hint, diffed as without one. (A
        // wrong line count would shift the headers: the hint is trusted for it.)
        assert_eq!(d(&hint("/etc/g", old.len(), 7)), want);
        assert_eq!(d(&hint("/etc/f", old.len() - 1, 7)), want);
        assert_eq!(
            render_write_diff(p, None, new.as_bytes(), Some(&hint("/etc/f", 0, 0))),
            render_diff(p, None, Some(new.as_bytes()))
        );
    }

    #[test]
    fn normalize_never_climbs() {
        assert_eq!(
            normalize(Path::new("/a/../../b/./c")),
            PathBuf::from("/b/c")
        );
    }
}
