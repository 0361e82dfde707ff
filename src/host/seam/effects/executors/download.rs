//! The download primitive of the apply executor ([`Effect::Fetch`](crate::host::effects::effect::Effect::Fetch)): under the path's lock the
//! body is streamed into a temporary file beside the destination, hashed as it arrives, and
//! renamed over the destination (fsync of the file; the directory's is the session's) only
//! when the digest matches; a failure leaves the destination unchanged. `fs::fetch`'s module
//! docs ([`crate::host::fetch`]) describe the modes.
//!
//! HTTP/1.1 over TCP (`http://`) or TLS (`https://`, rustls on ring) with hyper's client
//! connection, one connection per request, redirects followed up to [`MAX_REDIRECTS`]. HTTPS
//! trusts the **host's** CA bundle, the first of [`CA_BUNDLES`] that exists under the root.

use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Uri;
use sha2::{Digest, Sha256};
use tokio_rustls::rustls;

use crate::host::effects::context::Context;
use crate::host::effects::effect::Download;
use crate::host::root::HostRoot;
use crate::host::root::error::{HostError, Result};

/// Redirects followed (301, 302, 303, 307, 308) before the download fails.
pub const MAX_REDIRECTS: usize = 5;

/// Where the host's CA bundle is looked for, in order (Debian/Ubuntu, RHEL/Fedora, SUSE,
/// RHEL's extracted bundle, Alpine); the first one present under the host root is used.
pub const CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

pub(crate) fn fetch_err(url: &str, message: impl Into<String>) -> HostError {
    HostError::Fetch {
        url: url.to_string(),
        message: message.into(),
    }
}

/// `url` with any `user:password@` before the host replaced by `***@`, for messages.
pub(crate) fn redacted(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    match url[start..end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..start], &url[start + at..]),
        None => url.to_string(),
    }
}

/// Parse an `http://` or `https://` URL with a host. Credentials (`user:password@`) are
/// refused: they are not sent, and the URL is printed in plans, reports and errors.
pub(crate) fn parse_url(url: &str) -> std::result::Result<Uri, String> {
    let shown = redacted(url);
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    if !lower.starts_with("http://") && !lower.starts_with("https://") {
        return Err(format!(
            "bad URL {shown:?}: only http:// and https:// are supported"
        ));
    }
    if shown != url {
        return Err(format!(
            "bad URL {shown:?}: credentials in the URL are not supported (they are not \
             sent, and would be printed in plans and logs)"
        ));
    }
    let uri: Uri = url.parse().map_err(|e| format!("bad URL {url:?}: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => {
            return Err(format!(
                "bad URL {url:?}: only http:// and https:// are supported"
            ));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("bad URL {url:?}: no host"));
    }
    Ok(uri)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a download failed: a host error to report as is, or a write error of the temporary
/// file (reported by the root as `"failed to write <path>"`).
enum Fail {
    Host(HostError),
    Io(io::Error),
}

impl From<HostError> for Fail {
    fn from(e: HostError) -> Self {
        Fail::Host(e)
    }
}

/// The apply executor's half of [`Effect::Fetch`](crate::host::effects::effect::Effect::Fetch): download, verify, rename (module docs).
///
/// # Errors
/// As `fs::fetch` in apply mode ([`crate::host::fetch::fetch`]); the root's write errors.
pub(crate) fn perform(cx: &Context, d: &Download) -> Result<()> {
    let cancel = cx.opts.cancel.clone();
    if cancel.is_aborted() {
        return Err(cancelled(d, &cancel));
    }
    let timeout = cx.remaining().map_or(d.timeout, |r| r.min(d.timeout));
    let root = &cx.root;
    let mut failure: Option<HostError> = None;
    // The directory's fsync is the session's ([`crate::host::root::durability`]).
    let defer = |dir: &Path| cx.dir_syncs.add(dir);
    let dirs = crate::host::root::DirSync::Defer(&defer);
    let written = root.write_atomic_synced(&d.path, d.mode, d.uid, d.gid, dirs, |f| {
        // A current-thread runtime of its own, on a scoped thread: the caller may itself be
        // inside a runtime's context, where `block_on` is refused.
        let run = || -> std::result::Result<(), Fail> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| fetch_err(&d.url, format!("cannot start the I/O runtime: {e}")))?;
            rt.block_on(async {
                tokio::select! {
                    biased;
                    () = cancel.aborted() => Err(Fail::Host(cancelled(d, &cancel))),
                    r = tokio::time::timeout(timeout, download(root, d, f)) => {
                        r.unwrap_or_else(|_| {
                            Err(Fail::Host(fetch_err(
                                &d.url,
                                format!("timed out after {:.1}s", timeout.as_secs_f64()),
                            )))
                        })
                    }
                }
            })
        };
        let r = std::thread::scope(|s| match s.spawn(run).join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        });
        match r {
            Ok(()) => Ok(()),
            Err(Fail::Io(e)) => Err(e),
            Err(Fail::Host(e)) => {
                failure = Some(e);
                Err(io::Error::other("download failed"))
            }
        }
    });
    match (written, failure) {
        (Ok(()), _) => Ok(()),
        (Err(_), Some(e)) => Err(e),
        (Err(e), None) => Err(e.into()),
    }
}

fn cancelled(d: &Download, cancel: &crate::process::Cancel) -> HostError {
    let reason = cancel
        .reason()
        .map_or_else(|| "the step was cancelled".to_string(), |r| r.to_string());
    fetch_err(&d.url, format!("cancelled: {reason}"))
}

/// GET `d.url` (following redirects) and stream the body into `f`, hashing it.
async fn download(
    root: &HostRoot,
    d: &Download,
    f: &mut std::fs::File,
) -> std::result::Result<(), Fail> {
    let mut uri = parse_url(&d.url).map_err(|m| fetch_err(&d.url, m))?;
    let mut tls: Option<Arc<rustls::ClientConfig>> = None;
    let at = |uri: &Uri| {
        if uri.to_string() == d.url {
            String::new()
        } else {
            format!(" (redirected to {uri})")
        }
    };
    let mut hops = 0;
    let resp = loop {
        let resp = request(root, &uri, &mut tls)
            .await
            .map_err(|m| fetch_err(&d.url, format!("{m}{}", at(&uri))))?;
        let status = resp.status();
        if matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308) {
            if hops == MAX_REDIRECTS {
                return Err(fetch_err(
                    &d.url,
                    format!("more than {MAX_REDIRECTS} redirects{}", at(&uri)),
                )
                .into());
            }
            let loc = resp
                .headers()
                .get(hyper::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| {
                    fetch_err(&d.url, format!("{status} without a Location{}", at(&uri)))
                })?;
            uri = resolve(&uri, loc).map_err(|m| fetch_err(&d.url, m))?;
            hops += 1;
            continue;
        }
        if status != hyper::StatusCode::OK {
            return Err(fetch_err(&d.url, format!("server answered {status}{}", at(&uri))).into());
        }
        break resp;
    };
    let too_large = || {
        fetch_err(
            &d.url,
            format!("the body is larger than max_bytes ({} bytes)", d.max_bytes),
        )
    };
    if let Some(len) = resp
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > d.max_bytes
    {
        return Err(too_large().into());
    }
    let mut body = resp.into_body();
    let mut hasher = Sha256::new();
    let mut total: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            fetch_err(
                &d.url,
                format!("reading the body failed after {total} bytes: {e}"),
            )
        })?;
        if let Ok(data) = frame.into_data() {
            total += data.len() as u64;
            if total > d.max_bytes {
                return Err(too_large().into());
            }
            hasher.update(&data);
            f.write_all(&data).map_err(Fail::Io)?;
        }
    }
    let actual = hex(&hasher.finalize());
    if let Some(expected) = &d.sha256
        && actual != *expected
    {
        return Err(HostError::ChecksumMismatch(Box::new(
            crate::host::root::error::ChecksumMismatch {
                url: d.url.clone(),
                path: d.path.clone(),
                expected: expected.clone(),
                actual,
            },
        ))
        .into());
    }
    Ok(())
}

/// The target of a redirect from `base` to `loc` (absolute, scheme-relative, absolute-path
/// or relative reference).
pub(crate) fn resolve(base: &Uri, loc: &str) -> std::result::Result<Uri, String> {
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base.authority().map_or("", |a| a.as_str());
    let target = if loc.contains("://") {
        loc.to_string()
    } else if let Some(rest) = loc.strip_prefix("//") {
        format!("{scheme}://{rest}")
    } else if loc.starts_with('/') {
        format!("{scheme}://{authority}{loc}")
    } else {
        let path = base.path();
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        let dir = if dir.is_empty() { "/" } else { dir };
        format!("{scheme}://{authority}{dir}{loc}")
    };
    parse_url(&target).map_err(|m| format!("redirect to {loc:?}: {m}"))
}

/// One GET of `uri` on a new connection; the response with its body still streaming.
async fn request(
    root: &HostRoot,
    uri: &Uri,
    tls: &mut Option<Arc<rustls::ClientConfig>>,
) -> std::result::Result<hyper::Response<hyper::body::Incoming>, String> {
    let https = uri.scheme_str() == Some("https");
    let host = uri
        .host()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let authority = uri.authority().map_or(host.clone(), |a| a.to_string());
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let req = hyper::Request::get(target)
        .header(hyper::header::HOST, authority)
        .header(
            hyper::header::USER_AGENT,
            concat!("skyhook-agent/", env!("CARGO_PKG_VERSION")),
        )
        .header(hyper::header::ACCEPT, "*/*")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
    macro_rules! exchange {
        ($stream:expr) => {{
            let (mut tx, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new($stream))
                    .await
                    .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            tx.send_request(req).await.map_err(|e| e.to_string())
        }};
    }
    if !https {
        return exchange!(tcp);
    }
    let cfg = match tls {
        Some(c) => c.clone(),
        None => tls.insert(host_tls_config(root)?).clone(),
    };
    let name = rustls::pki_types::ServerName::try_from(host.clone())
        .map_err(|e| format!("bad TLS server name {host:?}: {e}"))?;
    let stream = tokio_rustls::TlsConnector::from(cfg)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake with {host}:{port} failed: {e}"))?;
    exchange!(stream)
}

/// A TLS client config trusting the host's CA bundle (the first of [`CA_BUNDLES`] under the
/// root; certificates that do not parse are skipped).
fn host_tls_config(root: &HostRoot) -> std::result::Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    for p in CA_BUNDLES {
        let path = Path::new(p);
        let Some(pem) =
            crate::host::root::read::read_whole(root, path, path).map_err(|e| e.to_string())?
        else {
            continue;
        };
        let mut store = rustls::RootCertStore::empty();
        let (added, _) = store.add_parsable_certificates(
            CertificateDer::pem_slice_iter(&pem).filter_map(std::result::Result::ok),
        );
        if added == 0 {
            return Err(format!(
                "the host's CA bundle {p} holds no usable certificate"
            ));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(store)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        return Ok(Arc::new(cfg));
    }
    Err(format!(
        "https needs the host's CA bundle, none found under the host root (looked for {})",
        CA_BUNDLES.join(", ")
    ))
}
