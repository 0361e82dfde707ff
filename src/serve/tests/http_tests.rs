//! The HTTP layer over real sockets: routes, limits, timeouts, connection shedding.

use super::*;
use crate::serve::exec::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A server on a loopback port with `limits`, in this runtime; its port and service.
async fn start(limits: Limits) -> (u16, Arc<Service>) {
    let mut cfg = Config::new(std::path::Path::new("/"));
    cfg.alive_every = Duration::from_millis(100);
    let svc = Service::with_audit(cfg, true, Arc::new(|_: &str| {})).unwrap();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let server = Server::new(svc.clone(), Auth::insecure(), limits);
    let (_stop, rx) = watch::channel(false);
    tokio::spawn(async move {
        let _keep = _stop;
        serve(Listener::Tcp(l), server, rx).await;
    });
    (port, svc)
}

/// Bytes until the peer closes (or resets) the connection; `None` when it is still
/// open after 5 s.
async fn until_closed(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .ok()?;
    Some(out)
}

/// One complete (chunked) response on a kept-alive connection (5 s at most).
async fn response(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before the response ended");
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).to_string();
            if text.contains("\r\n\r\n") && text.ends_with("\r\n0\r\n\r\n") {
                return text;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("no response within 5 s")
}

fn metric(svc: &Service, series: &str) -> u64 {
    let text = svc.metrics_text();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

type NameFn =
    unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int;

/// The port of an IPv4 socket's own (`getsockname`) or peer (`getpeername`) address.
fn inet_port(fd: i32, name: NameFn) -> Option<u16> {
    // SAFETY: an all-zero sockaddr_in is valid; `name` writes at most `len` bytes.
    let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let r = unsafe { name(fd, (&raw mut a).cast(), &mut len) };
    (r == 0 && i32::from(a.sin_family) == libc::AF_INET).then(|| u16::from_be(a.sin_port))
}

const HEALTH: &[u8] = b"GET /v1/health HTTP/1.1\r\nHost: t\r\n\r\n";

#[test]
fn the_default_cap_follows_the_open_files_limit() {
    assert_eq!(max_connections_for(256, 16), 64); // 256 - 64 - 8 * 16
    assert_eq!(max_connections_for(1024, 16), 832);
    assert_eq!(max_connections_for(1 << 20, 16), 1024);
    assert_eq!(max_connections_for(100, 16), 16);
    assert_eq!(max_connections_for(0, 1), 16);
}

/// Over the cap, a connection that has sent part of a request head is kept and an older
/// one that sent nothing is not: the connection with nothing pending is shed first.
#[test]
fn shedding_spares_a_connection_with_a_request_on_its_way() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let limits = Limits {
            max_connections: 2,
            ..Limits::default()
        };
        let (port, svc) = start(limits).await;
        let addr = ("127.0.0.1", port);
        let accepted = |n: u64| {
            let svc = svc.clone();
            async move {
                for _ in 0..500 {
                    if metric(&svc, "skyhook_serve_connections_accepted_total") >= n {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                panic!("{n} connections not accepted within 5 s");
            }
        };
        // the oldest connection: half a head, then nothing more for now
        let mut pending = TcpStream::connect(addr).await.unwrap();
        pending
            .write_all(b"GET /v1/health HTTP/1.1\r\n")
            .await
            .unwrap();
        accepted(1).await;
        let mut silent = TcpStream::connect(addr).await.unwrap();
        accepted(2).await;
        // one over the cap: the silent one goes, the pending one stays
        let _third = TcpStream::connect(addr).await.unwrap();
        accepted(3).await;
        assert_eq!(until_closed(&mut silent).await, Some(Vec::new()));
        pending.write_all(b"Host: t\r\n\r\n").await.unwrap();
        let got = response(&mut pending).await;
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    });
}

/// Idle connections beyond the cap shed the oldest idle one, so health still answers;
/// an idle kept-alive connection and a head sent a byte at a time are closed; a stream
/// of a running execution outlives the idle timeout.
#[test]
fn idle_and_slow_connections_are_closed_and_health_answers_over_the_cap() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let limits = Limits {
            header_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(1200),
            max_connections: 4,
        };
        let (port, svc) = start(limits).await;
        let addr = ("127.0.0.1", port);
        // twice the cap of connections that never send a byte
        let mut idle = Vec::new();
        for _ in 0..8 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(HEALTH).await.unwrap();
        let r = response(&mut s).await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        // the kept-alive connection is closed once idle, by the idle timeout (not the
        // header timeout, which is for a request's head, also when the connection served
        // its request before its watchdog first ran); the client-side lower bound leaves
        // the idle timeout's last 400 ms for a loaded machine's delays
        let t = std::time::Instant::now();
        assert_eq!(
            until_closed(&mut s).await,
            Some(Vec::new()),
            "not closed when idle"
        );
        assert!(
            t.elapsed() >= Duration::from_millis(800),
            "{:?}",
            t.elapsed()
        );

        // the shed ones are closed
        for c in &mut idle[..4] {
            assert!(
                until_closed(c).await.is_some(),
                "an idle connection over the cap stayed"
            );
        }
        assert!(
            metric(
                &svc,
                "skyhook_serve_connections_closed_total{reason=\"over_cap\"}"
            ) >= 4
        );
        assert!(
            metric(
                &svc,
                "skyhook_serve_connections_closed_total{reason=\"idle_timeout\"}"
            ) >= 1
        );
        // a head at 10 bytes a second is cut at the header timeout
        let mut slow = TcpStream::connect(addr).await.unwrap();
        let mut closed = false;
        for b in HEALTH.iter().cycle().take(100) {
            if slow.write_all(&[*b]).await.is_err() {
                closed = true;
                break;
            }
            let mut buf = [0u8; 64];
            if let Ok(r) =
                tokio::time::timeout(Duration::from_millis(100), slow.read(&mut buf)).await
            {
                assert!(matches!(r, Ok(0) | Err(_)), "an answer to a slow head");
                closed = true;
                break;
            }
        }
        assert!(closed, "a slow head held its connection 10 s");
        assert!(
            metric(
                &svc,
                "skyhook_serve_connections_closed_total{reason=\"header_timeout\"}"
            ) >= 1
        );
        // a stream outlives the idle timeout: it is a request in flight
        let body = r#"{"id":"long","kind":"sh","command":"sleep 2; echo done"}"#;
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "POST /v1/executions HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let all = String::from_utf8(until_closed(&mut s).await.unwrap()).unwrap();
        assert!(all.contains(r#""line":"done""#), "{all}");
        assert!(all.contains(r#""exit":{"code":0}"#), "{all}");
        assert!(metric(&svc, "skyhook_serve_connections_open") <= 4);
    });
}

/// `TCP_NODELAY` on the accepted socket (events are small writes; with Nagle each one
/// on a kept-alive connection waits for the ACK of the one before).
#[test]
fn accepted_tcp_sockets_have_nodelay() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (port, _svc) = start(Limits::default()).await;
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        s.write_all(HEALTH).await.unwrap();
        response(&mut s).await;
        let client = s.local_addr().unwrap().port();
        // the server's end of this connection is a descriptor of this process
        let mut found = None;
        for fd in std::fs::read_dir("/proc/self/fd").unwrap() {
            let Ok(fd) = fd.unwrap().file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let (Some(local), Some(peer)) = (
                inet_port(fd, libc::getsockname),
                inet_port(fd, libc::getpeername),
            ) else {
                continue;
            };
            if local == port && peer == client {
                let mut on: libc::c_int = 0;
                let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
                // SAFETY: getsockopt writes at most `len` bytes into `on`.
                let r = unsafe {
                    libc::getsockopt(
                        fd,
                        libc::IPPROTO_TCP,
                        libc::TCP_NODELAY,
                        (&raw mut on).cast(),
                        &mut len,
                    )
                };
                assert_eq!(r, 0);
                found = Some(on);
            }
        }
        assert_eq!(found, Some(1), "TCP_NODELAY on the accepted socket");
    });
}
