//! The command line of `skyhook-agent serve [OPTIONS]` (docs/remote.md, "Starting it"): the
//! options, the refusal of unsafe or incomplete combinations ([`startup`]), and [`main`],
//! which starts the server ([`crate::serve::start`]) and maps the result onto the exit table.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use super::exit::{CliError, ExitStatus};
use crate::serve::auth::Auth;
use crate::serve::exec::Config;
use crate::serve::http::{Limits, default_max_connections};
use crate::serve::secrets::Secrets;
use crate::serve::start::{ServeError, Startup};

/// Options of `skyhook-agent serve`.
#[derive(Debug, Parser)]
#[command(
    name = "skyhook-agent serve",
    bin_name = "skyhook-agent serve",
    version = super::agent::VERSION,
    about = "Serve the remote step API (docs/remote.md)"
)]
pub struct ServeArgs {
    /// TCP address to listen on (loopback unless --insecure-plain-http; port 0 picks one).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Unix socket to listen on (created; an existing socket file is replaced).
    #[arg(long, value_name = "PATH")]
    pub unix: Option<PathBuf>,
    /// The host root the steps act on.
    #[arg(long, value_name = "DIR", default_value = "/root")]
    pub root: PathBuf,
    /// Engines allowed: `NAME SHA256HEX [run|plan]` per line (`plan`: package plans only, see
    /// docs/fleet.md); re-read on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub tokens_file: Option<PathBuf>,
    /// Accept any caller (warns at startup and on every request).
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// Allow plain HTTP on a non-loopback address.
    #[arg(long)]
    pub insecure_plain_http: bool,
    /// Where Secrets are mounted (`<dir>/<name>/<key>`).
    #[arg(long, value_name = "DIR", default_value = "/var/run/secrets/skyhook")]
    pub secrets_dir: PathBuf,
    /// A Secret name steps may ask for (repeatable; none by default).
    #[arg(long = "allow-secret", value_name = "NAME")]
    pub allow_secret: Vec<String>,
    /// Keeps `id -> pid + start time` so cancel works across a restart.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Where each execution (sh or Rhai) gets its own cgroup (`<DIR>/skyhook-serve/...`; DIR
    /// on a cgroup v2 or v1 filesystem), or `none` for the process group + subreaper boundary.
    /// Default: this process's own cgroup v2, else v1 pids, else freezer, else none.
    #[arg(long, value_name = "DIR|none")]
    pub cgroup_root: Option<PathBuf>,
    /// Events kept per execution.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub ring_lines: usize,
    /// Bytes of events kept in all (`64MiB`, `512KiB`, `1000`).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    pub ring_bytes: usize,
    /// Heartbeat interval (`10s`, `500ms`, `2m`; 0 = the default 10 s).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub alive_every: Duration,
    /// Executions running at once; one more gets 429.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub max_running: usize,
    /// Where a step runs when it names no workdir (host path).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub workdir: PathBuf,
    /// What runs a sh command, split on whitespace (the command is appended).
    #[arg(long, value_name = "CMD", default_value = "/bin/sh -c")]
    pub shell: String,
    /// TLS certificate chain (PEM) for --listen; needs --tls-key.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM); needs --tls-cert.
    #[arg(long, value_name = "FILE")]
    pub client_ca: Option<PathBuf>,
    /// Audit log format on stderr: text or json.
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    pub log_format: String,
    /// On SIGTERM: how long running executions may finish before they are cancelled.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// A request head must be complete this long after its first byte (or after the
    /// connection opened), and a request body this long after its head.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: Duration,
    /// Close a connection with no request in flight after this (a stream of a running
    /// execution is in flight).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Connections open at once; one more sheds the oldest idle one (default: 1024, less
    /// when the open-files limit is lower: the limit - 64 - 8 × --max-running).
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Package plans running at once (docs/fleet.md "Limits"); one more gets 429.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub max_plans: usize,
    /// Longest wall-clock time of a package plan: a request's timeout_s is lowered to it.
    #[arg(long, value_name = "DURATION", default_value = "300s", value_parser = parse_duration)]
    pub plan_timeout: Duration,
    /// Wall-clock limit of each .rhai step of a package plan (the package's
    /// SKYHOOK_SCRIPT_TIMEOUT is lowered to it; each step also stops at
    /// --plan-max-operations).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub plan_script_timeout: Duration,
    /// Rhai operations of each .rhai step of a package plan (the agent's limit by default,
    /// under a second of script work); a step past it fails with "operations limit
    /// exceeded".
    #[arg(long, value_name = "N", default_value_t = 5_000_000)]
    pub plan_max_operations: u64,
    /// Memory of a package plan's commands together (the memory limit of the plan's own
    /// cgroup, v2 or v1) and address space of each (RLIMIT_AS).
    #[arg(long, value_name = "SIZE", default_value = "4GiB", value_parser = parse_size)]
    pub plan_memory: usize,
    /// What the server may keep of a package plan's planned effects, over all its steps,
    /// modes and packages (a write's whole content; every effect its record, its text in
    /// the report and the events), and of the real root's answers it remembers; one more
    /// effect or answer fails the plan.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    pub plan_bytes: usize,
    /// CPU time of each command a package plan runs (RLIMIT_CPU, whole seconds).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub plan_cpu: Duration,
    /// Processes of a package plan at once: pids.max of the plan's own cgroup, and pid_max
    /// of its PID namespace (at most N-1; Linux >= 6.14; at least 301).
    #[arg(long, value_name = "N", default_value_t = 512)]
    pub plan_pids: u32,
    /// Refuse every command of a package plan a Unix socket (socket(AF_UNIX) fails), so no
    /// query reaches a host daemon (systemd, D-Bus, containerd) through one, not even an
    /// allowed one; queries that need one (systemctl is-active) then fail.
    #[arg(long)]
    pub plan_deny_unix_sockets: bool,
    /// A Unix socket of the host root (a path under --root, absolute) a package plan's
    /// command may connect to, as its query user; repeatable; `none` for none. Every other
    /// connect to a Unix socket is refused (EACCES), and no datagram Unix socket is made.
    #[arg(
        long,
        value_name = "PATH|none",
        default_value = "/run/dbus/system_bus_socket",
        value_parser = parse_socket_path
    )]
    pub plan_allow_socket: Vec<PathBuf>,
    /// User and group ids the commands of a package plan run as: auto (each running plan
    /// its own, 2147478690 + its slot under --max-plans, at most 606; serve refuses to
    /// start when the host root's /etc/passwd, group, subuid or subgid gives one), UID or
    /// UID:GID (numbers, every plan's; UID alone is UID:UID; 0 refused). No capability,
    /// no supplementary group, no_new_privs: a query reaches only what that user may.
    #[arg(long, value_name = "auto|UID[:GID]", default_value = "auto")]
    pub plan_query_user: crate::process::sandbox::QueryUsers,
    /// Who a package plan's connections to the D-Bus system bus (an allowed socket named
    /// system_bus_socket) are made as, so the bus knows the user (the reference dbus-daemon
    /// drops a uid its user database lacks, as auto's ids): a user of the host root's
    /// /etc/passwd by NAME or UID (default nobody; without one, the query user, said at
    /// start), UID:GID as given, or query (the query user). 0 refused. A query's EXTERNAL
    /// claim of its own uid is rewritten to this user's; at most 8 such connections per
    /// plan and 32 in all at once (then ECONNREFUSED).
    #[arg(long, value_name = "NAME|UID|UID:GID|query")]
    pub plan_bus_user: Option<crate::process::sandbox::BusUser>,
}

/// An absolute path of the host root without `..` (`--plan-allow-socket`), or `none` (an
/// empty path).
///
/// # Errors
/// Relative, or with a `..`.
pub fn parse_socket_path(s: &str) -> Result<PathBuf, String> {
    if s == "none" {
        return Ok(PathBuf::new());
    }
    let p = PathBuf::from(s);
    if !p.is_absolute() || p.components().any(|c| c == std::path::Component::ParentDir) {
        return Err(format!(
            "{s:?}: a socket's absolute path in the host root (no ..), or none"
        ));
    }
    Ok(p)
}

/// The `--plan-allow-socket` paths under `root`, as the server sees them (`none`, an empty
/// path, leaves out every one).
fn allowed_sockets(root: &std::path::Path, paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .filter(|p| !p.as_os_str().is_empty())
        .map(|p| root.join(p.strip_prefix("/").unwrap_or(p)))
        .collect()
}

/// The user `--plan-bus-user` names (`given`; `None`: the default, `nobody`), looked up in
/// the host root's `/etc/passwd` (through [`crate::host::root::HostRoot`], confined to
/// `root`; a missing file names nobody). `None`: the query user's (`query`, or the default
/// on a host without `nobody`: then a line on stderr says so, when `allowed` holds a
/// system bus).
///
/// # Errors
/// The root or the file cannot be read (not a regular file: a fifo); a user given is not
/// in it; the user given, or the default's `nobody` entry, is root's or malformed.
fn bus_user(
    root: &std::path::Path,
    given: Option<&crate::process::sandbox::BusUser>,
    allowed: &[PathBuf],
) -> Result<Option<crate::process::sandbox::QueryUser>, String> {
    use crate::process::sandbox::BusUser;
    if given == Some(&BusUser::Query) {
        return Ok(None);
    }
    let host = crate::host::root::HostRoot::open(root)
        .map_err(|e| format!("cannot open host root {}: {e}", root.display()))?;
    let (shown, passwd) = crate::serve::plan_limits::read_user_db(&host, root, "/etc/passwd")?;
    let passwd = (shown.as_str(), passwd.as_str());
    let Some(given) = given else {
        // An entry of `nobody` that is root's or malformed is a start error, as for a user
        // given; only a file without one falls back.
        if BusUser::listed(passwd.1, "nobody") {
            return BusUser::Named("nobody".into()).resolve(passwd);
        }
        if allowed
            .iter()
            .any(|p| p.file_name() == Some("system_bus_socket".as_ref()))
        {
            eprintln!(
                "skyhook-agent serve: {shown} has no user nobody: a package plan's D-Bus \
                 queries reach the system bus as their query user (--plan-bus-user query), \
                 whom the reference dbus-daemon refuses with --plan-query-user auto; give \
                 --plan-bus-user NAME"
            );
        }
        return Ok(None);
    };
    given.resolve(passwd)
}

/// `64MiB`, `1KiB`, `10MB`, `123` → bytes.
///
/// # Errors
/// Not a number with an optional unit.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: usize = n.parse().map_err(|_| format!("bad size {s:?}"))?;
    let mult = match unit {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "KB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(format!("bad size unit in {s:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} too large"))
}

/// `10s`, `500ms`, `2m`, `1h`, `10` (seconds) → a duration.
///
/// # Errors
/// Not a number with an optional unit.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("bad duration unit in {s:?}")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("bad duration {s:?}: {e}"))
}

/// The clap definition of `skyhook-agent serve` (its `--help` and completions).
pub fn command() -> clap::Command {
    <ServeArgs as clap::CommandFactory>::command()
}

/// Run `skyhook-agent serve` with `args` (after `serve`).
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitStatus {
    let a = match ServeArgs::try_parse_from(std::iter::once(OsString::from("serve")).chain(args)) {
        Ok(a) => a,
        Err(e) => {
            return super::stdout::status(
                "skyhook-agent serve",
                e.print(),
                ExitStatus::of_clap(&e),
            );
        }
    };
    match startup(a).and_then(crate::serve::start::run) {
        Ok(()) => ExitStatus::Done,
        Err(e) => {
            eprintln!("skyhook-agent serve: error: {e}");
            CliError::Serve(e).exit_status()
        }
    }
}

/// Check the options and turn them into what the server starts with: TLS, auth, the
/// service config, listeners and limits. Prints the startup warnings (no auth, no state dir,
/// an empty tokens file).
///
/// # Errors
/// [`ServeError::Options`] for a refused or incomplete combination, [`ServeError::Tokens`],
/// [`ServeError::Tls`], [`ServeError::Cgroup`].
pub fn startup(a: ServeArgs) -> Result<Startup, ServeError> {
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(c), Some(k)) => Some(
            crate::serve::tls::server_config(c, k, a.client_ca.as_deref())
                .map_err(ServeError::Tls)?,
        ),
        (None, None) if a.client_ca.is_none() => None,
        _ => {
            return Err(ServeError::Options(
                "--tls-cert and --tls-key go together (--client-ca needs them)".into(),
            ));
        }
    };
    if a.listen.is_none() && a.unix.is_none() {
        return Err(ServeError::Options(
            "give --listen ADDR and/or --unix PATH".into(),
        ));
    }
    if let Some(addr) = a.listen
        && !addr.ip().is_loopback()
        && tls.is_none()
        && !a.insecure_plain_http
    {
        return Err(ServeError::Options(format!(
            "refusing plain HTTP on non-loopback {addr}: give --tls-cert/--tls-key, \
             or --insecure-plain-http to do it anyway"
        )));
    }
    let auth = match (&a.tokens_file, a.insecure_no_auth) {
        (Some(f), _) => {
            let auth = Auth::from_file(f).map_err(ServeError::Tokens)?;
            if let Some(w) = crate::serve::auth::empty_warning(f, auth.engine_count()) {
                eprintln!("skyhook-agent serve: WARNING: {w}");
            }
            auth
        }
        (None, true) => {
            eprintln!("skyhook-agent serve: WARNING: --insecure-no-auth: anyone can run steps");
            Auth::insecure()
        }
        (None, false) => {
            return Err(ServeError::Options(
                "--tokens-file FILE is required (or --insecure-no-auth)".into(),
            ));
        }
    };
    match std::fs::metadata(&a.root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(ServeError::Options(format!(
                "--root {}: not a directory",
                a.root.display()
            )));
        }
        Err(e) => {
            return Err(ServeError::Options(format!(
                "--root {}: {e}",
                a.root.display()
            )));
        }
    }
    let shell: Vec<String> = a.shell.split_whitespace().map(String::from).collect();
    if shell.is_empty() {
        return Err(ServeError::Options("--shell is empty".into()));
    }
    if a.header_timeout.is_zero() || a.idle_timeout.is_zero() || a.max_connections == Some(0) {
        return Err(ServeError::Options(
            "--header-timeout, --idle-timeout and --max-connections must be above 0".into(),
        ));
    }
    let json_log = match a.log_format.as_str() {
        "json" => true,
        "text" => false,
        other => {
            return Err(ServeError::Options(format!(
                "--log-format {other:?}: text or json"
            )));
        }
    };
    let mut cfg = Config::new(&a.root);
    cfg.workdir = a.workdir.clone();
    cfg.shell = shell;
    cfg.secrets = Secrets {
        dir: a.secrets_dir.clone(),
        allow: a.allow_secret.clone(),
    };
    cfg.ring_lines = a.ring_lines;
    cfg.ring_bytes = a.ring_bytes;
    cfg.max_running = a.max_running.max(1);
    if !a.alive_every.is_zero() {
        cfg.alive_every = a.alive_every;
    }
    cfg.plan.max_plans = a.max_plans.max(1);
    cfg.plan.timeout = a.plan_timeout.max(Duration::from_secs(1));
    cfg.plan.script_timeout = a.plan_script_timeout.max(Duration::from_secs(1));
    cfg.plan.planned_bytes = a.plan_bytes as u64;
    cfg.plan.max_operations = a.plan_max_operations.max(1);
    cfg.plan.sandbox = crate::process::sandbox::Limits {
        memory: a.plan_memory as u64,
        cpu_seconds: a.plan_cpu.as_secs().max(1),
        max_pids: a.plan_pids.max(crate::process::sandbox::MIN_PID_MAX),
        unix_sockets: !a.plan_deny_unix_sockets,
        allow_sockets: allowed_sockets(&a.root, &a.plan_allow_socket),
        ..crate::process::sandbox::Limits::default()
    };
    if !a.plan_deny_unix_sockets && !crate::process::sandbox::brokers_sockets() {
        eprintln!(
            "skyhook-agent serve: this kernel has no seccomp user notification with ADDFD \
             (Linux >= 5.9): a package plan's commands may make no Unix socket, as with \
             --plan-deny-unix-sockets (systemctl queries fail)"
        );
    }
    cfg.plan.query_users = a.plan_query_user;
    cfg.plan
        .check_query_users(&a.root)
        .map_err(ServeError::Options)?;
    cfg.plan.sandbox.bus_user = bus_user(
        &a.root,
        a.plan_bus_user.as_ref(),
        &cfg.plan.sandbox.allow_sockets,
    )
    .map_err(ServeError::Options)?;
    cfg.state_dir = a.state_dir.clone();
    if cfg.state_dir.is_none() {
        eprintln!(
            "skyhook-agent serve: no --state-dir: the execution -> pid map is in memory only, \
             cancel across a restart is best-effort"
        );
    }
    let mut no_cgroup = String::new();
    cfg.cgroup = match a.cgroup_root.as_deref() {
        Some(p) if p.as_os_str() == "none" => None,
        Some(p) => Some(
            crate::process::cgroup::Root::at(p)
                .map_err(|e| ServeError::Cgroup(format!("--cgroup-root {e}")))?,
        ),
        None => crate::process::cgroup::Root::detect()
            .map_err(|why| no_cgroup = format!(": no usable cgroup ({why})"))
            .ok(),
    };
    let limits = Limits {
        header_timeout: a.header_timeout,
        idle_timeout: a.idle_timeout,
        max_connections: a
            .max_connections
            .unwrap_or_else(|| default_max_connections(a.max_running.max(1))),
    };
    Ok(Startup {
        cfg,
        json_log,
        auth,
        tls,
        listen: a.listen,
        unix: a.unix,
        limits,
        shutdown_grace: a.shutdown_grace,
        no_cgroup,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `serve --help` names the project's doc, docs/remote.md, not the contract's remote-api.md
    /// (outside this repository).
    #[test]
    fn help_cites_the_projects_remote_doc() {
        let help = <ServeArgs as clap::CommandFactory>::command()
            .render_help()
            .to_string();
        assert!(help.contains("(docs/remote.md)"), "{help}");
        assert!(!help.contains("remote-api.md"), "{help}");
    }

    /// `serve --version` exits 0 (it was a usage error, 2); the usage line names the
    /// command as it is typed (it said `serve [OPTIONS]`).
    #[test]
    fn version_and_usage_line() {
        assert_eq!(main(["--version"].map(OsString::from)), ExitStatus::Done);
        let help = command().render_help().to_string();
        assert!(
            help.contains("Usage: skyhook-agent serve [OPTIONS]"),
            "{help}"
        );
    }

    /// A missing or non-directory `--root` is refused at start (the server started and every
    /// step failed).
    #[test]
    fn root_must_be_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        for (root, why) in [
            (dir.path().join("missing"), "No such file or directory"),
            (file, "not a directory"),
        ] {
            let args = [
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--insecure-no-auth",
                "--root",
            ]
            .map(OsString::from)
            .into_iter()
            .chain([root.clone().into_os_string()]);
            let a = ServeArgs::try_parse_from(args).unwrap();
            match startup(a) {
                Err(e @ ServeError::Options(_)) => {
                    let text = e.to_string();
                    assert!(
                        text.contains(&format!("--root {}: {why}", root.display())),
                        "{text}"
                    );
                    assert_eq!(CliError::Serve(e).exit_status(), ExitStatus::Failure);
                }
                other => panic!("{root:?}: {:?}", other.map(|_| ())),
            }
        }
    }

    /// `--plan-query-user auto` (the default) is refused at start when the host root's
    /// `/etc/passwd` gives one of its ids to a user, and with more `--max-plans` than it has
    /// ids; both name why.
    #[test]
    fn auto_query_users_taken_by_the_host_are_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        let passwd = dir.path().join("etc/passwd");
        std::fs::write(&passwd, "svc:x:2147478691:100::/:/bin/sh\n").unwrap();
        for (extra, why) in [
            (
                None,
                format!(
                    "{} line 1 gives a user or its group of them",
                    passwd.display()
                ),
            ),
            (
                Some("607"),
                "--plan-query-user auto has 606 ids, fewer than --max-plans 607".to_string(),
            ),
        ] {
            let args = [
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--insecure-no-auth",
                "--root",
            ]
            .map(OsString::from)
            .into_iter()
            .chain([dir.path().as_os_str().to_owned()])
            .chain(
                extra
                    .map(|n| ["--max-plans".into(), n.into()])
                    .into_iter()
                    .flatten(),
            );
            let a = ServeArgs::try_parse_from(args).unwrap();
            match startup(a) {
                Err(e @ ServeError::Options(_)) => {
                    assert!(e.to_string().contains(&why), "{e}");
                }
                other => panic!("{extra:?}: {:?}", other.map(|_| ())),
            }
        }
    }

    /// `--plan-bus-user`: by default `nobody` of the host root's `/etc/passwd` (not the
    /// server's), the query user's without one; a name or uid found there takes its ids; a
    /// name or uid given and not there, root's, or a malformed value is refused naming it;
    /// `UID:GID` is taken as given, `query` is the query user's.
    #[test]
    fn the_bus_user_is_the_host_roots() {
        let dir = tempfile::tempdir().unwrap();
        let start = |extra: &[&str]| {
            let args = ["serve", "--listen", "127.0.0.1:0", "--insecure-no-auth"]
                .iter()
                .chain(extra)
                .map(OsString::from)
                .chain(["--root".into(), dir.path().as_os_str().to_owned()]);
            let a = ServeArgs::try_parse_from(args).map_err(|e| e.to_string())?;
            startup(a)
                .map(|s| s.cfg.plan.sandbox.bus_user.map(|u| (u.uid(), u.gid())))
                .map_err(|e| e.to_string())
        };
        // No /etc/passwd: no nobody, so the query user's; given names are not found.
        assert_eq!(start(&[]), Ok(None));
        let passwd = dir.path().join("etc/passwd");
        let e = start(&["--plan-bus-user", "nobody"]).unwrap_err();
        assert!(
            e.contains(&format!(
                "--plan-bus-user nobody: no such user in {}",
                passwd.display()
            )),
            "{e}"
        );
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::write(
            &passwd,
            "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65533::/:/bin/false\n\
             messagebus:x:101:102::/:/bin/false\nodd:x:12:0::/:/bin/false\n",
        )
        .unwrap();
        assert_eq!(start(&[]), Ok(Some((65534, 65533))));
        assert_eq!(
            start(&["--plan-bus-user", "messagebus"]),
            Ok(Some((101, 102)))
        );
        assert_eq!(start(&["--plan-bus-user", "101"]), Ok(Some((101, 102))));
        assert_eq!(
            start(&["--plan-bus-user", "4000:4001"]),
            Ok(Some((4000, 4001)))
        );
        assert_eq!(start(&["--plan-bus-user", "query"]), Ok(None));
        for (given, why) in [
            (
                "root",
                "--plan-bus-user root: user 0 group 0, root's".to_string(),
            ),
            ("0", "--plan-bus-user 0: user 0 group 0, root's".to_string()),
            (
                "odd",
                "--plan-bus-user odd: user 12 group 0, root's".to_string(),
            ),
            (
                "0:5",
                "--plan-bus-user 0:5: user 0 group 5, root's".to_string(),
            ),
            (
                "ghost",
                format!(
                    "--plan-bus-user ghost: no such user in {}",
                    passwd.display()
                ),
            ),
            ("a/b", "\"a/b\": expected a user's name or uid".to_string()),
            ("1:x", "\"1:x\": expected a user's name or uid".to_string()),
        ] {
            let e = start(&["--plan-bus-user", given]).unwrap_err();
            assert!(e.contains(&why), "{given}: {e}");
        }
    }

    /// Every option of `serve` is in docs/remote.md's "Starting it" table (`--alive-every`,
    /// `--workdir`, `--shell` and `--log-format` were in none of its pages).
    #[test]
    fn every_option_is_documented() {
        let doc = include_str!("../../docs/remote.md");
        let start = doc
            .find("\n## Starting it\n")
            .expect("a Starting it section");
        let end = start + 1 + doc[start + 1..].find("\n## ").unwrap();
        let section = &doc[start..end];
        for arg in command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if matches!(long, "help" | "version") {
                continue;
            }
            assert!(section.contains(&format!("`--{long}")), "--{long}");
        }
    }

    /// `--plan-allow-socket`: by default the D-Bus system bus under `--root`; repeatable;
    /// `none` for none; a relative path or one with `..` is refused, naming it.
    #[test]
    fn allowed_sockets_are_under_the_root() {
        let parse = |extra: &[&str]| {
            let args = ["serve", "--listen", "127.0.0.1:0", "--root", "/host"]
                .iter()
                .chain(extra)
                .map(OsString::from);
            ServeArgs::try_parse_from(args)
                .map(|a| allowed_sockets(&a.root, &a.plan_allow_socket))
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            parse(&[]).unwrap(),
            [PathBuf::from("/host/run/dbus/system_bus_socket")]
        );
        assert_eq!(
            parse(&[
                "--plan-allow-socket",
                "/run/a.sock",
                "--plan-allow-socket",
                "/b"
            ])
            .unwrap(),
            [PathBuf::from("/host/run/a.sock"), PathBuf::from("/host/b")]
        );
        assert_eq!(
            parse(&["--plan-allow-socket", "none"]).unwrap(),
            Vec::<PathBuf>::new()
        );
        for bad in ["run/a.sock", "/run/../etc/x"] {
            let e = parse(&["--plan-allow-socket", bad]).unwrap_err();
            assert!(
                e.contains(&format!("{bad:?}: a socket's absolute path")),
                "{e}"
            );
        }
    }

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert!(parse_size("1XB").is_err());
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("x").is_err());
    }
}
