//! [`Config`]: the settings of a [`super::exec::Service`], the options of
//! `skyhook-agent serve` as the command line (`cli::serve`) checked them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::plan_limits::PlanLimits;
use super::secrets::Secrets;
use crate::process::cgroup;

/// Settings of a [`super::exec::Service`] (the options of `skyhook-agent serve`).
#[derive(Debug, Clone)]
pub struct Config {
    /// The host root (`--root`): sh steps run chrooted there (no chroot when it is `/`),
    /// Rhai steps use the host API confined to it.
    pub root: PathBuf,
    /// Where a step runs when it names no `workdir` (host path, `--workdir`; default `/`).
    pub workdir: PathBuf,
    /// What runs a sh `command` (`--shell`, default `["/bin/sh", "-c"]`); the command is the
    /// last argument.
    pub shell: Vec<String>,
    /// Secrets dir and allowlist.
    pub secrets: Secrets,
    /// Events kept per execution (`--ring-lines`).
    pub ring_lines: usize,
    /// Bytes of event lines kept in all (`--ring-bytes`).
    pub ring_bytes: usize,
    /// Executions running at once (`--max-running`); one more is `429`.
    pub max_running: usize,
    /// Ended executions kept for status and replay (oldest evicted first).
    pub keep_finished: usize,
    /// Heartbeat interval on a stream while the execution runs (`--alive-every`).
    pub alive_every: Duration,
    /// Where `id -> pid + start time` survives a restart (`--state-dir`); `None`: memory only.
    pub state_dir: Option<PathBuf>,
    /// Grace between SIGTERM and SIGKILL when a cancel names none, and after a timeout.
    pub default_grace: Duration,
    /// Where each execution gets its own cgroup (`--cgroup-root`, detected by default);
    /// `None`: its process group and the subreaper sweep are its boundary.
    pub cgroup: Option<cgroup::Root>,
    /// Bounds of package plans (`--max-plans`, `--plan-*`).
    pub plan: PlanLimits,
}

impl Config {
    /// Defaults for everything but the root: workdir `/`, `/bin/sh -c`, no secrets, 10000
    /// lines, 64 MiB, 16 running, 1024 ended kept, 10 s heartbeats, no state dir, 10 s grace,
    /// no cgroup, [`PlanLimits::default`].
    pub fn new(root: &Path) -> Config {
        Config {
            root: root.to_path_buf(),
            workdir: PathBuf::from("/"),
            shell: vec!["/bin/sh".into(), "-c".into()],
            secrets: Secrets {
                dir: PathBuf::from("/var/run/secrets/skyhook"),
                allow: Vec::new(),
            },
            ring_lines: 10_000,
            ring_bytes: 64 << 20,
            max_running: 16,
            keep_finished: 1024,
            alive_every: Duration::from_secs(10),
            state_dir: None,
            default_grace: Duration::from_secs(10),
            cgroup: None,
            plan: PlanLimits::default(),
        }
    }
}
