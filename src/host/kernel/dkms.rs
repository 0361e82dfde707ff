//! `dkms::status()`: the DKMS modules of the host root, read from its `/var/lib/dkms` tree
//! (no `dkms` command, so it answers the same in every mode and on a host without dkms).
//!
//! The tree, as dkms 2 and 3 keep it:
//!
//! | path under `/var/lib/dkms/<module>/` | meaning |
//! |---|---|
//! | `<version>/` (with its `source` link) | the version is added |
//! | `<version>/<kernel>/<arch>/` | built for that kernel |
//! | `kernel-<kernel>-<arch>` (a symlink to `<version>/<kernel>/<arch>`) | installed for that kernel |
//!
//! `<version>/build` (a build in progress) and `<version>/source` are not kernels; a
//! kernel directory is one whose name starts with a digit, as releases do.

use std::path::Path;

use crate::host::Host;
use crate::host::root::EntryKind;
use crate::host::root::error::Result;

/// The DKMS tree (a host path).
pub const DKMS_TREE: &str = "/var/lib/dkms";

/// One module version's state for one kernel (`kernel` and `arch` empty for `added`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DkmsEntry {
    /// Module name (`nvidia`).
    pub module: String,
    /// Module version (`550.54.15`).
    pub version: String,
    /// Kernel release, empty when only added.
    pub kernel: String,
    /// Architecture (`x86_64`), empty when only added.
    pub arch: String,
    /// `added`, `built` or `installed`.
    pub state: &'static str,
}

fn dirs(h: &Host, dir: &Path) -> Result<Vec<String>> {
    Ok(h.view_list(dir)?
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, k)| *k == EntryKind::Dir)
        .map(|(n, _)| n)
        .collect())
}

/// `dkms::status()`: every module version of the tree, per kernel it was built for, in name
/// order (module, version, kernel, arch); a version built for no kernel once, as `added`.
/// Empty without `/var/lib/dkms`.
///
/// # Errors
/// Read failures.
pub fn status(h: &Host) -> Result<Vec<DkmsEntry>> {
    let tree = Path::new(DKMS_TREE);
    let mut out = Vec::new();
    for module in dirs(h, tree)? {
        let mdir = tree.join(&module);
        for version in dirs(h, &mdir)? {
            let vdir = mdir.join(&version);
            let mut built = false;
            for kernel in dirs(h, &vdir)? {
                if !kernel.starts_with(|c: char| c.is_ascii_digit()) {
                    continue;
                }
                for arch in dirs(h, &vdir.join(&kernel))? {
                    built = true;
                    let link = mdir.join(format!("kernel-{kernel}-{arch}"));
                    let target = h.view_readlink(&link)?;
                    let installed = target.is_some_and(|t| {
                        let t = t.to_string_lossy().into_owned();
                        let want = format!("{version}/{kernel}/{arch}");
                        t.trim_end_matches('/').ends_with(&want)
                    });
                    out.push(DkmsEntry {
                        module: module.clone(),
                        version: version.clone(),
                        kernel: kernel.clone(),
                        arch,
                        state: if installed { "installed" } else { "built" },
                    });
                }
            }
            if !built {
                out.push(DkmsEntry {
                    module: module.clone(),
                    version,
                    kernel: String::new(),
                    arch: String::new(),
                    state: "added",
                });
            }
        }
    }
    Ok(out)
}

host_fn! {
    /// Every module version of `/var/lib/dkms` per kernel it was built for: `#{name, version,
    /// kernel, arch, state}` (`name` the module's: `module` is a Rhai keyword) with state `"built"`
    /// or `"installed"`; a version built for no kernel once, `#{kernel: "", arch: "", state:
    /// "added"}`. In name order; `[]` without the tree.
    #[host(ns = "dkms", effects = ReadsHost)]
    fn status(h: &mut Host) -> rhai::Array {
        Ok(super::status(h)?
            .into_iter()
            .map(|e| {
                let mut m = rhai::Map::new();
                m.insert("name".into(), convert::s(e.module));
                m.insert("version".into(), convert::s(e.version));
                m.insert("kernel".into(), convert::s(e.kernel));
                m.insert("arch".into(), convert::s(e.arch));
                m.insert("state".into(), convert::s(e.state));
                Dynamic::from_map(m)
            })
            .collect::<rhai::Array>())
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert;
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::Dynamic;
}
use prelude::*;

host_fns!(status);
