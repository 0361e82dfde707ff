//! The session's read view: what areas read the host through. In apply mode it is the host
//! root; in plan and check mode the root seen through the executor's overlay, so a read sees
//! the planned effects of earlier calls of the session (files, removals, services, packages,
//! modules, mounts, grub's default). A pending batch of line edits is written before a read
//! that bypasses the line view. In plan mode, once the session planned a command it does not
//! run (`run`, `sh`), a read of what it may have touched is unknown ([`Host::check_known`]):
//! a path its arguments name, or one that does not exist (it may have made it).

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use crate::host::ExecMode;
use crate::host::effects::effect::EffectKind;
use crate::host::effects::lines::{Lines, Stamp, View};
use crate::host::effects::overlay::{Stat, normalize, root_stat};
use crate::host::effects::session::Host;
use crate::host::root::EntryKind;
use crate::host::root::error::{HostError, Result};
use crate::host::root::read::MAX_READ_BYTES;

/// What [`Host::view_for_digest`] found at a path.
#[derive(Debug)]
pub(crate) enum ViewedFile {
    /// A planned download: its SHA-256 digest (64 lowercase hex digits), `None` when the
    /// download is not pinned (its digest is unknown until applied).
    Digest(Option<String>),
    /// A planned file: its content.
    Content(bytes::Bytes),
    /// Nothing planned: the host path to open under the root.
    Open(PathBuf),
}

impl Host {
    /// Every existing ancestor of `path` (as the session sees it) must be a directory; the
    /// first missing one ends the check (the rest will be created). Creating functions call
    /// it before reading `path` itself, whose resolution would fail with a less helpful
    /// "not a directory".
    ///
    /// # Errors
    /// [`HostError::BadAncestor`]; resolution failures.
    pub(crate) fn check_creatable(&self, path: &Path) -> Result<()> {
        // Named by the path the call is about, not its first ancestor.
        self.check_known(path)?;
        self.check_ancestors(path, path)
    }

    pub(super) fn check_ancestors(&self, path: &Path, reported: &Path) -> Result<()> {
        let norm = normalize(path);
        // A parent the view found to be a directory was reached through directories only.
        if norm.parent().is_some_and(|p| self.known_dir(p)) {
            return Ok(());
        }
        let ancestors: Vec<&Path> = norm.ancestors().skip(1).collect();
        for anc in ancestors.into_iter().rev() {
            if self.known_dir(anc) {
                continue;
            }
            match self.view_stat(anc, true)? {
                Some(s) if s.kind == "dir" => {
                    if let Some(o) = self.executor.overlay() {
                        o.note_dir(anc);
                    }
                }
                Some(_) => {
                    return Err(HostError::BadAncestor {
                        path: reported.to_path_buf(),
                        ancestor: anc.to_path_buf(),
                        reason: "exists and is not a directory".into(),
                    });
                }
                None => return self.check_not_dangling(anc, reported),
            }
        }
        Ok(())
    }

    /// Plan and check mode: the view already found the normalised `p` to be a directory
    /// and nothing since can have changed it ([`crate::host::effects::overlay::Overlay::known_dir`]),
    /// and no command the plan did not run makes reads unknown ([`Host::check_known`]).
    pub(in crate::host::seam::effects) fn known_dir(&self, p: &Path) -> bool {
        self.planned_commands.is_empty() && self.executor.overlay().is_some_and(|o| o.known_dir(p))
    }

    /// `p` (missing when followed) must not be a dangling symlink.
    pub(super) fn check_not_dangling(&self, p: &Path, reported: &Path) -> Result<()> {
        if self
            .view_stat(p, false)?
            .is_some_and(|s| s.kind == "symlink")
        {
            let target = self
                .view_readlink(p)?
                .map_or_else(String::new, |t| format!(" {}", t.display()));
            return Err(HostError::BadAncestor {
                path: reported.to_path_buf(),
                ancestor: p.to_path_buf(),
                reason: format!("is a dangling symlink (its target{target} does not exist)"),
            });
        }
        Ok(())
    }

    // ---- the view: reads that see planned effects in plan/check mode ----

    /// Metadata of `path` as the session sees it; `follow` follows a final symlink.
    pub(crate) fn view_stat(&self, path: &Path, follow: bool) -> Result<Option<Stat>> {
        self.check_known(path)?;
        self.batch.flush_checked(&self.cx, &*self.executor)?;
        match self.executor.overlay() {
            Some(overlay) => overlay.stat(&self.cx.root, path, follow),
            None => root_stat(&self.cx.root, path, follow),
        }
    }

    /// The session's view of the text file at `path` (module [`crate::host::effects::lines`]), taken out
    /// of the session's cache when it still shows the file, else read and parsed. In apply mode
    /// the file is `stat`ed first and a cached view is used only when its [`Stamp`] equals the
    /// file's, so a change by another process (or a command of this step) is always seen; in
    /// plan and check mode a cached view is valid until the session's next effect (which clears
    /// the cache), and a file is read through the overlay.
    ///
    /// # Errors
    /// A directory at `path`; [`HostError::NotText`]; resolution or read failures.
    pub(crate) fn take_line_view(&mut self, path: &Path, key: &Path) -> Result<View> {
        if self.plans() {
            self.check_known(path)?;
            if let Some(v) = self.texts.remove(key) {
                return Ok(v);
            }
            let content = self.view_read(path)?;
            let exists = content.is_some();
            let lines = Lines::parse(crate::host::root::read::text(
                path,
                content.unwrap_or_default(),
            )?);
            return Ok(View {
                exists,
                lines,
                stamp: None,
            });
        }
        let stamp = match self.host_root().metadata(path)? {
            None => None,
            Some(m) if m.is_dir() => {
                return Err(HostError::WrongKind {
                    path: path.to_path_buf(),
                    what: "is a directory",
                });
            }
            Some(m) => {
                crate::host::root::read::check_regular(path, &m)?;
                Some(Stamp::of(&m))
            }
        };
        if let Some(v) = self.texts.remove(key)
            && v.stamp == stamp
            && v.exists == stamp.is_some()
        {
            return Ok(v);
        }
        // Read after the stat: content newer than the stamp only causes a re-read next time. Read
        // as `read_whole` does: a regular file, non-blocking, at most `MAX_READ_BYTES`.
        let content = match stamp {
            None => None,
            Some(_) => Some(self.host_root().read_regular(path, MAX_READ_BYTES)?),
        };
        let exists = content.is_some();
        Ok(View {
            exists,
            lines: Lines::parse(crate::host::root::read::text(
                path,
                content.unwrap_or_default(),
            )?),
            stamp,
        })
    }

    /// Whether the session renders the diffs of its changes: plan and check mode (unless
    /// [`Host::plan_without_diffs`]), and apply with [`HostOptions::diffs`].
    pub(in crate::host::seam::effects) fn renders_diffs(&self) -> bool {
        match self.executor.overlay() {
            Some(o) => !o.without_diffs,
            None => self.cx.opts.diffs,
        }
    }

    /// Plan and check mode: render no diff of the changes from now on (their
    /// [`crate::host::effects::report::Change::diff`] is `None`), for a plan whose report
    /// nobody reads (the agent's preflight). The old content of a written file is then not
    /// read (nor by an apply); every other read, check and error of the plan stays. No
    /// effect in apply mode.
    pub fn plan_without_diffs(&mut self) {
        if let Some(o) = self.executor.overlay_mut() {
            o.without_diffs = true;
        }
    }

    /// The lines the report's diff of a rewrite of the file at `path` to `new` shows (the
    /// changed lines and 3 of context, as [`crate::host::render_diff`], line ends
    /// trimmed), for a caller that must redact what they reveal; empty when the session
    /// renders no diff (apply without [`HostOptions::diffs`]) or either side is not UTF-8.
    ///
    /// # Errors
    /// Reading the current content.
    pub(crate) fn shown_diff_lines(&self, path: &Path, new: &[u8]) -> Result<Vec<String>> {
        if !self.renders_diffs() {
            return Ok(Vec::new());
        }
        let old = self.view_read(path)?.unwrap_or_default();
        let (Ok(old), Ok(new)) = (std::str::from_utf8(&old), std::str::from_utf8(new)) else {
            return Ok(Vec::new());
        };
        let diff = similar::TextDiff::from_lines(old, new);
        let mut shown = Vec::new();
        for group in diff.grouped_ops(3) {
            for op in &group {
                for change in diff.iter_changes(op) {
                    shown.push(change.value().trim_end_matches(['\n', '\r']).to_string());
                }
            }
        }
        Ok(shown)
    }

    /// Whether the session's executor plans (plan and check mode): its reads see the
    /// effects through the executor's overlay.
    pub(super) fn plans(&self) -> bool {
        self.executor.overlay().is_some()
    }

    /// The executor's read overlay (plan and check mode); `None` when reads go to the real
    /// root.
    pub(super) fn overlay(&self) -> Option<&crate::host::effects::overlay::Overlay> {
        self.executor.overlay()
    }

    /// Where the read view finds the content of the regular file at `path` for a digest: in
    /// plan and check mode a planned download gives its digest and a planned file its
    /// content; otherwise the host path to open under the root (the overlay's resolved key
    /// in plan and check mode, `path` itself in apply).
    ///
    /// # Errors
    /// Resolving the path through the planned symlinks.
    pub(crate) fn view_for_digest(&self, path: &Path) -> Result<ViewedFile> {
        self.check_known(path)?;
        let Some(overlay) = self.executor.overlay() else {
            return Ok(ViewedFile::Open(path.to_path_buf()));
        };
        self.batch.flush_checked(&self.cx, &*self.executor)?;
        let key = overlay.key(&self.cx.root, path, true)?;
        Ok(match overlay.lookup(&key) {
            Some(crate::host::effects::overlay::Node::Download { sha256, .. }) => {
                ViewedFile::Digest(sha256.clone())
            }
            Some(crate::host::effects::overlay::Node::File { content, .. }) => {
                ViewedFile::Content(content.bytes().map_err(|e| {
                    crate::host::effects::overlay::spill_error(&self.cx.root, path, e)
                })?)
            }
            _ => ViewedFile::Open(key),
        })
    }

    /// The SHA-256 (64 lowercase hex digits) of the regular file at `path` as the session
    /// sees it, streamed from the root (never read whole); `None` when there is no regular
    /// file there or its digest is unknown (a download the plan only plans, unpinned).
    ///
    /// # Errors
    /// Resolution or read failures; a FIFO or device at `path` (not opened for reading).
    pub(crate) fn view_digest(&self, path: &Path) -> Result<Option<String>> {
        if self.view_stat(path, true)?.is_none_or(|s| s.kind != "file") {
            return Ok(None);
        }
        Ok(match self.view_for_digest(path)? {
            ViewedFile::Digest(d) => d,
            ViewedFile::Content(c) => Some(crate::host::root::digest::sha256_tag(&c)[7..].into()),
            ViewedFile::Open(key) => {
                let mut f = self.cx.root.open_regular(&key)?;
                let (_, d) = crate::host::root::digest::sha256_stream(&mut f).map_err(|e| {
                    crate::host::root::RootError {
                        op: "read",
                        path: path.to_path_buf(),
                        root: self.cx.root.mount().to_path_buf(),
                        source: e,
                    }
                })?;
                Some(d)
            }
        })
    }

    /// The read view of a unit's state (active, enabled) as earlier effects of this session
    /// planned it; `(None, None)` in apply mode, where the host itself answers.
    pub(crate) fn planned_service(&self, name: &str) -> (Option<bool>, Option<bool>) {
        self.executor
            .overlay()
            .and_then(|o| o.services.get(name).copied())
            .unwrap_or_default()
    }

    /// The release grub boots next as this session planned it (`kernel::set_default`);
    /// `None` in apply mode or when nothing was planned.
    pub(crate) fn planned_grub_default(&self) -> Option<String> {
        self.overlay().and_then(|o| o.grub_default.clone())
    }

    /// The packages earlier effects of this session planned to install (plan and check
    /// mode; empty in apply mode).
    pub(crate) fn planned_installs(&self) -> impl Iterator<Item = &str> {
        self.overlay()
            .into_iter()
            .flat_map(|o| o.packages.iter())
            .filter(|(_, installed)| **installed)
            .map(|(n, _)| n.as_str())
    }

    /// The packages this session installed (apply: the names of its `package_install`
    /// changes) or planned to install (plan and check: [`Host::planned_installs`]).
    pub(crate) fn session_installs(&self) -> Vec<&str> {
        if self.plans() {
            return self.planned_installs().collect();
        }
        self.report
            .changes
            .iter()
            .filter(|c| c.kind == EffectKind::PackageInstall.name())
            .flat_map(|c| c.target.split(' '))
            .collect()
    }

    /// The summaries of the guarded commands this session planned (plan and check mode; in
    /// apply mode they ran, and the host shows what they did), in order.
    pub(crate) fn planned_guarded_commands(&self) -> impl Iterator<Item = &str> {
        let planned = if self.plans() {
            self.report.changes.as_slice()
        } else {
            &[]
        };
        planned
            .iter()
            .filter(|c| c.kind == "guarded_command")
            .map(|c| c.summary.as_str())
    }

    /// The read view of a package's presence (`name` as given to `pkg::install` or
    /// `pkg::remove`) as earlier effects of this session planned it; `None` in apply mode or
    /// when nothing was planned.
    pub(crate) fn planned_package(&self, name: &str) -> Option<bool> {
        self.executor
            .overlay()
            .and_then(|o| o.packages.get(name).copied())
    }

    /// The read view of a package hold as earlier effects of this session planned it; `None`
    /// in apply mode or when nothing was planned.
    pub(crate) fn planned_hold(&self, name: &str) -> Option<bool> {
        self.executor
            .overlay()
            .and_then(|o| o.holds.get(name).copied())
    }

    /// Whether an earlier effect of this session planned to load kernel module `name` (as
    /// the kernel names it, `-` read as `_`); always false in apply mode.
    pub(crate) fn planned_module_load(&self, name: &str) -> bool {
        self.executor
            .overlay()
            .is_some_and(|o| o.modules.contains(name))
    }

    /// The read view of a mount point (normalised host path) as earlier effects of this
    /// session planned it: mounted (`true`) or unmounted; `None` in apply mode or when
    /// nothing was planned.
    pub(crate) fn planned_mount(&self, path: &Path) -> Option<bool> {
        self.executor
            .overlay()
            .and_then(|o| o.mounts.get(path).copied())
    }

    /// Content of the file at `path` (following symlinks); `None` when absent. A file on disk
    /// is read with [`crate::host::root::read::read_whole`]: regular files of at most
    /// [`crate::host::root::read::MAX_READ_BYTES`] only.
    ///
    /// # Errors
    /// [`HostError::WrongKind`] for a directory; [`HostError::NotRegular`],
    /// [`HostError::FileTooLarge`]; resolution or read failures.
    pub(crate) fn view_read(&self, path: &Path) -> Result<Option<Vec<u8>>> {
        self.check_known(path)?;
        self.batch.flush_checked(&self.cx, &*self.executor)?;
        match self.executor.overlay() {
            Some(overlay) => overlay.read(&self.cx.root, path),
            None => crate::host::root::read::read_whole(&self.cx.root, path, path),
        }
    }

    /// Entries of directory `dir` (name, kind), sorted by name; `None` when absent.
    pub(crate) fn view_list(&self, dir: &Path) -> Result<Option<Vec<(String, EntryKind)>>> {
        self.check_known_as(dir, true)?;
        self.batch.flush_checked(&self.cx, &*self.executor)?;
        let overlay = self.executor.overlay();
        let key = match overlay {
            Some(o) => o.key(&self.cx.root, dir, true)?,
            None => dir.to_path_buf(),
        };
        let stat = self.view_stat(&key, true)?;
        match stat {
            None => return Ok(None),
            Some(s) if s.kind != "dir" => {
                return Err(HostError::WrongKind {
                    path: dir.to_path_buf(),
                    what: "is not a directory",
                });
            }
            Some(_) => {}
        }
        let mut out: BTreeMap<String, EntryKind> = BTreeMap::new();
        let fresh = overlay.is_some_and(|o| o.is_fresh_dir(&key));
        if !fresh
            && let Some(m) = self.cx.root.metadata(&key)?
            && m.is_dir()
        {
            for e in self.cx.root.read_dir(&key)? {
                out.insert(e.name.to_string_lossy().into_owned(), e.kind);
            }
        }
        if let Some(o) = overlay {
            out.retain(|name, _| o.lookup(&key.join(name)).is_none_or(|n| !n.is_absent()));
            for (name, kind) in o.children(&key) {
                out.insert(name, kind);
            }
        }
        Ok(Some(out.into_iter().collect()))
    }

    /// The content of symlink `path` as the session sees it; `None` when it is not a symlink.
    ///
    /// # Errors
    /// Resolution or read failures.
    pub(crate) fn view_readlink(&self, path: &Path) -> Result<Option<PathBuf>> {
        self.check_known(path)?;
        if let Some(overlay) = self.executor.overlay() {
            self.batch.flush_checked(&self.cx, &*self.executor)?;
            return overlay.readlink(&self.cx.root, path);
        }
        let root = self.host_root();
        match root.symlink_metadata(path)? {
            Some(m) if m.file_type().is_symlink() => Ok(Some(root.read_link(path)?)),
            _ => Ok(None),
        }
    }
}

/// Symlinks followed at most when the view resolves a path (as the kernel's `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

impl Host {
    /// The host path `path` resolves to as the session sees it (symlinks followed, the
    /// plan's own links included in plan and check mode, at most 40); `None` when nothing
    /// is there.
    ///
    /// # Errors
    /// [`crate::host::HostError::PlanUnknown`]; resolution failures; a loop of more than
    /// 40 links is `None`, as a dangling one.
    pub(crate) fn view_canonical(&self, path: &Path) -> Result<Option<PathBuf>> {
        self.check_known(path)?;
        self.batch.flush_checked(&self.cx, &*self.executor)?;
        let Some(overlay) = self.executor.overlay() else {
            return Ok(self.cx.root.canonical(path)?);
        };
        let mut at = normalize(path);
        for _ in 0..MAX_LINKS {
            let key = overlay.key(&self.cx.root, &at, true)?;
            match overlay.lookup(&key) {
                Some(crate::host::effects::overlay::Node::Symlink { target }) => {
                    let dir = key.parent().unwrap_or(Path::new("/"));
                    at = normalize(&dir.join(target));
                }
                Some(crate::host::effects::overlay::Node::Absent) => return Ok(None),
                Some(_) => return Ok(Some(key)),
                None => return Ok(self.cx.root.canonical(&key)?),
            }
        }
        Ok(None)
    }

    /// What a removal of `path` with everything below it would refuse (mount points at or
    /// below it, [`HostRoot::remove_all_check`]), checked where the session sees `path`
    /// (through the plan's links in plan and check mode). An apply checks nothing here: it
    /// checks where it removes (the undo journal before it moves the tree aside, else
    /// `HostRoot::remove_all` before its removing walk), once.
    ///
    /// # Errors
    /// Mount points; resolution, `statx` or listing failures.
    pub(crate) fn check_remove_all(&self, path: &Path) -> Result<()> {
        if self.mode() == ExecMode::Apply {
            return Ok(());
        }
        self.check_known(path)?;
        self.batch.flush_checked(&self.cx, &*self.executor)?;
        let at = match self.executor.overlay() {
            Some(overlay) => overlay.key(&self.cx.root, path, false)?,
            None => path.to_path_buf(),
        };
        Ok(self.cx.root.remove_all_check(&at)?)
    }
}

#[cfg(test)]
mod tests {
    use crate::host::ExecMode;
    use crate::host::files::fs;
    use crate::host::testutil::TestHost;

    /// `normalize`'s copy of a path that is normal already gives what its rebuild gives.
    #[test]
    fn normalize_copies_only_normal_paths() {
        use crate::host::root::normalize;
        let cases = [
            ("/", "/"),
            ("//", "/"),
            ("/a//b", "/a/b"),
            ("/a/./b", "/a/b"),
            ("/a/../b", "/b"),
            ("/a/b/", "/a/b"),
            ("/a/b/.", "/a/b"),
            ("a/b", "/a/b"),
            ("/..", "/"),
            ("/.hidden/..b/.c.", "/.hidden/..b/.c."),
            ("/etc/x.d/f.conf", "/etc/x.d/f.conf"),
        ];
        for (p, want) in cases {
            assert_eq!(normalize(std::path::Path::new(p)).as_os_str(), want, "{p}");
        }
    }

    /// Issue 31: the plan checks a change's ancestors once and remembers them as
    /// directories, but a planned change that takes a directory away (a removal, a file
    /// written in its place after it) is seen by the next check, as an apply sees it.
    #[test]
    fn a_plan_sees_a_directory_it_replaced_by_a_file() {
        let t = TestHost::new();
        t.file("/etc/d/old", "x\n");
        let mut h = t.host(ExecMode::Plan);
        fs::write(&mut h, "/etc/d/a", "a\n", &Default::default()).unwrap();
        fs::remove_all(&mut h, "/etc/d").unwrap();
        fs::write(&mut h, "/etc/d", "now a file\n", &Default::default()).unwrap();
        let e = fs::write(&mut h, "/etc/d/b", "b\n", &Default::default()).unwrap_err();
        assert!(
            e.to_string()
                .contains("/etc/d exists and is not a directory"),
            "{e}"
        );
        // A symlink's target taken away is seen through the symlink too.
        t.file("/opt/t/f", "x\n");
        std::os::unix::fs::symlink("/opt/t", t.p("/etc/l")).unwrap();
        let mut h = t.host(ExecMode::Plan);
        fs::write(&mut h, "/etc/l/a", "a\n", &Default::default()).unwrap();
        fs::remove_all(&mut h, "/opt/t").unwrap();
        fs::write(&mut h, "/opt/t", "file\n", &Default::default()).unwrap();
        let e = fs::write(&mut h, "/etc/l/b", "b\n", &Default::default()).unwrap_err();
        assert!(e.to_string().contains("/etc/l"), "{e}");
    }
}
