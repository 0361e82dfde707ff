//! [`Lines::render`]'s kept [`crate::host::effects::appendbuf::AppendBuf`] under long interleavings
//! of appends, renders (freezes), replacements, removals, block splices and arena
//! compactions: every rendering equals the lines joined afresh, and every `Bytes` handed out
//! keeps the bytes it had when it was handed out (no later edit writes under it).

use bytes::Bytes;

use crate::host::effects::lines::Lines;

/// The text as [`Lines::render`] defines it, built without the kept buffer.
fn fresh(l: &Lines) -> Vec<u8> {
    let mut out = Vec::new();
    for line in l.iter() {
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out
}

#[test]
fn frozen_renderings_survive_thousands_of_mixed_edits() {
    let mut l = Lines::parse("seed\n".to_string());
    // A fixed xorshift sequence: the same interleaving on every run.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut frozen: Vec<(Bytes, Vec<u8>)> = Vec::new();
    let (mut appends, mut shared) = (0, 0);
    for i in 0..6_000u64 {
        match next() % 100 {
            // Mostly appends (the ensure_line case the buffer is for) ...
            0..=69 => {
                l.push(&format!("line {i} {}", "x".repeat((next() % 40) as usize)));
                appends += 1;
            }
            // ... then renders, which freeze the kept buffer ...
            70..=84 => {
                let before = frozen.last().map(|(b, _)| b.clone());
                let b = l.render();
                assert!(
                    b[..] == fresh(&l)[..],
                    "render after op {i} differs from the lines"
                );
                if let Some(prev) = before
                    && !prev.is_empty()
                    && b.len() >= prev.len()
                    && b.as_ptr() == prev.as_ptr()
                {
                    shared += 1;
                }
                let copy = b.to_vec();
                frozen.push((b, copy));
            }
            // ... and the edits that drop the kept rendering.
            85..=89 if l.len() > 0 => {
                let at = (next() as usize) % l.len();
                l.replace(at, &format!("replaced {i}"));
            }
            90..=94 => {
                let cut = format!("line {}", i.saturating_sub(next() % 50));
                l.remove_where(|s| s.starts_with(&cut));
            }
            95..=99 if l.len() > 2 => {
                let at = (next() as usize) % (l.len() - 2);
                l.splice(
                    at..at + 2,
                    &["# BEGIN skyhook b", &format!("b {i}"), "# END skyhook b"],
                );
            }
            _ => l.push(""),
        }
        if i % 500 == 0 {
            // Every handed-out `Bytes` still holds what it held.
            for (b, copy) in &frozen {
                assert!(b[..] == copy[..], "a frozen rendering changed by op {i}");
            }
        }
    }
    for (n, (b, copy)) in frozen.iter().enumerate() {
        assert!(b[..] == copy[..], "frozen rendering {n} changed");
    }
    assert!(l.render()[..] == fresh(&l)[..]);
    // The interleaving exercised both the shared (appends only since) and the fresh paths.
    assert!(appends > 3_000, "{appends}");
    assert!(shared > 30, "{shared}");
    assert!(frozen.len() > 600, "{}", frozen.len());
}
