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

/// Write `value` to the existing control file `file`, never created: a cgroup filesystem
/// has none to create, and a missing one is the kernel's `ENOENT` (its controller not
/// enabled), where `O_CREAT` would say `EACCES`.
///
/// # Errors
/// The `open` or `write` error.
fn write_existing(file: &Path, value: &str) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file)
        .and_then(|mut f| f.write_all(value.as_bytes()))
}

/// [`write_existing`], the error naming `file`.
fn write_control(file: &Path, value: &str) -> io::Result<()> {
    write_existing(file, value)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", file.display())))
}

/// Enable `memory` and `pids` for the children of the v2 cgroup `dir` unless they are.
///
/// # Errors
/// The write's error (`EBUSY` while `dir` holds processes), its message naming the file.
fn enable_for_children(dir: &Path) -> Result<(), (io::Error, String)> {
    let control = dir.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&control).unwrap_or_default();
    if offers(&enabled) {
        return Ok(());
    }
    write_existing(&control, "+memory +pids").map_err(|e| {
        let msg = format!(
            "{}: cannot enable memory and pids for its children: {e}",
            control.display()
        );
        (e, msg)
    })
}

/// Enable `memory` and `pids` for the children of this process's own v2 cgroup `own`. The
/// kernel refuses that (`EBUSY`) while `own` holds processes (it is not the root); when the
/// only one is this process (serve alone in its container's or unit's cgroup, the usual
/// delegation), it first moves itself into the leaf `<own>/skyhook-server`, as systemd
/// advises for a delegated cgroup. Returns that leaf when it moved. Any other refusal
/// (`EACCES`: the cgroup is not delegated to serve) is the error, and serve stays.
fn enable_for_own_children(own: &Path) -> Result<Option<PathBuf>, String> {
    let Err((e, first)) = enable_for_children(own) else {
        return Ok(None);
    };
    if e.raw_os_error() != Some(libc::EBUSY) {
        return Err(first);
    }
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
    write_existing(&leaf.join("cgroup.procs"), &me.to_string())
        .map_err(|e| format!("{}: cannot move serve into it: {e}", leaf.display()))?;
    enable_for_children(own).map_err(|(_, m)| m)?;
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
            if !cgroup::is_v2_dir(&own) {
                return Err(format!(
                    "{}: not a directory of a cgroup2 filesystem",
                    own.display()
                ));
            }
            Parents::v2_under(&own)
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

    /// The v2 parents under `own`, this process's v2 cgroup ([`Parents::detect`] checked that
    /// it is one; a test gives a directory standing in for it): `own` must offer `memory`
    /// and `pids` (`cgroup.controllers`), which are enabled for its children
    /// (`cgroup.subtree_control`, serve moving itself into a leaf if it must), then
    /// `<own>/skyhook-serve` is made and they are enabled for its children too.
    ///
    /// # Errors
    /// What is missing or refused, naming the file.
    fn v2_under(own: &Path) -> Result<Parents, String> {
        let offered = std::fs::read_to_string(own.join("cgroup.controllers"))
            .map_err(|e| format!("{}/cgroup.controllers: {e}", own.display()))?;
        if !offers(&offered) {
            return Err(format!(
                "{} offers no memory and pids controllers (it has: {})",
                own.display(),
                offered.trim()
            ));
        }
        let moved = enable_for_own_children(own)?;
        let root = Root::under(own, cgroup::Version::V2)?;
        enable_for_children(root.dir()).map_err(|(_, m)| m)?;
        Ok(Parents::V2(root, moved))
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
        match parents {
            Parents::V2(r, _) => made.dirs.push(r.create("plan")?),
            Parents::V1 { memory, pids } => {
                made.dirs.push(memory.create("plan")?);
                made.dirs.push(pids.create("plan")?);
            }
        }
        made.limit(memory, pids)?;
        Ok(made)
    }

    /// Set the limits in the plan's new cgroups (`dirs`, with the control files the kernel
    /// made in them): v2 `memory.max` `memory` bytes, `memory.swap.max` 0 where it exists,
    /// `pids.max` `pids`; v1 `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`
    /// where it exists) in the memory one, `pids.max` in the pids one. Then open each
    /// `cgroup.procs` for writing (close-on-exec).
    ///
    /// # Errors
    /// A control file that is missing (`ENOENT`: its controller is not enabled) or refuses
    /// the value, or a `cgroup.procs` that cannot be opened; the message names the file.
    fn limit(&mut self, memory: u64, pids: u32) -> io::Result<()> {
        let mem = &self.dirs[0];
        let pids_dir = self.dirs.last().unwrap_or(mem);
        let bytes = memory.to_string();
        if self.v2 {
            write_control(&mem.join("memory.max"), &bytes)?;
            // Its memory is the plan's: nothing of it is pushed out to swap.
            let swap = mem.join("memory.swap.max");
            if swap.exists() {
                write_control(&swap, "0")?;
            }
        } else {
            write_control(&mem.join("memory.limit_in_bytes"), &bytes)?;
            let memsw = mem.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                write_control(&memsw, &bytes)?;
            }
        }
        write_control(&pids_dir.join("pids.max"), &pids.to_string())?;
        for d in &self.dirs {
            let file = d.join("cgroup.procs");
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&file)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", file.display())))?;
            self.procs.push(OwnedFd::from(f));
        }
        Ok(())
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

    /// Skip a test whose prerequisite is missing, as `host::testutil::skip` does (this leaf
    /// module uses nothing of the agent): under `SKYHOOK_REQUIRE_ALL=1` it fails instead.
    fn skip(why: &str) {
        assert!(
            std::env::var_os("SKYHOOK_REQUIRE_ALL").is_none_or(|v| v != "1"),
            "did not run: {why} (SKYHOOK_REQUIRE_ALL=1: a missing prerequisite fails the test)"
        );
        eprintln!("SKIPPED: {why}");
    }

    /// Write `text` to `path` (a stand-in's control file).
    fn put(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    /// The v2 parents against a directory standing in for this process's v2 cgroup (the
    /// kernel's files it reads and writes, as a cgroup has them): what it reads
    /// (`cgroup.controllers`, `cgroup.subtree_control`) and writes (`+memory +pids` to
    /// both `own` and `own/skyhook-serve`), and each error naming its file. A control file
    /// is never created where the kernel has none (`ENOENT`, not a made file).
    #[test]
    fn the_v2_parents_enable_memory_and_pids_for_their_children() {
        let own = tempfile::tempdir().unwrap();
        let o = own.path();
        let serve = o.join("skyhook-serve");
        let (own_ctl, serve_ctl) = (
            o.join("cgroup.subtree_control"),
            serve.join("cgroup.subtree_control"),
        );
        put(&o.join("cgroup.controllers"), "cpuset cpu io hugetlb\n");
        put(&own_ctl, "");
        assert_eq!(
            Parents::v2_under(o).unwrap_err(),
            format!(
                "{} offers no memory and pids controllers (it has: cpuset cpu io hugetlb)",
                o.display()
            )
        );
        assert_eq!(
            read(&own_ctl),
            "",
            "nothing enabled without the controllers"
        );
        put(
            &o.join("cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids\n",
        );
        // What the kernel makes in a new cgroup: its cgroup.procs and subtree_control.
        std::fs::create_dir(&serve).unwrap();
        let p = Parents::v2_under(o).unwrap_err();
        assert_eq!(p, format!("{}: no cgroup.procs in it", serve.display()));
        put(&serve.join("cgroup.procs"), "");
        let p = Parents::v2_under(o).unwrap_err();
        assert_eq!(
            p,
            format!(
                "{}: cannot enable memory and pids for its children: No such file or \
                 directory (os error 2)",
                serve_ctl.display()
            )
        );
        assert!(!serve_ctl.exists(), "a control file was made");
        put(&serve_ctl, "");
        put(&own_ctl, "");
        let p = Parents::v2_under(o).unwrap();
        assert_eq!(
            p,
            Parents::V2(Root::under(o, cgroup::Version::V2).unwrap(), None)
        );
        assert_eq!(p.describe(), format!("cgroup v2 {}", serve.display()));
        assert_eq!(read(&own_ctl), "+memory +pids");
        assert_eq!(read(&serve_ctl), "+memory +pids");
        // Enabled already (as the kernel lists them): not written again.
        put(&own_ctl, "cpu memory pids\n");
        put(&serve_ctl, "memory pids\n");
        Parents::v2_under(o).unwrap();
        assert_eq!(read(&own_ctl), "cpu memory pids\n");
        assert_eq!(read(&serve_ctl), "memory pids\n");
        // Missing where the kernel would have it: named, not made.
        std::fs::remove_file(&own_ctl).unwrap();
        assert_eq!(
            Parents::v2_under(o).unwrap_err(),
            format!(
                "{}: cannot enable memory and pids for its children: No such file or \
                 directory (os error 2)",
                own_ctl.display()
            )
        );
        assert!(!own_ctl.exists(), "a control file was made");
        // A refusal that is not EBUSY (here EISDIR; EACCES where the cgroup is not
        // delegated) is the error: serve does not move itself into a leaf for it.
        std::fs::create_dir(&own_ctl).unwrap();
        assert_eq!(
            Parents::v2_under(o).unwrap_err(),
            format!(
                "{}: cannot enable memory and pids for its children: Is a directory (os \
                 error 21)",
                own_ctl.display()
            )
        );
        assert!(!o.join("skyhook-server").exists());
    }

    /// A stand-in for a plan's new v2 cgroup: the files the kernel makes in it.
    fn v2_plan_dir(parent: &Path) -> PathBuf {
        let d = parent.join("plan.1.0");
        std::fs::create_dir_all(&d).unwrap();
        for (f, text) in [
            ("cgroup.procs", ""),
            ("cgroup.kill", ""),
            ("memory.max", "max\n"),
            ("memory.swap.max", "max\n"),
            ("pids.max", "max\n"),
            (
                "memory.events",
                "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
            ),
        ] {
            put(&d.join(f), text);
        }
        d
    }

    /// A v2 plan cgroup without its directories (the stand-in is not removed at drop).
    fn v2_plan(d: &Path) -> PlanCgroup {
        PlanCgroup {
            dirs: vec![d.to_path_buf()],
            procs: Vec::new(),
            v2: true,
        }
    }

    /// The limits of a plan's v2 cgroup against a directory standing in for it: what is
    /// written (`memory.max` in bytes, `memory.swap.max` 0, `pids.max`), the `cgroup.procs`
    /// a command joins through, the OOM kills read from `memory.events`, and the errors,
    /// each naming its file; nothing is created where the kernel has no file.
    #[test]
    fn a_v2_plan_cgroup_sets_its_limits_and_names_what_is_missing() {
        let parent = tempfile::tempdir().unwrap();
        let d = v2_plan_dir(parent.path());
        let mut cg = v2_plan(&d);
        cg.limit(96 << 20, 40).unwrap();
        assert_eq!(read(&d.join("memory.max")), "100663296");
        assert_eq!(read(&d.join("memory.swap.max")), "0");
        assert_eq!(read(&d.join("pids.max")), "40");
        let [fd, none] = cg.procs();
        assert_eq!(none, -1, "one cgroup in v2");
        assert_eq!(
            std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap(),
            d.join("cgroup.procs")
        );
        assert_eq!(cg.oom_kills(), 0);
        // The kernel's memory.events after two kills (oom_group_kill is another count).
        put(
            &d.join("memory.events"),
            "low 0\nhigh 0\nmax 31\noom 2\noom_kill 2\noom_group_kill 1\n",
        );
        assert_eq!(cg.oom_kills(), 2);
        cg.dirs.clear();
        drop(cg);

        // Without swap accounting there is no memory.swap.max: none is made.
        let d = v2_plan_dir(&parent.path().join("noswap"));
        std::fs::remove_file(d.join("memory.swap.max")).unwrap();
        let mut cg = v2_plan(&d);
        cg.limit(1 << 20, 8).unwrap();
        assert!(!d.join("memory.swap.max").exists());
        assert_eq!(read(&d.join("memory.max")), "1048576");
        cg.dirs.clear();

        // A control file the kernel did not make (its controller not enabled) is the
        // error, naming it; it is not made.
        for missing in ["memory.max", "pids.max", "cgroup.procs"] {
            let d = v2_plan_dir(&parent.path().join(missing));
            std::fs::remove_file(d.join(missing)).unwrap();
            let mut cg = v2_plan(&d);
            assert_eq!(
                cg.limit(1 << 20, 8).unwrap_err().to_string(),
                format!(
                    "{}: No such file or directory (os error 2)",
                    d.join(missing).display()
                )
            );
            assert!(!d.join(missing).exists(), "{missing} was made");
            cg.dirs.clear();
        }
    }

    /// Dropping a plan cgroup that is only a stand-in (no cgroup filesystem) signals nothing
    /// its `cgroup.procs` lists: that list is read from a cgroup filesystem only.
    #[test]
    fn dropping_a_stand_in_kills_nothing_it_lists() {
        let parent = tempfile::tempdir().unwrap();
        let d = v2_plan_dir(parent.path());
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        put(&d.join("cgroup.procs"), &format!("{}\n", child.id()));
        drop(v2_plan(&d));
        assert!(
            child.try_wait().unwrap().is_none(),
            "a listed process was killed"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(d.exists(), "not a cgroup, not removed");
    }

    /// A plan's cgroup on the real v2 hierarchy (this process's, here without memory and
    /// pids controllers, so no limits are set): a member in a session of its own, as a
    /// query's daemon, is killed by `cgroup.kill` when the plan's cgroup is dropped, and the
    /// cgroup is removed (needs root and a cgroup v2 mount).
    #[test]
    fn dropping_a_v2_plan_cgroup_kills_its_members_and_removes_it() {
        if !nix::unistd::geteuid().is_root() {
            return skip("needs root");
        }
        let own = match cgroup::own_dir(None) {
            Ok(o) if cgroup::is_v2_dir(&o) => o,
            _ => return skip("no cgroup v2"),
        };
        let root = Root::at(&own).unwrap();
        let d = root.create("plan").unwrap();
        assert!(d.join("cgroup.kill").exists(), "Linux 5.14 or later");
        let procs = d.join("cgroup.procs");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&procs)
            .unwrap();
        let cg = PlanCgroup {
            dirs: vec![d.clone()],
            procs: vec![OwnedFd::from(f)],
            v2: true,
        };
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg("echo 0 > \"$1\"; setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!")
            .arg("sh")
            .arg(&procs)
            .output()
            .unwrap();
        let pid: libc::pid_t = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert_eq!(cgroup::procs(&d), [pid]);
        let member = crate::process::pidfd_open(pid).unwrap();
        drop(cg);
        assert!(!d.exists(), "{} left", d.display());
        let within = std::time::Instant::now() + Duration::from_secs(10);
        assert!(cgroup::wait_fds(&[member], within), "the member lives");
    }

    /// A plan's cgroup holds its limits (a member forks until `pids.max` refuses) and is
    /// removed when dropped, its members killed (needs root and a cgroup with memory and
    /// pids).
    #[test]
    fn a_plans_cgroup_has_its_limits_and_is_removed() {
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
