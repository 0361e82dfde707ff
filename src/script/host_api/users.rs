//! `user::` and `group::` bindings over [`crate::host::users::user`] and [`crate::host::users::group`].

use rhai::{Dynamic, ImmutableString, Map};

use super::convert::{self, check_keys, opt_bool, opt_string};
use super::docs::{GROUP_KEYS, USER_KEYS, USER_REMOVE_KEYS};
use super::{Api, Registrar};
use crate::host::users::group::{self, GroupOptions};
use crate::host::users::user::{self, UserOptions};

/// An id option (`uid`, `gid`): an int in `0..=4294967294`.
fn opt_id(m: &Map, key: &str) -> Result<Option<u32>, String> {
    match m.get(key) {
        None => Ok(None),
        Some(d) if d.is_unit() => Ok(None),
        Some(d) => {
            let i = d
                .as_int()
                .map_err(|t| format!("option {key} must be an int, got {t}"))?;
            u32::try_from(i)
                .ok()
                .filter(|v| *v != u32::MAX)
                .map(Some)
                .ok_or_else(|| format!("option {key} must be in 0..=4294967294, got {i}"))
        }
    }
}

/// `#{uid, group, groups, home, shell, system, create_home, comment}`.
fn user_opts(m: &Map) -> Result<UserOptions, String> {
    check_keys(m, USER_KEYS)?;
    let group = match m.get("group") {
        None => None,
        Some(d) if d.is_unit() => None,
        Some(d) if d.is_int() => Some(
            opt_id(m, "group")?
                .map(|g| g.to_string())
                .unwrap_or_default(),
        ),
        Some(d) => Some(convert::string(d, "option group")?),
    };
    let groups = match m.get("groups") {
        None => Vec::new(),
        Some(d) if d.is_unit() => Vec::new(),
        Some(d) => convert::string_or_array(d, "option groups")?,
    };
    Ok(UserOptions {
        uid: opt_id(m, "uid")?,
        group,
        groups,
        home: opt_string(m, "home")?,
        shell: opt_string(m, "shell")?,
        system: opt_bool(m, "system", false)?,
        create_home: match m.get("create_home") {
            None => None,
            Some(d) if d.is_unit() => None,
            Some(_) => Some(opt_bool(m, "create_home", false)?),
        },
        comment: opt_string(m, "comment")?,
    })
}

/// `#{gid, system}`.
fn group_opts(m: &Map) -> Result<GroupOptions, String> {
    check_keys(m, GROUP_KEYS)?;
    Ok(GroupOptions {
        gid: opt_id(m, "gid")?,
        system: opt_bool(m, "system", false)?,
    })
}

fn info_map(i: user::UserInfo) -> Map {
    let mut m = Map::new();
    m.insert("name".into(), convert::s(i.entry.name));
    m.insert("uid".into(), Dynamic::from(i64::from(i.entry.uid)));
    m.insert("gid".into(), Dynamic::from(i64::from(i.entry.gid)));
    m.insert("group".into(), convert::opt(i.group));
    m.insert(
        "groups".into(),
        Dynamic::from_array(convert::array(i.groups)),
    );
    m.insert("home".into(), convert::s(i.entry.home));
    m.insert("shell".into(), convert::s(i.entry.shell));
    m.insert("comment".into(), convert::s(i.entry.comment));
    m
}

pub(crate) fn register(r: &mut Registrar, api: &Api) {
    type S = ImmutableString;
    bind!(r, api, "user", "exists", |h, n: S| Ok(user::exists(h, &n)?));
    bind!(r, api, "user", "info", |h, n: S| Ok(
        match user::info(h, &n)? {
            Some(i) => Dynamic::from_map(info_map(i)),
            None => Dynamic::UNIT,
        }
    ));
    bind!(r, api, "user", "ensure", |h, n: S| Ok(user::ensure(
        h,
        &n,
        &UserOptions::default()
    )?));
    bind!(r, api, "user", "ensure", |h, n: S, m: Map| {
        let o = user_opts(&m)?;
        Ok(user::ensure(h, &n, &o)?)
    });
    bind!(r, api, "user", "remove", |h, n: S| Ok(user::remove(
        h, &n, false
    )?));
    bind!(r, api, "user", "remove", |h, n: S, m: Map| {
        check_keys(&m, USER_REMOVE_KEYS)?;
        let rm = opt_bool(&m, "remove_home", false)?;
        Ok(user::remove(h, &n, rm)?)
    });
    bind!(r, api, "group", "exists", |h, n: S| Ok(group::exists(
        h, &n
    )?));
    bind!(r, api, "group", "ensure", |h, n: S| Ok(group::ensure(
        h,
        &n,
        &GroupOptions::default()
    )?));
    bind!(r, api, "group", "ensure", |h, n: S, m: Map| {
        let o = group_opts(&m)?;
        Ok(group::ensure(h, &n, &o)?)
    });
    bind!(r, api, "group", "remove", |h, n: S| Ok(group::remove(
        h, &n
    )?));
}
