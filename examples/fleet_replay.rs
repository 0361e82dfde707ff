//! Replaying nodes for the fleet preview benchmark (`benches/fleet_preview.py --model replay`).
//!
//! `fleet_replay NODES RESPONSE_FILE DELAY_S [CERT KEY]` listens on NODES loopback ports and
//! answers every request (an HTTP/1.1 head and its `Content-Length` body) with the bytes of
//! RESPONSE_FILE (one real node's recorded answer) DELAY_S seconds after reading it (a timer
//! standing for the node's own plan), then closes. With CERT and KEY (PEM) each port speaks
//! TLS with the server configuration `skyhook-agent serve --tls-cert CERT --tls-key KEY`
//! uses ([`skyhook::serve::tls::server_config`]: rustls on ring, ALPN `http/1.1`) and, as
//! serve does, `TCP_NODELAY` on each accepted socket; so each handshake costs what it
//! costs a node's serve.
//!
//! Prints the ports as one JSON line on stdout; then each line read on stdin asks for the
//! requests answered since the last ask: one JSON array line of `[read, answered]` pairs,
//! when the request was read and when its answer was written (seconds since the Unix
//! epoch). Ends when
//! stdin closes. The listeners are dealt to one thread per core (a single-threaded runtime
//! each), as the replaying side of a fleet would use every core it had.

use std::io::BufRead as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// Read one request: its head and `Content-Length` bytes of body; false at EOF or past
/// 1 MiB of head.
async fn read_request<S: AsyncRead + Unpin>(s: &mut S) -> bool {
    let mut buf = Vec::with_capacity(8192);
    let mut chunk = [0u8; 65536];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 1 << 20 {
            return false;
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let want = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut have = buf.len() - head_end;
    while have < want {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => have += n,
        }
    }
    true
}

/// Now, in seconds since the Unix epoch (the benchmark lines these up with its own clock).
fn epoch_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    response: &[u8],
    delay: Duration,
    times: &Mutex<Vec<[f64; 2]>>,
) {
    if !read_request(&mut s).await {
        return;
    }
    let asked = epoch_s();
    tokio::time::sleep(delay).await;
    if s.write_all(response).await.is_ok()
        && s.flush().await.is_ok()
        && let Ok(mut t) = times.lock()
    {
        t.push([asked, epoch_s()]);
    }
    let _ = s.shutdown().await;
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 && args.len() != 6 {
        return Err("usage: fleet_replay NODES RESPONSE_FILE DELAY_S [CERT KEY]".into());
    }
    let nodes: usize = args[1].parse()?;
    let response: Arc<[u8]> = std::fs::read(&args[2])?.into();
    let delay = Duration::from_secs_f64(args[3].parse()?);
    // Each port's own configuration, as each node's serve has: its own session cache, so no
    // node resumes a session another node began (fleet nodes share no TLS state).
    let tls = |_| -> Result<Option<tokio_rustls::TlsAcceptor>, String> {
        Ok(match args.get(4..6) {
            Some([cert, key]) => Some(tokio_rustls::TlsAcceptor::from(
                skyhook::serve::tls::server_config(cert.as_ref(), key.as_ref(), None)?,
            )),
            _ => None,
        })
    };
    let times = Arc::new(Mutex::new(Vec::new()));
    let listeners = (0..nodes)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut shares: Vec<Vec<_>> = (0..cores).map(|_| Vec::new()).collect();
    for (i, l) in listeners.into_iter().enumerate() {
        l.set_nonblocking(true)?;
        shares[i % cores].push((l, tls(i)?));
    }
    for share in shares {
        let (response, times) = (response.clone(), times.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async move {
                let mut set = tokio::task::JoinSet::new();
                for (l, tls) in share {
                    let l = tokio::net::TcpListener::from_std(l).expect("a listener");
                    let (response, tls, times) = (response.clone(), tls.clone(), times.clone());
                    set.spawn(async move {
                        while let Ok((s, _)) = l.accept().await {
                            let _ = s.set_nodelay(true);
                            let (response, tls, times) =
                                (response.clone(), tls.clone(), times.clone());
                            tokio::spawn(async move {
                                match tls {
                                    Some(a) => {
                                        if let Ok(s) = a.accept(s).await {
                                            answer(s, &response, delay, &times).await;
                                        }
                                    }
                                    None => answer(s, &response, delay, &times).await,
                                }
                            });
                        }
                    });
                }
                while set.join_next().await.is_some() {}
            });
        });
    }
    println!("{}", serde_json::to_string(&ports)?);
    for line in std::io::stdin().lock().lines() {
        line?;
        let got: Vec<[f64; 2]> = std::mem::take(&mut *times.lock().map_err(|e| e.to_string())?);
        println!("{}", serde_json::to_string(&got)?);
    }
    Ok(())
}
