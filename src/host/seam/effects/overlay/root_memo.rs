//! [`RootMemo`]: what the real root answered a plan session (the overlay's module docs,
//! "Real-root lookups"), and its bound: a plan held to a budget (serve's `--plan-bytes`)
//! counts every answer it remembers against that budget, with its planned effects, and
//! fails the lookup that would take it past ([`HostError::PlanLookupBudget`]), so the
//! answers it remembered stay the ones it sees; a plan with no budget (`skyhook-run`, the
//! agent's preflight) remembers at most [`MEMO_LOCAL_BYTES`] and asks the real root again
//! past it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::Stat;
use crate::host::root::error::{HostError, Result};

/// Largest real-root file whose content a plan remembers ([`RootMemo`]), in bytes (64 KiB).
pub(super) const MEMO_FILE_BYTES: usize = 64 << 10;

/// Content of real-root files a plan remembers in all, in bytes (4 MiB).
pub(super) const MEMO_BYTES: usize = 4 << 20;

/// What one answer a plan remembers ([`RootMemo`]) counts besides its paths and content,
/// in bytes: its map slot (a path, and a path or a [`Stat`] with its `kind`, 80 bytes), up
/// to twice the slots a map holds as it grows, and the allocations of its key and value.
pub(crate) const MEMO_ENTRY_BYTES: u64 = 256;

/// What the memo of a plan with no budget (`skyhook-run`, the agent's preflight) counts at
/// most, in bytes (64 MiB, about 245,000 answers about short paths): past it, further
/// answers are asked of the real root each time, as a larger file's content is.
pub(crate) const MEMO_LOCAL_BYTES: u64 = 64 << 20;

/// The real root's answers remembered by a plan session (module docs, "Real-root lookups"):
/// by normalised host path, the canonical path (`None`: missing) and the metadata (`None`:
/// missing), the latter with a final symlink followed (`stats[1]`) or not (`stats[0]`).
#[derive(Debug, Default)]
pub(super) struct RootMemo {
    pub(super) canonical: HashMap<PathBuf, Option<PathBuf>>,
    pub(super) stats: [HashMap<PathBuf, Option<Stat>>; 2],
    /// Content read by key (`None`: missing): files of at most [`MEMO_FILE_BYTES`], and at
    /// most [`MEMO_BYTES`] in all (`content_bytes`); a larger file is read each time.
    pub(super) contents: HashMap<PathBuf, Option<bytes::Bytes>>,
    pub(super) content_bytes: usize,
    /// Normalised paths the real root found missing, symlinks followed: their key's
    /// metadata is known missing too ([`super::Overlay::key`]).
    pub(super) absent: std::collections::HashSet<PathBuf>,
    /// What the answers count, in bytes ([`RootMemo::admit`]).
    pub(super) bytes: u64,
    /// The plan's budget: bytes planned and the limit ([`super::Overlay::bound_memo`]); `None`:
    /// no budget, [`MEMO_LOCAL_BYTES`].
    pub(super) budget: Option<(u64, u64)>,
    #[cfg(test)]
    pub(super) asked: usize, // lookups that went to the real root
}

impl RootMemo {
    /// Count `cost` bytes for an answer about `path` (or several, made by one lookup):
    /// `true` to remember it; `false` past [`MEMO_LOCAL_BYTES`] in a plan with no budget
    /// (then not remembered, nor counted).
    ///
    /// # Errors
    /// [`HostError::PlanLookupBudget`]: the plan's planned bytes, the answers already
    /// remembered and `cost` would be past its budget (the answer is then not kept).
    pub(super) fn admit(&mut self, path: &Path, cost: u64) -> Result<bool> {
        match self.budget {
            Some((planned, limit)) => {
                let held = planned.saturating_add(self.bytes);
                if held.saturating_add(cost) > limit {
                    return Err(HostError::PlanLookupBudget {
                        path: path.to_path_buf(),
                        size: cost,
                        held,
                        entries: self.entries(),
                        budget: limit,
                    });
                }
            }
            None if self.bytes + cost > MEMO_LOCAL_BYTES => return Ok(false),
            None => {}
        }
        self.bytes += cost;
        Ok(true)
    }

    /// Answers remembered.
    pub(super) fn entries(&self) -> usize {
        self.canonical.len()
            + self.stats[0].len()
            + self.stats[1].len()
            + self.contents.len()
            + self.absent.len()
    }
}

/// What remembering `path` (and a value of `value` bytes) counts ([`MEMO_ENTRY_BYTES`]).
pub(super) fn memo_cost(path: &Path, value: usize) -> u64 {
    MEMO_ENTRY_BYTES + (path.as_os_str().len() + value) as u64
}
