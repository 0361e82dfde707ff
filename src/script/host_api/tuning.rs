//! `sysctl::`, `grub::`, `ulimit::` and `interrupt::` bindings over
//! [`crate::host::kernel::tuning`] and [`crate::host::kernel::interrupt`].

use rhai::{Array, Dynamic, ImmutableString, Map};

use super::convert;
use super::{Api, Registrar};
use crate::host::kernel::interrupt;
use crate::host::kernel::tuning::ulimit::LimitEntry;
use crate::host::kernel::tuning::{grub, sysctl, ulimit};

/// `ulimit::persist` entries: each a map `#{domain, type, item, value}` (`value` may be an
/// int) or a string `"domain type item value"` (exactly four whitespace-separated fields).
fn limit_entries(a: &Array) -> Result<Vec<LimitEntry>, String> {
    let mut out = Vec::new();
    for (i, d) in a.iter().enumerate() {
        if let Some(m) = d.read_lock::<Map>() {
            convert::check_keys(&m, &["domain", "type", "item", "value"])?;
            let field = |k: &str| match m.get(k) {
                Some(v) => convert::scalar(v, &format!("entries[{i}].{k}")),
                None => Err(format!("entries[{i}] has no {k}")),
            };
            out.push(LimitEntry {
                domain: field("domain")?,
                kind: field("type")?,
                item: field("item")?,
                value: field("value")?,
            });
        } else if d.is_string() {
            let text = d.to_string();
            let f: Vec<&str> = text.split_whitespace().collect();
            let [domain, kind, item, value] = f[..] else {
                return Err(format!(
                    "entries[{i}] {text:?} must have four fields: domain type item value"
                ));
            };
            out.push(LimitEntry {
                domain: domain.into(),
                kind: kind.into(),
                item: item.into(),
                value: value.into(),
            });
        } else {
            return Err(format!(
                "entries[{i}] must be a map #{{domain, type, item, value}} or a string, got {}",
                d.type_name()
            ));
        }
    }
    Ok(out)
}

/// Kernel arguments: an array of strings, or one string split at whitespace.
fn kernel_args(d: &Dynamic) -> Result<Vec<String>, String> {
    if d.is_string() {
        return Ok(d.to_string().split_whitespace().map(String::from).collect());
    }
    convert::string_or_array(d, "args")
}

pub(crate) fn register(r: &mut Registrar, api: &Api) {
    type S = ImmutableString;
    bind!(r, api, "sysctl", "get", |h, k: S| Ok(convert::opt(
        sysctl::get(h, &k)?
    )));
    bind!(r, api, "sysctl", "set", |h, k: S, v: Dynamic| {
        let v = convert::scalar(&v, "value")?;
        Ok(sysctl::set(h, &k, &v)?)
    });
    bind!(r, api, "sysctl", "persist", |h, f: S, m: Map| {
        let entries = m
            .iter()
            .map(|(k, v)| Ok((k.to_string(), convert::scalar(v, &format!("value of {k}"))?)))
            .collect::<Result<Vec<_>, String>>()?;
        Ok(sysctl::persist(h, &f, &entries)?)
    });
    bind!(r, api, "grub", "set_cmdline", |h, n: S, a: Dynamic| {
        let a = kernel_args(&a)?;
        Ok(grub::set_cmdline(h, &n, &a)?)
    });
    bind!(r, api, "grub", "remove", |h, n: S| Ok(grub::remove(h, &n)?));
    bind!(r, api, "ulimit", "persist", |h, f: S, e: Array| {
        let e = limit_entries(&e)?;
        Ok(ulimit::persist(h, &f, &e)?)
    });
    bind!(r, api, "interrupt", "reboot", |h| Ok(interrupt::reboot(h)?));
    bind!(r, api, "interrupt", "restart_services", |h, n: Dynamic| {
        let n = convert::string_or_array(&n, "names")?;
        Ok(interrupt::restart_services(h, &n)?)
    });
    bind!(r, api, "interrupt", "restart_all_services", |h| Ok(
        interrupt::restart_all_services(h)?
    ));
}
