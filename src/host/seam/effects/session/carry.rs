//! [`PlanCarry`]: what one plan session planned, carried into the session of the next mode
//! of the package or the next package of a chain (`serve`'s `package_plan`), so a later
//! mode or package plans against the host as the earlier ones would leave it, as the steps
//! of one mode already do within one session ([`Host::finish_step`]).

use super::Host;
use super::host::{Budget, PlannedCommand, Unplanned};
use crate::host::effects::context::HostOptions;
use crate::host::effects::effect::Effect;
use crate::host::effects::overlay::Overlay;
use crate::host::effects::report::{ExecMode, Item};
use crate::host::root::HostRoot;
use crate::host::root::deferred::GrubPending;
use crate::host::root::error::{HostError, Result};
use crate::redact::Redactor;

/// The view a finished plan or check session leaves: the planned file contents, created
/// directories and removed paths (the executor's overlay), the commands the plan did not
/// run (later reads of what they may touch are unknown), the first unplanned program,
/// the deferred work still pending or recorded, and the redactor (every secret read so far,
/// so a later diff of a file holding one is still redacted). Made by [`Host::into_carry`],
/// used by [`Host::carried`].
#[derive(Debug)]
pub struct PlanCarry {
    overlay: Overlay,
    planned_commands: Vec<PlannedCommand>,
    unplanned: Unplanned,
    pending: (bool, GrubPending, bool),
    recorded: (bool, bool, bool),
    redactor: Redactor,
    /// A carry made by [`PlanCarry::with_budget`]: only its budget is carried.
    fresh: bool,
    budget: Budget,
}

impl PlanCarry {
    /// A carry of nothing planned yet but a budget of `bytes` for the plan it starts (each
    /// planned effect counts what serve keeps of it, `retained_bytes`): the first session
    /// made from it is as [`Host::new`]'s, held to the budget.
    pub fn with_budget(bytes: u64) -> PlanCarry {
        PlanCarry {
            overlay: Overlay::default(),
            planned_commands: Vec::new(),
            unplanned: Unplanned::default(),
            pending: Default::default(),
            recorded: Default::default(),
            redactor: Redactor::default(),
            fresh: true,
            budget: Budget {
                planned: 0,
                limit: Some(bytes),
            },
        }
    }
}

/// What serve keeps of one planned effect besides its text and content, in bytes: its
/// entry in the plan's view (overlay), its change or action in the step's report and its
/// item, and the fixed part of its plan event (the ring) and of its three entries in the
/// exit's structured plan (the total's change, the step's change and item) and its line
/// in `rendered` (measured: docs/fleet.md "The server's memory").
pub(crate) const EFFECT_BYTES: u64 = 1536;

/// How many copies of a planned effect's text (its target, summary, diff, the directories
/// it creates and its script file's name) serve holds at once at most: the report's, the
/// plan event's, the exit's three entries, `rendered`'s, and the exit line's making.
pub(crate) const TEXT_COPIES: u64 = 8;

/// How many copies of a step's recorded output serve holds: the step's report's, its items'
/// in the exit's structured plan, `rendered`'s, and its line events' (the ring).
pub(crate) const OUTPUT_COPIES: u64 = 4;

/// What serve keeps of the planned `effect`, whose description (its summary, diff and
/// created directories) is `described` bytes long and whose script file's name is `file`
/// bytes long: [`EFFECT_BYTES`], its own data in the plan's view (a write's content and
/// path, a link's path and target, any other's target) and [`TEXT_COPIES`] of its text.
pub(crate) fn retained_bytes(effect: &Effect, described: usize, file: usize) -> u64 {
    let target = effect.target().len();
    let own = match effect {
        Effect::WriteFile { content, .. } => content.len() + target,
        Effect::Symlink { target: to, .. } => to.as_os_str().len() + target,
        _ => target,
    };
    let text = target + described + file;
    EFFECT_BYTES + own as u64 + TEXT_COPIES * text as u64
}

impl Host {
    /// End a plan or check session whose steps have each ended their part
    /// ([`Host::finish_step`]) and keep what it planned. `None` for an apply or recording
    /// session (it has no overlay: the host itself is the view).
    pub fn into_carry(mut self) -> Option<PlanCarry> {
        // Ended here: a plan's deferred work is only listed, and each step listed its own.
        self.finished = true;
        let overlay = std::mem::take(self.executor.overlay_mut()?);
        Some(PlanCarry {
            overlay,
            planned_commands: std::mem::take(&mut self.planned_commands),
            unplanned: std::mem::take(&mut self.unplanned),
            pending: (
                self.pending_daemon_reload,
                std::mem::take(&mut self.pending_grub),
                self.pending_initramfs,
            ),
            recorded: (
                self.recorded_reload,
                self.recorded_grub,
                self.recorded_initramfs,
            ),
            redactor: self.redactor.clone(),
            fresh: false,
            budget: self.budget,
        })
    }

    /// A write whose content alone would take the plan past its budget fails before it
    /// is described (its diff is not made); what it keeps besides is
    /// [`Host::charge_planned`]'s.
    ///
    /// # Errors
    /// [`HostError::PlanBudget`], with the content's size and [`EFFECT_BYTES`].
    pub(super) fn precheck_planned(&self, effect: &Effect) -> Result<()> {
        match effect {
            Effect::WriteFile { content, .. } => {
                self.charge_check(effect, content.len() as u64 + EFFECT_BYTES)
            }
            _ => Ok(()),
        }
    }

    /// Count what the server keeps of the planned `effect` (whose summary, diff and created
    /// directories are `described` bytes long, at the session's position) against the
    /// session's budget ([`Budget`]): [`retained_bytes`].
    ///
    /// # Errors
    /// [`HostError::PlanBudget`]: it would take the plan past its budget (it is then not
    /// counted, nor planned).
    pub(super) fn charge_planned(&mut self, effect: &Effect, described: usize) -> Result<()> {
        if self.budget.limit.is_none() {
            return Ok(());
        }
        let file = self.position.as_ref().map_or(0, |p| p.file.len());
        let size = retained_bytes(effect, described, file);
        self.charge_check(effect, size)?;
        self.budget.planned += size;
        self.bound_memo();
        Ok(())
    }

    /// Hold the plan's memo of real-root lookups to what its budget leaves
    /// ([`crate::host::effects::overlay::Overlay::bound_memo`]): set when the session
    /// starts and each time its planned bytes grow.
    pub(super) fn bound_memo(&self) {
        if let Some(o) = self.executor.overlay() {
            o.bound_memo(self.budget.planned, self.budget.limit);
        }
    }

    /// What the plan's memo of real-root lookups holds, in bytes (0 outside a plan).
    fn memo_bytes(&self) -> u64 {
        self.executor.overlay().map_or(0, |o| o.memo_bytes())
    }

    /// Count the script output a step's report keeps (`items`: its recorded output, at
    /// most [`crate::host::effects::report::OUTPUT_RECORD_LIMIT`] a step) against the
    /// budget: [`EFFECT_BYTES`] and [`OUTPUT_COPIES`] of its text. Counted even past the
    /// budget (it is kept already); the step then fails, so no later step adds to it.
    ///
    /// # Errors
    /// [`HostError::PlanBudget`] (kind `output`) when it took the plan past its budget.
    pub(super) fn charge_output(&mut self, items: &[Item]) -> Result<()> {
        let Some(limit) = self.budget.limit else {
            return Ok(());
        };
        let text: usize = items
            .iter()
            .map(|i| match i {
                Item::Output { text, .. } => text.len(),
                _ => 0,
            })
            .sum();
        if text == 0 {
            return Ok(());
        }
        let size = EFFECT_BYTES + OUTPUT_COPIES * text as u64;
        let planned = self.budget.planned;
        self.budget.planned = planned.saturating_add(size);
        self.bound_memo();
        let remembered = self.memo_bytes();
        if self.budget.planned.saturating_add(remembered) > limit {
            return Err(HostError::PlanBudget {
                kind: "output",
                target: "the step's recorded output".into(),
                size,
                planned,
                remembered,
                budget: limit,
            });
        }
        Ok(())
    }

    /// `Ok` when `size` bytes more for `effect` fit the budget, with what the plan's memo
    /// of real-root lookups holds.
    fn charge_check(&self, effect: &Effect, size: u64) -> Result<()> {
        let (Some(limit), planned) = (self.budget.limit, self.budget.planned) else {
            return Ok(());
        };
        let remembered = self.memo_bytes();
        if planned.saturating_add(remembered).saturating_add(size) > limit {
            return Err(HostError::PlanBudget {
                kind: effect.kind().name(),
                target: effect.target(),
                size,
                planned,
                remembered,
                budget: limit,
            });
        }
        Ok(())
    }

    /// A plan (`mode` Plan) or check (`mode` Check) session over `root` with `options`
    /// that starts from `carry`: reads see what the earlier sessions planned, the deferred
    /// work they left pending or recorded is not listed again, and secrets they read stay
    /// redacted (`options.redactor` is replaced by the carried one, which the new
    /// environment's `SKYHOOK_REDACT_ENV` values are added to). Apply is refused by type:
    /// any other `mode` is planned as Plan.
    pub fn carried(
        root: HostRoot,
        mode: ExecMode,
        mut options: HostOptions,
        carry: PlanCarry,
    ) -> Host {
        let mode = match mode {
            ExecMode::Check => ExecMode::Check,
            _ => ExecMode::Plan,
        };
        if carry.fresh {
            let mut host = Host::new(root, mode, options);
            host.budget = carry.budget;
            host.bound_memo();
            return host;
        }
        options.redactor = Some(carry.redactor);
        let mut host = Host::new(root, mode, options);
        host.budget = carry.budget;
        if let Some(o) = host.executor.overlay_mut() {
            *o = carry.overlay;
        }
        host.bound_memo();
        host.planned_commands = carry.planned_commands;
        host.unplanned = carry.unplanned;
        (
            host.pending_daemon_reload,
            host.pending_grub,
            host.pending_initramfs,
        ) = carry.pending;
        (
            host.recorded_reload,
            host.recorded_grub,
            host.recorded_initramfs,
        ) = carry.recorded;
        host
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::files::fs::{self, WriteOptions};
    use crate::host::root::HostRoot;
    use crate::host::testutil::TestHost;

    /// What one planned change costs the budget, from what its report keeps: its
    /// [`EFFECT_BYTES`], its own data (`own`: content, a link's target, its path) and
    /// [`TEXT_COPIES`] of its text as the report has it (target, summary, diff, created
    /// directories; no script position in these sessions).
    fn cost_of(c: &crate::host::effects::report::Change, own: usize) -> u64 {
        let text = c.target.len()
            + c.summary.len()
            + c.diff.as_ref().map_or(0, String::len)
            + c.mkdir.iter().map(String::len).sum::<usize>();
        EFFECT_BYTES + own as u64 + TEXT_COPIES * text as u64
    }

    /// A budget is one budget over the sessions a carry joins (the modes and packages of a
    /// serve plan), and a planned write costs it what the server keeps of it: its content,
    /// its path, its record ([`EFFECT_BYTES`]) and the copies of its summary and diff.
    /// Two writes that fit in two sessions, then one byte more fails naming the file,
    /// its cost and the budget, and is not planned.
    #[test]
    fn the_budget_of_planned_bytes_is_carried_from_session_to_session() {
        let t = TestHost::new();
        let open = || HostRoot::open(&t.root).unwrap();
        let o = WriteOptions::default();
        let budget = 24_000;
        let mut h = Host::carried(
            open(),
            ExecMode::Plan,
            HostOptions::default(),
            PlanCarry::with_budget(budget),
        );
        assert!(fs::write(&mut h, "/etc/a", &"a".repeat(600), &o).unwrap());
        let c = &h.report().changes[0];
        // the 600 bytes in the view, and in the diff's `+` line 8 times (with its path, its
        // summary and the /etc it creates)
        assert_eq!(c.summary, "create /etc/a (mode 0644)");
        assert_eq!(c.diff.as_ref().map(String::len), Some(670));
        assert_eq!(c.mkdir, ["/etc"]);
        let first = cost_of(c, 600 + 6);
        assert_eq!(first, 1536 + 606 + 8 * (6 + 25 + 670 + 4));
        assert_eq!(h.budget.planned, first);
        let carry = h.into_carry().unwrap();
        let mut h = Host::carried(open(), ExecMode::Check, HostOptions::default(), carry);
        assert!(fs::write(&mut h, "/etc/b", &"b".repeat(400), &o).unwrap());
        let planned = first + cost_of(&h.report().changes[0], 400 + 6);
        assert_eq!(h.budget.planned, planned);
        // One byte more than is left (beside what the plan remembers of the real root,
        // `memo`) fails before its diff is made.
        let memo = || h.executor.overlay().unwrap().memo_bytes();
        let content = (budget - planned - memo() - EFFECT_BYTES + 1) as usize;
        let e = fs::write(&mut h, "/etc/c", &"c".repeat(content), &o)
            .unwrap_err()
            .to_string();
        let size = content as u64 + EFFECT_BYTES;
        let memo = h.executor.overlay().unwrap().memo_bytes();
        assert!(memo > 0);
        assert_eq!(
            e,
            format!(
                "planning {size} bytes for /etc/c (write: its content, report and events) \
                 would take the plan's planned effects past its budget of 24000 bytes (0 MiB, \
                 serve --plan-bytes): {planned} bytes are planned already and {memo} bytes \
                 remember the real root's answers to its lookups"
            )
        );
        assert!(fs::read(&h, "/etc/c").is_err());
        assert_eq!(fs::read(&h, "/etc/a").unwrap(), "a".repeat(600));
        // Without a budget (skyhook-run, the agent) nothing is counted.
        let mut h = t.host(ExecMode::Plan);
        assert!(fs::write(&mut h, "/etc/c", &"c".repeat(20000), &o).unwrap());
    }

    /// Every planned effect costs the budget what the server keeps of it, not only a
    /// write's content (before, a directory or a symlink cost nothing: 4,000 planned
    /// `fs::mkdir` took serve from 23 to 212 MiB under `--plan-bytes 1MiB`): under a budget
    /// of 64 KiB, directories `/etc/dN` cost [`EFFECT_BYTES`] and their path and summary
    /// each (1,904 bytes for `/etc/d10`), and with what the plan remembers of the real root
    /// (2,607 bytes) the 34th fails naming it and the budget; a symlink
    /// costs its 4,000-byte target once in the view and [`TEXT_COPIES`] times in its
    /// summary; an interrupt costs [`EFFECT_BYTES`] and its target (`node`).
    #[test]
    fn every_planned_effect_is_charged_what_the_server_keeps_of_it() {
        let t = TestHost::new();
        let budget = 64 << 10;
        let mut h = t.budgeted_plan(budget);
        let mut made = 0;
        let err = loop {
            match fs::mkdir(&mut h, &format!("/etc/d{made}"), None) {
                Ok(_) => made += 1,
                Err(e) => break e.to_string(),
            }
            assert!(made < 1000, "1,000 directories fit in 64 KiB");
        };
        let changes = &h.report().changes;
        assert_eq!(changes.len(), made);
        assert_eq!(changes[10].summary, "create directory /etc/d10 (mode 0755)");
        let each: Vec<u64> = changes.iter().map(|c| cost_of(c, c.target.len())).collect();
        // /etc/d10: 1024 + 8 + 8 x (8 + 37)
        assert_eq!(each[10], EFFECT_BYTES + 8 + TEXT_COPIES * 45);
        assert_eq!(each[10], 1904);
        // the first also creates /etc (no /etc in this root)
        assert_eq!(changes[0].mkdir, ["/etc"]);
        assert_eq!(each[..2], [1919, 1887]);
        assert_eq!(h.budget.planned, each.iter().sum::<u64>());
        // What the plan remembers of the real root counts too ([`Host::charge_check`]).
        let memo = h.executor.overlay().unwrap().memo_bytes();
        assert_eq!((h.budget.planned, memo), (62694, 2607));
        assert_eq!(made, 33, "{each:?}");
        assert!(
            err.starts_with("planning 1904 bytes for /etc/d33 (mkdir: ")
                && err.contains("past its budget of 65536 bytes (0 MiB, serve --plan-bytes)"),
            "{err}"
        );
        assert!(fs::stat(&h, "/etc/d33").is_err());

        let target = format!("/{}", "t".repeat(3999));
        let mut h = t.budgeted_plan(budget);
        assert!(fs::symlink(&mut h, &target, "/etc/l").unwrap());
        let c = &h.report().changes[0];
        assert_eq!(c.summary, format!("symlink /etc/l -> {target}"));
        assert_eq!(h.budget.planned, cost_of(c, 4000 + 6));
        assert!(h.budget.planned > 9 * 4000, "{}", h.budget.planned);
        let before = h.budget.planned;
        crate::host::kernel::interrupt::reboot(&mut h).unwrap();
        // its record and its target, `node`, once in the view's place and 8 times as text
        assert_eq!(h.budget.planned - before, EFFECT_BYTES + 4 + 8 * 4);
    }

    /// A step's recorded output costs the budget too, [`EFFECT_BYTES`] and
    /// [`OUTPUT_COPIES`] of it (before, nothing: each step of a plan may record 1 MiB, and
    /// a package may have thousands of steps): 10 KiB of output fits a 64 KiB budget, a
    /// second step's 10 KiB fails that step at its end, naming the budget.
    #[test]
    fn a_steps_recorded_output_is_charged_to_the_budget() {
        use crate::host::effects::report::OutputStream;
        let t = TestHost::new();
        let mut h = t.budgeted_plan(64 << 10);
        h.journal().output(OutputStream::Stdout, &[b'x'; 10 << 10]);
        let (report, r) = h.finish_step_with_report();
        r.unwrap();
        assert_eq!(report.items.len(), 1);
        assert_eq!(h.budget.planned, 1536 + 4 * 10240);
        h.journal().output(OutputStream::Stderr, &[b'y'; 10 << 10]);
        let (_, r) = h.finish_step_with_report();
        assert_eq!(
            r.unwrap_err().to_string(),
            "planning 42496 bytes for the step's recorded output (output: its content, report \
             and events) would take the plan's planned effects past its budget of 65536 bytes \
             (0 MiB, serve --plan-bytes): 42496 bytes are planned already"
        );
    }
}
