//! `fs::extract(archive, dest, #{strip_components, max_files, max_bytes})`: unpack a tar,
//! tar.gz, tar.xz or zip archive (told apart by their first bytes, not by the name) into
//! directory `dest`, confined to it.
//!
//! The whole archive is read and checked before anything changes, each entry against the
//! tree as extracted so far (a map of path -> the entry that made it a directory, file or
//! symlink) and what is already at the destination: an entry whose name is absolute or
//! climbs out with `..`; a symlink whose target is absolute or, resolved through the
//! archive's links and those already below `dest` as the kernel would, leaves `dest` (also
//! checked again once the whole tree is known, since a later link can change an earlier
//! one's way); an entry below a symlink or a file (of the archive, or already at the
//! destination); two entries of different kinds at one path (both named); a hard link, a
//! device or FIFO; or an entry of another kind in the way at the destination fails the call
//! naming the archive and the entry, and nothing is written. So do more than `max_files`
//! entries or more than `max_bytes` of unpacked content (which also bounds a decompression
//! bomb: reading stops at the limit). In an apply, the extracts of one host root run one
//! at a time, from before the check to the last write
//! (`root::pathlock::lock_root`): two archives each inside `dest`, checked
//! at once, could together leave a link out of it. Then each directory, file and symlink that differs is
//! its own effect (`mkdir`, `write`, `symlink`): a plan lists every file and a check reports
//! each one that drifted. Permission bits come from the archive (files 0644 and
//! directories 0755 when it has none); owners and times do not (files belong to the agent,
//! as root: `tar --no-same-owner`).
//!
//! No entry is held in memory: the checking pass reads headers and streams each file's
//! content through SHA-256, and a file is compared with the destination by size, then by
//! digest. In apply mode a second pass streams the entries that differ into a staging
//! directory inside the root ([`STAGING`]), and each is then an
//! [`crate::host::effects::effect::Effect::CopyFile`] from
//! there (journaled, atomic and durable as a write, verified against the first pass's
//! digest, so an archive that changed between the passes fails the call with the file
//! left as it was); the staging directory is removed at the end of the call. A plan's
//! copies name the archive entry they come from (`<archive>:<entry>`); their content is not
//! diffed.
//!
//! The archive is read through the session's view: in a plan, an archive that `fs::fetch`
//! only plans to download cannot be listed, and the call says so ([`Extracted::Unknown`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Cursor, Read};
use std::path::{Component, Path, PathBuf};

use crate::host::Host;
use crate::host::effects::staging::StagingDir;
use crate::host::effects::view::ViewedFile;
use crate::host::files::copy_tree::{
    between_check_and_write, confine_created, confine_dir, copy_needed, put_attrs, submit_copy,
};
use crate::host::files::fs::{self, host_path};
use crate::host::root::digest::copy_hashed;
use crate::host::root::error::{HostError, Result};

pub use crate::host::effects::staging::{STAGING, sweep_staging};

mod read;
pub use read::XZ_MEMLIMIT;
use read::{Stager, Visit, open, read_archive};

/// Default of `max_files`: at most this many entries.
pub const DEFAULT_MAX_FILES: u64 = 100_000;

/// Default of `max_bytes`: at most this much unpacked content (1 GiB).
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// Options of one extraction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtractOptions {
    /// Leading path components dropped from each entry's name (`tar --strip-components`);
    /// an entry with no more components than this is skipped.
    pub strip_components: usize,
    /// Largest number of entries in the archive.
    pub max_files: u64,
    /// Largest total unpacked size of its files, in bytes.
    pub max_bytes: u64,
}

impl Default for ExtractOptions {
    fn default() -> Self {
        ExtractOptions {
            strip_components: 0,
            max_files: DEFAULT_MAX_FILES,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// What one `fs::extract` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extracted {
    /// The entries were checked and brought to `dest`; whether anything changed.
    Done(bool),
    /// In a plan: the archive is a download `fs::fetch` only plans, so its entries are
    /// unknown until applied; nothing was planned.
    Unknown,
}

/// One checked entry, relative to `dest`.
#[derive(Debug)]
enum Item {
    Dir {
        rel: PathBuf,
        mode: u32,
    },
    File {
        rel: PathBuf,
        mode: u32,
        /// The entry's position in the archive (as [`Visit::visit`] counts them).
        index: u64,
        /// The entry's name as the archive has it.
        name: String,
        /// Unpacked size in bytes.
        size: u64,
        /// SHA-256 of the content, 64 lowercase hex digits.
        sha256: String,
    },
    Link {
        rel: PathBuf,
        target: PathBuf,
    },
}

/// The kinds of entry an archive holds, as read.
enum Kind {
    Dir,
    File,
    Link(PathBuf),
    Unsupported(std::borrow::Cow<'static, str>),
}

/// The error of a bad archive or entry, on one line: `why` comes from the readers too,
/// whose messages can quote an entry's name, so its control characters are escaped.
fn bad(archive: &Path, entry: Option<&str>, why: impl std::fmt::Display) -> HostError {
    let mut line = String::new();
    for c in why.to_string().chars() {
        match c.is_control() {
            true => line.extend(c.escape_debug()),
            false => line.push(c),
        }
    }
    HostError::Invalid {
        what: "archive",
        message: match entry {
            Some(e) => format!("{}: entry {e:?}: {line}", archive.display()),
            None => format!("{}: {line}", archive.display()),
        },
    }
}

/// What the archive has put at one path so far (relative to `dest`), and by which entry
/// (its name as in the archive), so that a conflict names both entries.
#[derive(Debug)]
enum Node {
    /// A directory: the archive's own entry, or (`implied`) one an entry below it needs.
    Dir {
        entry: String,
        implied: bool,
    },
    File {
        entry: String,
    },
    Link {
        entry: String,
        target: PathBuf,
    },
}

impl Node {
    fn entry(&self) -> &str {
        match self {
            Node::Dir { entry, .. } | Node::File { entry } | Node::Link { entry, .. } => entry,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Node::Dir { .. } => "a directory",
            Node::File { .. } => "a file",
            Node::Link { .. } => "a symlink",
        }
    }
}

/// Why a symlink's target does not stay inside `dest`, and the last link it went through
/// (of the archive, or at the destination).
enum Escape {
    Leaves,
    Loops,
    /// The call's budget of resolution steps ([`step_budget`]) is spent, or a target
    /// resolves deeper than [`MAX_DEPTH`].
    TooComplex,
}

/// Path components all the symlink checks of one call may walk once `entries` entries are
/// read: 65536 and 64 per entry, far more than real archives need (a link's target has a
/// few components, each checked twice) and a bound on the time a hostile one (many links
/// with long targets through each other) can take.
fn step_budget(entries: u64) -> u64 {
    (1 << 16) + 64 * entries
}

/// Deepest directory a symlink target may resolve to while it is checked.
const MAX_DEPTH: usize = 1024;

/// Longest symlink target extracted, in bytes (the kernel's `PATH_MAX` less its NUL).
const MAX_TARGET: usize = 4095;

/// At most this many symlinks are followed resolving one target (the kernel's limit).
const MAX_HOPS: usize = 40;

/// The checks and the gathered items of one archive.
struct Gather<'a> {
    h: &'a Host,
    archive: &'a Path,
    dest: &'a Path,
    o: ExtractOptions,
    entries: u64,
    bytes: u64,
    /// The tree as extracted so far: every path an entry made or needs, by the entry.
    tree: BTreeMap<PathBuf, Node>,
    /// Path components the symlink checks walked so far ([`step_budget`]).
    steps: std::cell::Cell<u64>,
    /// The symlinks at the destination looked up so far: path below `dest` -> target.
    disk: std::cell::RefCell<std::collections::HashMap<PathBuf, Option<PathBuf>>>,
    items: Vec<Item>,
}

impl Gather<'_> {
    /// The symlink at `rel` below `dest` as the archive leaves it so far: its target and
    /// whether it is the archive's (else one at the destination, looked up once per path);
    /// `Ok(None)`: no symlink there.
    fn link_at(&self, rel: &Path) -> Result<Option<(PathBuf, bool)>> {
        match self.tree.get(rel) {
            Some(Node::Link { target, .. }) => Ok(Some((target.clone(), true))),
            Some(_) => Ok(None),
            None => {
                if let Some(t) = self.disk.borrow().get(rel) {
                    return Ok(t.clone().map(|t| (t, false)));
                }
                let at = self.dest.join(rel);
                let t = match self.h.view_stat(&at, false)? {
                    Some(s) if s.kind == "symlink" => self.h.view_readlink(&at)?,
                    _ => None,
                };
                self.disk.borrow_mut().insert(rel.to_path_buf(), t.clone());
                Ok(t.map(|t| (t, false)))
            }
        }
    }

    /// Resolve the symlink target `target`, read in the directory `base` (below `dest`),
    /// through the archive's links and those at the destination, as the kernel would once
    /// the archive is extracted: the directory below `dest` it designates, or why it
    /// leaves `dest` (or is too costly to follow: [`step_budget`]). `via` is set to the
    /// last link followed.
    fn resolve(
        &self,
        base: &Path,
        target: &Path,
        hops: &mut usize,
        via: &mut Option<(PathBuf, bool)>,
    ) -> Result<std::result::Result<PathBuf, Escape>> {
        let mut at = base.to_path_buf();
        let mut depth = at.components().count();
        for c in target.components() {
            self.steps.set(self.steps.get() + 1);
            if self.steps.get() > step_budget(self.entries) || depth > MAX_DEPTH {
                return Ok(Err(Escape::TooComplex));
            }
            match c {
                Component::RootDir | Component::Prefix(_) => return Ok(Err(Escape::Leaves)),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !at.pop() {
                        return Ok(Err(Escape::Leaves));
                    }
                    depth -= 1;
                }
                Component::Normal(n) => {
                    at.push(n);
                    depth += 1;
                    if let Some((t, ours)) = self.link_at(&at)? {
                        *hops += 1;
                        if *hops > MAX_HOPS {
                            return Ok(Err(Escape::Loops));
                        }
                        let link = at.clone();
                        at.pop();
                        *via = Some((link, ours));
                        match self.resolve(&at, &t, hops, via)? {
                            Ok(to) => {
                                depth = to.components().count();
                                at = to;
                            }
                            Err(e) => return Ok(Err(e)),
                        }
                    }
                }
            }
        }
        Ok(Ok(at))
    }

    /// Fail when the symlink entry `name` at `rel` with `target` does not resolve inside
    /// `dest` ([`Gather::resolve`]); `when` ends the message.
    fn check_link(&self, name: &str, rel: &Path, target: &Path, when: &str) -> Result<()> {
        let base = rel.parent().unwrap_or(Path::new(""));
        let mut via = None;
        let why = match self.resolve(base, target, &mut 0, &mut via)? {
            Ok(_) => return Ok(()),
            Err(Escape::Leaves) => "which leaves the destination",
            Err(Escape::Loops) => "which goes through more than 40 symlinks",
            Err(Escape::TooComplex) => {
                return Err(bad(
                    self.archive,
                    None,
                    format!(
                        "its symlinks take more than {} steps to check, 65536 and 64 per entry (a limit of fs::extract)",
                        step_budget(self.entries)
                    ),
                ));
            }
        };
        let through = match via {
            Some((p, true)) => format!(" (through the archive's symlink {})", p.display()),
            Some((p, false)) => format!(
                " (through {}, a symlink at the destination)",
                self.dest.join(p).display()
            ),
            None => String::new(),
        };
        Err(bad(
            self.archive,
            Some(name),
            format!("is a symlink to {target:?}, {why}{when}{through}"),
        ))
    }

    /// Check the parents of `rel` (outermost first) against the tree so far and the
    /// destination: nothing is written through a symlink (the archive's or one already at
    /// the destination, which could point anywhere) or below a file.
    fn check_parents(&self, name: &str, rel: &Path) -> Result<()> {
        let fail = |why: String| bad(self.archive, Some(name), why);
        let mut ancestors: Vec<&Path> = rel
            .ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
            .collect();
        ancestors.reverse();
        for anc in ancestors {
            match self.tree.get(anc) {
                Some(Node::Dir { .. }) => continue,
                Some(n) => {
                    return Err(fail(format!(
                        "lies below entry {:?}, {} of the archive",
                        n.entry(),
                        n.kind()
                    )));
                }
                None => {}
            }
            match self.h.view_stat(&self.dest.join(anc), false)? {
                Some(s) if s.kind == "symlink" => {
                    return Err(fail(format!(
                        "lies below {}, a symlink at the destination",
                        self.dest.join(anc).display()
                    )));
                }
                Some(s) if s.kind != "dir" => {
                    return Err(fail(format!(
                        "{} exists and is a {}, where the archive has a dir",
                        self.dest.join(anc).display(),
                        s.kind
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Record the entry `name` at `rel` as `node` in the tree (its parents as directories
    /// it needs). An entry of another kind already at `rel` is a conflict naming both; the
    /// same kind again replaces it, as tar does.
    fn record(&mut self, name: &str, rel: &Path, node: Node) -> Result<()> {
        if let Some(old) = self.tree.get(rel) {
            let same = matches!(
                (old, &node),
                (Node::Dir { .. }, Node::Dir { .. })
                    | (Node::File { .. }, Node::File { .. })
                    | (Node::Link { .. }, Node::Link { .. })
            );
            if !same {
                let why = match old {
                    Node::Dir { implied: true, .. } => format!(
                        "is {} where entry {:?} lies below it, which needs a directory there: the archive has both",
                        node.kind(),
                        old.entry()
                    ),
                    _ => format!(
                        "is {} where entry {:?} is {}: the archive has both at the same path",
                        node.kind(),
                        old.entry(),
                        old.kind()
                    ),
                };
                return Err(bad(self.archive, Some(name), why));
            }
            if matches!(old, Node::Dir { .. }) && matches!(node, Node::Dir { implied: true, .. }) {
                return Ok(());
            }
        }
        for anc in rel.ancestors().skip(1) {
            if anc.as_os_str().is_empty() || self.tree.contains_key(anc) {
                break;
            }
            self.tree.insert(
                anc.to_path_buf(),
                Node::Dir {
                    entry: name.to_string(),
                    implied: true,
                },
            );
        }
        self.tree.insert(rel.to_path_buf(), node);
        Ok(())
    }

    /// Once every entry is read: each symlink of the archive still resolves inside `dest`
    /// in the tree as a whole (an entry after a link can change what the link resolves
    /// through).
    fn check_final(&self) -> Result<()> {
        for (rel, node) in &self.tree {
            if let Node::Link { entry, target } = node {
                self.check_link(entry, rel, target, " once the archive is extracted")?;
            }
        }
        Ok(())
    }
}

impl Visit for Gather<'_> {
    fn archive(&self) -> &Path {
        self.archive
    }

    /// Check one entry and keep it (a file's content streamed through its digest, within
    /// `max_bytes`).
    fn visit(
        &mut self,
        index: u64,
        name: &str,
        kind: Kind,
        mode: Option<u32>,
        body: &mut dyn Read,
    ) -> Result<()> {
        let fail = |why: &dyn std::fmt::Display| bad(self.archive, Some(name), why);
        self.entries += 1;
        if self.entries > self.o.max_files {
            return Err(bad(
                self.archive,
                None,
                format!("more than {} entries (max_files)", self.o.max_files),
            ));
        }
        // A name or link target with a control character (a NUL, a newline) would reach
        // the plan, the errors and the logs as a broken line: refused.
        if name.chars().any(char::is_control) {
            return Err(fail(
                &"has a control character in its name, which is not extracted",
            ));
        }
        if let Kind::Link(t) = &kind
            && t.to_string_lossy().chars().any(char::is_control)
        {
            return Err(fail(&format!(
                "is a symlink to {t:?}, a target with a control character, which is not extracted"
            )));
        }
        // A leading `.` counts as a component for stripping, as GNU tar counts it
        // (`./efa/x` with strip_components 1 is `efa/x`); it is dropped afterwards.
        let mut parts = Vec::new();
        for c in Path::new(name).components() {
            match c {
                Component::Normal(p) => parts.push(p.to_os_string()),
                Component::CurDir => parts.push(".".into()),
                Component::ParentDir => {
                    return Err(fail(&"climbs out of the destination with `..`"));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(fail(&"is an absolute path"));
                }
            }
        }
        if parts.len() <= self.o.strip_components {
            return Ok(());
        }
        let rel: PathBuf = parts[self.o.strip_components..]
            .iter()
            .filter(|p| *p != ".")
            .collect();
        if rel.as_os_str().is_empty() {
            return Ok(());
        }
        self.check_parents(name, &rel)?;
        let at_dest = self.h.view_stat(&self.dest.join(&rel), false)?;
        let in_the_way = |want: &str| {
            at_dest.as_ref().filter(|s| s.kind != want).map(|s| {
                fail(&format!(
                    "{} exists and is a {}, where the archive has a {want}",
                    self.dest.join(&rel).display(),
                    s.kind
                ))
            })
        };
        match kind {
            Kind::Dir => {
                if let Some(e) = in_the_way("dir") {
                    return Err(e);
                }
                let node = Node::Dir {
                    entry: name.to_string(),
                    implied: false,
                };
                self.record(name, &rel, node)?;
                self.items.push(Item::Dir {
                    rel,
                    mode: mode.unwrap_or(0o755) & 0o7777,
                });
            }
            Kind::File => {
                if let Some(e) = in_the_way("file") {
                    return Err(e);
                }
                let node = Node::File {
                    entry: name.to_string(),
                };
                self.record(name, &rel, node)?;
                let room = self.o.max_bytes - self.bytes;
                let (size, sha256) = copy_hashed(&mut body.take(room + 1), &mut std::io::sink())
                    .map_err(|e| fail(&format!("cannot be read: {e}")))?;
                if size > room {
                    return Err(bad(
                        self.archive,
                        None,
                        format!(
                            "unpacks to more than {} bytes (max_bytes)",
                            self.o.max_bytes
                        ),
                    ));
                }
                self.bytes += size;
                self.items.push(Item::File {
                    rel,
                    mode: mode.unwrap_or(0o644) & 0o7777,
                    index,
                    name: name.to_string(),
                    size,
                    sha256,
                });
            }
            Kind::Link(target) => {
                if let Some(e) = in_the_way("symlink") {
                    return Err(e);
                }
                if target.as_os_str().len() > MAX_TARGET {
                    return Err(fail(&format!(
                        "is a symlink to a target of {} bytes, more than the {MAX_TARGET} a symlink holds",
                        target.as_os_str().len()
                    )));
                }
                if target.as_os_str().is_empty() || target.is_absolute() {
                    return Err(fail(&format!(
                        "is a symlink to {:?}: only relative targets inside the destination are extracted",
                        target
                    )));
                }
                let node = Node::Link {
                    entry: name.to_string(),
                    target: target.clone(),
                };
                self.record(name, &rel, node)?;
                self.check_link(name, &rel, &target, "")?;
                self.items.push(Item::Link { rel, target });
            }
            Kind::Unsupported(what) => {
                return Err(fail(&format!("is {what}, which is not extracted")));
            }
        }
        Ok(())
    }
}

/// `fs::extract(archive, dest, opts)`: see the module docs.
///
/// # Errors
/// Relative paths; the archive missing or not a regular file; `dest` not a directory; an
/// unreadable or malformed archive, a bad entry or the limits ([`HostError::Invalid`],
/// naming the archive and entry), all before any change. Then the effects' own failures.
pub fn extract(h: &mut Host, archive: &str, dest: &str, o: &ExtractOptions) -> Result<Extracted> {
    let archive = host_path(archive)?;
    let dest = host_path(dest)?;
    if h.view_stat(&dest, true)?.is_some_and(|s| s.kind != "dir") {
        return Err(HostError::WrongKind {
            path: dest,
            what: "exists and is not a directory",
        });
    }
    let Some(mut r) = open(h, &archive)? else {
        return Ok(Extracted::Unknown);
    };
    // In an apply, the extracts of this host root run one at a time, from before the
    // check to the last write: each archive is checked against the destination as it is,
    // so another extract's symlinks must not appear in between (two archives each inside
    // `dest` can together make a link that leaves it). The session's pending edit is
    // written first: no path lock is held while waiting.
    let _one_at_a_time = h.lock_extracts()?;
    // From here every read and write below `dest` goes through one handle on it, which no
    // symlink below it redirects (`HostRoot::confine`): a destination that exists now is
    // confined before its check, one created by this call right after it is made.
    let mut confined = confine_dir(h, &dest)?;
    // A `dest` this call creates: its nearest existing ancestor until it is made.
    let mut above = match confined {
        None => h.confine_ancestor(&dest)?,
        Some(_) => None,
    };
    let items = {
        let mut g = Gather {
            h,
            archive: &archive,
            dest: &dest,
            o: *o,
            entries: 0,
            bytes: 0,
            tree: BTreeMap::new(),
            steps: std::cell::Cell::new(0),
            disk: Default::default(),
            items: Vec::new(),
        };
        read_archive(&mut g, &mut r)?;
        g.check_final()?;
        g.items
    };
    // The files whose content differs at the destination, by position in the archive.
    let mut copies = BTreeSet::new();
    for item in &items {
        if let Item::File {
            rel,
            index,
            size,
            sha256,
            ..
        } = item
            && copy_needed(h, &dest.join(rel), Some(*size), || Ok(Some(sha256.clone())))?
        {
            copies.insert(*index);
        }
    }
    // This call's staging directory, locked while it lives and removed when dropped (at
    // the end of the call, after the copies from it).
    let mut staging = match copies.is_empty() {
        false => h.staging_dir()?,
        true => None,
    };
    let result = (|| -> Result<bool> {
        let mut staged = BTreeMap::new();
        if let Some(dir) = &mut staging {
            let wanted: BTreeMap<u64, u64> = items
                .iter()
                .filter_map(|item| match item {
                    Item::File { index, size, .. } if copies.contains(index) => {
                        Some((*index, *size))
                    }
                    _ => None,
                })
                .collect();
            let mut s = Stager {
                archive: &archive,
                staging: dir,
                wanted: &wanted,
                staged: &mut staged,
            };
            read_archive(&mut s, &mut r)?;
        }
        between_check_and_write();
        let mut changed = fs::mkdir(h, &dest.display().to_string(), None)?;
        if confined.is_none() {
            confined = confine_created(h, &dest)?;
        }
        above.take();
        // The copies' undo records, made durable once before the first (issue 31).
        let ahead: Vec<crate::host::effects::effect::Effect> = items
            .iter()
            .filter_map(|item| match item {
                Item::File {
                    rel,
                    mode,
                    index,
                    sha256,
                    ..
                } if copies.contains(index) => {
                    Some(crate::host::effects::effect::Effect::CopyFile {
                        src: staged.get(index).cloned()?,
                        path: dest.join(rel),
                        sha256: Some(sha256.clone()),
                        mode: Some(*mode),
                        uid: None,
                        gid: None,
                    })
                }
                _ => None,
            })
            .collect();
        h.journal_ahead(&ahead)?;
        for item in items {
            changed |= match item {
                Item::Dir { rel, mode } => {
                    fs::mkdir(h, &dest.join(rel).display().to_string(), Some(mode))?
                }
                Item::File {
                    rel,
                    mode,
                    index,
                    name,
                    sha256,
                    ..
                } => {
                    let to = dest.join(rel);
                    if copies.contains(&index) {
                        // A plan stages nothing: its copy names the entry.
                        let from = staged.get(&index).map_or_else(
                            || PathBuf::from(format!("{}:{name}", archive.display())),
                            PathBuf::clone,
                        );
                        submit_copy(h, &from, &to, Some(sha256), (Some(mode), None, None))?
                    } else {
                        put_attrs(h, &to, (Some(mode), None, None))?
                    }
                }
                Item::Link { rel, target } => fs::symlink(
                    h,
                    &target.to_string_lossy(),
                    &dest.join(rel).display().to_string(),
                )?,
            };
        }
        Ok(changed)
    })();
    drop(confined);
    drop(staging);
    let changed = result?;
    Ok(Extracted::Done(changed))
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::CallError;
    pub(super) use crate::host::api::convert::check_keys;
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use crate::host::files::fs::positive;
    pub(super) use rhai::{ImmutableString as S, Map};
}
use prelude::*;

/// The option keys of `fs::extract`.
const EXTRACT_KEYS: &[&str] = &["strip_components", "max_files", "max_bytes"];

/// `#{strip_components, max_files, max_bytes}`.
fn extract_opts(m: &Map) -> Result<ExtractOptions, String> {
    check_keys(m, EXTRACT_KEYS)?;
    let d = ExtractOptions::default();
    let strip = match m.get("strip_components").filter(|d| !d.is_unit()) {
        None => 0,
        Some(v) => match v.as_int() {
            Ok(n) if (0..=64).contains(&n) => n as usize,
            _ => {
                return Err(format!(
                    "option strip_components must be an integer from 0 to 64, got {v}"
                ));
            }
        },
    };
    Ok(ExtractOptions {
        strip_components: strip,
        max_files: positive(m, "max_files", d.max_files)?,
        max_bytes: positive(m, "max_bytes", d.max_bytes)?,
    })
}

/// `fs::extract` through the session; in a plan, an archive `fs::fetch` only plans is
/// reported on the step's stderr and counted as a change.
fn extract_reporting(
    h: &mut crate::host::Host,
    run: &crate::host::api::Api,
    archive: &str,
    dest: &str,
    o: &ExtractOptions,
) -> Result<bool, CallError> {
    Ok(match extract(h, archive, dest, o)? {
        Extracted::Done(changed) => changed,
        Extracted::Unknown => {
            let line = format!(
                "warning: fs::extract: {archive} is downloaded by fs::fetch only when applied: the files it unpacks into {dest} are listed then\n"
            );
            run.output.stderr(line.as_bytes());
            true
        }
    })
}

host_fn! {
    /// Unpack a tar (GNU sparse entries included), tar.gz, tar.xz or zip archive (told apart by
    /// content) into directory `dest`, confined to it. The whole archive is checked first, each
    /// entry against the tree as extracted so far (the archive's directories, files and symlinks,
    /// and what is already below `dest`): an absolute name, a `..`, a symlink whose target is
    /// absolute or, followed through the archive's links and those already below `dest`, leaves
    /// `dest` (checked again against the whole tree), an entry below a symlink or a file, two
    /// entries of different kinds at one path (both named), a name or link target with a control
    /// character, a hard link, device, FIFO or PAX-format sparse file, an entry of another kind in
    /// the way, over 100000 entries, over 1 GiB unpacked or an xz stream needing over 80 MiB to
    /// decode fails the call naming the archive and entry, and nothing is written. In an apply the
    /// extracts of one host root run one at a time (an exclusive `flock` on the root's `/`, held
    /// from before the check to the last write), so two at once cannot together leave a link out of
    /// `dest`. Then each directory, file and symlink that differs is its own effect (a plan lists
    /// every file; a check reports each that drifted), written through a handle on `dest` opened
    /// before the check that follows no symlink below it (see the rules: a symlink swapped in
    /// meanwhile fails the write, never redirects it). No entry is held in memory: files are
    /// compared by size and streamed SHA-256, and the apply streams the ones that differ into a
    /// staging directory of its own inside the root (`/var/lib/skyhook/.extract/<boot
    /// id>-<random>`, written through its handle, held by an `flock` while the call runs and
    /// removed at its end; an agent's start removes only the ones nobody holds), then copies each
    /// into place as a verified write (an archive that changed meanwhile fails the call, the file
    /// left as it was); a plan's diff names the entry instead of diffing its content. Modes come
    /// from the archive; files belong to root. In a plan, an archive `fs::fetch` only plans cannot
    /// be listed: a warning says so on stderr and the call returns true.
    #[host(ns = "fs", effects = [Mkdir, Chmod, Write, Symlink])]
    fn extract(run: &Api, h: &mut Host, archive: S, dest: S) -> bool {
        super::extract_reporting(h, run, &archive, &dest, &ExtractOptions::default())
    }

    /// As `extract`, with `#{strip_components}` (leading name components dropped, as `tar
    /// --strip-components`) and the limits `#{max_files, max_bytes}`.
    #[overload(options = EXTRACT_KEYS)]
    fn extract_with_opts(run: &Api, h: &mut Host, archive: S, dest: S, opts: Map) -> bool {
        let opts = extract_opts(&opts)?;
        super::extract_reporting(h, run, &archive, &dest, &opts)
    }
}

host_fns!(extract);
