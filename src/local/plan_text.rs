//! A package plan's JSON written as text, one change at a time
//! ([`PackagePlan::write_json_open`]): serve's package plan, whose steps may plan
//! thousands of effects, never holds it as a [`serde_json::Value`] tree.

use serde_json::{Value, json};

use super::{PackagePlan, StepKind};

impl PackagePlan {
    /// [`PackagePlan::to_json`] written as JSON text to `out` without its closing `}` (the
    /// caller adds its own fields), one change at a time ([`crate::host::Report::write_json_open`]):
    /// serve's package plan, whose steps may plan thousands of effects, never holds it as
    /// a [`Value`] tree.
    pub fn write_json_open(&self, out: &mut String) {
        use std::fmt::Write as _;
        let r = &self.redactor;
        self.total().write_json_open(r, out);
        let _ = write!(
            out,
            ",\"package\":{},\"version\":{},\"package_mode\":{},\"ok\":{},\"warnings\":{},\"steps\":[",
            json!(self.package_name),
            json!(self.package_version),
            json!(self.mode.as_str()),
            self.ok(),
            json!(self.warnings)
        );
        for (i, s) in self.steps.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let head = json!({"name": s.name, "path": s.path, "args": s.args}).to_string();
            out.push_str(head.strip_suffix('}').unwrap_or(&head));
            let kind = match &s.kind {
                StepKind::Script(o) => {
                    out.push_str(",\"result\":");
                    o.write_json_open(r, out);
                    let errors: Vec<Value> = o
                        .error
                        .iter()
                        .map(|e| super::error_json(&r.redact(e)))
                        .collect();
                    let _ = write!(out, ",\"errors\":{}}}", Value::Array(errors));
                    "rhai"
                }
                StepKind::Process => {
                    let _ = write!(out, ",\"would_run\":{}", json!(s.command_line()));
                    "process"
                }
                StepKind::ProcessRan(o) => {
                    out.push_str(",\"result\":");
                    o.write_json_open(r, out);
                    out.push_str(",\"errors\":[]}");
                    "process"
                }
                StepKind::Skipped { flag } => {
                    let _ = write!(out, ",\"flag\":{}", json!(flag.display().to_string()));
                    "skipped"
                }
                StepKind::Failed { message } => {
                    let _ = write!(out, ",\"error\":{}", json!(message));
                    "failed"
                }
                StepKind::NotRun => "not_run",
                StepKind::Overlay(rep) => {
                    out.push_str(",\"result\":");
                    rep.write_json_open(r, out);
                    out.push('}');
                    "overlay"
                }
            };
            let _ = write!(out, ",\"kind\":\"{kind}\"}}");
        }
        out.push(']');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::effects::effect::InterruptRequest;
    use crate::host::effects::report::{Action, Change, Item, OutputStream, Position};
    use crate::host::{ExecMode, Report};
    use crate::package::Mode;
    use crate::redact::Redactor;
    use crate::step::StepResult;

    /// A report of every kind of entry, a secret in one summary.
    fn report(mode: ExecMode) -> Report {
        let position = Some(Position {
            file: "apply.rhai".into(),
            line: 3,
        });
        let mut r = Report::new(mode);
        r.changes.push(Change {
            kind: "write".into(),
            target: "/etc/x.conf".into(),
            summary: "update /etc/x.conf (token hunter2)".into(),
            diff: Some("--- a/etc/x.conf\n+++ b/etc/x.conf\n@@ -1 +1 @@\n-a\n+hunter2\n".into()),
            before: Some("sha256:ab".into()),
            after: None,
            mkdir: vec!["/etc/x.d".into()],
            position: position.clone(),
        });
        r.changes.push(Change {
            kind: "mkdir".into(),
            target: "/tmp/d\"1".into(),
            summary: "create directory /tmp/d\"1 (mode 0755)".into(),
            diff: None,
            before: None,
            after: None,
            mkdir: Vec::new(),
            position: None,
        });
        r.actions.push(Action {
            kind: "command".into(),
            target: "systemctl restart x".into(),
            summary: "systemctl restart x".into(),
            position: position.clone(),
        });
        r.interrupts.push(InterruptRequest::Reboot);
        r.unchanged = 4;
        r.items = vec![
            Item::Output {
                stream: OutputStream::Stdout,
                text: "hello hunter2\n".into(),
            },
            Item::Change(0),
            Item::Action(0),
            Item::Unknown {
                summary: "fs::read: unknown".into(),
                position: position.clone(),
            },
            Item::Change(1),
            Item::Interrupt { index: 0, position },
        ];
        r
    }

    /// The text serve writes one change at a time is exactly the JSON of the Value tree
    /// (`to_json`), for a report, a step's result and a package plan of every kind of
    /// step, secrets redacted alike.
    #[test]
    fn a_plan_written_as_text_is_its_json() {
        let redactor = Redactor::new();
        redactor.add("hunter2");
        let r = report(ExecMode::Plan);
        let mut text = String::new();
        r.write_json_open(&redactor, &mut text);
        text.push('}');
        assert_eq!(text, r.to_json(&redactor).to_string());
        assert!(
            text.contains("token ***") && !text.contains("hunter2"),
            "{text}"
        );

        let mut step = StepResult::new(ExecMode::Plan);
        step.report = report(ExecMode::Plan);
        step.error = Some("apply.rhai:3:1: failed with hunter2".into());
        step.notes = vec!["a note".into()];
        step.code = 1;
        let mut text = String::new();
        step.write_json_open(&redactor, &mut text);
        text.push('}');
        assert_eq!(text, step.to_json(&redactor).to_string());

        let mut ran = StepResult::new(ExecMode::Apply);
        ran.ok = true;
        let planned = |name: &str, kind: StepKind| crate::local::PlannedStep {
            name: name.into(),
            path: format!("{name}.sh"),
            args: vec!["a\"b".into()],
            kind,
        };
        let plan = PackagePlan {
            package_name: "pkg".into(),
            package_version: "1.0.0".into(),
            mode: Mode::Apply,
            exec_mode: ExecMode::Plan,
            warnings: vec!["a warning".into()],
            steps: vec![
                planned("root_dir", StepKind::Overlay(report(ExecMode::Plan))),
                planned("s", StepKind::Script(step)),
                planned("p", StepKind::Process),
                planned("q", StepKind::ProcessRan(ran)),
                planned(
                    "k",
                    StepKind::Skipped {
                        flag: "/etc/skyhook/flag".into(),
                    },
                ),
                planned(
                    "f",
                    StepKind::Failed {
                        message: "env: X unset".into(),
                    },
                ),
                planned("n", StepKind::NotRun),
            ],
            redactor,
        };
        let mut text = String::new();
        plan.write_json_open(&mut text);
        text.push('}');
        assert_eq!(text, plan.to_json().to_string());
    }
}
