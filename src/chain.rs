//! One-line rendering of an error and its causes, shared by every edge (agent, skyhook-run,
//! script errors): `a: b: c`, as `{:#}` would print an anyhow chain, good for journald.

/// `err` and each of its causes joined with `: `, skipping a cause whose text the line already
/// contains (thiserror messages that embed their source would otherwise repeat it).
pub fn render(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("failed to write /etc/x")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("step failed: {0}")]
    struct Embeds(#[source] std::io::Error);

    #[test]
    fn joins_causes_without_repeating_them() {
        let io = || std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(
            super::render(&Outer(io())),
            "failed to write /etc/x: No such file or directory (os error 2)"
        );
        assert_eq!(
            super::render(&Embeds(io())),
            "step failed: No such file or directory (os error 2)"
        );
    }
}
