//! A cgroup of each package plan's own (serve's `package_plan`): every command of the plan,
//! and whatever it forks, is a member, and the members together are held to the plan's
//! memory (`--plan-memory`) and process count (`--plan-pids`); the server is never in it.
//!
//! Where ([`Parents::detect`], once per process, [`parents`]): cgroup v2 when this
//! process's v2 cgroup offers the `memory` and `pids` controllers (they are enabled in its
//! `cgroup.subtree_control`, or can be: the kernel refuses that while the cgroup holds a
//! process, so serve alone there first moves itself into a leaf `skyhook-server`), then under `<own>/skyhook-serve` (the runs' directory,
//! [`super::cgroup::Root`]) with `memory.max`, `memory.swap.max` 0 and `pids.max`; else
//! cgroup v1 with both a `memory` and a `pids` hierarchy (`memory.limit_in_bytes`,
//! `memory.memsw.limit_in_bytes` where swap is accounted, `pids.max`). Without either, a
//! plan has no cgroup: the reason is said at serve's start and in the plan's output, and
//! `--plan-memory` then bounds each command only (`RLIMIT_AS`, which holds in every case).
//!
//! A command joins the plan's cgroups in the spawned child, before it can fork, through
//! descriptors of their `cgroup.procs` opened when the plan started (`PlanCgroup::procs`),
//! as a run joins its [`super::Spec::cgroup`]. The kernel's memory controller reclaims and
//! then OOM-kills inside the cgroup ([`PlanCgroup::oom_kills`] counts those kills); `pids.max`
//! makes a `fork` past it fail with `EAGAIN`. Dropped, the plan's cgroups are emptied
//! ([`super::sweep::kill_all`]) and removed.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use super::cgroup::{self, Root};

/// How long dropping a plan's cgroup waits for its members to die.
const EMPTY_WITHIN: Duration = Duration::from_secs(10);

/// Where plans get their cgroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parents {
    /// One v2 directory with `memory` and `pids` enabled for its children, and the leaf
    /// serve moved itself into to enable them, if it did.
    V2(Root, Option<PathBuf>),
    /// A v1 `memory` and a v1 `pids` directory.
    V1 {
        /// Under this process's v1 `memory` cgroup.
        memory: Root,
        /// Under this process's v1 `pids` cgroup.
        pids: Root,
    },
}

/// The controllers a plan's cgroup needs.
const NEEDED: [&str; 2] = ["memory", "pids"];

/// True when the space-separated controller list `text` names every one of `NEEDED`.
fn offers(text: &str) -> bool {
    NEEDED
        .iter()
        .all(|c| text.split_whitespace().any(|w| w == *c))
}

/// Enable `memory` and `pids` for the children of the v2 cgroup `dir` unless they are.
fn enable_for_children(dir: &Path) -> Result<(), String> {
    let control = dir.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&control).unwrap_or_default();
    if offers(&enabled) {
        return Ok(());
    }
    std::fs::write(&control, "+memory +pids").map_err(|e| {
        format!(
            "{}: cannot enable memory and pids for its children: {e}",
            control.display()
        )
    })
}

/// Enable `memory` and `pids` for the children of this process's own v2 cgroup `own`. The
/// kernel refuses that (`EBUSY`) while `own` holds processes (it is not the root); when the
/// only one is this process (serve alone in its container's or unit's cgroup, the usual
/// delegation), it first moves itself into the leaf `<own>/skyhook-server`, as systemd
/// advises for a delegated cgroup. Returns that leaf when it moved.
fn enable_for_own_children(own: &Path) -> Result<Option<PathBuf>, String> {
    let Err(first) = enable_for_children(own) else {
        return Ok(None);
    };
    let me = std::process::id() as libc::pid_t;
    let members = cgroup::procs(own);
    if members != [me] {
        return Err(format!(
            "{first} (it holds {} processes besides serve: start serve in a cgroup whose \
             subtree_control enables memory and pids, or alone in its cgroup)",
            members.iter().filter(|&&p| p != me).count()
        ));
    }
    let leaf = own.join("skyhook-server");
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("{}: cannot create: {e}", leaf.display())),
    }
    std::fs::write(leaf.join("cgroup.procs"), me.to_string())
        .map_err(|e| format!("{}: cannot move serve into it: {e}", leaf.display()))?;
    enable_for_children(own)?;
    Ok(Some(leaf))
}

impl Parents {
    /// The v2 parents when this process's v2 cgroup offers `memory` and `pids`, else the v1
    /// ones (module docs).
    ///
    /// # Errors
    /// Why neither is usable: `"cgroup v2: ...; cgroup v1: ..."`.
    pub fn detect() -> Result<Parents, String> {
        let v2 = cgroup::own_dir(None).and_then(|own| {
            let offered = std::fs::read_to_string(own.join("cgroup.controllers"))
                .map_err(|e| format!("{}/cgroup.controllers: {e}", own.display()))?;
            if !offers(&offered) {
                return Err(format!(
                    "{} offers no memory and pids controllers (it has: {})",
                    own.display(),
                    offered.trim()
                ));
            }
            let moved = enable_for_own_children(&own)?;
            let root = Root::at(&own)?;
            enable_for_children(root.dir())?;
            Ok(Parents::V2(root, moved))
        });
        let v2_why = match v2 {
            Ok(p) => {
                p.remove_orphans();
                return Ok(p);
            }
            Err(e) => e,
        };
        let v1 = |c: &str| cgroup::own_dir(Some(c)).and_then(|d| Root::at(&d));
        match (v1("memory"), v1("pids")) {
            (Ok(memory), Ok(pids)) => {
                let p = Parents::V1 { memory, pids };
                p.remove_orphans();
                Ok(p)
            }
            (m, p) => Err(format!(
                "cgroup v2: {v2_why}; cgroup v1: {}",
                [("memory", m.err()), ("pids", p.err())]
                    .into_iter()
                    .filter_map(|(c, e)| e.map(|e| format!("{c}: {e}")))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// Remove the plan cgroups (`plan.<pid>.<n>`) a server that is gone left behind (killed
    /// while a plan ran), their members killed first.
    fn remove_orphans(&self) {
        let roots = match self {
            Parents::V2(r, _) => vec![r],
            Parents::V1 { memory, pids } => vec![memory, pids],
        };
        for r in roots {
            let Ok(entries) = std::fs::read_dir(r.dir()) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(pid) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("plan."))
                    .and_then(|n| n.split('.').next())
                    .and_then(|p| p.parse::<u32>().ok())
                else {
                    continue;
                };
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    super::sweep::kill_all(&e.path(), EMPTY_WITHIN);
                    let _ = cgroup::remove(&e.path());
                }
            }
        }
    }

    /// What the plans' cgroups are, for serve's start-up line:
    /// `"cgroup v2 <dir>"` or `"cgroup v1 memory <dir> and pids <dir>"`.
    pub fn describe(&self) -> String {
        match self {
            Parents::V2(r, None) => format!("cgroup v2 {}", r.dir().display()),
            Parents::V2(r, Some(leaf)) => format!(
                "cgroup v2 {} (serve moved itself into {} to give its cgroup's memory and \
                 pids controllers to plans)",
                r.dir().display(),
                leaf.display()
            ),
            Parents::V1 { memory, pids } => format!(
                "cgroup v1 memory {} and pids {}",
                memory.dir().display(),
                pids.dir().display()
            ),
        }
    }
}

/// The plans' parents of this process, detected on first use ([`Parents::detect`]).
///
/// # Errors
/// Why plans get no cgroup.
pub fn parents() -> Result<&'static Parents, &'static str> {
    static PARENTS: OnceLock<Result<Parents, String>> = OnceLock::new();
    PARENTS
        .get_or_init(Parents::detect)
        .as_ref()
        .map_err(String::as_str)
}

/// A cgroup for a plan of `memory` bytes and `pids` processes when this process has
/// [`parents`], else why not.
///
/// # Errors
/// [`PlanCgroup::create`]'s: parents exist but the plan's cgroup cannot be made.
pub(super) fn for_plan(memory: u64, pids: u32) -> io::Result<Result<PlanCgroup, &'static str>> {
    match parents() {
        Ok(p) => PlanCgroup::create(p, memory, pids).map(Ok),
        Err(why) => Ok(Err(why)),
    }
}

/// One plan's cgroup (v2) or cgroups (v1 `memory` and `pids`), with their limits set.
#[derive(Debug)]
pub struct PlanCgroup {
    /// The directories: one (v2), or the memory then the pids one (v1).
    dirs: Vec<PathBuf>,
    /// Their `cgroup.procs`, open for writing (close-on-exec), in the order of `dirs`.
    procs: Vec<OwnedFd>,
    /// v2 (`memory.events`) or v1 (`memory.oom_control`).
    v2: bool,
}

/// Write `value` to the control file `name` of `dir`; the error names the file.
fn set(dir: &Path, name: &str, value: &str) -> io::Result<()> {
    let f = dir.join(name);
    std::fs::write(&f, value).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", f.display())))
}

impl PlanCgroup {
    /// A new cgroup of a plan under `parents`, holding its members together to `memory`
    /// bytes and `pids` processes.
    ///
    /// # Errors
    /// A `mkdir`, a limit that cannot be set or a `cgroup.procs` that cannot be opened (what
    /// was made is removed).
    pub fn create(parents: &Parents, memory: u64, pids: u32) -> io::Result<PlanCgroup> {
        let mut made = PlanCgroup {
            dirs: Vec::new(),
            procs: Vec::new(),
            v2: matches!(parents, Parents::V2(..)),
        };
        let (memory_root, pids_root) = match parents {
            Parents::V2(r, _) => (r, None),
            Parents::V1 { memory, pids } => (memory, Some(pids)),
        };
        let mem = memory_root.create("plan")?;
        made.dirs.push(mem.clone());
        let pids_dir = match pids_root {
            Some(r) => {
                let d = r.create("plan")?;
                made.dirs.push(d.clone());
                d
            }
            None => mem.clone(),
        };
        let bytes = memory.to_string();
        if made.v2 {
            set(&mem, "memory.max", &bytes)?;
            // Its memory is the plan's: nothing of it is pushed out to swap.
            if mem.join("memory.swap.max").exists() {
                set(&mem, "memory.swap.max", "0")?;
            }
        } else {
            set(&mem, "memory.limit_in_bytes", &bytes)?;
            if mem.join("memory.memsw.limit_in_bytes").exists() {
                set(&mem, "memory.memsw.limit_in_bytes", &bytes)?;
            }
        }
        set(&pids_dir, "pids.max", &pids.to_string())?;
        for d in &made.dirs {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(d.join("cgroup.procs"))
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", d.display())))?;
            made.procs.push(OwnedFd::from(f));
        }
        Ok(made)
    }

    /// The `cgroup.procs` descriptors a command writes `0` to before `exec` (at most two;
    /// open until the plan's cgroup is dropped).
    pub(super) fn procs(&self) -> [RawFd; 2] {
        let fd = |i: usize| self.procs.get(i).map_or(-1, AsRawFd::as_raw_fd);
        [fd(0), fd(1)]
    }

    /// The cgroup directories (the memory one first).
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// How many members the kernel's OOM killer killed for the plan's memory limit
    /// (`oom_kill` of `memory.events` (v2) or `memory.oom_control` (v1)); 0 when unknown.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(self.dirs[0].join(file))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0)
    }
}

impl Drop for PlanCgroup {
    fn drop(&mut self) {
        self.procs.clear();
        for d in &self.dirs {
            let emptied = super::sweep::kill_all(d, EMPTY_WITHIN);
            if let Err(e) = cgroup::remove(d) {
                tracing::warn!(
                    cgroup = %d.display(),
                    emptied,
                    error = %e,
                    "cannot remove a plan's cgroup"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controllers_a_plan_needs_are_read_from_a_list() {
        assert!(offers("cpuset cpu io memory hugetlb pids rdma misc\n"));
        assert!(!offers("hugetlb\n"));
        assert!(!offers("memory"));
        assert!(!offers("memoryx pids"));
    }

    /// A plan's cgroup holds its limits (a member forks until `pids.max` refuses) and is
    /// removed when dropped, its members killed (needs root and a cgroup with memory and
    /// pids).
    #[test]
    fn a_plans_cgroup_has_its_limits_and_is_removed() {
        // As `host::testutil::skip` (this leaf module uses nothing of the agent): under
        // `SKYHOOK_REQUIRE_ALL=1` a missing prerequisite fails the test.
        let skip = |why: &str| {
            assert!(
                std::env::var_os("SKYHOOK_REQUIRE_ALL").is_none_or(|v| v != "1"),
                "did not run: {why} (SKYHOOK_REQUIRE_ALL=1: a missing prerequisite fails the test)"
            );
            eprintln!("SKIPPED: {why}");
        };
        if !nix::unistd::geteuid().is_root() {
            return skip("needs root");
        }
        let parents = match parents() {
            Ok(p) => p,
            Err(why) => return skip(&format!("no cgroup for plans: {why}")),
        };
        let cg = PlanCgroup::create(parents, 96 << 20, 40).unwrap();
        let dirs = cg.dirs().to_vec();
        let read = |d: &Path, f: &str| std::fs::read_to_string(d.join(f)).unwrap();
        match parents {
            Parents::V2(..) => {
                assert_eq!(read(&dirs[0], "memory.max").trim(), "100663296");
                assert_eq!(read(&dirs[0], "pids.max").trim(), "40");
            }
            Parents::V1 { .. } => {
                assert_eq!(read(&dirs[0], "memory.limit_in_bytes").trim(), "100663296");
                assert_eq!(read(&dirs[1], "pids.max").trim(), "40");
            }
        }
        assert_eq!(cg.oom_kills(), 0);
        assert!(cg.procs()[0] >= 0);
        // A process that joins it forks until pids.max refuses: 39 children besides itself.
        if Path::new("/usr/bin/perl").exists() {
            let procs = dirs.last().unwrap().join("cgroup.procs");
            let out = std::process::Command::new("/usr/bin/perl")
                .arg("-e")
                .arg(
                    r#"open(my $f, ">", $ARGV[0]) or die; print $f "0"; close $f or die;
                    my $ok = 0; for (1..60) { my $p = fork(); last unless defined $p;
                    if ($p == 0) { close STDOUT; close STDERR; sleep 60; exit 0 } $ok++ }
                    print $ok;"#,
                )
                .arg(&procs)
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), "39", "{out:?}");
        }
        drop(cg);
        for d in &dirs {
            assert!(!d.exists(), "{} left", d.display());
        }
    }
}
