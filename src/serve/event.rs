//! Events of one execution (remote-api.md "Events"): output lines, plan entries, heartbeats
//! and the exit, each rendered as one NDJSON line; and [`Lines`], which turns a redacted
//! byte stream into line events (64 KiB at most per event, `partial`/`lossy` flags).

use serde_json::{Map, Value, json};

use crate::redact::{Redactor, StreamRedactor};

/// Longest `line` of one event, in bytes: a longer line is split into several events,
/// `"partial": true` on all but the last.
pub const MAX_LINE: usize = 64 * 1024;

/// The wall-clock time as the events carry it: `2026-12-01T10:00:00.123Z` (UTC, ms), the
/// clock clamped to years 0001..=9999 ([`crate::clock`]) so a wrong host clock never panics.
pub fn now_ts() -> String {
    crate::clock::now_utc()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// An event body without its `seq` (the ring numbers it).
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// A line of output (`stream` is `"stdout"` or `"stderr"`), without its newline.
    Line {
        /// `"stdout"` or `"stderr"`.
        stream: &'static str,
        /// The text (lossy UTF-8 when `lossy`).
        line: String,
        /// More of the same line follows in the next event of this stream.
        partial: bool,
        /// The bytes were not valid UTF-8 and were converted lossily.
        lossy: bool,
    },
    /// One planned (or, in a check, drifted) change or action of a Rhai step.
    Plan(Value),
    /// How the execution ended: `{"code": N}`, `{"signal": N}` or `{"error": "..."}`;
    /// `extra` fields are merged into the event (the Rhai report).
    Exit {
        /// The `exit` object.
        exit: Value,
        /// Further top-level fields (`report`, `rendered`), possibly none.
        extra: Extra,
    },
}

/// The further top-level fields of an exit event: some as values, some already rendered
/// as JSON text. A package plan's (`plans`, `rendered`, `packages`) are text: held as a
/// [`Value`] tree, a plan's change takes several times its text (a map of a dozen keys,
/// each a separate allocation), and the event's line is text in the end anyway.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extra {
    /// Fields held as values (a Rhai step's `report` and `rendered`).
    pub fields: Map<String, Value>,
    /// Fields as JSON text, `(name, value)`, after `fields` in the event: each moved in
    /// and written once, into the event's line.
    raw: Vec<(String, String)>,
}

impl Extra {
    /// Append the field `name` whose value is the JSON text `json` (valid JSON: the
    /// caller's).
    pub fn push_raw(&mut self, name: &str, json: String) {
        self.raw.push((name.to_string(), json));
    }

    /// Append the field `name` with `value`.
    pub fn push(&mut self, name: &str, value: &Value) {
        self.push_raw(name, value.to_string());
    }

    /// The fields given as JSON text, `(name, value)`, in order.
    pub fn raw(&self) -> &[(String, String)] {
        &self.raw
    }

    /// `f` applied to the JSON text of each field given as text (which must stay valid
    /// JSON).
    pub fn map_raw(self, f: impl Fn(String) -> String) -> Extra {
        Extra {
            fields: self.fields,
            raw: self.raw.into_iter().map(|(k, v)| (k, f(v))).collect(),
        }
    }

    /// Append the fields to `out` as JSON members, each `,"name":value` (value fields
    /// first; none named `seq`, `exit` or `ts`, which an event has already).
    pub fn write_members(&self, out: &mut String) {
        use std::fmt::Write as _;
        for (k, v) in &self.fields {
            if !matches!(k.as_str(), "seq" | "exit" | "ts") {
                let _ = write!(out, ",{}:{v}", Value::from(k.as_str()));
            }
        }
        for (k, v) in &self.raw {
            if !matches!(k.as_str(), "seq" | "exit" | "ts") {
                let _ = write!(out, ",{}:", Value::from(k.as_str()));
                out.push_str(v);
            }
        }
    }
}

impl From<Map<String, Value>> for Extra {
    fn from(fields: Map<String, Value>) -> Extra {
        Extra {
            fields,
            raw: Vec::new(),
        }
    }
}

impl Body {
    /// The event as one JSON line (no newline) with `seq` first.
    pub fn render(&self, seq: u64) -> String {
        let mut m = Map::new();
        m.insert("seq".into(), seq.into());
        match self {
            Body::Line {
                stream,
                line,
                partial,
                lossy,
            } => {
                m.insert("stream".into(), (*stream).into());
                m.insert("line".into(), line.clone().into());
                if *partial {
                    m.insert("partial".into(), true.into());
                }
                if *lossy {
                    m.insert("lossy".into(), true.into());
                }
                m.insert("ts".into(), now_ts().into());
            }
            Body::Plan(p) => {
                m.insert("plan".into(), p.clone());
            }
            Body::Exit { exit, extra } => {
                let text = extra.raw.iter().map(|(k, v)| k.len() + v.len()).sum();
                return render_exit(seq, exit, extra, text);
            }
        }
        Value::Object(m).to_string()
    }
}

impl Body {
    /// [`Body::render`] of an event given up: an exit's fields given as text are moved
    /// into the line one by one, each freed once written (a package plan's exit is most of
    /// what the plan keeps: it is not held twice while its line is made).
    pub fn into_line(self, seq: u64) -> String {
        match self {
            Body::Exit { exit, mut extra } => {
                let raw = std::mem::take(&mut extra.raw);
                let mut s = render_exit(
                    seq,
                    &exit,
                    &extra,
                    raw.iter().map(|(k, v)| k.len() + v.len()).sum(),
                );
                s.pop();
                for (k, v) in raw {
                    if !matches!(k.as_str(), "seq" | "exit" | "ts") {
                        let _ = std::fmt::Write::write_fmt(
                            &mut s,
                            format_args!(",{}:", Value::from(k.as_str())),
                        );
                        s.push_str(&v);
                    }
                }
                s.push('}');
                s
            }
            other => other.render(seq),
        }
    }
}

/// An exit event's line, `{"seq":N,"exit":...,"ts":"...",<fields>}`, written out: nothing
/// of it is copied into a [`Value`] first (a package plan's exit is most of what the plan
/// keeps). A field named `seq`, `exit` or `ts` is not written.
/// `text`: bytes of the fields given as text, which the line is made with room for (`extra`
/// may no longer hold them: [`Body::into_line`]).
fn render_exit(seq: u64, exit: &Value, extra: &Extra, text: usize) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(96 + text + 4 * extra.raw.len().max(4));
    let _ = write!(
        s,
        "{{\"seq\":{seq},\"exit\":{exit},\"ts\":{}",
        Value::from(now_ts())
    );
    extra.write_members(&mut s);
    s.push('}');
    s
}

/// A heartbeat line (`{"alive": true, "ts": ...}`), never numbered nor replayed.
pub fn alive_line() -> String {
    json!({"alive": true, "ts": now_ts()}).to_string()
}

/// A lost event (`{"lost": N, "from_seq": A, "to_seq": B, "ts": ...}`): the ring dropped
/// events A..=B (N of them) before this reader got them; the stream goes on with B + 1.
/// Not numbered, never replayed.
pub fn lost_line(from_seq: u64, to_seq: u64) -> String {
    json!({"lost": to_seq - from_seq + 1, "from_seq": from_seq, "to_seq": to_seq, "ts": now_ts()})
        .to_string()
}

/// One output stream of an execution: redaction on the byte stream (a secret split across
/// two reads is still hidden), then line splitting.
#[derive(Debug)]
pub struct Lines {
    stream: &'static str,
    redact: StreamRedactor,
    buf: Vec<u8>,
    scratch: Vec<u8>,
}

impl Lines {
    /// A splitter for `stream` (`"stdout"` / `"stderr"`).
    pub fn new(stream: &'static str) -> Self {
        Lines {
            stream,
            redact: StreamRedactor::new(),
            buf: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Feed one chunk; every complete line (or [`MAX_LINE`] piece) goes to `emit`.
    pub fn push(&mut self, redactor: &Redactor, chunk: &[u8], emit: &mut dyn FnMut(Body)) {
        self.scratch.clear();
        self.redact.push(redactor, chunk, &mut self.scratch);
        self.buf.extend_from_slice(&self.scratch);
        self.drain(emit, false);
    }

    /// The stream ended: release what the redactor held back and the last unterminated line.
    pub fn finish(&mut self, emit: &mut dyn FnMut(Body)) {
        self.scratch.clear();
        self.redact.finish(&mut self.scratch);
        self.buf.extend_from_slice(&self.scratch);
        self.drain(emit, true);
    }

    fn drain(&mut self, emit: &mut dyn FnMut(Body), end: bool) {
        let mut start = 0;
        loop {
            let rest = &self.buf[start..];
            if let Some(nl) = memchr::memchr(b'\n', &rest[..rest.len().min(MAX_LINE + 1)]) {
                emit(self.line(&rest[..nl], false));
                start += nl + 1;
            } else if rest.len() > MAX_LINE {
                let mut cut = MAX_LINE;
                // Do not cut a UTF-8 sequence in two (it would be lossy on both sides).
                if let Err(e) = std::str::from_utf8(&rest[..cut])
                    && e.error_len().is_none()
                    && e.valid_up_to() > 0
                {
                    cut = e.valid_up_to();
                }
                emit(self.line(&rest[..cut], true));
                start += cut;
            } else {
                break;
            }
        }
        self.buf.drain(..start);
        if end && !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            emit(self.line(&rest, false));
        }
    }

    fn line(&self, bytes: &[u8], partial: bool) -> Body {
        let (line, lossy) = match String::from_utf8_lossy(bytes) {
            std::borrow::Cow::Borrowed(s) => (s.to_string(), false),
            std::borrow::Cow::Owned(s) => (s, true),
        };
        Body::Line {
            stream: self.stream,
            line,
            partial,
            lossy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_ts_with_a_clock_out_of_range() {
        use std::time::{Duration, UNIX_EPOCH};
        let year = 365 * 86_400;
        let cases = [
            (
                UNIX_EPOCH - Duration::new(year, 250_000_000),
                "1968-12-31T23:59:59.750Z",
            ),
            (
                UNIX_EPOCH + Duration::from_secs(298_030 * year),
                "9999-12-31T23:59:59.999Z",
            ),
            (
                UNIX_EPOCH - Duration::from_secs(1_980 * year),
                "0001-01-01T00:00:00.000Z",
            ),
        ];
        for (t, want) in cases {
            crate::clock::set_for_test(Some(t));
            let got = std::panic::catch_unwind(now_ts);
            crate::clock::set_for_test(None);
            assert_eq!(got.ok().as_deref(), Some(want));
        }
        let now = now_ts();
        assert!(now.starts_with("20") && now.ends_with('Z'), "{now}");
    }

    fn split(values: &[&str], chunks: &[&[u8]]) -> Vec<Body> {
        let r = Redactor::new();
        for v in values {
            r.add(v);
        }
        let mut l = Lines::new("stdout");
        let mut out = Vec::new();
        for c in chunks {
            l.push(&r, c, &mut |b| out.push(b));
        }
        l.finish(&mut |b| out.push(b));
        out
    }

    fn text(b: &Body) -> (&str, bool, bool) {
        match b {
            Body::Line {
                line,
                partial,
                lossy,
                ..
            } => (line.as_str(), *partial, *lossy),
            _ => panic!("not a line"),
        }
    }

    #[test]
    fn lines_secret_split_across_reads_long_and_lossy() {
        let ev = split(&["hunter22"], &[b"a\npw=hun", b"ter22 ok\nlast"]);
        let t: Vec<_> = ev.iter().map(text).collect();
        assert_eq!(
            t,
            [
                ("a", false, false),
                ("pw=*** ok", false, false),
                ("last", false, false)
            ]
        );
        let long = vec![b'x'; MAX_LINE * 2 + 5];
        let ev = split(&[], &[&long, b"\n"]);
        let t: Vec<_> = ev.iter().map(text).collect();
        assert_eq!(t.len(), 3);
        assert!(t[0].1 && t[1].1 && !t[2].1);
        assert_eq!(t[0].0.len() + t[1].0.len() + t[2].0.len(), long.len());
        let ev = split(&[], &[b"\xff\xfeok\n"]);
        assert_eq!(text(&ev[0]), ("\u{fffd}\u{fffd}ok", false, true));
        // a multi-byte character on the 64 KiB boundary stays whole
        let mut s = vec![b'a'; MAX_LINE - 1];
        s.extend_from_slice("é".as_bytes());
        s.push(b'\n');
        let ev = split(&[], &[&s]);
        assert!(ev.iter().all(|b| !text(b).2), "no lossy piece");
    }

    /// An exit event is written out, not copied into a Value tree: its value fields, then
    /// its rendered ones, after `seq`, `exit` and `ts`; the line is the JSON of them all.
    #[test]
    fn an_exit_event_is_written_from_its_fields_and_its_text() {
        let mut extra = Extra::from(Map::from_iter([(
            "report".to_string(),
            json!({"a": [1, "x\"y"]}),
        )]));
        extra.push_raw("plans", r#"[{"changes":[]}]"#.to_string());
        extra.push("rendered", &json!("--- mode apply\n"));
        let body = Body::Exit {
            exit: json!({"code": 1, "error": "e"}),
            extra,
        };
        let line = body.render(9);
        assert!(
            line.starts_with(r#"{"seq":9,"exit":{"code":1,"error":"e"},"ts":""#),
            "{line}"
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["seq", "exit", "ts", "report", "plans", "rendered"]);
        assert_eq!(v["report"], json!({"a": [1, "x\"y"]}));
        assert_eq!(v["plans"], json!([{"changes": []}]));
        assert_eq!(v["rendered"], "--- mode apply\n");
        // Given up (the service's exit), the same line.
        crate::clock::set_for_test(Some(std::time::UNIX_EPOCH));
        let given_up = body.clone().into_line(9);
        let rendered = body.render(9);
        crate::clock::set_for_test(None);
        assert_eq!(given_up, rendered);
    }

    #[test]
    fn render_has_seq_first() {
        let l = Body::Line {
            stream: "stderr",
            line: "x".into(),
            partial: false,
            lossy: false,
        }
        .render(7);
        assert!(
            l.starts_with(r#"{"seq":7,"stream":"stderr","line":"x","ts":""#),
            "{l}"
        );
        let e = Body::Exit {
            exit: json!({"code": 0}),
            extra: Extra::default(),
        }
        .render(8);
        assert!(e.starts_with(r#"{"seq":8,"exit":{"code":0}"#), "{e}");
    }
}
