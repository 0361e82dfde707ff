//! `user::` and `group::` (local accounts in the passwd and group files) over
//! [`crate::host::users::user`] and [`crate::host::users::group`]: each function's reference row and
//! binding, and their tests through Rhai.

use crate::host::api::host_fn;
use rhai::{Dynamic, ImmutableString as S, Map};

use crate::host::api::convert::{self, check_keys, opt_bool, opt_string};
use crate::host::api::docs::EffectKind::*;
use crate::host::api::docs::Effects::*;
use crate::host::api::docs::FnDoc;
use crate::host::api::docs::{NAME, OPTS};
use crate::host::users::group::{self, GroupOptions};
use crate::host::users::user::{self, UserOptions};

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
/// The option keys of `group::ensure`.
const GROUP_KEYS: &[&str] = &["gid", "system"];

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

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(super) const NAMESPACES: &[(&str, &str, &str)] = &[
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

/// The functions of this file's namespaces, in reference order: each one's reference row
/// and its registration.
pub(super) const FUNCTIONS: &[FnDoc] = &[
    host_fn!(
        "user",
        "exists",
        &[NAME],
        "bool",
        ReadsHost,
        "True when `/etc/passwd` has the user (planned users included).",
        |h, n: S| Ok(user::exists(h, &n)?)
    ),
    host_fn!(
        "user",
        "info",
        &[NAME],
        "?",
        ReadsHost,
        "`#{name, uid, gid, group, groups, home, shell, comment}` (`group`: the primary group's name or `()`; `groups`: the groups listing the user as a member), or `()` when there is no such user.",
        |h, n: S| Ok(match user::info(h, &n)? {
            Some(i) => Dynamic::from_map(info_map(i)),
            None => Dynamic::UNIT,
        })
    ),
    host_fn!(
        "user",
        "ensure",
        &[NAME],
        "bool",
        Submits(&[Write, Mkdir, Chown]),
        "`user::ensure(name, #{})`: create the user when missing with the defaults below.",
        |h, n: S| Ok(user::ensure(h, &n, &UserOptions::default())?)
    ),
    host_fn!(
        "user",
        "ensure",
        &[NAME, OPTS],
        "bool",
        Submits(&[Write, Mkdir, Chown]),
        "Create or update a local user by editing `/etc/passwd`, `/etc/shadow`, `/etc/group`, `/etc/gshadow` (no `useradd`; a plan shows each file's diff, later calls such as `fs::chown(p, name)` see the planned user, a check reports a deleted user or a changed attribute as drift). A new user gets `uid` (else the next free one of login.defs' `UID_MIN..UID_MAX`, or for `system: true` the highest free of `SYS_UID_MIN..SYS_UID_MAX`), `group` (a name or gid that exists; else a group of its own name, created with gid = uid when free), `home` (default `/home/<name>`), `shell` (default `/bin/bash`, `/usr/sbin/nologin` for `system`), `comment`, a locked shadow entry (`!`), membership of each of `groups` (a name or an array; each must exist), and, when `create_home` (default: not `system`), the home directory (mode `HOME_MODE`/`UMASK` of login.defs, else 0750) owned by the user, with a copy of `/etc/skel`. An existing user is changed only in the attributes given (files are not re-owned, homes not moved); `groups` only adds memberships. A uid taken by another user, a bad name (`[a-z_][a-z0-9_-]*[$]?`, at most 32) or a field with `:` or a line break is an error.",
        options = USER_KEYS,
        |h, n: S, m: Map| {
            let o = user_opts(&m)?;
            Ok(user::ensure(h, &n, &o)?)
        }
    ),
    host_fn!(
        "user",
        "remove",
        &[NAME],
        "bool",
        Submits(&[Write, RemoveAll]),
        "Remove the user's passwd and shadow entries and group memberships, and its own group when nothing else uses it (as userdel). False when there is no such user.",
        |h, n: S| Ok(user::remove(h, &n, false)?)
    ),
    host_fn!(
        "user",
        "remove",
        &[NAME, OPTS],
        "bool",
        Submits(&[Write, RemoveAll]),
        "As `remove(name)`; `#{remove_home: true}` also removes the home directory when it is a directory owned by the user.",
        options = USER_REMOVE_KEYS,
        |h, n: S, m: Map| {
            check_keys(&m, USER_REMOVE_KEYS)?;
            let rm = opt_bool(&m, "remove_home", false)?;
            Ok(user::remove(h, &n, rm)?)
        }
    ),
    host_fn!(
        "group",
        "exists",
        &[NAME],
        "bool",
        ReadsHost,
        "True when `/etc/group` has the group (planned groups included).",
        |h, n: S| Ok(group::exists(h, &n)?)
    ),
    host_fn!(
        "group",
        "ensure",
        &[NAME],
        "bool",
        Submits(&[Write]),
        "`group::ensure(name, #{})`: create the group when missing.",
        |h, n: S| Ok(group::ensure(h, &n, &GroupOptions::default())?)
    ),
    host_fn!(
        "group",
        "ensure",
        &[NAME, OPTS],
        "bool",
        Submits(&[Write]),
        "Create a group in `/etc/group` (and `/etc/gshadow` when present) with `gid` (else the next free one of login.defs' `GID_MIN..GID_MAX`, or for `system: true` the highest free of `SYS_GID_MIN..SYS_GID_MAX`); an existing group with another `gid` is changed to it, with its users' primary gid. A gid taken by another group is an error.",
        options = GROUP_KEYS,
        |h, n: S, m: Map| {
            let o = group_opts(&m)?;
            Ok(group::ensure(h, &n, &o)?)
        }
    ),
    host_fn!(
        "group",
        "remove",
        &[NAME],
        "bool",
        Submits(&[Write]),
        "Remove the group's `/etc/group` and `/etc/gshadow` entries; an error when it is a user's primary group. False when there is no such group.",
        |h, n: S| Ok(group::remove(h, &n)?)
    ),
];

#[cfg(test)]
pub(super) mod tests {
    use super::super::tests::*;
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;

    /// One call of each function of this file, for
    /// [`super::super::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(in super::super) const SAMPLES: &[&str] = &[
        r#"user::exists("ubuntu")"#,
        r#"user::info("ubuntu")"#,
        r#"user::ensure("alice")"#,
        r#"user::ensure("alice", #{uid: 2000})"#,
        r#"user::remove("ubuntu")"#,
        r#"user::remove("ubuntu", #{remove_home: true})"#,
        r#"group::exists("video")"#,
        r#"group::ensure("gpuops")"#,
        r#"group::ensure("gpuops", #{gid: 3000})"#,
        r#"group::remove("video")"#,
    ];

    /// `user::` and `group::` through Rhai: the issue's script (a system user, then `fs::chown`
    /// and `fs::write` with its name) in plan, check and apply mode; `user::info`; option and
    /// argument errors with the function name.
    #[test]
    fn users_and_groups_through_rhai() {
        let t = TestHost::new();
        t.file(
            "/etc/passwd",
            "root:x:0:0:root:/root:/bin/bash\nubuntu:x:1000:1000::/home/ubuntu:/bin/bash\n",
        );
        t.file("/etc/group", "root:x:0:\nvideo:x:44:\nubuntu:x:1000:\n");
        t.file("/srv/data/model.bin", "weights");
        std::fs::create_dir_all(t.p("/var/lib")).unwrap();
        let src = script(&[
            "group::ensure(\"gpuops\", #{system: true})",
            "user::ensure(\"gpuops\", #{system: true, group: \"gpuops\", groups: [\"video\"], home: \"/var/lib/gpuops\", create_home: true, comment: \"GPU ops\"})",
            "fs::chown(\"/srv/data\", \"gpuops\", \"gpuops\")",
            "user::ensure(\"alice\", #{uid: 2000, shell: \"/bin/sh\", create_home: false})",
        ]);
        let before = snapshot(&t);
        let report = run(&t, ExecMode::Plan, &src).ok().report;
        assert_eq!(snapshot(&t), before, "a plan changed the root");
        let check = run(&t, ExecMode::Check, &src).ok();
        assert_eq!(check.report.drift().len(), 8);
        assert_eq!(snapshot(&t), before, "a check changed the root");
        let apply = run(&t, ExecMode::Apply, &src).ok();
        assert_eq!(apply.stdout(), bools(true, 4));
        let again = run(&t, ExecMode::Apply, &src).ok();
        assert_eq!(again.stdout(), bools(false, 4));
        assert!(
            run(&t, ExecMode::Check, &src)
                .ok()
                .report
                .drift()
                .is_empty()
        );
        assert_eq!(
            report
                .changes
                .iter()
                .map(|c| c.summary.as_str())
                .collect::<Vec<_>>(),
            vec![
                "update /etc/group",
                "update /etc/passwd",
                "update /etc/group",
                "create directory /var/lib/gpuops (mode 0750)",
                "chown /var/lib/gpuops 0:0 -> 999:999",
                "chown /srv/data 0:0 -> 999:999",
                "update /etc/passwd",
                "update /etc/group",
            ]
        );
        assert_eq!(
            t.read("/etc/passwd"),
            "root:x:0:0:root:/root:/bin/bash\nubuntu:x:1000:1000::/home/ubuntu:/bin/bash\n\
             gpuops:!:999:999:GPU ops:/var/lib/gpuops:/usr/sbin/nologin\n\
             alice:!:2000:2000::/home/alice:/bin/sh\n"
        );
        assert_eq!(
            t.read("/etc/group"),
            "root:x:0:\nvideo:x:44:gpuops\nubuntu:x:1000:\ngpuops:!:999:\nalice:!:2000:\n"
        );
        let r = run(
            &t,
            ExecMode::Plan,
            "let i = user::info(\"gpuops\");\n\
             print(`${i.uid} ${i.gid} ${i.group} ${i.groups} ${i.home} ${i.shell} ${i.comment}`);\n\
             print(user::info(\"nobody\") == ());\n\
             print(user::exists(\"alice\"));\nprint(group::exists(\"gpuops\"));\n\
             print(user::remove(\"alice\"));\nprint(user::exists(\"alice\"));\n\
             print(group::remove(\"video\"));",
        )
        .ok();
        assert_eq!(
            r.stdout(),
            "999 999 gpuops [\"video\"] /var/lib/gpuops /usr/sbin/nologin GPU ops\ntrue\ntrue\ntrue\ntrue\nfalse\ntrue\n"
        );
        for (src, msg) in [
            (
                "user::ensure(\"gpuops\", #{system: \"yes\"})",
                "user::ensure: option system must be a bool, got string",
            ),
            (
                "user::ensure(\"gpuops\", #{uid: -1})",
                "user::ensure: option uid must be in 0..=4294967294, got -1",
            ),
            (
                "user::ensure(\"gpuops\", #{groups: [1]})",
                "user::ensure: option groups[0] must be a string, got i64",
            ),
            (
                "user::ensure(\"Gpu\")",
                "user::ensure: invalid user name: \"Gpu\" must match [a-z_][a-z0-9_-]*[$]? and have at most 32 characters",
            ),
            (
                "user::ensure(\"bob\", #{uid: 1000})",
                "user::ensure: invalid uid: 1000 is taken by user \"ubuntu\" (in /etc/passwd)",
            ),
            (
                "group::ensure(\"ops\", #{gid: 44})",
                "group::ensure: invalid gid: 44 is taken by group \"video\" (in /etc/group)",
            ),
            (
                "group::remove(\"gpuops\")",
                "group::remove: invalid group: cannot remove group \"gpuops\": it is the primary group of user \"gpuops\"",
            ),
            (
                "user::remove(\"gpuops\", #{home: true})",
                "user::remove: unknown option \"home\" (expected one of: remove_home)",
            ),
        ] {
            // Rhai puts a namespaced call at the function name, after `ns::`.
            let col = src.find("::").unwrap() + 3;
            let r = run(&t, ExecMode::Plan, src);
            assert_eq!(r.error(), format!("main.rhai:1:{col}: {msg}"), "{src}");
        }
    }
}
