//! `fs::fetch` against loopback HTTP(S) servers started by the tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::host::ExecMode;
use crate::host::fetch::{FetchError, FetchOptions, fetch, fetch_with, unpinned_warning};
use crate::host::files::fs;
use crate::host::root::error::HostError;
use crate::host::tests::{all_modes, snapshot};
use crate::host::testutil::TestHost;
use tokio_rustls::rustls;

pub(crate) const BODY: &[u8] = b"#!/bin/sh\necho tool 1.0\n";

pub(crate) fn sha(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// What the server answers for a path.
pub(crate) enum Reply {
    Body(Vec<u8>),
    Redirect(String),
    Status(&'static str),
    /// Headers announcing 1 MB and a few bytes, then nothing until the client goes away; the
    /// sender is told once the bytes are out.
    Hang(mpsc::Sender<()>),
}

type Routes = Arc<dyn Fn(&str) -> Reply + Send + Sync>;

pub(crate) struct Server {
    addr: SocketAddr,
    /// Request paths in arrival order.
    requests: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(tls: Option<Arc<rustls::ServerConfig>>, routes: Routes) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let reqs = requests.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (routes, reqs, tls) = (routes.clone(), reqs.clone(), tls.clone());
                std::thread::spawn(move || match tls {
                    None => handle(conn, &routes, &reqs),
                    Some(cfg) => {
                        let Ok(sc) = rustls::ServerConnection::new(cfg) else {
                            return;
                        };
                        handle(rustls::StreamOwned::new(sc, conn), &routes, &reqs);
                    }
                });
            }
        });
        Server { addr, requests }
    }

    pub(crate) fn plain(routes: impl Fn(&str) -> Reply + Send + Sync + 'static) -> Server {
        Server::start(None, Arc::new(routes))
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

fn handle<S: Read + Write>(s: S, routes: &Routes, reqs: &Mutex<Vec<String>>) {
    let mut r = BufReader::new(s);
    let mut first = String::new();
    if r.read_line(&mut first).unwrap_or(0) == 0 {
        return;
    }
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
    }
    let path = first.split(' ').nth(1).unwrap_or("").to_string();
    reqs.lock().unwrap().push(path.clone());
    let reply = routes(&path);
    let s = r.get_mut();
    let _ = match reply {
        Reply::Body(b) => {
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                b.len()
            );
            s.write_all(&b)
        }
        Reply::Redirect(to) => write!(
            s,
            "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
        Reply::Status(st) => write!(
            s,
            "HTTP/1.1 {st}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
        Reply::Hang(tx) => {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\npartial");
            let _ = s.flush();
            let _ = tx.send(());
            // Until the client closes the connection.
            let mut buf = [0u8; 64];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
            Ok(())
        }
    };
    let _ = s.flush();
}

fn opts(sha256: &str) -> FetchOptions {
    FetchOptions {
        sha256: Some(sha256.into()),
        ..FetchOptions::default()
    }
}

fn fixed() -> Server {
    Server::plain(|p| match p {
        "/tool" => Reply::Body(BODY.to_vec()),
        "/redir" => Reply::Redirect("/tool".into()),
        "/loop" => Reply::Redirect("/loop".into()),
        _ => Reply::Status("404 Not Found"),
    })
}

/// Names in a directory of the agent-side root (temporaries included).
fn names(t: &TestHost, dir: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(t.p(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn fetch_all_modes_downloads_once() {
    let t = TestHost::new();
    let srv = fixed();
    let url = srv.url("/tool");
    let o = FetchOptions {
        mode: Some(0o755),
        ..opts(&sha(BODY))
    };
    // plan, check, apply, apply again, check: only the first apply requests anything.
    all_modes(&t, |h| Ok(vec![fetch(h, &url, "/opt/tool/bin/tool", &o)?]));
    assert_eq!(srv.requests(), vec!["/tool"]);
    assert_eq!(std::fs::read(t.p("/opt/tool/bin/tool")).unwrap(), BODY);
    let m = std::fs::metadata(t.p("/opt/tool/bin/tool")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o755);
    assert_eq!(names(&t, "/opt/tool/bin"), vec!["tool"]);

    // The plan's line, and its digest.
    std::fs::remove_file(t.p("/opt/tool/bin/tool")).unwrap();
    let mut h = t.host(ExecMode::Plan);
    assert!(fetch(&mut h, &url, "/opt/tool/bin/tool", &o).unwrap());
    let rep = h.finish().unwrap();
    assert_eq!(
        rep.changes[0].summary,
        format!(
            "would download {url} (sha256 {}) to /opt/tool/bin/tool (mode 0755)",
            sha(BODY)
        )
    );
    assert_eq!(rep.changes[0].kind, "fetch");
    assert_eq!(rep.changes[0].after, Some(format!("sha256:{}", sha(BODY))));
    assert_eq!(srv.requests(), vec!["/tool"], "a plan made a request");
}

/// Without a digest: downloaded when missing, in every mode like a pinned one, not
/// verified; an existing regular file (any content) is unchanged, only its mode is set; the
/// plan's line says it is not verified and carries no digest.
#[test]
fn unpinned_fetch_downloads_a_missing_file_and_keeps_an_existing_one() {
    let t = TestHost::new();
    let srv = fixed();
    let url = srv.url("/tool");
    let o = FetchOptions::default();
    all_modes(&t, |h| Ok(vec![fetch(h, &url, "/opt/tool", &o)?]));
    assert_eq!(srv.requests(), vec!["/tool"]);
    assert_eq!(std::fs::read(t.p("/opt/tool")).unwrap(), BODY);

    let mut h = t.host(ExecMode::Plan);
    let f = fetch_with(&mut h, &url, "/opt/new", &o).unwrap();
    assert_eq!((f.changed, f.downloaded), (true, true));
    // A second unpinned fetch sees the planned file; a pinned one cannot know its digest.
    assert!(!fetch(&mut h, &url, "/opt/new", &o).unwrap());
    assert!(fetch(&mut h, &url, "/opt/new", &opts(&sha(BODY))).unwrap());
    let rep = h.finish().unwrap();
    assert_eq!(
        rep.changes[0].summary,
        format!("would download {url} (not verified: no sha256) to /opt/new")
    );
    assert_eq!(rep.changes[0].after, None);

    t.file("/opt/local", "edited by hand\n");
    let o = FetchOptions {
        mode: Some(0o700),
        ..FetchOptions::default()
    };
    let mut h = t.host(ExecMode::Apply);
    let f = fetch_with(&mut h, &url, "/opt/local", &o).unwrap();
    assert_eq!((f.changed, f.downloaded), (true, false));
    assert!(!fetch(&mut h, &url, "/opt/local", &o).unwrap());
    h.finish().unwrap();
    assert_eq!(t.read("/opt/local"), "edited by hand\n");
    let m = std::fs::metadata(t.p("/opt/local")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o700);
    assert_eq!(
        srv.requests(),
        vec!["/tool"],
        "only the first apply downloaded"
    );
    assert_eq!(
        unpinned_warning(&url, "/opt/x", true),
        format!(
            "warning: fs::fetch: {url} is not verified (no sha256): would be downloaded to /opt/x as served"
        )
    );
}

#[test]
fn plan_sees_the_planned_download() {
    let t = TestHost::new();
    let srv = fixed();
    let url = srv.url("/tool");
    let before = snapshot(&t);
    let mut h = t.host(ExecMode::Plan);
    assert!(fetch(&mut h, &url, "/opt/t", &opts(&sha(BODY))).unwrap());
    assert!(fs::exists(&h, "/opt/t").unwrap());
    assert!(fs::is_file(&h, "/opt/t").unwrap());
    assert_eq!(fs::stat(&h, "/opt/t").unwrap().mode, 0o644);
    assert_eq!(
        fs::read(&h, "/opt/t").unwrap_err().to_string(),
        "/opt/t: is downloaded by fs::fetch only when applied: its content is unknown in a plan"
    );
    // Same digest: unchanged; another digest: a new download; a chmod keeps it planned.
    assert!(!fetch(&mut h, &url, "/opt/t", &opts(&sha(BODY))).unwrap());
    assert!(fetch(&mut h, &url, "/opt/t", &opts(&sha(b"other"))).unwrap());
    assert!(fs::chmod(&mut h, "/opt/t", 0o700).unwrap());
    assert_eq!(fs::stat(&h, "/opt/t").unwrap().mode, 0o700);
    assert!(!fetch(&mut h, &url, "/opt/t", &opts(&sha(b"other"))).unwrap());
    let rep = h.finish().unwrap();
    assert_eq!(rep.changes.len(), 3);
    assert_eq!(snapshot(&t), before);
    assert!(srv.requests().is_empty());
}

#[test]
fn existing_file_with_the_digest_is_not_downloaded_but_gets_its_mode() {
    let t = TestHost::new();
    let srv = fixed();
    t.file("/opt/t", std::str::from_utf8(BODY).unwrap());
    let o = FetchOptions {
        mode: Some(0o600),
        ..opts(&sha(BODY))
    };
    let mut h = t.host(ExecMode::Check);
    assert!(fetch(&mut h, &srv.url("/tool"), "/opt/t", &o).unwrap());
    let rep = h.finish().unwrap();
    assert_eq!(rep.drift()[0].summary, "chmod /opt/t 0644 -> 0600");
    let mut h = t.host(ExecMode::Apply);
    assert!(fetch(&mut h, &srv.url("/tool"), "/opt/t", &o).unwrap());
    assert!(!fetch(&mut h, &srv.url("/tool"), "/opt/t", &o).unwrap());
    h.finish().unwrap();
    let m = std::fs::metadata(t.p("/opt/t")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o600);
    assert!(srv.requests().is_empty());
}

#[test]
fn check_reports_drift_for_another_digest() {
    let t = TestHost::new();
    let srv = fixed();
    t.file("/opt/t", "old\n");
    let mut h = t.host(ExecMode::Check);
    assert!(fetch(&mut h, &srv.url("/tool"), "/opt/t", &opts(&sha(BODY))).unwrap());
    let rep = h.finish().unwrap();
    assert_eq!(rep.drift().len(), 1);
    assert_eq!(rep.drift()[0].kind, "fetch");
    assert!(srv.requests().is_empty());
    assert_eq!(t.read("/opt/t"), "old\n");
}

#[test]
fn redirects_are_followed_and_bounded() {
    let t = TestHost::new();
    let srv = fixed();
    let mut h = t.host(ExecMode::Apply);
    assert!(fetch(&mut h, &srv.url("/redir"), "/opt/t", &opts(&sha(BODY))).unwrap());
    assert_eq!(srv.requests(), vec!["/redir", "/tool"]);
    assert_eq!(std::fs::read(t.p("/opt/t")).unwrap(), BODY);

    let url = srv.url("/loop");
    let e = fetch(&mut h, &url, "/opt/l", &opts(&sha(BODY))).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("failed to download {url}: more than 5 redirects")
    );
    assert_eq!(srv.requests().len(), 2 + 6);
    assert!(!t.p("/opt/l").exists());
    assert_eq!(names(&t, "/opt"), vec!["t"]);
    h.finish().unwrap();
}

#[test]
fn http_errors_and_wrong_checksums_change_nothing() {
    let t = TestHost::new();
    let srv = fixed();
    t.file("/opt/t", "old\n");
    let mut h = t.host(ExecMode::Apply);
    let url = srv.url("/nope");
    let e = fetch(&mut h, &url, "/opt/t", &opts(&sha(BODY))).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("failed to download {url}: server answered 404 Not Found")
    );
    let url = srv.url("/tool");
    let wrong = sha(b"something else");
    let e = fetch(&mut h, &url, "/opt/t", &opts(&wrong)).unwrap_err();
    assert!(matches!(
        e,
        FetchError::Host(HostError::ChecksumMismatch(_))
    ));
    assert_eq!(
        e.to_string(),
        format!(
            "checksum mismatch for {url}: expected sha256 {wrong}, got sha256 {} (/opt/t left unchanged)",
            sha(BODY)
        )
    );
    h.finish().unwrap();
    assert_eq!(t.read("/opt/t"), "old\n");
    assert_eq!(names(&t, "/opt"), vec!["t"], "a temporary file was left");
}

#[test]
fn size_limit_timeout_and_cancel() {
    let t = TestHost::new();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let srv = Server::plain(move |p| match p {
        "/tool" => Reply::Body(BODY.to_vec()),
        _ => Reply::Hang(tx.lock().unwrap().clone()),
    });
    let mut h = t.host(ExecMode::Apply);
    let url = srv.url("/tool");
    let o = FetchOptions {
        max_bytes: Some(5),
        ..opts(&sha(BODY))
    };
    assert_eq!(
        fetch(&mut h, &url, "/opt/t", &o).unwrap_err().to_string(),
        format!("failed to download {url}: the body is larger than max_bytes (5 bytes)")
    );

    let url = srv.url("/hang");
    let o = FetchOptions {
        timeout: Some(Duration::from_millis(200)),
        ..opts(&sha(BODY))
    };
    assert_eq!(
        fetch(&mut h, &url, "/opt/t", &o).unwrap_err().to_string(),
        format!("failed to download {url}: timed out after 0.2s")
    );
    rx.recv().unwrap();
    h.finish().unwrap();

    // Cancelled while the body hangs: aborted once the server has sent its first bytes.
    let cancel = crate::process::Cancel::new();
    let mut h = t.host_with(ExecMode::Apply, |o| o.cancel = cancel.clone());
    let aborter = std::thread::spawn(move || {
        rx.recv().unwrap();
        cancel.abort(crate::process::CancelReason::Remote("the test".into()));
    });
    assert_eq!(
        fetch(&mut h, &url, "/opt/t", &opts(&sha(BODY)))
            .unwrap_err()
            .to_string(),
        format!("failed to download {url}: cancelled: cancelled by the test")
    );
    aborter.join().unwrap();
    h.finish().unwrap();
    assert_eq!(names(&t, "/opt"), Vec::<String>::new());
}

#[test]
fn bad_arguments_are_named() {
    let t = TestHost::new();
    let mut h = t.host(ExecMode::Plan);
    fn e<E: std::fmt::Display>(r: Result<bool, E>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(v) => panic!("expected an error, got Ok({v})"),
        }
    }
    assert_eq!(
        e(fetch(&mut h, "http://x/a", "rel", &opts(&sha(BODY)))),
        "paths must be absolute: \"rel\""
    );
    assert_eq!(
        e(fetch(&mut h, "ftp://x/a", "/a", &opts(&sha(BODY)))),
        "invalid fs::fetch argument: bad URL \"ftp://x/a\": only http:// and https:// are supported"
    );
    t.file("/d/x", "");
    assert_eq!(
        e(fetch(&mut h, "http://x/a", "/d", &opts(&sha(BODY)))),
        "/d: is a directory"
    );
    let o = FetchOptions {
        owner: Some("nobody-here".into()),
        ..opts(&sha(BODY))
    };
    assert_eq!(
        e(fetch(&mut h, "http://x/a", "/a", &o)),
        "unknown user \"nobody-here\" (not in the host's /etc/passwd)"
    );
}

/// A CA and a server certificate for 127.0.0.1 signed by it: (CA PEM, server config).
fn tls_pair() -> (String, Arc<rustls::ServerConfig>) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
    (ca.pem(), Arc::new(cfg))
}

#[test]
fn https_trusts_the_hosts_ca_bundle() {
    let t = TestHost::new();
    let (ca, cfg) = tls_pair();
    let srv = Server::start(
        Some(cfg),
        Arc::new(|p: &str| match p {
            "/tool" => Reply::Body(BODY.to_vec()),
            _ => Reply::Status("404 Not Found"),
        }),
    );
    let url = format!("https://{}/tool", srv.addr);
    let mut h = t.host(ExecMode::Apply);
    assert_eq!(
        fetch(&mut h, &url, "/opt/t", &opts(&sha(BODY)))
            .unwrap_err()
            .to_string(),
        format!(
            "failed to download {url}: https needs the host's CA bundle, none found under the host root (looked for /etc/ssl/certs/ca-certificates.crt, /etc/pki/tls/certs/ca-bundle.crt, /etc/ssl/ca-bundle.pem, /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem, /etc/ssl/cert.pem)"
        )
    );
    // Another CA in the bundle: the server is not trusted.
    let (other_ca, _) = tls_pair();
    t.file("/etc/pki/tls/certs/ca-bundle.crt", &other_ca);
    let e = fetch(&mut h, &url, "/opt/t", &opts(&sha(BODY)))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!(
            "failed to download {url}: TLS handshake with 127.0.0.1:{} failed: invalid peer certificate",
            srv.addr.port()
        )),
        "{e}"
    );
    // The server's CA in the Debian bundle (looked at first).
    t.file("/etc/ssl/certs/ca-certificates.crt", &ca);
    assert!(fetch(&mut h, &url, "/opt/t", &opts(&sha(BODY))).unwrap());
    h.finish().unwrap();
    assert_eq!(std::fs::read(t.p("/opt/t")).unwrap(), BODY);
    assert_eq!(srv.requests(), vec!["/tool"]);
}

#[test]
fn fetch_works_inside_a_runtime_context() {
    let t = TestHost::new();
    let srv = fixed();
    let url = srv.url("/tool");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let changed = rt.block_on(async {
        let mut h = t.host(ExecMode::Apply);
        let r = fetch(&mut h, &url, "/opt/t", &opts(&sha(BODY)));
        h.finish().unwrap();
        r
    });
    assert!(changed.unwrap());
    assert_eq!(std::fs::read(t.p("/opt/t")).unwrap(), BODY);
}

/// Credentials in a URL are never sent (no `Authorization` header) and would be printed in
/// the plan line, the report and every error: the call refuses them, without echoing the
/// password, and makes no request.
#[test]
fn credentials_in_the_url_are_refused_without_printing_them() {
    let t = TestHost::new();
    for mode in [ExecMode::Plan, ExecMode::Apply] {
        let mut h = t.host(mode);
        let err = fetch(
            &mut h,
            "http://admin:s3cret@127.0.0.1:1/tool",
            "/opt/tool",
            &opts(&sha(BODY)),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "invalid fs::fetch argument: bad URL \"http://***@127.0.0.1:1/tool\": credentials \
             in the URL are not supported (they are not sent, and would be printed in plans \
             and logs)"
        );
        assert_eq!(h.changed(), 0);
    }
    assert!(!t.p("/opt").exists());
}
