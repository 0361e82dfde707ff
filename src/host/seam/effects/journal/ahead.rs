//! Records ahead of a batch (issue 31): a call that knows the content writes it is about to
//! make (`fs::extract`, `fs::copy_tree`) has the journal record all of them and `fdatasync`
//! the log once, before the first; each write's own [`StepJournal::before`] then finds its
//! records made and durable and appends nothing.
//!
//! A record made ahead of a write that does not happen (the call failed before it) is what
//! a step killed between a record and its effect leaves, which the replay already takes:
//! the file holds its before-state, put back as it is. A step that goes on after the
//! failed call (a script's `catch`) ends the batch with its next content write or removal
//! the batch does not hold ([`StepJournal::take_ahead`]): a later write of a path recorded
//! ahead gets its own record, whose base is the recorded one's (the replay takes a write
//! that did not land so). Each record ahead keeps the file's stamp ([`super::records::Stamp`]): a write
//! that finds it changed (another writer's edit since the record) records the file again,
//! so the undo puts back that edit, not the content from before it.

use super::StepJournal;
use super::records::{key, stamp_of};
use crate::host::effects::effect::Effect;
use crate::host::root::error::Result;
use crate::host::root::{HostRoot, normalize};

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
            if !targets.insert(normalize(&target)) || self.ahead.contains_key(&k) {
                continue;
            }
            // Taken before the record: a change after it is seen at the write's turn.
            let target = normalize(&target);
            let stamp = stamp_of(root, &target);
            self.open(root)?;
            if self.record(root, effect, false).is_err() {
                if self.failed.is_some() {
                    return Err(self.poisoned());
                }
                break;
            }
            self.ahead.insert(k, (target, stamp));
        }
        self.sync(root)
    }
}
