//! Tests of `user::` and `group::` on throwaway roots shaped like a Debian node (shadow files
//! 0640 root:shadow(42)) and a RHEL node (shadow files 0000 root:root): exact lines in the
//! four account files, idempotence, plans that leave the root byte-identical and that later
//! reads (owner resolution) see, drift, id allocation, removal, errors, and concurrent
//! sessions.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::host::files::fs::{self, WriteOptions};
use crate::host::testutil::{TestHost, tree};
use crate::host::users::group::{self, GroupOptions};
use crate::host::users::user::{self, UserOptions};
use crate::host::{ExecMode, Host, HostOptions, root::HostRoot};

/// 2025-12-01T00:00:00Z: day 20423 since the epoch.
const EPOCH: &str = "1764547200";
const DAY: &str = "20423";

const DEB_PASSWD: &str = "\
root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
systemd-network:x:998:998:systemd Network Management:/:/usr/sbin/nologin
ubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/bash
";
const DEB_GROUP: &str = "\
root:x:0:
daemon:x:1:
sudo:x:27:ubuntu
shadow:x:42:
users:x:100:
systemd-network:x:998:
ubuntu:x:1000:
";
const HASH: &str = "$6$rounds=4096$saltsalt$HnB0x7YzQk1c9Wq2u0d2JmC4s6o8a0e2i4o6u8y0";
const DEB_GSHADOW: &str = "\
root:*::
daemon:*::
sudo:*::ubuntu
shadow:*::
users:*::
systemd-network:!::
ubuntu:!::
";
const DEB_LOGIN_DEFS: &str = "\
# /etc/login.defs - Configuration control definitions for the login package.
MAIL_DIR        /var/mail
PASS_MAX_DAYS\t99999
PASS_MIN_DAYS\t0
PASS_WARN_AGE\t7
UID_MIN\t\t\t 1000
UID_MAX\t\t\t60000
#SYS_UID_MIN\t\t  100
#SYS_UID_MAX\t\t  999
GID_MIN\t\t\t 1000
GID_MAX\t\t\t60000
UMASK\t\t022
HOME_MODE\t0750
USERGROUPS_ENAB yes
";

fn deb_shadow() -> String {
    format!(
        "root:*:19000:0:99999:7:::\n\
         daemon:*:19000:0:99999:7:::\n\
         systemd-network:!*:19000::::::\n\
         ubuntu:{HASH}:19500:0:99999:7:::\n"
    )
}

fn set_attrs(t: &TestHost, p: &str, mode: u32, gid: u32) {
    std::fs::set_permissions(t.p(p), std::fs::Permissions::from_mode(mode)).unwrap();
    std::os::unix::fs::chown(t.p(p), Some(0), Some(gid)).unwrap();
}

/// A Debian-family node: shadow files 0640 root:shadow(42), a skeleton with a file and a
/// directory.
fn debian() -> TestHost {
    let t = TestHost::new();
    t.file("/etc/passwd", DEB_PASSWD);
    t.file("/etc/group", DEB_GROUP);
    t.file("/etc/shadow", &deb_shadow());
    t.file("/etc/gshadow", DEB_GSHADOW);
    t.file("/etc/login.defs", DEB_LOGIN_DEFS);
    t.file("/etc/skel/.bashrc", "# ~/.bashrc\n");
    t.file("/etc/skel/.config/app.conf", "a=1\n");
    set_attrs(&t, "/etc/shadow", 0o640, 42);
    set_attrs(&t, "/etc/gshadow", 0o640, 42);
    std::fs::create_dir_all(t.p("/var/lib")).unwrap();
    std::fs::create_dir_all(t.p("/home")).unwrap();
    t
}

/// A RHEL-family node: shadow files 0000 root:root, login.defs with RHEL's system ranges.
fn rhel() -> TestHost {
    let t = TestHost::new();
    t.file(
        "/etc/passwd",
        "root:x:0:0:root:/root:/bin/bash\n\
         polkitd:x:998:996:User for polkitd:/:/sbin/nologin\n\
         ec2-user:x:1000:1000:Cloud User:/home/ec2-user:/bin/bash\n",
    );
    t.file(
        "/etc/group",
        "root:x:0:\nwheel:x:10:ec2-user\npolkitd:x:996:\nec2-user:x:1000:\n",
    );
    t.file(
        "/etc/shadow",
        "root:!!:19000:0:99999:7:::\npolkitd:!!:19000::::::\nec2-user:!!:19500:0:99999:7:::\n",
    );
    t.file(
        "/etc/gshadow",
        "root:::\nwheel:::ec2-user\npolkitd:!::\nec2-user:!::\n",
    );
    t.file(
        "/etc/login.defs",
        "PASS_MAX_DAYS\t99999\nPASS_MIN_DAYS\t0\nPASS_WARN_AGE\t7\nUID_MIN 1000\nUID_MAX 60000\n\
         SYS_UID_MIN 201\nSYS_UID_MAX 999\nGID_MIN 1000\nGID_MAX 60000\nSYS_GID_MIN 201\n\
         SYS_GID_MAX 999\nCREATE_HOME yes\nUMASK 077\nUSERGROUPS_ENAB yes\n",
    );
    set_attrs(&t, "/etc/shadow", 0o000, 0);
    set_attrs(&t, "/etc/gshadow", 0o000, 0);
    std::fs::create_dir_all(t.p("/home")).unwrap();
    std::fs::create_dir_all(t.p("/var/lib")).unwrap();
    t
}

fn host(t: &TestHost, mode: ExecMode) -> Host {
    t.host_with(mode, |o| {
        o.env.push(("SOURCE_DATE_EPOCH".into(), EPOCH.into()))
    })
}

fn snapshot(t: &TestHost) -> std::collections::BTreeMap<PathBuf, String> {
    tree(&t.root)
}

fn gpuops() -> UserOptions {
    UserOptions {
        system: true,
        home: Some("/var/lib/gpuops".into()),
        create_home: Some(true),
        comment: Some("GPU operations".into()),
        ..UserOptions::default()
    }
}

fn meta(t: &TestHost, p: &str) -> (u32, u32, u32) {
    let m = std::fs::symlink_metadata(t.p(p)).unwrap();
    (m.mode() & 0o7777, m.uid(), m.gid())
}

/// Plan, check, apply, apply again, check: a plan and a check leave the root identical and
/// report what the apply then does; the second apply and the last check find nothing.
fn all_modes(t: &TestHost, f: impl Fn(&mut Host) -> Result<bool, crate::host::api::CallError>) {
    let before = snapshot(t);
    let mut h = host(t, ExecMode::Plan);
    assert!(f(&mut h).unwrap());
    let plan = h.finish().unwrap();
    assert_eq!(snapshot(t), before, "a plan changed the root");
    let mut h = host(t, ExecMode::Check);
    assert!(f(&mut h).unwrap());
    let check = h.finish().unwrap();
    assert_eq!(snapshot(t), before, "a check changed the root");
    let summaries = |r: &crate::host::Report| -> Vec<String> {
        r.changes.iter().map(|c| c.summary.clone()).collect()
    };
    assert_eq!(summaries(&check), summaries(&plan));
    let mut h = host(t, ExecMode::Apply);
    assert!(f(&mut h).unwrap());
    let applied = h.finish().unwrap();
    assert_eq!(summaries(&applied), summaries(&plan));
    let after = snapshot(t);
    let mut h = host(t, ExecMode::Apply);
    assert!(!f(&mut h).unwrap(), "second apply changed something");
    assert!(h.finish().unwrap().changes.is_empty());
    assert_eq!(snapshot(t), after);
    let mut h = host(t, ExecMode::Check);
    assert!(!f(&mut h).unwrap());
    assert!(h.finish().unwrap().drift().is_empty(), "drift after apply");
}

#[test]
fn system_user_exact_lines_on_debian() {
    let t = debian();
    all_modes(&t, |h| Ok(user::ensure(h, "gpuops", &gpuops())?));
    assert_eq!(
        t.read("/etc/passwd"),
        format!("{DEB_PASSWD}gpuops:x:997:997:GPU operations:/var/lib/gpuops:/usr/sbin/nologin\n")
    );
    assert_eq!(t.read("/etc/group"), format!("{DEB_GROUP}gpuops:x:997:\n"));
    assert_eq!(
        t.read("/etc/shadow"),
        format!("{}gpuops:!:{DAY}::::::\n", deb_shadow())
    );
    assert_eq!(t.read("/etc/gshadow"), format!("{DEB_GSHADOW}gpuops:!::\n"));
    // the files keep their modes and owners
    assert_eq!(meta(&t, "/etc/shadow"), (0o640, 0, 42));
    assert_eq!(meta(&t, "/etc/gshadow"), (0o640, 0, 42));
    assert_eq!(meta(&t, "/etc/passwd").0, 0o644);
    // the home: HOME_MODE, owned by the user, with the skeleton
    assert_eq!(meta(&t, "/var/lib/gpuops"), (0o750, 997, 997));
    assert_eq!(t.read("/var/lib/gpuops/.bashrc"), "# ~/.bashrc\n");
    assert_eq!(meta(&t, "/var/lib/gpuops/.bashrc"), (0o644, 997, 997));
    assert_eq!(meta(&t, "/var/lib/gpuops/.config"), (0o755, 997, 997));
    assert_eq!(t.read("/var/lib/gpuops/.config/app.conf"), "a=1\n");
    // the lock file of lckpwdf(3), made for the edit, is not left behind
    assert!(!t.p("/etc/.pwd.lock").exists());
}

#[test]
fn normal_user_with_groups_on_debian() {
    let t = debian();
    let o = UserOptions {
        groups: vec!["sudo".into(), "users".into()],
        ..UserOptions::default()
    };
    all_modes(&t, |h| Ok(user::ensure(h, "alice", &o)?));
    assert_eq!(
        t.read("/etc/passwd"),
        format!("{DEB_PASSWD}alice:x:1001:1001::/home/alice:/bin/bash\n")
    );
    assert_eq!(
        t.read("/etc/group"),
        DEB_GROUP
            .replace("sudo:x:27:ubuntu", "sudo:x:27:ubuntu,alice")
            .replace("users:x:100:", "users:x:100:alice")
            + "alice:x:1001:\n"
    );
    assert_eq!(
        t.read("/etc/shadow"),
        format!("{}alice:!:{DAY}:0:99999:7:::\n", deb_shadow())
    );
    assert_eq!(
        t.read("/etc/gshadow"),
        DEB_GSHADOW
            .replace("sudo:*::ubuntu", "sudo:*::ubuntu,alice")
            .replace("users:*::", "users:*::alice")
            + "alice:!::\n"
    );
    assert_eq!(meta(&t, "/home/alice"), (0o750, 1001, 1001));
    let mut h = host(&t, ExecMode::Apply);
    let info = user::info(&h, "alice").unwrap().unwrap();
    assert_eq!(info.group.as_deref(), Some("alice"));
    assert_eq!(info.groups, vec!["sudo".to_string(), "users".to_string()]);
    assert_eq!(info.entry.home, "/home/alice");
    assert!(user::info(&h, "nobody").unwrap().is_none());
    assert!(user::exists(&h, "alice").unwrap());
    // a later call with fewer groups removes no membership
    assert!(!user::ensure(&mut h, "alice", &UserOptions::default()).unwrap());
}

#[test]
fn rhel_shadow_files_stay_0000_and_umask_gives_the_home_mode() {
    let t = rhel();
    let before_shadow = t.read("/etc/shadow");
    all_modes(&t, |h| {
        Ok(group::ensure(
            h,
            "gpuops",
            &GroupOptions {
                gid: None,
                system: true,
            },
        )? | user::ensure(
            h,
            "gpuops",
            &UserOptions {
                group: Some("gpuops".into()),
                ..gpuops()
            },
        )? | user::ensure(h, "bob", &UserOptions::default())?)
    });
    // SYS_GID range 201..999, lowest used 996: 995; the user's uid below polkitd's 998: 997
    assert_eq!(
        t.read("/etc/group"),
        "root:x:0:\nwheel:x:10:ec2-user\npolkitd:x:996:\nec2-user:x:1000:\ngpuops:x:995:\nbob:x:1001:\n"
    );
    assert_eq!(
        t.read("/etc/passwd").lines().skip(3).collect::<Vec<_>>(),
        vec![
            "gpuops:x:997:995:GPU operations:/var/lib/gpuops:/usr/sbin/nologin",
            "bob:x:1001:1001::/home/bob:/bin/bash",
        ]
    );
    assert_eq!(
        t.read("/etc/shadow"),
        format!("{before_shadow}gpuops:!:{DAY}::::::\nbob:!:{DAY}:0:99999:7:::\n")
    );
    assert_eq!(
        t.read("/etc/gshadow"),
        "root:::\nwheel:::ec2-user\npolkitd:!::\nec2-user:!::\ngpuops:!::\nbob:!::\n"
    );
    assert_eq!(meta(&t, "/etc/shadow"), (0o000, 0, 0));
    assert_eq!(meta(&t, "/etc/gshadow"), (0o000, 0, 0));
    // UMASK 077 without HOME_MODE
    assert_eq!(meta(&t, "/home/bob"), (0o700, 1001, 1001));
    assert_eq!(meta(&t, "/var/lib/gpuops"), (0o700, 997, 995));
}

/// A `useradd` through `sh()` is invisible to the plan, so a later
/// `fs::chown(p, "gpuops", "gpuops")` fails with "unknown user"; with `user::ensure` the
/// plan sees the planned user and group, and the root stays byte-identical.
#[test]
fn plan_resolves_the_planned_user_for_chown_and_write() {
    let t = debian();
    t.file("/srv/data/model.bin", "weights");
    let before = snapshot(&t);
    let mut h = host(&t, ExecMode::Plan);
    let e = fs::chown(&mut h, "/srv/data", Some("gpuops"), Some("gpuops")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown user \"gpuops\" (not in the host's /etc/passwd)"
    );
    assert!(
        group::ensure(
            &mut h,
            "gpuops",
            &GroupOptions {
                gid: None,
                system: true
            }
        )
        .unwrap()
    );
    assert!(group::exists(&h, "gpuops").unwrap());
    assert!(!user::exists(&h, "gpuops").unwrap());
    assert!(
        user::ensure(
            &mut h,
            "gpuops",
            &UserOptions {
                group: Some("gpuops".into()),
                ..gpuops()
            }
        )
        .unwrap()
    );
    assert!(user::exists(&h, "gpuops").unwrap());
    assert!(fs::chown(&mut h, "/srv/data", Some("gpuops"), Some("gpuops")).unwrap());
    assert!(
        fs::write(
            &mut h,
            "/etc/sudoers.d/gpuops",
            "gpuops ALL=(root) NOPASSWD: /usr/bin/nvidia-smi\n",
            &WriteOptions {
                mode: Some(0o440),
                owner: Some("gpuops".into()),
                group: Some("gpuops".into()),
            },
        )
        .unwrap()
    );
    // the planned owner is visible to later reads
    assert_eq!(fs::stat(&h, "/srv/data").unwrap().uid, 997);
    let red = h.redactor().clone();
    let rep = h.finish().unwrap();
    assert_eq!(snapshot(&t), before);
    let summaries: Vec<&str> = rep.change_summaries();
    assert_eq!(
        summaries,
        vec![
            "update /etc/group",
            "update /etc/gshadow",
            "update /etc/passwd",
            "update /etc/shadow",
            "create directory /var/lib/gpuops (mode 0750)",
            "chown /var/lib/gpuops 0:0 -> 997:997",
            "create /var/lib/gpuops/.bashrc (mode 0644) (owner 997:997)",
            "create directory /var/lib/gpuops/.config (mode 0755)",
            "chown /var/lib/gpuops/.config 0:0 -> 997:997",
            "create /var/lib/gpuops/.config/app.conf (mode 0644) (owner 997:997)",
            "chown /srv/data 0:0 -> 997:997",
            "create /etc/sudoers.d/gpuops (mode 0440) (owner 997:997)",
        ]
    );
    assert_eq!(
        rep.changes[2].diff.as_deref(),
        Some(
            "--- a/etc/passwd\n+++ b/etc/passwd\n@@ -2,3 +2,4 @@\n \
             daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n \
             systemd-network:x:998:998:systemd Network Management:/:/usr/sbin/nologin\n \
             ubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/bash\n\
             +gpuops:x:997:997:GPU operations:/var/lib/gpuops:/usr/sbin/nologin\n"
        )
    );
    // the shadow diff's context shows other accounts: their hashes are redacted
    let text = rep.render_text(&red);
    assert!(
        text.contains(" ubuntu:***:19500:0:99999:7:::\n+gpuops:!:20423::::::\n"),
        "{text}"
    );
    assert!(!text.contains(HASH), "{text}");
}

#[test]
fn check_reports_a_deleted_user_and_a_changed_shell_as_drift() {
    let t = debian();
    let mut h = host(&t, ExecMode::Apply);
    assert!(user::ensure(&mut h, "gpuops", &gpuops()).unwrap());
    h.finish().unwrap();
    let applied = snapshot(&t);

    // the shell changed by hand: drift in /etc/passwd only, with the diff
    let passwd = t.read("/etc/passwd");
    t.file(
        "/etc/passwd",
        &passwd.replace(
            "/var/lib/gpuops:/usr/sbin/nologin",
            "/var/lib/gpuops:/bin/sh",
        ),
    );
    let mut h = host(&t, ExecMode::Check);
    let o = UserOptions {
        shell: Some("/usr/sbin/nologin".into()),
        ..gpuops()
    };
    assert!(user::ensure(&mut h, "gpuops", &o).unwrap());
    let rep = h.finish().unwrap();
    let drift: Vec<(&str, &str)> = rep
        .drift()
        .iter()
        .map(|c| (c.kind.as_str(), c.target.as_str()))
        .collect();
    assert_eq!(drift, vec![("write", "/etc/passwd")]);
    assert!(
        rep.drift()[0].diff.as_deref().unwrap().ends_with(
            "-gpuops:x:997:997:GPU operations:/var/lib/gpuops:/bin/sh\n\
             +gpuops:x:997:997:GPU operations:/var/lib/gpuops:/usr/sbin/nologin\n"
        ),
        "{:?}",
        rep.drift()[0].diff
    );
    // without `shell` the changed shell is not ours to judge
    let mut h = host(&t, ExecMode::Check);
    assert!(!user::ensure(&mut h, "gpuops", &gpuops()).unwrap());
    assert!(h.finish().unwrap().drift().is_empty());
    // the apply puts it back exactly
    let mut h = host(&t, ExecMode::Apply);
    assert!(user::ensure(&mut h, "gpuops", &o).unwrap());
    h.finish().unwrap();
    assert_eq!(t.read("/etc/passwd"), passwd);

    // the user deleted by hand (userdel): drift in all four files
    t.file("/etc/passwd", DEB_PASSWD);
    t.file("/etc/group", DEB_GROUP);
    std::fs::write(t.p("/etc/shadow"), deb_shadow()).unwrap();
    std::fs::write(t.p("/etc/gshadow"), DEB_GSHADOW).unwrap();
    let mut h = host(&t, ExecMode::Check);
    assert!(user::ensure(&mut h, "gpuops", &gpuops()).unwrap());
    let rep = h.finish().unwrap();
    let targets: Vec<&str> = rep.drift().iter().map(|c| c.target.as_str()).collect();
    assert_eq!(
        targets,
        vec!["/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"]
    );
    // and the apply recreates the same entries (the home exists and is kept)
    let mut h = host(&t, ExecMode::Apply);
    assert!(user::ensure(&mut h, "gpuops", &gpuops()).unwrap());
    h.finish().unwrap();
    assert_eq!(snapshot(&t), applied);
}

#[test]
fn existing_users_change_only_what_is_asked() {
    let t = debian();
    let mut h = host(&t, ExecMode::Apply);
    // nothing asked: unchanged, and nothing written (no lock file either)
    assert!(!user::ensure(&mut h, "ubuntu", &UserOptions::default()).unwrap());
    assert!(!t.p("/etc/.pwd.lock").exists());
    let o = UserOptions {
        uid: Some(1500),
        group: Some("100".into()),
        shell: Some("/bin/zsh".into()),
        comment: Some("Ubuntu, Room 1".into()),
        groups: vec!["users".into()],
        ..UserOptions::default()
    };
    assert!(user::ensure(&mut h, "ubuntu", &o).unwrap());
    assert!(!user::ensure(&mut h, "ubuntu", &o).unwrap());
    h.finish().unwrap();
    assert_eq!(
        t.read("/etc/passwd"),
        DEB_PASSWD.replace(
            "ubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/bash",
            "ubuntu:x:1500:100:Ubuntu, Room 1:/home/ubuntu:/bin/zsh"
        )
    );
    assert_eq!(
        t.read("/etc/group"),
        DEB_GROUP.replace("users:x:100:", "users:x:100:ubuntu")
    );
    // the shadow entry (password, lastchg) is never touched for an existing user
    assert_eq!(t.read("/etc/shadow"), deb_shadow());
    // the home of an existing user is created only when asked
    assert!(!t.p("/home/ubuntu").exists());
    let mut h = host(&t, ExecMode::Apply);
    let home = UserOptions {
        create_home: Some(true),
        ..UserOptions::default()
    };
    assert!(user::ensure(&mut h, "ubuntu", &home).unwrap());
    assert!(!user::ensure(&mut h, "ubuntu", &home).unwrap());
    h.finish().unwrap();
    assert_eq!(meta(&t, "/home/ubuntu"), (0o750, 1500, 100));
}

#[test]
fn id_allocation_with_gaps_and_login_defs_overrides() {
    let t = debian();
    let uid_of = |h: &Host, n: &str| user::info(h, n).unwrap().unwrap().entry.uid;
    let gid_of = |h: &Host, n: &str| user::info(h, n).unwrap().unwrap().entry.gid;
    let no_home = |system| UserOptions {
        system,
        create_home: Some(false),
        ..UserOptions::default()
    };
    t.file(
        "/etc/passwd",
        &format!("{DEB_PASSWD}gap1:x:1003:1000::/:/bin/sh\nsys:x:990:0::/:/bin/sh\n"),
    );
    let mut h = host(&t, ExecMode::Plan);
    // normal: above the highest in use (1003), the gaps 1001, 1002 are not reused
    user::ensure(&mut h, "n1", &no_home(false)).unwrap();
    assert_eq!(uid_of(&h, "n1"), 1004);
    assert_eq!(gid_of(&h, "n1"), 1004);
    user::ensure(&mut h, "n2", &no_home(false)).unwrap();
    assert_eq!(uid_of(&h, "n2"), 1005);
    // system: below the lowest in use in 101..999 (990)
    user::ensure(&mut h, "s1", &no_home(true)).unwrap();
    assert_eq!(uid_of(&h, "s1"), 989);
    // gid = uid when free
    assert_eq!(gid_of(&h, "s1"), 989);
    h.finish().unwrap();

    // login.defs overrides; the system range's lowest is in use: from the top through gaps
    t.file(
        "/etc/login.defs",
        "UID_MIN 2000\nUID_MAX 2002\nSYS_UID_MIN 990\nSYS_UID_MAX 999\nGID_MIN 3000\nGID_MAX 3010\n",
    );
    t.file(
        "/etc/passwd",
        &format!(
            "{DEB_PASSWD}top:x:2002:1000::/:/bin/sh\nlow:x:2000:1000::/:/bin/sh\nsys:x:990:0::/:/bin/sh\n"
        ),
    );
    t.file("/etc/group", &format!("{DEB_GROUP}taken:x:2001:\n"));
    let mut h = host(&t, ExecMode::Plan);
    // 2002 (max) in use: the lowest gap, 2001; its gid 2001 is taken: from GID_MIN..GID_MAX
    user::ensure(&mut h, "n1", &no_home(false)).unwrap();
    assert_eq!(uid_of(&h, "n1"), 2001);
    assert_eq!(gid_of(&h, "n1"), 3000);
    // range full
    assert_eq!(
        user::ensure(&mut h, "n2", &no_home(false))
            .unwrap_err()
            .to_string(),
        "invalid uid: no free uid in 2000..=2002 (UID_MIN..UID_MAX in /etc/login.defs)"
    );
    // 990 (min) in use: from 999 down; 998 is the systemd-network user
    user::ensure(&mut h, "s1", &no_home(true)).unwrap();
    assert_eq!(uid_of(&h, "s1"), 999);
    user::ensure(&mut h, "s2", &no_home(true)).unwrap();
    assert_eq!(uid_of(&h, "s2"), 997);
    // groups: system gid from SYS_GID (defaults 101..GID_MIN-1), below the lowest in use
    group::ensure(
        &mut h,
        "g1",
        &GroupOptions {
            gid: None,
            system: true,
        },
    )
    .unwrap();
    group::ensure(&mut h, "g2", &GroupOptions::default()).unwrap();
    let db = crate::host::users::userdb::Db::read(&h).unwrap();
    assert_eq!(db.group_gid("g1").unwrap().unwrap().1, 996);
    assert_eq!(db.group_gid("g2").unwrap().unwrap().1, 3001);
}

#[test]
fn remove_users_and_groups() {
    let t = debian();
    let mut h = host(&t, ExecMode::Apply);
    let o = UserOptions {
        groups: vec!["sudo".into()],
        ..UserOptions::default()
    };
    assert!(user::ensure(&mut h, "alice", &o).unwrap());
    assert!(
        group::ensure(
            &mut h,
            "gpuops",
            &GroupOptions {
                gid: Some(4242),
                system: false
            }
        )
        .unwrap()
    );
    h.finish().unwrap();
    assert!(t.p("/home/alice/.bashrc").exists());

    // a user's primary group cannot be removed
    let mut h = host(&t, ExecMode::Apply);
    assert_eq!(
        group::remove(&mut h, "alice").unwrap_err().to_string(),
        "invalid group: cannot remove group \"alice\": it is the primary group of user \"alice\""
    );
    let before = snapshot(&t);
    let mut p = host(&t, ExecMode::Plan);
    assert!(user::remove(&mut p, "alice", true).unwrap());
    assert!(!user::exists(&p, "alice").unwrap());
    assert!(!group::exists(&p, "alice").unwrap());
    assert!(!fs::exists(&p, "/home/alice").unwrap());
    p.finish().unwrap();
    assert_eq!(snapshot(&t), before);

    assert!(user::remove(&mut h, "alice", true).unwrap());
    assert!(!user::remove(&mut h, "alice", true).unwrap());
    assert!(group::remove(&mut h, "gpuops").unwrap());
    assert!(!group::remove(&mut h, "gpuops").unwrap());
    h.finish().unwrap();
    // every file is back to what it was, byte for byte
    assert_eq!(t.read("/etc/passwd"), DEB_PASSWD);
    assert_eq!(t.read("/etc/group"), DEB_GROUP);
    assert_eq!(t.read("/etc/shadow"), deb_shadow());
    assert_eq!(t.read("/etc/gshadow"), DEB_GSHADOW);
    assert!(!t.p("/home/alice").exists());

    // a home not owned by the user is kept; a shared primary group is kept
    let mut h = host(&t, ExecMode::Apply);
    assert!(!user::remove(&mut h, "nobody", true).unwrap());
    std::fs::create_dir_all(t.p("/home/ubuntu")).unwrap();
    assert!(user::remove(&mut h, "ubuntu", true).unwrap());
    h.finish().unwrap();
    assert!(t.p("/home/ubuntu").is_dir());
    assert_eq!(
        t.read("/etc/group"),
        DEB_GROUP
            .replace("sudo:x:27:ubuntu", "sudo:x:27:")
            .replace("ubuntu:x:1000:\n", "")
    );
}

#[test]
fn errors_name_the_problem() {
    let t = debian();
    let mut h = host(&t, ExecMode::Apply);
    fn err<E: std::fmt::Display>(r: Result<bool, E>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(v) => panic!("expected an error, got Ok({v})"),
        }
    }
    let d = UserOptions::default();
    assert_eq!(
        err(user::ensure(&mut h, "GPU", &d)),
        "invalid user name: \"GPU\" must match [a-z_][a-z0-9_-]*[$]? and have at most 32 characters"
    );
    assert_eq!(
        err(user::ensure(
            &mut h,
            "x",
            &UserOptions {
                uid: Some(1000),
                ..UserOptions::default()
            }
        )),
        "invalid uid: 1000 is taken by user \"ubuntu\" (in /etc/passwd)"
    );
    assert_eq!(
        err(user::ensure(
            &mut h,
            "ubuntu",
            &UserOptions {
                uid: Some(0),
                ..UserOptions::default()
            }
        )),
        "invalid uid: 0 is taken by user \"root\" (in /etc/passwd)"
    );
    assert_eq!(
        err(group::ensure(
            &mut h,
            "x",
            &GroupOptions {
                gid: Some(27),
                system: false
            }
        )),
        "invalid gid: 27 is taken by group \"sudo\" (in /etc/group)"
    );
    assert_eq!(
        err(user::ensure(
            &mut h,
            "x",
            &UserOptions {
                groups: vec!["docker".into()],
                ..UserOptions::default()
            }
        )),
        "unknown group \"docker\" (not in the host's /etc/group)"
    );
    assert_eq!(
        err(user::ensure(
            &mut h,
            "x",
            &UserOptions {
                group: Some("4000".into()),
                ..UserOptions::default()
            }
        )),
        "unknown group \"4000\" (not in the host's /etc/group)"
    );
    assert_eq!(
        err(user::ensure(
            &mut h,
            "x",
            &UserOptions {
                comment: Some("a:b".into()),
                ..UserOptions::default()
            }
        )),
        "invalid comment: \"a:b\" must not contain ':' or a line break"
    );
    assert_eq!(
        err(user::ensure(
            &mut h,
            "x",
            &UserOptions {
                home: Some("var/lib/x".into()),
                ..UserOptions::default()
            }
        )),
        "invalid home: \"var/lib/x\" must be an absolute path"
    );
    t.file("/home/x", "a file");
    assert_eq!(
        err(user::ensure(&mut h, "x", &UserOptions::default())),
        "/home/x: exists and is not a directory (the user's home)"
    );
    h.finish().unwrap();
    // refused before anything was written
    assert_eq!(t.read("/etc/passwd"), DEB_PASSWD);
    assert_eq!(t.read("/etc/group"), DEB_GROUP);
}

#[test]
fn lines_not_owned_are_kept_byte_for_byte() {
    let t = debian();
    // a comment, a NIS line, a malformed line and no final newline
    let odd = "root:x:0:0:root:/root:/bin/bash\n# local accounts\n+@netgroup::::::\nbroken\nshort:x:900:900\nubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/bash";
    t.file("/etc/passwd", odd);
    let mut h = host(&t, ExecMode::Apply);
    // a short entry is left alone unless a field of it is asked for
    assert!(!user::ensure(&mut h, "short", &UserOptions::default()).unwrap());
    assert!(
        !user::ensure(
            &mut h,
            "short",
            &UserOptions {
                uid: Some(900),
                ..UserOptions::default()
            }
        )
        .unwrap()
    );
    assert_eq!(t.read("/etc/passwd"), odd);
    let sh = UserOptions {
        shell: Some("/bin/sh".into()),
        ..UserOptions::default()
    };
    assert!(user::ensure(&mut h, "short", &sh).unwrap());
    assert!(!user::ensure(&mut h, "short", &sh).unwrap());
    let odd = odd.replace("short:x:900:900", "short:x:900:900:::/bin/sh");
    assert_eq!(t.read("/etc/passwd"), odd);
    let o = UserOptions {
        create_home: Some(false),
        ..UserOptions::default()
    };
    assert!(user::ensure(&mut h, "carol", &o).unwrap());
    h.finish().unwrap();
    assert_eq!(
        t.read("/etc/passwd"),
        format!("{odd}\ncarol:x:1001:1001::/home/carol:/bin/bash\n")
    );
}

#[test]
fn without_shadow_files_they_stay_missing() {
    let t = TestHost::new();
    t.file("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n");
    let mut h = host(&t, ExecMode::Apply);
    let o = UserOptions {
        system: true,
        ..UserOptions::default()
    };
    assert!(user::ensure(&mut h, "svc", &o).unwrap());
    h.finish().unwrap();
    assert_eq!(
        t.read("/etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nsvc:!:999:999::/home/svc:/usr/sbin/nologin\n"
    );
    assert_eq!(t.read("/etc/group"), "svc:!:999:\n");
    assert_eq!(meta(&t, "/etc/group").0, 0o644);
    assert!(!t.p("/etc/shadow").exists());
    assert!(!t.p("/etc/gshadow").exists());
    assert!(!t.p("/home/svc").exists());
}

/// Two sessions adding different users to the same files at the same time lose neither
/// (the path locks serialize the read-compare-write of sessions in one process; the
/// fcntl lock of `/etc/.pwd.lock` that of other processes).
#[test]
fn concurrent_sessions_lose_no_user() {
    let t = debian();
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for prefix in ["a", "b"] {
            let (t, barrier) = (&t, &barrier);
            s.spawn(move || {
                let mut h = host(t, ExecMode::Apply);
                barrier.wait();
                for i in 0..8 {
                    let o = UserOptions {
                        groups: vec!["users".into()],
                        create_home: Some(false),
                        ..UserOptions::default()
                    };
                    assert!(user::ensure(&mut h, &format!("{prefix}{i}"), &o).unwrap());
                }
                h.finish().unwrap();
            });
        }
    });
    let passwd = t.read("/etc/passwd");
    let shadow = t.read("/etc/shadow");
    let gshadow = t.read("/etc/gshadow");
    let group = t.read("/etc/group");
    let mut uids = std::collections::BTreeSet::new();
    for prefix in ["a", "b"] {
        for i in 0..8 {
            let n = format!("{prefix}{i}");
            let line = passwd
                .lines()
                .find(|l| l.starts_with(&format!("{n}:")))
                .unwrap_or_else(|| panic!("{n} lost:\n{passwd}"));
            assert!(
                uids.insert(line.split(':').nth(2).unwrap().to_string()),
                "{passwd}"
            );
            assert!(
                shadow.contains(&format!("\n{n}:!:{DAY}:0:99999:7:::\n")),
                "{shadow}"
            );
            assert!(gshadow.contains(&format!("\n{n}:!::\n")), "{gshadow}");
            assert!(group.contains(&format!("\n{n}:x:")), "{group}");
        }
    }
    assert_eq!(passwd.lines().count(), 4 + 16);
    let users = group.lines().find(|l| l.starts_with("users:")).unwrap();
    assert_eq!(users.split(':').nth(3).unwrap().split(',').count(), 16);
}

/// The lock is the one lckpwdf(3) takes: another process sees a POSIX write lock on
/// `/etc/.pwd.lock` while a session holds it.
#[test]
fn pwd_lock_is_a_posix_write_lock_seen_by_other_processes() {
    let t = debian();
    let root = HostRoot::open(&t.root).unwrap();
    let path =
        std::ffi::CString::new(t.p("/etc/.pwd.lock").as_os_str().as_encoded_bytes()).unwrap();
    // exit code 1 when another process holds a write lock, 0 when free
    let probe = || -> i32 {
        // SAFETY: the child only calls async-signal-safe functions (open, fcntl, _exit).
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_RDWR);
                let mut fl: libc::flock = std::mem::zeroed();
                fl.l_type = libc::F_WRLCK as libc::c_short;
                fl.l_whence = libc::SEEK_SET as libc::c_short;
                let r = libc::fcntl(fd, libc::F_GETLK, &mut fl);
                let held = r == 0 && fl.l_type == libc::F_WRLCK as libc::c_short;
                libc::_exit(if fd < 0 { 2 } else { i32::from(held) })
            },
            nix::unistd::ForkResult::Parent { child } => {
                match nix::sys::wait::waitpid(child, None).unwrap() {
                    nix::sys::wait::WaitStatus::Exited(_, code) => code,
                    other => panic!("{other:?}"),
                }
            }
        }
    };
    let held = crate::host::root::test_doors::lock_pwd(&root).unwrap();
    assert_eq!(meta(&t, "/etc/.pwd.lock").0, 0o600);
    assert_eq!(probe(), 1);
    drop(held);
    // Made by the lock: unlinked with it (exit 2: nothing to open).
    assert_eq!(probe(), 2);
    // A lock file the host had is kept.
    std::fs::write(t.p("/etc/.pwd.lock"), "").unwrap();
    let held = crate::host::root::test_doors::lock_pwd(&root).unwrap();
    assert_eq!(probe(), 1);
    drop(held);
    assert_eq!(probe(), 0);
}

#[test]
fn user_info_sees_files_as_the_session_does() {
    let t = debian();
    let h = Host::new(
        HostRoot::open(&t.root).unwrap(),
        ExecMode::Apply,
        HostOptions::default(),
    );
    let i = user::info(&h, "ubuntu").unwrap().unwrap();
    assert_eq!(
        (
            i.entry.uid,
            i.entry.gid,
            i.group.as_deref(),
            i.groups.clone()
        ),
        (1000, 1000, Some("ubuntu"), vec!["sudo".to_string()])
    );
    assert_eq!(i.entry.comment, "Ubuntu");
    assert_eq!(i.entry.shell, "/bin/bash");
    assert!(Path::new(&i.entry.home).is_absolute());
}

/// `group::ensure` with another gid changes the group and its users' primary gid (as
/// groupmod does); a gid of another group is refused before anything is written.
#[test]
fn group_gid_change_follows_to_its_users() {
    let t = debian();
    let g = |gid| GroupOptions {
        gid: Some(gid),
        system: false,
    };
    let mut h = host(&t, ExecMode::Apply);
    assert_eq!(
        group::ensure(&mut h, "ubuntu", &g(998))
            .unwrap_err()
            .to_string(),
        "invalid gid: 998 is taken by group \"systemd-network\" (in /etc/group)"
    );
    assert!(!group::ensure(&mut h, "ubuntu", &g(1000)).unwrap());
    assert!(!group::ensure(&mut h, "ubuntu", &GroupOptions::default()).unwrap());
    assert!(!t.p("/etc/.pwd.lock").exists());
    assert!(group::ensure(&mut h, "ubuntu", &g(1500)).unwrap());
    assert!(!group::ensure(&mut h, "ubuntu", &g(1500)).unwrap());
    h.finish().unwrap();
    assert_eq!(
        t.read("/etc/group"),
        DEB_GROUP.replace("ubuntu:x:1000:", "ubuntu:x:1500:")
    );
    assert_eq!(
        t.read("/etc/passwd"),
        DEB_PASSWD.replace("ubuntu:x:1000:1000:", "ubuntu:x:1000:1500:")
    );
    assert_eq!(t.read("/etc/gshadow"), DEB_GSHADOW);
}

/// A home whose parents are missing: the parents are created 0755 (planned and applied
/// alike), only the home itself gets the home mode.
#[test]
fn missing_parents_of_a_home_are_0755() {
    let t = debian();
    let o = UserOptions {
        home: Some("/srv/gpu/ops".into()),
        ..UserOptions::default()
    };
    let mut p = host(&t, ExecMode::Plan);
    assert!(user::ensure(&mut p, "ops", &o).unwrap());
    let plan = p.finish().unwrap();
    let dirs: Vec<&str> = plan
        .changes
        .iter()
        .filter(|c| c.kind == "mkdir")
        .map(|c| c.summary.as_str())
        .collect();
    assert_eq!(
        dirs,
        vec![
            "create directory /srv/gpu/ops (mode 0750)",
            "create directory /srv/gpu/ops/.config (mode 0755)",
        ]
    );
    assert_eq!(
        plan.changes[4].mkdir,
        vec!["/srv".to_string(), "/srv/gpu".to_string()]
    );
    all_modes(&t, |h| Ok(user::ensure(h, "ops", &o)?));
    assert_eq!(meta(&t, "/srv"), (0o755, 0, 0));
    assert_eq!(meta(&t, "/srv/gpu"), (0o755, 0, 0));
    assert_eq!(meta(&t, "/srv/gpu/ops"), (0o750, 1001, 1001));
}

/// The exact effects `group::ensure` submits in a plan: one whole-file write of `/etc/group`
/// and one of `/etc/gshadow` with the new line appended; the planned group answers
/// `group::exists` and a second `ensure` (nothing more submitted).
#[test]
fn group_ensure_submits_the_account_file_writes_and_reads_the_planned_group() {
    let t = debian();
    let mut h = host(&t, ExecMode::Plan);
    h.record_effects();
    let o = GroupOptions {
        gid: Some(2000),
        system: false,
    };
    assert!(group::ensure(&mut h, "gpuops", &o).unwrap());
    assert!(group::exists(&h, "gpuops").unwrap());
    assert!(!group::ensure(&mut h, "gpuops", &o).unwrap());
    let writes: Vec<(String, String)> = h
        .recorded_effects()
        .iter()
        .map(|e| match e {
            crate::host::effects::effect::Effect::WriteFile { path, content, .. } => (
                path.display().to_string(),
                String::from_utf8_lossy(content).into_owned(),
            ),
            other => (format!("{other:?}"), String::new()),
        })
        .collect();
    assert_eq!(
        writes,
        [
            (
                "/etc/group".to_string(),
                format!("{DEB_GROUP}gpuops:x:2000:\n")
            ),
            (
                "/etc/gshadow".to_string(),
                format!("{DEB_GSHADOW}gpuops:!::\n")
            ),
        ]
    );
}
