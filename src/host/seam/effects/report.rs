//! [`Report`]: what a session changed (apply), would change (plan) or found drifted (check),
//! the actions it ran or would run, the interrupts it requested and, when the caller records
//! it, the script's own output, as one ordered list ([`Report::items`]).
//!
//! Text form (`skyhook-run` prints it), in the order things happened:
//!
//! ```text
//! hello from the script
//! + mkdir /etc/x.d
//! ~ create /etc/x.d/x.conf (mode 0644)  # apply.rhai:2
//! --- /dev/null
//! +++ b/etc/x.d/x.conf
//! @@ -0,0 +1 @@
//! +b
//! > would run: systemctl restart x  # apply.rhai:3
//! ! interrupt: reboot  # apply.rhai:4
//! Plan: 1 to change, 3 unchanged, 1 action.
//! ```
//!
//! Changes start with `~` (each directory the change creates first, as `+ mkdir <dir>`),
//! actions with `>`, interrupts with `!`, a call the plan cannot know the outcome of (it
//! reads what a command the step only planned may have changed; the step's plan ends there)
//! with `? unknown:`; each ends with `  # file:line`, the script position
//! of the call that made it (none for deferred work run at the end of the step). Recorded
//! stdout output (`print`, `log::info`) appears as it was written; recorded stderr output is
//! only in the JSON form (it is written live to stderr). The summary line is
//! `Plan: N to change, M unchanged.` in plan and check mode and
//! `Apply: N changed, M unchanged.` in apply mode, with `, K action(s).` when there are
//! actions. JSON form: [`Report::to_json`], specified by `docs/plan.schema.json`.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::{Value, json};

use crate::host::effects::effect::InterruptRequest;
use crate::redact::Redactor;

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

/// Where in a script a host call was made: the script's file name (the AST's source, e.g.
/// `apply.rhai` or `stdlib/sysctl.rhai`) and its 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Position {
    /// The script file as the run names it.
    pub file: String,
    /// 1-based line.
    pub line: usize,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// One change: applied, planned, or (in check mode) drift.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The effect kind ([`crate::host::effects::effect::Effect::kind`]).
    pub kind: String,
    /// What it applies to (host path, unit, packages, sysctl key, command line).
    pub target: String,
    /// One line for humans, e.g. `update /etc/x.conf (mode 0644 -> 0600)`.
    pub summary: String,
    /// Unified diff (`--- a/path` / `+++ b/path`) for file content changes: plan and check
    /// mode, and apply mode when [`crate::host::HostOptions::diffs`] is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// `sha256:<hex>` of the file content before (writes and removals of an existing file);
    /// only on the first change of its file in the report (`src/host/seam/effects/hashes.rs`).
    pub before: Option<String>,
    /// `sha256:<hex>` of the file content after (writes); only on the last change of its
    /// file in the report, set when the session ends (`src/host/seam/effects/hashes.rs`).
    pub after: Option<String>,
    /// Directories this change creates on the way (missing parents), outermost first.
    pub mkdir: Vec<String>,
    /// The script position of the call that made it; `None` for deferred work.
    pub position: Option<Position>,
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
    /// The script position of the call that made it; `None` for deferred work.
    pub position: Option<Position>,
}

/// One of the two script output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    /// Standard output (`print`, `log::info`, a streamed command's stdout).
    Stdout,
    /// Standard error (`debug`, `log::warn`, `log::error`, a streamed command's stderr).
    Stderr,
}

/// One entry of a step's ordered list ([`Report::items`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// `Report::changes[i]`.
    Change(usize),
    /// `Report::actions[i]`.
    Action(usize),
    /// `Report::interrupts[index]`, requested at `position`.
    Interrupt {
        /// Index into [`Report::interrupts`].
        index: usize,
        /// Where it was requested.
        position: Option<Position>,
    },
    /// Plan mode: a call whose outcome the plan cannot know (it reads what a command the
    /// step only planned may have changed); the plan of the step ends there.
    Unknown {
        /// `<ns>::<fn>: <path> is unknown in the plan: ...`.
        summary: String,
        /// Where the call was made.
        position: Option<Position>,
    },
    /// Script output, consecutive chunks of one stream merged.
    Output {
        /// The stream.
        stream: OutputStream,
        /// The text (invalid UTF-8 replaced).
        text: String,
    },
}

/// At most this much output (1 MiB) is recorded per step; the rest is counted in a note.
pub const OUTPUT_RECORD_LIMIT: usize = 1024 * 1024;

#[derive(Debug)]
enum Entry {
    Item(Item),
    Output(OutputStream, Vec<u8>),
}

#[derive(Debug, Default)]
struct JournalState {
    entries: Vec<Entry>,
    output_bytes: usize,
    dropped: usize,
}

/// The ordered list of one step as it happens, shared between the session (changes, actions,
/// interrupts) and the script output (a recording [`crate::script::ScriptOutput`]), which may
/// write while the session is busy in a host call (a streamed command). Cheap to clone
/// (shared).
#[derive(Debug, Clone, Default)]
pub struct Journal(Arc<Mutex<JournalState>>);

impl Journal {
    fn lock(&self) -> std::sync::MutexGuard<'_, JournalState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Append an item.
    pub fn push(&self, item: Item) {
        self.lock().entries.push(Entry::Item(item));
    }

    /// Append a chunk of output (merged with the previous entry when it is output of the
    /// same stream); beyond [`OUTPUT_RECORD_LIMIT`] bytes per step, only counted.
    pub fn output(&self, stream: OutputStream, bytes: &[u8]) {
        let mut j = self.lock();
        let room = OUTPUT_RECORD_LIMIT.saturating_sub(j.output_bytes);
        let take = bytes.len().min(room);
        j.dropped += bytes.len() - take;
        if take == 0 {
            return;
        }
        j.output_bytes += take;
        match j.entries.last_mut() {
            Some(Entry::Output(s, buf)) if *s == stream => buf.extend_from_slice(&bytes[..take]),
            _ => j
                .entries
                .push(Entry::Output(stream, bytes[..take].to_vec())),
        }
    }

    /// Take the items recorded so far (the journal starts empty again).
    pub fn take(&self) -> Vec<Item> {
        let mut j = self.lock();
        let state = std::mem::take(&mut *j);
        let mut items: Vec<Item> = state
            .entries
            .into_iter()
            .map(|e| match e {
                Entry::Item(i) => i,
                Entry::Output(stream, bytes) => Item::Output {
                    stream,
                    text: String::from_utf8_lossy(&bytes).into_owned(),
                },
            })
            .collect();
        if state.dropped > 0 {
            items.push(Item::Output {
                stream: OutputStream::Stderr,
                text: format!(
                    "skyhook: {} more bytes of output not recorded in the plan\n",
                    state.dropped
                ),
            });
        }
        items
    }
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
    /// Everything above, and the recorded script output, in the order it happened (filled
    /// when the step ends). Empty for a report built by hand: [`Report::ordered`] then
    /// lists changes, actions and interrupts in that order.
    #[serde(skip)]
    pub items: Vec<Item>,
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
            items: Vec::new(),
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

    /// The ordered list: [`Report::items`] when it covers every change, action and
    /// interrupt, else (a report assembled by hand) changes, actions and interrupts in that
    /// order.
    pub fn ordered(&self) -> Vec<Item> {
        let covered = self
            .items
            .iter()
            .filter(|i| !matches!(i, Item::Output { .. } | Item::Unknown { .. }))
            .count();
        if covered == self.changes.len() + self.actions.len() + self.interrupts.len() {
            return self.items.clone();
        }
        (0..self.changes.len())
            .map(Item::Change)
            .chain((0..self.actions.len()).map(Item::Action))
            .chain((0..self.interrupts.len()).map(|index| Item::Interrupt {
                index,
                position: None,
            }))
            .collect()
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
        let mut out = self.render_items();
        out.push_str(&self.summary());
        out.push('\n');
        redactor.redact(&out).into_owned()
    }

    /// The text form without the summary line and without redaction (empty, or lines each
    /// ending with `\n`).
    pub fn render_items(&self) -> String {
        let mut out = String::new();
        let verb = if self.mode == ExecMode::Apply {
            "ran"
        } else {
            "would run"
        };
        for item in self.ordered() {
            match item {
                Item::Change(i) => render_change(&mut out, &self.changes[i], ""),
                Item::Action(i) => {
                    let a = &self.actions[i];
                    let _ = writeln!(out, "> {verb}: {}{}", a.summary, at(a.position.as_ref()));
                }
                Item::Interrupt { index, position } => {
                    let _ = writeln!(
                        out,
                        "! interrupt: {}{}",
                        interrupt_text(&self.interrupts[index]),
                        at(position.as_ref())
                    );
                }
                Item::Unknown { summary, position } => {
                    let _ = writeln!(out, "? unknown: {summary}{}", at(position.as_ref()));
                }
                Item::Output {
                    stream: OutputStream::Stdout,
                    text,
                } => {
                    out.push_str(&text);
                    if !text.ends_with('\n') {
                        out.push('\n');
                    }
                }
                Item::Output { .. } => {}
            }
        }
        out
    }

    /// The drift of a check as the agent logs it: `drift: N pending change(s), ...:` then
    /// each drifted change once, indented, with its directories, position and diff. Empty
    /// when there is no drift. Secret values are replaced by `***`.
    pub fn render_drift(&self, redactor: &Redactor) -> String {
        let drift = self.drift();
        if drift.is_empty() {
            return String::new();
        }
        let mut text = format!(
            "drift: {} pending change(s), the host is not in the state this script describes:\n",
            drift.len()
        );
        for c in drift {
            render_change(&mut text, c, "  ");
        }
        redactor.redact(&text).into_owned()
    }

    /// The JSON form (`--output json`, `docs/plan.schema.json`): the serde shape of this
    /// struct (`mode`, `changes`, `actions`, `unchanged`, `interrupts`) plus `summary` (the
    /// line), `counts` (`changes`, `unchanged`, `actions`, `interrupts`) and `items`, the
    /// ordered list ([`Report::item_json`]), every secret value replaced by `***`.
    pub fn to_json(&self, redactor: &Redactor) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut v {
            m.insert("summary".into(), self.summary().into());
            m.insert(
                "counts".into(),
                json!({
                    "changes": self.changes.len(),
                    "unchanged": self.unchanged,
                    "actions": self.actions.len(),
                    "interrupts": self.interrupts.len(),
                }),
            );
            let items: Vec<Value> = self.ordered().iter().map(|i| self.item_json(i)).collect();
            m.insert("items".into(), Value::Array(items));
        }
        redact_json(&mut v, redactor);
        v
    }

    /// [`Report::to_json`] written as JSON text to `out` without its closing `}` (the caller
    /// adds its own fields, then closes it), made one change, action, interrupt and item at
    /// a time: a large report (serve's package plan of thousands of effects) is never a
    /// [`Value`] tree at once, which takes several times its text (a map of a dozen keys per
    /// change, each key and value an allocation of its own). The same text as
    /// `to_json(redactor).to_string()` without its last byte.
    pub fn write_json_open(&self, redactor: &Redactor, out: &mut String) {
        let r = redactor;
        let _ = write!(out, "{{\"mode\":{},\"changes\":", redacted(&self.mode, r));
        write_array(out, self.changes.iter().map(|c| redacted(c, r)));
        out.push_str(",\"actions\":");
        write_array(out, self.actions.iter().map(|a| redacted(a, r)));
        let _ = write!(out, ",\"unchanged\":{},\"interrupts\":", self.unchanged);
        write_array(out, self.interrupts.iter().map(|i| redacted(i, r)));
        let counts = json!({
            "changes": self.changes.len(),
            "unchanged": self.unchanged,
            "actions": self.actions.len(),
            "interrupts": self.interrupts.len(),
        });
        let _ = write!(
            out,
            ",\"summary\":{},\"counts\":{counts},\"items\":",
            redacted(&self.summary(), r)
        );
        write_array(
            out,
            self.ordered().iter().map(|i| {
                let mut v = self.item_json(i);
                redact_json(&mut v, r);
                v
            }),
        );
    }

    /// One item as JSON: `item` (`change`, `action`, `interrupt`, `unknown`, `output`); for
    /// an unknown call `summary` and `position`; for a change or
    /// action `kind`, `target`, `summary`, `path` (file kinds) or `command` (command kinds),
    /// `position` (`{file, line}` or null), for a change also `before`, `after`, `diff` and
    /// `mkdir`; for an interrupt `interrupt` (the request) and `position`; for output
    /// `stream` and `text`. Not redacted.
    pub fn item_json(&self, item: &Item) -> Value {
        match item {
            Item::Change(i) => {
                let c = &self.changes[*i];
                let (path, command) = path_or_command(&c.kind, &c.target);
                json!({
                    "item": "change",
                    "kind": c.kind,
                    "target": c.target,
                    "summary": c.summary,
                    "path": path,
                    "command": command,
                    "before": c.before,
                    "after": c.after,
                    "diff": c.diff,
                    "mkdir": c.mkdir,
                    "position": c.position,
                })
            }
            Item::Action(i) => {
                let a = &self.actions[*i];
                let (path, command) = path_or_command(&a.kind, &a.target);
                json!({
                    "item": "action",
                    "kind": a.kind,
                    "target": a.target,
                    "summary": a.summary,
                    "path": path,
                    "command": command,
                    "position": a.position,
                })
            }
            Item::Interrupt { index, position } => {
                let r = &self.interrupts[*index];
                json!({
                    "item": "interrupt",
                    "kind": "interrupt",
                    "summary": interrupt_text(r),
                    "interrupt": r,
                    "position": position,
                })
            }
            Item::Unknown { summary, position } => json!({
                "item": "unknown",
                "summary": summary,
                "position": position,
            }),
            Item::Output { stream, text } => json!({
                "item": "output",
                "stream": stream,
                "text": text,
            }),
        }
    }
}

/// `(path, command)` of a report entry by its kind: file kinds name a path, command kinds
/// (`command`, `guarded_command`, a package's `step`) a command line.
fn path_or_command(kind: &str, target: &str) -> (Option<String>, Option<String>) {
    match kind {
        "write" | "remove" | "mkdir" | "remove_all" | "chmod" | "chown" | "mtime" | "symlink"
        | "fetch" => (Some(target.to_string()), None),
        "command" | "guarded_command" | "step" => (None, Some(target.to_string())),
        _ => (None, None),
    }
}

/// `  # file:line`, or nothing without a position.
fn at(p: Option<&Position>) -> String {
    p.map_or_else(String::new, |p| format!("  # {p}"))
}

/// `+ mkdir` lines, the `~` line and the diff of one change, each line prefixed by `indent`.
fn render_change(out: &mut String, c: &Change, indent: &str) {
    for d in &c.mkdir {
        let _ = writeln!(out, "{indent}+ mkdir {d}");
    }
    let _ = writeln!(out, "{indent}~ {}{}", c.summary, at(c.position.as_ref()));
    if let Some(d) = &c.diff {
        for line in d.lines() {
            let _ = writeln!(out, "{indent}{line}");
        }
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

/// `values` as a JSON array appended to `out`, each written and dropped in turn.
fn write_array(out: &mut String, values: impl Iterator<Item = Value>) {
    out.push('[');
    for (i, v) in values.enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{v}");
    }
    out.push(']');
}

/// `x`'s serde form as a [`Value`], every secret value replaced by `***`.
fn redacted<T: Serialize>(x: &T, r: &Redactor) -> Value {
    let mut v = serde_json::to_value(x).unwrap_or(Value::Null);
    redact_json(&mut v, r);
    v
}

fn redact_json(v: &mut Value, r: &Redactor) {
    match v {
        Value::String(s) => {
            if let std::borrow::Cow::Owned(o) = r.redact(s) {
                *s = o;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| redact_json(x, r)),
        Value::Object(m) => m.values_mut().for_each(|x| redact_json(x, r)),
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
            before: None,
            after: None,
            mkdir: Vec::new(),
            position: None,
        }
    }

    fn action() -> Action {
        Action {
            kind: "command".into(),
            target: "true".into(),
            summary: "true".into(),
            position: None,
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

    fn pos(line: usize) -> Option<Position> {
        Some(Position {
            file: "s.rhai".into(),
            line,
        })
    }

    #[test]
    fn items_render_in_order_with_positions_and_stdout_only() {
        let mut r = Report::new(ExecMode::Plan);
        r.changes.push(Change {
            mkdir: vec!["/etc/d".into()],
            diff: Some("--- /dev/null\n+++ b/etc/d/x\n@@ -0,0 +1 @@\n+x\n".into()),
            position: pos(2),
            ..change("create /etc/d/x (mode 0644)")
        });
        r.actions.push(Action {
            position: pos(3),
            ..action()
        });
        r.interrupts.push(InterruptRequest::Reboot);
        let j = Journal::default();
        j.output(OutputStream::Stdout, b"one\n");
        j.push(Item::Change(0));
        j.output(OutputStream::Stderr, b"warn\n");
        j.output(OutputStream::Stdout, b"two");
        j.output(OutputStream::Stdout, b" halves");
        j.push(Item::Action(0));
        j.push(Item::Interrupt {
            index: 0,
            position: pos(4),
        });
        r.items = j.take();
        assert!(j.take().is_empty());
        assert_eq!(
            r.render_text(&Redactor::new()),
            "one\n+ mkdir /etc/d\n~ create /etc/d/x (mode 0644)  # s.rhai:2\n--- /dev/null\n\
             +++ b/etc/d/x\n@@ -0,0 +1 @@\n+x\ntwo halves\n> would run: true  # s.rhai:3\n\
             ! interrupt: reboot  # s.rhai:4\nPlan: 1 to change, 0 unchanged, 1 action.\n"
        );
        let v = r.to_json(&Redactor::new());
        let kinds: Vec<&str> = v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["item"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "output",
                "change",
                "output",
                "output",
                "action",
                "interrupt"
            ]
        );
        assert_eq!(v["items"][1]["path"], "/x");
        assert_eq!(v["items"][1]["position"]["line"], 2);
        assert_eq!(v["items"][2]["stream"], "stderr");
        assert_eq!(v["items"][4]["command"], "true");
        assert_eq!(v["counts"]["interrupts"], 1);
    }

    #[test]
    fn recorded_output_is_capped() {
        let j = Journal::default();
        j.output(OutputStream::Stdout, &vec![b'x'; OUTPUT_RECORD_LIMIT + 5]);
        let items = j.take();
        assert!(
            matches!(&items[0], Item::Output { text, .. } if text.len() == OUTPUT_RECORD_LIMIT)
        );
        assert_eq!(
            items[1],
            Item::Output {
                stream: OutputStream::Stderr,
                text: "skyhook: 5 more bytes of output not recorded in the plan\n".into()
            }
        );
    }

    #[test]
    fn drift_lists_each_change_once_with_its_diff() {
        let mut r = Report::new(ExecMode::Check);
        r.changes.push(Change {
            diff: Some("-a\n+b\n".into()),
            position: pos(7),
            ..change("update /x")
        });
        assert_eq!(
            r.render_drift(&Redactor::new()),
            "drift: 1 pending change(s), the host is not in the state this script describes:\n  \
             ~ update /x  # s.rhai:7\n  -a\n  +b\n"
        );
        r.mode = ExecMode::Plan;
        assert_eq!(r.render_drift(&Redactor::new()), "");
    }
}
