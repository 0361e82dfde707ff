//! Local groups: `group::ensure`, `group::remove`, `group::exists`.
//!
//! Like [`crate::host::users::user`], groups are managed by editing `/etc/group` and `/etc/gshadow`
//! (and, for a gid change, `/etc/passwd`) under the host root through the effects mechanism
//! ([`crate::host::users::userdb`]): a plan shows the diffs and later reads see the planned group
//! (`fs::chown(p, (), "gpuops")` resolves it), a check reports a deleted group as drift.

use crate::host::Host;
use crate::host::root::error::{HostError, Result};
use crate::host::users::userdb::{self, Db, check_id, check_name};

/// Options of `group::ensure`.
#[derive(Debug, Clone, Default)]
pub struct GroupOptions {
    /// Group id: a new group gets it (an error when another group has it); an existing
    /// group with another gid is changed to it, and so is the primary gid of every user in
    /// the group (as groupmod does; files are not re-owned).
    pub gid: Option<u32>,
    /// A system group: a new group's gid is allocated from `SYS_GID_MIN..SYS_GID_MAX` of
    /// `/etc/login.defs` (highest free first), else from `GID_MIN..GID_MAX` (above the
    /// highest in use) (`userdb::allocate`). Ignored for an existing group.
    pub system: bool,
}

/// `group::ensure(name, #{gid, system})`: create the group when missing (`name:x:gid:` in
/// `/etc/group`, `name:!::` in `/etc/gshadow` when that file exists), or bring an existing
/// group to the given gid. Returns whether anything changed. Apply writes the files (whole,
/// atomically, under the locks of [`crate::host::users::userdb`]); plan records the writes with
/// their diffs; check reports them as drift.
///
/// # Errors
/// [`HostError::Invalid`] for a bad name (`invalid group name: ...`), a gid taken by another
/// group (`invalid gid: 27 is taken by group "sudo" (in /etc/group)`), a full gid range or a
/// malformed login.defs value; reads, locks and writes.
pub fn ensure(h: &mut Host, name: &str, o: &GroupOptions) -> Result<bool> {
    check_name("group name", name)?;
    if let Some(g) = o.gid {
        check_id("gid", g)?;
    }
    let (changed, ()) = userdb::transact(h, |_, db| {
        let taken = |db: &Db, gid: u32| -> Result<()> {
            match db.gid_owner(gid, name) {
                Some(other) => Err(HostError::Invalid {
                    what: "gid",
                    message: format!("{gid} is taken by group {other:?} (in {})", userdb::GROUP),
                }),
                None => Ok(()),
            }
        };
        match db.group_gid(name)? {
            Some((i, cur)) => {
                if let Some(gid) = o.gid
                    && gid != cur
                {
                    taken(db, gid)?;
                    let mut f = db.group.fields(i);
                    f[2] = gid.to_string().into_bytes();
                    db.group.set(i, &f);
                    for (pi, _) in db.primary_members(cur) {
                        let mut f = db.passwd.fields(pi);
                        f[3] = gid.to_string().into_bytes();
                        db.passwd.set(pi, &f);
                    }
                }
            }
            None => {
                let gid = match o.gid {
                    Some(gid) => {
                        taken(db, gid)?;
                        gid
                    }
                    None => db.new_id(true, o.system)?,
                };
                db.add_group(name, gid);
            }
        }
        Ok::<_, HostError>(())
    })?;
    if !changed {
        h.note_unchanged();
    }
    Ok(changed)
}

host_fn! {
    /// `group::ensure(name, #{})`: create the group when missing.
    #[host(ns = "group", effects = [Write])]
    fn ensure(h: &mut Host, name: S) -> bool {
        Ok(super::ensure(h, &name, &GroupOptions::default())?)
    }

    /// Create a group in `/etc/group` (and `/etc/gshadow` when present) with `gid` (else the next
    /// free one of login.defs' `GID_MIN..GID_MAX`, or for `system: true` the highest free of
    /// `SYS_GID_MIN..SYS_GID_MAX`); an existing group with another `gid` is changed to it, with its
    /// users' primary gid. A gid taken by another group is an error.
    #[overload(options = GROUP_KEYS)]
    fn ensure_with_opts(h: &mut Host, name: S, opts: Map) -> bool {
        let o = group_opts(&opts)?;
        Ok(super::ensure(h, &name, &o)?)
    }
}

/// `group::remove(name)`: remove the group's `/etc/group` and `/etc/gshadow` entries.
/// Unchanged (false) when it does not exist. Modes as [`ensure`].
///
/// # Errors
/// A bad name; [`HostError::Invalid`] when the group is a user's primary group
/// (`cannot remove group "gpuops": it is the primary group of user "gpuops"`), as groupdel
/// refuses it; reads, locks and writes.
pub fn remove(h: &mut Host, name: &str) -> Result<bool> {
    check_name("group name", name)?;
    let (changed, ()) = userdb::transact(h, |_, db| {
        let Some((i, gid)) = db.group_gid(name)? else {
            return Ok(());
        };
        if let Some((_, user)) = db.primary_members(gid).into_iter().next() {
            return Err(HostError::Invalid {
                what: "group",
                message: format!(
                    "cannot remove group {name:?}: it is the primary group of user {user:?}"
                ),
            });
        }
        db.group.remove(i);
        Db::remove_entry(&mut db.gshadow, name);
        Ok::<_, HostError>(())
    })?;
    if !changed {
        h.note_unchanged();
    }
    Ok(changed)
}

host_fn! {
    /// Remove the group's `/etc/group` and `/etc/gshadow` entries; an error when it is a user's
    /// primary group. False when there is no such group.
    #[host(ns = "group", effects = [Write])]
    fn remove(h: &mut Host, name: S) -> bool {
        Ok(super::remove(h, &name)?)
    }
}

/// `group::exists(name)`: the group has an `/etc/group` entry (as the session sees it).
///
/// # Errors
/// A bad name; reading the file.
pub fn exists(h: &Host, name: &str) -> Result<bool> {
    check_name("group name", name)?;
    Ok(Db::read(h)?.group.find(name).is_some())
}

host_fn! {
    /// True when `/etc/group` has the group (planned groups included).
    #[host(ns = "group", effects = ReadsHost)]
    fn exists(h: &mut Host, name: S) -> bool {
        Ok(super::exists(h, &name)?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert::{check_keys, opt_bool};
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use crate::host::users::user::opt_id;
    pub(super) use rhai::{ImmutableString as S, Map};
}
use prelude::*;

/// The option keys of `group::ensure`.
const GROUP_KEYS: &[&str] = &["gid", "system"];

/// `#{gid, system}`.
fn group_opts(m: &Map) -> Result<GroupOptions, String> {
    check_keys(m, GROUP_KEYS)?;
    Ok(GroupOptions {
        gid: opt_id(m, "gid")?,
        system: opt_bool(m, "system", false)?,
    })
}

host_fns!(exists, ensure, remove);
