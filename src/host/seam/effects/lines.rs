//! One parsed view of a text file's lines, kept by the session for the line and block
//! functions of [`crate::host::files::fs`] (`ensure_line`, `remove_line`, `ensure_block`,
//! `remove_block`).
//!
//! A [`Lines`] holds the text once, in an append-only arena, and the lines as byte ranges
//! into it, so parsing a file allocates nothing per line and a line is matched as a `&str`.
//! A multiset index of the line texts (a [`hashbrown::HashTable`] of ranges, hashed and
//! compared through the arena) answers "is there a line equal to `x`" in O(1), so N
//! `ensure_line` calls on one file cost O(N + file size) instead of O(N × file size).
//! Edits append the new text to the arena; the arena is compacted when more than half of it
//! is dead.
//!
//! The lines are those of [`str::lines`] (split at `\n`, a trailing `\r` dropped, no empty
//! last line after a final newline), and [`Lines::render`] writes them back joined by
//! `\n` with a final newline: the semantics of the text functions.
//!
//! [`View`] adds what the session needs to trust a cached view: whether the file existed,
//! and in apply mode the [`Stamp`] of the file the view was read from (or written as).

use std::fs::Metadata;
use std::hash::{BuildHasher, RandomState};
use std::ops::Range;

use bytes::Bytes;
use hashbrown::HashTable;

use crate::host::effects::appendbuf::AppendBuf;

/// A byte range of one line in the arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: usize,
    len: usize,
}

impl Span {
    fn range(self) -> Range<usize> {
        self.start..self.start + self.len
    }
}

/// The lines of a text, with an equality index (module docs).
#[derive(Debug)]
pub(crate) struct Lines {
    buf: String,
    lines: Vec<Span>,
    index: HashTable<Span>,
    hasher: RandomState,
    /// Bytes of replaced or removed lines in `buf` (separators are not counted).
    dead: usize,
    /// An edit added a line containing `\n` or ending in `\r`: [`Lines::render`] does not
    /// parse back to these lines, so the caller must fall back to comparing bytes.
    irregular: bool,
    /// What [`Lines::render`] returned last, kept up to date by [`Lines::push`] (the
    /// `ensure_line` append) and dropped by every other edit, so that N appends cost one
    /// text shared with every write made of it instead of a walk over every line (or a
    /// copy) per call ([`AppendBuf`]).
    rendered: Option<AppendBuf>,
}

impl Default for Lines {
    fn default() -> Self {
        Lines::parse(String::new())
    }
}

impl Lines {
    /// Parse `text` into lines (as [`str::lines`]), without allocating per line.
    pub(crate) fn parse(text: String) -> Lines {
        let base = text.as_ptr() as usize;
        let lines: Vec<Span> = text
            .lines()
            .map(|l| Span {
                start: l.as_ptr() as usize - base,
                len: l.len(),
            })
            .collect();
        let hasher = RandomState::new();
        let mut index = HashTable::with_capacity(lines.len());
        for s in &lines {
            let h = hasher.hash_one(&text[s.range()]);
            index.insert_unique(h, *s, |x: &Span| hasher.hash_one(&text[x.range()]));
        }
        Lines {
            dead: 0,
            buf: text,
            lines,
            index,
            hasher,
            irregular: false,
            rendered: None,
        }
    }

    /// Number of lines.
    pub(crate) fn len(&self) -> usize {
        self.lines.len()
    }

    /// Line `i`.
    pub(crate) fn get(&self, i: usize) -> &str {
        &self.buf[self.lines[i].range()]
    }

    /// The lines, in order.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator + '_ {
        self.lines.iter().map(|s| &self.buf[s.range()])
    }

    /// Whether some line equals `line` (O(1)).
    pub(crate) fn contains(&self, line: &str) -> bool {
        let h = self.hasher.hash_one(line);
        self.index
            .find(h, |s| &self.buf[s.range()] == line)
            .is_some()
    }

    /// The first line equal to `line` at or after `from`: O(1) when there is none.
    pub(crate) fn position_from(&self, from: usize, line: &str) -> Option<usize> {
        if !self.contains(line) {
            return None;
        }
        (from..self.len()).find(|&i| self.get(i) == line)
    }

    /// Whether `lines[range]` equals `other`.
    pub(crate) fn range_eq(&self, range: Range<usize>, other: &[&str]) -> bool {
        range.len() == other.len() && range.zip(other).all(|(i, o)| self.get(i) == *o)
    }

    fn alloc(&mut self, text: &str) -> Span {
        if text.contains('\n') || text.ends_with('\r') {
            self.irregular = true;
        }
        let s = Span {
            start: self.buf.len(),
            len: text.len(),
        };
        self.buf.push_str(text);
        let h = self.hasher.hash_one(text);
        let (buf, hasher) = (&self.buf, &self.hasher);
        self.index
            .insert_unique(h, s, |x: &Span| hasher.hash_one(&buf[x.range()]));
        s
    }

    fn unindex(&mut self, s: Span) {
        let text = &self.buf[s.range()];
        let h = self.hasher.hash_one(text);
        if let Ok(e) = self.index.find_entry(h, |x| &self.buf[x.range()] == text) {
            e.remove();
        }
        self.dead += s.len;
    }

    /// Append a line.
    pub(crate) fn push(&mut self, line: &str) {
        let s = self.alloc(line);
        self.lines.push(s);
        if let Some(r) = &mut self.rendered {
            r.extend_from_slice(line.as_bytes());
            r.extend_from_slice(b"\n");
        }
    }

    /// Replace line `i` by `line`.
    pub(crate) fn replace(&mut self, i: usize, line: &str) {
        self.rendered = None;
        self.unindex(self.lines[i]);
        self.lines[i] = self.alloc(line);
        self.compact_if_sparse();
    }

    /// Replace the lines in `range` by `new` (an empty `new` removes them).
    pub(crate) fn splice(&mut self, range: Range<usize>, new: &[&str]) {
        self.rendered = None;
        for i in range.clone() {
            self.unindex(self.lines[i]);
        }
        let spans: Vec<Span> = new.iter().map(|l| self.alloc(l)).collect();
        self.lines.splice(range, spans);
        self.compact_if_sparse();
    }

    /// Remove every line for which `drop` is true; returns whether any was removed.
    pub(crate) fn remove_where(&mut self, mut drop: impl FnMut(&str) -> bool) -> bool {
        let mut gone = Vec::new();
        let buf = &self.buf;
        self.lines.retain(|s| {
            let d = drop(&buf[s.range()]);
            if d {
                gone.push(*s);
            }
            !d
        });
        for s in &gone {
            self.unindex(*s);
        }
        if !gone.is_empty() {
            self.rendered = None;
        }
        self.compact_if_sparse();
        !gone.is_empty()
    }

    /// Rebuild the arena when more than half of it is dead (amortised O(1) per edit).
    fn compact_if_sparse(&mut self) {
        if self.dead > 4096 && self.dead * 2 > self.buf.len() {
            let irregular = self.irregular;
            let mut text = String::with_capacity(self.buf.len() - self.dead + self.len());
            for l in self.iter() {
                text.push_str(l);
                text.push('\n');
            }
            // Irregular lines would be split by a reparse: keep the arena then.
            if !irregular {
                *self = Lines::parse(text);
            }
        }
    }

    /// Whether an edit added a line that [`Lines::render`] would not give back as one line.
    pub(crate) fn irregular(&self) -> bool {
        self.irregular
    }

    /// `(bytes, lines)` of what [`Lines::render`] returned last, while it is still the text
    /// (no edit but appends since, and every line without `\n` or final `\r`): the text
    /// then is that rendering with the lines appended since. `None` otherwise.
    pub(crate) fn rendered_mark(&self) -> Option<(usize, usize)> {
        let r = self.rendered.as_ref().filter(|_| !self.irregular)?;
        Some((r.len(), self.lines.len()))
    }

    /// The text: the lines joined by `\n`, with a final newline unless there are none. Kept
    /// for the next call and extended by the appends after it; the `Bytes` shares the kept
    /// rendering ([`AppendBuf::freeze`]), so after the first call no call copies the text.
    pub(crate) fn render(&mut self) -> Bytes {
        if let Some(r) = &self.rendered {
            return r.freeze();
        }
        let mut out = AppendBuf::with_capacity(self.buf.len() - self.dead + self.len());
        for l in self.iter() {
            out.extend_from_slice(l.as_bytes());
            out.extend_from_slice(b"\n");
        }
        let frozen = out.freeze();
        self.rendered = Some(out);
        frozen
    }
}

/// What identifies one version of a file on disk: (device, inode, size, mtime and ctime in
/// nanoseconds). An atomic rename by another writer changes the inode, an in-place write
/// the size or the times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    /// The stamp of a file's metadata.
    pub(crate) fn of(m: &Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        }
    }
}

/// A cached view of one file in a session.
#[derive(Debug)]
pub(crate) struct View {
    /// The file existed (a missing file has no lines).
    pub(crate) exists: bool,
    /// Its lines.
    pub(crate) lines: Lines,
    /// Apply mode: the stamp of the file the view shows (`None` for a missing file, and in
    /// plan and check mode, where the view is valid until the session's next effect).
    pub(crate) stamp: Option<Stamp>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(l: &Lines) -> Vec<&str> {
        l.iter().collect()
    }

    #[test]
    fn parses_as_str_lines_and_writes_back_with_final_newline() {
        for text in ["", "a", "a\n", "a\r\nb", "a\n\nb\n", "\n", "x\ny\n\n"] {
            let mut l = Lines::parse(text.to_string());
            assert_eq!(lines(&l), text.lines().collect::<Vec<_>>(), "{text:?}");
            let mut want = text.lines().collect::<Vec<_>>().join("\n");
            if !l.lines.is_empty() {
                want.push('\n');
            }
            assert_eq!(l.render(), want.into_bytes());
        }
    }

    #[test]
    fn index_follows_edits() {
        let mut l = Lines::parse("a\nb\na\n".into());
        assert!(l.contains("a") && l.contains("b") && !l.contains("c"));
        l.replace(0, "c");
        assert!(l.contains("a") && l.contains("c"));
        l.replace(2, "d");
        assert!(!l.contains("a"));
        assert_eq!(lines(&l), ["c", "b", "d"]);
        l.push("");
        l.push("");
        assert!(l.contains(""));
        assert!(l.remove_where(str::is_empty));
        assert!(!l.contains(""));
        l.splice(1..2, &["x", "y"]);
        assert_eq!(lines(&l), ["c", "x", "y", "d"]);
        assert_eq!(l.position_from(0, "y"), Some(2));
        assert_eq!(l.position_from(3, "y"), None);
        assert!(l.range_eq(1..3, &["x", "y"]));
        l.splice(1..3, &[]);
        assert_eq!(lines(&l), ["c", "d"]);
        assert!(!l.contains("x") && !l.irregular());
        l.push("p\nq");
        assert!(l.irregular());
    }

    #[test]
    fn render_follows_every_kind_of_edit() {
        let mut l = Lines::parse("a\nb\n".into());
        assert_eq!(&l.render()[..], b"a\nb\n");
        l.push("c");
        assert_eq!(&l.render()[..], b"a\nb\nc\n");
        l.replace(0, "A");
        assert_eq!(&l.render()[..], b"A\nb\nc\n");
        l.push("d");
        assert_eq!(&l.render()[..], b"A\nb\nc\nd\n");
        l.splice(1..2, &["x", "y"]);
        assert_eq!(&l.render()[..], b"A\nx\ny\nc\nd\n");
        assert!(l.remove_where(|s| s == "y"));
        assert_eq!(&l.render()[..], b"A\nx\nc\nd\n");
        assert!(!l.remove_where(|s| s == "nope"));
        l.push("e");
        assert_eq!(&l.render()[..], b"A\nx\nc\nd\ne\n");
    }

    #[test]
    fn renders_after_appends_share_the_kept_buffer() {
        let mut l = Lines::parse("a\n".into());
        let first = l.render();
        l.push("b");
        let second = l.render();
        l.push("c");
        let third = l.render();
        // The first push outgrew the exact-size first rendering; the next ones did not.
        assert_eq!(second.as_ptr(), third.as_ptr());
        assert_eq!(
            [&first[..], &second[..], &third[..]],
            [&b"a\n"[..], b"a\nb\n", b"a\nb\nc\n"]
        );
        l.replace(0, "A");
        let fourth = l.render();
        assert_ne!(fourth.as_ptr(), third.as_ptr(), "a replace renders anew");
        assert_eq!(&fourth[..], b"A\nb\nc\n");
        assert_eq!(&third[..], b"a\nb\nc\n");
    }

    #[test]
    fn rendered_mark_survives_appends_only() {
        let mut l = Lines::parse("a\r\nb".into());
        assert_eq!(l.rendered_mark(), None, "not rendered yet");
        assert_eq!(&l.render()[..], b"a\nb\n");
        assert_eq!(l.rendered_mark(), Some((4, 2)));
        l.push("c");
        assert_eq!(l.rendered_mark(), Some((6, 3)));
        l.replace(0, "A");
        assert_eq!(l.rendered_mark(), None, "a replace drops it");
        l.render();
        l.push("p\nq");
        assert_eq!(l.rendered_mark(), None, "an irregular line drops it");
    }

    #[test]
    fn compaction_keeps_lines_and_index() {
        let mut l = Lines::default();
        l.push("keep");
        for i in 0..5000 {
            l.push(&format!("line {i}"));
            assert!(l.remove_where(|s| s.starts_with("line")));
        }
        assert!(l.buf.len() < 20_000, "arena not compacted: {}", l.buf.len());
        assert_eq!(lines(&l), ["keep"]);
        assert!(l.contains("keep") && !l.contains("line 4999"));
    }
}
