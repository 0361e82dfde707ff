//! `fs::copy_tree(src, dst, #{max_files, max_bytes})`: make directory `dst` hold a copy of
//! the tree at `src`, as `cp -a src/. dst/` does: directories, regular files and symlinks
//! (copied as links, never followed) with their permission bits and numeric owner and
//! group. Entries already in `dst` that `src` lacks are kept.
//!
//! Both ends are host paths read and changed through the session (so confined to the host
//! root, and a plan sees planned files). The whole source is walked and checked first (kinds,
//! limits, what is in the way at the destination), so a bad tree fails the call before any
//! effect; then every directory, file and link that differs is its own effect (`mkdir`,
//! `chmod`, `chown`, `write`, `symlink`), so a plan lists each one and a check reports each
//! one that drifted. A file's content is never held whole: source and destination are
//! compared by size, then by streamed SHA-256 digests, and a file that differs is an
//! [`Effect::CopyFile`] that the apply streams into place (atomically, verified against the
//! source's digest). The tree is bounded by `max_files` entries and `max_bytes` of file
//! content.

use std::path::{Path, PathBuf};

use crate::host::Host;
use crate::host::effects::effect::Effect;
use crate::host::effects::view::ViewedFile;
use crate::host::files::fs::{self, host_path};
use crate::host::files::realpath::realpath;
use crate::host::root::error::{HostError, Result};
use crate::host::root::normalize;

/// Default of `max_files`: at most this many entries (directories, files and links) below
/// `src`.
pub const DEFAULT_MAX_FILES: u64 = 100_000;

/// Default of `max_bytes`: at most this much file content (1 GiB) in the tree.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// Limits of one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeOptions {
    /// Largest number of entries below the source.
    pub max_files: u64,
    /// Largest total size of the source's files, in bytes.
    pub max_bytes: u64,
}

impl Default for TreeOptions {
    fn default() -> Self {
        TreeOptions {
            max_files: DEFAULT_MAX_FILES,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// One entry of the source, relative to it.
#[derive(Debug)]
enum Entry {
    Dir {
        rel: PathBuf,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    File {
        rel: PathBuf,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    Link {
        rel: PathBuf,
        target: PathBuf,
    },
}

/// `src` walked depth first in name order (a directory before what it holds), checked
/// against the limits and against what is at the destination.
fn walk(h: &Host, src: &Path, dst: &Path, o: &TreeOptions) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut stack = vec![PathBuf::new()];
    while let Some(dir) = stack.pop() {
        let here = src.join(&dir);
        let names = h.view_list(&here)?.unwrap_or_default();
        // Reverse onto the stack so that the walk visits names in order.
        let mut subdirs = Vec::new();
        for (name, _) in names {
            let rel = dir.join(&name);
            let from = src.join(&rel);
            let st = h
                .view_stat(&from, false)?
                .ok_or(HostError::NotFound { path: from.clone() })?;
            files += 1;
            if files > o.max_files {
                return Err(HostError::Invalid {
                    what: "fs::copy_tree source",
                    message: format!(
                        "{} has more than {} entries (max_files)",
                        src.display(),
                        o.max_files
                    ),
                });
            }
            let to = h.view_stat(&dst.join(&rel), false)?;
            let in_the_way = |what: &'static str| HostError::WrongKind {
                path: dst.join(&rel),
                what,
            };
            let (mode, uid, gid) = (st.mode, st.uid, st.gid);
            match st.kind.as_str() {
                "dir" => {
                    if to.as_ref().is_some_and(|t| t.kind != "dir") {
                        return Err(in_the_way(
                            "exists and is not a directory, where the source has one",
                        ));
                    }
                    out.push(Entry::Dir {
                        rel: rel.clone(),
                        mode,
                        uid,
                        gid,
                    });
                    subdirs.push(rel);
                }
                "file" => {
                    if to.as_ref().is_some_and(|t| t.kind != "file") {
                        return Err(in_the_way(
                            "exists and is not a regular file, where the source has one",
                        ));
                    }
                    bytes = bytes.saturating_add(st.size);
                    if bytes > o.max_bytes {
                        return Err(HostError::Invalid {
                            what: "fs::copy_tree source",
                            message: format!(
                                "{} holds more than {} bytes of files (max_bytes)",
                                src.display(),
                                o.max_bytes
                            ),
                        });
                    }
                    out.push(Entry::File {
                        rel,
                        mode,
                        uid,
                        gid,
                    });
                }
                "symlink" => {
                    if to.as_ref().is_some_and(|t| t.kind != "symlink") {
                        return Err(in_the_way(
                            "exists and is not a symlink, where the source has one",
                        ));
                    }
                    let target = h
                        .view_readlink(&from)?
                        .ok_or(HostError::NotFound { path: from.clone() })?;
                    out.push(Entry::Link { rel, target });
                }
                _ => {
                    return Err(HostError::WrongKind {
                        path: from,
                        what: "is not a directory, regular file or symlink (fs::copy_tree copies only those)",
                    });
                }
            }
        }
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(out)
}

/// Bring the directory at `path` to `mode` and owner (created when missing).
fn ensure_dir(h: &mut Host, path: &Path, mode: u32, uid: u32, gid: u32) -> Result<bool> {
    let p = path.display().to_string();
    let mut changed = fs::mkdir(h, &p, Some(mode))?;
    changed |= fs::chown_ids(h, path, Some(uid), Some(gid))?;
    Ok(changed)
}

/// `fs::copy_tree(src, dst, opts)`: see the module docs. Returns whether anything changed
/// (or, in plan and check mode, would).
///
/// # Errors
/// Relative paths; `src` missing or not a directory; `dst` equal to or inside `src`;
/// [`HostError::Invalid`] over `max_files` or `max_bytes`; a source entry that is not a
/// directory, file or symlink, or a destination entry of another kind in the way
/// ([`HostError::WrongKind`], naming it); all before any change. Then the effects' own
/// failures (a source file that changed since it was compared fails its copy, leaving the
/// destination file as it was).
pub fn copy_tree(h: &mut Host, src: &str, dst: &str, o: &TreeOptions) -> Result<bool> {
    let src_path = host_path(src)?;
    let dst_path = host_path(dst)?;
    match h.view_stat(&src_path, true)? {
        None => return Err(HostError::NotFound { path: src_path }),
        Some(s) if s.kind != "dir" => {
            return Err(HostError::WrongKind {
                path: src_path,
                what: "is not a directory",
            });
        }
        Some(_) => {}
    }
    let src_real = PathBuf::from(realpath(h, src)?);
    let dst_real = realpath(h, dst).map_or_else(|_| normalize(&dst_path), PathBuf::from);
    if dst_real.starts_with(&src_real) {
        return Err(HostError::WrongKind {
            path: dst_path,
            what: "is the source directory or inside it",
        });
    }
    // Copy between the resolved directories, so a link on the way is followed once here.
    let top = h.view_stat(&src_real, true)?.ok_or(HostError::NotFound {
        path: src_real.clone(),
    })?;
    if h.view_stat(&dst_path, true)?
        .is_some_and(|s| s.kind != "dir")
    {
        return Err(HostError::WrongKind {
            path: dst_path,
            what: "exists and is not a directory",
        });
    }
    // From here every read below `src` and every read and write below `dst` goes through
    // one handle on each, which no symlink below it redirects (`HostRoot::confine`); a
    // `dst` this call creates is confined right after it is made (its nearest existing
    // ancestor until then).
    let _src = confine_dir(h, &src_real)?;
    let mut dst_guard = confine_dir(h, &dst_path)?;
    let mut above = match dst_guard {
        None => h.confine_ancestor(&dst_path)?,
        Some(_) => None,
    };
    let entries = walk(h, &src_real, &dst_path, o)?;
    between_check_and_write();
    let mut changed = ensure_dir(h, &dst_path, top.mode, top.uid, top.gid)?;
    if dst_guard.is_none() {
        dst_guard = confine_created(h, &dst_path)?;
    }
    above.take();
    // Every file's copy is decided first and the undo journal (an apply's; none in plan or
    // check) records the copies ahead, synced once (issue 31): only when no write below
    // `dst` can change a source (`src` is not inside `dst`), so each decision is the one the
    // loop would make.
    let mut decided: Vec<Option<Decided>> = Vec::new();
    if !src_real.starts_with(&dst_real) {
        let mut ahead = Vec::new();
        for e in &entries {
            let d = match e {
                Entry::File {
                    rel,
                    mode,
                    uid,
                    gid,
                } => {
                    let (from, to) = (src_real.join(rel), dst_path.join(rel));
                    let d = decide_copy(h, &from, &to)?;
                    ahead.extend(d.copy_effect(&from, &to, (Some(*mode), Some(*uid), Some(*gid))));
                    Some(d)
                }
                _ => None,
            };
            decided.push(d);
        }
        h.journal_ahead(&ahead)?;
    }
    let mut decided = decided.into_iter();
    for e in entries {
        let d = decided.next().flatten();
        changed |= match e {
            Entry::Dir {
                rel,
                mode,
                uid,
                gid,
            } => ensure_dir(h, &dst_path.join(rel), mode, uid, gid)?,
            Entry::File {
                rel,
                mode,
                uid,
                gid,
            } => {
                let (from, to) = (src_real.join(&rel), dst_path.join(rel));
                let attrs = (Some(mode), Some(uid), Some(gid));
                match d {
                    Some(d) => put_decided(h, &from, &to, d, attrs)?,
                    None => put_copy(h, &from, &to, attrs)?,
                }
            }
            Entry::Link { rel, target } => fs::symlink(
                h,
                &target.to_string_lossy(),
                &dst_path.join(rel).display().to_string(),
            )?,
        };
    }
    drop(dst_guard);
    Ok(changed)
}

host_fn! {
    /// Make directory `dst` hold a copy of the tree at `src`, as `cp -a src/. dst/`: directories,
    /// regular files and symlinks (copied as links) with their modes and numeric owners; what `dst`
    /// has beyond `src` is kept. The source is walked and checked first (at most 100000 entries and
    /// 1 GiB of files; a FIFO, socket or device, or an entry of another kind in the way at `dst`,
    /// is an error naming it; `dst` inside `src` is an error), so a bad tree changes nothing; then
    /// each entry that differs is its own effect, which a plan lists and a check reports, read and
    /// written through handles on `src` and `dst` opened before the walk that follow no symlink
    /// below them (see the rules: a directory swapped for a symlink meanwhile fails the call, never
    /// redirects a write). Files are compared by size, then by streamed SHA-256, and copied by
    /// streaming (never read whole: a file of any size is copied, verified against the source's
    /// digest, so a source that changed meanwhile fails the call and its destination is left as it
    /// was); a plan's diff names the copy instead of diffing its content.
    #[host(ns = "fs", effects = [Mkdir, Chmod, Chown, Write, Symlink])]
    fn copy_tree(h: &mut Host, src: S, dst: S) -> bool {
        Ok(super::copy_tree(h, &src, &dst, &TreeOptions::default())?)
    }

    /// As `copy_tree`, with the limits `#{max_files, max_bytes}` (entries below `src`, total bytes
    /// of its files).
    #[overload(options = TREE_KEYS)]
    fn copy_tree_with_opts(h: &mut Host, src: S, dst: S, opts: Map) -> bool {
        let opts = tree_opts(&opts)?;
        Ok(super::copy_tree(h, &src, &dst, &opts)?)
    }
}

/// Bring the file at `dst` to a copy of the regular file at `src` with the given attributes
/// (`None`: keep), without holding either whole: unchanged when the session sees the same
/// size and SHA-256 at both ([`copy_needed`]); the same content with other attributes is a
/// `chmod`/`chown` ([`put_attrs`]); else one [`Effect::CopyFile`] carrying the source's
/// digest ([`submit_copy`]). A source the session planned with its content (an earlier
/// write) is put as that content.
///
/// # Errors
/// [`HostError::BadAncestor`]; a directory at `dst`; `src` not a regular file (a FIFO is not
/// opened); read failures.
pub(crate) fn put_copy(
    h: &mut Host,
    src: &Path,
    dst: &Path,
    attrs: (Option<u32>, Option<u32>, Option<u32>),
) -> Result<bool> {
    let decided = decide_copy(h, src, dst)?;
    put_decided(h, src, dst, decided, attrs)
}

/// What [`put_copy`] does to bring `dst` to a copy of `src`.
pub(crate) enum Decided {
    /// Write this content (a source the session planned with its content).
    Content(bytes::Bytes),
    /// The content is the same: bring the attributes only ([`put_attrs`]).
    Attrs,
    /// Copy, verified against the source's digest ([`submit_copy`]).
    Copy(Option<String>),
}

impl Decided {
    /// The effect [`put_decided`] submits for a copy of `src` to `dst`, if it is one.
    fn copy_effect(
        &self,
        src: &Path,
        dst: &Path,
        (mode, uid, gid): (Option<u32>, Option<u32>, Option<u32>),
    ) -> Option<Effect> {
        match self {
            Decided::Copy(sha256) => Some(Effect::CopyFile {
                src: src.to_path_buf(),
                path: dst.to_path_buf(),
                sha256: sha256.clone(),
                mode,
                uid,
                gid,
            }),
            _ => None,
        }
    }
}

/// [`put_copy`]'s reads: what it does (module docs).
///
/// # Errors
/// As [`put_copy`].
pub(crate) fn decide_copy(h: &Host, src: &Path, dst: &Path) -> Result<Decided> {
    if let ViewedFile::Content(c) = h.view_for_digest(src)? {
        return Ok(Decided::Content(c));
    }
    // Sizes are known for files on disk only (a planned copy's is not).
    let size = match h.view_for_digest(src)? {
        ViewedFile::Open(_) => h.view_stat(src, true)?.map(|s| s.size),
        _ => None,
    };
    // The source's digest, computed at most once, and only when the sizes agree.
    let mut digest = None;
    let differs = copy_needed(h, dst, size, || {
        let d = h.view_digest(src)?;
        digest = Some(d.clone());
        Ok(d)
    })?;
    if !differs {
        return Ok(Decided::Attrs);
    }
    let sha256 = match digest {
        Some(d) => d,
        None => h.view_digest(src)?,
    };
    Ok(Decided::Copy(sha256))
}

/// [`put_copy`]'s change, as [`decide_copy`] decided it.
///
/// # Errors
/// As [`put_copy`].
pub(crate) fn put_decided(
    h: &mut Host,
    src: &Path,
    dst: &Path,
    decided: Decided,
    attrs: (Option<u32>, Option<u32>, Option<u32>),
) -> Result<bool> {
    match decided {
        Decided::Content(c) => {
            let (mode, uid, gid) = attrs;
            fs::put(h, dst, c.to_vec(), mode, uid, gid)
        }
        Decided::Attrs => put_attrs(h, dst, attrs),
        Decided::Copy(sha256) => submit_copy(h, src, dst, sha256, attrs),
    }
}

/// Whether the file at `dst` differs in content from a source of `size` bytes (`None`:
/// unknown) whose SHA-256 `digest` computes (called only when the sizes agree or are
/// unknown; `None`: unknown, so different): true when `dst` is missing.
///
/// # Errors
/// [`HostError::BadAncestor`]; a directory at `dst`; read failures.
pub(crate) fn copy_needed(
    h: &Host,
    dst: &Path,
    size: Option<u64>,
    digest: impl FnOnce() -> Result<Option<String>>,
) -> Result<bool> {
    h.check_creatable(dst)?;
    Ok(match h.view_stat(dst, true)? {
        None => true,
        Some(s) if s.kind == "dir" => {
            return Err(HostError::WrongKind {
                path: dst.to_path_buf(),
                what: "is a directory",
            });
        }
        Some(s)
            if size.is_some_and(|n| n != s.size)
                && matches!(h.view_for_digest(dst)?, ViewedFile::Open(_)) =>
        {
            true
        }
        Some(_) => match digest()? {
            Some(want) => h.view_digest(dst)?.as_deref() != Some(want.as_str()),
            None => true,
        },
    })
}

/// Bring the attributes of the file at `dst`, whose content is already right, to those
/// given (`None`: keep): a `chmod` and/or a `chown` where they differ. Returns whether
/// anything changed.
///
/// # Errors
/// `dst` missing; the effects' failures.
pub(crate) fn put_attrs(
    h: &mut Host,
    dst: &Path,
    (mode, uid, gid): (Option<u32>, Option<u32>, Option<u32>),
) -> Result<bool> {
    let st = h.view_stat(dst, true)?.ok_or_else(|| HostError::NotFound {
        path: dst.to_path_buf(),
    })?;
    let mut changed = false;
    if let Some(m) = mode.filter(|m| *m != st.mode) {
        h.submit(Effect::Chmod {
            path: dst.to_path_buf(),
            mode: m,
        })?;
        changed = true;
    }
    if uid.is_some_and(|u| u != st.uid) || gid.is_some_and(|g| g != st.gid) {
        h.submit(Effect::Chown {
            path: dst.to_path_buf(),
            uid,
            gid,
        })?;
        changed = true;
    }
    if !changed {
        h.note_unchanged();
    }
    Ok(changed)
}

/// Submit the [`Effect::CopyFile`] of `src` (whose digest was `sha256`) to `dst`, under
/// `dst`'s lock. Returns true.
///
/// # Errors
/// Taking the lock; the effect's failures.
pub(crate) fn submit_copy(
    h: &mut Host,
    src: &Path,
    dst: &Path,
    sha256: Option<String>,
    (mode, uid, gid): (Option<u32>, Option<u32>, Option<u32>),
) -> Result<bool> {
    let lock = h.lock_for_update(dst)?;
    let r = h.submit(Effect::CopyFile {
        src: src.to_path_buf(),
        path: dst.to_path_buf(),
        sha256,
        mode,
        uid,
        gid,
    });
    drop(lock);
    r.map(|_| true)
}

/// Confine the directory `dir` when it exists on disk ([`HostRoot::confine`]): until the
/// guard is dropped, the session's reads and writes below it resolve from one handle and
/// follow no symlink. `None` when it does not exist (yet, or only in a plan).
///
/// [`HostRoot::confine`]: crate::host::root::HostRoot::confine
pub(crate) fn confine_dir(
    h: &Host,
    dir: &Path,
) -> Result<Option<crate::host::root::confine::Confined>> {
    let root = h.root();
    if !root.metadata(dir)?.is_some_and(|m| m.is_dir()) {
        return Ok(None);
    }
    Ok(Some(root.confine(dir)?))
}

#[cfg(test)]
thread_local! {
    /// A test's action between the check of `fs::extract` or `fs::copy_tree` and its first
    /// write (a racing user's swap), run once.
    pub(crate) static BETWEEN_CHECK_AND_WRITE: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        std::cell::RefCell::new(None);
}

/// Confine the directory `dir` this call has just created (or found made meanwhile),
/// refusing a symlink in its place ([`HostRoot::confine_created`]); `None` when it does
/// not exist on disk (a plan).
///
/// [`HostRoot::confine_created`]: crate::host::root::HostRoot::confine_created
pub(crate) fn confine_created(
    h: &Host,
    dir: &Path,
) -> Result<Option<crate::host::root::confine::Confined>> {
    let root = h.root();
    if root.symlink_metadata(dir)?.is_none() {
        return Ok(None);
    }
    Ok(Some(root.confine_created(dir)?))
}

/// Run the test's action set in [`BETWEEN_CHECK_AND_WRITE`], if any (nothing outside tests).
pub(crate) fn between_check_and_write() {
    #[cfg(test)]
    if let Some(f) = BETWEEN_CHECK_AND_WRITE.with(|c| c.borrow_mut().take()) {
        f();
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert::check_keys;
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use crate::host::files::fs::positive;
    pub(super) use rhai::{ImmutableString as S, Map};
}
use prelude::*;

/// The option keys of `fs::copy_tree`.
const TREE_KEYS: &[&str] = &["max_files", "max_bytes"];

/// `#{max_files, max_bytes}`.
fn tree_opts(m: &Map) -> Result<TreeOptions, String> {
    check_keys(m, TREE_KEYS)?;
    let d = TreeOptions::default();
    Ok(TreeOptions {
        max_files: positive(m, "max_files", d.max_files)?,
        max_bytes: positive(m, "max_bytes", d.max_bytes)?,
    })
}

host_fns!(copy_tree);
