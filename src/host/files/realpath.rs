//! `fs::realpath(path)`: the canonical host path of `path`, resolved one component at a time
//! through the session's view (so in a plan it follows planned symlinks and directories),
//! as `realpath(1)` on the host would: absolute symlink targets are host paths, at most
//! [`MAX_LINKS`] symlinks are followed, every component but the last must exist. A `..` that
//! would climb above `/` (in the path or in a symlink's target) is an error rather than being
//! clamped, since such a link points outside the host it was written for.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use crate::host::Host;
use crate::host::files::fs::host_path;
use crate::host::root::error::{HostError, Result};

/// How many symlinks one resolution follows before it fails (the kernel's `MAXSYMLINKS`).
pub const MAX_LINKS: usize = 40;

/// The components of `p` onto the front of `queue`, in order.
fn push_front(queue: &mut VecDeque<OsString>, p: &Path) {
    let parts: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    for part in parts.into_iter().rev() {
        queue.push_front(part);
    }
}

fn joined(parts: &[OsString]) -> PathBuf {
    let mut p = PathBuf::from("/");
    p.extend(parts);
    p
}

/// `fs::realpath(p)`: see the module docs.
///
/// # Errors
/// A relative path; [`HostError::NotFound`] naming the first missing component when it is
/// not the last; [`HostError::WrongKind`] for a component below a non-directory, a `..`
/// above `/`, or more than [`MAX_LINKS`] symlinks; resolution failures.
pub fn realpath(h: &Host, p: &str) -> Result<String> {
    let given = host_path(p)?;
    let mut queue = VecDeque::new();
    push_front(&mut queue, &given);
    let mut resolved: Vec<OsString> = Vec::new();
    let mut links = 0;
    while let Some(part) = queue.pop_front() {
        if part == ".." {
            if resolved.pop().is_none() {
                return Err(HostError::WrongKind {
                    path: given,
                    what: "climbs above / of the host root (through `..` in the path or in a symlink's target)",
                });
            }
            continue;
        }
        resolved.push(part);
        let here = joined(&resolved);
        let Some(st) = h.view_stat(&here, false)? else {
            // Only the last component may be missing (GNU realpath's default).
            if !queue.is_empty() {
                return Err(HostError::NotFound { path: here });
            }
            continue;
        };
        match st.kind.as_str() {
            "symlink" => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(HostError::WrongKind {
                        path: given,
                        what: "has too many levels of symbolic links (more than 40)",
                    });
                }
                let target = h
                    .view_readlink(&here)?
                    .ok_or_else(|| HostError::NotFound { path: here.clone() })?;
                resolved.pop();
                if target.is_absolute() {
                    resolved.clear();
                }
                push_front(&mut queue, &target);
            }
            "dir" => {}
            _ if queue.is_empty() => {}
            _ => {
                return Err(HostError::WrongKind {
                    path: here,
                    what: "is not a directory, and the path goes on below it",
                });
            }
        }
    }
    Ok(joined(&resolved).to_string_lossy().into_owned())
}

host_fn! {
    /// The canonical host path of `path`: symlinks followed inside the host root (an absolute
    /// target is a host path; at most 40 links), `.` and `..` removed; every component but the last
    /// must exist. A `..` that climbs above `/`, in the path or a link's target, is an error naming
    /// the path. In a plan it sees planned directories and symlinks.
    #[host(ns = "fs", effects = ReadsHost)]
    fn realpath(h: &mut Host, path: S) -> String {
        Ok(super::realpath(h, &path)?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::ImmutableString as S;
}
use prelude::*;

host_fns!(realpath);
