//! Records ahead of a batch (issue 31): a call that knows the content writes it is about to
//! make (`fs::extract`, `fs::copy_tree`) has the journal record all of them and `fdatasync`
//! the log once, before the first; each write's own [`StepJournal::before`] then finds its
//! records made and durable and appends nothing.
//!
//! A record made ahead of a write that does not happen (the call failed before it) is what
//! a step killed between a record and its effect leaves, which the replay already takes:
//! the file holds its before-state, put back as it is.

use std::path::PathBuf;

use super::StepJournal;
use crate::host::Host;
use crate::host::effects::effect::Effect;
use crate::host::root::error::Result;
use crate::host::root::{HostRoot, normalize};

/// What identifies a content write made ahead: its path as given and the SHA-256 it leaves.
pub(super) type Key = (PathBuf, String);

/// The key of a content write whose result is known (`None` for any other effect, and for a
/// copy without its source's digest).
pub(super) fn key(effect: &Effect) -> Option<Key> {
    match effect {
        Effect::WriteFile { path, content, .. } => {
            Some((path.clone(), crate::host::root::digest::sha256_tag(content)))
        }
        Effect::CopyFile {
            path,
            sha256: Some(d),
            ..
        } => Some((path.clone(), format!("sha256:{d}"))),
        _ => None,
    }
}

impl StepJournal {
    /// Record the before-state of each content write in `effects` (module docs), then
    /// `fdatasync` the log once. A path written twice in the batch is recorded at its
    /// second write's turn (its base is what the first left); a before-state that cannot be
    /// read stops the records ahead, and the writes left are recorded at their turn (which
    /// then fail as they would have).
    ///
    /// # Errors
    /// A poisoned step; a failed journal write (which poisons it).
    pub(crate) fn ahead(&mut self, root: &HostRoot, effects: &[Effect]) -> Result<()> {
        if self.failed.is_some() {
            return Err(self.poisoned());
        }
        let mut targets = std::collections::HashSet::new();
        for effect in effects {
            let Some(k) = key(effect) else {
                continue;
            };
            let Ok(target) = root.write_target(&k.0) else {
                break;
            };
            if !targets.insert(normalize(&target)) || self.ahead.contains(&k) {
                continue;
            }
            self.open(root)?;
            if self.record(root, effect, false).is_err() {
                if self.failed.is_some() {
                    return Err(self.poisoned());
                }
                break;
            }
            self.ahead.insert(k);
        }
        self.sync(root)
    }

    /// Whether `effect` was recorded ahead ([`StepJournal::ahead`]): then it is taken off
    /// the batch and needs no record now.
    pub(super) fn take_ahead(&mut self, effect: &Effect) -> bool {
        !self.ahead.is_empty() && key(effect).is_some_and(|k| self.ahead.remove(&k))
    }
}

impl Host {
    /// Record ahead, in the step's undo journal, the content writes `effects` this call is
    /// about to submit in this order (module docs); nothing without a journal. Pending
    /// batched line edits are written first (their records come before these).
    ///
    /// # Errors
    /// A failed flush of the line batch; as [`StepJournal::ahead`].
    pub(crate) fn journal_ahead(&self, effects: &[Effect]) -> Result<()> {
        if !self.executor.journals() {
            return Ok(());
        }
        self.flush_batch()?;
        self.executor.journal_ahead(&self.cx, effects)
    }
}
