//! Unified diffs of file contents at a cost proportional to the change, not to the file
//! (issue 13): [`unified`] gives exactly the text `similar`'s unified diff of the whole
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
    let diff = TextDiff::from_lines(wo, wn);
    let ops = diff.ops();
    // A hunk that came near a cut edge may have slid differently than in the whole texts.
    let room = MARGIN - CONTEXT;
    let cut_top = wo_start > 0;
    let cut_bottom = wo_end < o.len();
    let lead = match ops.first() {
        Some(DiffOp::Equal { len, .. }) => *len,
        _ => 0,
    };
    let trail = match ops.last() {
        Some(DiffOp::Equal { len, .. }) => *len,
        _ => 0,
    };
    if (cut_top && lead < above.min(room)) || (cut_bottom && trail < below.min(room)) {
        return None;
    }
    let text = diff
        .unified_diff()
        .context_radius(CONTEXT)
        .header(a, b)
        .to_string();
    if wo_start == 0 {
        return Some(text);
    }
    // Shift the hunk headers by the lines cut off above (the same number in both texts).
    let shift = bytecount::count(&o[..wo_start], b'\n');
    let mut out = String::with_capacity(text.len() + 16);
    for line in text.split_inclusive('\n') {
        match line.strip_prefix("@@ -") {
            Some(rest) => shift_header(&mut out, rest, shift)?,
            None => out.push_str(line),
        }
    }
    Some(out)
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
        use crate::host::fs::{self, LineOptions};
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
