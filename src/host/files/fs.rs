//! Files: `fs::` queries and mutations on host paths.
//!
//! Every path is an absolute host path resolved inside the host root with chroot semantics
//! (through [`crate::host::root::HostRoot`]); a relative path is
//! [`HostError::RelativePath`]. Queries read through the session's view (planned writes
//! included in plan/check mode). Mutations compare with the current state and submit an
//! [`Effect`] only when something differs, returning whether they did.
//!
//! Text functions (`read`, `ensure_line`, blocks) work on UTF-8 text; a file that is not
//! UTF-8 is [`HostError::NotText`]. When a text function rewrites a file, the result ends
//! with a newline.

use std::path::{Path, PathBuf};

use crate::host::Host;
use crate::host::effects::effect::Effect;
use crate::host::effects::session::Stat;

use crate::host::root::EntryKind;
use crate::host::root::error::{HostError, Result};

mod lines;

pub use crate::host::root::read::MAX_READ_BYTES;
use crate::host::root::read::{check_regular, text};
pub use lines::{LineOptions, ensure_block, ensure_line, remove_block, remove_line};

/// A failure of an `fs::` function of its own; everything else is the session's
/// [`HostError`].
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// What the session failed with.
    #[error(transparent)]
    Host(#[from] HostError),

    /// A glob pattern did not compile.
    #[error("invalid glob pattern {pattern:?}")]
    Glob {
        /// The pattern as given.
        pattern: String,
        /// The compile error.
        #[source]
        source: globset::Error,
    },

    /// An owner or group name is not in the host root's `/etc/passwd` or `/etc/group`.
    #[error(transparent)]
    UnknownId(#[from] UnknownId),
}

impl crate::host::api::AreaError for FsError {
    /// A bad pattern is a bad argument, not the host's state; an unknown owner or group is
    /// the state of the account files, which a command the plan did not run may change.
    fn depends_on_host(&self) -> bool {
        match self {
            FsError::Host(e) => e.depends_on_host(),
            FsError::Glob { .. } => false,
            FsError::UnknownId(_) => true,
        }
    }
}
crate::host::api::area_error!(FsError);

/// An owner or group name of `write`, `copy`, `chown` or `fetch` is not in the host root's
/// `/etc/passwd` or `/etc/group` (as the session sees them: planned users count).
#[derive(Debug, thiserror::Error)]
#[error("unknown {kind} {name:?} (not in the host's {file})")]
pub struct UnknownId {
    /// `user` or `group`.
    pub kind: &'static str,
    /// The name as given.
    pub name: String,
    /// `/etc/passwd` or `/etc/group`.
    pub file: &'static str,
}

/// Options of `write`, `copy`: attributes to set (`None` keeps the existing file's).
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// Permission bits (e.g. `0o600`).
    pub mode: Option<u32>,
    /// Owner: a user name from the host root's `/etc/passwd`, or a number.
    pub owner: Option<String>,
    /// Group: a group name from the host root's `/etc/group`, or a number.
    pub group: Option<String>,
}

/// Read an agent-side file (configMaps, node metadata, secrets: outside the host root) as
/// [`read_whole`](crate::host::root::read::read_whole) does: without blocking on a FIFO, a regular file of at most
/// [`MAX_READ_BYTES`].
///
/// The outer error is the refusal ([`HostError::NotRegular`], [`HostError::FileTooLarge`]);
/// the inner `io::Result` is the open or read outcome for the caller to map (`NotFound`,
/// `IsADirectory` for a directory, permissions).
///
/// # Errors
/// See above.
pub(crate) fn read_local(path: &Path) -> Result<std::io::Result<Vec<u8>>> {
    match crate::host::root::open_local(path) {
        Ok(f) => read_open_local(path, f),
        Err(e) => Ok(Err(e)),
    }
}

/// [`read_local`] of the file `f`, already open (without blocking), at `path`.
///
/// # Errors
/// As [`read_local`].
pub(crate) fn read_open_local(path: &Path, f: std::fs::File) -> Result<std::io::Result<Vec<u8>>> {
    let m = match f.metadata() {
        Ok(m) => m,
        Err(e) => return Ok(Err(e)),
    };
    if m.is_dir() {
        return Ok(Err(std::io::ErrorKind::IsADirectory.into()));
    }
    check_regular(path, &m)?;
    Ok(crate::host::root::read_bounded(f, MAX_READ_BYTES))
}

/// Parse a script path: absolute, else [`HostError::RelativePath`].
pub fn host_path(p: &str) -> Result<PathBuf> {
    if p.starts_with('/') {
        Ok(PathBuf::from(p))
    } else {
        Err(HostError::RelativePath { path: p.into() })
    }
}

pub(crate) fn compile(pattern: &str) -> Result<regex::Regex> {
    regex::Regex::new(pattern).map_err(|source| HostError::Regex {
        pattern: pattern.into(),
        source,
    })
}

/// `fs::exists(p)`: true when `p` exists (following symlinks).
///
/// # Errors
/// Relative path, resolution failures.
pub fn exists(h: &Host, p: &str) -> Result<bool> {
    Ok(h.view_stat(&host_path(p)?, true)?.is_some())
}

host_fn! {
    /// True when `path` exists (following symlinks).
    #[host(ns = "fs", effects = ReadsHost)]
    fn exists(h: &mut Host, path: S) -> bool {
        Ok(super::exists(h, &path)?)
    }
}

/// `fs::is_file(p)`: true when `p` is a regular file (following symlinks).
///
/// # Errors
/// Relative path, resolution failures.
pub fn is_file(h: &Host, p: &str) -> Result<bool> {
    Ok(h.view_stat(&host_path(p)?, true)?
        .is_some_and(|s| s.kind == "file"))
}

host_fn! {
    /// True when `path` is a regular file (following symlinks).
    #[host(ns = "fs", effects = ReadsHost)]
    fn is_file(h: &mut Host, path: S) -> bool {
        Ok(super::is_file(h, &path)?)
    }
}

/// `fs::is_dir(p)`: true when `p` is a directory (following symlinks).
///
/// # Errors
/// Relative path, resolution failures.
pub fn is_dir(h: &Host, p: &str) -> Result<bool> {
    Ok(h.view_stat(&host_path(p)?, true)?
        .is_some_and(|s| s.kind == "dir"))
}

host_fn! {
    /// True when `path` is a directory (following symlinks).
    #[host(ns = "fs", effects = ReadsHost)]
    fn is_dir(h: &mut Host, path: S) -> bool {
        Ok(super::is_dir(h, &path)?)
    }
}

/// `fs::read(p)`: the file's text.
///
/// # Errors
/// [`HostError::NotFound`] when missing; [`HostError::NotText`]; a directory
/// ([`HostError::WrongKind`]); a FIFO, device or socket ([`HostError::NotRegular`], without
/// reading or blocking); a file above [`MAX_READ_BYTES`] ([`HostError::FileTooLarge`]).
pub fn read(h: &Host, p: &str) -> Result<String> {
    let path = host_path(p)?;
    match h.view_read(&path)? {
        Some(b) => text(&path, b),
        None => Err(HostError::NotFound { path }),
    }
}

host_fn! {
    /// The file's text; an error when it is missing, a directory, not a regular file (a FIFO,
    /// device or socket), larger than 64 MiB or not UTF-8 (and the string size limit, 32 MiB,
    /// applies to the text).
    #[host(ns = "fs", effects = ReadsHost)]
    fn read(h: &mut Host, path: S) -> String {
        Ok(super::read(h, &path)?)
    }
}

/// `fs::read_or(p, default)`: the file's text, or `default` when it does not exist.
///
/// # Errors
/// As [`read`], except a missing file.
pub fn read_or(h: &Host, p: &str, default: &str) -> Result<String> {
    let path = host_path(p)?;
    match h.view_read(&path)? {
        Some(b) => text(&path, b),
        None => Ok(default.to_string()),
    }
}

host_fn! {
    /// The file's text, or `default` when it does not exist.
    #[host(ns = "fs", effects = ReadsHost)]
    fn read_or(h: &mut Host, path: S, default: S) -> String {
        Ok(super::read_or(h, &path, &default)?)
    }
}

/// `fs::list(dir)`: entry names, sorted (byte order).
///
/// # Errors
/// [`HostError::NotFound`] when missing; not a directory.
pub fn list(h: &Host, dir: &str) -> Result<Vec<String>> {
    let path = host_path(dir)?;
    match h.view_list(&path)? {
        Some(v) => Ok(v.into_iter().map(|(n, _)| n).collect()),
        None => Err(HostError::NotFound { path }),
    }
}

host_fn! {
    /// Entry names of a directory, sorted; an error when it is missing.
    #[host(ns = "fs", effects = ReadsHost)]
    fn list(h: &mut Host, dir: S) -> rhai::Array {
        Ok(convert::array(super::list(h, &dir)?))
    }
}

/// `fs::stat(p)`: `#{kind, size, mode, uid, gid, mtime}` of `p` itself (a final symlink is
/// not followed, so `kind` can be `symlink`).
///
/// # Errors
/// [`HostError::NotFound`] when missing.
pub fn stat(h: &Host, p: &str) -> Result<Stat> {
    let path = host_path(p)?;
    h.view_stat(&path, false)?
        .ok_or(HostError::NotFound { path })
}

host_fn! {
    /// `#{kind, size, mode, uid, gid, mtime}` of `path` itself (`kind`: `file`, `dir`, `symlink`,
    /// `other`); an error when missing.
    #[host(ns = "fs", effects = ReadsHost)]
    fn stat(h: &mut Host, path: S) -> rhai::Map {
        let st = super::stat(h, &path)?;
        let mut m = Map::new();
        m.insert("kind".into(), convert::s(st.kind));
        m.insert("size".into(), Dynamic::from(st.size as i64));
        m.insert("mode".into(), Dynamic::from(i64::from(st.mode)));
        m.insert("uid".into(), Dynamic::from(i64::from(st.uid)));
        m.insert("gid".into(), Dynamic::from(i64::from(st.gid)));
        m.insert("mtime".into(), Dynamic::from(st.mtime));
        Ok(m)
    }
}

fn has_meta(s: &str) -> bool {
    s.contains(['*', '?', '[', '{'])
}

/// `fs::glob(pattern)`: sorted host paths matching an absolute glob pattern (`*`, `?`,
/// `[abc]`, `{a,b}`, and `**` for any number of directories; `*` never crosses `/` and does
/// match names starting with `.`). Matching uses the `globset` crate; the walk starts at the
/// pattern's literal prefix and descends only as deep as the pattern reaches (`**` walks the
/// whole subtree without following symlinked directories).
///
/// # Errors
/// Relative or invalid pattern; directory read failures.
pub fn glob(h: &Host, pattern: &str) -> Result<Vec<String>, FsError> {
    let path = host_path(pattern)?;
    let norm = crate::host::root::normalize(&path);
    let comps: Vec<String> = norm
        .components()
        .skip(1)
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let Some(first_meta) = comps.iter().position(|c| has_meta(c)) else {
        return Ok(if h.view_stat(&norm, false)?.is_some() {
            vec![norm.to_string_lossy().into_owned()]
        } else {
            Vec::new()
        });
    };
    let matcher = globset::GlobBuilder::new(&norm.to_string_lossy())
        .literal_separator(true)
        .build()
        .map_err(|source| FsError::Glob {
            pattern: pattern.into(),
            source,
        })?
        .compile_matcher();
    let base: PathBuf = std::iter::once("/".to_string())
        .chain(comps[..first_meta].iter().cloned())
        .collect();
    let rest = &comps[first_meta..];
    let unlimited = rest.iter().any(|c| c.contains("**"));
    let mut out = Vec::new();
    walk(h, &base, rest.len(), unlimited, &matcher, &mut out)?;
    out.sort();
    Ok(out)
}

host_fn! {
    /// Sorted host paths matching an absolute pattern (`*`, `?`, `[abc]`, `{a,b}`, `**`).
    #[host(ns = "fs", effects = ReadsHost)]
    fn glob(h: &mut Host, pattern: S) -> rhai::Array {
        Ok(convert::array(super::glob(h, &pattern)?))
    }
}

fn walk(
    h: &Host,
    dir: &Path,
    depth: usize,
    unlimited: bool,
    m: &globset::GlobMatcher,
    out: &mut Vec<String>,
) -> Result<()> {
    let entries = match h.view_list(dir) {
        Ok(Some(e)) => e,
        Ok(None) | Err(HostError::WrongKind { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    for (name, kind) in entries {
        let p = dir.join(&name);
        if m.is_match(&p) {
            out.push(p.to_string_lossy().into_owned());
        }
        if unlimited || depth > 1 {
            let descend = match kind {
                EntryKind::Dir => true,
                EntryKind::Symlink if !unlimited => {
                    h.view_stat(&p, true)?.is_some_and(|s| s.kind == "dir")
                }
                _ => false,
            };
            if descend {
                walk(h, &p, depth.saturating_sub(1), unlimited, m, out)?;
            }
        }
    }
    Ok(())
}

/// Resolve a user (`passwd`) or group (`group`) name in the host root, or parse a number.
fn resolve_id<E: From<HostError> + From<UnknownId>>(
    h: &Host,
    name: &str,
    group: bool,
) -> Result<u32, E> {
    if let Ok(n) = name.parse::<u32>() {
        return Ok(n);
    }
    let (file, kind) = if group {
        ("/etc/group", "group")
    } else {
        ("/etc/passwd", "user")
    };
    let content = h.view_read(Path::new(file))?.unwrap_or_default();
    let content = String::from_utf8_lossy(&content);
    content
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 2 && f[0] == name).then(|| f[2].parse::<u32>().ok())?
        })
        .next()
        .ok_or_else(|| {
            UnknownId {
                kind,
                name: name.into(),
                file,
            }
            .into()
        })
}

/// Owner and group names (or numbers) as uid and gid, from the host root's `/etc/passwd` and
/// `/etc/group`, as the session sees them.
///
/// # Errors
/// [`UnknownId`] for a name in neither; reading the files.
pub(crate) fn ids<E: From<HostError> + From<UnknownId>>(
    h: &Host,
    owner: Option<&str>,
    group: Option<&str>,
) -> Result<(Option<u32>, Option<u32>), E> {
    Ok((
        owner.map(|o| resolve_id::<E>(h, o, false)).transpose()?,
        group.map(|g| resolve_id::<E>(h, g, true)).transpose()?,
    ))
}

/// Bring `path` to `content` with the given attributes; the one write path of `write`,
/// `copy`, drop-ins and persisted tuning files. In apply mode the compare and the write
/// happen under the path's lock ([`crate::host::root::pathlock`]).
pub(crate) fn put(
    h: &mut Host,
    path: &Path,
    content: Vec<u8>,
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
) -> Result<bool> {
    put_with(h, path, content, (mode, uid, gid), |_| Ok(()))
}

/// [`put`] that calls `before` once a write is needed, right before it is submitted, still
/// under the path's lock: deferred work is recorded there, ahead of the write
/// ([`crate::host::root::deferred`]). An error of `before` leaves the file unwritten.
pub(crate) fn put_with(
    h: &mut Host,
    path: &Path,
    content: Vec<u8>,
    attrs: (Option<u32>, Option<u32>, Option<u32>),
    before: impl FnOnce(&mut Host) -> Result<()>,
) -> Result<bool> {
    // Unchanged without a lock (no lock file for a call that changes nothing, and so, in
    // plan and check mode, no planned lock directory); a change is decided again under the
    // lock.
    if !put_needed(h, path, &content, attrs)? {
        h.note_unchanged();
        return Ok(false);
    }
    let lock = h.lock_for_update(path)?;
    let changed = put_locked(h, path, content, attrs, before);
    drop(lock);
    changed
}

/// Whether bringing `path` to `content` and the attributes changes anything (as the session
/// sees it).
///
/// # Errors
/// [`HostError::BadAncestor`]; a directory at `path`; read failures.
fn put_needed(
    h: &Host,
    path: &Path,
    content: &[u8],
    (mode, uid, gid): (Option<u32>, Option<u32>, Option<u32>),
) -> Result<bool> {
    h.check_creatable(path)?;
    Ok(match h.view_stat(path, true)? {
        None => true,
        Some(s) if s.kind == "dir" => {
            return Err(HostError::WrongKind {
                path: path.to_path_buf(),
                what: "is a directory",
            });
        }
        Some(s) => {
            mode.is_some_and(|m| m != s.mode)
                || uid.is_some_and(|u| u != s.uid)
                || gid.is_some_and(|g| g != s.gid)
                || h.view_read(path)?.as_deref() != Some(content)
        }
    })
}

/// [`put_with`] for a caller that already holds the path's lock (a read-modify-write that
/// read the content it changes under the lock).
pub(crate) fn put_locked(
    h: &mut Host,
    path: &Path,
    content: Vec<u8>,
    attrs: (Option<u32>, Option<u32>, Option<u32>),
    before: impl FnOnce(&mut Host) -> Result<()>,
) -> Result<bool> {
    if !put_needed(h, path, &content, attrs)? {
        h.note_unchanged();
        return Ok(false);
    }
    let (mode, uid, gid) = attrs;
    before(h)?;
    h.submit(Effect::WriteFile {
        path: path.to_path_buf(),
        content: content.into(),
        mode,
        uid,
        gid,
    })?;
    Ok(true)
}

/// `fs::write(p, content, #{mode, owner, group})`: replace the file's content atomically
/// (temp file, fsync, rename; a symlink's target is written). An existing file keeps its
/// mode, owner, group and extended attributes unless set. Changed when content or an
/// attribute differs.
///
/// # Errors
/// Relative path, a directory at `p`, [`HostError::BadAncestor`] (an ancestor is a file or a
/// dangling symlink; also in plan and check mode), unknown owner/group, write failures.
pub fn write(h: &mut Host, p: &str, content: &str, opts: &WriteOptions) -> Result<bool, FsError> {
    write_bytes(h, p, content.as_bytes(), opts)
}

host_fn! {
    /// Replace the file's content atomically; an existing file keeps its mode, owner and extended
    /// attributes; a symlink's target is written.
    #[host(ns = "fs", effects = [Write, Chmod, Chown])]
    fn write(h: &mut Host, path: S, content: S) -> bool {
        Ok(super::write(h, &path, &content, &WriteOptions::default())?)
    }

    /// As `write`, also setting `#{mode, owner, group}` (mode `0o644` or `"0644"`; owner and group
    /// names from the root's /etc/passwd and /etc/group, or numbers).
    #[overload(options = WRITE_KEYS)]
    fn write_with_opts(h: &mut Host, path: S, content: S, opts: Map) -> bool {
        let opts = write_opts(&opts)?;
        Ok(super::write(h, &path, &content, &opts)?)
    }
}

/// [`write`](fn@write) with raw bytes.
///
/// # Errors
/// As [`write`](fn@write).
pub fn write_bytes(
    h: &mut Host,
    p: &str,
    content: &[u8],
    opts: &WriteOptions,
) -> Result<bool, FsError> {
    let path = host_path(p)?;
    let (uid, gid) = ids::<FsError>(h, opts.owner.as_deref(), opts.group.as_deref())?;
    Ok(put(h, &path, content.to_vec(), opts.mode, uid, gid)?)
}

/// `fs::append(p, content)`: append to the file (created when missing). Not idempotent by
/// nature: changed whenever `content` is not empty. In apply mode the read and the write
/// happen under the path's lock, so concurrent appends of other processes are kept.
///
/// # Errors
/// As [`write`](fn@write).
pub fn append(h: &mut Host, p: &str, content: &str) -> Result<bool> {
    let path = host_path(p)?;
    if content.is_empty() {
        h.note_unchanged();
        return Ok(false);
    }
    edit(h, &path, |h| {
        let mut cur = h.view_read(&path)?.unwrap_or_default();
        cur.extend_from_slice(content.as_bytes());
        Ok(Some(cur))
    })
}

host_fn! {
    /// Append to the file (created when missing); changed whenever `content` is not empty.
    #[host(ns = "fs", effects = [Write])]
    fn append(h: &mut Host, path: S, content: S) -> bool {
        Ok(super::append(h, &path, &content)?)
    }
}

/// A read-modify-write of the file at `path`. `compute` reads the current state through the
/// view and returns the new content, or `None` when nothing is to change. It runs once
/// without a lock; when that finds a change in apply mode, the path's lock is taken
/// ([`crate::host::root::pathlock`]) and `compute` runs again on a fresh read, and the write
/// follows under the lock. So a call that changes nothing takes no lock, and no update of
/// another process made between the two reads is lost.
pub(crate) fn edit<E: From<HostError>>(
    h: &mut Host,
    path: &Path,
    compute: impl Fn(&Host) -> Result<Option<Vec<u8>>, E>,
) -> Result<bool, E> {
    edit_with(h, path, compute, |_| Ok(()))
}

/// [`edit`] that calls `before` once the write is needed, right before it is submitted,
/// under the path's lock (as [`put_with`]); an error of `before` leaves the file unwritten.
/// `compute` returning an empty content is a write of an empty file (use [`remove_with`] to
/// remove one). `compute` may fail with an area's error (`E`), as the call does.
pub(crate) fn edit_with<E: From<HostError>>(
    h: &mut Host,
    path: &Path,
    compute: impl Fn(&Host) -> Result<Option<Vec<u8>>, E>,
    before: impl FnOnce(&mut Host) -> Result<()>,
) -> Result<bool, E> {
    let Some(mut content) = compute(h)? else {
        h.note_unchanged();
        return Ok(false);
    };
    let lock = h.lock_for_update(path)?;
    if lock.is_some() {
        match compute(h)? {
            Some(c) => content = c,
            None => {
                h.note_unchanged();
                return Ok(false);
            }
        }
    }
    let changed = put_locked(h, path, content, (None, None, None), before);
    drop(lock);
    Ok(changed?)
}

/// `fs::mkdir(p)` / `fs::mkdir(p, mode)`: create a directory (default mode 0755) and its
/// missing parents (always 0755, like `mkdir -p` under umask 022; modes are set exactly in
/// apply, whatever the agent's umask, and planned the same). An existing directory is
/// unchanged unless `mode` is given and differs (then it is chmod-ed).
///
/// # Errors
/// Something other than a directory exists at `p`; [`HostError::BadAncestor`] (also in plan
/// and check mode); creation failures.
pub fn mkdir(h: &mut Host, p: &str, mode: Option<u32>) -> Result<bool> {
    let path = host_path(p)?;
    h.check_creatable(&path)?;
    match h.view_stat(&path, true)? {
        Some(s) if s.kind != "dir" => Err(HostError::WrongKind {
            path,
            what: "exists and is not a directory",
        }),
        Some(s) if mode.is_none_or(|m| m == s.mode) => {
            h.note_unchanged();
            Ok(false)
        }
        _ => {
            h.submit(Effect::Mkdir {
                path,
                mode: mode.unwrap_or(0o755),
            })?;
            Ok(true)
        }
    }
}

host_fn! {
    /// Create a directory and its parents (mode 0755).
    #[host(ns = "fs", effects = [Mkdir, Chmod])]
    fn mkdir(h: &mut Host, path: S) -> bool {
        Ok(super::mkdir(h, &path, None)?)
    }

    /// Create a directory and its missing parents (those 0755) with `mode` (int or octal string);
    /// an existing one is chmod-ed when it differs.
    #[overload]
    fn mkdir_with_mode(h: &mut Host, path: S, mode: Dynamic) -> bool {
        let mode = convert::mode(&mode)?;
        Ok(super::mkdir(h, &path, Some(mode))?)
    }
}

/// `fs::remove(p)`: remove a file, symlink (not its target) or empty directory. Unchanged
/// when absent. In apply mode the removal is decided again under the path's lock
/// ([`crate::host::root::pathlock`]) before it is made.
///
/// # Errors
/// A non-empty directory; removal failures; the lock (apply mode).
pub fn remove(h: &mut Host, p: &str) -> Result<bool> {
    remove_with(h, p, |_| Ok(()))
}

host_fn! {
    /// Remove a file, a symlink (not its target) or an empty directory; absent is unchanged.
    #[host(ns = "fs", effects = [Remove])]
    fn remove(h: &mut Host, path: S) -> bool {
        Ok(super::remove(h, &path)?)
    }
}

/// [`remove`] that calls `before` once the removal is needed, right before it is submitted,
/// under the path's lock (as [`put_with`]). An error of `before` leaves the path in place.
pub(crate) fn remove_with(
    h: &mut Host,
    p: &str,
    before: impl FnOnce(&mut Host) -> Result<()>,
) -> Result<bool> {
    let path = host_path(p)?;
    let needed = |h: &Host| -> Result<bool> {
        match h.view_stat(&path, false)? {
            None => Ok(false),
            Some(s) => {
                if s.kind == "dir" && !h.view_list(&path)?.unwrap_or_default().is_empty() {
                    return Err(HostError::WrongKind {
                        path: path.clone(),
                        what: "is a non-empty directory (use fs::remove_all)",
                    });
                }
                Ok(true)
            }
        }
    };
    if !needed(h)? {
        h.note_unchanged();
        return Ok(false);
    }
    let lock = h.lock_for_update(&path)?;
    if lock.is_some() && !needed(h)? {
        h.note_unchanged();
        return Ok(false);
    }
    before(h)?;
    h.submit(Effect::RemoveFile { path: path.clone() })?;
    drop(lock);
    Ok(true)
}

/// `fs::remove_all(p)`: remove a tree (a symlink itself, not its target). Unchanged when
/// absent. The tree must lie on one mount: a mount point at or below `p` (another
/// filesystem, or a bind mount) fails in every mode, naming it, before anything is removed
/// (`HostRoot::remove_all`).
///
/// # Errors
/// `/` itself (`invalid path argument: remove all path is /`, in every mode); mount points
/// below `p` (every mode); removal failures.
pub fn remove_all(h: &mut Host, p: &str) -> Result<bool> {
    let path = host_path(p)?;
    if h.view_stat(&path, false)?.is_none() {
        h.note_unchanged();
        return Ok(false);
    }
    // Plan and check see the same refusal as apply (`/` itself is refused at submit).
    if crate::host::root::normalize(&path) != Path::new("/") {
        h.check_remove_all(&path)?;
    }
    h.submit(Effect::RemoveAll { path })?;
    Ok(true)
}

host_fn! {
    /// Remove a tree (a symlink itself, not its target); absent is unchanged. A mount point at or
    /// below the path fails in every mode, naming it, and nothing is removed.
    #[host(ns = "fs", effects = [RemoveAll])]
    fn remove_all(h: &mut Host, path: S) -> bool {
        Ok(super::remove_all(h, &path)?)
    }
}

/// `fs::copy(src, dst, #{mode, owner, group})`: make `dst` a copy of file `src` (both host
/// paths). A new `dst` gets `src`'s mode unless `mode` is given; an existing one keeps its
/// attributes unless set.
///
/// # Errors
/// [`HostError::NotFound`] when `src` is missing; as [`write`](fn@write).
pub fn copy(h: &mut Host, src: &str, dst: &str, opts: &WriteOptions) -> Result<bool, FsError> {
    let s = host_path(src)?;
    let d = host_path(dst)?;
    let content = h
        .view_read(&s)?
        .ok_or(HostError::NotFound { path: s.clone() })?;
    let (uid, gid) = ids::<FsError>(h, opts.owner.as_deref(), opts.group.as_deref())?;
    let mut mode = opts.mode;
    if mode.is_none() && h.view_stat(&d, true)?.is_none() {
        mode = h.view_stat(&s, true)?.map(|st| st.mode);
    }
    Ok(put(h, &d, content, mode, uid, gid)?)
}

host_fn! {
    /// Make `dst` a copy of file `src` (a new `dst` gets `src`'s mode).
    #[host(ns = "fs", effects = [Write, Chmod, Chown])]
    fn copy(h: &mut Host, src: S, dst: S) -> bool {
        Ok(super::copy(h, &src, &dst, &WriteOptions::default())?)
    }

    /// As `copy`, also setting `#{mode, owner, group}`.
    #[overload(options = WRITE_KEYS)]
    fn copy_with_opts(h: &mut Host, src: S, dst: S, opts: Map) -> bool {
        let opts = write_opts(&opts)?;
        Ok(super::copy(h, &src, &dst, &opts)?)
    }
}

/// `fs::chmod(p, mode)`: set permission bits (following symlinks).
///
/// # Errors
/// [`HostError::NotFound`]; chmod failures.
pub fn chmod(h: &mut Host, p: &str, mode: u32) -> Result<bool> {
    let path = host_path(p)?;
    let s = h
        .view_stat(&path, true)?
        .ok_or(HostError::NotFound { path: path.clone() })?;
    if s.mode == mode & 0o7777 {
        h.note_unchanged();
        return Ok(false);
    }
    h.submit(Effect::Chmod {
        path,
        mode: mode & 0o7777,
    })?;
    Ok(true)
}

host_fn! {
    /// Set permission bits (`0o600` or `"0600"`), following symlinks.
    #[host(ns = "fs", effects = [Chmod])]
    fn chmod(h: &mut Host, path: S, mode: Dynamic) -> bool {
        let mode = convert::mode(&mode)?;
        Ok(super::chmod(h, &path, mode)?)
    }
}

/// `fs::chown(p, owner, group)`: set owner and/or group (`None` keeps; names resolved in the
/// host root's `/etc/passwd` and `/etc/group`, or numbers), following symlinks.
///
/// # Errors
/// [`HostError::NotFound`]; [`UnknownId`] ([`FsError::UnknownId`]); chown failures.
pub fn chown(
    h: &mut Host,
    p: &str,
    owner: Option<&str>,
    group: Option<&str>,
) -> Result<bool, FsError> {
    let path = host_path(p)?;
    let (uid, gid) = ids::<FsError>(h, owner, group)?;
    Ok(chown_ids(h, &path, uid, gid)?)
}

/// [`chown`] of a host path to ids (`None` keeps).
///
/// # Errors
/// [`HostError::NotFound`]; chown failures.
pub(crate) fn chown_ids(
    h: &mut Host,
    path: &Path,
    uid: Option<u32>,
    gid: Option<u32>,
) -> Result<bool> {
    let path = path.to_path_buf();
    let s = h
        .view_stat(&path, true)?
        .ok_or(HostError::NotFound { path: path.clone() })?;
    if uid.is_none_or(|u| u == s.uid) && gid.is_none_or(|g| g == s.gid) {
        h.note_unchanged();
        return Ok(false);
    }
    h.submit(Effect::Chown { path, uid, gid })?;
    Ok(true)
}

host_fn! {
    /// Set owner and group (names or numbers; `()` keeps), following symlinks.
    #[host(ns = "fs", effects = [Chown])]
    fn chown(h: &mut Host, path: S, owner: Dynamic, group: Dynamic) -> bool {
        let owner = opt_scalar(&owner, "owner")?;
        let group = opt_scalar(&group, "group")?;
        Ok(super::chown(h, &path, owner.as_deref(), group.as_deref())?)
    }
}

/// `fs::symlink(target, link)`: make `link` a symlink whose content is `target` (stored as
/// given, may be relative). An existing symlink with another target is replaced atomically.
///
/// # Errors
/// Something other than a symlink exists at `link`.
pub fn symlink(h: &mut Host, target: &str, link: &str) -> Result<bool> {
    let path = host_path(link)?;
    if target.is_empty() {
        return Err(HostError::Invalid {
            what: "symlink target",
            message: "must not be empty".into(),
        });
    }
    h.check_creatable(&path)?;
    match h.view_stat(&path, false)? {
        Some(s) if s.kind != "symlink" => {
            return Err(HostError::WrongKind {
                path,
                what: "exists and is not a symlink",
            });
        }
        Some(_) if h.view_readlink(&path)?.as_deref() == Some(Path::new(target)) => {
            h.note_unchanged();
            return Ok(false);
        }
        _ => {}
    }
    h.submit(Effect::Symlink {
        target: PathBuf::from(target),
        link: path,
    })?;
    Ok(true)
}

host_fn! {
    /// Make `link` a symlink to `target` (stored as given, may be relative); another link there is
    /// replaced.
    #[host(ns = "fs", effects = [Symlink])]
    fn symlink(h: &mut Host, target: S, link: S) -> bool {
        Ok(super::symlink(h, &target, &link)?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert::{self, check_keys, opt_scalar};
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Dynamic, ImmutableString as S, Map};
}
use prelude::*;

/// The option keys of `fs::write` and `fs::copy`.
const WRITE_KEYS: &[&str] = &["mode", "owner", "group"];

/// `#{mode, owner, group}` (`()` values mean "keep").
fn write_opts(m: &Map) -> Result<WriteOptions, String> {
    check_keys(m, WRITE_KEYS)?;
    attribute_opts(m)
}

/// The `mode`, `owner` and `group` keys of an options map (`()` values mean "keep"), as
/// [`WriteOptions`]; the caller checks the map's keys. Shared by `fs::write`/`fs::copy`
/// and `fs::fetch`.
pub(crate) fn attribute_opts(m: &Map) -> Result<WriteOptions, String> {
    let get = |k: &str| m.get(k).filter(|d| !d.is_unit());
    Ok(WriteOptions {
        mode: get("mode").map(convert::mode).transpose()?,
        owner: get("owner")
            .map(|d| opt_scalar(d, "owner"))
            .transpose()?
            .flatten(),
        group: get("group")
            .map(|d| opt_scalar(d, "group"))
            .transpose()?
            .flatten(),
    })
}

/// A positive integer option `key` of `m`, or `default`.
pub(crate) fn positive(m: &Map, key: &str, default: u64) -> Result<u64, String> {
    match m.get(key).filter(|d| !d.is_unit()) {
        None => Ok(default),
        Some(d) => match d.as_int() {
            Ok(n) if n > 0 => Ok(n as u64),
            _ => Err(format!("option {key} must be a positive integer, got {d}")),
        },
    }
}

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "fs",
    "Files — `fs::`",
    "Every path is an absolute host path resolved inside the host root (`..` and symlinks never leave it); a relative path is an error (\"paths must be absolute\"). Writes are atomic (temp file, fsync, rename). A file is read whole only when it is a regular file of at most 64 MiB: a FIFO, device or socket, or a larger file, fails the call with an error naming the path (and the limit) before anything is read, so it can neither block the step nor fill the agent's memory. That applies to `read`, `read_or`, the line and block edits, `append`, `copy` and the comparison `write` makes before replacing a file; `remove` and `remove_all` read no content into memory and have no size limit (any file, FIFO or socket).",
)];

host_fns!(
    exists,
    is_file,
    is_dir,
    read,
    read_or,
    list,
    glob,
    stat,
    write,
    append,
    lines::ensure_line,
    lines::remove_line,
    lines::ensure_block,
    lines::remove_block,
    mkdir,
    remove,
    remove_all,
    copy,
    chmod,
    chown,
    symlink
);
