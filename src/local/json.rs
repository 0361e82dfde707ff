//! Errors as JSON (`docs/plan.schema.json`): `{file, line, column, message}`; and a
//! package plan's JSON written as text, one change at a time
//! ([`PackagePlan::write_json_open`]).

use serde_json::{Value, json};

use super::{PackagePlan, StepKind};

/// An error message as JSON, `{file, line, column, message}` (`docs/plan.schema.json`):
/// the parts of `file:line:col: message` (or `file:line: message`, the script errors'
/// form); `file`, `line` and `column` null for a message without a position (e.g. the
/// failure of deferred work), whose `message` is then the whole text.
pub fn error_json(text: &str) -> serde_json::Value {
    static POSITIONED: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = POSITIONED.get_or_init(|| {
        regex::Regex::new(r"(?s)^(.+?):(\d+)(?::(\d+))?: (.*)$").expect("valid regex")
    });
    let num = |m: Option<regex::Match<'_>>| m.and_then(|m| m.as_str().parse::<u64>().ok());
    match re.captures(text.trim_end()) {
        Some(c) => serde_json::json!({
            "file": &c[1],
            "line": num(c.get(2)),
            "column": num(c.get(3)),
            "message": &c[4],
        }),
        None => serde_json::json!({
            "file": null,
            "line": null,
            "column": null,
            "message": text.trim_end(),
        }),
    }
}

/// The error of a compile failure as JSON (as [`error_json`], from its parts).
pub fn script_error_json(e: &crate::script::ScriptError) -> serde_json::Value {
    serde_json::json!({
        "file": e.file,
        "line": e.line,
        "column": e.column,
        "message": e.message,
    })
}

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
                    let errors: Vec<Value> =
                        o.error.iter().map(|e| error_json(&r.redact(e))).collect();
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
