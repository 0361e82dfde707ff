//! The host's os-release as the session's read view sees it (`/etc/os-release`, else
//! `/usr/lib/os-release`, under the root) and the OS family it names: facts the `os::` and
//! `pkg::` areas report and the session's deferred initramfs regeneration picks its tool by.

use std::collections::BTreeMap;
use std::path::Path;

use crate::host::root::error::Result;

/// Parse os-release text (`KEY=value` lines, `#` comments; values may be double- or
/// single-quoted, with `\"`, `\\`, `` \` `` and `\$` escapes in double quotes, per
/// os-release(5)).
pub fn parse_os_release(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim();
        let v = if v.len() >= 2 && v.starts_with('"') && v.ends_with('"') {
            let inner = &v[1..v.len() - 1];
            let mut s = String::with_capacity(inner.len());
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    match chars.next() {
                        Some(n @ ('"' | '\\' | '`' | '$')) => s.push(n),
                        Some(n) => {
                            s.push('\\');
                            s.push(n);
                        }
                        None => s.push('\\'),
                    }
                } else {
                    s.push(c);
                }
            }
            s
        } else if v.len() >= 2 && v.starts_with('\'') && v.ends_with('\'') {
            v[1..v.len() - 1].to_string()
        } else {
            v.to_string()
        };
        out.insert(k.trim().to_string(), v);
    }
    out
}

/// Map one os-release ID (or ID_LIKE word) to a family, when it names one.
fn family_of(id: &str) -> Option<&'static str> {
    match id {
        "ubuntu" | "debian" => Some("debian"),
        "rhel" | "centos" | "rocky" | "almalinux" | "ol" | "amzn" => Some("rhel"),
        "fedora" => Some("fedora"),
        "sles" | "sled" | "suse" => Some("suse"),
        _ if id.starts_with("opensuse") => Some("suse"),
        _ => None,
    }
}

/// The family of an os-release map: decided by `ID` first, then by the first `ID_LIKE` word
/// that names a family, else the `ID` itself (empty when unknown).
pub fn family_from(release: &BTreeMap<String, String>) -> String {
    let id = release.get("ID").map(String::as_str).unwrap_or("");
    if let Some(f) = family_of(id) {
        return f.into();
    }
    let like = release.get("ID_LIKE").map(String::as_str).unwrap_or("");
    like.split_whitespace()
        .find_map(family_of)
        .unwrap_or(id)
        .to_string()
}

/// `os::release()` over `read` (a host path to its content, `None` when absent): the
/// host's `/etc/os-release` (else `/usr/lib/os-release`) as a map, quotes stripped; empty when
/// neither exists.
///
/// # Errors
/// `read`'s failures.
pub fn release_with(
    read: impl Fn(&Path) -> Result<Option<Vec<u8>>>,
) -> Result<BTreeMap<String, String>> {
    for p in ["/etc/os-release", "/usr/lib/os-release"] {
        if let Some(b) = read(Path::new(p))? {
            return Ok(parse_os_release(&String::from_utf8_lossy(&b)));
        }
    }
    Ok(BTreeMap::new())
}
