//! [`Host::submit`]: an effect validated the same way in every mode, described for the
//! report, and handed to the executor (module docs of `session`).

use super::Host;
use crate::host::effects::effect::{Effect, EffectClass};
use crate::host::effects::exec::{CmdOutput, CommandOptions};
use crate::host::effects::overlay::normalize;
use crate::host::effects::report::{Action, Change, ExecMode, Item};
use crate::host::root::error::{HostError, Result};
use std::path::Path;

impl Host {
    /// Count a mutating call that found the desired state already in place.
    pub fn note_unchanged(&mut self) {
        self.report.unchanged += 1;
    }

    /// Hand one effect to the executor (see the module docs). Returns the command output for
    /// [`Effect::Command`] (planned in plan/check mode), `None` otherwise.
    ///
    /// # Errors
    /// In apply mode, whatever performing it fails with; in plan/check mode, failures to
    /// read the current state for the diff.
    pub fn submit(&mut self, mut effect: Effect) -> Result<Option<CmdOutput>> {
        // A stale package index (a changed `pkg::repo`, [`Host::mark_package_index_stale`])
        // is refreshed by the next install; an install that refreshes, or `pkg::update`,
        // leaves it fresh once it succeeded.
        if let Effect::PackageInstall { update, .. } = &mut effect {
            *update |= self.package_index_stale;
        }
        let refreshes = matches!(
            effect,
            Effect::PackageInstall { update: true, .. }
                | Effect::PackageUpgrade { upgrade: false, .. }
        );
        if let Some(r) = &mut self.recorded {
            r.push(effect.clone());
        }
        let appended = self.appended.take();
        let line =
            std::mem::take(&mut self.line_write) && matches!(effect, Effect::WriteFile { .. });
        let hold =
            std::mem::take(&mut self.hold_write) && matches!(effect, Effect::WriteFile { .. });
        self.settle_batch()?;
        // Whatever the effect is, the line views may no longer show the files (the line
        // functions put back the view of the file they wrote).
        self.texts.clear();
        if matches!(effect, Effect::Interrupt(_)) {
            self.charge_planned(&effect, 0)?;
        }
        if let Effect::Interrupt(i) = effect {
            self.executor
                .execute(&self.cx, &Effect::Interrupt(i.clone()))?;
            self.journal.push(Item::Interrupt {
                index: self.report.interrupts.len(),
                position: self.position.clone(),
            });
            self.report.interrupts.push(i);
            return Ok(None);
        }
        self.validate(&effect)?;
        self.precheck_planned(&effect)?;
        let with_diff = self.renders_diffs();
        let d = self.describe(&effect, with_diff, appended.as_ref())?;
        let described = d.summary.len()
            + d.diff.as_ref().map_or(0, String::len)
            + d.mkdir.iter().map(String::len).sum::<usize>();
        self.charge_planned(&effect, described)?;
        // A daemon-reload (explicit or scheduled) satisfies a scheduled one.
        let reload = matches!(effect, Effect::DaemonReload);
        let was_pending = reload && std::mem::take(&mut self.pending_daemon_reload);
        let before = self.hash_before(&effect)?;
        let out = if hold {
            // The line functions' batched write ((module docs, "Batched line edits")).
            None
        } else {
            let r = match line {
                true => self.executor.execute_line_edit(&self.cx, &effect),
                false => self.executor.execute(&self.cx, &effect),
            };
            if reload && self.executor.changes_host() {
                self.settle_reload_record(r.is_ok(), was_pending);
            }
            r?
        };
        if self.mode() == ExecMode::Plan {
            self.unplanned.note(&effect, &d.summary, &self.position);
        }
        let position = self.position.clone();
        match effect.class() {
            EffectClass::Change => {
                let index = self.report.changes.len();
                self.journal.push(Item::Change(index));
                self.report.changes.push(Change {
                    kind: effect.kind().name().into(),
                    target: effect.target(),
                    summary: d.summary,
                    diff: d.diff,
                    before,
                    after: d.after,
                    mkdir: d.mkdir,
                    position,
                });
                // `after` is filled when the report is taken ([`crate::host::effects::hashes`]).
                self.hashes.note(index, effect);
            }
            EffectClass::Action => {
                self.journal.push(Item::Action(self.report.actions.len()));
                self.report.actions.push(Action {
                    kind: effect.kind().name().into(),
                    target: effect.target(),
                    summary: d.summary,
                    position,
                });
            }
            EffectClass::Interrupt => {}
        }
        if refreshes {
            self.package_index_stale = false;
        }
        Ok(out)
    }

    /// Submit the download `d` ([`Effect::Fetch`]); returns whether it was only planned
    /// (plan and check mode: nothing was requested), for the caller's messages.
    ///
    /// # Errors
    /// As [`Host::submit`].
    pub(crate) fn submit_download(
        &mut self,
        d: crate::host::effects::effect::Download,
    ) -> Result<bool> {
        self.submit(Effect::Fetch(d))?;
        Ok(self.mode() != ExecMode::Apply)
    }

    /// Record ahead, in the step's undo journal, the content writes `effects` this call is
    /// about to submit in this order, synced once ([`crate::host::effects::journal`]);
    /// nothing without a journal. Pending batched line edits are written first (their
    /// records come before these).
    ///
    /// # Errors
    /// A failed flush of the line batch; a poisoned journal or a failed journal write.
    pub(crate) fn journal_ahead(&self, effects: &[Effect]) -> Result<()> {
        if !self.executor.journals() {
            return Ok(());
        }
        self.flush_batch()?;
        self.executor.journal_ahead(&self.cx, effects)
    }

    /// The checks of an effect that do not depend on the mode (module docs).
    pub(super) fn validate(&self, effect: &Effect) -> Result<()> {
        match effect {
            Effect::WriteFile { path, .. }
            | Effect::CopyFile { path, .. }
            | Effect::Symlink { link: path, .. } => self.check_ancestors(path, path),
            Effect::Mkdir { path, .. } => {
                self.check_ancestors(path, path)?;
                if self.view_stat(path, true)?.is_none() {
                    self.check_not_dangling(path, path)?;
                }
                Ok(())
            }
            Effect::RemoveAll { path } | Effect::RemoveFile { path }
                if normalize(path) == Path::new("/") =>
            {
                Err(HostError::Invalid {
                    what: "path argument",
                    message: format!(
                        "{} path is /",
                        if matches!(effect, Effect::RemoveAll { .. }) {
                            "remove all"
                        } else {
                            "remove"
                        }
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    /// Record a change that is not submitted: one more call of a batched line edit
    /// ((module docs, "Batched line edits")), at the current script position. Returns its index.
    pub(crate) fn record_change(&mut self, change: Change) -> usize {
        let index = self.report.changes.len();
        self.journal.push(Item::Change(index));
        self.report.changes.push(Change {
            position: self.position.clone(),
            ..change
        });
        index
    }

    /// Run a command now, in every mode (queries, guards, and what the apply executor
    /// runs): pending batched line edits are written first, since the command may read their
    /// files ((module docs, "Batched line edits")).
    ///
    /// # Errors
    /// A failed flush of the batch; as [`crate::host::effects::exec::exec`].
    pub(crate) fn exec(&self, argv: &[String], opts: &CommandOptions) -> Result<CmdOutput> {
        self.flush_batch()?;
        let out = crate::host::effects::exec::exec(&self.cx, argv, opts);
        // The command may have changed the host: a plan forgets what the root answered
        // (`overlay`, "Real-root lookups").
        if let Some(o) = self.executor.overlay() {
            o.forget_root();
        }
        out
    }
}
