//! A failed flush of batched line edits (the session's batch, [`crate::host::effects::session`]) fails the step even when
//! the call that triggered the flush got the error and the script went on (caught it): the
//! report lists the edits, so the step must not end as done (no flag, a rerun converges).

use crate::host::files::fs::{self, LineOptions};
use crate::host::testutil::TestHost;
use crate::host::{ExecMode, HostError};

fn o() -> LineOptions {
    LineOptions::default()
}

const CHANGED: &str = "/etc/f changed under the step (by a writer that does not take \
                       skyhook's path lock) after its line edits read it; its 1 pending line \
                       edit(s) were not written, the file is left as the other writer made it";

#[test]
fn a_flush_failure_returned_to_a_read_still_fails_the_step() {
    let t = TestHost::new();
    t.file("/etc/f", "a\n");
    let mut h = t.host(ExecMode::Apply);
    assert!(fs::ensure_line(&mut h, "/etc/f", "b", &o()).unwrap());
    std::fs::write(t.p("/etc/f"), "outside\n").unwrap();
    // A read of another file triggers the flush and gets its error (a script's `try`
    // around an optional read catches it) ...
    let e = fs::read(&h, "/etc/optional.conf").unwrap_err();
    assert_eq!(e.to_string(), CHANGED);
    // ... the session goes on ...
    assert_eq!(fs::read(&h, "/etc/f").unwrap(), "outside\n");
    assert!(fs::ensure_line(&mut h, "/etc/g", "g", &o()).unwrap());
    // ... but the step fails at its end, naming the file, after writing the rest.
    let (r, result) = h.finish_with_report();
    let e = result.unwrap_err();
    assert!(matches!(e, HostError::EditsNotWritten { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!("the line edits of /etc/f were not written: {CHANGED}")
    );
    assert_eq!(t.read("/etc/f"), "outside\n");
    assert_eq!(t.read("/etc/g"), "g\n");
    assert_eq!(r.changes.len(), 2);
}

#[test]
fn each_step_of_a_session_fails_only_for_its_own_unwritten_edits() {
    let t = TestHost::new();
    t.file("/etc/f", "a\n");
    let mut h = t.host(ExecMode::Apply);
    assert!(fs::ensure_line(&mut h, "/etc/f", "b", &o()).unwrap());
    std::fs::write(t.p("/etc/f"), "outside\n").unwrap();
    assert_eq!(
        fs::exists(&h, "/etc/x").unwrap_err().to_string(),
        CHANGED,
        "the call that flushes gets the error"
    );
    let e = h.finish_step().unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("the line edits of /etc/f were not written: {CHANGED}")
    );
    // The next step starts clean.
    assert!(fs::ensure_line(&mut h, "/etc/f", "c", &o()).unwrap());
    h.finish_step().unwrap();
    assert_eq!(t.read("/etc/f"), "outside\nc\n");
    h.finish().unwrap();
}

#[test]
fn a_flush_failure_returned_at_the_end_is_reported_once() {
    let t = TestHost::new();
    t.file("/etc/f", "a\n");
    let mut h = t.host(ExecMode::Apply);
    assert!(fs::ensure_line(&mut h, "/etc/f", "b", &o()).unwrap());
    std::fs::write(t.p("/etc/f"), "outside\n").unwrap();
    let e = h.finish().unwrap_err();
    assert_eq!(e.to_string(), CHANGED);
}
