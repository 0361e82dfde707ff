//! The HTTP/1.1 transport of the remote step API (hyper): routes onto [`Service`] calls,
//! bearer authentication ([`Auth`]), one audit line per request, and the connection
//! [`Limits`] (head and idle timeouts, a cap on open connections). Nothing here decides
//! behaviour beyond status codes, headers and when a connection is closed.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use std::os::fd::AsRawFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use super::auth::{Auth, sha256_hex};
use super::exec::{Refusal, Service};

/// Largest request body, in bytes (a start request carries a script).
pub const MAX_BODY: usize = 4 << 20;

/// True for a `Content-Type` of `application/json`, parameters (`; charset=utf-8`) allowed.
pub fn is_json(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|c| {
        c.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
    })
}

/// A response body: all at once, or an NDJSON stream fed by the service.
#[derive(Debug)]
pub enum RespBody {
    /// One chunk (or none once sent).
    Full(Option<Bytes>),
    /// Chunks as the service produces them; the body ends when the sender is dropped.
    Stream(mpsc::Receiver<Bytes>),
}

impl hyper::body::Body for RespBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            RespBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            RespBody::Stream(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }
}

/// Read a whole body of at most `limit` bytes; `None` when longer or broken.
pub async fn read_body<B>(mut body: B, limit: usize) -> Option<Vec<u8>>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
{
    let mut out = Vec::new();
    loop {
        match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            None => return Some(out),
            Some(Err(_)) => return None,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    if out.len() + data.len() > limit {
                        return None;
                    }
                    out.extend_from_slice(&data);
                }
            }
        }
    }
}

fn json_response(status: u16, body: &Value) -> Response<RespBody> {
    let mut r = Response::new(RespBody::Full(Some(Bytes::from(format!("{body}\n")))));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn refusal(r: &Refusal) -> Response<RespBody> {
    let mut resp = json_response(r.status, &r.body);
    for (k, v) in &r.headers {
        if let Ok(v) = hyper::header::HeaderValue::from_str(v) {
            resp.headers_mut().insert(*k, v);
        }
    }
    resp
}

fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response<RespBody> {
    let mut r = Response::new(RespBody::Stream(rx));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-ndjson"),
    );
    r
}

/// When the server closes a connection, and how many it keeps open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A request head must be complete this long after its first byte, or after the
    /// connection opened; a request body must be complete this long after its head
    /// (`--header-timeout`, default 10 s).
    pub header_timeout: Duration,
    /// A connection with no request in flight and no byte of a next one is closed after this
    /// (`--idle-timeout`, default 30 s). A stream of a running execution is a request in
    /// flight (its heartbeats flow), never idle.
    pub idle_timeout: Duration,
    /// Connections open at once over all listeners (`--max-connections`); one more sheds
    /// the oldest idle connection, or is closed at once when none is idle.
    pub max_connections: usize,
}

impl Default for Limits {
    /// 10 s, 30 s, 1024.
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_connections: 1024,
        }
    }
}

/// The default `--max-connections`: 1024, lowered to fit the open-files limit
/// (`RLIMIT_NOFILE` soft) less 64 descriptors for the server itself and 8 per execution
/// that may run (`max_running`); at least 16.
pub fn default_max_connections(max_running: usize) -> usize {
    max_connections_for(soft_nofile(), max_running)
}

/// The cap for an open-files limit of `soft` descriptors (see [`default_max_connections`]).
fn max_connections_for(soft: usize, max_running: usize) -> usize {
    soft.saturating_sub(64 + 8 * max_running).clamp(16, 1024)
}

/// `RLIMIT_NOFILE` soft; 1024 when it cannot be read.
fn soft_nofile() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    }
}

/// One open connection, as the limits see it.
#[derive(Debug, Default)]
struct ConnState {
    /// Requests in flight: from the head parsed to the response body dropped.
    busy: AtomicUsize,
    /// Requests started (tells the watchdog a request came and went while it slept).
    requests: AtomicU64,
    /// Bytes arrived since the connection last became idle (a head is on its way).
    reading: AtomicBool,
    /// The watchdog has something to look at: idle again, or the first byte of a head.
    wake: Notify,
    /// Close now (shed to make room for a new connection).
    shed: Notify,
    /// The socket's descriptor, to ask the kernel for bytes not yet read (FIONREAD); -1
    /// when unknown (TLS after the handshake still reads the same socket).
    fd: std::os::fd::RawFd,
}

impl ConnState {
    fn new(fd: std::os::fd::RawFd) -> ConnState {
        ConnState {
            fd,
            ..ConnState::default()
        }
    }

    /// Bytes of a request have arrived: read by hyper but not yet a parsed head, or still
    /// in the socket's receive queue.
    fn pending(&self) -> bool {
        if self.reading.load(Ordering::SeqCst) {
            return true;
        }
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one c_int; a stale descriptor only yields a wrong hint.
        self.fd >= 0 && unsafe { libc::ioctl(self.fd, libc::FIONREAD, &mut n) } == 0 && n > 0
    }
}

/// Open connections by accept order (oldest first), over all listeners of a [`Server`].
#[derive(Debug, Default)]
struct Conns {
    open: Mutex<BTreeMap<u64, Arc<ConnState>>>,
    next: AtomicU64,
}

impl Conns {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<ConnState>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Close the oldest connection with no request in flight and no byte of one pending; else
/// the oldest with no request in flight; false when there is none.
fn shed_oldest_idle(open: &mut BTreeMap<u64, Arc<ConnState>>) -> bool {
    let idle = |c: &Arc<ConnState>| c.busy.load(Ordering::SeqCst) == 0;
    let Some(id) = open
        .iter()
        .find(|(_, c)| idle(c) && !c.pending())
        .or_else(|| open.iter().find(|(_, c)| idle(c)))
        .map(|(id, _)| *id)
    else {
        return false;
    };
    if let Some(c) = open.remove(&id) {
        c.shed.notify_one();
    }
    true
}

/// A request in flight on a connection (dropped with the response body).
struct Busy(Arc<ConnState>);

impl Busy {
    fn new(c: &Arc<ConnState>) -> Busy {
        c.requests.fetch_add(1, Ordering::SeqCst);
        c.busy.fetch_add(1, Ordering::SeqCst);
        Busy(c.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.busy.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.reading.store(false, Ordering::SeqCst);
            self.0.wake.notify_one();
        }
    }
}

/// A response body that keeps its connection busy until hyper drops it.
pub struct Tracked {
    body: RespBody,
    _busy: Busy,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }
}

/// A connection's byte stream, telling its [`ConnState`] when the first byte of a head
/// arrives on an idle connection.
struct Watched<S> {
    io: S,
    state: Arc<ConnState>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut me.io).poll_read(cx, buf);
        if buf.filled().len() > before
            && me.state.busy.load(Ordering::SeqCst) == 0
            && !me.state.reading.swap(true, Ordering::SeqCst)
        {
            me.state.wake.notify_one();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Resolves when the connection should be closed, with the reason: no request and no byte
/// of one for `idle_timeout` (`idle_timeout`), or a head (from its first byte, or from the
/// connection's opening) not complete within `header_timeout` (`header_timeout`).
async fn watchdog(c: &ConnState, limits: Limits) -> &'static str {
    loop {
        while c.busy.load(Ordering::SeqCst) > 0 {
            c.wake.notified().await;
        }
        // A connection that has had no request yet owes its first head; the count, not
        // whether this is the watchdog's first look, decides: the connection may have
        // served a request before the watchdog first ran.
        let requests = c.requests.load(Ordering::SeqCst);
        let (mut deadline, mut reason) = if requests == 0 || c.reading.load(Ordering::SeqCst) {
            (Instant::now() + limits.header_timeout, "header_timeout")
        } else {
            (Instant::now() + limits.idle_timeout, "idle_timeout")
        };
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {
                    if c.requests.load(Ordering::SeqCst) == requests
                        && c.busy.load(Ordering::SeqCst) == 0
                    {
                        return reason;
                    }
                    break;
                }
                () = c.wake.notified() => {
                    if c.requests.load(Ordering::SeqCst) != requests
                        || c.busy.load(Ordering::SeqCst) > 0
                    {
                        break;
                    }
                    if reason == "idle_timeout" && c.reading.load(Ordering::SeqCst) {
                        deadline = Instant::now() + limits.header_timeout;
                        reason = "header_timeout";
                    }
                }
            }
        }
    }
}

/// The request handler: a [`Service`], who may call it, and the connection limits.
#[derive(Clone)]
pub struct Server {
    /// The service.
    pub svc: Arc<Service>,
    /// The engines.
    pub auth: Auth,
    limits: Limits,
    conns: Arc<Conns>,
}

impl Server {
    /// A handler for `svc`, callers in `auth`, connections held to `limits`.
    pub fn new(svc: Arc<Service>, auth: Auth, limits: Limits) -> Server {
        Server {
            svc,
            auth,
            limits,
            conns: Arc::new(Conns::default()),
        }
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Answer one request (never fails: every error is a status).
    pub async fn handle(&self, req: Request<Incoming>) -> Response<RespBody> {
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or("").to_string();
        let route = format!("{method} {path}");
        if path == "/v1/health" {
            return if method == Method::GET {
                json_response(200, &self.svc.health())
            } else {
                json_response(405, &json!({"error": "method not allowed"}))
            };
        }
        let header = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let Some((engine, scope)) = self.auth.engine_scope(header) else {
            self.svc
                .audit(json!({"engine": null, "route": route, "outcome": 401}));
            self.svc.metrics().refused(401);
            let mut r = json_response(401, &json!({"error": "unauthorized"}));
            r.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer"),
            );
            return r;
        };
        let mut audit = json!({"engine": engine, "route": route});
        if self.auth.is_insecure() {
            audit["warning"] = "--insecure-no-auth: request not authenticated".into();
        }
        let json_body = is_json(
            req.headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
        );
        let unsupported = || {
            json_response(
                415,
                &json!({"error": "unsupported media type",
                        "detail": "a request body must be Content-Type: application/json"}),
            )
        };
        let rest = path.strip_prefix("/v1/executions");
        let (status, resp) = match (rest, &method) {
            _ if path == "/v1/metrics" => {
                if method == Method::GET {
                    let mut r =
                        Response::new(RespBody::Full(Some(Bytes::from(self.svc.metrics_text()))));
                    r.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
                    );
                    (200, r)
                } else {
                    (
                        405,
                        json_response(405, &json!({"error": "method not allowed"})),
                    )
                }
            }
            (Some("" | "/"), &Method::POST) if !json_body => (415, unsupported()),
            (Some("" | "/"), &Method::POST) => {
                let read = read_body(req.into_body(), MAX_BODY);
                let Ok(body) = tokio::time::timeout(self.limits.header_timeout, read).await else {
                    let r = json_response(408, &json!({"error": "request body too slow"}));
                    self.finish_audit(audit, 408);
                    return r;
                };
                let Some(body) = body else {
                    let r = json_response(413, &json!({"error": "body too large or broken"}));
                    self.finish_audit(audit, 413);
                    return r;
                };
                describe_start(&body, &mut audit);
                let plan_only = scope == super::auth::Scope::Plan;
                match super::plan::scope_check(plan_only, &body)
                    .map_err(Refusal::from)
                    .and_then(|()| self.svc.start(&body, &engine))
                {
                    Ok(exec) => match self.svc.stream(exec, 0) {
                        Ok(rx) => (200, stream_response(rx)),
                        Err(g) => (410, refusal(&Refusal::gap(g))),
                    },
                    Err(r) => (r.status, refusal(&r)),
                }
            }
            (Some(rest), m) if rest.starts_with('/') => {
                let mut parts = rest[1..].splitn(2, '/');
                let id = parts.next().unwrap_or("").to_string();
                let sub = parts.next();
                audit["id"] = id.clone().into();
                match (sub, m) {
                    (None, &Method::GET) => match self.svc.status(&id, &engine) {
                        Ok(v) => (200, json_response(200, &v)),
                        Err(r) => (r.status, refusal(&r)),
                    },
                    (Some("events"), &Method::GET) => match parse_after(&query) {
                        None => {
                            let r = Refusal::new_bad("after must be a non-negative integer");
                            (400, refusal(&r))
                        }
                        Some(after) => match self.svc.events(&id, after, &engine) {
                            Ok(rx) => (200, stream_response(rx)),
                            Err(r) => (r.status, refusal(&r)),
                        },
                    },
                    (Some("cancel"), &Method::POST) => {
                        let body = read_body(req.into_body(), 64 << 10)
                            .await
                            .unwrap_or_default();
                        if !json_body && !body.iter().all(u8::is_ascii_whitespace) {
                            (415, unsupported())
                        } else {
                            match self.svc.cancel(&id, &body, &engine) {
                                Ok((s, v)) => (s, json_response(s, &v)),
                                Err(r) => (r.status, refusal(&r)),
                            }
                        }
                    }
                    (None | Some("events" | "cancel"), _) => (
                        405,
                        json_response(405, &json!({"error": "method not allowed"})),
                    ),
                    _ => (404, refusal(&Refusal::not_found())),
                }
            }
            (Some("" | "/"), _) => (
                405,
                json_response(405, &json!({"error": "method not allowed"})),
            ),
            _ => (404, refusal(&Refusal::not_found())),
        };
        self.finish_audit(audit, status);
        resp
    }

    fn finish_audit(&self, mut audit: Value, status: u16) {
        if status >= 400 {
            self.svc.metrics().refused(status);
        }
        audit["outcome"] = status.into();
        self.svc.audit(audit);
    }
}

impl Refusal {
    /// `400 {"error": "bad request", "detail": ...}`.
    pub fn new_bad(detail: &str) -> Refusal {
        Refusal {
            status: 400,
            body: json!({"error": "bad request", "detail": detail}),
            headers: Vec::new(),
        }
    }
}

/// `after=N` from a query string (absent: 0).
fn parse_after(query: &str) -> Option<u64> {
    for pair in query.split('&') {
        if let Some(v) = pair.strip_prefix("after=") {
            return v.parse().ok();
        }
    }
    Some(0)
}

/// The audit fields of a start body: id, kind, SHA-256 of the command or script, the secret
/// coordinates (never values).
fn describe_start(body: &[u8], audit: &mut Value) {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    for k in ["id", "kind", "mode"] {
        if let Some(x) = v.get(k).and_then(Value::as_str) {
            audit[k] = x.into();
        }
    }
    if let Some(text) = v
        .get("command")
        .or_else(|| v.get("script"))
        .and_then(Value::as_str)
    {
        audit["sha256"] = sha256_hex(text.as_bytes()).into();
    }
    if let Some(Value::Array(s)) = v.get("secrets") {
        let coords: Vec<Value> = s
            .iter()
            .map(|c| json!({"name": c.get("name"), "key": c.get("key")}))
            .collect();
        audit["secrets"] = coords.into();
    }
}

/// A listener: TCP (plain or TLS) or Unix.
pub enum Listener {
    /// A TCP socket.
    Tcp(tokio::net::TcpListener),
    /// A TCP socket speaking TLS (the handshake runs on the connection's task).
    Tls(tokio::net::TcpListener, tokio_rustls::TlsAcceptor),
    /// A Unix socket.
    Unix(tokio::net::UnixListener),
}

/// Serve `server` on `listener` until `stop` becomes true (then stop accepting; connections
/// already open go on until their responses end). Accepted TCP sockets get `TCP_NODELAY`
/// (events are small writes that must not wait for an ACK). A failed accept (EMFILE and
/// the like) sheds the oldest idle connection, backs off 50 ms and goes on.
pub async fn serve(listener: Listener, server: Server, mut stop: watch::Receiver<bool>) {
    loop {
        let conn = tokio::select! {
            r = async {
                match &listener {
                    Listener::Tcp(l) => l.accept().await.map(|(s, _)| Conn::Tcp(s)),
                    Listener::Tls(l, a) => l.accept().await.map(|(s, _)| Conn::Tls(s, a.clone())),
                    Listener::Unix(l) => l.accept().await.map(|(s, _)| Conn::Unix(s)),
                }
            } => r,
            _ = stop.wait_for(|s| *s) => return,
        };
        let metrics = server.svc.metrics();
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                metrics.accept_error();
                if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
                    && shed_oldest_idle(&mut server.conns.lock())
                {
                    metrics.connection_closed("over_cap");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Conn::Tcp(s) | Conn::Tls(s, _) = &conn {
            let _ = s.set_nodelay(true);
        }
        let id = server.conns.next.fetch_add(1, Ordering::SeqCst);
        let fd = match &conn {
            Conn::Tcp(s) | Conn::Tls(s, _) => s.as_raw_fd(),
            Conn::Unix(s) => s.as_raw_fd(),
        };
        let state = Arc::new(ConnState::new(fd));
        {
            let mut open = server.conns.lock();
            if open.len() >= server.limits.max_connections {
                if shed_oldest_idle(&mut open) {
                    metrics.connection_closed("over_cap");
                } else {
                    metrics.connection_closed("refused");
                    continue; // every connection is busy: close this one
                }
            }
            open.insert(id, state.clone());
        }
        metrics.connection_accepted();
        let server = server.clone();
        tokio::spawn(async move {
            let limits = server.limits;
            let conns = server.conns.clone();
            let svc = server.svc.clone();
            let st = state.clone();
            let service = hyper::service::service_fn(move |req| {
                let server = server.clone();
                let busy = Busy::new(&st);
                async move {
                    let (parts, body) = server.handle(req).await.into_parts();
                    Ok::<_, Infallible>(Response::from_parts(parts, Tracked { body, _busy: busy }))
                }
            });
            let run = async {
                let builder = hyper::server::conn::http1::Builder::new();
                let watched = |io| Watched {
                    io,
                    state: state.clone(),
                };
                let _ = match conn {
                    Conn::Tcp(s) => {
                        builder
                            .serve_connection(hyper_util::rt::TokioIo::new(watched(s)), service)
                            .await
                    }
                    Conn::Unix(s) => {
                        let io = Watched {
                            io: s,
                            state: state.clone(),
                        };
                        builder
                            .serve_connection(hyper_util::rt::TokioIo::new(io), service)
                            .await
                    }
                    Conn::Tls(s, acceptor) => {
                        let handshake = tokio::time::timeout(
                            Duration::from_secs(10),
                            acceptor.accept(watched(s)),
                        );
                        let Ok(Ok(tls)) = handshake.await else {
                            return Some("tls_handshake"); // bad or slow: drop the connection
                        };
                        builder
                            .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                            .await
                    }
                };
                None
            };
            let closed = tokio::select! {
                r = run => r,
                () = state.shed.notified() => None, // counted by whoever shed it
                reason = watchdog(&state, limits) => Some(reason),
            };
            if let Some(reason) = closed {
                svc.metrics().connection_closed(reason);
            }
            conns.lock().remove(&id);
            svc.metrics().connection_ended();
        });
    }
}

enum Conn {
    Tcp(tokio::net::TcpStream),
    Tls(tokio::net::TcpStream, tokio_rustls::TlsAcceptor),
    Unix(tokio::net::UnixStream),
}

#[cfg(test)]
#[path = "tests/http_tests.rs"]
mod tests;
