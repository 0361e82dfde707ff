//! A plan's memo of real-root lookups (`overlay::RootMemo`) and the plan's budget.

use super::Host;
use crate::host::effects::context::HostOptions;
use crate::host::effects::overlay::{MEMO_ENTRY_BYTES, MEMO_LOCAL_BYTES};
use crate::host::effects::report::ExecMode;
use crate::host::files::fs;
use crate::host::root::HostRoot;
use crate::host::testutil::TestHost;

/// Distinct paths the steps below look up.
const PATHS: usize = 200_000;

/// What one missing path's lookup remembers: its canonical path (none), its absence and its
/// key's metadata (none), each [`MEMO_ENTRY_BYTES`] and the path.
fn missing_cost(path: &str) -> u64 {
    3 * (MEMO_ENTRY_BYTES + path.len() as u64)
}

/// A step of a plan held to a budget (serve's `--plan-bytes`, 1 MiB here) that looks up
/// 200,000 distinct paths fails once what the plan remembers of them would take it past
/// its budget, with an error naming the budget; what it remembered stays within it (three
/// answers a path), and a planned write then fails too. (Before, all 200,000 lookups
/// succeeded: the memo held 600,000 answers, about 157 MiB by this count.)
#[test]
fn a_plans_lookups_of_distinct_paths_are_held_to_its_budget() {
    let t = TestHost::new();
    std::fs::create_dir_all(t.root.join("etc")).unwrap();
    let budget = 1 << 20;
    let mut h = t.budgeted_plan(budget);
    let failed = (0..PATHS).find_map(|i| {
        fs::exists(&h, &format!("/etc/missing-{i}"))
            .err()
            .map(|e| (i, e.to_string()))
    });
    let (at, e) = failed.unwrap_or_else(|| {
        panic!("{PATHS} lookups of distinct paths under a budget of {budget} bytes all succeeded")
    });
    assert!(
        e.starts_with(&format!(
            "remembering the real root's answer about /etc/missing-{at} ("
        )) && e.contains("past its budget of 1048576 bytes (1 MiB, serve --plan-bytes)"),
        "{e}"
    );
    let o = h.executor.overlay().unwrap();
    let (bytes, entries) = (o.memo_bytes(), o.memo_entries());
    let last = missing_cost(&format!("/etc/missing-{at}"));
    assert!(
        bytes <= budget && bytes + last > budget,
        "the memo holds {bytes} bytes"
    );
    // The answers about the root and `/etc` that every lookup shares, and three a path.
    assert!(
        entries >= 3 * at && entries <= 3 * at + 8,
        "{entries} answers for {at} paths"
    );
    // A planned write after it fails too, naming the budget (its own lookups first).
    let e = fs::write(&mut h, "/etc/new", "x", &fs::WriteOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("(1 MiB, serve --plan-bytes)"), "{e}");
}

/// The same step in a plan with no budget (`skyhook-run`, the agent's preflight) succeeds:
/// its memo stops at [`MEMO_LOCAL_BYTES`] and later paths are asked of the real root
/// each time (a file made after the bound is seen; one remembered before it is not).
#[test]
fn a_local_plans_lookups_of_distinct_paths_stop_being_remembered_at_its_bound() {
    let t = TestHost::new();
    std::fs::create_dir_all(t.root.join("etc")).unwrap();
    let h = Host::new(
        HostRoot::open(&t.root).unwrap(),
        ExecMode::Plan,
        HostOptions::default(),
    );
    for i in 0..PATHS {
        assert!(!fs::exists(&h, &format!("/etc/missing-{i}")).unwrap());
    }
    let o = h.executor.overlay().unwrap();
    let (bytes, entries) = (o.memo_bytes(), o.memo_entries());
    let per = missing_cost("/etc/missing-100000");
    assert!(
        bytes <= MEMO_LOCAL_BYTES && bytes + per > MEMO_LOCAL_BYTES,
        "the memo holds {bytes} bytes"
    );
    assert!(
        (entries as u64) <= MEMO_LOCAL_BYTES / MEMO_ENTRY_BYTES,
        "{entries} answers"
    );
    std::fs::write(t.root.join("etc/missing-0"), "now").unwrap();
    std::fs::write(t.root.join("etc/missing-199999"), "now").unwrap();
    assert!(!fs::exists(&h, "/etc/missing-0").unwrap(), "remembered");
    assert!(
        fs::exists(&h, "/etc/missing-199999").unwrap(),
        "not remembered"
    );
}
