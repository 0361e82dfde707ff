//! OS facts: `os::release()`, `id()`, `version()`, `family()`, `kernel()`, `arch()`,
//! `hostname()`, `cmdline()`, all read as files under the host root (so a test root can
//! provide them) through the session's view.

use std::path::Path;

use crate::host::Host;
use crate::host::root::error::Result;

pub use crate::host::effects::os_release::{family_from, parse_os_release};

/// `os::release()`: the host's `/etc/os-release` (else `/usr/lib/os-release`) as a map,
/// quotes stripped; empty when neither exists. Read through the session's view.
///
/// # Errors
/// Read failures other than "not found".
pub fn release(h: &Host) -> Result<std::collections::BTreeMap<String, String>> {
    crate::host::effects::os_release::release_with(|p| h.view_read(p))
}

/// `os::family()`: `debian`, `rhel`, `fedora`, `suse`, or the ID ([`family_from`]).
///
/// # Errors
/// As [`release`].
pub fn family(h: &Host) -> Result<String> {
    Ok(family_from(&release(h)?))
}

/// `os::id()`: os-release `ID` (empty when unknown).
///
/// # Errors
/// As [`release`].
pub fn id(h: &Host) -> Result<String> {
    Ok(release(h)?.remove("ID").unwrap_or_default())
}

/// `os::version()`: os-release `VERSION_ID` (empty when unknown).
///
/// # Errors
/// As [`release`].
pub fn version(h: &Host) -> Result<String> {
    Ok(release(h)?.remove("VERSION_ID").unwrap_or_default())
}

fn read_trimmed(h: &Host, p: &str) -> Result<Option<String>> {
    Ok(h.view_read(Path::new(p))?
        .map(|b| String::from_utf8_lossy(&b).trim().to_string()))
}

/// `os::kernel()`: the running kernel's release from `/proc/sys/kernel/osrelease` under the
/// root, else the agent's `uname -r`.
///
/// # Errors
/// Read failures other than "not found".
pub fn kernel(h: &Host) -> Result<String> {
    Ok(match read_trimmed(h, "/proc/sys/kernel/osrelease")? {
        Some(k) => k,
        None => nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default(),
    })
}

/// `os::arch()`: the machine architecture (`x86_64`, `aarch64`) from `uname -m` (the kernel
/// is shared with the host).
pub fn arch() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.machine().to_string_lossy().into_owned())
        .unwrap_or_else(|_| std::env::consts::ARCH.to_string())
}

/// `os::hostname()`: `/etc/hostname` under the root, else `/proc/sys/kernel/hostname`, else
/// the agent's `uname -n`.
///
/// # Errors
/// Read failures other than "not found".
pub fn hostname(h: &Host) -> Result<String> {
    for p in ["/etc/hostname", "/proc/sys/kernel/hostname"] {
        if let Some(s) = read_trimmed(h, p)?
            && !s.is_empty()
        {
            return Ok(s);
        }
    }
    Ok(nix::sys::utsname::uname()
        .map(|u| u.nodename().to_string_lossy().into_owned())
        .unwrap_or_default())
}

/// `os::cmdline()`: the running kernel's command line from `/proc/cmdline` under the root
/// (empty when absent).
///
/// # Errors
/// Read failures other than "not found".
pub fn cmdline(h: &Host) -> Result<String> {
    Ok(read_trimmed(h, "/proc/cmdline")?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testutil::*;

    fn fam(text: &str) -> String {
        family_from(&parse_os_release(text))
    }

    #[test]
    fn family_table() {
        assert_eq!(fam("ID=ubuntu\nID_LIKE=debian\n"), "debian");
        assert_eq!(fam("ID=debian\n"), "debian");
        assert_eq!(fam("ID=\"rhel\"\nID_LIKE=\"fedora\"\n"), "rhel");
        assert_eq!(
            fam("ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n"),
            "rhel"
        );
        assert_eq!(fam("ID=\"amzn\"\nID_LIKE=\"centos rhel fedora\"\n"), "rhel");
        assert_eq!(fam("ID=fedora\n"), "fedora");
        assert_eq!(fam("ID=\"sles\"\nID_LIKE=\"suse\"\n"), "suse");
        assert_eq!(
            fam("ID=\"opensuse-leap\"\nID_LIKE=\"suse opensuse\"\n"),
            "suse"
        );
        // ID_LIKE fallback, first word that names a family.
        assert_eq!(fam("ID=linuxmint\nID_LIKE=\"ubuntu debian\"\n"), "debian");
        assert_eq!(fam("ID=\"virtuozzo\"\nID_LIKE=\"rhel fedora\"\n"), "rhel");
        // Unknown: the ID itself.
        assert_eq!(fam("ID=arch\n"), "arch");
        assert_eq!(fam(""), "");
    }

    #[test]
    fn release_strips_quotes() {
        let m = parse_os_release(
            "# c\nNAME=\"Ubuntu\"\nVERSION_ID='22.04'\nPRETTY_NAME=\"A \\\"q\\\" \\$x\"\nBAD\n",
        );
        assert_eq!(m["NAME"], "Ubuntu");
        assert_eq!(m["VERSION_ID"], "22.04");
        assert_eq!(m["PRETTY_NAME"], "A \"q\" $x");
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn facts_from_root_files() {
        let t = TestHost::new();
        t.file("/etc/os-release", "ID=ubuntu\nVERSION_ID=\"24.04\"\n");
        t.file("/proc/sys/kernel/osrelease", "6.8.0-40-generic\n");
        t.file("/proc/cmdline", "BOOT_IMAGE=/vmlinuz ro quiet\n");
        t.file("/etc/hostname", "node-1\n");
        let h = t.host(crate::host::ExecMode::Apply);
        assert_eq!(id(&h).unwrap(), "ubuntu");
        assert_eq!(version(&h).unwrap(), "24.04");
        assert_eq!(family(&h).unwrap(), "debian");
        assert_eq!(kernel(&h).unwrap(), "6.8.0-40-generic");
        assert_eq!(cmdline(&h).unwrap(), "BOOT_IMAGE=/vmlinuz ro quiet");
        assert_eq!(hostname(&h).unwrap(), "node-1");
        assert!(!arch().is_empty());
    }
}
