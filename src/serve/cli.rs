//! `skyhook-agent serve [OPTIONS]`: parse the options of remote-api.md "Starting it", refuse
//! unsafe combinations, listen, and run until SIGTERM/SIGINT (SIGHUP re-reads the tokens
//! file). Prints `skyhook-agent serve: listening on ADDR` on stderr per listener.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde_json::json;

use super::auth::Auth;
use super::exec::{Config, Service};
use super::http::{Limits, Listener, Server, default_max_connections, serve};
use super::secrets::Secrets;

/// Options of `skyhook-agent serve`.
#[derive(Debug, Parser)]
#[command(
    name = "skyhook-agent serve",
    about = "Serve the remote step API (docs: remote-api.md)"
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
    /// Engines allowed: `NAME SHA256HEX` per line; re-read on SIGHUP.
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

/// Run `skyhook-agent serve` with `args` (after `serve`); the exit status.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let a = match ServeArgs::try_parse_from(std::iter::once(OsString::from("serve")).chain(args)) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match run(a) {
        Ok(()) => 0,
        Err(msg) => {
            eprintln!("skyhook-agent serve: error: {msg}");
            1
        }
    }
}

fn run(a: ServeArgs) -> Result<(), String> {
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(c), Some(k)) => Some(super::tls::server_config(c, k, a.client_ca.as_deref())?),
        (None, None) if a.client_ca.is_none() => None,
        _ => return Err("--tls-cert and --tls-key go together (--client-ca needs them)".into()),
    };
    if a.listen.is_none() && a.unix.is_none() {
        return Err("give --listen ADDR and/or --unix PATH".into());
    }
    if let Some(addr) = a.listen
        && !addr.ip().is_loopback()
        && tls.is_none()
        && !a.insecure_plain_http
    {
        return Err(format!(
            "refusing plain HTTP on non-loopback {addr}: give --tls-cert/--tls-key, \
             or --insecure-plain-http to do it anyway"
        ));
    }
    let auth = match (&a.tokens_file, a.insecure_no_auth) {
        (Some(f), _) => {
            let auth = Auth::from_file(f).map_err(|e| e.to_string())?;
            if let Some(w) = super::auth::empty_warning(f, auth.engine_count()) {
                eprintln!("skyhook-agent serve: WARNING: {w}");
            }
            auth
        }
        (None, true) => {
            eprintln!("skyhook-agent serve: WARNING: --insecure-no-auth: anyone can run steps");
            Auth::insecure()
        }
        (None, false) => {
            return Err("--tokens-file FILE is required (or --insecure-no-auth)".into());
        }
    };
    let shell: Vec<String> = a.shell.split_whitespace().map(String::from).collect();
    if shell.is_empty() {
        return Err("--shell is empty".into());
    }
    if a.header_timeout.is_zero() || a.idle_timeout.is_zero() || a.max_connections == Some(0) {
        return Err(
            "--header-timeout, --idle-timeout and --max-connections must be above 0".into(),
        );
    }
    let json_log = match a.log_format.as_str() {
        "json" => true,
        "text" => false,
        other => return Err(format!("--log-format {other:?}: text or json")),
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
        Some(p) => {
            Some(crate::process::cgroup::Root::at(p).map_err(|e| format!("--cgroup-root {e}"))?)
        }
        None => crate::process::cgroup::Root::detect()
            .map_err(|why| no_cgroup = format!(": no usable cgroup ({why})"))
            .ok(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async move {
        let svc = Service::new(cfg, json_log).map_err(|e| format!("state dir: {e}"))?;
        eprintln!(
            "skyhook-agent serve: execution boundary: {}{no_cgroup}",
            svc.boundary()
        );
        let recovered = svc.recovered();
        if !recovered.is_empty() {
            eprintln!(
                "skyhook-agent serve: {} execution(s) of an earlier server still running, \
                 cancellable by id: {}",
                recovered.len(),
                recovered.join(", ")
            );
        }
        let limits = Limits {
            header_timeout: a.header_timeout,
            idle_timeout: a.idle_timeout,
            max_connections: a
                .max_connections
                .unwrap_or_else(|| default_max_connections(a.max_running.max(1))),
        };
        let server = Server::new(svc.clone(), auth.clone(), limits);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        if let Some(addr) = a.listen {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("listen on {addr}: {e}"))?;
            let local = l.local_addr().map_err(|e| e.to_string())?;
            let listener = match &tls {
                Some(cfg) => {
                    eprintln!("skyhook-agent serve: listening on {local} (TLS)");
                    Listener::Tls(l, tokio_rustls::TlsAcceptor::from(cfg.clone()))
                }
                None => {
                    eprintln!("skyhook-agent serve: listening on {local}");
                    Listener::Tcp(l)
                }
            };
            tasks.push(tokio::spawn(serve(
                listener,
                server.clone(),
                stop_rx.clone(),
            )));
        }
        if let Some(path) = &a.unix {
            let l = bind_unix(path)
                .and_then(tokio::net::UnixListener::from_std)
                .map_err(|e| format!("listen on {}: {e}", path.display()))?;
            eprintln!("skyhook-agent serve: listening on unix:{}", path.display());
            tasks.push(tokio::spawn(serve(
                Listener::Unix(l),
                server.clone(),
                stop_rx.clone(),
            )));
        }
        use tokio::signal::unix::{SignalKind, signal};
        let sig = |k| signal(k).map_err(|e| format!("signal handler: {e}"));
        let (mut term, mut int, mut hup) = (
            sig(SignalKind::terminate())?,
            sig(SignalKind::interrupt())?,
            sig(SignalKind::hangup())?,
        );
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = hup.recv() => match auth.reload() {
                    Ok(n) => {
                        let mut a = json!({"event": "tokens reloaded", "engines": n});
                        if let Some(f) = auth.file()
                            && let Some(w) = super::auth::empty_warning(f, n)
                        {
                            a["warning"] = w.into();
                        }
                        svc.audit(a);
                    }
                    Err(e) => svc.audit(json!({"event": "tokens reload failed (old set kept)",
                                                "error": e.to_string()})),
                },
            }
        }
        svc.audit(json!({"event": "shutdown", "running": svc.running()}));
        let _ = stop_tx.send(true);
        for t in tasks {
            let _ = t.await;
        }
        if let Some(path) = &a.unix {
            let _ = std::fs::remove_file(path);
        }
        svc.shutdown(a.shutdown_grace).await;
        Ok(())
    })
}

/// Listen on the Unix socket `path` with mode 0600 whatever the umask: bound under a
/// temporary name beside it, chmod-ed, then renamed over `path` (an existing socket there is
/// replaced; anything else is refused). Non-blocking, for tokio.
///
/// # Errors
/// `path` exists and is not a socket, or binding, chmod or rename fail.
fn bind_unix(path: &std::path::Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(m) = std::fs::symlink_metadata(path)
        && !m.file_type().is_socket()
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "exists and is not a socket",
        ));
    }
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(name);
    let _ = std::fs::remove_file(&tmp);
    let l = std::os::unix::net::UnixListener::bind(&tmp)?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    l.set_nonblocking(true)?;
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unix_socket_is_0600_whatever_the_umask_and_replaces_only_a_socket() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let sock = d.path().join("serve.sock");
        let l = bind_unix(&sock).unwrap();
        let mode = std::fs::metadata(&sock).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        std::os::unix::net::UnixStream::connect(&sock).unwrap();
        drop(l);
        // a stale socket is replaced, a regular file is not
        bind_unix(&sock).unwrap();
        let file = d.path().join("file");
        std::fs::write(&file, "keep").unwrap();
        let e = bind_unix(&file).unwrap_err();
        assert_eq!(e.to_string(), "exists and is not a socket");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(left.len(), 2, "{left:?}");
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
