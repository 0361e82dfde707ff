//! `toml::`, `json::`, `ini::` bindings over [`crate::host::files::toml`], [`crate::host::files::json`]
//! and [`crate::host::files::ini`], and the pure helpers (`sha256`, `regex::`) over
//! [`crate::host::files::text`].

use rhai::{Array, Dynamic, ImmutableString, Map};

use super::convert;
use super::{Api, Registrar};
use crate::host::files::structured::{KeyPath, Seg};
use crate::host::files::{ini, json, text, toml};

/// A key path: a string (TOML dotted key / JSON Pointer) or an array of strings (keys) and
/// non-negative integers (array indices).
fn key_path(d: &Dynamic) -> Result<KeyPath, String> {
    if d.is_string() {
        return Ok(KeyPath::Text(d.to_string()));
    }
    let Some(a) = d.read_lock::<Array>() else {
        return Err(format!(
            "key_path must be a string or an array of keys, got {}",
            d.type_name()
        ));
    };
    a.iter()
        .enumerate()
        .map(|(i, s)| {
            if s.is_string() {
                Ok(Seg::Key(s.to_string()))
            } else if let Ok(n) = s.as_int() {
                usize::try_from(n)
                    .map(Seg::Index)
                    .map_err(|_| format!("key_path[{i}] is a negative index ({n})"))
            } else {
                Err(format!(
                    "key_path[{i}] must be a string (key) or an integer (index), got {}",
                    s.type_name()
                ))
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .map(KeyPath::Segments)
}

/// An INI value: a string, or a number or bool written in decimal / `true`/`false`.
fn ini_value(d: &Dynamic) -> Result<String, String> {
    convert::scalar(d, "value")
}

pub(crate) fn register(r: &mut Registrar, api: &Api) {
    type S = ImmutableString;
    type D = Dynamic;
    bind!(r, api, "toml", "get", |h, p: S, k: D| Ok(convert::json(
        toml::get(h, &p, &key_path(&k)?)?
    )));
    bind!(r, api, "toml", "set", |h, p: S, k: D, v: D| {
        let v = convert::to_json(&v, "value")?;
        Ok(toml::set(h, &p, &key_path(&k)?, &v)?)
    });
    bind!(r, api, "toml", "remove", |h, p: S, k: D| Ok(toml::remove(
        h,
        &p,
        &key_path(&k)?
    )?));
    bind!(r, api, "toml", "ensure_table", |h, p: S, k: D| Ok(
        toml::ensure_table(h, &p, &key_path(&k)?)?
    ));
    bind!(r, api, "toml", "parse", |_h, t: S| Ok(convert::json(
        toml::parse(&t, std::path::Path::new("<text>"))?
    )));
    bind!(r, api, "json", "get", |h, p: S, k: D| Ok(convert::json(
        json::get(h, &p, &key_path(&k)?)?
    )));
    bind!(r, api, "json", "set", |h, p: S, k: D, v: D| {
        let v = convert::to_json(&v, "value")?;
        Ok(json::set(h, &p, &key_path(&k)?, &v)?)
    });
    bind!(r, api, "json", "remove", |h, p: S, k: D| Ok(json::remove(
        h,
        &p,
        &key_path(&k)?
    )?));
    bind!(r, api, "ini", "get", |h, p: S, s: S, k: S| Ok(
        convert::opt(ini::get(h, &p, &s, &k)?)
    ));
    bind!(r, api, "ini", "set", |h, p: S, s: S, k: S, v: D| {
        let v = ini_value(&v)?;
        Ok(ini::set(h, &p, &s, &k, &v)?)
    });
    bind!(r, api, "ini", "remove", |h, p: S, s: S, k: S| Ok(
        ini::remove(h, &p, &s, &k)?
    ));
    bind!(r, api, "", "sha256", |_h, t: S| Ok(convert::s(
        text::sha256_hex(&t)
    )));
    bind!(r, api, "regex", "is_match", |_h, p: S, t: S| Ok(
        text::is_match(&p, &t)?
    ));
    bind!(r, api, "regex", "captures", |_h, p: S, t: S| Ok(
        match text::captures(&p, &t)? {
            None => Dynamic::UNIT,
            Some(groups) =>
                Dynamic::from_array(groups.into_iter().map(convert::opt).collect::<Array>()),
        }
    ));
    bind!(r, api, "regex", "named", |_h, p: S, t: S| Ok(
        match text::named(&p, &t)? {
            None => Dynamic::UNIT,
            Some(groups) => Dynamic::from_map(
                groups
                    .into_iter()
                    .map(|(n, v)| (n.into(), convert::opt(v)))
                    .collect::<Map>()
            ),
        }
    ));
    bind!(r, api, "", "to_json", |_h, v: D| Ok(convert::s(
        text::to_json(&convert::to_json(&v, "value")?)
    )));
    bind!(r, api, "", "to_json", |_h, v: Map| Ok(convert::s(
        text::to_json(&convert::to_json(&Dynamic::from_map(v), "value")?)
    )));
    bind!(r, api, "regex", "replace", |_h, p: S, t: S, w: S| Ok(
        convert::s(text::replace(&p, &t, &w)?)
    ));
}
