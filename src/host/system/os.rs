//! OS facts: `os::release()`, `id()`, `version()`, `family()`, `kernel()`, `arch()`,
//! `dpkg_arch()`, `rpm_arch()`, `hostname()`, `cmdline()`, all read as files under the host root (so a test root can
//! provide them) through the session's view.

use std::path::Path;

use crate::host::Host;
use crate::host::root::error::{HostError, Result};

pub use crate::host::effects::os_release::{family_from, parse_os_release};

/// `os::release()`: the host's `/etc/os-release` (else `/usr/lib/os-release`) as a map,
/// quotes stripped; empty when neither exists. Read through the session's view.
///
/// # Errors
/// Read failures other than "not found".
pub fn release(h: &Host) -> Result<std::collections::BTreeMap<String, String>> {
    crate::host::effects::os_release::release_with(|p| h.view_read(p))
}

host_fn! {
    /// The host's os-release as a map (`ID`, `VERSION_ID`, `ID_LIKE`, ...).
    #[host(ns = "os", effects = ReadsHost)]
    fn release(h: &mut Host) -> rhai::Map {
        Ok(convert::map(super::release(h)?))
    }
}

/// `os::family()`: `debian`, `rhel`, `fedora`, `suse`, or the ID ([`family_from`]).
///
/// # Errors
/// As [`release`].
pub fn family(h: &Host) -> Result<String> {
    Ok(family_from(&release(h)?))
}

host_fn! {
    /// `debian`, `rhel`, `fedora`, `suse` (by `ID`, then `ID_LIKE`), else the `ID`.
    #[host(ns = "os", effects = ReadsHost)]
    fn family(h: &mut Host) -> String {
        Ok(super::family(h)?)
    }
}

/// `os::id()`: os-release `ID` (empty when unknown).
///
/// # Errors
/// As [`release`].
pub fn id(h: &Host) -> Result<String> {
    Ok(release(h)?.remove("ID").unwrap_or_default())
}

host_fn! {
    /// os-release `ID` (empty when unknown).
    #[host(ns = "os", effects = ReadsHost)]
    fn id(h: &mut Host) -> String {
        Ok(super::id(h)?)
    }
}

/// `os::version()`: os-release `VERSION_ID` (empty when unknown).
///
/// # Errors
/// As [`release`].
pub fn version(h: &Host) -> Result<String> {
    Ok(release(h)?.remove("VERSION_ID").unwrap_or_default())
}

host_fn! {
    /// os-release `VERSION_ID` (empty when unknown).
    #[host(ns = "os", effects = ReadsHost)]
    fn version(h: &mut Host) -> String {
        Ok(super::version(h)?)
    }
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

host_fn! {
    /// The running kernel's release: `/proc/sys/kernel/osrelease` under the root, else the agent's
    /// `uname -r` (the same kernel on a node; on a copied root the machine running `skyhook-run`).
    #[host(ns = "os", effects = ReadsHost)]
    fn kernel(h: &mut Host) -> String {
        Ok(super::kernel(h)?)
    }
}

/// `os::arch()`: the machine architecture (`x86_64`, `aarch64`) from
/// `/proc/sys/kernel/arch` under the root, else the agent's `uname -m` (the kernel is
/// shared with the host).
///
/// # Errors
/// Read failures other than "not found".
pub fn arch(h: &Host) -> Result<String> {
    Ok(match read_trimmed(h, "/proc/sys/kernel/arch")? {
        Some(m) if !m.is_empty() => m,
        _ => nix::sys::utsname::uname()
            .map(|u| u.machine().to_string_lossy().into_owned())
            .unwrap_or_else(|_| std::env::consts::ARCH.to_string()),
    })
}

host_fn! {
    /// The machine architecture as the kernel names it (`x86_64`, `aarch64`):
    /// `/proc/sys/kernel/arch` under the root, else `uname -m`.
    #[host(ns = "os", effects = ReadsHost)]
    fn arch(h: &mut Host) -> String {
        Ok(super::arch(h)?)
    }
}

/// The kernel's machine names and the Debian and rpm architecture names of the same
/// userspace: `(machine, dpkg, rpm)`.
const ARCH_NAMES: &[(&str, &str, &str)] = &[
    ("x86_64", "amd64", "x86_64"),
    ("aarch64", "arm64", "aarch64"),
    ("i686", "i386", "i686"),
    ("i586", "i386", "i586"),
    ("i386", "i386", "i386"),
    ("armv7l", "armhf", "armv7hl"),
    ("ppc64le", "ppc64el", "ppc64le"),
    ("s390x", "s390x", "s390x"),
    ("riscv64", "riscv64", "riscv64"),
    ("loongarch64", "loong64", "loongarch64"),
];

/// The `(machine, dpkg, rpm)` row of a kernel machine name.
fn arch_row(machine: &str) -> Result<&'static (&'static str, &'static str, &'static str)> {
    ARCH_NAMES
        .iter()
        .find(|r| r.0 == machine)
        .ok_or_else(|| HostError::Invalid {
            what: "machine architecture",
            message: format!(
                "{machine:?} has no known dpkg or rpm name (known: {})",
                ARCH_NAMES
                    .iter()
                    .map(|r| r.0)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
}

/// `os::dpkg_arch()`: the Debian architecture name of [`arch`] (`amd64`, `arm64`), as
/// apt sources (`[arch=...]`) and `dpkg --print-architecture` spell it.
///
/// # Errors
/// As [`arch`]; [`HostError::Invalid`] for a machine with no Debian name.
pub fn dpkg_arch(h: &Host) -> Result<String> {
    Ok(arch_row(&arch(h)?)?.1.to_string())
}

host_fn! {
    /// The Debian name of `os::arch()` (`amd64`, `arm64`, `armhf`, `ppc64el`, ...), for apt sources
    /// and `.deb` names; an error for a machine without one.
    #[host(ns = "os", effects = ReadsHost)]
    fn dpkg_arch(h: &mut Host) -> String {
        Ok(super::dpkg_arch(h)?)
    }
}

/// `os::rpm_arch()`: the rpm architecture name of [`arch`] (`x86_64`, `aarch64`), as
/// `%{_arch}` and package file names spell it.
///
/// # Errors
/// As [`dpkg_arch`].
pub fn rpm_arch(h: &Host) -> Result<String> {
    Ok(arch_row(&arch(h)?)?.2.to_string())
}

host_fn! {
    /// The rpm name of `os::arch()` (`x86_64`, `aarch64`, `armv7hl`, ...), for `.rpm` names and
    /// repository paths; an error for a machine without one.
    #[host(ns = "os", effects = ReadsHost)]
    fn rpm_arch(h: &mut Host) -> String {
        Ok(super::rpm_arch(h)?)
    }
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

host_fn! {
    /// `/etc/hostname` under the root (else the kernel's).
    #[host(ns = "os", effects = ReadsHost)]
    fn hostname(h: &mut Host) -> String {
        Ok(super::hostname(h)?)
    }
}

/// `os::cmdline()`: the running kernel's command line from `/proc/cmdline` under the root
/// (empty when absent).
///
/// # Errors
/// Read failures other than "not found".
pub fn cmdline(h: &Host) -> Result<String> {
    Ok(read_trimmed(h, "/proc/cmdline")?.unwrap_or_default())
}

host_fn! {
    /// The running kernel's command line (`/proc/cmdline` under the root).
    #[host(ns = "os", effects = ReadsHost)]
    fn cmdline(h: &mut Host) -> String {
        Ok(super::cmdline(h)?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert;
    pub(super) use crate::host::api::{host_fn, host_fns};
}
use prelude::*;

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[
    (
        "os",
        "OS facts — `os::`",
        "Read as files under the host root, so a test root can provide them.",
    ),
    (
        "lib",
        "Shared libraries — `lib::`",
        "What the host's dynamic linker knows: `ldconfig -p` run in the host root (a query, in every mode), which reads `/etc/ld.so.cache` in whichever format the host's glibc wrote.",
    ),
];

host_fns!(
    release, id, version, family, kernel, arch, dpkg_arch, rpm_arch, hostname, cmdline
);

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
        assert!(!arch(&h).unwrap().is_empty());
    }

    #[test]
    fn arch_names_from_the_root() {
        let t = TestHost::new();
        let h = t.host(crate::host::ExecMode::Apply);
        // No /proc/sys/kernel/arch in the root: the agent's own machine.
        let machine = nix::sys::utsname::uname().unwrap();
        assert_eq!(arch(&h).unwrap(), machine.machine().to_string_lossy());
        let names = |m: &str| {
            t.file("/proc/sys/kernel/arch", &format!("{m}\n"));
            let h = t.host(crate::host::ExecMode::Apply);
            (
                arch(&h).unwrap(),
                dpkg_arch(&h).unwrap(),
                rpm_arch(&h).unwrap(),
            )
        };
        assert_eq!(
            names("x86_64"),
            ("x86_64".into(), "amd64".into(), "x86_64".into())
        );
        assert_eq!(
            names("aarch64"),
            ("aarch64".into(), "arm64".into(), "aarch64".into())
        );
        assert_eq!(
            names("armv7l"),
            ("armv7l".into(), "armhf".into(), "armv7hl".into())
        );
        assert_eq!(
            names("ppc64le"),
            ("ppc64le".into(), "ppc64el".into(), "ppc64le".into())
        );
        t.file("/proc/sys/kernel/arch", "m68k\n");
        let h = t.host(crate::host::ExecMode::Apply);
        assert_eq!(arch(&h).unwrap(), "m68k");
        assert_eq!(
            dpkg_arch(&h).unwrap_err().to_string(),
            "invalid machine architecture: \"m68k\" has no known dpkg or rpm name (known: x86_64, aarch64, i686, i586, i386, armv7l, ppc64le, s390x, riscv64, loongarch64)"
        );
    }
}
