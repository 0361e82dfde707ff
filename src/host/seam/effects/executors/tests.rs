//! One sequence of host calls through each executor: what each leaves on the host, what its
//! report says, and what later reads of the session see.

use crate::host::effects::effect::{Effect, EffectKind, InterruptRequest};
use crate::host::files::fs::{self, LineOptions, WriteOptions};
use crate::host::root::{HostRoot, pathlock};
use crate::host::testutil::TestHost;
use crate::host::{ExecMode, Host, HostOptions, Report};

/// A root with `/etc` and `/opt` only.
fn root() -> TestHost {
    let t = TestHost::new();
    std::fs::create_dir_all(t.p("/etc")).unwrap();
    std::fs::create_dir_all(t.p("/opt")).unwrap();
    t
}

/// Write a file, create a directory, add a line to the file, request an interrupt; returns
/// what the session reads back of the file afterwards (`None`: absent).
fn sequence(h: &mut Host) -> Option<String> {
    assert!(fs::write(h, "/etc/a.conf", "x\n", &WriteOptions::default()).unwrap());
    assert!(fs::mkdir(h, "/opt/d", Some(0o750)).unwrap());
    assert!(fs::ensure_line(h, "/etc/a.conf", "y", &LineOptions::default()).unwrap());
    h.submit(Effect::Interrupt(InterruptRequest::Reboot))
        .unwrap();
    fs::exists(h, "/etc/a.conf")
        .unwrap()
        .then(|| fs::read(h, "/etc/a.conf").unwrap())
}

fn changes(r: &Report) -> Vec<(String, String)> {
    r.changes
        .iter()
        .map(|c| (c.kind.clone(), c.target.clone()))
        .collect()
}

fn want_changes() -> Vec<(String, String)> {
    [
        ("write", "/etc/a.conf"),
        ("mkdir", "/opt/d"),
        ("write", "/etc/a.conf"),
    ]
    .map(|(k, t)| (k.to_string(), t.to_string()))
    .to_vec()
}

#[test]
fn one_sequence_through_apply_plan_check_and_recording() {
    for mode in [ExecMode::Apply, ExecMode::Plan, ExecMode::Check] {
        let t = root();
        let mut h = t.host(mode);
        let read = sequence(&mut h);
        let r = h.finish().unwrap();
        assert_eq!(r.mode, mode);
        assert_eq!(changes(&r), want_changes(), "{mode:?}");
        assert_eq!(r.interrupts, [InterruptRequest::Reboot], "{mode:?}");
        // Every mode reads back what the calls made of the file: applied or planned.
        assert_eq!(read.as_deref(), Some("x\ny\n"), "{mode:?}");
        let applied = mode == ExecMode::Apply;
        assert_eq!(t.p("/etc/a.conf").exists(), applied, "{mode:?}");
        assert_eq!(t.p("/opt/d").is_dir(), applied, "{mode:?}");
        // Only the apply executor takes the cross-process locks (their directory).
        assert_eq!(t.p(pathlock::DIR).is_dir(), applied, "{mode:?}");
        if applied {
            assert_eq!(t.read("/etc/a.conf"), "x\ny\n");
        }
    }

    // The recording double: nothing on the host changes, reads go to the real root (so the
    // line is added to a file that, there, does not exist), every effect is kept in order.
    let t = root();
    let mut h = Host::recording(HostRoot::open(&t.root).unwrap(), HostOptions::default());
    let read = sequence(&mut h);
    assert_eq!(read, None);
    let kinds: Vec<EffectKind> = h.recorded_effects().iter().map(Effect::kind).collect();
    assert_eq!(
        kinds,
        [
            EffectKind::Write,
            EffectKind::Mkdir,
            EffectKind::Write,
            EffectKind::Interrupt
        ]
    );
    match &h.recorded_effects()[2] {
        Effect::WriteFile { content, .. } => assert_eq!(&content[..], b"y\n"),
        other => panic!("not a write: {other:?}"),
    }
    let r = h.finish().unwrap();
    assert_eq!(r.mode, ExecMode::Apply);
    assert_eq!(changes(&r), want_changes());
    assert_eq!(r.interrupts, [InterruptRequest::Reboot]);
    assert!(!t.p("/etc/a.conf").exists());
    assert!(!t.p("/opt/d").exists());
    assert!(!t.p(pathlock::DIR).exists());
}
