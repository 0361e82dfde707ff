//! Start the remote step API from checked options ([`Startup`], built by the command line,
//! `cli::serve`): listen on TCP (plain or TLS) and/or a Unix socket, and run until
//! SIGTERM/SIGINT (SIGHUP re-reads the tokens file). Prints `skyhook-agent serve: listening
//! on ADDR` on stderr per listener.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::auth::Auth;
use super::exec::{Config, Service};
use super::http::{Limits, Listener, Server, serve};

/// Why `serve` refused its options or could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The options are refused (unsafe) or incomplete; the message names them.
    #[error("{0}")]
    Options(String),
    /// The tokens file cannot be read or parsed.
    #[error(transparent)]
    Tokens(#[from] super::auth::TokensError),
    /// The TLS certificate, key or client CA cannot be used.
    #[error("{0}")]
    Tls(String),
    /// `--cgroup-root` is not a usable cgroup directory.
    #[error("{0}")]
    Cgroup(String),
    /// The async runtime could not be started.
    #[error("tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The state dir cannot be read or written.
    #[error("state dir: {0}")]
    StateDir(#[source] std::io::Error),
    /// A listener cannot be opened (`what` is the address or `unix:PATH`).
    #[error("listen on {what}: {source}")]
    Listen {
        /// The address.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The signal handlers cannot be installed.
    #[error("signal handler: {0}")]
    Signal(#[source] std::io::Error),
}

/// Everything the server starts with, checked.
pub struct Startup {
    /// The service's config (root, shell, secrets, rings, state dir, cgroup).
    pub cfg: Config,
    /// Audit lines as JSON (else text).
    pub json_log: bool,
    /// The engines allowed.
    pub auth: Auth,
    /// TLS for the TCP listener.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// The TCP address to listen on.
    pub listen: Option<SocketAddr>,
    /// The Unix socket to listen on.
    pub unix: Option<PathBuf>,
    /// Connection limits.
    pub limits: Limits,
    /// How long running executions may finish after SIGTERM.
    pub shutdown_grace: Duration,
    /// Why no cgroup boundary is used (`": no usable cgroup (...)"`), or empty.
    pub no_cgroup: String,
}

/// Listen and serve until SIGTERM or SIGINT, then shut down (running executions get
/// `shutdown_grace`).
///
/// # Errors
/// [`ServeError`] when the runtime, the state dir, a listener or the signal handlers fail.
pub fn run(s: Startup) -> Result<(), ServeError> {
    let Startup {
        cfg,
        json_log,
        auth,
        tls,
        listen,
        unix,
        limits,
        shutdown_grace,
        no_cgroup,
    } = s;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    rt.block_on(async move {
        let svc = Service::new(cfg, json_log).map_err(ServeError::StateDir)?;
        eprintln!(
            "skyhook-agent serve: execution boundary: {}{no_cgroup}",
            svc.boundary()
        );
        eprintln!("skyhook-agent serve: {}", plan_limits_line(&svc));
        let recovered = svc.recovered();
        if !recovered.is_empty() {
            eprintln!(
                "skyhook-agent serve: {} execution(s) of an earlier server still running, \
                 cancellable by id: {}",
                recovered.len(),
                recovered.join(", ")
            );
        }
        let server = Server::new(svc.clone(), auth.clone(), limits);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        if let Some(addr) = listen {
            let listen_err = |source| ServeError::Listen {
                what: addr.to_string(),
                source,
            };
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(listen_err)?;
            let local = l.local_addr().map_err(listen_err)?;
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
        if let Some(path) = &unix {
            let l = bind_unix(path)
                .and_then(tokio::net::UnixListener::from_std)
                .map_err(|source| ServeError::Listen {
                    what: path.display().to_string(),
                    source,
                })?;
            eprintln!("skyhook-agent serve: listening on unix:{}", path.display());
            tasks.push(tokio::spawn(serve(
                Listener::Unix(l),
                server.clone(),
                stop_rx.clone(),
            )));
        }
        use tokio::signal::unix::{SignalKind, signal};
        let sig = |k| signal(k).map_err(ServeError::Signal);
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
        if let Some(path) = &unix {
            let _ = std::fs::remove_file(path);
        }
        svc.shutdown(shutdown_grace).await;
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

/// serve's start-up line on the plans' memory and process bounds: plan-wide through a
/// cgroup of each plan's own, or, without one, why, and that the bounds are per command.
fn plan_limits_line(svc: &Service) -> String {
    let l = &svc.config().plan.sandbox;
    match crate::process::plan_cgroup::parents() {
        Ok(p) => format!(
            "plan limits: each plan's commands together hold at most {} MiB (--plan-memory) \
             and {} processes (--plan-pids), in a cgroup of the plan's own under {}",
            l.memory >> 20,
            l.max_pids,
            p.describe()
        ),
        Err(why) => format!(
            "plan limits: no cgroup for plans ({why}): --plan-memory ({} MiB) and --plan-pids \
             ({}) bound each command, not the plan",
            l.memory >> 20,
            l.max_pids
        ),
    }
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
}
