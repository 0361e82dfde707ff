//! The plan/check executor: a read overlay of recorded effects, and the rendering of effects
//! as report lines and unified diffs.
//!
//! The overlay maps *resolved* host paths (symlinks followed through the real root where they
//! exist) to what the session planned there: a file with content and attributes, a directory,
//! a symlink, or nothing (removed). A removed tree hides everything beneath it; a directory
//! the plan creates ("fresh") hides whatever the real root had under that name. Planned
//! service states and package installs are kept too, so `service::is_active` after a planned
//! `start` and `pkg::installed` after a planned `install` answer as after an apply.
//!
//! Limits (documented, harmless for idempotence): symlinks planned in the same session are
//! not followed by later reads; mtimes of planned files are the real ones when the file
//! existed, else 0.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::host::Host;
use crate::host::effects::effect::{Effect, GrubUpdate, MountOp, ServiceOp, quote_argv};
use crate::host::effects::session::Stat;
use crate::host::effects::textdiff::Appended;
use crate::host::root::EntryKind;
use crate::host::root::error::Result;

/// One planned object.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    File {
        /// Shared with the effect that planned it (and the line view's rendering).
        content: bytes::Bytes,
        mode: u32,
        uid: u32,
        gid: u32,
        mtime: i64,
    },
    Dir {
        mode: u32,
        uid: u32,
        gid: u32,
        /// Created by the plan: the real root's content under it is not visible.
        fresh: bool,
    },
    Symlink {
        target: PathBuf,
    },
    Absent,
    /// A file `fs::fetch` would download: its digest is known, its content is not.
    Download {
        sha256: String,
        mode: u32,
        uid: u32,
        gid: u32,
    },
}

impl Node {
    pub(crate) fn is_absent(&self) -> bool {
        matches!(self, Node::Absent)
    }

    pub(crate) fn stat(&self) -> Option<Stat> {
        let (kind, size, mode, uid, gid, mtime) = match self {
            Node::File {
                content,
                mode,
                uid,
                gid,
                mtime,
            } => ("file", content.len() as u64, *mode, *uid, *gid, *mtime),
            Node::Dir { mode, uid, gid, .. } => ("dir", 0, *mode, *uid, *gid, 0),
            Node::Symlink { target } => {
                ("symlink", target.as_os_str().len() as u64, 0o777, 0, 0, 0)
            }
            Node::Absent => return None,
            // The size is unknown until the download happens.
            Node::Download { mode, uid, gid, .. } => ("file", 0, *mode, *uid, *gid, 0),
        };
        Some(Stat {
            kind: kind.into(),
            size,
            mode,
            uid,
            gid,
            mtime,
        })
    }

    /// File content, `Ok(None)` when absent, `Err(reason)` for a directory.
    pub(crate) fn content(&self) -> std::result::Result<Option<Vec<u8>>, &'static str> {
        match self {
            Node::File { content, .. } => Ok(Some(content.to_vec())),
            Node::Dir { .. } => Err("is a directory"),
            Node::Symlink { .. } | Node::Absent => Ok(None),
            Node::Download { .. } => Err(
                "is downloaded by fs::fetch only when applied: its content is unknown in a plan",
            ),
        }
    }

    fn entry_kind(&self) -> Option<EntryKind> {
        match self {
            Node::File { .. } => Some(EntryKind::File),
            Node::Dir { .. } => Some(EntryKind::Dir),
            Node::Symlink { .. } => Some(EntryKind::Symlink),
            Node::Absent => None,
            Node::Download { .. } => Some(EntryKind::File),
        }
    }
}

static ABSENT: Node = Node::Absent;

/// The read overlay of a plan/check session.
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    nodes: BTreeMap<PathBuf, Node>,
    /// Planned unit states: (active, enabled).
    pub(crate) services: HashMap<String, (Option<bool>, Option<bool>)>,
    /// Planned package presence.
    pub(crate) packages: HashMap<String, bool>,
    /// Planned mount state by normalised mount point: mounted (`true`) or unmounted.
    pub(crate) mounts: HashMap<PathBuf, bool>,
    /// Kernel modules planned to be loaded (names with `-` as `_`).
    pub(crate) modules: std::collections::HashSet<String>,
    /// Planned package holds (`pkg::hold` true, `pkg::unhold` false).
    pub(crate) holds: HashMap<String, bool>,
}

impl Overlay {
    /// What the plan says about `p`: its own entry, or absence implied by the nearest
    /// ancestor that was removed, is a file, or was created fresh. `None`: ask the real root.
    pub(crate) fn lookup(&self, p: &Path) -> Option<&Node> {
        if let Some(n) = self.nodes.get(p) {
            return Some(n);
        }
        for anc in p.ancestors().skip(1) {
            match self.nodes.get(anc) {
                Some(Node::Dir { fresh: false, .. }) | None => continue,
                Some(_) => return Some(&ABSENT),
            }
        }
        None
    }

    pub(crate) fn is_fresh_dir(&self, p: &Path) -> bool {
        matches!(self.nodes.get(p), Some(Node::Dir { fresh: true, .. }))
    }

    /// Planned children of `dir` (present ones only).
    pub(crate) fn children(&self, dir: &Path) -> Vec<(String, EntryKind)> {
        self.nodes
            .range(dir.to_path_buf()..)
            .filter(|(p, _)| p.parent() == Some(dir))
            .filter_map(|(p, n)| {
                let name = p.file_name()?.to_string_lossy().into_owned();
                n.entry_kind().map(|k| (name, k))
            })
            .collect()
    }

    fn set(&mut self, p: PathBuf, n: Node) {
        if matches!(n, Node::Absent) {
            // Everything planned beneath is gone too.
            let below: Vec<PathBuf> = self
                .nodes
                .range(p.clone()..)
                .map(|(k, _)| k.clone())
                .take_while(|k| k.starts_with(&p))
                .filter(|k| k != &p)
                .collect();
            for k in below {
                self.nodes.remove(&k);
            }
        }
        self.nodes.insert(p, n);
    }
}

/// Lexical normalisation of a host path, as chroot resolution treats `..` at the root.
pub(crate) use crate::host::root::normalize;

/// A unified diff between two texts with `--- a/path` / `+++ b/path` headers (`/dev/null`
/// for a side that does not exist), or a one-line note for binary content. Equal texts give
/// an empty string. `similar`'s diff of the whole texts, computed on a window around the
/// change ([`crate::host::effects::textdiff`]).
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

fn ids(uid: Option<u32>, gid: Option<u32>) -> String {
    let f = |x: Option<u32>| x.map_or("-".to_string(), |v| v.to_string());
    format!("{}:{}", f(uid), f(gid))
}

/// What a report says about one effect ([`Host::describe`]).
#[derive(Debug, Default)]
pub(crate) struct Described {
    /// The one-line summary.
    pub summary: String,
    /// The unified diff of file contents, when asked for.
    pub diff: Option<String>,
    /// `sha256:` of the content after, when the effect itself declares it (a fetch's
    /// verified digest). File writes get theirs from the session (`src/host/hashes.rs`).
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
        match effect {
            Effect::WriteFile { path, .. }
            | Effect::Symlink { link: path, .. }
            | Effect::Mkdir { path, .. } => {
                d.mkdir = self.missing_parents(path)?;
            }
            Effect::Fetch(f) => {
                d.after = Some(format!("sha256:{}", f.sha256));
                d.mkdir = self.missing_parents(&f.path)?;
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
            if self.view_stat(anc, true)?.is_some() {
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
                let p = path.display();
                let mut summary = match (&old_stat, mode) {
                    (None, m) => format!("create {p} (mode {:04o})", m.unwrap_or(0o644)),
                    (Some(_), _) => format!("update {p}"),
                };
                if let Some(s) = &old_stat {
                    if let Some(m) = mode
                        && *m != s.mode
                    {
                        summary.push_str(&format!(" (mode {:04o} -> {:04o})", s.mode, m));
                    }
                    if uid.is_some_and(|u| u != s.uid) || gid.is_some_and(|g| g != s.gid) {
                        summary.push_str(&format!(
                            " (owner {}:{} -> {})",
                            s.uid,
                            s.gid,
                            ids(*uid, *gid)
                        ));
                    }
                } else if uid.is_some() || gid.is_some() {
                    summary.push_str(&format!(" (owner {})", ids(*uid, *gid)));
                }
                let appended = appended.filter(|_| self.mode() != crate::host::ExecMode::Apply);
                let diff = (with_diff && old.as_deref() != Some(&content[..]))
                    .then(|| render_write_diff(path, old.as_deref(), content, appended));
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
            Effect::Fetch(d) => (d.summary(self.mode()), None),
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
        };
        Ok(Described {
            summary,
            diff,
            ..Described::default()
        })
    }

    /// Record `effect` in the overlay so later reads see it.
    pub(crate) fn overlay_record(&mut self, effect: &Effect) -> Result<()> {
        match effect {
            Effect::WriteFile {
                path,
                content,
                mode,
                uid,
                gid,
            } => {
                let key = self.overlay_key(path, true)?;
                let old = self.view_stat(&key, true)?;
                self.plan_parents(&key)?;
                let node = Node::File {
                    content: content.clone(),
                    mode: mode.or(old.as_ref().map(|s| s.mode)).unwrap_or(0o644),
                    uid: uid.or(old.as_ref().map(|s| s.uid)).unwrap_or(0),
                    gid: gid.or(old.as_ref().map(|s| s.gid)).unwrap_or(0),
                    mtime: old.as_ref().map_or(0, |s| s.mtime),
                };
                self.overlay.set(key, node);
            }
            Effect::RemoveFile { path } | Effect::RemoveAll { path } => {
                let key = self.overlay_key(path, false)?;
                self.overlay.set(key, Node::Absent);
            }
            Effect::Mkdir { path, mode } => {
                let key = self.overlay_key(path, true)?;
                let old = self.view_stat(&key, true)?;
                self.plan_parents(&key)?;
                let node = Node::Dir {
                    mode: *mode,
                    uid: old.as_ref().map_or(0, |s| s.uid),
                    gid: old.as_ref().map_or(0, |s| s.gid),
                    fresh: old.is_none() || self.overlay.is_fresh_dir(&key),
                };
                self.overlay.set(key, node);
            }
            Effect::Chmod { path, mode } => self.plan_attrs(path, Some(*mode), None, None)?,
            Effect::Chown { path, uid, gid } => self.plan_attrs(path, None, *uid, *gid)?,
            Effect::Symlink { target, link } => {
                let key = self.overlay_key(link, false)?;
                self.plan_parents(&key)?;
                self.overlay.set(
                    key,
                    Node::Symlink {
                        target: target.clone(),
                    },
                );
            }
            Effect::Service { name, op } => {
                let e = self.overlay.services.entry(name.clone()).or_default();
                match op {
                    ServiceOp::Start => e.0 = Some(true),
                    ServiceOp::Stop => e.0 = Some(false),
                    ServiceOp::Enable => e.1 = Some(true),
                    ServiceOp::Disable => e.1 = Some(false),
                }
            }
            Effect::PackageInstall { names, manager, .. } => {
                for n in names {
                    self.overlay.packages.insert(n.clone(), true);
                    // A pinned version (`name=1.2`) installs the package itself too.
                    let spec = crate::host::effects::effect::parse_spec(*manager, n);
                    if spec.version.is_some() {
                        self.overlay.packages.insert(spec.name, true);
                    }
                }
            }
            Effect::PackageRemove { names, .. } => {
                for n in names {
                    self.overlay.packages.insert(n.clone(), false);
                }
            }
            Effect::Sysctl { key, value } => {
                let path = crate::host::effects::effect::sysctl_proc_path(key)?;
                let k = self.overlay_key(&path, true)?;
                let old = self.view_stat(&k, true)?;
                self.overlay.set(
                    k,
                    Node::File {
                        content: format!("{value}\n").into(),
                        mode: old.as_ref().map_or(0o644, |s| s.mode),
                        uid: 0,
                        gid: 0,
                        mtime: 0,
                    },
                );
            }
            Effect::ServiceAction { .. }
            | Effect::DaemonReload
            | Effect::Command { .. }
            | Effect::GuardedCommand { .. }
            | Effect::GrubUpdate(_)
            | Effect::Interrupt(_)
            | Effect::InitramfsUpdate(_) => {}
            Effect::Mount { path, op } => {
                let key = crate::host::effects::plan::normalize(path);
                self.overlay.mounts.insert(key, *op != MountOp::Unmount);
            }
            Effect::ModuleLoad { name, .. } => {
                self.overlay
                    .modules
                    .insert(crate::host::effects::effect::canonical_name(name));
            }
            Effect::Fetch(d) => {
                let key = self.overlay_key(&d.path, true)?;
                let old = self.view_stat(&key, true)?;
                self.plan_parents(&key)?;
                let node = Node::Download {
                    sha256: d.sha256.clone(),
                    mode: d.mode.or(old.as_ref().map(|s| s.mode)).unwrap_or(0o644),
                    uid: d.uid.or(old.as_ref().map(|s| s.uid)).unwrap_or(0),
                    gid: d.gid.or(old.as_ref().map(|s| s.gid)).unwrap_or(0),
                };
                self.overlay.set(key, node);
            }
            Effect::PackageHold { names, hold, .. } => {
                for n in names {
                    self.overlay.holds.insert(n.clone(), *hold);
                }
            }
        }
        Ok(())
    }

    /// The content of symlink `path` as the session sees it; `None` when it is not a symlink.
    pub(crate) fn view_readlink(&self, path: &Path) -> Result<Option<PathBuf>> {
        let key = if self.mode() != crate::host::ExecMode::Apply {
            let key = self.overlay_key(path, false)?;
            if let Some(n) = self.overlay.lookup(&key) {
                return Ok(match n {
                    Node::Symlink { target } => Some(target.clone()),
                    _ => None,
                });
            }
            key
        } else {
            path.to_path_buf()
        };
        match self.root().symlink_metadata(&key)? {
            Some(m) if m.file_type().is_symlink() => Ok(Some(self.root().read_link(&key)?)),
            _ => Ok(None),
        }
    }

    /// Plan the directory of the path locks ([`crate::host::root::pathlock::DIR`]) and its missing
    /// parents (mode 0755, fresh) without an effect: apply mode creates it when it takes its
    /// first lock, so a plan that did not would see a later `fs::mkdir("/var/lib/x")` create
    /// `/var/lib` where the apply finds it. Reports show neither (it is the agent's own
    /// bookkeeping). Nothing when it exists in the session's view.
    ///
    /// # Errors
    /// Resolving or stating the directory or its parents.
    pub(crate) fn overlay_lock_dir(&mut self) -> Result<()> {
        let key = self.overlay_key(Path::new(crate::host::root::pathlock::DIR), true)?;
        if self.view_stat(&key, true)?.is_some() {
            return Ok(());
        }
        self.plan_parents(&key)?;
        let dir = Node::Dir {
            mode: crate::host::root::PARENT_DIR_MODE,
            uid: 0,
            gid: 0,
            fresh: true,
        };
        self.overlay.set(key, dir);
        Ok(())
    }

    /// Plan the missing parent directories of `key` (mode 0755, fresh).
    fn plan_parents(&mut self, key: &Path) -> Result<()> {
        let mut missing = Vec::new();
        for anc in key.ancestors().skip(1) {
            if self.view_stat(anc, true)?.is_some() {
                break;
            }
            missing.push(anc.to_path_buf());
        }
        for p in missing.into_iter().rev() {
            self.overlay.set(
                p,
                Node::Dir {
                    mode: 0o755,
                    uid: 0,
                    gid: 0,
                    fresh: true,
                },
            );
        }
        Ok(())
    }

    fn plan_attrs(
        &mut self,
        path: &Path,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<()> {
        let key = self.overlay_key(path, true)?;
        let Some(s) = self.view_stat(&key, true)? else {
            return Ok(());
        };
        if let Some(Node::Download { sha256, .. }) = self.overlay.lookup(&key) {
            let node = Node::Download {
                sha256: sha256.clone(),
                mode: mode.unwrap_or(s.mode),
                uid: uid.unwrap_or(s.uid),
                gid: gid.unwrap_or(s.gid),
            };
            self.overlay.set(key, node);
            return Ok(());
        }
        let node = if s.kind == "dir" {
            Node::Dir {
                mode: mode.unwrap_or(s.mode),
                uid: uid.unwrap_or(s.uid),
                gid: gid.unwrap_or(s.gid),
                fresh: self.overlay.is_fresh_dir(&key),
            }
        } else {
            Node::File {
                content: self.view_read(&key)?.unwrap_or_default().into(),
                mode: mode.unwrap_or(s.mode),
                uid: uid.unwrap_or(s.uid),
                gid: gid.unwrap_or(s.gid),
                mtime: s.mtime,
            }
        };
        self.overlay.set(key, node);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
