//! `fs::fetch` itself: its options, the check of what is at the path through the session's
//! view, and the download submitted as one effect (module docs of [`crate::host::fetch`]).

use std::path::Path;
use std::time::Duration;

pub use crate::host::effects::effect::Download;
use crate::host::effects::effect::Effect;
use crate::host::effects::executors::download::parse_url;
pub use crate::host::effects::executors::download::{CA_BUNDLES, MAX_REDIRECTS};

use crate::host::Host;
use crate::host::effects::session::Stat;
use crate::host::files::fs::{UnknownId, host_path};
use crate::host::root::error::{HostError, Result};

/// A failure of `fs::fetch` of its own; everything else is the session's [`HostError`].
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// What the session failed with.
    #[error(transparent)]
    Host(#[from] HostError),

    /// The owner or group is not in the host root's `/etc/passwd` or `/etc/group`.
    #[error(transparent)]
    UnknownId(#[from] UnknownId),
}

impl crate::host::api::AreaError for FetchError {
    /// The account files are the host's state: a command the plan did not run may add the
    /// user or group.
    fn depends_on_host(&self) -> bool {
        match self {
            FetchError::Host(e) => e.depends_on_host(),
            FetchError::UnknownId(_) => true,
        }
    }
}
crate::host::api::area_error!(FetchError);

/// Default of the `timeout` option: the whole download (connect, redirects, body) may take
/// this long (300 s), capped by what remains of the step's deadline.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Default of the `max_bytes` option: a body larger than this (4 GiB) fails the download.
pub const DEFAULT_MAX_BYTES: u64 = 4 << 30;

/// Options of `fs::fetch`.
#[derive(Debug, Clone, Default)]
pub struct FetchOptions {
    /// The expected SHA-256 digest, 64 hex digits (upper case accepted); `None`: not
    /// verified.
    pub sha256: Option<String>,
    /// Permission bits of the file (`None`: an existing file's, else 0644).
    pub mode: Option<u32>,
    /// Owner: a user name from the host root's `/etc/passwd`, or a number.
    pub owner: Option<String>,
    /// Group: a group name from the host root's `/etc/group`, or a number.
    pub group: Option<String>,
    /// Limit of the whole download ([`DEFAULT_TIMEOUT`] when `None`).
    pub timeout: Option<Duration>,
    /// Largest body accepted, in bytes ([`DEFAULT_MAX_BYTES`] when `None`).
    pub max_bytes: Option<u64>,
}

fn invalid(message: String) -> HostError {
    HostError::Invalid {
        what: "fs::fetch argument",
        message,
    }
}

/// 64 hex digits, lower-cased.
fn check_sha256(s: &str) -> Result<String> {
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(invalid(format!("sha256 must be 64 hex digits, got {s:?}")));
    }
    Ok(s.to_ascii_lowercase())
}

/// What one `fs::fetch` did (or, in plan and check mode, would do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetched {
    /// Something changed: a download, or only the mode or owner.
    pub changed: bool,
    /// The file was (or would be) downloaded.
    pub downloaded: bool,
    /// The download was only planned (plan and check mode: nothing was requested), as the
    /// session's executor answered (`Host::submit_download`).
    pub planned: bool,
}

/// The warning line of a download without a digest (no newline): `fs::fetch: <url> is not
/// verified (no sha256): downloaded to <path> as served`, `would be downloaded` in a plan.
pub fn unpinned_warning(url: &str, p: &str, planned: bool) -> String {
    let verb = if planned {
        "would be downloaded"
    } else {
        "downloaded"
    };
    format!("warning: fs::fetch: {url} is not verified (no sha256): {verb} to {p} as served")
}

/// `fs::fetch(url, path, opts)`: make `path` the file at `url` whose SHA-256 digest is
/// `opts.sha256` (any file at `url` when there is none), with the requested attributes.
/// Returns whether something changed (or, in plan/check mode, would). See the module docs
/// for the modes.
///
/// # Errors
/// As [`fetch_with`].
pub fn fetch(h: &mut Host, url: &str, p: &str, opts: &FetchOptions) -> Result<bool, FetchError> {
    Ok(fetch_with(h, url, p, opts)?.changed)
}

/// [`fetch`] of a file with no `owner` or `group` option (a package repository's key), so
/// no name to resolve: the session's error only.
///
/// # Errors
/// As [`fetch_with`], but for the unknown owner or group.
pub(crate) fn fetch_unowned(h: &mut Host, url: &str, p: &str, opts: &FetchOptions) -> Result<bool> {
    debug_assert!(opts.owner.is_none() && opts.group.is_none());
    let d = download(url, p, opts)?;
    Ok(fetch_download(h, d)?.changed)
}

/// [`fetch`], saying also whether the file itself was (or would be) downloaded.
///
/// # Errors
/// Relative path; a bad URL, malformed `sha256`, zero `timeout`/`max_bytes`
/// ([`HostError::Invalid`]); a directory or non-regular file at `path`;
/// [`HostError::BadAncestor`]; an unknown owner or group ([`FetchError::UnknownId`]); in
/// apply mode [`HostError::Fetch`] (connection, TLS, status, redirects, size, timeout,
/// cancellation) and [`HostError::ChecksumMismatch`], the destination unchanged in both
/// cases.
pub fn fetch_with(
    h: &mut Host,
    url: &str,
    p: &str,
    opts: &FetchOptions,
) -> Result<Fetched, FetchError> {
    let mut d = download(url, p, opts)?;
    (d.uid, d.gid) =
        crate::host::files::fs::ids::<FetchError>(h, opts.owner.as_deref(), opts.group.as_deref())?;
    Ok(fetch_download(h, d)?)
}

/// The download `opts` ask for, its arguments checked (owner and group not yet resolved).
fn download(url: &str, p: &str, opts: &FetchOptions) -> Result<Download> {
    let path = host_path(p)?;
    parse_url(url).map_err(invalid)?;
    let sha256 = opts.sha256.as_deref().map(check_sha256).transpose()?;
    if opts.timeout.is_some_and(|t| t.is_zero()) {
        return Err(invalid("timeout must be more than 0 seconds".into()));
    }
    if opts.max_bytes == Some(0) {
        return Err(invalid("max_bytes must be more than 0".into()));
    }
    Ok(Download {
        url: url.to_string(),
        path,
        sha256,
        mode: opts.mode,
        uid: None,
        gid: None,
        timeout: opts.timeout.unwrap_or(DEFAULT_TIMEOUT),
        max_bytes: opts.max_bytes.unwrap_or(DEFAULT_MAX_BYTES),
    })
}

/// [`fetch_with`] of a checked download with its ids.
fn fetch_download(h: &mut Host, d: Download) -> Result<Fetched> {
    h.check_creatable(&d.path)?;
    // Unchanged without a lock (no lock file for a call that changes nothing, and so, in
    // plan and check mode, no planned lock directory); a change is decided again under the
    // lock.
    if let Some((digest, stat)) = current(h, &d.path, d.sha256.is_some())?
        && digest == d.sha256
        && attrs_ok(&d, &stat)
    {
        h.note_unchanged();
        return Ok(Fetched {
            changed: false,
            downloaded: false,
            planned: false,
        });
    }
    let lock = h.lock_for_update(&d.path)?;
    let changed = fetch_locked(h, d);
    drop(lock);
    changed
}

fn attrs_ok(d: &Download, s: &Stat) -> bool {
    d.mode.is_none_or(|m| m == s.mode)
        && d.uid.is_none_or(|u| u == s.uid)
        && d.gid.is_none_or(|g| g == s.gid)
}

fn fetch_locked(h: &mut Host, d: Download) -> Result<Fetched> {
    match current(h, &d.path, d.sha256.is_some())? {
        Some((digest, stat)) if digest == d.sha256 => {
            let mut changed = false;
            if let Some(m) = d.mode
                && m != stat.mode
            {
                h.submit(Effect::Chmod {
                    path: d.path.clone(),
                    mode: m,
                })?;
                changed = true;
            }
            let uid = d.uid.filter(|u| *u != stat.uid);
            let gid = d.gid.filter(|g| *g != stat.gid);
            if uid.is_some() || gid.is_some() {
                h.submit(Effect::Chown {
                    path: d.path.clone(),
                    uid,
                    gid,
                })?;
                changed = true;
            }
            if !changed {
                h.note_unchanged();
            }
            Ok(Fetched {
                changed,
                downloaded: false,
                planned: false,
            })
        }
        _ => Ok(Fetched {
            changed: true,
            downloaded: true,
            planned: h.submit_download(d)?,
        }),
    }
}

/// The digest and metadata of the file at `path` as the session sees it (a planned
/// download's digest in plan/check mode), `None` when absent. The digest is computed only
/// when `hash` (a pinned download): an unpinned one compares `None` with `None`, so any
/// existing regular file matches it.
fn current(h: &Host, path: &Path, hash: bool) -> Result<Option<(Option<String>, Stat)>> {
    let Some(stat) = h.view_stat(path, true)? else {
        return Ok(None);
    };
    match stat.kind.as_str() {
        "file" => {}
        "dir" => {
            return Err(HostError::WrongKind {
                path: path.to_path_buf(),
                what: "is a directory",
            });
        }
        _ => {
            return Err(HostError::WrongKind {
                path: path.to_path_buf(),
                what: "is not a regular file",
            });
        }
    }
    if !hash {
        return Ok(Some((None, stat)));
    }
    Ok(Some((h.view_digest(path)?, stat)))
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert::{check_keys, opt_string};
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use crate::host::files::fs::attribute_opts;
    pub(super) use rhai::{Dynamic, ImmutableString as S, Map};
}
use prelude::*;

/// The option keys of `fs::fetch`.
const FETCH_KEYS: &[&str] = &["sha256", "mode", "owner", "group", "timeout", "max_bytes"];

/// A positive number of seconds (int or float) of option `key`.
fn secs(d: &Dynamic, key: &str) -> Result<Duration, String> {
    let secs = if let Ok(i) = d.as_int() {
        i as f64
    } else if let Ok(f) = d.as_float() {
        f
    } else {
        return Err(format!(
            "option {key} must be a number of seconds, got {}",
            d.type_name()
        ));
    };
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!(
            "option {key} must be a positive number of seconds, got {secs}"
        ));
    }
    Ok(Duration::from_secs_f64(secs.min(1e9)))
}

/// `#{sha256, mode, owner, group, timeout, max_bytes}` (`()` values mean "default").
fn fetch_opts(m: &Map) -> Result<FetchOptions, String> {
    check_keys(m, FETCH_KEYS)?;
    let get = |k: &str| m.get(k).filter(|d| !d.is_unit());
    let max_bytes = get("max_bytes")
        .map(|d| match d.as_int() {
            Ok(n) if n > 0 => Ok(n as u64),
            _ => Err(format!(
                "option max_bytes must be a positive integer, got {d}"
            )),
        })
        .transpose()?;
    let attrs = attribute_opts(m)?;
    Ok(FetchOptions {
        sha256: opt_string(m, "sha256")?,
        mode: attrs.mode,
        owner: attrs.owner,
        group: attrs.group,
        timeout: get("timeout").map(|d| secs(d, "timeout")).transpose()?,
        max_bytes,
    })
}

host_fn! {
    /// Download `url` (`http://`, or `https://` trusting the host's CA bundle: the first of
    /// `/etc/ssl/certs/ca-certificates.crt`, `/etc/pki/tls/certs/ca-bundle.crt`,
    /// `/etc/ssl/ca-bundle.pem`, `/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem`,
    /// `/etc/ssl/cert.pem`; up to 5 redirects; no proxy; a URL with `user:password@` is an error,
    /// as credentials are not sent) to `path`, verified by `#{sha256}` (64 hex digits), with
    /// `#{mode, owner, group}`. Unchanged when the file already has that digest (only
    /// `mode`/`owner`/`group` are then set when they differ); otherwise streamed to a temporary
    /// file beside it, checked, and renamed into place. A wrong digest, an HTTP error, a body over
    /// `max_bytes` (default 4 GiB), the `timeout` (seconds, default 300, capped by the step's
    /// deadline) or a cancel fail the call and leave `path` unchanged. A plan makes no request
    /// (`would download <url> (sha256 ...) to <path>`); later reads in it see the file, but
    /// `fs::read` of it fails (its content is unknown until applied). Check: drift when missing or
    /// of another digest. Without `sha256` the download is not verified and any existing regular
    /// file at `path` counts as downloaded (drift only when missing); each download planned or done
    /// then writes `warning: fs::fetch: <url> is not verified (no sha256): ...` to the step's
    /// stderr, and the plan's line says `(not verified: no sha256)`.
    #[host(ns = "fs", effects = [Fetch, Chmod, Chown], options = FETCH_KEYS)]
    fn fetch(run: &Api, h: &mut Host, url: S, path: S, opts: Map) -> bool {
        let opts = fetch_opts(&opts)?;
        let f = super::fetch_with(h, &url, &path, &opts)?;
        if f.downloaded && opts.sha256.is_none() {
            let line = super::unpinned_warning(&url, &path, f.planned);
            run.output.stderr(format!("{line}\n").as_bytes());
        }
        Ok(f.changed)
    }
}

host_fns!(fetch);

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::Uri;

    use crate::host::effects::executors::download::resolve;

    fn u(s: &str) -> Uri {
        s.parse().unwrap()
    }

    /// The exact effect `fs::fetch` submits, recorded in a plan (nothing is requested), and
    /// the planned download answering a second call with the same digest through the read
    /// view.
    #[test]
    fn fetch_submits_one_download_and_reads_the_planned_digest() {
        let t = crate::host::testutil::TestHost::new();
        let mut h = t.host(crate::host::ExecMode::Plan);
        h.record_effects();
        let o = FetchOptions {
            sha256: Some("AB".repeat(32)),
            mode: Some(0o755),
            ..Default::default()
        };
        assert!(fetch(&mut h, "http://127.0.0.1:9/tool", "/opt/tool", &o).unwrap());
        assert!(!fetch(&mut h, "http://127.0.0.1:9/tool", "/opt/tool", &o).unwrap());
        assert_eq!(
            format!("{:?}", h.recorded_effects()),
            format!(
                "[Fetch(Download {{ url: \"http://127.0.0.1:9/tool\", path: \"/opt/tool\", \
                 sha256: Some(\"{}\"), mode: Some(493), uid: None, gid: None, timeout: 300s, \
                 max_bytes: 4294967296 }})]",
                "ab".repeat(32)
            )
        );
    }

    #[test]
    fn redirect_targets() {
        let base = u("http://a:8/x/y/file?q=1");
        assert_eq!(resolve(&base, "/z").unwrap(), u("http://a:8/z"));
        assert_eq!(resolve(&base, "other").unwrap(), u("http://a:8/x/y/other"));
        assert_eq!(resolve(&base, "//b/c").unwrap(), u("http://b/c"));
        assert_eq!(resolve(&base, "https://c/d").unwrap(), u("https://c/d"));
        assert_eq!(
            resolve(&base, "ftp://c/d").unwrap_err(),
            "redirect to \"ftp://c/d\": bad URL \"ftp://c/d\": only http:// and https:// are supported"
        );
    }

    #[test]
    fn url_and_digest_validation() {
        assert!(parse_url("http://example.com/a").is_ok());
        assert_eq!(
            parse_url("file:///etc/passwd").unwrap_err(),
            "bad URL \"file:///etc/passwd\": only http:// and https:// are supported"
        );
        assert_eq!(
            parse_url("/relative").unwrap_err(),
            "bad URL \"/relative\": only http:// and https:// are supported"
        );
        assert_eq!(check_sha256(&"AB".repeat(32)).unwrap(), "ab".repeat(32));
        assert_eq!(
            check_sha256("abc").unwrap_err().to_string(),
            "invalid fs::fetch argument: sha256 must be 64 hex digits, got \"abc\""
        );
    }
}
