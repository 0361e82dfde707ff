//! `mount::` and `kmod::` bindings over [`crate::host::mounts::mount`] and [`crate::host::kernel::kmod`].

use rhai::{Dynamic, ImmutableString, Map};

use super::convert::{self, check_keys, opt_bool, opt_string};
use super::docs::{BLACKLIST_KEYS, KMOD_FILE_KEYS, MOUNT_KEYS};
use super::{Api, Registrar};
use crate::host::kernel::kmod::{self, BlacklistOptions, FileOptions};
use crate::host::mounts::mount::{self, MountEntry, MountSpec, MountState};

/// A non-negative integer option (`()` or absent → `default`).
fn opt_u32(m: &Map, key: &str, default: u32) -> Result<u32, String> {
    match m.get(key) {
        None => Ok(default),
        Some(d) if d.is_unit() => Ok(default),
        Some(d) => {
            let v = d
                .as_int()
                .map_err(|t| format!("option {key} must be an int, got {t}"))?;
            u32::try_from(v).map_err(|_| format!("option {key} must be 0 or more, got {v}"))
        }
    }
}

/// `#{source, fstype, options, state, dump, pass}`: `source` and `fstype` required;
/// `options` a string or an array of strings (joined with `,`), default `defaults`; `state`
/// `mounted` (default) or `present`.
fn mount_spec(m: &Map) -> Result<MountSpec, String> {
    check_keys(m, MOUNT_KEYS)?;
    let required = |k: &str| {
        opt_string(m, k)?.ok_or_else(|| format!("option {k} is required (#{{source, fstype}})"))
    };
    let options = match m.get("options") {
        None => "defaults".to_string(),
        Some(d) if d.is_unit() => "defaults".to_string(),
        Some(d) if d.is_array() => convert::string_or_array(d, "option options")?.join(","),
        Some(d) => convert::string(d, "option options")?,
    };
    let state = match opt_string(m, "state")?.as_deref() {
        None | Some("mounted") => MountState::Mounted,
        Some("present") => MountState::Present,
        Some(other) => {
            return Err(format!(
                "option state must be \"mounted\" or \"present\", got {other:?}"
            ));
        }
    };
    Ok(MountSpec {
        source: required("source")?,
        fstype: required("fstype")?,
        options,
        dump: opt_u32(m, "dump", 0)?,
        pass: opt_u32(m, "pass", 0)?,
        state,
    })
}

fn entry_map(e: MountEntry) -> Map {
    let mut m = Map::new();
    m.insert(
        "path".into(),
        convert::s(e.mount_point.to_string_lossy().into_owned()),
    );
    m.insert("source".into(), convert::s(e.source));
    m.insert("fstype".into(), convert::s(e.fstype));
    m.insert("options".into(), convert::s(e.options));
    m.insert("super_options".into(), convert::s(e.super_options));
    m.insert("root".into(), convert::s(e.root));
    m
}

fn file_opts(m: &Map) -> Result<FileOptions, String> {
    check_keys(m, KMOD_FILE_KEYS)?;
    Ok(FileOptions {
        file: opt_string(m, "file")?,
    })
}

fn blacklist_opts(m: &Map) -> Result<BlacklistOptions, String> {
    check_keys(m, BLACKLIST_KEYS)?;
    Ok(BlacklistOptions {
        file: opt_string(m, "file")?,
        disable: opt_bool(m, "disable", false)?,
    })
}

/// Module options: a string of `key=value` words, or a map rendered `k=v` in key order
/// (each key a word without `=` or blanks, each value a non-empty word without blanks).
fn module_options(d: &Dynamic) -> Result<String, String> {
    if let Some(m) = d.read_lock::<Map>() {
        return m
            .iter()
            .map(|(k, v)| {
                if k.is_empty() || k.contains(|c: char| c == '=' || c.is_whitespace()) {
                    return Err(format!(
                        "option key {:?} must be a non-empty word without `=` or blanks",
                        k.as_str()
                    ));
                }
                let v = convert::scalar(v, &format!("option {k}"))?;
                if v.is_empty() || v.contains(char::is_whitespace) {
                    return Err(format!(
                        "option {k}: value {v:?} must be one word without blanks"
                    ));
                }
                Ok(format!("{k}={v}"))
            })
            .collect::<Result<Vec<_>, String>>()
            .map(|w| w.join(" "));
    }
    convert::string(d, "opts").map_err(|e| format!("{e} (or a map)"))
}

pub(crate) fn register(r: &mut Registrar, api: &Api) {
    type S = ImmutableString;
    bind!(r, api, "mount", "ensure", |h, p: S, o: Map| {
        let spec = mount_spec(&o)?;
        Ok(mount::ensure(h, &p, &spec)?)
    });
    bind!(r, api, "mount", "remove", |h, p: S| Ok(mount::remove(
        h, &p
    )?));
    bind!(r, api, "mount", "is_mounted", |h, p: S| Ok(
        mount::is_mounted(h, &p)?
    ));
    bind!(r, api, "mount", "info", |h, p: S| Ok(
        mount::info(h, &p)?.map_or(Dynamic::UNIT, |e| Dynamic::from_map(entry_map(e)))
    ));

    bind!(r, api, "kmod", "blacklist", |h, n: S| Ok(kmod::blacklist(
        h,
        &n,
        &BlacklistOptions::default()
    )?));
    bind!(r, api, "kmod", "blacklist", |h, n: S, o: Map| {
        let o = blacklist_opts(&o)?;
        Ok(kmod::blacklist(h, &n, &o)?)
    });
    bind!(r, api, "kmod", "unblacklist", |h, n: S| Ok(
        kmod::unblacklist(h, &n, &FileOptions::default())?
    ));
    bind!(r, api, "kmod", "unblacklist", |h, n: S, o: Map| {
        let o = file_opts(&o)?;
        Ok(kmod::unblacklist(h, &n, &o)?)
    });
    bind!(r, api, "kmod", "options", |h, n: S, v: Dynamic| {
        let v = module_options(&v)?;
        Ok(kmod::options(h, &n, &v, &FileOptions::default())?)
    });
    bind!(r, api, "kmod", "options", |h, n: S, v: Dynamic, o: Map| {
        let o = file_opts(&o)?;
        let v = module_options(&v)?;
        Ok(kmod::options(h, &n, &v, &o)?)
    });
    bind!(r, api, "kmod", "remove_options", |h, n: S| Ok(
        kmod::remove_options(h, &n, &FileOptions::default())?
    ));
    bind!(r, api, "kmod", "remove_options", |h, n: S, o: Map| {
        let o = file_opts(&o)?;
        Ok(kmod::remove_options(h, &n, &o)?)
    });
    bind!(r, api, "kmod", "load_at_boot", |h, n: S| Ok(
        kmod::load_at_boot(h, &n, &FileOptions::default())?
    ));
    bind!(r, api, "kmod", "load_at_boot", |h, n: S, o: Map| {
        let o = file_opts(&o)?;
        Ok(kmod::load_at_boot(h, &n, &o)?)
    });
    bind!(r, api, "kmod", "unload_at_boot", |h, n: S| Ok(
        kmod::unload_at_boot(h, &n, &FileOptions::default())?
    ));
    bind!(r, api, "kmod", "unload_at_boot", |h, n: S, o: Map| {
        let o = file_opts(&o)?;
        Ok(kmod::unload_at_boot(h, &n, &o)?)
    });
    bind!(r, api, "kmod", "loaded", |h, n: S| Ok(kmod::loaded(h, &n)?));
    bind!(r, api, "kmod", "load", |h, n: S| Ok(kmod::load(h, &n)?));
}
