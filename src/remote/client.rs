//! [`Client`]: one server and its token; each call one hyper connection.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response};
use serde_json::Value;

use crate::process::Cancel;
use crate::serve::http::{RespBody, read_body};

/// Reconnect attempts after a dropped stream (100 ms, doubling up to 2 s between them).
pub const RECONNECTS: u32 = 8;

/// A failed call.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The URL is not `http://HOST:PORT[/]`, `https://HOST:PORT[/]` or `unix:/PATH`, or
    /// its TLS settings are missing or unusable.
    #[error(
        "bad remote URL {0:?} (http://HOST:PORT, https://HOST:PORT with a CA file, or unix:/PATH)"
    )]
    Url(String),
    /// Connecting or talking to the server failed.
    #[error("{0}")]
    Io(String),
    /// The server answered with a status other than the one expected.
    #[error("server answered {status}: {body}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The JSON body (or `null`).
        body: Value,
    },
    /// The stream ended and could not be resumed without a hole (`410`, or reconnects ran
    /// out).
    #[error("stream lost after seq {last}: {why}")]
    Lost {
        /// The last sequence number received.
        last: u64,
        /// Why resuming failed.
        why: String,
    },
}

#[derive(Clone)]
enum Target {
    Tcp(String),
    Tls(String, Arc<tokio_rustls::rustls::ClientConfig>),
    Unix(PathBuf),
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Tcp(hp) => write!(f, "http://{hp}"),
            Target::Tls(hp, _) => write!(f, "https://{hp}"),
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// A server and the token to call it with.
#[derive(Debug, Clone)]
pub struct Client {
    target: Target,
    token: String,
}

impl Client {
    /// A client of `url` (`http://HOST:PORT`, `unix:/PATH`) with bearer `token`.
    ///
    /// # Errors
    /// [`RemoteError::Url`] (an `https://` URL needs [`Client::with_tls`]).
    pub fn new(url: &str, token: &str) -> Result<Client, RemoteError> {
        Self::with_tls(url, token, None, None)
    }

    /// As [`Client::new`], also `https://HOST:PORT` trusting the CAs of `ca` (PEM) and
    /// presenting `client` (certificate, key) when the server asks for one.
    ///
    /// # Errors
    /// [`RemoteError::Url`] for a bad URL, an `https://` URL without `ca`, or unusable PEM
    /// files.
    pub fn with_tls(
        url: &str,
        token: &str,
        ca: Option<&Path>,
        client: Option<(&Path, &Path)>,
    ) -> Result<Client, RemoteError> {
        let tls = match (url.starts_with("https://"), ca) {
            (true, Some(ca)) => Some(
                crate::serve::tls::client_config(ca, client)
                    .map_err(|e| RemoteError::Url(format!("{url}: {e}")))?,
            ),
            _ => None,
        };
        Self::with_config(url, token, tls)
    }

    /// As [`Client::with_tls`] with the TLS configuration made already
    /// ([`crate::serve::tls::client_config`]), so that many clients (a fleet preview's)
    /// share one instead of reading and parsing the PEM files each.
    ///
    /// # Errors
    /// [`RemoteError::Url`] for a bad URL, an `https://` URL without `tls`.
    pub fn with_config(
        url: &str,
        token: &str,
        tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    ) -> Result<Client, RemoteError> {
        let host_port = |hp: &str| {
            let hp = hp.trim_end_matches('/');
            if hp.is_empty() || hp.contains('/') {
                return Err(RemoteError::Url(url.into()));
            }
            Ok(hp.to_string())
        };
        let target = if let Some(p) = url.strip_prefix("unix:") {
            Target::Unix(PathBuf::from(p))
        } else if let Some(hp) = url.strip_prefix("http://") {
            Target::Tcp(host_port(hp)?)
        } else if let Some(hp) = url.strip_prefix("https://") {
            let Some(cfg) = tls else {
                return Err(RemoteError::Url(format!("{url}: https needs a CA file")));
            };
            Target::Tls(host_port(hp)?, cfg)
        } else {
            return Err(RemoteError::Url(url.into()));
        };
        Ok(Client {
            target,
            token: token.trim().to_string(),
        })
    }

    /// One request on a new connection; the response with its body still streaming.
    ///
    /// # Errors
    /// [`RemoteError::Io`] when connecting or the exchange fails.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Response<Incoming>, RemoteError> {
        let io = |e: &dyn std::fmt::Display| RemoteError::Io(format!("{}: {e}", self.shown()));
        let host = match &self.target {
            Target::Tcp(hp) | Target::Tls(hp, _) => hp.clone(),
            Target::Unix(_) => "localhost".into(),
        };
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, host)
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            )
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(RespBody::Full(body.map(Bytes::from)))
            .map_err(|e| io(&e))?;
        macro_rules! exchange {
            ($stream:expr) => {{
                let (mut tx, conn) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new($stream))
                        .await
                        .map_err(|e| io(&e))?;
                tokio::spawn(conn);
                tx.send_request(req).await.map_err(|e| io(&e))
            }};
        }
        match &self.target {
            Target::Tcp(hp) => {
                let s = tokio::net::TcpStream::connect(hp.as_str())
                    .await
                    .map_err(|e| io(&e))?;
                // the request goes out in small writes: do not hold them back (Nagle)
                let _ = s.set_nodelay(true);
                exchange!(s)
            }
            Target::Tls(hp, cfg) => {
                let s = tokio::net::TcpStream::connect(hp.as_str())
                    .await
                    .map_err(|e| io(&e))?;
                // the request goes out in small writes: do not hold them back (Nagle)
                let _ = s.set_nodelay(true);
                let host = hp.rsplit_once(':').map_or(hp.as_str(), |(h, _)| h);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let name = tokio_rustls::rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| io(&e))?;
                let s = tokio_rustls::TlsConnector::from(cfg.clone())
                    .connect(name, s)
                    .await
                    .map_err(|e| io(&e))?;
                exchange!(s)
            }
            Target::Unix(p) => {
                let s = tokio::net::UnixStream::connect(p)
                    .await
                    .map_err(|e| io(&e))?;
                exchange!(s)
            }
        }
    }

    fn shown(&self) -> String {
        format!("{:?}", self.target)
    }

    /// A whole JSON call: status and body (`null` when not JSON).
    ///
    /// # Errors
    /// [`RemoteError::Io`].
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, Value), RemoteError> {
        let resp = self.send(method, path, body).await?;
        let status = resp.status().as_u16();
        let bytes = read_body(resp.into_body(), 16 << 20)
            .await
            .unwrap_or_default();
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }

    /// Start `start` (a `POST /v1/executions` body with an `id`) and follow it to its exit
    /// event, which is returned. Every numbered event goes to `on_event` exactly once, in
    /// order (heartbeats are dropped); so does a lost event (`{"lost", "from_seq", "to_seq"}`,
    /// events the server dropped before they were read), after which the stream goes on. A dropped connection is resumed with
    /// `GET .../events?after=LAST` up to [`RECONNECTS`] times. Once `cancel` is aborted the
    /// execution is cancelled (`POST .../cancel`, once) and followed to its exit.
    ///
    /// # Errors
    /// [`RemoteError::Status`] when the start is refused (nothing ran);
    /// [`RemoteError::Lost`] when the stream cannot be resumed without a hole.
    pub async fn execute(
        &self,
        start: &Value,
        cancel: &Cancel,
        on_event: &mut dyn FnMut(&Value),
    ) -> Result<Value, RemoteError> {
        let id = start["id"].as_str().unwrap_or_default().to_string();
        let resp = self
            .send(
                Method::POST,
                "/v1/executions",
                Some(start.to_string().into_bytes()),
            )
            .await?;
        let status = resp.status().as_u16();
        if status != 200 {
            let bytes = read_body(resp.into_body(), 1 << 20)
                .await
                .unwrap_or_default();
            return Err(RemoteError::Status {
                status,
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            });
        }
        let mut body = resp.into_body();
        let mut last = 0u64;
        let mut cancelled = false;
        loop {
            let why = match self
                .follow(&mut body, &mut last, &id, cancel, &mut cancelled, on_event)
                .await
            {
                Ok(Some(exit)) => return Ok(exit),
                Ok(None) => "the stream ended before the exit event".to_string(),
                Err(e) => e,
            };
            body = self.resume(&id, last, &why).await?;
        }
    }

    async fn resume(&self, id: &str, last: u64, why: &str) -> Result<Incoming, RemoteError> {
        let mut wait = Duration::from_millis(100);
        let mut why = why.to_string();
        for _ in 0..RECONNECTS {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(2));
            match self
                .send(
                    Method::GET,
                    &format!("/v1/executions/{id}/events?after={last}"),
                    None,
                )
                .await
            {
                Ok(r) if r.status() == 200 => return Ok(r.into_body()),
                Ok(r) if r.status() == 410 || r.status() == 404 => {
                    let status = r.status().as_u16();
                    let b = read_body(r.into_body(), 1 << 20).await.unwrap_or_default();
                    return Err(RemoteError::Lost {
                        last,
                        why: format!("{status} {}", String::from_utf8_lossy(&b).trim()),
                    });
                }
                Ok(r) => why = format!("resume answered {}", r.status()),
                Err(e) => why = e.to_string(),
            }
        }
        Err(RemoteError::Lost { last, why })
    }

    /// Read one stream; `Ok(Some(exit event))`, `Ok(None)` at a clean end without exit,
    /// `Err` when the connection broke.
    async fn follow(
        &self,
        body: &mut Incoming,
        last: &mut u64,
        id: &str,
        cancel: &Cancel,
        cancelled: &mut bool,
        on_event: &mut dyn FnMut(&Value),
    ) -> Result<Option<Value>, String> {
        use hyper::body::Body;
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let frame = tokio::select! {
                f = std::future::poll_fn(|cx| std::pin::Pin::new(&mut *body).poll_frame(cx)) => f,
                () = cancel.aborted(), if !*cancelled => {
                    *cancelled = true;
                    let _ = self
                        .call(Method::POST, &format!("/v1/executions/{id}/cancel"), None)
                        .await;
                    continue;
                }
            };
            let data = match frame {
                None => return Ok(None),
                Some(Err(e)) => return Err(e.to_string()),
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => d,
                    Err(_) => continue,
                },
            };
            buf.extend_from_slice(&data);
            while let Some(i) = memchr::memchr(b'\n', &buf) {
                let line: Vec<u8> = buf.drain(..=i).collect();
                let Ok(v) = serde_json::from_slice::<Value>(&line[..i]) else {
                    return Err("a line of the stream is not JSON".into());
                };
                if let Some(to) = v.get("to_seq").and_then(Value::as_u64)
                    && v.get("lost").is_some()
                {
                    // the server's ring dropped events before they were read: go on after them
                    if to > *last {
                        *last = to;
                        on_event(&v);
                    }
                    continue;
                }
                let Some(seq) = v.get("seq").and_then(Value::as_u64) else {
                    continue; // heartbeat
                };
                if seq <= *last {
                    continue;
                }
                if seq != *last + 1 {
                    return Err(format!("seq {seq} after {last}"));
                }
                *last = seq;
                on_event(&v);
                if v.get("exit").is_some() {
                    return Ok(Some(v));
                }
            }
        }
    }
}
