//! `fs::` bindings over [`crate::host::files::fs`].

use rhai::{Dynamic, ImmutableString, Map};

use super::convert::{self, check_keys, opt_bool, opt_scalar, opt_string};
use super::{Api, Registrar};
use crate::host::files::fs::{self, LineOptions, WriteOptions};

/// `#{mode, owner, group}` (`()` values mean "keep").
fn write_opts(m: &Map) -> Result<WriteOptions, String> {
    check_keys(m, &["mode", "owner", "group"])?;
    attribute_opts(m)
}

/// The `mode`, `owner` and `group` keys of an options map (`()` values mean "keep"), as
/// [`WriteOptions`]; the caller checks the map's keys. Shared by `fs::write`/`fs::copy`
/// and `fs::fetch`.
pub(super) fn attribute_opts(m: &Map) -> Result<WriteOptions, String> {
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

pub(crate) fn register(r: &mut Registrar, api: &Api) {
    type S = ImmutableString;
    // Queries.
    bind!(r, api, "fs", "exists", |h, p: S| Ok(fs::exists(h, &p)?));
    bind!(r, api, "fs", "is_file", |h, p: S| Ok(fs::is_file(h, &p)?));
    bind!(r, api, "fs", "is_dir", |h, p: S| Ok(fs::is_dir(h, &p)?));
    bind!(r, api, "fs", "read", |h, p: S| Ok(fs::read(h, &p)?));
    bind!(r, api, "fs", "read_or", |h, p: S, d: S| Ok(fs::read_or(
        h, &p, &d
    )?));
    bind!(r, api, "fs", "list", |h, p: S| Ok(convert::array(
        fs::list(h, &p)?
    )));
    bind!(r, api, "fs", "glob", |h, p: S| Ok(convert::array(
        fs::glob(h, &p)?
    )));
    bind!(r, api, "fs", "stat", |h, p: S| {
        let st = fs::stat(h, &p)?;
        let mut m = Map::new();
        m.insert("kind".into(), convert::s(st.kind));
        m.insert("size".into(), Dynamic::from(st.size as i64));
        m.insert("mode".into(), Dynamic::from(i64::from(st.mode)));
        m.insert("uid".into(), Dynamic::from(i64::from(st.uid)));
        m.insert("gid".into(), Dynamic::from(i64::from(st.gid)));
        m.insert("mtime".into(), Dynamic::from(st.mtime));
        Ok(m)
    });
    // Mutations.
    bind!(r, api, "fs", "write", |h, p: S, c: S| Ok(fs::write(
        h,
        &p,
        &c,
        &WriteOptions::default()
    )?));
    bind!(r, api, "fs", "write", |h, p: S, c: S, o: Map| {
        let o = write_opts(&o)?;
        Ok(fs::write(h, &p, &c, &o)?)
    });
    bind!(r, api, "fs", "append", |h, p: S, c: S| Ok(fs::append(
        h, &p, &c
    )?));
    bind!(r, api, "fs", "ensure_line", |h, p: S, l: S| Ok(
        fs::ensure_line(h, &p, &l, &LineOptions::default())?
    ));
    bind!(r, api, "fs", "ensure_line", |h, p: S, l: S, o: Map| {
        let o = line_opts(&o)?;
        Ok(fs::ensure_line(h, &p, &l, &o)?)
    });
    bind!(r, api, "fs", "remove_line", |h, p: S, re: S| Ok(
        fs::remove_line(h, &p, &re)?
    ));
    bind!(r, api, "fs", "ensure_block", |h, p: S, id: S, c: S| Ok(
        fs::ensure_block(h, &p, &id, &c)?
    ));
    bind!(r, api, "fs", "remove_block", |h, p: S, id: S| Ok(
        fs::remove_block(h, &p, &id)?
    ));
    bind!(r, api, "fs", "mkdir", |h, p: S| Ok(fs::mkdir(h, &p, None)?));
    bind!(r, api, "fs", "mkdir", |h, p: S, m: Dynamic| {
        let m = convert::mode(&m)?;
        Ok(fs::mkdir(h, &p, Some(m))?)
    });
    bind!(r, api, "fs", "remove", |h, p: S| Ok(fs::remove(h, &p)?));
    bind!(r, api, "fs", "remove_all", |h, p: S| Ok(fs::remove_all(
        h, &p
    )?));
    bind!(r, api, "fs", "copy", |h, s: S, d: S| Ok(fs::copy(
        h,
        &s,
        &d,
        &WriteOptions::default()
    )?));
    bind!(r, api, "fs", "copy", |h, s: S, d: S, o: Map| {
        let o = write_opts(&o)?;
        Ok(fs::copy(h, &s, &d, &o)?)
    });
    bind!(r, api, "fs", "chmod", |h, p: S, m: Dynamic| {
        let m = convert::mode(&m)?;
        Ok(fs::chmod(h, &p, m)?)
    });
    bind!(r, api, "fs", "chown", |h, p: S, o: Dynamic, g: Dynamic| {
        let o = opt_scalar(&o, "owner")?;
        let g = opt_scalar(&g, "group")?;
        Ok(fs::chown(h, &p, o.as_deref(), g.as_deref())?)
    });
    bind!(r, api, "fs", "symlink", |h, t: S, l: S| Ok(fs::symlink(
        h, &t, &l
    )?));
}
