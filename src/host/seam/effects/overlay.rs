//! The read overlay of a plan or check session: what the session's effects would have made
//! of the host, so later reads of the same session see it.
//!
//! The overlay maps *resolved* host paths (symlinks followed through the real root where they
//! exist) to what the session planned there: a file with content and attributes, a directory,
//! a symlink, or nothing (removed). A removed tree hides everything beneath it; a directory
//! the plan creates ("fresh") hides whatever the real root had under that name. Planned
//! service states and package installs are kept too, so `service::is_active` after a planned
//! `start` and `pkg::installed` after a planned `install` answer as after an apply.
//!
//! Memory: the content of planned files is held in memory up to [`HELD_LIMIT`] (64 MiB) in
//! all, for the whole session (a dry run's or the preflight's mode, however many steps);
//! past it, the content of each further planned file is written to one unlinked temporary
//! file of the session ([`tempfile::tempfile`]: `O_TMPFILE` in `$TMPDIR`, else `/tmp`;
//! nothing is left behind) and read back when a later call reads that file. Should the
//! temporary file fail (disk full), the content is held in memory after all.
//!
//! Limits (documented, harmless for idempotence): symlinks planned in the same session are
//! not followed by later reads; mtimes of planned files are the real ones when the file
//! existed, else 0.
//!
//! Real-root lookups: a plan changes nothing, so what the real root answers for a path (its
//! resolution through symlinks, its metadata, the content of a small file it read) is
//! remembered for the session ([`RootMemo`]); the ancestors that every planned change checks
//! are then resolved once, not once per change and per check, and a file read again (a
//! sysctl's value by `sysctl::get`, `set` and the change's summary; `/etc/os-release`) is
//! read once. One lookup of a path gives both its resolution and its metadata. What the
//! plan itself planned is always looked up first. The session forgets it when it runs a
//! command (a query may touch the host: [`Overlay::forget_root`]), except the package and
//! service state queries host functions compose themselves (`dpkg-query -W`, `rpm -q`,
//! `systemctl is-active|is-enabled|show`), which only read it
//! ([`crate::host::Host::exec_state_query`]). Failures are not remembered. What is
//! remembered is bounded (`root_memo`): by the plan's budget in serve (a lookup past it
//! fails the plan), by 64 MiB in a plan without one (past it, asked again each time).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::host::effects::effect::{Effect, MountOp, ServiceOp};
use crate::host::root::error::{HostError, Result};
use crate::host::root::{EntryKind, HostRoot};

mod root_memo;
use root_memo::{MEMO_BYTES, MEMO_FILE_BYTES, RootMemo, memo_cost};
#[cfg(test)]
pub(crate) use root_memo::{MEMO_ENTRY_BYTES, MEMO_LOCAL_BYTES};

/// Lexical normalisation of a host path, as chroot resolution treats `..` at the root.
pub(crate) use crate::host::root::normalize;

/// A file system object as the session sees it (`fs::stat`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Stat {
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: String,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
    /// Owner uid.
    pub uid: u32,
    /// Group gid.
    pub gid: u32,
    /// Modification time, seconds since the Unix epoch.
    pub mtime: i64,
}

/// Planned file content held by one overlay in memory, in all, in bytes (64 MiB); past it,
/// content is spilled to a temporary file (module docs).
pub(crate) const HELD_LIMIT: usize = 64 << 20;

/// The content of a planned file.
#[derive(Debug, Clone)]
pub(crate) enum Planned {
    /// In memory, shared with the effect that planned it (and the line view's rendering).
    Held(bytes::Bytes),
    /// `len` bytes at `offset` of the overlay's spill file.
    Spilled {
        file: Arc<std::fs::File>,
        offset: u64,
        len: u64,
    },
}

impl Planned {
    /// Size in bytes.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Planned::Held(b) => b.len() as u64,
            Planned::Spilled { len, .. } => *len,
        }
    }

    /// The content: the shared buffer when held, else read back from the spill file.
    ///
    /// # Errors
    /// Reading the spill file.
    pub(crate) fn bytes(&self) -> std::io::Result<bytes::Bytes> {
        match self {
            Planned::Held(b) => Ok(b.clone()),
            Planned::Spilled { file, offset, len } => {
                let mut buf = vec![0; usize::try_from(*len).unwrap_or(usize::MAX)];
                file.read_exact_at(&mut buf, *offset)?;
                Ok(buf.into())
            }
        }
    }

    /// Bytes this content holds in memory.
    fn held(&self) -> usize {
        match self {
            Planned::Held(b) => b.len(),
            Planned::Spilled { .. } => 0,
        }
    }
}

/// The spill file of an overlay: created on first use, appended to.
#[derive(Debug, Default)]
struct Spill {
    file: Option<Arc<std::fs::File>>,
    end: u64,
}

impl Spill {
    /// Append `content`; returns where it is.
    fn put(&mut self, content: &[u8]) -> std::io::Result<Planned> {
        let file = match &self.file {
            Some(f) => f.clone(),
            None => self.file.insert(Arc::new(tempfile::tempfile()?)).clone(),
        };
        file.write_all_at(content, self.end)?;
        let offset = self.end;
        self.end += content.len() as u64;
        Ok(Planned::Spilled {
            file,
            offset,
            len: content.len() as u64,
        })
    }
}

/// The error of reading the planned content of `path` back from the spill file.
pub(crate) fn spill_error(root: &HostRoot, path: &Path, source: std::io::Error) -> HostError {
    HostError::Root(crate::host::root::RootError {
        op: "read the planned content (spilled to a temporary file) of",
        path: path.to_path_buf(),
        root: root.mount().to_path_buf(),
        source,
    })
}

/// One planned object.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    File {
        /// In memory or spilled ([`Planned`]).
        content: Planned,
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
    /// A file `fs::fetch` would download (`copied` false) or a copy would stream from
    /// another file (`copied` true, [`Effect::CopyFile`]): its digest is known when pinned,
    /// its content is not read.
    Download {
        sha256: Option<String>,
        copied: bool,
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
            } => ("file", content.len(), *mode, *uid, *gid, *mtime),
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

    /// File content, `Ok(None)` when absent, `Err(reason)` for a directory; `Ok(Some(Err))`
    /// when spilled content cannot be read back.
    #[allow(clippy::type_complexity)]
    pub(crate) fn content(
        &self,
    ) -> std::result::Result<Option<std::io::Result<Vec<u8>>>, &'static str> {
        match self {
            Node::File { content, .. } => Ok(Some(content.bytes().map(|b| b.to_vec()))),
            Node::Dir { .. } => Err("is a directory"),
            Node::Symlink { .. } | Node::Absent => Ok(None),
            Node::Download { copied: false, .. } => Err(
                "is downloaded by fs::fetch only when applied: its content is unknown in a plan",
            ),
            Node::Download { copied: true, .. } => Err(
                "is copied (fs::copy_tree, fs::extract) only when applied: its content is not read in a plan",
            ),
        }
    }

    /// Bytes of planned content this node holds in memory.
    pub(crate) fn held(&self) -> usize {
        match self {
            Node::File { content, .. } => content.held(),
            _ => 0,
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
    pub(crate) nodes: BTreeMap<PathBuf, Node>,
    /// What a plan step replaced in `nodes`, to put back if it fails (`session::step_view`).
    pub(crate) step_log: Option<Vec<(PathBuf, Option<Node>)>>,
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
    /// The kernel release `kernel::set_default` planned grub to boot next.
    pub(crate) grub_default: Option<String>,
    /// Bytes of planned content held in memory by `nodes` (at most about [`HELD_LIMIT`]).
    pub(crate) held: usize,
    /// Where content past [`HELD_LIMIT`] goes.
    spill: Spill,
    /// What the real root answered (module docs, "Real-root lookups").
    memo: RefCell<RootMemo>,
    /// Paths the view found to be directories (symlinks followed), by normalised path, for
    /// the ancestor checks of every change: kept until a planned change other than a new
    /// directory or file ([`Overlay::set`]), or a command ([`Overlay::forget_root`]).
    dirs: RefCell<std::collections::BTreeSet<std::ffi::OsString>>,
    /// The path lock directory is in the session's view ([`Overlay::plan_lock_dir`] found or
    /// planned it); cleared by a planned removal and when the root is forgotten.
    lock_dir_seen: std::cell::Cell<bool>,
    /// A plan whose diffs nobody reads (the agent's preflight): its session renders none
    /// ([`crate::host::Host::plan_without_diffs`]).
    pub(crate) without_diffs: bool,
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

    /// Plan `n` at the key `p`; the known directories ([`Overlay::known_dir`]) are forgotten
    /// unless `n` is a fresh directory (planned where nothing was).
    fn set(&mut self, p: PathBuf, n: Node) {
        let keeps_dirs = matches!(n, Node::Dir { fresh: true, .. });
        self.set_keeping_dirs(p, n, keeps_dirs);
    }

    /// [`Overlay::set`]; `keeps_dirs`: nothing or a file was at `p` (no directory changes).
    fn set_keeping_dirs(&mut self, p: PathBuf, n: Node, keeps_dirs: bool) {
        if !keeps_dirs {
            self.dirs.get_mut().clear();
        }
        if matches!(n, Node::Absent) {
            self.lock_dir_seen.set(false);
            // Everything planned beneath is gone too.
            let below: Vec<PathBuf> = self
                .nodes
                .range(p.clone()..)
                .map(|(k, _)| k.clone())
                .take_while(|k| k.starts_with(&p))
                .filter(|k| k != &p)
                .collect();
            for k in below {
                self.take_node(k);
            }
        }
        self.put_node(p, n);
    }

    /// `content` as a planned file's content: held in memory while the overlay holds at
    /// most [`HELD_LIMIT`] with it, else spilled (module docs).
    fn plan_content(&mut self, content: bytes::Bytes) -> Planned {
        if self.held + content.len() <= HELD_LIMIT {
            return Planned::Held(content);
        }
        match self.spill.put(&content) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    bytes = content.len(),
                    "cannot spill planned content to a temporary file: held in memory"
                );
                Planned::Held(content)
            }
        }
    }

    /// Bytes of planned content held in memory.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held
    }
}

impl Overlay {
    /// The overlay key of a host path: lexically normalised, and with symlinks resolved
    /// through the real root where the path (or its parent) exists.
    ///
    /// # Errors
    /// Resolution failures in the real root.
    pub(crate) fn key(&self, root: &HostRoot, path: &Path, follow: bool) -> Result<PathBuf> {
        let n = normalize(path);
        if self.lookup(&n).is_some() || n == Path::new("/") {
            return Ok(n);
        }
        if follow && let Some(c) = self.root_canonical(root, &n)? {
            return Ok(c);
        }
        if let (Some(parent), Some(name)) = (n.parent(), n.file_name())
            && let Some(c) = self.root_canonical(root, parent)?
        {
            let key = c.join(name);
            let mut m = self.memo.borrow_mut();
            // `n` was not found with symlinks followed: nor is its key in the same parent.
            if follow
                && m.absent.contains(&n)
                && !m.stats[1].contains_key(&key)
                && m.admit(&key, memo_cost(&key, 0))?
            {
                m.stats[1].insert(key.clone(), None);
            }
            return Ok(key);
        }
        Ok(n)
    }

    /// [`HostRoot::canonical`] of the normalised `n`, remembered (module docs). The same
    /// lookup's metadata is remembered for the canonical path (symlinks followed), and a
    /// missing `n` as missing ([`RootMemo::absent`]).
    fn root_canonical(&self, root: &HostRoot, n: &Path) -> Result<Option<PathBuf>> {
        if let Some(c) = self.memo.borrow().canonical.get(n) {
            return Ok(c.clone());
        }
        let found = root.canonical_metadata(n)?;
        let mut m = self.memo.borrow_mut();
        #[cfg(test)]
        {
            m.asked += 1;
        }
        let (c, meta) = match found {
            Some((c, meta)) => (c, Some(meta)),
            None => (None, None),
        };
        // The canonical path, its metadata when not known yet, or `n` as absent.
        let with_stat = c.as_ref().filter(|c| !m.stats[1].contains_key(*c));
        let cost = memo_cost(n, c.as_ref().map_or(0, |c| c.as_os_str().len()))
            + with_stat.map_or(0, |c| memo_cost(c, 0))
            + if meta.is_none() { memo_cost(n, 0) } else { 0 };
        if !m.admit(n, cost)? {
            return Ok(c);
        }
        match (&c, meta) {
            (Some(c), Some(meta)) => {
                m.stats[1]
                    .entry(c.clone())
                    .or_insert_with(|| Some(stat_of(&meta)));
            }
            (_, None) => {
                m.absent.insert(n.to_path_buf());
            }
            _ => {}
        }
        m.canonical.insert(n.to_path_buf(), c.clone());
        Ok(c)
    }

    /// [`root_stat`] of the overlay key `key`, remembered (module docs).
    fn root_stat(&self, root: &HostRoot, key: &Path, follow: bool) -> Result<Option<Stat>> {
        if let Some(s) = self.memo.borrow().stats[usize::from(follow)].get(key) {
            return Ok(s.clone());
        }
        let s = root_stat(root, key, follow)?;
        let mut m = self.memo.borrow_mut();
        #[cfg(test)]
        {
            m.asked += 1;
        }
        if m.admit(key, memo_cost(key, 0))? {
            m.stats[usize::from(follow)].insert(key.to_path_buf(), s.clone());
        }
        Ok(s)
    }

    /// How many lookups went to the real root ([`RootMemo`]).
    #[cfg(test)]
    pub(crate) fn root_lookups(&self) -> usize {
        self.memo.borrow().asked
    }

    /// Hold the memo of real-root lookups ([`RootMemo`]) to a plan's budget: `limit`
    /// bytes (`--plan-bytes`), of which its planned effects hold `planned`; `None`: no
    /// budget ([`MEMO_LOCAL_BYTES`]).
    pub(crate) fn bound_memo(&self, planned: u64, limit: Option<u64>) {
        self.memo.borrow_mut().budget = limit.map(|l| (planned, l));
    }

    /// What the memo of real-root lookups holds, in bytes ([`MEMO_ENTRY_BYTES`] an
    /// answer, with its paths and content).
    pub(crate) fn memo_bytes(&self) -> u64 {
        self.memo.borrow().bytes
    }

    /// Answers the memo of real-root lookups holds.
    #[cfg(test)]
    pub(crate) fn memo_entries(&self) -> usize {
        self.memo.borrow().entries()
    }

    /// Forget what the real root answered: a command may have changed it (module docs).
    pub(crate) fn forget_root(&self) {
        let mut m = self.memo.borrow_mut();
        m.canonical.clear();
        m.stats.iter_mut().for_each(HashMap::clear);
        m.contents.clear();
        m.content_bytes = 0;
        m.absent.clear();
        m.bytes = 0;
        self.lock_dir_seen.set(false);
        self.dirs.borrow_mut().clear();
    }

    /// Whether the view found `p` (normalised) to be a directory and nothing planned since
    /// can have changed that ([`Overlay::note_dir`]).
    pub(crate) fn known_dir(&self, p: &Path) -> bool {
        self.dirs.borrow().contains(p.as_os_str())
    }

    /// The view found `p` (normalised, symlinks followed) to be a directory.
    pub(crate) fn note_dir(&self, p: &Path) {
        self.dirs.borrow_mut().insert(p.as_os_str().to_os_string());
    }

    /// Metadata of `path` as planned, else as the real root has it; `follow` follows a
    /// final symlink.
    ///
    /// # Errors
    /// Resolution failures.
    pub(crate) fn stat(&self, root: &HostRoot, path: &Path, follow: bool) -> Result<Option<Stat>> {
        let key = self.key(root, path, follow)?;
        self.stat_key(root, &key, follow)
    }

    /// [`Overlay::stat`] of a key [`Overlay::key`] returned (with the same `follow`).
    fn stat_key(&self, root: &HostRoot, key: &Path, follow: bool) -> Result<Option<Stat>> {
        if let Some(hit) = self.lookup(key) {
            return Ok(hit.stat());
        }
        self.root_stat(root, key, follow)
    }

    /// Content of the file at `path` as planned, else read from the real root with
    /// [`crate::host::root::read::read_whole`] (remembered: [`RootMemo`]); `None` when absent.
    ///
    /// # Errors
    /// [`HostError::WrongKind`] for a directory or a planned download; the read's errors.
    pub(crate) fn read(&self, root: &HostRoot, path: &Path) -> Result<Option<Vec<u8>>> {
        let key = self.key(root, path, true)?;
        if let Some(hit) = self.lookup(&key) {
            return match hit.content() {
                Ok(None) => Ok(None),
                Ok(Some(c)) => c.map(Some).map_err(|e| spill_error(root, path, e)),
                Err(what) => Err(HostError::WrongKind {
                    path: path.to_path_buf(),
                    what,
                }),
            };
        }
        if let Some(c) = self.memo.borrow().contents.get(&key) {
            return Ok(c.as_ref().map(|b| b.to_vec()));
        }
        let read = crate::host::root::read::read_whole(root, &key, path)?;
        let mut m = self.memo.borrow_mut();
        #[cfg(test)]
        {
            m.asked += 1;
        }
        let len = read.as_ref().map_or(0, Vec::len);
        if len <= MEMO_FILE_BYTES
            && m.content_bytes + len <= MEMO_BYTES
            && m.admit(&key, memo_cost(&key, len))?
        {
            m.content_bytes += len;
            let kept = read.as_ref().map(|c| bytes::Bytes::copy_from_slice(c));
            m.contents.insert(key, kept);
        }
        Ok(read)
    }

    /// The target of symlink `path` as planned, else as the real root has it; `None` when it
    /// is not a symlink.
    ///
    /// # Errors
    /// Resolution or read failures.
    pub(crate) fn readlink(&self, root: &HostRoot, path: &Path) -> Result<Option<PathBuf>> {
        let key = self.key(root, path, false)?;
        if let Some(n) = self.lookup(&key) {
            return Ok(match n {
                Node::Symlink { target } => Some(target.clone()),
                _ => None,
            });
        }
        match root.symlink_metadata(&key)? {
            Some(m) if m.file_type().is_symlink() => Ok(Some(root.read_link(&key)?)),
            _ => Ok(None),
        }
    }

    /// Record `effect` in the overlay so later reads see it.
    pub(crate) fn record(&mut self, root: &HostRoot, effect: &Effect) -> Result<()> {
        match effect {
            Effect::WriteFile {
                path,
                content,
                mode,
                uid,
                gid,
            } => {
                let key = self.key(root, path, true)?;
                let old = self.stat_key(root, &key, true)?;
                self.plan_parents(root, &key)?;
                let node = Node::File {
                    content: self.plan_content(content.clone()),
                    mode: mode.or(old.as_ref().map(|s| s.mode)).unwrap_or(0o644),
                    uid: uid.or(old.as_ref().map(|s| s.uid)).unwrap_or(0),
                    gid: gid.or(old.as_ref().map(|s| s.gid)).unwrap_or(0),
                    mtime: old.as_ref().map_or(0, |s| s.mtime),
                };
                let keeps_dirs = old.is_none_or(|s| s.kind == "file");
                self.set_keeping_dirs(key, node, keeps_dirs);
            }
            Effect::CopyFile {
                path,
                sha256,
                mode,
                uid,
                gid,
                ..
            } => {
                let key = self.key(root, path, true)?;
                let old = self.stat_key(root, &key, true)?;
                self.plan_parents(root, &key)?;
                let node = Node::Download {
                    sha256: sha256.clone(),
                    copied: true,
                    mode: mode.or(old.as_ref().map(|s| s.mode)).unwrap_or(0o644),
                    uid: uid.or(old.as_ref().map(|s| s.uid)).unwrap_or(0),
                    gid: gid.or(old.as_ref().map(|s| s.gid)).unwrap_or(0),
                };
                self.set(key, node);
            }
            Effect::RemoveFile { path } | Effect::RemoveAll { path } => {
                let key = self.key(root, path, false)?;
                self.set(key, Node::Absent);
            }
            Effect::Mkdir { path, mode } => {
                let key = self.key(root, path, true)?;
                let old = self.stat_key(root, &key, true)?;
                self.plan_parents(root, &key)?;
                let node = Node::Dir {
                    mode: *mode,
                    uid: old.as_ref().map_or(0, |s| s.uid),
                    gid: old.as_ref().map_or(0, |s| s.gid),
                    fresh: old.is_none() || self.is_fresh_dir(&key),
                };
                self.set(key, node);
            }
            Effect::Chmod { path, mode } => self.plan_attrs(root, path, Some(*mode), None, None)?,
            Effect::Chown { path, uid, gid } => self.plan_attrs(root, path, None, *uid, *gid)?,
            Effect::SetMtime { path, mtime } => self.plan_mtime(root, path, *mtime)?,
            Effect::Symlink { target, link } => {
                let key = self.key(root, link, false)?;
                self.plan_parents(root, &key)?;
                self.set(
                    key,
                    Node::Symlink {
                        target: target.clone(),
                    },
                );
            }
            Effect::Service { name, op } => {
                let e = self.services.entry(name.clone()).or_default();
                match op {
                    ServiceOp::Start => e.0 = Some(true),
                    ServiceOp::Stop => e.0 = Some(false),
                    ServiceOp::Enable => e.1 = Some(true),
                    ServiceOp::Disable => e.1 = Some(false),
                }
            }
            Effect::PackageInstall { names, manager, .. } => {
                for n in names {
                    self.packages.insert(n.clone(), true);
                    // A pinned version (`name=1.2`) installs the package itself too.
                    let spec = crate::host::effects::effect::parse_spec(*manager, n);
                    if spec.version.is_some() {
                        self.packages.insert(spec.name, true);
                    }
                }
            }
            Effect::PackageRemove { names, .. } => {
                for n in names {
                    self.packages.insert(n.clone(), false);
                }
            }
            Effect::Sysctl { key, value } => {
                let path = crate::host::effects::effect::sysctl_proc_path(key)?;
                let k = self.key(root, &path, true)?;
                let old = self.stat(root, &k, true)?;
                self.set(
                    k,
                    Node::File {
                        content: Planned::Held(format!("{value}\n").into()),
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
            | Effect::PackageUpgrade { .. }
            | Effect::InitramfsUpdate(_) => {}
            Effect::Mount { path, op } => {
                let key = normalize(path);
                self.mounts.insert(key, *op != MountOp::Unmount);
            }
            Effect::ModuleLoad { name, .. } => {
                self.modules
                    .insert(crate::host::effects::effect::canonical_name(name));
            }
            Effect::Fetch(d) => {
                let key = self.key(root, &d.path, true)?;
                let old = self.stat_key(root, &key, true)?;
                self.plan_parents(root, &key)?;
                let node = Node::Download {
                    sha256: d.sha256.clone(),
                    copied: false,
                    mode: d.mode.or(old.as_ref().map(|s| s.mode)).unwrap_or(0o644),
                    uid: d.uid.or(old.as_ref().map(|s| s.uid)).unwrap_or(0),
                    gid: d.gid.or(old.as_ref().map(|s| s.gid)).unwrap_or(0),
                };
                self.set(key, node);
            }
            Effect::PackageHold { names, hold, .. } => {
                for n in names {
                    self.holds.insert(n.clone(), *hold);
                }
            }
            Effect::GrubDefault { release, .. } => {
                self.grub_default = Some(release.clone());
            }
            Effect::TunedProfile { names } => {
                // tuned records the active profile's names in this file (empty after off).
                let path = Path::new(crate::host::effects::effect::TUNED_ACTIVE_PROFILE);
                let key = self.key(root, path, true)?;
                let old = self.stat_key(root, &key, true)?;
                self.plan_parents(root, &key)?;
                let content = if names.is_empty() {
                    String::new()
                } else {
                    format!("{}\n", names.join(" "))
                };
                self.set(
                    key,
                    Node::File {
                        content: Planned::Held(content.into()),
                        mode: old.as_ref().map_or(0o644, |s| s.mode),
                        uid: 0,
                        gid: 0,
                        mtime: 0,
                    },
                );
            }
        }
        Ok(())
    }

    /// Plan the directory of the path locks ([`crate::host::root::pathlock::DIR`]) and its missing
    /// parents (mode 0755, fresh) without an effect: apply mode creates it when it takes its
    /// first lock, so a plan that did not would see a later `fs::mkdir("/var/lib/x")` create
    /// `/var/lib` where the apply finds it. Reports show neither (it is the agent's own
    /// bookkeeping). Nothing when it exists in the session's view.
    ///
    /// # Errors
    /// Resolving or stating the directory or its parents.
    pub(crate) fn plan_lock_dir(&mut self, root: &HostRoot) -> Result<()> {
        // Once seen, it stays until a planned removal (or a command) may have taken it.
        if self.lock_dir_seen.get() {
            return Ok(());
        }
        let key = self.key(root, Path::new(crate::host::root::pathlock::DIR), true)?;
        if self.stat_key(root, &key, true)?.is_none() {
            self.plan_parents(root, &key)?;
            let dir = Node::Dir {
                mode: crate::host::root::PARENT_DIR_MODE,
                uid: 0,
                gid: 0,
                fresh: true,
            };
            self.set(key, dir);
        }
        self.lock_dir_seen.set(true);
        Ok(())
    }

    /// Plan the missing parent directories of `key` (mode 0755, fresh).
    fn plan_parents(&mut self, root: &HostRoot, key: &Path) -> Result<()> {
        let mut missing = Vec::new();
        for anc in key.ancestors().skip(1) {
            if self.known_dir(anc) || self.stat(root, anc, true)?.is_some() {
                break;
            }
            missing.push(anc.to_path_buf());
        }
        for p in missing.into_iter().rev() {
            self.set(
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

    /// A planned [`Effect::SetMtime`]: the file's node (planned or read) with the new mtime,
    /// in whole seconds as [`Stat::mtime`].
    fn plan_mtime(
        &mut self,
        root: &HostRoot,
        path: &Path,
        mtime: std::time::SystemTime,
    ) -> Result<()> {
        self.plan_attrs(root, path, None, None, None)?;
        let key = self.key(root, path, true)?;
        if let Some(Node::File {
            content,
            mode,
            uid,
            gid,
            ..
        }) = self.lookup(&key).cloned()
        {
            let mtime = mtime_secs(mtime);
            self.set(
                key,
                Node::File {
                    content,
                    mode,
                    uid,
                    gid,
                    mtime,
                },
            );
        }
        Ok(())
    }

    fn plan_attrs(
        &mut self,
        root: &HostRoot,
        path: &Path,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<()> {
        let key = self.key(root, path, true)?;
        let Some(s) = self.stat_key(root, &key, true)? else {
            return Ok(());
        };
        if let Some(Node::Download { sha256, copied, .. }) = self.lookup(&key) {
            let node = Node::Download {
                sha256: sha256.clone(),
                copied: *copied,
                mode: mode.unwrap_or(s.mode),
                uid: uid.unwrap_or(s.uid),
                gid: gid.unwrap_or(s.gid),
            };
            self.set(key, node);
            return Ok(());
        }
        let node = if s.kind == "dir" {
            Node::Dir {
                mode: mode.unwrap_or(s.mode),
                uid: uid.unwrap_or(s.uid),
                gid: gid.unwrap_or(s.gid),
                fresh: self.is_fresh_dir(&key),
            }
        } else {
            // The planned content as it is (held or spilled), else the file's, read once.
            let content = match self.lookup(&key) {
                Some(Node::File { content, .. }) => content.clone(),
                _ => {
                    let c = self.read(root, &key)?.unwrap_or_default();
                    self.plan_content(c.into())
                }
            };
            Node::File {
                content,
                mode: mode.unwrap_or(s.mode),
                uid: uid.unwrap_or(s.uid),
                gid: gid.unwrap_or(s.gid),
                mtime: s.mtime,
            }
        };
        self.set(key, node);
        Ok(())
    }
}

/// Metadata of `path` in the real root; `follow` follows a final symlink.
///
/// # Errors
/// Resolution failures.
pub(crate) fn root_stat(root: &HostRoot, path: &Path, follow: bool) -> Result<Option<Stat>> {
    let m = if follow {
        root.metadata(path)?
    } else {
        root.symlink_metadata(path)?
    };
    Ok(m.as_ref().map(stat_of))
}

/// The [`Stat`] of metadata the real root gave.
fn stat_of(m: &std::fs::Metadata) -> Stat {
    use std::os::unix::fs::MetadataExt;
    let ft = m.file_type();
    let kind = if ft.is_symlink() {
        "symlink"
    } else if ft.is_dir() {
        "dir"
    } else if ft.is_file() {
        "file"
    } else {
        "other"
    };
    Stat {
        kind: kind.into(),
        size: m.size(),
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        mtime: m.mtime(),
    }
}

/// Whole seconds of `t` since the epoch, floored (negative before 1970), as
/// [`Stat::mtime`] holds them.
pub(crate) fn mtime_secs(t: std::time::SystemTime) -> i64 {
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => {
            let d = e.duration();
            let back = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            if d.subsec_nanos() == 0 {
                -back
            } else {
                -back - 1
            }
        }
    }
}
