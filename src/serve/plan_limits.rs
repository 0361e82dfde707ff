//! The bounds of serve's package plans (`skyhook-agent serve --plan-*`, docs/fleet.md
//! "Limits"): how many run at once, how long a plan and each of its script steps may run,
//! and the sandbox limits of every command a plan runs ([`crate::process::sandbox`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::process::sandbox;

/// The default `--plan-bytes`: 64 MiB of what the server keeps of a plan's planned effects
/// (their content, report and events).
pub const DEFAULT_PLANNED_BYTES: u64 = 64 << 20;

/// The bounds of package plans, with the count of plans running now (shared by clones).
#[derive(Debug, Clone)]
pub struct PlanLimits {
    /// Package plans running at once (`--max-plans`); one more is `429`.
    pub max_plans: usize,
    /// Longest wall-clock time of a plan (`--plan-timeout`): a request's `timeout_s` is
    /// lowered to it, and a request without one gets it.
    pub timeout: Duration,
    /// Wall-clock deadline of each `.rhai` step of a plan (`--plan-script-timeout`): the
    /// package's `SKYHOOK_SCRIPT_TIMEOUT` is lowered to it (the engine's 600 s default
    /// otherwise). Each step is also held to [`PlanLimits::max_operations`].
    pub script_timeout: Duration,
    /// Rhai operations of each `.rhai` step of a plan (`--plan-max-operations`), the
    /// server's plan engine's [`crate::script::Limits::max_operations`]: a step past it
    /// fails with `operations limit exceeded (max_operations = N)`.
    pub max_operations: u64,
    /// Limits of each command a plan runs (`--plan-memory`, `--plan-cpu`, `--plan-pids`);
    /// its `query_user` is set per plan from [`PlanLimits::query_users`].
    pub sandbox: sandbox::Limits,
    /// Who each plan's commands run as (`--plan-query-user`): by default a user of its own
    /// for each plan slot ([`sandbox::QueryUsers::for_slot`]).
    pub query_users: sandbox::QueryUsers,
    /// Bytes the server may keep of what a plan plans, over all its steps, modes and
    /// packages (`--plan-bytes`; [`crate::host::PlanCarry::with_budget`]).
    pub planned_bytes: u64,
    /// The plan slots in use (true), shared by clones.
    slots: Arc<Mutex<Vec<bool>>>,
}

impl Default for PlanLimits {
    /// 4 plans at once, 300 s a plan, 60 s and 5,000,000 Rhai operations a script step
    /// (the agent's own operations limit: under a second of script work, 250 times what
    /// the shipped steps use), [`sandbox::Limits::default`], [`DEFAULT_PLANNED_BYTES`].
    fn default() -> Self {
        PlanLimits {
            max_plans: 4,
            timeout: Duration::from_secs(300),
            script_timeout: Duration::from_secs(60),
            max_operations: crate::script::Limits::default().max_operations,
            sandbox: sandbox::Limits::default(),
            query_users: sandbox::QueryUsers::Auto,
            planned_bytes: DEFAULT_PLANNED_BYTES,
            slots: Arc::default(),
        }
    }
}

/// One running plan's place under [`PlanLimits::max_plans`], its slot (the lowest free,
/// `0 ≤ slot < max_plans`: which query user it runs as), given back when dropped (when the
/// plan's thread has ended, not merely when its exit was reported).
#[derive(Debug)]
pub struct PlanPermit {
    slots: Arc<Mutex<Vec<bool>>>,
    slot: usize,
}

impl PlanPermit {
    /// The plan's slot.
    pub fn slot(&self) -> usize {
        self.slot
    }
}

impl Drop for PlanPermit {
    fn drop(&mut self) {
        lock(&self.slots)[self.slot] = false;
    }
}

fn lock(slots: &Mutex<Vec<bool>>) -> std::sync::MutexGuard<'_, Vec<bool>> {
    slots.lock().unwrap_or_else(|p| p.into_inner())
}

impl PlanLimits {
    /// A place for one more plan; `None` when `max_plans` plans run (or their threads
    /// have not ended yet): the service answers `429` with [`PlanLimits::over_cap`] and
    /// `Retry-After: 1`.
    pub fn admit(&self) -> Option<PlanPermit> {
        let mut slots = lock(&self.slots);
        let slot = match slots.iter().position(|used| !used) {
            Some(free) => free,
            None => {
                slots.push(false);
                slots.len() - 1
            }
        };
        if slot >= self.max_plans {
            return None;
        }
        slots[slot] = true;
        Some(PlanPermit {
            slots: self.slots.clone(),
            slot,
        })
    }

    /// The engine of the server's plans: the default [`crate::script::Limits`] with
    /// [`PlanLimits::max_operations`].
    pub fn engine(&self) -> std::sync::Arc<crate::script::ScriptEngine> {
        std::sync::Arc::new(crate::script::ScriptEngine::new(crate::script::Limits {
            max_operations: self.max_operations,
            ..crate::script::Limits::default()
        }))
    }

    /// The body of the `429` over the cap: `{"error": "too many plans running",
    /// "max_plans": N}`.
    pub fn over_cap(&self) -> serde_json::Value {
        json!({"error": "too many plans running", "max_plans": self.max_plans})
    }

    /// Refuse, at serve's start, `--plan-query-user auto`'s ids for [`PlanLimits::max_plans`]
    /// slots when the host root's `/etc/passwd`, `/etc/group`, `/etc/subuid` or
    /// `/etc/subgid` gives any of them to someone ([`sandbox::QueryUsers::check_host`]; a
    /// missing file names nobody). Read through [`crate::host::root::HostRoot`], confined
    /// to `root`.
    ///
    /// # Errors
    /// The root or a file cannot be read; an id of the range is taken (the file, its line).
    pub fn check_query_users(&self, root: &std::path::Path) -> Result<(), String> {
        if self.query_users != sandbox::QueryUsers::Auto {
            return Ok(());
        }
        let host = crate::host::root::HostRoot::open(root)
            .map_err(|e| format!("cannot open host root {}: {e}", root.display()))?;
        let read = |name: &str| read_user_db(&host, root, name);
        let [p, g, su, sg] = [
            read("/etc/passwd")?,
            read("/etc/group")?,
            read("/etc/subuid")?,
            read("/etc/subgid")?,
        ];
        self.query_users.check_host(
            self.max_plans,
            (&p.0, &p.1),
            (&g.0, &g.1),
            (&su.0, &su.1),
            (&sg.0, &sg.1),
        )
    }

    /// Plans running now (their threads included).
    pub fn running(&self) -> usize {
        lock(&self.slots).iter().filter(|used| **used).count()
    }

    /// A request's `timeout_s` lowered to [`PlanLimits::timeout`] (which it gets when it
    /// names none).
    pub fn plan_timeout(&self, requested: Option<f64>) -> Option<f64> {
        let max = self.timeout.as_secs_f64();
        Some(requested.map_or(max, |t| t.min(max)))
    }

    /// The package's `SKYHOOK_SCRIPT_TIMEOUT` read as a run reads it
    /// ([`crate::local::script_timeout`]: its last value; unset or blank is the 600 s
    /// default) and lowered to [`PlanLimits::script_timeout`], in every entry of that name;
    /// a value the agent would refuse is set to that cap too, so no value passes it.
    pub fn bound_env(&self, env: &mut Vec<(String, String)>) {
        const NAME: &str = "SKYHOOK_SCRIPT_TIMEOUT";
        let max = self.script_timeout.as_secs().max(1);
        let bounded = crate::local::script_timeout(env)
            .map_or(max, |d| d.as_secs().min(max))
            .to_string();
        let mut found = false;
        for (_, v) in env.iter_mut().filter(|(k, _)| k == NAME) {
            v.clone_from(&bounded);
            found = true;
        }
        if !found {
            env.push((NAME.into(), bounded));
        }
    }
}

/// The line a plan without a cgroup of its own says first (on stderr), naming why and that
/// its memory and process bounds are per command; `None` when it has one.
pub(super) fn no_cgroup_line(sb: &sandbox::Sandbox, limits: &sandbox::Limits) -> Option<String> {
    let why = sb.cgroup.as_ref().err()?;
    Some(format!(
        "skyhook-agent serve: this plan has no cgroup of its own ({why}): --plan-memory \
         ({} MiB) and --plan-pids ({}) bound each command, not the plan",
        limits.memory >> 20,
        limits.max_pids
    ))
}

/// `ended` failed (code 1, its error first) when the kernel killed processes of the plan's
/// cgroup for its memory limit: what its queries answered is not to be trusted.
pub(super) fn fail_on_oom(
    (mut exit, extra): (serde_json::Value, super::event::Extra),
    sb: &sandbox::Sandbox,
    limits: &sandbox::Limits,
) -> (serde_json::Value, super::event::Extra) {
    let kills = sb.cgroup.as_ref().map_or(0, |c| c.oom_kills());
    if kills == 0 {
        return (exit, extra);
    }
    let msg = format!(
        "the plan's processes reached its memory limit ({} MiB, --plan-memory): the kernel \
         killed {kills} of them, so a query failed",
        limits.memory >> 20
    );
    let error = match exit.get("error").and_then(serde_json::Value::as_str) {
        Some(e) => format!("{msg}; {e}"),
        None => msg,
    };
    exit["code"] = 1.into();
    exit["error"] = error.into();
    (exit, extra)
}

/// A user database file of the host root (`name`, absolute: `/etc/passwd`, `/etc/group`,
/// ...), read through `host` (confined to `root`), as `(its path under root, as errors show
/// it; its text)`: a regular file of at most 64 MiB, read without blocking (a fifo there is
/// a start error, not a start that never returns); a missing file is empty (names nobody).
///
/// # Errors
/// It cannot be read or is no regular file: the error with its cause.
pub(crate) fn read_user_db(
    host: &crate::host::root::HostRoot,
    root: &std::path::Path,
    name: &str,
) -> Result<(String, String), String> {
    let text = match host.read_regular(std::path::Path::new(name), 64 << 20) {
        Ok(b) => b,
        Err(e) if e.is_not_found() => Vec::new(),
        Err(e) => {
            // The error with its cause (what is wrong with the file).
            let cause = std::error::Error::source(&e).map(|c| format!(": {c}"));
            return Err(format!("{e}{}", cause.unwrap_or_default()));
        }
    };
    let shown = root.join(name.trim_start_matches('/'));
    Ok((
        shown.display().to_string(),
        String::from_utf8_lossy(&text).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admit_refuses_over_the_cap_and_gives_places_back() {
        let l = PlanLimits {
            max_plans: 2,
            ..PlanLimits::default()
        };
        let a = l.admit().unwrap();
        let b = l.admit().unwrap();
        assert_eq!((a.slot(), b.slot()), (0, 1));
        assert!(l.admit().is_none());
        assert_eq!(l.running(), 2);
        assert_eq!(
            l.over_cap(),
            json!({"error": "too many plans running", "max_plans": 2})
        );
        drop(a);
        assert_eq!(l.running(), 1);
        // The freed slot is the next plan's (and so is its query user).
        assert_eq!(l.admit().map(|p| p.slot()), Some(0));
    }

    /// Serve's start-up check reads the host root's user database (not the server's): a
    /// root whose `/etc/group` gives an `auto` id is refused naming the file and line; one
    /// without the files, or a fixed query user, passes.
    #[test]
    fn auto_query_users_are_refused_when_the_host_roots_group_names_one() {
        let root = tempfile::tempdir().unwrap();
        let l = PlanLimits::default();
        assert_eq!(l.check_query_users(root.path()), Ok(()));
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::fs::write(
            root.path().join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(
            root.path().join("etc/group"),
            "root:x:0:\nplans:x:2147478692:\n",
        )
        .unwrap();
        let e = l.check_query_users(root.path()).unwrap_err();
        let want = format!(
            "--plan-query-user auto runs plans as ids 2147478690-2147478693 (--max-plans 4), \
             and {} line 2 gives a group of them (\"plans:x:2147478692:\")",
            root.path().join("etc/group").display()
        );
        assert!(e.starts_with(&want), "{e}");
        let two = PlanLimits {
            max_plans: 2,
            ..PlanLimits::default()
        };
        assert_eq!(two.check_query_users(root.path()), Ok(()));
        let fixed = PlanLimits {
            query_users: sandbox::QueryUsers::Fixed(sandbox::QueryUser::NOBODY),
            ..PlanLimits::default()
        };
        assert_eq!(fixed.check_query_users(root.path()), Ok(()));
    }

    #[test]
    fn the_script_timeout_and_plan_timeout_are_lowered_to_the_servers() {
        let l = PlanLimits::default();
        let mut env = vec![("SKYHOOK_SCRIPT_TIMEOUT".to_string(), "31536000".to_string())];
        l.bound_env(&mut env);
        assert_eq!(env[0].1, "60");
        let mut env = vec![("SKYHOOK_SCRIPT_TIMEOUT".to_string(), "5".to_string())];
        l.bound_env(&mut env);
        assert_eq!(env[0].1, "5");
        let mut env = Vec::new();
        l.bound_env(&mut env);
        assert_eq!(env, vec![("SKYHOOK_SCRIPT_TIMEOUT".into(), "60".into())]);
        // Blank (the agent's 600 s default) and what the agent refuses: the cap.
        for v in ["", " ", "\t", "abc", "0", "-5", "1.5"] {
            let mut env = vec![("SKYHOOK_SCRIPT_TIMEOUT".to_string(), v.to_string())];
            l.bound_env(&mut env);
            assert_eq!(env[0].1, "60", "{v:?}");
        }
        let mut env = vec![("SKYHOOK_SCRIPT_TIMEOUT".to_string(), " 7 ".to_string())];
        l.bound_env(&mut env);
        assert_eq!(env[0].1, "7");
        // The run reads the last entry: every entry is bounded.
        let mut env = vec![
            ("SKYHOOK_SCRIPT_TIMEOUT".to_string(), "5".to_string()),
            ("SKYHOOK_SCRIPT_TIMEOUT".to_string(), "3600".to_string()),
        ];
        l.bound_env(&mut env);
        assert_eq!(env[1].1, "60");
        assert_eq!(crate::local::script_timeout(&env).unwrap().as_secs(), 60);
        assert_eq!(l.plan_timeout(None), Some(300.0));
        assert_eq!(l.plan_timeout(Some(5000.0)), Some(300.0));
        assert_eq!(l.plan_timeout(Some(2.5)), Some(2.5));
    }
}
