//! Attacks on the limits of `serve`'s `package_plan` (issue 32; docs/fleet.md "Limits", "It
//! writes nothing to the host"): the plan's cgroup (`--plan-memory`, `--plan-pids`), its
//! query user (`--plan-query-user auto`), its budget of planned bytes (`--plan-bytes`),
//! its end (cancel) and the server's memory over many plans. A defence that holds is a
//! normal test; a hole is `#[ignore = "known hole: ..."]` (its failure line is in the report
//! of branch `attack-limits`).

use serde_json::json;
use skyhook::process::{Cancel, CancelReason};
use skyhook::remote::Client;

use crate::fleet::{PLAN_TOKEN, start_serve_with, tokens_file};
use crate::plan_attack::{
    current_rt, exits_within, host_with, left_running, perl_query, pids_of, plan_body, plan_on,
    plan_step, plan_with,
};
use crate::plan_escape::HostProc;
use crate::plan_escape::mem_mib;
use crate::util::FakeRoot;

/// The first uid of `--plan-query-user auto` (0x7FFF0000 + 60578), slot 0's.
const AUTO_BASE: u32 = 0x7FFF_0000 + 60578;

/// A throwaway host root with `perl` and a `/dev/null` device.
fn host() -> FakeRoot {
    host_with(&["perl"])
}

/// The value after `key=` in `lines` (up to the next blank), parsed.
fn field<T: std::str::FromStr>(lines: &str, key: &str) -> Option<T> {
    lines
        .split(&format!("{key}="))
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The `memory` cgroup of process `pid` (cgroup v1 `memory:` line, or the v2 `0::` one), as
/// a directory under `/sys/fs/cgroup`.
fn memory_cgroup_dir(cgroup_file: &str) -> Option<std::path::PathBuf> {
    cgroup_file.lines().find_map(|l| {
        if let Some(p) = l.split(":memory:").nth(1) {
            return Some(std::path::PathBuf::from(format!(
                "/sys/fs/cgroup/memory{p}"
            )));
        }
        l.strip_prefix("0::")
            .filter(|p| *p != "/")
            .map(|p| std::path::PathBuf::from(format!("/sys/fs/cgroup{p}")))
    })
}

/// The host's `/sys/fs/cgroup` bound (recursively) at the fake root's, as on a node whose
/// `/` is the host root; unmounted (lazily, the whole tree) when dropped: declare it after
/// the root so it goes first and the root's removal never reaches a cgroup.
struct HostCgroups(std::path::PathBuf);

impl HostCgroups {
    fn bind(fr: &FakeRoot) -> HostCgroups {
        use nix::mount::MsFlags;
        let p = fr.host("/sys/fs/cgroup");
        std::fs::create_dir_all(&p).unwrap();
        nix::mount::mount(
            Some("/sys/fs/cgroup"),
            &p,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .unwrap();
        HostCgroups(p)
    }
}

impl Drop for HostCgroups {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// A query of the plan (its query user, no capability) with the host's cgroup tree in its
/// root tries to leave the plan's cgroup: its pid written to the `cgroup.procs` of the
/// hierarchy's root and of the plan cgroup's parent (`skyhook-serve`), and a new cgroup
/// namespace (`unshare(CLONE_NEWCGROUP)`, and with a user namespace first). Every one is
/// refused and the query is still in `/skyhook-serve/plan.` when it ends.
#[test]
fn a_plan_query_cannot_move_itself_out_of_its_cgroup() {
    require_root!();
    if let Err(why) = skyhook::process::plan_cgroup::parents() {
        skip!("no cgroup with memory and pids for plans: {why}");
    }
    let fr = host();
    let _cg = HostCgroups::bind(&fr);
    let _proc = HostProc::mount(&fr);
    let code = r#"
        sub cg { open(my $f, "<", "/proc/self/cgroup") or die "cgroup: $!\n";
                 my @l = grep { /:memory:|^0::/ } <$f>; chomp @l; $l[0] }
        my $mine = cg(); my ($rel) = $mine =~ /:(\/.*)$/;
        my $base = $mine =~ /:memory:/ ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup";
        (my $parent = "$base$rel") =~ s{/[^/]+$}{};
        for my $t ("$base/cgroup.procs", "$parent/cgroup.procs", "/sys/fs/cgroup/pids/cgroup.procs") {
            if (open(my $o, ">", $t)) { if (syswrite($o, "$$\n")) { print "MOVED:$t " }
                                        else { print "write:$! " } close $o }
            else { print "open:$! " } }
        print "newcgroup=", (syscall(272, 0x02000000) == 0 ? "yes" : "$!"), " ";
        print "newuser=", (syscall(272, 0x10000000 | 0x02000000) == 0 ? "yes" : "$!"), " ";
        print "now=", cg();
    "#;
    let (exit, lines) = plan_with(
        skyhook::serve::Config::new(fr.root()),
        &plan_body("cgescape", &perl_query(code)),
    );
    eprintln!("{lines}");
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
    assert!(
        !lines.contains("MOVED:"),
        "a plan's query left its cgroup: {lines}"
    );
    assert!(!lines.contains("newcgroup=yes"), "{lines}");
    assert!(!lines.contains("newuser=yes"), "{lines}");
    let now = lines.split("now=").nth(1).unwrap_or_default();
    assert!(now.contains("/skyhook-serve/plan."), "{lines}");
}

/// Two plans running at once get two query users (slots 0 and 1 of `auto`): plan A's query
/// (`sleep`, found on the host by its command line) runs as one uid while plan B's `id -u`
/// says another. A is then cancelled during its query: the query is gone at once and the
/// plan's cgroup is removed.
#[test]
fn two_plans_at_once_run_as_two_query_users_and_a_cancel_leaves_nothing() {
    require_root!();
    let cgroups = skyhook::process::plan_cgroup::parents().is_ok();
    let fr = host_with(&["sleep", "id"]);
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let cfg = skyhook::serve::Config::new(fr.root());
    let argv = ["sleep", "3600.0321"];
    current_rt().block_on(async {
        let url = start_serve_with(cfg, &tokens).await;
        let a = Client::new(&url, PLAN_TOKEN).unwrap();
        let b = Client::new(&url, PLAN_TOKEN).unwrap();
        let cancel = Cancel::new();
        let body_a = plan_body(
            "slot-a",
            "let r = query([\"sleep\", \"3600.0321\"]);\nprint(\"a ended \" + r.code);\n",
        );
        let fut_a = async {
            let t0 = std::time::Instant::now();
            let exit = a.execute(&body_a, &cancel, &mut |_| {}).await.unwrap();
            (exit, t0)
        };
        let rest = async {
            let mut pid = None;
            for _ in 0..200 {
                if let Some(p) = pids_of(&argv).first() {
                    pid = Some(*p);
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            let Some(pid) = pid else {
                cancel.abort(CancelReason::Signal("SIGTERM"));
                return None;
            };
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let uid_a: u32 = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap();
            let cg_a =
                memory_cgroup_dir(&std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap());
            let body_b = plan_body(
                "slot-b",
                "let r = query([\"id\", \"-u\"]);\nprint(\"uid=\" + r.stdout);\n",
            );
            let (exit_b, lines) = plan_on(&b, &body_b).await;
            cancel.abort(CancelReason::Signal("SIGTERM"));
            Some((pid, uid_a, cg_a, exit_b, lines))
        };
        let ((exit_a, t0), got) = tokio::join!(fut_a, rest);
        eprintln!("plan A cancelled: {exit_a} after {:?}", t0.elapsed());
        let (pid, uid_a, cg_a, exit_b, lines) = got.expect("plan A's query never started");
        assert_eq!(exit_b["exit"], json!({"code": 0}), "{exit_b:#}");
        let uid_b: u32 = field(&lines, "uid").unwrap_or_else(|| panic!("{lines}"));
        eprintln!("plan A's query ran as {uid_a}, plan B's as {uid_b}");
        assert!(
            (AUTO_BASE..AUTO_BASE + 606).contains(&uid_a)
                && (AUTO_BASE..AUTO_BASE + 606).contains(&uid_b),
            "{uid_a} {uid_b}"
        );
        assert_ne!(uid_a, uid_b, "two plans at once ran as the same query user");
        assert!(
            exits_within(pid, 3000),
            "plan A's query outlived its cancel by 3 s"
        );
        if cgroups {
            let dir = cg_a.expect("plan A's query has a memory cgroup");
            assert!(
                dir.to_string_lossy().contains("/skyhook-serve/plan."),
                "{dir:?}"
            );
            let mut gone = false;
            for _ in 0..100 {
                if !dir.exists() {
                    gone = true;
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            assert!(
                gone,
                "plan A's cgroup {dir:?} is still there after its cancel"
            );
        }
    });
}

/// A query leaves a child stopped (`SIGSTOP`, which a plain `SIGTERM` does not end) and
/// exits: nothing of the plan outlives it and its cgroup is removed.
#[test]
fn a_stopped_child_left_by_a_query_does_not_outlive_the_plan_or_its_cgroup() {
    require_root!();
    let fr = host_with(&["perl", "sleep"]);
    let argv = ["sleep", "3600.0477"];
    let code = r#"
        open(my $f, "<", "/proc/self/cgroup"); my @l = grep { /:memory:|^0::/ } <$f>; chomp @l;
        defined(my $p = fork) or die "fork: $!\n";
        if ($p == 0) { close(STDOUT); close(STDERR); exec("sleep", "3600.0477") }
        kill("STOP", $p); print "stopped cg=$l[0]";
    "#;
    let (exit, lines) = plan_with(
        skyhook::serve::Config::new(fr.root()),
        &plan_body("stopped", &perl_query(code)),
    );
    assert!(lines.contains("out=stopped"), "{lines}");
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
    let left = left_running(&argv);
    assert_eq!(
        left,
        Vec::<i32>::new(),
        "a stopped child outlived the plan: {lines}"
    );
    let cg = lines.split("cg=").nth(1).unwrap_or_default();
    if let Some(dir) = memory_cgroup_dir(cg.lines().next().unwrap_or_default())
        && dir.to_string_lossy().contains("/skyhook-serve/plan.")
    {
        assert!(
            !dir.exists(),
            "the plan's cgroup {dir:?} is left after the plan"
        );
    }
}

/// SysV shared memory (`shmget`, pages that outlive the process that touched them and are
/// no process's to kill) past `--plan-memory`: eight segments of 32 MiB, each filled 1 MiB
/// at a time (so no process maps more than 32 MiB, under `RLIMIT_AS`), and left. The pages
/// are charged to the plan's cgroup: the query is stopped before it holds 256 MiB under a
/// 96 MiB limit.
#[test]
fn shared_memory_pages_count_against_the_plans_memory() {
    require_root!();
    if let Err(why) = skyhook::process::plan_cgroup::parents() {
        skip!("no cgroup with memory and pids for plans: {why}");
    }
    let fr = host();
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.sandbox.memory = 96 << 20;
    let code = r#"
        $| = 1; my $mib = 0; my $chunk = "s" x (1 << 20);
        SEG: for my $s (1..8) {
            my $id = shmget(0, 32 << 20, 0600 | 01000);
            defined $id or do { print "shmget:$! "; last };
            for my $i (0..31) { shmwrite($id, $chunk, $i << 20, 1 << 20) or do { print "shmwrite:$! "; last SEG }; $mib++ }
        }
        print "shm=$mib";
    "#;
    let (exit, lines) = plan_with(cfg, &plan_body("shm", &perl_query(code)));
    eprintln!("{lines}\n{exit}");
    let held: u64 = field(&lines, "shm").unwrap_or(0);
    assert!(
        held <= 96,
        "a plan's query held {held} MiB of shared memory under --plan-memory 96MiB: {lines}"
    );
    let error = exit["exit"]["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("the plan's processes reached its memory limit (96 MiB"),
        "{exit}"
    );
}

/// Kernel memory a query can hold without a page of its own: the send buffers of Unix
/// socket pairs (each holds up to `net.core.wmem_default`, some 200 KiB, in flight), filled
/// with `MSG_DONTWAIT` sends until they refuse. Four processes of 250 pairs each (under
/// `RLIMIT_NOFILE`), all holding until the last has filled its pairs, under
/// `--plan-memory 64MiB`: the bytes in flight must stay under the plan's limit (were they
/// charged to its cgroup, a send past the limit would fail or the kernel kill the query).
#[test]
fn unix_socket_buffers_count_against_the_plans_memory() {
    require_root!();
    if let Err(why) = skyhook::process::plan_cgroup::parents() {
        skip!("no cgroup with memory and pids for plans: {why}");
    }
    let fr = host();
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.sandbox.memory = 64 << 20;
    let code = r#"
        $| = 1; pipe(my $rr, my $rw); pipe(my $gr, my $gw); my @kids;
        for my $k (1..4) { my $p = fork; die "fork: $!\n" unless defined $p;
            if ($p == 0) { close $rr; close $gw; my @keep; my $q = 0; my $buf = "b" x 65536;
                for (1..250) { socketpair(my $a, my $b, 1, 1, 0) or last; push @keep, $a, $b;
                    for (1..64) { my $n = send($a, $buf, 0x40); last unless defined $n && $n > 0; $q += $n } }
                syswrite($rw, sprintf("%020d", $q)); sysread($gr, my $x, 1); exit 0 }
            push @kids, $p }
        close $rw; close $gr; my $total = 0;
        for (@kids) { my $got = sysread($rr, my $n, 20); $total += $n if $got == 20 }
        close $gw; waitpid($_, 0) for @kids;
        print "queued=", $total >> 20;
    "#;
    let (exit, lines) = plan_with(cfg, &plan_body("sockbuf", &perl_query(code)));
    eprintln!("{lines}\n{exit}");
    let queued: u64 = field(&lines, "queued").unwrap_or(0);
    assert!(
        queued <= 64,
        "a plan's query held {queued} MiB in Unix socket buffers under --plan-memory 64MiB: {lines}"
    );
    let error = exit["exit"]["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("the plan's processes reached its memory limit (64 MiB"),
        "{exit}"
    );
}

/// A server whose stderr has no reader any more (the reader of `serve_bin` stops after
/// the listen line; a restarted journald or a closed pipe on a node) keeps serving: its
/// per-execution audit line was an `eprintln!`, whose `EPIPE` panicked the request's task,
/// so every plan after the first failed with `connection closed before message completed`.
#[test]
fn a_server_whose_stderr_is_gone_keeps_serving() {
    require_root!();
    let fr = host();
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let (_srv, url) = crate::plan_attack::serve_bin(fr.root(), &tokens, &[]);
    current_rt().block_on(async {
        let client = Client::new(&url, PLAN_TOKEN).unwrap();
        for i in 0..3 {
            let body = plan_body(&format!("gone{i}"), "print(\"planned\");\n");
            let (exit, lines) = plan_on(&client, &body).await;
            assert_eq!(exit["exit"], json!({"code": 0}), "plan {i}: {exit:#}");
            assert!(lines.contains("planned"), "plan {i}: {lines}");
        }
    });
}

/// `--plan-bytes` counted the content of each planned write, not what else a plan keeps in
/// the server: a symlink's target (up to 4 KiB each, and a step may plan tens of thousands)
/// was planned for nothing, and kept in the view, the report, the plan event, the exit's
/// structured plan and `rendered`. Four steps of 1,000 symlinks with 4,000-byte targets under
/// `--plan-bytes 1MiB` (the `serve` binary, its peak resident memory) took the server from
/// 23 to 811 MiB, all planned; now each link is charged what the server keeps of it and the
/// plan fails at its budget, within 32 MiB of where the server was.
#[test]
fn planned_symlinks_are_held_to_the_plans_planned_bytes() {
    require_root!();
    let fr = host();
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let (srv, url) = crate::plan_attack::serve_bin(fr.root(), &tokens, &["--plan-bytes", "1MiB"]);
    let step = |i: usize| {
        format!(
            "let t = \"/\";\nwhile t.len() < 4000 {{ t += \"t\"; }}\n\
             for j in 0..1000 {{ fs::symlink(t, \"/tmp/l{i}_\" + j); }}\nprint(\"step {i} planned\");\n"
        )
    };
    let mut body = plan_body("links", "");
    body["timeout_s"] = json!(240);
    let mut steps = Vec::new();
    for i in 0..4 {
        steps.push(plan_step(&format!("l{i}")));
        body["package"]["files"][format!("skyhook_dir/l{i}.rhai")] = step(i).into();
    }
    body["package"]["config"]["modes"]["apply"] = steps.into();
    let (before, _) = mem_mib(srv.0.id());
    let (exit, lines) = current_rt().block_on(async {
        let client = Client::new(&url, PLAN_TOKEN).unwrap();
        plan_on(&client, &body).await
    });
    let (peak, _) = mem_mib(srv.0.id());
    let rendered = exit["rendered"].as_str().map_or(0, str::len);
    eprintln!(
        "serve peak {before} MiB before, {peak} MiB after; exit {}; rendered plan {} MiB",
        exit["exit"],
        rendered >> 20
    );
    let planned_all = lines.contains("step 3 planned");
    assert!(
        !planned_all && peak < before + 32,
        "a plan of 4,000 symlinks of 4,000-byte targets under --plan-bytes 1MiB took the \
         server from {before} MiB to {peak} MiB (all planned: {planned_all}, exit {})",
        exit["exit"]
    );
    assert!(
        exit["rendered"].as_str().unwrap_or_default().contains(
            "(symlink: its content, report and events) would take the plan's planned \
             effects past its budget of 1048576 bytes (1 MiB, serve --plan-bytes)"
        ),
        "{}",
        exit["exit"]
    );
}

/// The server's memory after many bounded plans (each a query and a 1 MiB planned write):
/// its resident memory after 40 plans is within 16 MiB of what it was after the first 8
/// (no leak per plan). Measured on the `serve` binary.
#[test]
fn the_servers_memory_does_not_grow_over_many_plans() {
    require_root!();
    let fr = host();
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let (srv, url) = crate::plan_attack::serve_bin(fr.root(), &tokens, &[]);
    let script = "let s = \"x\";\nwhile s.len() < 1024 * 1024 { s += s; }\n\
                  fs::write(\"/tmp/one\", s);\nlet r = query([\"perl\", \"-e\", \"print 42\"]);\n\
                  print(\"out=\" + r.stdout);\n";
    let rss = current_rt().block_on(async {
        let client = Client::new(&url, PLAN_TOKEN).unwrap();
        let mut rss = Vec::new();
        for i in 0..40 {
            let (exit, lines) = plan_on(&client, &plan_body(&format!("many{i}"), script)).await;
            assert_eq!(exit["exit"], json!({"code": 0}), "plan {i}: {exit:#}");
            assert!(lines.contains("out=42"), "plan {i}: {lines}");
            rss.push(mem_mib(srv.0.id()).1);
        }
        rss
    });
    eprintln!("serve VmRSS MiB after each plan: {rss:?}");
    assert!(
        rss[39] <= rss[7] + 16,
        "the server grew from {} MiB (8 plans) to {} MiB (40 plans): {rss:?}",
        rss[7],
        rss[39]
    );
}

/// Slot reuse: plan A (slot 0 of `auto`, so uid 2147478690) leaves what could outlive its
/// processes (a SysV shared memory segment of a fixed key, a key in its uid's user
/// keyring, a child stopped by `SIGSTOP`); plan B, the next plan of the same slot and uid
/// on the same server, finds none of them.
#[test]
fn the_next_plan_of_the_same_slot_finds_nothing_the_last_one_left() {
    require_root!();
    let fr = host_with(&["perl", "sleep", "id"]);
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let cfg = skyhook::serve::Config::new(fr.root());
    let leave = r#"
        my $id = shmget(0x5eed0032, 65536, 0600 | 01000); print "shm=", (defined $id ? "made" : "$!"), " ";
        my ($t, $d, $v) = ("user", "skyhook-slot-leak", "payload");
        my $k = syscall(248, $t, $d, $v, 7, -4);
        print "key=", ($k > 0 ? "made" : "$!"), " ";
        defined(my $p = fork) or die "fork: $!\n";
        if ($p == 0) { close(STDOUT); close(STDERR); exec("sleep", "3600.0590") }
        kill("STOP", $p); print "uid=$<";
    "#;
    let find = r#"
        my $id = shmget(0x5eed0032, 0, 0); print "shm=", (defined $id ? "found" : "none"), " ";
        my ($t, $d) = ("user", "skyhook-slot-leak");
        my $k = syscall(250, 10, -4, $t, $d, 0);
        print "key=", ($k > 0 ? "found" : "none"), " ";
        my $n = kill(0, -1); print "signalable=$n uid=$<";
    "#;
    let (a, b) = current_rt().block_on(async {
        let client = Client::new(&start_serve_with(cfg, &tokens).await, PLAN_TOKEN).unwrap();
        let a = plan_on(&client, &plan_body("slot-leave", &perl_query(leave))).await;
        let b = plan_on(&client, &plan_body("slot-find", &perl_query(find))).await;
        (a, b)
    });
    eprintln!("A: {}\nB: {}", a.1, b.1);
    let left = left_running(&["sleep", "3600.0590"]);
    assert_eq!(a.0["exit"], json!({"code": 0}), "{:#}", a.0);
    assert_eq!(b.0["exit"], json!({"code": 0}), "{:#}", b.0);
    let (uid_a, uid_b): (u32, u32) = (
        field(&a.1, "uid").unwrap_or_else(|| panic!("{}", a.1)),
        field(&b.1, "uid").unwrap_or_else(|| panic!("{}", b.1)),
    );
    assert_eq!(uid_a, uid_b, "the two plans did not share a slot");
    assert_eq!(
        left,
        Vec::<i32>::new(),
        "plan A's stopped child outlived it"
    );
    assert!(
        b.1.contains("shm=none"),
        "plan B found plan A's shared memory: {}",
        b.1
    );
    assert!(
        b.1.contains("key=none"),
        "plan B found plan A's key: {}",
        b.1
    );
    assert!(
        b.1.contains("signalable=0 "),
        "plan B can signal a process: {}",
        b.1
    );
}

/// `--plan-pids` counts threads too: under `--plan-pids 64` a query starting 200 threads
/// (perl's `threads`, each sleeping) gets fewer than 64 of them, as it would processes (the
/// plan's cgroup's `pids.max`; the PID namespace's `pid_max` floor, 301, would not stop it).
#[test]
fn threads_count_against_the_plans_pids() {
    require_root!();
    if let Err(why) = skyhook::process::plan_cgroup::parents() {
        skip!("no cgroup with memory and pids for plans: {why}");
    }
    let fr = host();
    // perl's threads module and what it loads, from the test host's perl (as the host root's)
    for f in [
        "/usr/lib/x86_64-linux-gnu/perl-base/Config.pm",
        "/usr/lib/x86_64-linux-gnu/perl-base/XSLoader.pm",
        "/usr/lib/x86_64-linux-gnu/perl-base/overload.pm",
        "/usr/lib/x86_64-linux-gnu/perl-base/overloading.pm",
        "/usr/lib/x86_64-linux-gnu/perl-base/strict.pm",
        "/usr/lib/x86_64-linux-gnu/perl-base/warnings.pm",
        "/usr/lib/x86_64-linux-gnu/perl-base/warnings/register.pm",
        "/usr/lib/x86_64-linux-gnu/perl/5.36/threads.pm",
        "/usr/lib/x86_64-linux-gnu/perl/5.36/auto/threads/threads.so",
    ] {
        let to = fr.host(f);
        if std::path::Path::new(f).exists() && !to.exists() {
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(f, &to).unwrap();
        }
    }
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.sandbox.max_pids = 64;
    let code = r#"
        eval { require threads; 1 } or do { print "nothreads:$@"; exit 0 };
        my $n = 0;
        for (1..200) { my $t = threads->create(sub { sleep 30 }); last unless $t; $t->detach; $n++ }
        print "threads=$n "; exit 0;
    "#;
    let (exit, lines) = plan_with(cfg, &plan_body("threads", &perl_query(code)));
    eprintln!("{lines}");
    if lines.contains("nothreads") {
        skip!("perl of the host root has no threads: {lines}");
    }
    assert_eq!(exit["exit"]["code"], json!(0), "{exit:#}");
    let n: u32 = field(&lines, "threads").unwrap_or_else(|| panic!("{lines}"));
    assert!(
        n < 64,
        "a plan's query ran {n} threads under --plan-pids 64: {lines}"
    );
}

/// A line edit of a big host file plans the file's whole new content, and that is what
/// counts: three `fs::ensure_line`/`append`/`remove_line` edits of three 3 MiB host files
/// under `--plan-bytes 8MiB` fail at the third, naming the budget (a one-line edit is not
/// counted as one line). (Its first version removed every line of the third file with
/// `remove_line("^k=v")`, so the third edit planned 2 bytes and the plan rightly fit.)
#[test]
fn line_edits_of_big_files_count_their_whole_content() {
    require_root!();
    let fr = host();
    let line = "k=v".repeat(32) + "\n";
    for i in 0..3 {
        fr.write(&format!("/etc/big{i}"), line.repeat((3 << 20) / line.len()));
    }
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.planned_bytes = 8 << 20;
    // The control: the same three contents written whole fail at the third.
    let whole = "for i in 0..3 { let t = fs::read(\"/etc/big\" + i); \
                 fs::write(\"/etc/big\" + i, t + \"added=1\\n\"); print(\"write \" + i); }\n";
    let (exit, lines) = plan_with(cfg.clone(), &plan_body("whole", whole));
    assert!(
        lines.contains("write 1") && !lines.contains("write 2"),
        "{lines}\n{exit:#}"
    );
    let script = "fs::ensure_line(\"/etc/big0\", \"added=1\");\nprint(\"edit 0\");\n\
                  fs::append(\"/etc/big1\", \"added=1\\n\");\nprint(\"edit 1\");\n\
                  fs::remove_line(\"/etc/big2\", \"^absent=\");\nfs::ensure_line(\"/etc/big2\", \"x\");\n\
                  print(\"edit 2\");\n";
    let (exit, lines) = plan_with(cfg, &plan_body("lines", script));
    let rendered = exit["rendered"].as_str().unwrap_or_default();
    eprintln!("{lines}\n{}", exit["exit"]);
    assert!(lines.contains("edit 1"), "{lines}\n{exit:#}");
    assert!(
        !lines.contains("edit 2"),
        "three 3 MiB edits fit in 8 MiB: {lines}"
    );
    assert_eq!(exit["exit"]["code"], json!(1), "{}", exit["exit"]);
    assert!(
        rendered.contains("would take the plan's planned effects past its budget of 8388608 bytes"),
        "{rendered}"
    );
}

/// Any planned effect, not only a symlink's target, cost the server far more than
/// `--plan-bytes` counted (nothing, for an effect without content): one step of 4,000
/// `fs::mkdir` of short paths under `--plan-bytes 1MiB` (the `serve` binary, its peak
/// resident memory) took the server from 22 to 212 MiB, about 48 KiB a directory, most of
/// it the exit's structured plan held as `serde_json::Value` trees, three times at once.
/// Now the exit is written as text and each directory is charged what the server keeps of
/// it: the plan fails at its budget, and the server grows by less than 32 MiB. (A step may
/// plan as many effects as `--plan-max-operations`, 5,000,000, allows.)
#[test]
fn many_planned_directories_are_held_to_the_plans_planned_bytes() {
    require_root!();
    let fr = host();
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let (srv, url) = crate::plan_attack::serve_bin(fr.root(), &tokens, &["--plan-bytes", "1MiB"]);
    let script = "for j in 0..4000 { fs::mkdir(\"/tmp/d\" + j); }\nprint(\"all planned\");\n";
    let mut body = plan_body("dirs", script);
    body["timeout_s"] = json!(120);
    let (before, _) = mem_mib(srv.0.id());
    let (exit, lines) = current_rt().block_on(async {
        let client = Client::new(&url, PLAN_TOKEN).unwrap();
        plan_on(&client, &body).await
    });
    let (peak, _) = mem_mib(srv.0.id());
    eprintln!(
        "serve peak {before} MiB before, {peak} MiB after; exit {}",
        exit["exit"]
    );
    assert!(
        peak < before + 32,
        "a plan of 4,000 planned directories under --plan-bytes 1MiB took the server from \
         {before} MiB to {peak} MiB (all planned: {}, exit {})",
        lines.contains("all planned"),
        exit["exit"]
    );
    let rendered = exit["rendered"].as_str().unwrap_or_default();
    assert!(
        rendered.contains(
            "(mkdir: its content, report and events) would take the plan's \
                           planned effects past its budget of 1048576 bytes (1 MiB, serve \
                           --plan-bytes)"
        ),
        "{}",
        &rendered[rendered.len().saturating_sub(600)..]
    );
}

/// What the server streams and keeps for a plan's replay (its plan events and its exit
/// event, with the structured plan and `rendered`) is held to the plan's budget: each
/// planned effect is charged its text as those carry it. Under `--plan-bytes 256KiB`, a
/// plan of 4,000 `fs::mkdir` fails at the budget, naming it, and the JSON of every event it
/// sent takes less than the budget (before, nothing of it was counted: all 4,000 were
/// planned and their events took 4.5 MB).
#[test]
fn a_plans_events_are_held_to_its_planned_bytes() {
    require_root!();
    let fr = host();
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.planned_bytes = 256 << 10;
    let script = "for j in 0..4000 { fs::mkdir(\"/tmp/d\" + j); }\nprint(\"all planned\");\n";
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let (exit, lines, plans) = current_rt().block_on(async {
        let client = Client::new(&start_serve_with(cfg, &tokens).await, PLAN_TOKEN).unwrap();
        crate::plan_attack::plan_events(&client, &plan_body("events", script)).await
    });
    let sent: usize = plans.iter().map(|p| p.to_string().len()).sum::<usize>()
        + exit.to_string().len()
        + lines.len();
    eprintln!(
        "{} directories planned; events {sent} bytes; exit {}",
        plans.len(),
        exit["exit"]
    );
    assert!(!lines.contains("all planned"), "{lines}");
    let rendered = exit["rendered"].as_str().unwrap_or_default();
    assert!(
        rendered.contains("(mkdir: its content, report and events) would take the plan's planned effects past its budget of 262144 bytes (0 MiB, serve --plan-bytes)"),
        "{rendered}"
    );
    assert!(
        sent < 256 << 10,
        "the events of {} planned directories took {sent} bytes",
        plans.len()
    );
    assert!(plans.len() > 50, "{} planned", plans.len());
}

/// What a plan remembers of the real root (each path its steps look up, until it runs a
/// command) is held to the plan's budget with its planned effects: under `--plan-bytes
/// 1MiB`, a step that asks whether 200,000 distinct paths exist fails the plan, naming
/// the budget, and the host is unchanged (before, all 200,000 were looked up and
/// remembered, about 157 MiB by the memo's count, none of it counted).
#[test]
fn a_plans_lookups_of_distinct_paths_are_held_to_its_planned_bytes() {
    require_root!();
    let fr = host();
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.planned_bytes = 1 << 20;
    let script = "let n = 0;\nfor j in 0..200000 { if fs::exists(\"/etc/nothing-\" + j) { n += 1; } }\nprint(\"all looked up: \" + n);\n";
    let (exit, lines) = plan_with(cfg, &plan_body("lookups", script));
    assert!(!lines.contains("all looked up"), "{lines}");
    assert_eq!(exit["exit"]["code"], json!(1), "{exit:#}");
    let rendered = exit["rendered"].as_str().unwrap_or_default();
    assert!(
        rendered.contains("remembering the real root's answer about /etc/nothing-")
            && rendered.contains(
                "would take the plan past its budget of 1048576 bytes (1 MiB, serve \
                 --plan-bytes)"
            ),
        "{rendered}"
    );
    assert!(!fr.exists("/etc/nothing-0"));
}
