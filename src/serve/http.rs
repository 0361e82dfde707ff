//! The HTTP/1.1 transport of the remote step API (hyper): routes onto [`Service`] calls,
//! bearer authentication ([`Auth`]), one audit line per request. Nothing here decides
//! behaviour beyond status codes and headers.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

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

/// The request handler: a [`Service`] and who may call it.
#[derive(Clone)]
pub struct Server {
    /// The service.
    pub svc: Arc<Service>,
    /// The engines.
    pub auth: Auth,
}

impl Server {
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
        let Some(engine) = self.auth.engine(header) else {
            self.svc
                .audit(json!({"engine": null, "route": route, "outcome": 401}));
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
            (Some("" | "/"), &Method::POST) if !json_body => (415, unsupported()),
            (Some("" | "/"), &Method::POST) => {
                let Some(body) = read_body(req.into_body(), MAX_BODY).await else {
                    let r = json_response(413, &json!({"error": "body too large or broken"}));
                    self.finish_audit(audit, 413);
                    return r;
                };
                describe_start(&body, &mut audit);
                match self.svc.start(&body, &engine) {
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
/// already open go on until their responses end).
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
        let Ok(conn) = conn else {
            // EMFILE and the like: do not spin.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let server = server.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let server = server.clone();
                async move { Ok::<_, Infallible>(server.handle(req).await) }
            });
            let builder = hyper::server::conn::http1::Builder::new();
            let _ = match conn {
                Conn::Tcp(s) => {
                    builder
                        .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                        .await
                }
                Conn::Unix(s) => {
                    builder
                        .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                        .await
                }
                Conn::Tls(s, acceptor) => {
                    let handshake = tokio::time::timeout(
                        std::time::Duration::from_secs(10),
                        acceptor.accept(s),
                    );
                    let Ok(Ok(tls)) = handshake.await else {
                        return; // bad or slow handshake: drop the connection
                    };
                    builder
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                        .await
                }
            };
        });
    }
}

enum Conn {
    Tcp(tokio::net::TcpStream),
    Tls(tokio::net::TcpStream, tokio_rustls::TlsAcceptor),
    Unix(tokio::net::UnixStream),
}
