//! `gpu::list()`, `driver_version()`, `count()`: the NVIDIA GPUs of the host and the loaded
//! driver's version, read in every mode.
//!
//! With `nvidia-smi` in the root (`/usr/bin`, `/usr/local/bin`, ... as
//! [`crate::host::kernel::boot`] looks programs up) the list is its CSV, run chrooted:
//! `nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,mig.mode.current
//! --format=csv,noheader,nounits`, one `0, NVIDIA H100 80GB HBM3, GPU-<uuid>,
//! 00000000:18:00.0, 550.54.15, 81559, Disabled` line per GPU (the name is the one field
//! that could hold `, `, so the others are taken from both ends). A value nvidia-smi
//! cannot give (`[N/A]`, `[Not Supported]`, any `[...]`) is `None`. Without `nvidia-smi`,
//! or when it fails (no driver loaded), the list comes from the driver's `/proc` files:
//! `/proc/driver/nvidia/gpus/<bus>/information` (`Model:`, `GPU UUID:`, `Bus Location:`
//! lines, `Key: <tabs> value`), indexed in bus order as nvidia-smi enumerates them, with the
//! version of `/proc/driver/nvidia/version` (`NVRM version: NVIDIA UNIX x86_64 Kernel
//! Module  550.54.15  <date>`, or `... Open Kernel Module for x86_64  550.54.15 ...`) and
//! no memory or MIG mode. No driver: an empty list.
//!
//! PCI bus ids are given in the sysfs form, `0000:18:00.0` (nvidia-smi's eight-digit
//! domain cut to four, lowercase), so they name `/sys/bus/pci/devices/<id>`.

use std::path::Path;

use crate::host::Host;
use crate::host::effects::exec::CommandOptions;
use crate::host::root::error::{HostError, Result};

/// The fields of the query, in order.
pub const QUERY_FIELDS: &str =
    "index,name,uuid,pci.bus_id,driver_version,memory.total,mig.mode.current";
/// The driver's per-GPU directory (a host path).
pub const PROC_GPUS: &str = "/proc/driver/nvidia/gpus";
/// The driver's version file (a host path).
pub const PROC_VERSION: &str = "/proc/driver/nvidia/version";

/// One GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// nvidia-smi's index (bus order).
    pub index: i64,
    /// Product name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// `GPU-<uuid>`.
    pub uuid: Option<String>,
    /// PCI bus id, sysfs form (`0000:18:00.0`).
    pub pci_bus: Option<String>,
    /// The driver's version (`550.54.15`).
    pub driver_version: Option<String>,
    /// Total memory in MiB.
    pub memory_mib: Option<i64>,
    /// `Enabled` or `Disabled`; `None` on GPUs without MIG.
    pub mig_mode: Option<String>,
}

/// A value, `None` for nvidia-smi's bracketed "no value" forms.
fn value(v: &str) -> Option<String> {
    let v = v.trim();
    let unknown = v.is_empty() || (v.starts_with('[') && v.ends_with(']'));
    (!unknown).then(|| v.to_string())
}

/// `00000000:18:00.0` → `0000:18:00.0`; lowercase.
pub fn sysfs_bus_id(id: &str) -> String {
    let id = id.trim().to_ascii_lowercase();
    match id.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 && domain.chars().all(|c| c == '0') => {
            format!("0000:{rest}")
        }
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => id,
    }
}

fn bad_line(line: &str, why: &str) -> HostError {
    HostError::Invalid {
        what: "nvidia-smi output",
        message: format!("{why}: {line:?} (expected {QUERY_FIELDS})"),
    }
}

/// The GPUs of the query's CSV (module docs).
///
/// # Errors
/// A line with fewer than seven fields, or an index or memory that is not a number.
pub fn parse_smi_csv(text: &str) -> Result<Vec<Gpu>> {
    let mut gpus = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(", ").collect();
        if fields.len() < 7 {
            return Err(bad_line(line, "fewer than 7 fields"));
        }
        let n = fields.len();
        let index = fields[0]
            .trim()
            .parse()
            .map_err(|_| bad_line(line, "the index is not a number"))?;
        let memory_mib = match value(fields[n - 2]) {
            None => None,
            Some(m) => Some(
                m.parse()
                    .map_err(|_| bad_line(line, "memory.total is not a number of MiB"))?,
            ),
        };
        gpus.push(Gpu {
            index,
            name: fields[1..n - 5].join(", ").trim().to_string(),
            uuid: value(fields[n - 5]),
            pci_bus: value(fields[n - 4]).map(|b| sysfs_bus_id(&b)),
            driver_version: value(fields[n - 3]),
            memory_mib,
            mig_mode: value(fields[n - 1]),
        });
    }
    Ok(gpus)
}

/// The version in the text of `/proc/driver/nvidia/version`: the first word after
/// `Kernel Module` made of digits and dots.
pub fn parse_proc_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let (_, after) = line.split_once("Kernel Module")?;
    after
        .split_whitespace()
        .find(|w| {
            w.contains('.')
                && w.starts_with(|c: char| c.is_ascii_digit())
                && w.chars().all(|c| c.is_ascii_digit() || c == '.')
        })
        .map(String::from)
}

/// The value of `key` in a `/proc/driver/nvidia/gpus/<bus>/information` text.
fn info_value(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.trim() == key))
        .and_then(|(_, v)| value(v))
}

/// `/proc/driver/nvidia/version`'s version, `None` without the driver.
///
/// # Errors
/// Read failures.
fn proc_version(h: &Host) -> Result<Option<String>> {
    Ok(h.view_read(Path::new(PROC_VERSION))?
        .and_then(|b| parse_proc_version(&String::from_utf8_lossy(&b))))
}

fn proc_list(h: &Host) -> Result<Vec<Gpu>> {
    let dir = Path::new(PROC_GPUS);
    let Some(entries) = h.view_list(dir)? else {
        return Ok(Vec::new());
    };
    let version = proc_version(h)?;
    let mut gpus = Vec::new();
    for (bus, _) in entries {
        let Some(b) = h.view_read(&dir.join(&bus).join("information"))? else {
            continue;
        };
        let text = String::from_utf8_lossy(&b);
        gpus.push(Gpu {
            index: gpus.len() as i64,
            name: info_value(&text, "Model").unwrap_or_default(),
            uuid: info_value(&text, "GPU UUID"),
            pci_bus: Some(sysfs_bus_id(
                &info_value(&text, "Bus Location").unwrap_or(bus),
            )),
            driver_version: version.clone(),
            memory_mib: None,
            mig_mode: None,
        });
    }
    Ok(gpus)
}

/// `gpu::list()`: the GPUs (module docs), by index.
///
/// # Errors
/// nvidia-smi output that does not parse (named); read failures.
pub fn list(h: &Host) -> Result<Vec<Gpu>> {
    if crate::host::kernel::boot::find_program(h, &["nvidia-smi"])?.is_some() {
        let argv: Vec<String> = [
            "nvidia-smi",
            &format!("--query-gpu={QUERY_FIELDS}"),
            "--format=csv,noheader,nounits",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let out = h.exec(
            &argv,
            &CommandOptions {
                read_only: true,
                ..CommandOptions::default()
            },
        )?;
        if out.ok {
            return parse_smi_csv(&out.stdout);
        }
    }
    proc_list(h)
}

host_fn! {
    /// The GPUs by index: `#{index, name, uuid, pci_bus, driver_version, memory_mib, mig_mode}`
    /// (`memory_mib` an int; `mig_mode` `"Enabled"`, `"Disabled"` or `()` on GPUs without MIG; from
    /// `/proc`, `memory_mib` and `mig_mode` are `()`); `[]` without a driver. An error for
    /// nvidia-smi output that does not parse.
    #[host(ns = "gpu", effects = RunsReadOnly)]
    fn list(h: &mut Host) -> rhai::Array {
        Ok(super::list(h)?
            .into_iter()
            .map(gpu_map)
            .collect::<rhai::Array>())
    }
}

/// `gpu::driver_version()`: the loaded driver's version (`/proc/driver/nvidia/version`),
/// else the first GPU's as nvidia-smi reports it; `None` without a driver.
///
/// # Errors
/// As [`list`].
pub fn driver_version(h: &Host) -> Result<Option<String>> {
    if let Some(v) = proc_version(h)? {
        return Ok(Some(v));
    }
    Ok(list(h)?.into_iter().find_map(|g| g.driver_version))
}

host_fn! {
    /// The loaded driver's version (`"550.54.15"`, from `/proc/driver/nvidia/version`, else
    /// nvidia-smi's), or `()` without a driver.
    #[host(ns = "gpu", effects = RunsReadOnly)]
    fn driver_version(h: &mut Host) -> rhai::Dynamic {
        Ok(convert::opt(super::driver_version(h)?))
    }
}

/// `gpu::count()`: how many GPUs [`list`] finds.
///
/// # Errors
/// As [`list`].
pub fn count(h: &Host) -> Result<usize> {
    Ok(list(h)?.len())
}

host_fn! {
    /// How many GPUs `gpu::list()` finds.
    #[host(ns = "gpu", effects = RunsReadOnly)]
    fn count(h: &mut Host) -> i64 {
        Ok(super::count(h)? as i64)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert;
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Dynamic, Map};
}
use prelude::*;

/// A GPU for scripts: `#{index, name, uuid, pci_bus, driver_version, memory_mib, mig_mode}`
/// (`()` for what is not known).
fn gpu_map(g: Gpu) -> Dynamic {
    let mut m = Map::new();
    m.insert("index".into(), Dynamic::from(g.index));
    m.insert("name".into(), convert::s(g.name));
    m.insert("uuid".into(), convert::opt(g.uuid));
    m.insert("pci_bus".into(), convert::opt(g.pci_bus));
    m.insert("driver_version".into(), convert::opt(g.driver_version));
    m.insert(
        "memory_mib".into(),
        g.memory_mib.map_or(Dynamic::UNIT, Dynamic::from),
    );
    m.insert("mig_mode".into(), convert::opt(g.mig_mode));
    Dynamic::from_map(m)
}

host_fns!(list, driver_version, count);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smi_csv_and_proc_formats() {
        let csv = "0, NVIDIA H100 80GB HBM3, GPU-5ab1c2d3-0000-1111-2222-333344445555, 00000000:18:00.0, 550.54.15, 81559, Disabled\n\
                   1, Tesla T4, GPU-aaaa, 00000000:3B:00.0, 550.54.15, 15360, [N/A]\n";
        let gpus = parse_smi_csv(csv).unwrap();
        assert_eq!(
            gpus[0],
            Gpu {
                index: 0,
                name: "NVIDIA H100 80GB HBM3".into(),
                uuid: Some("GPU-5ab1c2d3-0000-1111-2222-333344445555".into()),
                pci_bus: Some("0000:18:00.0".into()),
                driver_version: Some("550.54.15".into()),
                memory_mib: Some(81559),
                mig_mode: Some("Disabled".into()),
            }
        );
        assert_eq!(gpus[1].pci_bus.as_deref(), Some("0000:3b:00.0"));
        assert_eq!(gpus[1].mig_mode, None);
        assert_eq!(
            parse_smi_csv("0, A, B\n").unwrap_err().to_string(),
            "invalid nvidia-smi output: fewer than 7 fields: \"0, A, B\" (expected index,name,uuid,pci.bus_id,driver_version,memory.total,mig.mode.current)"
        );
        assert_eq!(
            parse_proc_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\nGCC version:  gcc version 12.3.0\n").as_deref(),
            Some("550.54.15")
        );
        assert_eq!(
            parse_proc_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Jan 23 23:16:05 UTC 2025\n").as_deref(),
            Some("570.86.15")
        );
        assert_eq!(parse_proc_version("garbage\n"), None);
        assert_eq!(
            info_value(
                "Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-5ab1\nBus Location: \t 0000:18:00.0\n",
                "GPU UUID"
            )
            .as_deref(),
            Some("GPU-5ab1")
        );
    }
}
