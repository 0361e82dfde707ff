//! Unified diffs of file contents at a cost proportional to the change, not to the file:
//! [`unified`] gives exactly the text `similar`'s unified diff of the whole
//! files gives (3 lines of context, `@@ -a,b +c,d @@` hunk headers, `\ No newline at end
//! of file` markers), but runs `similar` on a window around the changed lines only.
//!
//! How: the common prefix and suffix of the two texts are found with `memcmp` over bytes and
//! cut back to whole lines; the window is the changed middle plus [`MARGIN`] lines of each
//! side; `similar` diffs the window, and the hunk headers are shifted by the number of lines
//! cut off above. `similar` itself trims the common ends before it runs Myers, so the middle
//! is diffed the same way; its compaction step may slide a hunk through runs of equal lines
//! next to it, though, which a window could cut short. So the window's result is kept only
//! when no hunk came within [`MARGIN`] − 3 lines of a cut edge (the edges only ever add
//! equal lines there); otherwise the whole files are diffed as before. Either way the text is
//! the whole-file diff's (`tests::windowed_equals_whole_file`).
//!
//! Costs per call: a few `memcmp`/`memchr`/`bytecount` passes over the file (GB/s, no
//! allocation per line) plus `similar` on the window, instead of tokenizing, hashing and diffing every line
//! of both texts.

use similar::{DiffOp, TextDiff};

/// Lines of unchanged context kept on each side of the changed middle (at least the diff's
/// 3 context lines plus room to see a slide).
const MARGIN: usize = 12;

/// Context lines of the rendered diff (as before: `context_radius(3)`).
const CONTEXT: usize = 3;

/// The unified diff of `old` → `new` with headers `a` and `b` (as `similar` renders it for
/// the whole texts, see the module docs). Empty when the texts are equal.
pub(crate) fn unified(old: &str, new: &str, a: &str, b: &str) -> String {
    if old == new {
        return String::new();
    }
    match windowed(old, new, a, b) {
        Some(d) => d,
        None => whole(old, new, a, b),
    }
}

/// The diff of the whole texts with `similar` (the reference).
fn whole(old: &str, new: &str, a: &str, b: &str) -> String {
    TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(CONTEXT)
        .header(a, b)
        .to_string()
}

/// Length of the common prefix of `x` and `y` in bytes (`memcmp` of 4 KiB, then 64-byte
/// chunks, then bytes).
fn common_prefix(x: &[u8], y: &[u8]) -> usize {
    const CHUNK: usize = 4096;
    let n = x.len().min(y.len());
    let mut i = 0;
    for chunk in [CHUNK, 64] {
        while i + chunk <= n && x[i..i + chunk] == y[i..i + chunk] {
            i += chunk;
        }
    }
    while i < n && x[i] == y[i] {
        i += 1;
    }
    i
}

/// Length of the common suffix of `x` and `y` in bytes, at most `limit`.
fn common_suffix(x: &[u8], y: &[u8], limit: usize) -> usize {
    const CHUNK: usize = 4096;
    let n = x.len().min(y.len()).min(limit);
    let (lx, ly) = (x.len(), y.len());
    let mut i = 0;
    for chunk in [CHUNK, 64] {
        while i + chunk <= n && x[lx - i - chunk..lx - i] == y[ly - i - chunk..ly - i] {
            i += chunk;
        }
    }
    while i < n && x[lx - i - 1] == y[ly - i - 1] {
        i += 1;
    }
    i
}

/// The start of the line `k` lines above the line starting at `at` (`at` must be a line
/// start), clamped to 0, and how many lines that is.
fn lines_up(t: &[u8], at: usize, k: usize) -> (usize, usize) {
    let mut pos = at;
    let mut n = 0;
    while n < k && pos > 0 {
        // `t[pos - 1]` is the `\n` ending the line above: find that line's start.
        pos = memchr::memrchr(b'\n', &t[..pos - 1]).map_or(0, |i| i + 1);
        n += 1;
    }
    (pos, n)
}

/// The end of the `k`-th line at or below `at` (`at` a line start), clamped to the end, and
/// how many lines that is.
fn lines_down(t: &[u8], at: usize, k: usize) -> (usize, usize) {
    let mut pos = at;
    let mut n = 0;
    while n < k && pos < t.len() {
        pos = memchr::memchr(b'\n', &t[pos..]).map_or(t.len(), |i| pos + i + 1);
        n += 1;
    }
    (pos, n)
}

/// The diff computed on a window (module docs), or `None` when the whole texts must be
/// diffed instead.
fn windowed(old: &str, new: &str, a: &str, b: &str) -> Option<String> {
    let (o, n) = (old.as_bytes(), new.as_bytes());
    // Common whole lines at the top: those whose `\n` lies in the common byte prefix.
    let p = common_prefix(o, n);
    let top = memchr::memrchr(b'\n', &o[..p]).map_or(0, |i| i + 1);
    // Common whole lines at the bottom, not overlapping the top: the suffix starts after a
    // `\n` that lies inside the common byte suffix (so it is a line start in both).
    let limit = o.len().min(n.len()) - top;
    let s = common_suffix(o, n, limit);
    let so = o.len() - s;
    // Lines below, counted in bytes from the end (the same in both texts).
    let bottom = memchr::memchr(b'\n', &o[so..]).map_or(0, |i| o.len() - (so + i + 1));
    let (mid_o_end, mid_n_end) = (o.len() - bottom, n.len() - bottom);
    // The window: MARGIN whole lines above and below the middle.
    let (wo_start, above) = lines_up(o, top, MARGIN);
    let wn_start = wo_start; // the prefix is common: same offsets in both
    let (wo_end, below) = lines_down(o, mid_o_end, MARGIN);
    let wn_end = mid_n_end + (wo_end - mid_o_end);
    if wo_start == 0 && wo_end == o.len() {
        // The window is the whole text: nothing to gain.
        return None;
    }
    let (wo, wn) = (&old[wo_start..wo_end], &new[wn_start..wn_end]);
    let cut = Cut {
        above,
        below,
        top: wo_start > 0,
        bottom: wo_end < o.len(),
    };
    // Lines cut off above (the same number in both texts).
    let shift = || bytecount::count(&o[..wo_start], b'\n');
    diff_window(wo, wn, a, b, cut, shift)
}

/// Where a window was cut from the whole texts: whole lines kept above and below the
/// changed middle, and whether anything was cut off at the top and at the bottom.
#[derive(Debug, Clone, Copy)]
struct Cut {
    above: usize,
    below: usize,
    top: bool,
    bottom: bool,
}

/// `similar`'s diff of the window `wo` → `wn` with its hunk headers moved down by
/// `shift()` lines (the lines cut off above), or `None` when a hunk came near a cut edge
/// (module docs).
fn diff_window(
    wo: &str,
    wn: &str,
    a: &str,
    b: &str,
    cut: Cut,
    shift: impl FnOnce() -> usize,
) -> Option<String> {
    let diff = TextDiff::from_lines(wo, wn);
    let ops = diff.ops();
    // A hunk that came near a cut edge may have slid differently than in the whole texts.
    let room = MARGIN - CONTEXT;
    let lead = match ops.first() {
        Some(DiffOp::Equal { len, .. }) => *len,
        _ => 0,
    };
    let trail = match ops.last() {
        Some(DiffOp::Equal { len, .. }) => *len,
        _ => 0,
    };
    if (cut.top && lead < cut.above.min(room)) || (cut.bottom && trail < cut.below.min(room)) {
        return None;
    }
    let text = diff
        .unified_diff()
        .context_radius(CONTEXT)
        .header(a, b)
        .to_string();
    if !cut.top {
        return Some(text);
    }
    let shift = shift();
    let mut out = String::with_capacity(text.len() + 16);
    for line in text.split_inclusive('\n') {
        match line.strip_prefix("@@ -") {
            Some(rest) => shift_header(&mut out, rest, shift)?,
            None => out.push_str(line),
        }
    }
    Some(out)
}

/// What the session's line view knows about a write it submits (`fs::ensure_line`
/// appending to a file it already wrote in this plan, [`crate::host::files::fs`]): the new content
/// is the old content — exactly the view's previous rendering, `old_len` bytes in
/// `old_lines` lines, each ended by `\n` — with whole lines appended. It lets the plan's diff
/// of that write skip the scans for the common prefix, the line count above the window and
/// the UTF-8 check of the unchanged part ([`unified_appended`]), so a planned append costs
/// O(change), not O(file size). Only meaningful for the one effect it is handed with
/// ([`crate::host::Host::submit`] takes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Appended {
    /// The file (lexically normalised host path).
    pub(crate) path: std::path::PathBuf,
    /// Bytes of the old content.
    pub(crate) old_len: usize,
    /// Lines of the old content (its `\n` count).
    pub(crate) old_lines: usize,
}

/// The unified diff of `old` → `new` (as [`unified`]) when `new` is `old` with whole lines
/// appended and `old` has `old_lines` lines, each ended by `\n` ([`Appended`]): trusted,
/// not checked, except for lengths. Only the last [`MARGIN`] lines of `old` and the appended
/// text are looked at (and checked to be UTF-8). `None` when that cannot be used: `new` not
/// longer than `old`, `old` empty or not ending in `\n`, a window that is not UTF-8 or that
/// a hunk came near to the edge of; the caller then diffs as [`unified`].
pub(crate) fn unified_appended(
    old: &[u8],
    new: &[u8],
    old_lines: usize,
    a: &str,
    b: &str,
) -> Option<String> {
    if old.is_empty() || new.len() <= old.len() || old.last() != Some(&b'\n') {
        return None;
    }
    let (start, above) = lines_up(old, old.len(), MARGIN);
    if start == 0 || above > old_lines {
        // Nothing cut off: `unified` is as cheap.
        return None;
    }
    let wo = std::str::from_utf8(&old[start..]).ok()?;
    let wn = std::str::from_utf8(&new[start..]).ok()?;
    let cut = Cut {
        above,
        below: 0,
        top: true,
        bottom: false,
    };
    diff_window(wo, wn, a, b, cut, || old_lines - above)
}

/// Append `@@ -a[,b] +c[,d] @@\n` with `a` and `c` increased by `shift`; `rest` is the
/// header after `@@ -`. `similar` prints a range as `start + 1` (or `start` when empty)
/// either way, so adding the shift to the printed number is exact.
fn shift_header(out: &mut String, rest: &str, shift: usize) -> Option<()> {
    let (ranges, tail) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let fix = |r: &str| -> Option<String> {
        let (start, len) = match r.split_once(',') {
            Some((s, l)) => (s, Some(l)),
            None => (r, None),
        };
        let start: usize = start.parse().ok()?;
        Some(match len {
            Some(l) => format!("{},{l}", start + shift),
            None => format!("{}", start + shift),
        })
    };
    out.push_str("@@ -");
    out.push_str(&fix(old)?);
    out.push_str(" +");
    out.push_str(&fix(new)?);
    out.push_str(" @@");
    out.push_str(tail);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(old: &str, new: &str) {
        let want = if old == new {
            String::new()
        } else {
            whole(old, new, "a/f", "b/f")
        };
        assert_eq!(unified(old, new, "a/f", "b/f"), want, "{old:?} -> {new:?}");
    }

    fn numbered(n: usize) -> String {
        (0..n).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn append_replace_remove_in_a_long_file() {
        let old = numbered(200);
        check(&old, &format!("{old}line 200\n"));
        check(&old, &old.replace("line 100\n", "LINE 100\n"));
        check(&old, &old.replace("line 7\n", ""));
        check(&old, &old.replace("line 150\n", "x\ny\nz\n"));
        check(
            &old,
            &old.replace("line 3\n", "a\n").replace("line 180\n", "b\n"),
        );
        check(&old, old.trim_end_matches('\n'));
        check(&format!("{old}tail"), &format!("{old}tail2"));
        check(&old, "");
        check("", &old);
        // Windowed (not the whole-file fallback) for a change in the middle.
        let new = old.replace("line 100\n", "LINE 100\n");
        assert!(windowed(&old, &new, "a/f", "b/f").is_some());
        assert!(
            unified(&old, &new, "a/f", "b/f").contains("@@ -98,7 +98,7 @@\n"),
            "{}",
            unified(&old, &new, "a/f", "b/f")
        );
    }

    #[test]
    fn crlf_lines_and_a_missing_final_newline() {
        let old: String = (0..60).map(|i| format!("l{i}\r\n")).collect();
        check(&old, &old.replace("l30\r\n", "l30\n"));
        check(&old, &old.replace("l30\r\n", "x\r\ny\r\n"));
        check(&old, &format!("{old}tail"));
        check(&format!("{old}tail"), &format!("{old}tail\r\n"));
        assert!(windowed(&old, &old.replace("l30\r\n", "l30\n"), "a/f", "b/f").is_some());
    }

    #[test]
    fn repeated_lines_around_the_change_fall_back_or_agree() {
        let body: String = "x\n".repeat(100);
        check(&body, &format!("{body}x\n"));
        check(&format!("a\n{body}b\n"), &format!("a\n{body}x\nb\n"));
        check(&format!("{body}y\n{body}"), &format!("{body}{body}"));
    }

    #[test]
    fn planned_ensure_line_in_a_long_file_shows_the_tail_with_real_line_numbers() {
        use crate::host::ExecMode;
        use crate::host::files::fs::{self, LineOptions};
        let t = crate::host::testutil::TestHost::new();
        t.file("/etc/f", &numbered(100));
        let mut h = t.host(ExecMode::Plan);
        let o = LineOptions::default();
        assert!(fs::ensure_line(&mut h, "/etc/f", "new 1", &o).unwrap());
        assert!(fs::ensure_line(&mut h, "/etc/f", "new 2", &o).unwrap());
        let r = h.finish().unwrap();
        let diffs: Vec<&str> = r
            .changes
            .iter()
            .map(|c| c.diff.as_deref().unwrap())
            .collect();
        assert_eq!(
            diffs,
            [
                "--- a/etc/f\n+++ b/etc/f\n@@ -98,3 +98,4 @@\n line 97\n line 98\n line 99\n+new 1\n",
                "--- a/etc/f\n+++ b/etc/f\n@@ -99,3 +99,4 @@\n line 98\n line 99\n new 1\n+new 2\n",
            ]
        );
        assert_eq!(t.read("/etc/f"), numbered(100), "a plan writes nothing");
    }

    /// The appended fast path gives the whole-file diff, or declines.
    fn check_appended(old: &str, add: &str) {
        let new = format!("{old}{add}");
        let lines = bytecount::count(old.as_bytes(), b'\n');
        let got = unified_appended(old.as_bytes(), new.as_bytes(), lines, "a/f", "b/f")
            .unwrap_or_else(|| unified(old, &new, "a/f", "b/f"));
        assert_eq!(got, whole(old, &new, "a/f", "b/f"), "{old:?} + {add:?}");
    }

    #[test]
    fn appended_lines_diff_as_the_whole_file() {
        for n in [1, 2, 3, 11, 12, 13, 14, 40, 200] {
            let old = numbered(n);
            check_appended(&old, "new\n");
            check_appended(&old, "a\nb\n");
            check_appended(&old, &format!("line {}\n", n - 1));
            let same = "x\n".repeat(n);
            check_appended(&same, "x\n");
            check_appended(&same, "y\nx\n");
        }
        // Taken (not declined) in a long file, with the real line numbers.
        let old = numbered(100);
        let new = format!("{old}new\n");
        assert_eq!(
            unified_appended(old.as_bytes(), new.as_bytes(), 100, "a/f", "b/f").as_deref(),
            Some("--- a/f\n+++ b/f\n@@ -98,3 +98,4 @@\n line 97\n line 98\n line 99\n+new\n")
        );
    }

    #[test]
    fn appended_declines_what_it_cannot_diff() {
        let old = numbered(100);
        let new = format!("{old}new\n");
        let d = |o: &[u8], n: &[u8], l| unified_appended(o, n, l, "a/f", "b/f");
        // Not longer, empty or unterminated old, nothing cut off, a line count too small.
        assert_eq!(d(old.as_bytes(), old.as_bytes(), 100), None);
        assert_eq!(d(b"", b"x\n", 0), None);
        assert_eq!(d(b"a\nb", b"a\nbc\n", 1), None);
        assert_eq!(d(b"a\nb\n", b"a\nb\nc\n", 2), None);
        assert_eq!(d(old.as_bytes(), new.as_bytes(), 5), None);
        // A window that is not UTF-8.
        let mut bad = old.clone().into_bytes();
        bad.extend_from_slice(b"\xff\n");
        assert_eq!(d(&bad, &[&bad[..], b"x\n"].concat(), 101), None);
    }

    #[test]
    fn planned_appends_diff_as_consecutive_contents() {
        use crate::host::ExecMode;
        use crate::host::effects::describe::render_diff;
        use crate::host::files::fs::{self, LineOptions};
        use std::path::Path;
        // A CRLF file without a final newline: the first write normalises it (no fast path),
        // the later ones append; a repeated line is appended too.
        let start = (0..30)
            .map(|i| format!("l{}\r\n", i % 3))
            .collect::<String>()
            + "end";
        let t = crate::host::testutil::TestHost::new();
        t.file("/etc/f", &start);
        let mut h = t.host(ExecMode::Plan);
        let o = LineOptions::default();
        let mut contents = vec![start.clone()];
        let mut lines: Vec<String> = start.lines().map(str::to_string).collect();
        for l in ["new", "l9", "end2", "x", "y", "z"] {
            assert!(fs::ensure_line(&mut h, "/etc/f", l, &o).unwrap());
            lines.push(l.to_string());
            contents.push(lines.iter().map(|l| format!("{l}\n")).collect());
        }
        let r = h.finish().unwrap();
        let diffs: Vec<String> = r.changes.iter().map(|c| c.diff.clone().unwrap()).collect();
        let want: Vec<String> = contents
            .windows(2)
            .map(|w| {
                render_diff(
                    Path::new("/etc/f"),
                    Some(w[0].as_bytes()),
                    Some(w[1].as_bytes()),
                )
            })
            .collect();
        assert_eq!(diffs, want);
        assert_eq!(
            diffs[5],
            "--- a/etc/f\n+++ b/etc/f\n@@ -34,3 +34,4 @@\n end2\n x\n y\n+z\n"
        );
        assert_eq!(t.read("/etc/f"), start, "a plan writes nothing");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        #[test]
        fn windowed_equals_whole_file(
            base in proptest::collection::vec(0u8..4, 0..80),
            edits in proptest::collection::vec((0usize..80, 0u8..3, 0u8..5), 1..4),
            final_newline in any::<bool>(),
        ) {
            let mut lines: Vec<String> = base.iter().map(|c| format!("l{c}")).collect();
            let old_lines = lines.clone();
            for (at, op, c) in edits {
                let at = at.min(lines.len());
                match op {
                    0 => lines.insert(at, format!("n{c}")),
                    1 if at < lines.len() => { lines.remove(at); }
                    _ if at < lines.len() => lines[at] = format!("r{c}"),
                    _ => lines.push(format!("e{c}")),
                }
            }
            let join = |l: &[String], nl: bool| {
                let mut s = l.join("\n");
                if nl && !s.is_empty() { s.push('\n'); }
                s
            };
            check(&join(&old_lines, true), &join(&lines, final_newline));
        }
    }
}
