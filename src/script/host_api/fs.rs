//! `fs::`: every file function's reference row and binding, over [`crate::host::fs`] and
//! [`crate::host::fetch`] (`fs::fetch`), and their tests through Rhai.

use std::time::Duration;

use rhai::{Dynamic, ImmutableString as S, Map};

use super::convert::{self, check_keys, opt_bool, opt_scalar, opt_string};
use super::docs::EffectKind::*;
use super::docs::Effects::*;
use super::docs::FnDoc;
use super::docs::{OPTS, P};
use crate::host::fetch::{self, FetchOptions};
use crate::host::fs::{self, LineOptions, WriteOptions};

/// The option keys of `fs::write` and `fs::copy`.
const WRITE_KEYS: &[&str] = &["mode", "owner", "group"];
/// The option keys of `fs::fetch`.
const FETCH_KEYS: &[&str] = &["sha256", "mode", "owner", "group", "timeout", "max_bytes"];

/// `#{mode, owner, group}` (`()` values mean "keep").
fn write_opts(m: &Map) -> Result<WriteOptions, String> {
    check_keys(m, WRITE_KEYS)?;
    attribute_opts(m)
}

/// The `mode`, `owner` and `group` keys of an options map (`()` values mean "keep"), as
/// [`WriteOptions`]; the caller checks the map's keys. Shared by `fs::write`/`fs::copy`
/// and `fs::fetch`.
fn attribute_opts(m: &Map) -> Result<WriteOptions, String> {
    let get = |k: &str| m.get(k).filter(|d| !d.is_unit());
    Ok(WriteOptions {
        mode: get("mode").map(convert::mode).transpose()?,
        owner: get("owner")
            .map(|d| opt_scalar(d, "owner"))
            .transpose()?
            .flatten(),
        group: get("group")
            .map(|d| opt_scalar(d, "group"))
            .transpose()?
            .flatten(),
    })
}

/// `#{regex, create}`.
fn line_opts(m: &Map) -> Result<LineOptions, String> {
    check_keys(m, &["regex", "create"])?;
    Ok(LineOptions {
        regex: opt_string(m, "regex")?,
        create: opt_bool(m, "create", true)?,
    })
}

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

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(super) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "fs",
    "Files — `fs::`",
    "Every path is an absolute host path resolved inside the host root (`..` and symlinks never leave it); a relative path is an error (\"paths must be absolute\"). Writes are atomic (temp file, fsync, rename). A file is read whole only when it is a regular file of at most 64 MiB: a FIFO, device or socket, or a larger file, fails the call with an error naming the path (and the limit) before anything is read, so it can neither block the step nor fill the agent's memory. That applies to `read`, `read_or`, the line and block edits, `append`, `copy` and the comparison `write` makes before replacing a file.",
)];

/// The functions of this file's namespaces, in reference order: each one's reference row
/// and its registration.
pub(super) const FUNCTIONS: &[FnDoc] = &[
    host_fn!(
        "fs",
        "exists",
        &[P],
        "bool",
        ReadsHost,
        "True when `path` exists (following symlinks).",
        |h, p: S| Ok(fs::exists(h, &p)?)
    ),
    host_fn!(
        "fs",
        "is_file",
        &[P],
        "bool",
        ReadsHost,
        "True when `path` is a regular file (following symlinks).",
        |h, p: S| Ok(fs::is_file(h, &p)?)
    ),
    host_fn!(
        "fs",
        "is_dir",
        &[P],
        "bool",
        ReadsHost,
        "True when `path` is a directory (following symlinks).",
        |h, p: S| Ok(fs::is_dir(h, &p)?)
    ),
    host_fn!(
        "fs",
        "read",
        &[P],
        "String",
        ReadsHost,
        "The file's text; an error when it is missing, a directory, not a regular file (a FIFO, device or socket), larger than 64 MiB or not UTF-8 (and the string size limit, 32 MiB, applies to the text).",
        |h, p: S| Ok(fs::read(h, &p)?)
    ),
    host_fn!(
        "fs",
        "read_or",
        &[P, ("default", "String")],
        "String",
        ReadsHost,
        "The file's text, or `default` when it does not exist.",
        |h, p: S, d: S| Ok(fs::read_or(h, &p, &d)?)
    ),
    host_fn!(
        "fs",
        "list",
        &[("dir", "String")],
        "Array",
        ReadsHost,
        "Entry names of a directory, sorted; an error when it is missing.",
        |h, p: S| Ok(convert::array(fs::list(h, &p)?))
    ),
    host_fn!(
        "fs",
        "glob",
        &[("pattern", "String")],
        "Array",
        ReadsHost,
        "Sorted host paths matching an absolute pattern (`*`, `?`, `[abc]`, `{a,b}`, `**`).",
        |h, p: S| Ok(convert::array(fs::glob(h, &p)?))
    ),
    host_fn!(
        "fs",
        "stat",
        &[P],
        "Map",
        ReadsHost,
        "`#{kind, size, mode, uid, gid, mtime}` of `path` itself (`kind`: `file`, `dir`, `symlink`, `other`); an error when missing.",
        |h, p: S| {
            let st = fs::stat(h, &p)?;
            let mut m = Map::new();
            m.insert("kind".into(), convert::s(st.kind));
            m.insert("size".into(), Dynamic::from(st.size as i64));
            m.insert("mode".into(), Dynamic::from(i64::from(st.mode)));
            m.insert("uid".into(), Dynamic::from(i64::from(st.uid)));
            m.insert("gid".into(), Dynamic::from(i64::from(st.gid)));
            m.insert("mtime".into(), Dynamic::from(st.mtime));
            Ok(m)
        }
    ),
    host_fn!(
        "fs",
        "write",
        &[P, ("content", "String")],
        "bool",
        Submits(&[Write, Chmod, Chown]),
        "Replace the file's content atomically; an existing file keeps its mode, owner and extended attributes; a symlink's target is written.",
        |h, p: S, c: S| Ok(fs::write(h, &p, &c, &WriteOptions::default())?)
    ),
    host_fn!(
        "fs",
        "write",
        &[P, ("content", "String"), OPTS],
        "bool",
        Submits(&[Write, Chmod, Chown]),
        "As `write`, also setting `#{mode, owner, group}` (mode `0o644` or `\"0644\"`; owner and group names from the root's /etc/passwd and /etc/group, or numbers).",
        options = WRITE_KEYS,
        |h, p: S, c: S, o: Map| {
            let o = write_opts(&o)?;
            Ok(fs::write(h, &p, &c, &o)?)
        }
    ),
    host_fn!(
        "fs",
        "append",
        &[P, ("content", "String")],
        "bool",
        Submits(&[Write]),
        "Append to the file (created when missing); changed whenever `content` is not empty.",
        |h, p: S, c: S| Ok(fs::append(h, &p, &c)?)
    ),
    host_fn!(
        "fs",
        "ensure_line",
        &[P, ("line", "String")],
        "bool",
        Submits(&[Write]),
        "Append `line` when no line equals it (the file is created when missing). `line` must be one line (no `\\n`, no final `\\r`).",
        |h, p: S, l: S| Ok(fs::ensure_line(h, &p, &l, &LineOptions::default())?)
    ),
    host_fn!(
        "fs",
        "ensure_line",
        &[P, ("line", "String"), OPTS],
        "bool",
        Submits(&[Write]),
        "With `#{regex, create}`: replace the last line matching `regex` (else append when absent); `create: false` makes a missing file an error.",
        options = &["regex", "create"],
        |h, p: S, l: S, o: Map| {
            let o = line_opts(&o)?;
            Ok(fs::ensure_line(h, &p, &l, &o)?)
        }
    ),
    host_fn!(
        "fs",
        "remove_line",
        &[P, ("regex", "String")],
        "bool",
        Submits(&[Write]),
        "Remove every line matching `regex`; a missing file is unchanged.",
        |h, p: S, re: S| Ok(fs::remove_line(h, &p, &re)?)
    ),
    host_fn!(
        "fs",
        "ensure_block",
        &[P, ("id", "String"), ("content", "String")],
        "bool",
        Submits(&[Write]),
        "A managed block between `# BEGIN skyhook <id>` and `# END skyhook <id>`, replaced in place or appended.",
        |h, p: S, id: S, c: S| Ok(fs::ensure_block(h, &p, &id, &c)?)
    ),
    host_fn!(
        "fs",
        "remove_block",
        &[P, ("id", "String")],
        "bool",
        Submits(&[Write]),
        "Remove the managed block `id`, markers included.",
        |h, p: S, id: S| Ok(fs::remove_block(h, &p, &id)?)
    ),
    host_fn!(
        "fs",
        "mkdir",
        &[P],
        "bool",
        Submits(&[Mkdir, Chmod]),
        "Create a directory and its parents (mode 0755).",
        |h, p: S| Ok(fs::mkdir(h, &p, None)?)
    ),
    host_fn!(
        "fs",
        "mkdir",
        &[P, ("mode", "?")],
        "bool",
        Submits(&[Mkdir, Chmod]),
        "Create a directory and its missing parents (those 0755) with `mode` (int or octal string); an existing one is chmod-ed when it differs.",
        |h, p: S, m: Dynamic| {
            let m = convert::mode(&m)?;
            Ok(fs::mkdir(h, &p, Some(m))?)
        }
    ),
    host_fn!(
        "fs",
        "remove",
        &[P],
        "bool",
        Submits(&[Remove]),
        "Remove a file, a symlink (not its target) or an empty directory; absent is unchanged.",
        |h, p: S| Ok(fs::remove(h, &p)?)
    ),
    host_fn!(
        "fs",
        "remove_all",
        &[P],
        "bool",
        Submits(&[RemoveAll]),
        "Remove a tree (a symlink itself, not its target); absent is unchanged. A mount point at or below the path fails in every mode, naming it, and nothing is removed.",
        |h, p: S| Ok(fs::remove_all(h, &p)?)
    ),
    host_fn!(
        "fs",
        "copy",
        &[("src", "String"), ("dst", "String")],
        "bool",
        Submits(&[Write, Chmod, Chown]),
        "Make `dst` a copy of file `src` (a new `dst` gets `src`'s mode).",
        |h, s: S, d: S| Ok(fs::copy(h, &s, &d, &WriteOptions::default())?)
    ),
    host_fn!(
        "fs",
        "copy",
        &[("src", "String"), ("dst", "String"), OPTS],
        "bool",
        Submits(&[Write, Chmod, Chown]),
        "As `copy`, also setting `#{mode, owner, group}`.",
        options = WRITE_KEYS,
        |h, s: S, d: S, o: Map| {
            let o = write_opts(&o)?;
            Ok(fs::copy(h, &s, &d, &o)?)
        }
    ),
    host_fn!(
        "fs",
        "chmod",
        &[P, ("mode", "?")],
        "bool",
        Submits(&[Chmod]),
        "Set permission bits (`0o600` or `\"0600\"`), following symlinks.",
        |h, p: S, m: Dynamic| {
            let m = convert::mode(&m)?;
            Ok(fs::chmod(h, &p, m)?)
        }
    ),
    host_fn!(
        "fs",
        "chown",
        &[P, ("owner", "?"), ("group", "?")],
        "bool",
        Submits(&[Chown]),
        "Set owner and group (names or numbers; `()` keeps), following symlinks.",
        |h, p: S, o: Dynamic, g: Dynamic| {
            let o = opt_scalar(&o, "owner")?;
            let g = opt_scalar(&g, "group")?;
            Ok(fs::chown(h, &p, o.as_deref(), g.as_deref())?)
        }
    ),
    host_fn!(
        "fs",
        "symlink",
        &[("target", "String"), ("link", "String")],
        "bool",
        Submits(&[Symlink]),
        "Make `link` a symlink to `target` (stored as given, may be relative); another link there is replaced.",
        |h, t: S, l: S| Ok(fs::symlink(h, &t, &l)?)
    ),
    host_fn!(
        "fs",
        "fetch",
        &[("url", "String"), P, OPTS],
        "bool",
        Submits(&[Fetch, Chmod, Chown]),
        "Download `url` (`http://`, or `https://` trusting the host's CA bundle: the first of `/etc/ssl/certs/ca-certificates.crt`, `/etc/pki/tls/certs/ca-bundle.crt`, `/etc/ssl/ca-bundle.pem`, `/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem`, `/etc/ssl/cert.pem`; up to 5 redirects; no proxy; a URL with `user:password@` is an error, as credentials are not sent) to `path`, verified by `#{sha256}` (required, 64 hex digits), with `#{mode, owner, group}`. Unchanged when the file already has that digest (only `mode`/`owner`/`group` are then set when they differ); otherwise streamed to a temporary file beside it, checked, and renamed into place. A wrong digest, an HTTP error, a body over `max_bytes` (default 4 GiB), the `timeout` (seconds, default 300, capped by the step's deadline) or a cancel fail the call and leave `path` unchanged. A plan makes no request (`would download <url> (sha256 ...) to <path>`); later reads in it see the file, but `fs::read` of it fails (its content is unknown until applied). Check: drift when missing or of another digest.",
        options = FETCH_KEYS,
        |h, url: S, p: S, o: Map| {
            let o = fetch_opts(&o)?;
            Ok(fetch::fetch(h, &url, &p, &o)?)
        }
    ),
];

#[cfg(test)]
pub(super) mod tests {
    /// One call of each function of this file, for
    /// [`super::super::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(in super::super) const SAMPLES: &[&str] = &[
        r#"fs::exists("/etc/a.conf")"#,
        r#"fs::is_file("/etc/a.conf")"#,
        r#"fs::is_dir("/etc")"#,
        r#"fs::read("/etc/a.conf")"#,
        r#"fs::read_or("/etc/none", "d")"#,
        r#"fs::list("/etc")"#,
        r#"fs::glob("/etc/*.conf")"#,
        r#"fs::stat("/etc/a.conf")"#,
        r#"fs::write("/etc/new/b.conf", "b\n")"#,
        r#"fs::write("/etc/a.conf", "a\n", #{mode: 0o600})"#,
        r#"fs::append("/etc/a.conf", "y\n")"#,
        r#"fs::ensure_line("/etc/a.conf", "y")"#,
        r#"fs::ensure_line("/etc/a.conf", "x=2", #{regex: "^x"})"#,
        r#"fs::remove_line("/etc/a.conf", "^x")"#,
        r#"fs::ensure_block("/etc/a.conf", "b", "z")"#,
        r#"fs::remove_block("/etc/blocks.conf", "old")"#,
        r#"fs::mkdir("/opt/d")"#,
        r#"fs::mkdir("/opt/d", 0o700)"#,
        r#"fs::remove("/etc/a.conf")"#,
        r#"fs::remove_all("/srv/tree")"#,
        r#"fs::copy("/etc/a.conf", "/etc/c.conf")"#,
        r#"fs::copy("/etc/a.conf", "/etc/c.conf", #{mode: 0o600})"#,
        r#"fs::chmod("/etc/a.conf", 0o600)"#,
        r#"fs::chown("/etc/a.conf", 1000, ())"#,
        r#"fs::symlink("/etc/a.conf", "/etc/l.conf")"#,
        r#"fs::fetch("{URL}", "/opt/bin/tool", #{sha256: "{SHA}"})"#,
    ];
}
