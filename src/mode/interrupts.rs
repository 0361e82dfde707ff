//! The interrupts a succeeded script step requested, judged against what the Skyhook CR
//! declares ([`super::coverage`]): the operator runs covered ones; an uncovered one fails the
//! step; nothing is interrupted here. A requested reboot is recorded for
//! `post-interrupt-check`, which fails while the node still runs the recorded boot.

use crate::host::effects::effect::InterruptRequest;
use crate::host::root::AgentFiles;
use crate::package::Step;
use crate::step::{StepResult, StepRunner};

use super::coverage::{self, Declarations};
use super::error::ModeError;
use super::run_loop::ModeLoop;

impl<R: StepRunner> ModeLoop<'_, R> {
    /// Judge the interrupts a succeeded step requested (see [`super::coverage`]): covered
    /// ones are said to be the operator's; an uncovered one fails the step with the CR lines
    /// to add; without node metadata a warning. Nothing is ever interrupted here. A covered
    /// (or unjudged) reboot is recorded with the boot id for `post-interrupt-check`.
    pub(super) fn judge_interrupts(
        &self,
        step: &Step,
        result: &mut StepResult,
    ) -> Result<(), ModeError> {
        let policy = &self.interrupts;
        let pkg = &self.package.package_name;
        // The name the CR gives the package, for the lines to add to it.
        let cr_name = coverage::lookup_names(self.resource_id, pkg).remove(0);
        let mut uncovered = Vec::new();
        let mut notes = Vec::new();
        for request in &result.interrupts {
            let name = coverage::request_name(request);
            match &policy.declarations {
                Declarations::Known(Some(d)) => match d.covering(request) {
                    Some(how) => {
                        let line = format!(
                            "{}: requested interrupt {name} is declared in the Skyhook CR ({how}): the operator runs it in its interrupt stage",
                            step.path
                        );
                        self.console.say(&line);
                        notes.push(line);
                    }
                    None => uncovered.push(request),
                },
                Declarations::Known(None) => uncovered.push(request),
                Declarations::Unknown => self.console.warn(&format!(
                    "{}: requested interrupt {name} cannot be checked (no node metadata packages.json): the agent never interrupts the node itself; declare it in the package's Skyhook CR",
                    step.path
                )),
            }
        }
        if !uncovered.is_empty() {
            // Where the script requested it (`file:line`), else the step's path.
            let at = |r: &InterruptRequest| {
                let report = &result.report;
                report
                    .items
                    .iter()
                    .find_map(|item| match item {
                        crate::host::effects::report::Item::Interrupt {
                            index,
                            position: Some(p),
                        } if report.interrupts.get(*index) == Some(r) => Some(p.to_string()),
                        _ => None,
                    })
                    .unwrap_or_else(|| step.path.clone())
            };
            let lines: Vec<String> = uncovered
                .iter()
                .map(|r| {
                    format!(
                        "{}: requested interrupt {} is not declared for package {cr_name} in the Skyhook CR, so the operator would not drain the node for it; nothing was interrupted. Add to spec.packages.{cr_name}: {}",
                        at(r),
                        coverage::request_name(r),
                        coverage::cr_lines(r)
                    )
                })
                .collect();
            for l in &lines {
                self.console.error(l);
            }
            result.ok = false;
            result.code = 1;
            result.error = Some(lines.join("; "));
            return Ok(());
        }
        result.notes.extend(notes);
        if policy.record
            && self.state.writable
            && result.interrupts.contains(&InterruptRequest::Reboot)
            && let Some(boot) = coverage::boot_id(self.state.root)
        {
            AgentFiles::new(self.state.root).write_atomic(
                &coverage::reboot_record(self.state.state_root, pkg),
                format!("{boot}\n").as_bytes(),
                Some(0o644),
            )?;
        }
        Ok(())
    }

    /// `post-interrupt-check` after a requested reboot: `Some(message)` while the node still
    /// runs the boot id recorded when the reboot was requested.
    pub(super) fn reboot_pending(&self) -> Result<Option<String>, ModeError> {
        let record = coverage::reboot_record(self.state.state_root, &self.package.package_name);
        let Some(bytes) = self.state.root.read_opt(&record)? else {
            return Ok(None);
        };
        let recorded = String::from_utf8_lossy(&bytes).trim().to_string();
        match coverage::boot_id(self.state.root) {
            Some(now) if now == recorded => Ok(Some(format!(
                "the requested reboot has not happened: the node still runs boot {now}, as when a step of {} requested it ({})",
                self.package.package_name,
                self.state.root.display_path(&record).display()
            ))),
            _ => Ok(None),
        }
    }
}
