//! [`Host`]: one step's session over the host root, and its executor.
//!
//! A `Host` is created per step with an [`ExecMode`]. API functions (`fs::write`,
//! `service::start`, ...) read through the session's *view* and hand every mutation to
//! [`Host::submit`] as an [`Effect`]. The executor then:
//!
//! - **Apply**: performs the effect (`apply.rs`) and records a one-line summary;
//! - **Plan**: records the effect over a read overlay (`plan.rs`), so later reads in the same
//!   session see the planned file contents, removals, service and package states, and renders
//!   a unified diff for file contents; commands that are not read-only are recorded as
//!   actions and return a planned result;
//! - **Check**: records exactly like Plan; the report's changes are the drift.
//!
//! # Deferred work and `finish`
//!
//! A changed systemd drop-in schedules one `systemctl daemon-reload` (coalesced), run before
//! the next `service::` call or at the end of the step; a changed grub drop-in schedules one
//! grub regeneration at the end, a changed `kmod::` blacklist or options file one initramfs
//! regeneration ([`crate::host::kernel::kmod`]). [`Host::finish`] runs what is pending and returns the
//! [`Report`]. **Call `finish` on error paths too**: a step that failed after scheduling a
//! daemon-reload must still run it. As a safety net, dropping a `Host` without calling
//! `finish` runs pending work too (errors are then lost), so an early `?` return cannot lose
//! it.
//!
//! In apply mode deferred work is recorded inside the host root before the drop-in that
//! causes it is written, and the record is removed only after the work succeeded; a record
//! left by a failure or a crash is scheduled again by the next session
//! ([`crate::host::root::deferred`]), so the work is never lost even though the drop-in is already
//! in place. The report lists every action
//! that ran, the deferred ones included, also when the deferred work failed
//! ([`Host::finish_with_report`]).
//!
//! # Durability of the step's file changes
//!
//! In apply mode every file the executor writes is fsynced before its rename, and the
//! directories in which it renamed, created or unlinked entries are fsynced once each when
//! the step ends ([`Host::finish`], [`Host::finish_with_report`], [`Host::finish_step`],
//! [`Host::finish_step_with_report`], and `Drop`), after the deferred work and before the
//! caller writes the step's flag; a failing directory fsync is the step's error. Policy and
//! reasoning: [`crate::host::root::durability`].
//!
//! # Validation before the executor
//!
//! [`Host::submit`] validates an effect the same way in every mode before handing it to the
//! executor, so that a plan never promises what an apply refuses: a file, directory or
//! symlink cannot be created beneath an existing non-directory or a dangling symlink
//! ([`HostError::BadAncestor`]), and `/` itself cannot be removed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::host::effects::effect::{
    Effect, EffectClass, GrubUpdate, InitramfsTool, InterruptRequest,
};
use crate::host::effects::exec::{CmdOutput, RunOptions};
use crate::host::effects::lines::{Lines, Stamp, View};
use crate::host::effects::plan::Overlay;
use crate::host::effects::report::{Action, Change, ExecMode, Item, Journal, Position, Report};
use crate::host::root::deferred::{self, GrubPending};
use crate::host::root::error::{HostError, Result};
use crate::host::root::read::MAX_READ_BYTES;
use crate::host::root::{EntryKind, HostRoot};
use crate::redact::Redactor;

/// Settings of one session, filled by the agent or `skyhook-run` from the step's context.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// The step's environment (later entries win). Commands get exactly this plus their own
    /// `env`; `PATH` defaults to `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`.
    pub env: Vec<(String, String)>,
    /// Agent-side configMaps directory (`SKYHOOK_DIR/configmaps` or `--configmaps`); may lie
    /// outside the root. `None`: no configMaps.
    pub configmaps_dir: Option<PathBuf>,
    /// Agent-side node metadata directory (`SKYHOOK_DIR/node-metadata`). `None`: empty maps.
    pub node_metadata_dir: Option<PathBuf>,
    /// Run commands chrooted into the host root (the agent's `on_host`, and `skyhook-run`).
    /// When false they run in the agent's own filesystem.
    pub commands_chrooted: bool,
    /// The step's deadline: the default command timeout is what remains of it.
    pub deadline: Option<Instant>,
    /// Agent-side directory of mounted Secrets (`SKYHOOK_SECRETS_DIR`,
    /// default `/var/run/secrets/skyhook`).
    pub secrets_dir: PathBuf,
    /// Secret names that may be read (`SKYHOOK_ALLOWED_SECRETS`, parsed with
    /// [`crate::host::secrets::parse_allowlist`]).
    pub allowed_secrets: Vec<String>,
    /// Secrets resolved before the step started, as `(name, key, value)` (`skyhook-agent
    /// serve`: the request's `secrets`, through the server's confined resolver). When set,
    /// `secret(name, key)` answers only these coordinates and reads no file (`secrets_dir`
    /// and `allowed_secrets` are not used).
    pub declared_secrets: Option<Vec<(String, String, String)>>,
    /// `SKYHOOK_RESOURCE_ID` (for interrupts' once-per-resource markers, used by the agent).
    pub resource_id: String,
    /// How long package managers wait for their lock (apt's `DPkg::Lock::Timeout`, zypper's
    /// `ZYPP_LOCK_TIMEOUT`), capped by what remains of the deadline. Default 300 s.
    pub package_lock_timeout: Duration,
    /// The redactor to share with the log sink. `None`: a new one from `SKYHOOK_REDACT_ENV`
    /// in `env`. When given, the `SKYHOOK_REDACT_ENV` values are added to it.
    pub redactor: Option<Redactor>,
    /// The step's cancel token: once aborted, a running command is ended (`SIGTERM` to its
    /// group, a grace period, `SIGKILL`) and fails with [`crate::host::HostError::Cancelled`].
    /// Default: a fresh token nobody cancels.
    pub cancel: crate::process::Cancel,
    /// Render unified diffs of file contents in apply mode too (`skyhook-run --apply
    /// --diff`); plan and check mode always render them.
    pub diffs: bool,
    /// A cgroup directory every command joins before `exec` ([`crate::process::Spec::cgroup`]):
    /// a command's end then kills what is left in it. `skyhook-agent serve` gives each Rhai
    /// execution its own; `None` (default): the process group and subreaper sweep.
    pub cgroup: Option<PathBuf>,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            env: Vec::new(),
            configmaps_dir: None,
            node_metadata_dir: None,
            commands_chrooted: true,
            deadline: None,
            secrets_dir: PathBuf::from("/var/run/secrets/skyhook"),
            allowed_secrets: Vec::new(),
            declared_secrets: None,
            resource_id: String::new(),
            package_lock_timeout: Duration::from_secs(300),
            redactor: None,
            cancel: crate::process::Cancel::new(),
            diffs: false,
            cgroup: None,
        }
    }
}

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

/// What [`Host::view_for_digest`] found at a path.
#[derive(Debug)]
pub(crate) enum ViewedFile {
    /// A planned download: its SHA-256 digest (64 lowercase hex digits).
    Digest(String),
    /// A planned file: its content.
    Content(bytes::Bytes),
    /// Nothing planned: the host path to open under the root.
    Open(PathBuf),
}

/// One step's session over a host root: the view, the executor and the report.
#[derive(Debug)]
pub struct Host {
    root: HostRoot,
    mode: ExecMode,
    opts: HostOptions,
    redactor: Redactor,
    pub(crate) overlay: Overlay,
    /// The report's content hashes, once per file ([`crate::host::effects::hashes`]).
    pub(crate) hashes: crate::host::effects::hashes::ContentHashes,
    /// Parsed views of the files the line and block functions edited, by normalised host
    /// path ([`crate::host::files::fs`]). Any effect clears them ([`Host::submit`]); in apply mode
    /// a view is trusted only while the file's [`crate::host::effects::lines::Stamp`] is unchanged.
    pub(crate) texts: std::collections::HashMap<PathBuf, crate::host::effects::lines::View>,
    report: Report,
    pub(crate) pending_daemon_reload: bool,
    pub(crate) pending_grub: GrubPending,
    /// A daemon-reload record exists in the root ([`deferred`]).
    recorded_reload: bool,
    /// A grub record exists in the root ([`deferred`]).
    recorded_grub: bool,
    /// An initramfs regeneration is due at the end of the step ([`crate::host::kernel::kmod`]).
    pub(crate) pending_initramfs: bool,
    /// An initramfs record exists in the root ([`deferred`]).
    recorded_initramfs: bool,
    finished: bool,
    /// The script position of the host call being served ([`Host::set_position`]).
    position: Option<Position>,
    /// The step's ordered list, shared with a recording output ([`Host::journal`]).
    journal: Journal,
    /// A package repository changed in this session: the next `pkg::install` refreshes the
    /// index ([`Host::mark_package_index_stale`]).
    pub(crate) package_index_stale: bool,
    /// Set by the line functions for the one write they submit next: what its content adds
    /// to the old ([`crate::host::effects::textdiff::Appended`]); taken by [`Host::submit`].
    pub(crate) appended: Option<crate::host::effects::textdiff::Appended>,
    /// Apply mode: the pending write of batched line edits ([`crate::host::effects::batch`]).
    pub(crate) batch: crate::host::effects::batch::Batch,
    /// Set by the line functions for the one write they submit next: record its change but
    /// hold the write for a batch ([`crate::host::effects::batch`]); taken by [`Host::submit`].
    pub(crate) hold_write: bool,
    /// Directories whose entries the executor changed, fsynced once when the step ends
    /// ([`crate::host::root::durability`]).
    pub(crate) dir_syncs: crate::host::root::durability::DirSyncs,
    /// Every effect submitted, in order, once [`Host::record_effects`] was called: the
    /// recording double tests assert an area's effects with.
    recorded: Option<Vec<Effect>>,
}

impl Host {
    /// fsync the directories the session's effects changed entries in, once each
    /// ([`DirSyncs::sync`](crate::host::root::durability::DirSyncs::sync)): called when a step
    /// ends, before the caller writes its flag.
    ///
    /// # Errors
    /// As `DirSyncs::sync`.
    pub(crate) fn sync_dirs(&self) -> Result<()> {
        Ok(self.dir_syncs.sync(self.root())?)
    }

    /// A session over `root` in `mode`. Deferred work recorded by an earlier session that
    /// could not run it ([`crate::host::root::deferred`]) is scheduled again: it runs at this
    /// session's end in apply mode, and shows up as an action in plan and check mode.
    pub fn new(root: HostRoot, mode: ExecMode, mut options: HostOptions) -> Host {
        let redactor = options.redactor.take().unwrap_or_default();
        redactor.add_from_env(&options.env);
        let (recorded_reload, grub) = deferred::load(&root);
        let recorded_initramfs = deferred::initramfs_recorded(&root);
        Host {
            root,
            mode,
            opts: options,
            redactor,
            overlay: Overlay::default(),
            texts: std::collections::HashMap::new(),
            hashes: Default::default(),
            report: Report::new(mode),
            pending_daemon_reload: recorded_reload,
            recorded_grub: grub.is_some(),
            pending_grub: grub.unwrap_or_default(),
            recorded_reload,
            pending_initramfs: recorded_initramfs,
            recorded_initramfs,
            finished: false,
            position: None,
            journal: Journal::default(),
            package_index_stale: false,
            appended: None,
            batch: Default::default(),
            hold_write: false,
            dir_syncs: Default::default(),
            recorded: None,
        }
    }

    /// Record every effect submitted from now on ([`Host::recorded_effects`]), in addition
    /// to executing it as the mode says (in plan mode nothing on the host changes, and later
    /// reads of the session see the recorded effects through the read view).
    pub fn record_effects(&mut self) {
        self.recorded.get_or_insert_with(Vec::new);
    }

    /// The effects submitted since [`Host::record_effects`], in order (empty when not
    /// recording).
    pub fn recorded_effects(&self) -> &[Effect] {
        self.recorded.as_deref().unwrap_or_default()
    }

    /// The execution mode.
    pub fn mode(&self) -> ExecMode {
        self.mode
    }

    /// The host root, for reading or writing it directly. Pending batched line edits are
    /// written first ([`crate::host::effects::batch`]; a failure is returned by the next fallible
    /// call of the session), so a direct read sees them.
    pub fn root(&self) -> &HostRoot {
        self.batch.flush(&self.root);
        &self.root
    }

    /// The session's options.
    pub fn options(&self) -> &HostOptions {
        &self.opts
    }

    /// The shared redactor (every secret read in this session is in it).
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// `env(name)`: the step environment's value (last definition wins).
    pub fn env(&self, name: &str) -> Option<String> {
        self.opts
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    /// `changed()`: how many changes this session has made (or planned) so far.
    pub fn changed(&self) -> usize {
        self.report.changes.len()
    }

    /// The report so far (without the `after` hashes, which are set when the session or
    /// step ends: `src/host/hashes.rs`).
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// What remains of the deadline (zero when passed), `None` without a deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.opts
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Set the script position of the host call being served (the binding layer sets it
    /// before each call and clears it after): effects submitted meanwhile carry it.
    pub fn set_position(&mut self, position: Option<Position>) {
        self.position = position;
    }

    /// The step's ordered list (changes, actions, interrupts as they are submitted). Give a
    /// clone to a recording output so script output lands in it in order; the report gets
    /// the items when the step ends ([`Report::items`]).
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Mark the package index stale (a repository definition or key changed): the next
    /// `pkg::install` of this session that installs something refreshes it first
    /// (`apt-get update`, `dnf makecache`, ...), in every mode.
    pub fn mark_package_index_stale(&mut self) {
        self.package_index_stale = true;
    }

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
    pub fn submit(&mut self, effect: Effect) -> Result<Option<CmdOutput>> {
        if let Some(r) = &mut self.recorded {
            r.push(effect.clone());
        }
        let appended = self.appended.take();
        let hold =
            std::mem::take(&mut self.hold_write) && matches!(effect, Effect::WriteFile { .. });
        self.settle_batch()?;
        // Whatever the effect is, the line views may no longer show the files (the line
        // functions put back the view of the file they wrote).
        self.texts.clear();
        if let Effect::Interrupt(i) = effect {
            self.journal.push(Item::Interrupt {
                index: self.report.interrupts.len(),
                position: self.position.clone(),
            });
            self.report.interrupts.push(i);
            return Ok(None);
        }
        self.validate(&effect)?;
        // A daemon-reload (explicit or scheduled) satisfies a scheduled one.
        let reload = matches!(effect, Effect::DaemonReload);
        let was_pending = reload && std::mem::take(&mut self.pending_daemon_reload);
        let with_diff = self.renders_diffs();
        let d = self.describe(&effect, with_diff, appended.as_ref())?;
        let before = self.hash_before(&effect)?;
        let out = match self.mode {
            // The line functions' batched write ([`crate::host::effects::batch`]).
            ExecMode::Apply if hold => None,
            ExecMode::Apply => {
                let r = crate::host::effects::apply::perform(self, &effect);
                if reload {
                    self.settle_reload_record(r.is_ok(), was_pending);
                }
                r?
            }
            ExecMode::Plan | ExecMode::Check => {
                self.overlay_record(&effect)?;
                match effect {
                    Effect::Command { .. } | Effect::GuardedCommand { .. } => {
                        Some(CmdOutput::planned())
                    }
                    _ => None,
                }
            }
        };
        let position = self.position.clone();
        match effect.class() {
            EffectClass::Change => {
                let index = self.report.changes.len();
                self.journal.push(Item::Change(index));
                self.report.changes.push(Change {
                    kind: effect.kind().into(),
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
                    kind: effect.kind().into(),
                    target: effect.target(),
                    summary: d.summary,
                    position,
                });
            }
            EffectClass::Interrupt => {}
        }
        Ok(out)
    }

    /// Schedule one (coalesced) `systemctl daemon-reload`.
    pub fn schedule_daemon_reload(&mut self) {
        self.pending_daemon_reload = true;
    }

    /// Write-ahead for a drop-in change: in apply mode, make the daemon-reload record durable
    /// ([`deferred::record_daemon_reload`]: atomic write, fsync) before the drop-in is
    /// written. It is removed once a reload of this (or a later) session succeeded. Written
    /// for every change, so a record another session removed meanwhile is put back. Nothing
    /// in plan and check mode.
    ///
    /// # Errors
    /// Creating the directory or writing the record failed (the drop-in must then not be
    /// written).
    pub(crate) fn write_ahead_daemon_reload(&mut self) -> Result<()> {
        self.settle_batch()?;
        if self.mode == ExecMode::Apply {
            deferred::record_daemon_reload(&self.root)?;
            self.recorded_reload = true;
        }
        Ok(())
    }

    /// Write-ahead for a grub drop-in change: make `pending` the session's pending grub work
    /// and, in apply mode, the content of the grub record (durable before the drop-in is
    /// written; removed once the regeneration succeeded). Returns what to give
    /// [`Host::restore_grub`] when the drop-in write then fails.
    ///
    /// # Errors
    /// Writing the record failed (nothing is changed then).
    pub(crate) fn schedule_grub_ahead(
        &mut self,
        pending: GrubPending,
    ) -> Result<(GrubPending, bool)> {
        self.settle_batch()?;
        if self.mode == ExecMode::Apply {
            deferred::record_grub(&self.root, &pending)?;
        }
        let recorded = self.recorded_grub || self.mode == ExecMode::Apply;
        let prev_recorded = std::mem::replace(&mut self.recorded_grub, recorded);
        let prev = std::mem::replace(&mut self.pending_grub, pending);
        Ok((prev, prev_recorded))
    }

    /// Undo [`Host::schedule_grub_ahead`] after the drop-in write failed: the previous
    /// pending work, and in apply mode the previous record (or none). Best effort.
    pub(crate) fn restore_grub(&mut self, (pending, recorded): (GrubPending, bool)) {
        if self.mode == ExecMode::Apply {
            let undone = if recorded {
                deferred::record_grub(&self.root, &pending)
            } else {
                deferred::clear(&self.root, &deferred::grub_path())
            };
            if undone.is_ok() {
                self.recorded_grub = recorded;
            }
        }
        self.pending_grub = pending;
    }

    /// Write-ahead for a `kmod::` blacklist or options file change: schedule one initramfs
    /// regeneration at the end of the step and, in apply mode, make the initramfs record
    /// durable ([`deferred::record_initramfs`]) before the file is written. Returns what to
    /// give [`Host::restore_initramfs`] when the write then fails.
    ///
    /// # Errors
    /// Writing the record failed (nothing is scheduled then; the file must not be written).
    pub(crate) fn schedule_initramfs_ahead(&mut self) -> Result<(bool, bool)> {
        self.settle_batch()?;
        if self.mode == ExecMode::Apply {
            deferred::record_initramfs(&self.root)?;
        }
        let prev = (self.pending_initramfs, self.recorded_initramfs);
        self.pending_initramfs = true;
        self.recorded_initramfs = self.recorded_initramfs || self.mode == ExecMode::Apply;
        Ok(prev)
    }

    /// Undo [`Host::schedule_initramfs_ahead`] after the file write failed: the previous
    /// pending state and, in apply mode, no record when there was none before. Best effort.
    pub(crate) fn restore_initramfs(&mut self, (pending, recorded): (bool, bool)) {
        if self.mode == ExecMode::Apply
            && !recorded
            && deferred::clear(&self.root, &deferred::initramfs_path()).is_ok()
        {
            self.recorded_initramfs = false;
        }
        self.pending_initramfs = pending;
    }

    /// Run a scheduled daemon-reload now (before a `service::` call).
    ///
    /// # Errors
    /// The reload's failure (it is then no longer pending in this session; in apply mode it
    /// is recorded for the next one, see [`crate::host::root::deferred`]).
    pub fn flush_daemon_reload(&mut self) -> Result<()> {
        if self.pending_daemon_reload {
            self.submit(Effect::DaemonReload)?;
        }
        Ok(())
    }

    /// After a daemon-reload ran in apply mode: drop the record when it succeeded, record it
    /// when a scheduled (or recorded) one failed.
    fn settle_reload_record(&mut self, ok: bool, was_pending: bool) {
        if ok {
            if self.recorded_reload
                && deferred::clear(&self.root, &deferred::daemon_reload_path()).is_ok()
            {
                self.recorded_reload = false;
            }
        } else if (was_pending || self.recorded_reload)
            && deferred::record_daemon_reload(&self.root).is_ok()
        {
            self.recorded_reload = true;
        }
    }

    fn run_deferred(&mut self) -> Result<()> {
        let reload = self.flush_daemon_reload();
        let grub = std::mem::take(&mut self.pending_grub);
        let effect = if !grub.add.is_empty() || !grub.remove.is_empty() {
            Some(GrubUpdate::Grubby {
                add: grub.add.clone(),
                remove: grub.remove.clone(),
            })
        } else if grub.regenerate {
            Some(GrubUpdate::UpdateGrub)
        } else {
            None
        };
        let grub_result = match effect {
            Some(g) => {
                let r = self.submit(Effect::GrubUpdate(g)).map(|_| ());
                if self.mode == ExecMode::Apply {
                    if r.is_ok() {
                        if self.recorded_grub
                            && deferred::clear(&self.root, &deferred::grub_path()).is_ok()
                        {
                            self.recorded_grub = false;
                        }
                    } else if deferred::record_grub(&self.root, &grub).is_ok() {
                        self.recorded_grub = true;
                    }
                }
                r
            }
            None => Ok(()),
        };
        reload.and(grub_result).and(self.run_initramfs())
    }

    /// The deferred initramfs regeneration ([`crate::host::kernel::kmod`]): `dracut -f` on the rhel
    /// and fedora families, else `update-initramfs -u`; the record is dropped once it
    /// succeeded, kept (or written) when it failed.
    fn run_initramfs(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.pending_initramfs) {
            return Ok(());
        }
        let r = crate::host::effects::os_release::family(self)
            .map(|f| InitramfsTool::for_family(&f))
            .and_then(|tool| self.submit(Effect::InitramfsUpdate(tool)).map(|_| ()));
        if self.mode == ExecMode::Apply {
            if r.is_ok() {
                if self.recorded_initramfs
                    && deferred::clear(&self.root, &deferred::initramfs_path()).is_ok()
                {
                    self.recorded_initramfs = false;
                }
            } else if deferred::record_initramfs(&self.root).is_ok() {
                self.recorded_initramfs = true;
            }
        }
        r
    }

    /// End the session: run pending deferred work (daemon-reload, grub and initramfs
    /// regeneration) and return the report. Call it whether the step succeeded or not.
    ///
    /// # Errors
    /// The first failure of the deferred work (the rest is still attempted). Use
    /// [`Host::finish_with_report`] to keep the report then.
    pub fn finish(self) -> Result<Report> {
        let (report, result) = self.finish_with_report();
        result.map(|()| report)
    }

    /// [`Host::finish`] that returns the report also when the deferred work failed: it lists
    /// every action that ran, the deferred ones that succeeded included.
    pub fn finish_with_report(mut self) -> (Report, Result<()>) {
        self.finished = true;
        let flushed = self.settle_batch_at_step_end();
        let result = flushed.and(self.run_deferred()).and(self.sync_dirs());
        let mut report = std::mem::replace(&mut self.report, Report::new(self.mode));
        self.hashes.fill(&mut report.changes, &self.redactor);
        report.items = self.journal.take();
        (report, result)
    }

    /// End one step of a session that serves several steps (`skyhook-run --package` in a
    /// dry run): run pending deferred work and return this step's report, leaving a fresh
    /// report for the next step. The plan overlay is kept, so later steps see the planned
    /// effects of earlier ones. The deadline is cleared: the next run sets its own
    /// ([`Host::limit_deadline`]).
    ///
    /// # Errors
    /// The first failure of the deferred work (use [`Host::finish_step_with_report`] to keep
    /// the step's report then).
    pub fn finish_step(&mut self) -> Result<Report> {
        let (report, result) = self.finish_step_with_report();
        result.map(|()| report)
    }

    /// [`Host::finish_step`] that returns the step's report also when the deferred work
    /// failed (as [`Host::finish_with_report`]).
    pub fn finish_step_with_report(&mut self) -> (Report, Result<()>) {
        let flushed = self.settle_batch_at_step_end();
        let deferred = flushed.and(self.run_deferred()).and(self.sync_dirs());
        let mut report = std::mem::replace(&mut self.report, Report::new(self.mode));
        self.hashes.fill(&mut report.changes, &self.redactor);
        report.items = self.journal.take();
        self.opts.deadline = None;
        (report, deferred)
    }

    /// The checks of an effect that do not depend on the mode (module docs).
    fn validate(&self, effect: &Effect) -> Result<()> {
        match effect {
            Effect::WriteFile { path, .. } | Effect::Symlink { link: path, .. } => {
                self.check_ancestors(path, path)
            }
            Effect::Mkdir { path, .. } => {
                self.check_ancestors(path, path)?;
                if self.view_stat(path, true)?.is_none() {
                    self.check_not_dangling(path, path)?;
                }
                Ok(())
            }
            Effect::RemoveAll { path } | Effect::RemoveFile { path }
                if crate::host::effects::plan::normalize(path) == Path::new("/") =>
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

    /// Every existing ancestor of `path` (as the session sees it) must be a directory; the
    /// first missing one ends the check (the rest will be created). Creating functions call
    /// it before reading `path` itself, whose resolution would fail with a less helpful
    /// "not a directory".
    ///
    /// # Errors
    /// [`HostError::BadAncestor`]; resolution failures.
    pub(crate) fn check_creatable(&self, path: &Path) -> Result<()> {
        self.check_ancestors(path, path)
    }

    fn check_ancestors(&self, path: &Path, reported: &Path) -> Result<()> {
        let norm = crate::host::effects::plan::normalize(path);
        let ancestors: Vec<&Path> = norm.ancestors().skip(1).collect();
        for anc in ancestors.into_iter().rev() {
            match self.view_stat(anc, true)? {
                Some(s) if s.kind == "dir" => {}
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

    /// `p` (missing when followed) must not be a dangling symlink.
    fn check_not_dangling(&self, p: &Path, reported: &Path) -> Result<()> {
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
        self.batch.flush_checked(&self.root)?;
        if self.mode != ExecMode::Apply {
            let key = self.overlay_key(path, follow)?;
            if let Some(hit) = self.overlay.lookup(&key) {
                return Ok(hit.stat());
            }
            return self.real_stat(&key, follow);
        }
        self.real_stat(path, follow)
    }

    fn real_stat(&self, path: &Path, follow: bool) -> Result<Option<Stat>> {
        use std::os::unix::fs::MetadataExt;
        let m = if follow {
            self.root.metadata(path)?
        } else {
            self.root.symlink_metadata(path)?
        };
        Ok(m.map(|m| {
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
        }))
    }

    /// The session's view of the text file at `path` (module [`crate::host::effects::lines`]), taken out
    /// of the session's cache when it still shows the file, else read and parsed. In apply mode
    /// the file is `stat`ed first and a cached view is used only when its [`Stamp`](crate::host::effects::lines::Stamp) equals the
    /// file's, so a change by another process (or a command of this step) is always seen; in
    /// plan and check mode a cached view is valid until the session's next effect (which clears
    /// the cache), and a file is read through the overlay.
    ///
    /// # Errors
    /// A directory at `path`; [`HostError::NotText`]; resolution or read failures.
    pub(crate) fn take_line_view(&mut self, path: &Path, key: &Path) -> Result<View> {
        if self.mode != ExecMode::Apply {
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
        let stamp = match self.root().metadata(path)? {
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
            Some(_) => Some(self.root().read_regular(path, MAX_READ_BYTES)?),
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

    /// Whether the session renders the diffs of its changes: plan and check mode, and apply
    /// with [`HostOptions::diffs`].
    pub(crate) fn renders_diffs(&self) -> bool {
        self.mode != ExecMode::Apply || self.opts.diffs
    }

    /// Where the read view finds the content of the regular file at `path` for a digest: in
    /// plan and check mode a planned download gives its digest and a planned file its
    /// content; otherwise the host path to open under the root (the overlay's resolved key
    /// in plan and check mode, `path` itself in apply).
    ///
    /// # Errors
    /// Resolving the path through the planned symlinks.
    pub(crate) fn view_for_digest(&self, path: &Path) -> Result<ViewedFile> {
        if self.mode == ExecMode::Apply {
            return Ok(ViewedFile::Open(path.to_path_buf()));
        }
        let key = self.overlay_key(path, true)?;
        Ok(match self.overlay.lookup(&key) {
            Some(crate::host::effects::plan::Node::Download { sha256, .. }) => {
                ViewedFile::Digest(sha256.clone())
            }
            Some(crate::host::effects::plan::Node::File { content, .. }) => {
                ViewedFile::Content(content.clone())
            }
            _ => ViewedFile::Open(key),
        })
    }

    /// The read view of a unit's state (active, enabled) as earlier effects of this session
    /// planned it; `(None, None)` in apply mode, where the host itself answers.
    pub(crate) fn planned_service(&self, name: &str) -> (Option<bool>, Option<bool>) {
        match self.mode {
            ExecMode::Apply => (None, None),
            _ => self.overlay.services.get(name).copied().unwrap_or_default(),
        }
    }

    /// The read view of a package's presence (`name` as given to `pkg::install` or
    /// `pkg::remove`) as earlier effects of this session planned it; `None` in apply mode or
    /// when nothing was planned.
    pub(crate) fn planned_package(&self, name: &str) -> Option<bool> {
        match self.mode {
            ExecMode::Apply => None,
            _ => self.overlay.packages.get(name).copied(),
        }
    }

    /// The read view of a package hold as earlier effects of this session planned it; `None`
    /// in apply mode or when nothing was planned.
    pub(crate) fn planned_hold(&self, name: &str) -> Option<bool> {
        match self.mode {
            ExecMode::Apply => None,
            _ => self.overlay.holds.get(name).copied(),
        }
    }

    /// Whether an earlier effect of this session planned to load kernel module `name` (as
    /// the kernel names it, `-` read as `_`); always false in apply mode.
    pub(crate) fn planned_module_load(&self, name: &str) -> bool {
        self.mode != ExecMode::Apply && self.overlay.modules.contains(name)
    }

    /// The read view of a mount point (normalised host path) as earlier effects of this
    /// session planned it: mounted (`true`) or unmounted; `None` in apply mode or when
    /// nothing was planned.
    pub(crate) fn planned_mount(&self, path: &Path) -> Option<bool> {
        match self.mode {
            ExecMode::Apply => None,
            _ => self.overlay.mounts.get(path).copied(),
        }
    }

    /// Content of the file at `path` (following symlinks); `None` when absent. A file on disk
    /// is read with [`crate::host::root::read::read_whole`]: regular files of at most
    /// [`crate::host::root::read::MAX_READ_BYTES`] only.
    ///
    /// # Errors
    /// [`HostError::WrongKind`] for a directory; [`HostError::NotRegular`],
    /// [`HostError::FileTooLarge`]; resolution or read failures.
    pub(crate) fn view_read(&self, path: &Path) -> Result<Option<Vec<u8>>> {
        self.batch.flush_checked(&self.root)?;
        let key = if self.mode != ExecMode::Apply {
            let key = self.overlay_key(path, true)?;
            if let Some(hit) = self.overlay.lookup(&key) {
                return match hit.content() {
                    Ok(c) => Ok(c),
                    Err(what) => Err(HostError::WrongKind {
                        path: path.to_path_buf(),
                        what,
                    }),
                };
            }
            key
        } else {
            path.to_path_buf()
        };
        crate::host::root::read::read_whole(&self.root, &key, path)
    }

    /// Entries of directory `dir` (name, kind), sorted by name; `None` when absent.
    pub(crate) fn view_list(&self, dir: &Path) -> Result<Option<Vec<(String, EntryKind)>>> {
        self.batch.flush_checked(&self.root)?;
        let key = if self.mode != ExecMode::Apply {
            self.overlay_key(dir, true)?
        } else {
            dir.to_path_buf()
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
        let fresh = self.mode != ExecMode::Apply && self.overlay.is_fresh_dir(&key);
        if !fresh
            && let Some(m) = self.root.metadata(&key)?
            && m.is_dir()
        {
            for e in self.root.read_dir(&key)? {
                out.insert(e.name.to_string_lossy().into_owned(), e.kind);
            }
        }
        if self.mode != ExecMode::Apply {
            out.retain(|name, _| {
                self.overlay
                    .lookup(&key.join(name))
                    .is_none_or(|n| !n.is_absent())
            });
            for (name, kind) in self.overlay.children(&key) {
                out.insert(name, kind);
            }
        }
        Ok(Some(out.into_iter().collect()))
    }

    /// The overlay key of a host path: lexically normalised, and with symlinks resolved
    /// through the real root where the path (or its parent) exists.
    pub(crate) fn overlay_key(&self, path: &Path, follow: bool) -> Result<PathBuf> {
        self.batch.flush_checked(&self.root)?;
        let n = crate::host::effects::plan::normalize(path);
        if self.overlay.lookup(&n).is_some() || n == Path::new("/") {
            return Ok(n);
        }
        if follow && let Some(c) = self.root.canonical(&n)? {
            return Ok(c);
        }
        if let (Some(parent), Some(name)) = (n.parent(), n.file_name())
            && let Some(c) = self.root.canonical(parent)?
        {
            return Ok(c.join(name));
        }
        Ok(n)
    }

    /// In apply mode, take the cross-process lock of the file at `path` for a
    /// read-compare-write ([`crate::host::root::pathlock`]); the caller must read the current
    /// content only after this returns. `None` in plan and check mode (nothing is written,
    /// and the overlay is private to the session); there the lock directory the apply would
    /// create is planned instead ([`Host::overlay_lock_dir`]), so later reads agree.
    ///
    /// # Errors
    /// Creating, opening or locking the lock file.
    pub(crate) fn lock_for_update(
        &mut self,
        path: &Path,
    ) -> Result<Option<crate::host::root::pathlock::PathLock>> {
        // At most one path lock per session: a batch's lock is released first.
        self.settle_batch()?;
        if self.mode != ExecMode::Apply {
            self.overlay_lock_dir()?;
            return Ok(None);
        }
        let key = self.lock_key(path);
        Ok(Some(crate::host::root::pathlock::lock(&self.root, &key)?))
    }

    /// Run `update`, a read-modify-write of the files at `paths` through the session, where
    /// the apply executor holds the paths' locks ([`Host::lock_for_update`], in order) and
    /// then `lock`'s guard (a lock of the files' own tools, such as `/etc/.pwd.lock`) across
    /// it, released in the reverse order; `update` is told `true`, so it reads the files
    /// again under the locks. In plan and check mode nothing is locked: the lock directory
    /// the apply would create is planned and `update` is told `false` (what it read before
    /// still holds).
    ///
    /// # Errors
    /// Taking a lock; whatever `update` fails with.
    pub(crate) fn locked_update<G, T>(
        &mut self,
        paths: &[&Path],
        lock: impl FnOnce(&HostRoot) -> Result<G>,
        update: impl FnOnce(&mut Host, bool) -> Result<T>,
    ) -> Result<T> {
        if self.mode != ExecMode::Apply {
            self.overlay_lock_dir()?;
            return update(self, false);
        }
        let mut held = Vec::new();
        for p in paths {
            if let Some(l) = self.lock_for_update(p)? {
                held.push(l);
            }
        }
        let guard = lock(&self.root)?;
        let r = update(self, true);
        drop(guard);
        drop(held);
        r
    }

    /// The path a lock of `path` is keyed by: the canonical parent directory plus the final
    /// name, following a final symlink (at most 40 hops) the same way. Never the canonical
    /// form of the file itself: resolving an open file's path races with the rename of a
    /// concurrent writer (the kernel then reports the replaced inode as `... (deleted)`),
    /// while directories are not replaced. A path that does not resolve is keyed by what
    /// resolved of it; the read or write that follows reports the real error.
    fn lock_key(&self, path: &Path) -> PathBuf {
        // A `..` resolves physically (after a symlink before it): start from the real parent.
        let mut cur = match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) if path.components().any(|c| c.as_os_str() == "..") => {
                match self.root.canonical(parent) {
                    Ok(Some(d)) => d.join(name),
                    _ => crate::host::effects::plan::normalize(path),
                }
            }
            _ => crate::host::effects::plan::normalize(path),
        };
        for _ in 0..40 {
            let (Some(parent), Some(name)) = (cur.parent(), cur.file_name()) else {
                return cur;
            };
            let dir = match self.root.canonical(parent) {
                Ok(Some(d)) => d,
                _ => parent.to_path_buf(),
            };
            let at = dir.join(name);
            match self.root.symlink_metadata(&at) {
                Ok(Some(m)) if m.file_type().is_symlink() => match self.root.read_link(&at) {
                    // An absolute target is a host path (chroot semantics): `join` keeps it.
                    Ok(target) => cur = crate::host::effects::plan::normalize(&dir.join(target)),
                    Err(_) => return at,
                },
                _ => return at,
            }
        }
        cur
    }

    /// Record a change that is not submitted: one more call of a batched line edit
    /// ([`crate::host::effects::batch`]), at the current script position. Returns its index.
    pub(crate) fn record_change(&mut self, change: Change) -> usize {
        let index = self.report.changes.len();
        self.journal.push(Item::Change(index));
        self.report.changes.push(Change {
            position: self.position.clone(),
            ..change
        });
        index
    }

    pub(crate) fn record_interrupt(&mut self, i: InterruptRequest) {
        self.report.interrupts.push(i);
    }

    /// Options for internal commands (systemctl, package managers): checked, not read-only.
    pub(crate) fn internal_opts(&self) -> RunOptions {
        RunOptions {
            check: true,
            ..RunOptions::default()
        }
    }

    /// Tighten the session's deadline to `deadline` (the earlier one wins), e.g. to a script
    /// run's deadline, so that the default timeout of every command (scripts' and internal
    /// ones) never outlives the run.
    pub fn limit_deadline(&mut self, deadline: Instant) {
        self.opts.deadline = Some(self.opts.deadline.map_or(deadline, |d| d.min(deadline)));
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if !self.finished {
            self.finished = true;
            // Never lose batched line edits, a scheduled daemon-reload or grub regeneration,
            // even when the caller returned early with `?`. Errors cannot be reported from
            // here.
            let _ = self.settle_batch();
            let _ = self.run_deferred();
            let _ = self.sync_dirs();
        }
    }
}
