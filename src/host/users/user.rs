//! Local users: `user::ensure`, `user::remove`, `user::exists`, `user::info`.
//!
//! Users are managed by editing `/etc/passwd`, `/etc/shadow`, `/etc/group` and
//! `/etc/gshadow` under the host root through the effects mechanism, never by running
//! `useradd` ([`crate::host::users::userdb`] has the formats, the locking and the transaction). So a
//! plan shows the diff of each file, later reads of the same plan see the planned user (the
//! owner and group names of `fs::chown`, `fs::write(.., #{owner})`, `fs::copy` resolve it),
//! and a check reports a deleted user or a changed attribute as drift.
//!
//! # What `ensure` creates (the choices, after useradd)
//!
//! | attribute | new user | existing user |
//! |---|---|---|
//! | `uid` | given (an error when another user has it), else allocated from `SYS_UID_MIN..SYS_UID_MAX` (`system`: highest first) or `UID_MIN..UID_MAX` of `/etc/login.defs` (`host::users::userdb::allocate`) | changed when given and different (files are not re-owned) |
//! | `group` (name or gid; must exist) | given, else a group of the user's own name: the existing one, or a new one (gid = uid when free, else allocated from the `GID` range), as useradd's `USERGROUPS_ENAB yes` (the setting is not read: `USERGROUPS_ENAB no` hosts need `group`) | changed when given and different |
//! | `groups` (names; must exist) | the user is added to each | the user is added to each missing one; never removed from any (no `append: false`) |
//! | `home` | given, else `/home/<name>` | changed when given (nothing is moved) |
//! | `shell` | given, else `/bin/bash`, `/usr/sbin/nologin` for `system` users | changed when given |
//! | `comment` | given, else empty | changed when given |
//! | `create_home` | default `true`, `false` for `system` users | only when given `true` |
//!
//! A created home directory (only when it does not exist yet; an existing one is left as it
//! is) has mode `HOME_MODE` of login.defs, else `0777 & !UMASK`, else 0750, is owned by the
//! user and its primary group (missing parents are created 0755, root-owned), and receives a
//! copy of `/etc/skel` (files and directories with their modes and owned by the user;
//! symlinks recreated, owned by root). New shadow entries
//! are locked (`!`), with `lastchg` the days since the epoch (`SOURCE_DATE_EPOCH` of the step
//! environment when set) and, except for `system` users, the aging fields of login.defs'
//! `PASS_MIN_DAYS`, `PASS_MAX_DAYS`, `PASS_WARN_AGE`; an existing user's shadow entry is never
//! changed.

use std::path::{Path, PathBuf};

use crate::host::Host;
use crate::host::effects::effect::Effect;
use crate::host::root::error::{HostError, Result};
use crate::host::users::userdb::{
    self, Db, GROUP, PasswdEntry, check_field, check_id, check_name, field, members,
};

/// A failure of a `user::` function of its own; everything else is the session's
/// [`HostError`].
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// What the session failed with.
    #[error(transparent)]
    Host(#[from] HostError),

    /// A group name (or gid) is not in the host root's `/etc/group`.
    #[error("unknown {kind} {name:?} (not in the host's {file})")]
    UnknownId {
        /// `group`.
        kind: &'static str,
        /// The name as given.
        name: String,
        /// `/etc/group`.
        file: &'static str,
    },
}

impl crate::host::api::AreaError for UserError {
    /// The account files are the host's state: a command the plan did not run (`groupadd`,
    /// a package's scripts) may add the group.
    fn depends_on_host(&self) -> bool {
        match self {
            UserError::Host(e) => e.depends_on_host(),
            UserError::UnknownId { .. } => true,
        }
    }
}
crate::host::api::area_error!(UserError);

/// Options of `user::ensure` (`None`: the default for a new user, untouched for an existing
/// one; see the module docs).
#[derive(Debug, Clone, Default)]
pub struct UserOptions {
    /// User id.
    pub uid: Option<u32>,
    /// Primary group: a group name or a gid, which must exist.
    pub group: Option<String>,
    /// Supplementary groups the user is added to (each must exist).
    pub groups: Vec<String>,
    /// Home directory (absolute).
    pub home: Option<String>,
    /// Login shell (absolute).
    pub shell: Option<String>,
    /// A new system account: ids from the `SYS_` ranges, `nologin`, no home by default, no
    /// password aging. Ignored for an existing user.
    pub system: bool,
    /// Create the home directory when it does not exist.
    pub create_home: Option<bool>,
    /// The comment (GECOS) field.
    pub comment: Option<String>,
}

/// What `user::info` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// The passwd entry.
    pub entry: PasswdEntry,
    /// The name of the primary group, `None` when no group has its gid.
    pub group: Option<String>,
    /// The supplementary groups that list the user, in `/etc/group` order.
    pub groups: Vec<String>,
}

/// A home directory to create after the account files were written.
#[derive(Debug, Clone)]
struct HomeSpec {
    path: PathBuf,
    uid: u32,
    gid: u32,
    mode: u32,
}

fn check_path_field(what: &'static str, v: &str) -> Result<()> {
    check_field(what, v)?;
    if !v.starts_with('/') {
        return Err(HostError::Invalid {
            what,
            message: format!("{v:?} must be an absolute path"),
        });
    }
    Ok(())
}

/// A group given by name or number, as a gid that exists in `/etc/group`.
fn resolve_group(db: &Db, g: &str) -> Result<u32, UserError> {
    let unknown = || UserError::UnknownId {
        kind: "group",
        name: g.to_string(),
        file: GROUP,
    };
    if let Ok(gid) = g.parse::<u32>() {
        return match db.gid_owner(gid, "") {
            Some(_) => Ok(gid),
            None => Err(unknown()),
        };
    }
    db.group_gid(g)?.map(|(_, gid)| gid).ok_or_else(unknown)
}

fn validate(name: &str, o: &UserOptions) -> Result<()> {
    check_name("user name", name)?;
    if let Some(u) = o.uid {
        check_id("uid", u)?;
    }
    if let Some(g) = &o.group
        && g.parse::<u32>().is_err()
    {
        check_name("group name", g)?;
    }
    for g in &o.groups {
        check_name("group name", g)?;
    }
    if let Some(c) = &o.comment {
        check_field("comment", c)?;
    }
    if let Some(p) = &o.home {
        check_path_field("home", p)?;
    }
    if let Some(p) = &o.shell {
        check_path_field("shell", p)?;
    }
    Ok(())
}

fn taken(what: &'static str, id: u32, kind: &str, owner: &str, file: &str) -> HostError {
    HostError::Invalid {
        what,
        message: format!("{id} is taken by {kind} {owner:?} (in {file})"),
    }
}

/// Add `name` to the member lists of `groups` (group and gshadow).
fn join_groups(db: &mut Db, name: &str, groups: &[String]) -> Result<(), UserError> {
    for g in groups {
        if db.group_gid(g)?.is_none() {
            return Err(UserError::UnknownId {
                kind: "group",
                name: g.clone(),
                file: GROUP,
            });
        }
        Db::add_member(&mut db.group, g, 3, name);
        Db::add_member(&mut db.gshadow, g, 3, name);
    }
    Ok(())
}

/// The edit of `ensure` on the tables; returns the home to create, if any.
fn edit_ensure(
    db: &mut Db,
    name: &str,
    o: &UserOptions,
    days: u64,
) -> Result<Option<HomeSpec>, UserError> {
    let Some((i, cur)) = db.user(name)? else {
        return create(db, name, o, days);
    };
    let mut f = db.passwd.fields(i);
    // Only a line that changes is rewritten (a short line is padded then, never before).
    let mut edits: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut uid = cur.uid;
    if let Some(u) = o.uid
        && u != cur.uid
    {
        if let Some(other) = db.uid_owner(u, name) {
            return Err(taken("uid", u, "user", &other, userdb::PASSWD).into());
        }
        uid = u;
        edits.push((2, u.to_string().into_bytes()));
    }
    let mut gid = cur.gid;
    if let Some(g) = &o.group {
        gid = resolve_group(db, g)?;
        if gid != cur.gid {
            edits.push((3, gid.to_string().into_bytes()));
        }
    }
    for (k, v) in [(4, &o.comment), (5, &o.home), (6, &o.shell)] {
        if let Some(v) = v
            && field(&f, k) != v.as_bytes()
        {
            edits.push((k, v.clone().into_bytes()));
        }
    }
    if !edits.is_empty() {
        f.resize(f.len().max(7), Vec::new());
        for (k, v) in edits {
            f[k] = v;
        }
        db.passwd.set(i, &f);
    }
    join_groups(db, name, &o.groups)?;
    let home = String::from_utf8_lossy(field(&f, 5)).into_owned();
    if o.create_home != Some(true) || !home.starts_with('/') {
        return Ok(None);
    }
    Ok(Some(HomeSpec {
        path: PathBuf::from(home),
        uid,
        gid,
        mode: db.defs.home_mode()?,
    }))
}

/// A new user's entries (module docs); returns its home when it is to be created.
fn create(
    db: &mut Db,
    name: &str,
    o: &UserOptions,
    days: u64,
) -> Result<Option<HomeSpec>, UserError> {
    let uid = match o.uid {
        Some(u) => {
            if let Some(other) = db.uid_owner(u, name) {
                return Err(taken("uid", u, "user", &other, userdb::PASSWD).into());
            }
            u
        }
        None => db.new_id(false, o.system)?,
    };
    let gid = match &o.group {
        Some(g) => resolve_group(db, g)?,
        None => match db.group_gid(name)? {
            Some((_, gid)) => gid,
            None => {
                let gid = match db.gid_owner(uid, "") {
                    None => uid,
                    Some(_) => db.new_id(true, o.system)?,
                };
                db.add_group(name, gid);
                gid
            }
        },
    };
    let home = o.home.clone().unwrap_or_else(|| format!("/home/{name}"));
    let default_shell = if o.system {
        "/usr/sbin/nologin"
    } else {
        "/bin/bash"
    };
    let shell = o.shell.as_deref().unwrap_or(default_shell);
    let pw: &[u8] = if db.shadow.exists { b"x" } else { b"!" };
    let (uid_s, gid_s) = (uid.to_string(), gid.to_string());
    db.passwd.push(&[
        name.as_bytes(),
        pw,
        uid_s.as_bytes(),
        gid_s.as_bytes(),
        o.comment.as_deref().unwrap_or_default().as_bytes(),
        home.as_bytes(),
        shell.as_bytes(),
    ]);
    if db.shadow.find(name).is_none() {
        let opt = |v: Option<u64>| v.map_or_else(String::new, |n| n.to_string());
        let lastchg = opt(Some(days).filter(|d| *d > 0));
        let (min, max, warn) = if o.system {
            (String::new(), String::new(), String::new())
        } else {
            (
                opt(db.defs.aging("PASS_MIN_DAYS")?),
                opt(db.defs.aging("PASS_MAX_DAYS")?),
                opt(db.defs.aging("PASS_WARN_AGE")?),
            )
        };
        db.shadow.push(&[
            name.as_bytes(),
            b"!",
            lastchg.as_bytes(),
            min.as_bytes(),
            max.as_bytes(),
            warn.as_bytes(),
            b"",
            b"",
            b"",
        ]);
    }
    join_groups(db, name, &o.groups)?;
    if !o.create_home.unwrap_or(!o.system) {
        return Ok(None);
    }
    Ok(Some(HomeSpec {
        path: PathBuf::from(home),
        uid,
        gid,
        mode: db.defs.home_mode()?,
    }))
}

/// `user::ensure(name, #{uid, group, groups, home, shell, system, create_home, comment})`:
/// bring the user to the given attributes, creating it when missing (module docs for the
/// defaults). Returns whether anything changed (an account file or the home directory).
///
/// Side effects per mode: apply writes the changed account files (whole, atomically, under
/// the locks of [`crate::host::users::userdb`]) and creates the home; plan records the writes with
/// their diffs (later reads of the session see the user); check reports them as drift.
///
/// # Errors
/// [`HostError::Invalid`] for a bad name (`invalid user name: "Bad" must match ...`), a
/// field with `:` or a line break, a relative home or shell, a uid or gid taken by another
/// account, a full id range or a malformed login.defs value; [`UserError::UnknownId`] for a
/// `group` or `groups` entry that does not exist; a home path that exists and is not a
/// directory; reads, locks and writes.
pub fn ensure(h: &mut Host, name: &str, o: &UserOptions) -> Result<bool, UserError> {
    validate(name, o)?;
    let days = userdb::days_since_epoch(h)?;
    let (changed, home) = userdb::transact(h, |h, db| {
        let home = edit_ensure(db, name, o, days)?;
        // Refused before anything is written.
        if let Some(spec) = &home
            && h.view_stat(&spec.path, true)?
                .is_some_and(|s| s.kind != "dir")
        {
            return Err(not_a_dir(&spec.path).into());
        }
        Ok::<_, UserError>(home)
    })?;
    let made_home = match home {
        Some(spec) => make_home(h, &spec)?,
        None => false,
    };
    if !changed && !made_home {
        h.note_unchanged();
    }
    Ok(changed || made_home)
}

host_fn! {
    /// `user::ensure(name, #{})`: create the user when missing with the defaults below.
    #[host(ns = "user", effects = [Write, Mkdir, Chown])]
    fn ensure(h: &mut Host, name: S) -> bool {
        Ok(super::ensure(h, &name, &UserOptions::default())?)
    }

    /// Create or update a local user by editing `/etc/passwd`, `/etc/shadow`, `/etc/group`,
    /// `/etc/gshadow` (no `useradd`; a plan shows each file's diff, later calls such as
    /// `fs::chown(p, name)` see the planned user, a check reports a deleted user or a changed
    /// attribute as drift). A new user gets `uid` (else the next free one of login.defs'
    /// `UID_MIN..UID_MAX`, or for `system: true` the highest free of `SYS_UID_MIN..SYS_UID_MAX`),
    /// `group` (a name or gid that exists; else a group of its own name, created with gid = uid
    /// when free), `home` (default `/home/<name>`), `shell` (default `/bin/bash`,
    /// `/usr/sbin/nologin` for `system`), `comment`, a locked shadow entry (`!`), membership of
    /// each of `groups` (a name or an array; each must exist), and, when `create_home` (default:
    /// not `system`), the home directory (mode `HOME_MODE`/`UMASK` of login.defs, else 0750) owned
    /// by the user, with a copy of `/etc/skel`. An existing user is changed only in the attributes
    /// given (files are not re-owned, homes not moved); `groups` only adds memberships. A uid taken
    /// by another user, a bad name (`[a-z_][a-z0-9_-]*[$]?`, at most 32) or a field with `:` or a
    /// line break is an error.
    #[overload(options = USER_KEYS)]
    fn ensure_with_opts(h: &mut Host, name: S, opts: Map) -> bool {
        let o = user_opts(&opts)?;
        Ok(super::ensure(h, &name, &o)?)
    }
}

fn not_a_dir(path: &Path) -> HostError {
    HostError::WrongKind {
        path: path.to_path_buf(),
        what: "exists and is not a directory (the user's home)",
    }
}

/// Create the home directory of `spec` when missing, owned by the user, with a copy of
/// `/etc/skel`.
fn make_home(h: &mut Host, spec: &HomeSpec) -> Result<bool> {
    match h.view_stat(&spec.path, true)? {
        Some(s) if s.kind == "dir" => return Ok(false),
        Some(_) => return Err(not_a_dir(&spec.path)),
        None => {}
    }
    // Missing parents are made 0755 by `Effect::Mkdir` itself (planned and applied alike);
    // only the home gets the home mode.
    h.submit(Effect::Mkdir {
        path: spec.path.clone(),
        mode: spec.mode,
    })?;
    h.submit(Effect::Chown {
        path: spec.path.clone(),
        uid: Some(spec.uid),
        gid: Some(spec.gid),
    })?;
    copy_skel(h, Path::new("/etc/skel"), &spec.path, spec, 0)?;
    Ok(true)
}

/// Copy the tree `src` into the new directory `dst` (depth bounded at 16).
fn copy_skel(h: &mut Host, src: &Path, dst: &Path, spec: &HomeSpec, depth: usize) -> Result<()> {
    use crate::host::root::EntryKind;
    if depth > 16 {
        return Ok(());
    }
    let entries = match h.view_list(src) {
        Ok(Some(e)) => e,
        Ok(None) | Err(HostError::WrongKind { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    for (name, kind) in entries {
        let (s, d) = (src.join(&name), dst.join(&name));
        let mode = h.view_stat(&s, false)?.map_or(0o644, |st| st.mode);
        match kind {
            EntryKind::File => {
                let content = h.view_read(&s)?.unwrap_or_default();
                h.submit(Effect::WriteFile {
                    path: d,
                    content: content.into(),
                    mode: Some(mode),
                    uid: Some(spec.uid),
                    gid: Some(spec.gid),
                })?;
            }
            EntryKind::Dir => {
                h.submit(Effect::Mkdir {
                    path: d.clone(),
                    mode,
                })?;
                h.submit(Effect::Chown {
                    path: d.clone(),
                    uid: Some(spec.uid),
                    gid: Some(spec.gid),
                })?;
                copy_skel(h, &s, &d, spec, depth + 1)?;
            }
            EntryKind::Symlink => {
                if let Some(target) = h.view_readlink(&s)? {
                    h.submit(Effect::Symlink { target, link: d })?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// `user::remove(name, #{remove_home})`: remove the user's passwd and shadow entries, take
/// it out of every group's member (and gshadow admin) list, and remove its own group (same
/// name, its primary gid) when no other user has that as primary group and it has no
/// members left, as userdel does with `USERGROUPS_ENAB yes`. With `remove_home: true` the
/// home directory is removed too, when it is a directory owned by the user and not `/`.
/// Unchanged (false) when the user does not exist. Modes as [`ensure`].
///
/// # Errors
/// A bad name; reads, locks and writes.
pub fn remove(h: &mut Host, name: &str, remove_home: bool) -> Result<bool> {
    check_name("user name", name)?;
    let (changed, removed) = userdb::transact(h, |_, db| {
        let Some((i, cur)) = db.user(name)? else {
            return Ok(None);
        };
        db.passwd.remove(i);
        Db::remove_entry(&mut db.shadow, name);
        Db::remove_member_everywhere(&mut db.group, name, &[3]);
        Db::remove_member_everywhere(&mut db.gshadow, name, &[2, 3]);
        if let Some((gi, gid)) = db.group_gid(name)?
            && gid == cur.gid
            && members(field(&db.group.fields(gi), 3)).is_empty()
            && db.primary_members(gid).is_empty()
        {
            db.group.remove(gi);
            Db::remove_entry(&mut db.gshadow, name);
        }
        Ok::<_, HostError>(Some(cur))
    })?;
    let mut home_removed = false;
    if remove_home
        && let Some(cur) = removed
        && cur.home.starts_with('/')
        && crate::host::root::normalize(Path::new(&cur.home)) != Path::new("/")
    {
        let path = PathBuf::from(&cur.home);
        if h.view_stat(&path, false)?
            .is_some_and(|s| s.kind == "dir" && s.uid == cur.uid)
        {
            h.submit(Effect::RemoveAll { path })?;
            home_removed = true;
        }
    }
    if !changed && !home_removed {
        h.note_unchanged();
    }
    Ok(changed || home_removed)
}

host_fn! {
    /// Remove the user's passwd and shadow entries and group memberships, and its own group when
    /// nothing else uses it (as userdel). False when there is no such user.
    #[host(ns = "user", effects = [Write, RemoveAll])]
    fn remove(h: &mut Host, name: S) -> bool {
        Ok(super::remove(h, &name, false)?)
    }

    /// As `remove(name)`; `#{remove_home: true}` also removes the home directory when it is a
    /// directory owned by the user.
    #[overload(options = USER_REMOVE_KEYS)]
    fn remove_with_opts(h: &mut Host, name: S, opts: Map) -> bool {
        check_keys(&opts, USER_REMOVE_KEYS)?;
        let rm = opt_bool(&opts, "remove_home", false)?;
        Ok(super::remove(h, &name, rm)?)
    }
}

/// `user::exists(name)`: the user has an `/etc/passwd` entry (as the session sees it).
///
/// # Errors
/// A bad name; reading the file.
pub fn exists(h: &Host, name: &str) -> Result<bool> {
    check_name("user name", name)?;
    Ok(Db::read(h)?.passwd.find(name).is_some())
}

host_fn! {
    /// True when `/etc/passwd` has the user (planned users included).
    #[host(ns = "user", effects = ReadsHost)]
    fn exists(h: &mut Host, name: S) -> bool {
        Ok(super::exists(h, &name)?)
    }
}

/// `user::info(name)`: the user's entry, primary group name and supplementary groups, `None`
/// when it does not exist.
///
/// # Errors
/// A bad name; reading the files; an entry whose uid or gid is not a number.
pub fn info(h: &Host, name: &str) -> Result<Option<UserInfo>> {
    check_name("user name", name)?;
    let db = Db::read(h)?;
    let Some((_, entry)) = db.user(name)? else {
        return Ok(None);
    };
    Ok(Some(UserInfo {
        group: db.gid_owner(entry.gid, ""),
        groups: db.groups_of(name),
        entry,
    }))
}

host_fn! {
    /// `#{name, uid, gid, group, groups, home, shell, comment}` (`group`: the primary group's name
    /// or `()`; `groups`: the groups listing the user as a member), or `()` when there is no such
    /// user.
    #[host(ns = "user", effects = ReadsHost)]
    fn info(h: &mut Host, name: S) -> rhai::Dynamic {
        Ok(match super::info(h, &name)? {
                Some(i) => Dynamic::from_map(info_map(i)),
                None => Dynamic::UNIT,
            })
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert::{self, check_keys, opt_bool, opt_string};
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Dynamic, ImmutableString as S, Map};
}
use prelude::*;

/// The option keys of `user::ensure`.
const USER_KEYS: &[&str] = &[
    "uid",
    "group",
    "groups",
    "home",
    "shell",
    "system",
    "create_home",
    "comment",
];

/// The option keys of `user::remove`.
const USER_REMOVE_KEYS: &[&str] = &["remove_home"];

/// An id option (`uid`, `gid`): an int in `0..=4294967294`.
pub(crate) fn opt_id(m: &Map, key: &str) -> Result<Option<u32>, String> {
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

fn info_map(i: UserInfo) -> Map {
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

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[
    (
        "user",
        "Users — `user::`",
        "Local accounts, managed by editing `/etc/passwd`, `/etc/shadow`, `/etc/group` and `/etc/gshadow` under the host root (each written whole and atomically, keeping its mode and owner; other lines are kept byte for byte, new entries appended; a missing shadow file stays missing). In apply mode the edit holds the shadow-utils lock (`fcntl` on `/etc/.pwd.lock`, as `lckpwdf(3)`) besides the path locks, and rereads the files under it, so `useradd` on the node or another step cannot interleave. `lastchg` of a new shadow entry is the day of `SOURCE_DATE_EPOCH` of the step environment when set. Password hashes of the shadow files are redacted (`***`) from plans and errors. Replaces `useradd`, `usermod`, `userdel` (docs/from-bash-to-rhai.md).",
    ),
    (
        "group",
        "Groups — `group::`",
        "Local groups, edited in `/etc/group` and `/etc/gshadow` as `user::` does. Replaces `groupadd`, `groupmod -g`, `groupdel`.",
    ),
];

host_fns!(exists, info, ensure, remove);
