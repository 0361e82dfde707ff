//! [`Report`]: what a session changed (apply), would change (plan) or found drifted (check),
//! the actions it ran or would run, and the interrupts it requested.
//!
//! Text form (`skyhook-run` prints it):
//!
//! ```text
//! ~ update /etc/x.conf
//! --- a/etc/x.conf
//! +++ b/etc/x.conf
//! @@ -1 +1 @@
//! -a
//! +b
//! > would run: systemctl restart x
//! ! interrupt: reboot
//! Plan: 1 to change, 3 unchanged, 1 action.
//! ```
//!
//! Changes start with `~`, actions with `>`, interrupts with `!`. The summary line is
//! `Plan: N to change, M unchanged.` in plan and check mode and
//! `Apply: N changed, M unchanged.` in apply mode, with `, K action(s).` when there are
//! actions. JSON form: [`Report::to_json`] (the serde shape of [`Report`]).

use std::fmt::Write as _;

use serde::Serialize;

use crate::host::effect::InterruptRequest;
use crate::host::secrets::Redactor;

/// How the session's executor treats effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecMode {
    /// Perform every effect.
    Apply,
    /// Record effects over a read overlay and render diffs (`skyhook-run` without `--apply`).
    Plan,
    /// Record effects as drift (the agent's `*-check` modes running an apply script).
    Check,
}

/// One change: applied, planned, or (in check mode) drift.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The effect kind ([`crate::host::effect::Effect::kind`]).
    pub kind: String,
    /// What it applies to (host path, unit, packages, sysctl key).
    pub target: String,
    /// One line for humans, e.g. `update /etc/x.conf (mode 0644 -> 0600)`.
    pub summary: String,
    /// Unified diff (`--- a/path` / `+++ b/path`) for file content changes, plan and check
    /// mode only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// One action: run (apply) or recorded (plan, check).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Action {
    /// The effect kind (`command`, `service_action`, `daemon_reload`, `grub_update`).
    pub kind: String,
    /// What it applies to.
    pub target: String,
    /// One line for humans, e.g. `systemctl restart x`.
    pub summary: String,
}

/// The record of one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The mode the session ran in.
    pub mode: ExecMode,
    /// Changes in the order they were made.
    pub changes: Vec<Change>,
    /// Actions in the order they were done.
    pub actions: Vec<Action>,
    /// How many mutating calls found the host already in the desired state.
    pub unchanged: usize,
    /// Interrupts requested, for the agent to run after the step succeeded.
    pub interrupts: Vec<InterruptRequest>,
}

impl Report {
    /// An empty report for `mode`.
    pub fn new(mode: ExecMode) -> Self {
        Report {
            mode,
            changes: Vec::new(),
            actions: Vec::new(),
            unchanged: 0,
            interrupts: Vec::new(),
        }
    }

    /// The pending changes of a check (empty outside check mode). Actions and interrupts are
    /// never drift.
    pub fn drift(&self) -> &[Change] {
        if self.mode == ExecMode::Check {
            &self.changes
        } else {
            &[]
        }
    }

    /// The summary line: `Plan: 2 to change, 5 unchanged, 1 action.` (plan and check),
    /// `Apply: 2 changed, 5 unchanged.` (apply). The action count is left out when zero.
    pub fn summary(&self) -> String {
        let n = self.changes.len();
        let mut s = match self.mode {
            ExecMode::Apply => format!("Apply: {n} changed, {} unchanged", self.unchanged),
            ExecMode::Plan | ExecMode::Check => {
                format!("Plan: {n} to change, {} unchanged", self.unchanged)
            }
        };
        match self.actions.len() {
            0 => {}
            1 => s.push_str(", 1 action"),
            k => {
                let _ = write!(s, ", {k} actions");
            }
        }
        s.push('.');
        s
    }

    /// The text form (module docs), every secret value replaced by `***`.
    pub fn render_text(&self, redactor: &Redactor) -> String {
        let mut out = String::new();
        for c in &self.changes {
            let _ = writeln!(out, "~ {}", c.summary);
            if let Some(d) = &c.diff {
                out.push_str(d);
                if !d.ends_with('\n') {
                    out.push('\n');
                }
            }
        }
        let verb = if self.mode == ExecMode::Apply {
            "ran"
        } else {
            "would run"
        };
        for a in &self.actions {
            let _ = writeln!(out, "> {verb}: {}", a.summary);
        }
        for i in &self.interrupts {
            let _ = writeln!(out, "! interrupt: {}", interrupt_text(i));
        }
        out.push_str(&self.summary());
        out.push('\n');
        redactor.redact(&out).into_owned()
    }

    /// The JSON form (`--output json`): the serde shape of this struct plus a `summary`
    /// string, every secret value replaced by `***`.
    pub fn to_json(&self, redactor: &Redactor) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let serde_json::Value::Object(m) = &mut v {
            m.insert("summary".into(), self.summary().into());
        }
        redact_json(&mut v, redactor);
        v
    }
}

fn interrupt_text(i: &InterruptRequest) -> String {
    match i {
        InterruptRequest::Reboot => "reboot".into(),
        InterruptRequest::RestartServices { services } => {
            format!("restart services {}", services.join(" "))
        }
        InterruptRequest::RestartAllServices => "restart all services".into(),
    }
}

fn redact_json(v: &mut serde_json::Value, r: &Redactor) {
    match v {
        serde_json::Value::String(s) => {
            if let std::borrow::Cow::Owned(o) = r.redact(s) {
                *s = o;
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| redact_json(x, r)),
        serde_json::Value::Object(m) => m.values_mut().for_each(|x| redact_json(x, r)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(s: &str) -> Change {
        Change {
            kind: "write".into(),
            target: "/x".into(),
            summary: s.into(),
            diff: None,
        }
    }

    fn action() -> Action {
        Action {
            kind: "command".into(),
            target: "true".into(),
            summary: "true".into(),
        }
    }

    #[test]
    fn summary_lines() {
        let mut r = Report::new(ExecMode::Plan);
        r.changes = vec![change("a"), change("b")];
        r.unchanged = 5;
        assert_eq!(r.summary(), "Plan: 2 to change, 5 unchanged.");
        r.actions.push(action());
        assert_eq!(r.summary(), "Plan: 2 to change, 5 unchanged, 1 action.");
        r.actions.push(action());
        assert_eq!(r.summary(), "Plan: 2 to change, 5 unchanged, 2 actions.");
        r.mode = ExecMode::Apply;
        assert_eq!(r.summary(), "Apply: 2 changed, 5 unchanged, 2 actions.");
        assert!(r.drift().is_empty());
        r.mode = ExecMode::Check;
        assert_eq!(r.drift().len(), 2);
    }

    #[test]
    fn text_and_json_are_redacted() {
        let red = Redactor::new();
        red.add("hunter2");
        let mut r = Report::new(ExecMode::Plan);
        r.changes.push(Change {
            diff: Some("+pw=hunter2\n".into()),
            ..change("update /x")
        });
        r.interrupts.push(InterruptRequest::Reboot);
        assert_eq!(
            r.render_text(&red),
            "~ update /x\n+pw=***\n! interrupt: reboot\nPlan: 1 to change, 0 unchanged.\n"
        );
        let j = r.to_json(&red);
        assert_eq!(j["changes"][0]["diff"], "+pw=***\n");
        assert_eq!(j["summary"], "Plan: 1 to change, 0 unchanged.");
        assert_eq!(j["interrupts"][0]["type"], "reboot");
        assert_eq!(j["mode"], "plan");
    }
}
