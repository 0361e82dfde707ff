//! configMaps (`config::`) and node metadata (`node::`).
//!
//! Both live in agent-side directories ([`HostOptions::configmaps_dir`],
//! [`HostOptions::node_metadata_dir`]) that may lie outside the host root, so they are read
//! as files of this machine: regular files of at most
//! [`crate::host::files::fs::MAX_READ_BYTES`], `fstat`ed on an `O_PATH` handle before a
//! regular file is opened for reading (a FIFO or device node is never opened). A configMap is a
//! file in the directory; names starting with `.` (a configMap volume's `..data` internals)
//! are never listed or read. Every configMap is opened confined to the directory
//! ([`crate::host::root::open_beneath`]: `openat2(RESOLVE_BENEATH)`): the volume's
//! symlinks (`key -> ..data/key`, `..data -> ..<timestamp>`) are followed, a name that leads
//! out of it (an absolute symlink such as one to the agent's service-account token, or `..`
//! above it) is [`ConfigError::Outside`] naming the key, and nothing outside is read.
//!
//! [`HostOptions::configmaps_dir`]: crate::host::HostOptions::configmaps_dir
//! [`HostOptions::node_metadata_dir`]: crate::host::HostOptions::node_metadata_dir

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::host::Host;
use crate::host::root::error::HostError;

/// A failure of a `config::` or `node::` function: the configMaps and node metadata are
/// agent-side inputs, never the host root's state.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// What the session failed with (a read of an agent-side file, one that is not a
    /// regular file or too large).
    #[error(transparent)]
    Host(#[from] HostError),

    /// A configMap line is not `key=value`.
    #[error("configMap {name:?} line {line}: expected key=value, got {text:?}")]
    Line {
        /// The configMap (file) name.
        name: String,
        /// The 1-based line number.
        line: usize,
        /// The line as found.
        text: String,
    },

    /// `config::lines` or `config::kv` of a configMap that does not exist.
    #[error("configMap {name:?} does not exist")]
    Missing {
        /// The configMap (file) name.
        name: String,
    },

    /// A configMap read as text (`config::get`, `lines`, `kv`) is not valid UTF-8: a binary
    /// configMap, which text functions would otherwise silently mangle.
    #[error(
        "configMap {name:?} is not UTF-8 text (invalid byte at offset {offset}); binary configMaps cannot be read as text"
    )]
    NotText {
        /// The configMap (file) name.
        name: String,
        /// Byte offset of the first invalid sequence.
        offset: usize,
    },

    /// A configMap name that leads out of the configMaps directory (a symlink to an absolute
    /// path, or `..` above the directory): never followed.
    #[error(
        "configMap {name:?} leads out of the configMaps directory {} (a symlink to outside it)",
        dir.display()
    )]
    Outside {
        /// The configMap (file) name.
        name: String,
        /// The configMaps directory.
        dir: PathBuf,
    },

    /// A configMap or node metadata file (outside the host root) could not be read.
    #[error("failed to read {}", path.display())]
    Read {
        /// The agent-side path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// A node metadata file is not a JSON object.
    #[error("failed to parse node metadata {}", path.display())]
    Json {
        /// The agent-side path.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
}

impl crate::host::api::AreaError for ConfigError {
    fn depends_on_host(&self) -> bool {
        match self {
            ConfigError::Host(e) => e.depends_on_host(),
            _ => false,
        }
    }
}
crate::host::api::area_error!(ConfigError);

/// Result alias of this file.
type Result<T, E = ConfigError> = std::result::Result<T, E>;

/// The configMaps directory, and `name` when it can name a configMap (not empty, no `/`,
/// not starting with `.`).
fn cm_dir<'h>(h: &'h Host, name: &str) -> Option<&'h Path> {
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\0']) {
        return None;
    }
    h.options().configmaps_dir.as_deref()
}

/// Open the configMap `name` in `dir`, confined to `dir` (see the module docs) with `flags`.
///
/// # Errors
/// [`ConfigError::Outside`] when it leads out of `dir`; the inner `io::Result` is
/// the open's other outcome, for the caller to map.
fn open(dir: &Path, name: &str, flags: libc::c_int) -> Result<std::io::Result<std::fs::File>> {
    match crate::host::root::open_beneath(dir, Path::new(name), flags) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => Err(ConfigError::Outside {
            name: name.into(),
            dir: dir.to_path_buf(),
        }),
        r => Ok(r),
    }
}

/// `config::names()`: sorted configMap names (regular files, following the volume's
/// symlinks inside the directory; dot-names skipped). Empty when there is no directory.
///
/// # Errors
/// [`ConfigError::Read`] when the directory exists but cannot be listed;
/// [`ConfigError::Outside`] for a name that leads out of it.
pub fn names(h: &Host) -> Result<Vec<String>> {
    let Some(dir) = &h.options().configmaps_dir else {
        return Ok(Vec::new());
    };
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ConfigError::Read {
                path: dir.clone(),
                source,
            });
        }
    };
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|source| ConfigError::Read {
            path: dir.clone(),
            source,
        })?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        // O_PATH: what the name leads to is only stat'ed, never opened for reading.
        if open(dir, &name, libc::O_PATH)?.is_ok_and(|f| f.metadata().is_ok_and(|m| m.is_file())) {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

host_fn! {
    /// Sorted configMap names.
    #[host(ns = "config", effects = ReadsAgent)]
    fn names(h: &mut Host) -> rhai::Array {
        Ok(convert::array(super::names(h)?))
    }
}

/// The configMap's bytes, `None` when absent (or not a file).
///
/// # Errors
/// [`ConfigError::Outside`] when it leads out of the directory;
/// [`ConfigError::Read`] on a read failure other than "not found";
/// [`HostError::NotRegular`] for a FIFO, device or socket and [`HostError::FileTooLarge`]
/// above [`crate::host::files::fs::MAX_READ_BYTES`] (as for every file read whole).
fn read(h: &Host, name: &str) -> Result<Option<Vec<u8>>> {
    let Some(dir) = cm_dir(h, name) else {
        return Ok(None);
    };
    let p = dir.join(name);
    // O_PATH: what the name leads to is fstat'ed first; only a regular file is then
    // reopened for reading (a device's open can act, a FIFO's can block).
    let f = match open(dir, name, libc::O_PATH)? {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ConfigError::Read { path: p, source }),
    };
    let m = f.metadata().map_err(|source| ConfigError::Read {
        path: p.clone(),
        source,
    })?;
    if m.is_dir() {
        return Ok(None);
    }
    crate::host::root::read::check_regular(&p, &m)?;
    let f = crate::host::root::reopen_regular(f).map_err(|source| ConfigError::Read {
        path: p.clone(),
        source,
    })?;
    match crate::host::files::fs::read_open_local(&p, f)? {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::IsADirectory => Ok(None),
        Err(source) => Err(ConfigError::Read { path: p, source }),
    }
}

/// `config::get(name)`: the configMap's text, `None` when absent.
///
/// # Errors
/// [`ConfigError::NotText`] when the content is not UTF-8 (a binary configMap);
/// [`ConfigError::Read`] on a read failure other than "not found".
pub fn get(h: &Host, name: &str) -> Result<Option<String>> {
    match read(h, name)? {
        None => Ok(None),
        Some(b) => String::from_utf8(b)
            .map(Some)
            .map_err(|e| ConfigError::NotText {
                name: name.into(),
                offset: e.utf8_error().valid_up_to(),
            }),
    }
}

host_fn! {
    /// The configMap's text, or `()`; a configMap that is not UTF-8 text (binary) is an error
    /// naming it (`config::has` still sees it).
    #[host(ns = "config", effects = ReadsAgent)]
    fn get(h: &mut Host, name: S) -> rhai::Dynamic {
        Ok(convert::opt(super::get(h, &name)?))
    }
}

/// `config::has(name)`: whether the configMap exists (whatever its content).
///
/// # Errors
/// [`ConfigError::Read`] on a read failure other than "not found".
pub fn has(h: &Host, name: &str) -> Result<bool> {
    Ok(read(h, name)?.is_some())
}

host_fn! {
    /// True when the configMap exists.
    #[host(ns = "config", effects = ReadsAgent)]
    fn has(h: &mut Host, name: S) -> bool {
        Ok(super::has(h, &name)?)
    }
}

fn need(h: &Host, name: &str) -> Result<String> {
    get(h, name)?.ok_or_else(|| ConfigError::Missing { name: name.into() })
}

/// `config::lines(name)`: the lines, trimmed, without blank lines and `#` comments.
///
/// # Errors
/// [`ConfigError::Missing`]; read failures.
pub fn lines(h: &Host, name: &str) -> Result<Vec<String>> {
    Ok(need(h, name)?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect())
}

host_fn! {
    /// Lines, trimmed, without blank lines and `#` comments; an error when missing.
    #[host(ns = "config", effects = ReadsAgent)]
    fn lines(h: &mut Host, name: S) -> rhai::Array {
        Ok(convert::array(super::lines(h, &name)?))
    }
}

/// `config::kv(name)`: a map from `key=value` lines (spaces around `=` and the line allowed,
/// blank lines and `#` comments skipped, a later key wins).
///
/// # Errors
/// [`ConfigError::Line`] naming the configMap and 1-based line number of a line
/// without `=` or with an empty key; [`ConfigError::Missing`].
pub fn kv(h: &Host, name: &str) -> Result<BTreeMap<String, String>> {
    parse_kv(name, &need(h, name)?)
}

host_fn! {
    /// A map from `key=value` lines; a malformed line is an error naming the configMap and line
    /// number.
    #[host(ns = "config", effects = ReadsAgent)]
    fn kv(h: &mut Host, name: S) -> rhai::Map {
        Ok(convert::map(super::kv(h, &name)?))
    }
}

/// The map of [`kv`] from configMap `name`'s `text` (the parser alone, for the fuzz targets
/// in `tests/fuzz/`).
///
/// # Errors
/// [`ConfigError::Line`] as [`kv`].
#[doc(hidden)]
pub fn parse_kv(name: &str, text: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        match l.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                out.insert(k.trim().to_string(), v.trim().to_string());
            }
            _ => {
                return Err(ConfigError::Line {
                    name: name.into(),
                    line: i + 1,
                    text: raw.to_string(),
                });
            }
        }
    }
    Ok(out)
}

/// The node metadata map `<node_metadata_dir>/<file>`: empty when the directory or file is
/// absent.
fn metadata(h: &Host, file: &str) -> Result<serde_json::Map<String, serde_json::Value>> {
    let Some(dir) = &h.options().node_metadata_dir else {
        return Ok(Default::default());
    };
    let p = dir.join(file);
    let bytes = match crate::host::files::fs::read_local(&p)? {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(source) => return Err(ConfigError::Read { path: p, source }),
    };
    serde_json::from_slice(&bytes).map_err(|source| ConfigError::Json { path: p, source })
}

/// `node::labels()`: the node's labels (`labels.json`), empty when absent.
///
/// # Errors
/// [`ConfigError::Json`] when the file is not a JSON object; read failures.
pub fn labels(h: &Host) -> Result<serde_json::Map<String, serde_json::Value>> {
    metadata(h, "labels.json")
}

host_fn! {
    /// The node's labels (empty when unknown).
    #[host(ns = "node", effects = ReadsAgent)]
    fn labels(h: &mut Host) -> rhai::Map {
        Ok(convert::json_map(super::labels(h)?))
    }
}

/// `node::annotations()`: the node's annotations (`annotations.json`), empty when absent.
///
/// # Errors
/// As [`labels`].
pub fn annotations(h: &Host) -> Result<serde_json::Map<String, serde_json::Value>> {
    metadata(h, "annotations.json")
}

host_fn! {
    /// The node's annotations (empty when unknown).
    #[host(ns = "node", effects = ReadsAgent)]
    fn annotations(h: &mut Host) -> rhai::Map {
        Ok(convert::json_map(super::annotations(h)?))
    }
}

/// `node::packages()`: the operator's packages map (`packages.json`), empty when absent.
///
/// # Errors
/// As [`labels`].
pub fn packages(h: &Host) -> Result<serde_json::Map<String, serde_json::Value>> {
    metadata(h, "packages.json")
}

host_fn! {
    /// The operator's packages map for the node (empty when unknown).
    #[host(ns = "node", effects = ReadsAgent)]
    fn packages(h: &mut Host) -> rhai::Map {
        Ok(convert::json_map(super::packages(h)?))
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert;
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::ImmutableString as S;
}
use prelude::*;

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[
    (
        "config",
        "configMaps — `config::`",
        "Files under `SKYHOOK_DIR/configmaps/` (for `skyhook-run`, the `--configmaps` folder). Names starting with `.` are never listed. A configMap is opened confined to that folder (`openat2(RESOLVE_BENEATH)`): symlinks inside it are followed (a configMap volume's `key -> ..data/key`, `..data -> ..<timestamp>`), one that leads out of it (absolute, or `..` above the folder) is an error naming the key, for `config::get`, `has`, `lines`, `kv` and `names`, and nothing outside is read. Like files under the host root, a configMap, node metadata file or secret is read only when it is a regular file of at most 64 MiB.",
    ),
    (
        "node",
        "Node metadata — `node::`",
        "From the operator's `SKYHOOK_DIR/node-metadata/` JSON files.",
    ),
];

host_fns!(has, get, names, lines, kv, labels, annotations, packages);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testutil::*;

    #[test]
    fn configmaps() {
        let t = TestHost::new();
        let cm = t.dir.path().join("configmaps");
        std::fs::create_dir_all(cm.join("..2024_01_01")).unwrap();
        std::fs::write(cm.join("..2024_01_01/b"), "x = 1\n# c\n\n y=2 \n").unwrap();
        std::os::unix::fs::symlink("..2024_01_01", cm.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/b", cm.join("b")).unwrap();
        std::fs::write(cm.join("a"), "one\n  # comment\n\n two  \n").unwrap();
        std::fs::write(cm.join("bad"), "k=v\n# ok\nnovalue\n").unwrap();
        std::fs::write(cm.join(".hidden"), "x").unwrap();
        let md = t.dir.path().join("md");
        std::fs::create_dir_all(&md).unwrap();
        std::fs::write(md.join("labels.json"), r#"{"gpu":"a100"}"#).unwrap();
        let h = t.host_with(crate::host::ExecMode::Apply, |o| {
            o.configmaps_dir = Some(cm.clone());
            o.node_metadata_dir = Some(md.clone());
        });
        assert_eq!(names(&h).unwrap(), vec!["a", "b", "bad"]);
        assert!(has(&h, "a").unwrap());
        assert!(!has(&h, ".hidden").unwrap());
        assert!(!has(&h, "..data").unwrap());
        assert_eq!(get(&h, "nope").unwrap(), None);
        assert_eq!(lines(&h, "a").unwrap(), vec!["one", "two"]);
        let m = kv(&h, "b").unwrap();
        assert_eq!(m.get("x").map(String::as_str), Some("1"));
        assert_eq!(m.get("y").map(String::as_str), Some("2"));
        assert_eq!(m.len(), 2);
        let e = kv(&h, "bad").unwrap_err();
        assert_eq!(
            e.to_string(),
            "configMap \"bad\" line 3: expected key=value, got \"novalue\""
        );
        assert!(matches!(
            lines(&h, "nope"),
            Err(ConfigError::Missing { .. })
        ));
        assert_eq!(labels(&h).unwrap()["gpu"], "a100");
        assert!(annotations(&h).unwrap().is_empty());
        assert!(packages(&h).unwrap().is_empty());
    }

    /// What is not a regular file is never opened for reading, only `fstat`ed: a FIFO key
    /// neither hangs the step nor is read, a device node key is not opened (an open of a
    /// device can act: a watchdog, a tape; major 240 has no driver, so an open would be
    /// `ENXIO`), a 2 GiB sparse key is refused by its size unread; a name with `/`, `..`
    /// or NUL names no configMap, one with a newline is an ordinary name.
    #[test]
    fn configmaps_special_files_are_never_opened() {
        use nix::sys::stat::{Mode, SFlag, makedev, mknod};
        let t = TestHost::new();
        let cm = t.dir.path().join("configmaps");
        std::fs::create_dir_all(&cm).unwrap();
        nix::unistd::mkfifo(&cm.join("fifo"), Mode::S_IRWXU).unwrap();
        mknod(
            &cm.join("dev"),
            SFlag::S_IFCHR,
            Mode::S_IRUSR,
            makedev(240, 0),
        )
        .unwrap();
        mknod(
            &cm.join("blk"),
            SFlag::S_IFBLK,
            Mode::S_IRUSR,
            makedev(240, 1),
        )
        .unwrap();
        std::fs::File::create(cm.join("big"))
            .unwrap()
            .set_len(2 << 30)
            .unwrap();
        std::fs::write(cm.join("a"), "1\n").unwrap();
        std::fs::write(cm.join("x\ny"), "2\n").unwrap();
        let md = t.dir.path().join("md");
        std::fs::create_dir_all(&md).unwrap();
        mknod(
            &md.join("labels.json"),
            SFlag::S_IFCHR,
            Mode::S_IRUSR,
            makedev(240, 2),
        )
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (dir, md_dir) = (cm.clone(), md.clone());
        std::thread::spawn(move || {
            let t = TestHost::new();
            let h = t.host_with(crate::host::ExecMode::Apply, |o| {
                o.configmaps_dir = Some(dir.clone());
                o.node_metadata_dir = Some(md_dir.clone());
            });
            let labels = labels(&h).map_err(|e| e.to_string());
            let got: Vec<String> = ["fifo", "dev", "blk", "big"]
                .iter()
                .map(|k| format!("{:?}", get(&h, k).map_err(|e| e.to_string())))
                .collect();
            let names = names(&h).unwrap();
            let odd: Vec<_> = ["a/../a", "../configmaps/a", "a\0", "x\ny"]
                .iter()
                .map(|k| get(&h, k).unwrap())
                .collect();
            let _ = tx.send((got, names, odd, labels));
        });
        let (got, names, odd, labels) = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("config::get returned (a FIFO key must not block it)");
        let not_regular = |k: &str, what: &str| {
            format!(
                "Err({:?})",
                format!(
                    "{} is {what}, not a regular file (only regular files are read)",
                    cm.join(k).display()
                )
            )
        };
        assert_eq!(
            got,
            [
                not_regular("fifo", "a fifo"),
                not_regular("dev", "a character device"),
                not_regular("blk", "a block device"),
                format!(
                    "Err({:?})",
                    format!(
                        "{} is too large to read: 2147483648 bytes, more than the limit of 67108864 bytes (64 MiB)",
                        cm.join("big").display()
                    )
                ),
            ]
        );
        assert_eq!(
            labels,
            Err(format!(
                "{} is a character device, not a regular file (only regular files are read)",
                md.join("labels.json").display()
            ))
        );
        assert_eq!(names, ["a", "big", "x\ny"]);
        assert_eq!(odd, [None, None, None, Some("2\n".to_string())]);
    }

    /// A configMap volume as the kubelet mounts it (`key -> ..data/key`, `..data ->
    /// ..2024_01_01_00_00_00.1`) beside the agent's own files: links inside the directory are
    /// followed, a key whose link leaves it (absolute, or `..` above it) is an error naming
    /// the key, for `get`, `has` and `names`, and the file outside is never read.
    #[test]
    fn configmaps_are_confined_to_their_directory() {
        let t = TestHost::new();
        let agent = t
            .dir
            .path()
            .join("var/run/secrets/kubernetes.io/serviceaccount");
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::write(agent.join("token"), "eyJhbGciOi-agent-token").unwrap();
        let cm = t.dir.path().join("pkg/configmaps");
        let ts = cm.join("..2024_01_01_00_00_00.1");
        std::fs::create_dir_all(&ts).unwrap();
        std::fs::write(ts.join("tuning"), "a=1\n").unwrap();
        std::os::unix::fs::symlink("..2024_01_01_00_00_00.1", cm.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/tuning", cm.join("tuning")).unwrap();
        let h = t.host_with(crate::host::ExecMode::Apply, |o| {
            o.configmaps_dir = Some(cm.clone());
        });
        assert_eq!(get(&h, "tuning").unwrap().as_deref(), Some("a=1\n"));
        assert_eq!(names(&h).unwrap(), ["tuning"]);

        std::os::unix::fs::symlink(agent.join("token"), cm.join("token")).unwrap();
        let outside = |key: &str| {
            format!(
                "configMap {key:?} leads out of the configMaps directory {} (a symlink to outside it)",
                cm.display()
            )
        };
        let e = get(&h, "token").map_err(|e| e.to_string());
        assert_eq!(e, Err(outside("token")));
        assert_eq!(
            has(&h, "token").map_err(|e| e.to_string()),
            Err(outside("token"))
        );
        assert_eq!(names(&h).map_err(|e| e.to_string()), Err(outside("token")));
        std::fs::remove_file(cm.join("token")).unwrap();

        std::os::unix::fs::symlink(
            "../../var/run/secrets/kubernetes.io/serviceaccount/token",
            cm.join("up"),
        )
        .unwrap();
        assert_eq!(get(&h, "up").map_err(|e| e.to_string()), Err(outside("up")));
        // The same escape one level down, through the volume's own data directory.
        std::os::unix::fs::symlink(
            "../../../var/run/secrets/kubernetes.io/serviceaccount/token",
            ts.join("deep"),
        )
        .unwrap();
        std::os::unix::fs::symlink("..data/deep", cm.join("deep")).unwrap();
        assert_eq!(
            get(&h, "deep").map_err(|e| e.to_string()),
            Err(outside("deep"))
        );
    }
}
