//! serve's HTTP/1.1 transport on any bytes from a client: the real hyper connection and
//! `serve::http::Server::handle` over an in-memory duplex stream (no socket). The client
//! writes the bytes, closes its side and reads until the server closes. Invariants: no panic,
//! no hang (5 s), and what comes back is a sequence of well-formed responses (status line,
//! headers, a `Content-Length` or chunked body), never a 500, each JSON body valid JSON.
#![no_main]

#[path = "shared/serve.rs"]
mod serve;

use std::convert::Infallible;
use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use skyhook::serve::http::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
    })
}

/// A chunked body at the start of `b`: its bytes and the length it took (an empty body for a
/// response to HEAD, which has none); panics when malformed.
fn dechunk(b: &[u8]) -> (Vec<u8>, usize) {
    if b.is_empty() || b.starts_with(b"HTTP/1.") {
        return (Vec::new(), 0);
    }
    let (mut body, mut at) = (Vec::new(), 0);
    loop {
        let line_end = at
            + b[at..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .expect("a chunk size line");
        let size = std::str::from_utf8(&b[at..line_end]).expect("an ASCII chunk size");
        let size = usize::from_str_radix(size.split(';').next().unwrap_or(""), 16)
            .expect("a hex chunk size");
        at = line_end + 2;
        if size == 0 {
            assert!(
                b[at..].starts_with(b"\r\n"),
                "trailers after the last chunk"
            );
            return (body, at + 2);
        }
        body.extend_from_slice(b.get(at..at + size).expect("the whole chunk"));
        assert!(
            b[at + size..].starts_with(b"\r\n"),
            "chunk not ended by CRLF"
        );
        at += size + 2;
    }
}

/// Check every response in `out`; panics on a malformed one.
fn check_responses(mut out: &[u8]) {
    while !out.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        let head = match resp.parse(out) {
            Ok(httparse::Status::Complete(n)) => n,
            other => panic!(
                "malformed response head {other:?}: {:?}",
                String::from_utf8_lossy(out)
            ),
        };
        let status = resp.code.expect("a status");
        assert!(
            (100..600).contains(&status) && status != 500,
            "status {status}"
        );
        let header = |name: &str| {
            resp.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).into_owned())
        };
        let rest = &out[head..];
        let (body, used) =
            if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
                dechunk(rest)
            } else {
                // No length and not chunked (an HTTP/1.0 reply): the body ends with the
                // connection.
                let len: usize = header("content-length")
                    .map_or(rest.len(), |v| v.parse().expect("a numeric Content-Length"));
                // A response to HEAD keeps its Content-Length but has no body: what follows is
                // the next response or nothing (a JSON body starts with `{`).
                let len = if rest.is_empty() || rest.starts_with(b"HTTP/1.") {
                    0
                } else {
                    len
                };
                (rest.get(..len).expect("the whole body").to_vec(), len)
            };
        if header("content-type").as_deref() == Some("application/json") && !body.is_empty() {
            serde_json::from_slice::<serde_json::Value>(&body).expect("a JSON body");
        }
        out = &out[head + used..];
    }
}

fuzz_target!(|data: &[u8]| {
    let setup = serve::setup();
    let server = Server {
        svc: setup.svc.clone(),
        auth: setup.auth.clone(),
    };
    let out = runtime().block_on(async move {
        let (client, conn) = tokio::io::duplex(64 << 10);
        let svc = hyper::service::service_fn(move |req| {
            let server = server.clone();
            async move { Ok::<_, Infallible>(server.handle(req).await) }
        });
        let serving = async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .half_close(true)
                .serve_connection(hyper_util::rt::TokioIo::new(conn), svc)
                .await;
        };
        let (mut rd, mut wr) = tokio::io::split(client);
        let writing = async move {
            let _ = wr.write_all(data).await;
            let _ = wr.shutdown().await;
        };
        let reading = async move {
            let mut out = Vec::new();
            let _ = rd.read_to_end(&mut out).await;
            out
        };
        let all = async { tokio::join!(serving, writing, reading).2 };
        tokio::time::timeout(Duration::from_secs(5), all)
            .await
            .expect("the connection ends within 5 s")
    });
    check_responses(&out);
});
