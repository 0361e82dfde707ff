//! Bad input to `serve --plan-bus-user` (the bus user, docs/fleet.md "The bus user"): root
//! in any spelling, a user missing, malformed lines of the host root's `/etc/passwd`, and
//! an `/etc/passwd` that is a symlink out of the host root or a fifo. Each is a start error
//! naming what is wrong (nothing started), or, for the default (`nobody`), the fallback to
//! the query user that docs/fleet.md states; never another file's user, never root's. The
//! attacks of a plan's query on the bus connector and the filter are the socket broker's
//! unit tests (`process::sock_broker::bus_attack_tests`).

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use clap::Parser as _;
use skyhook::cli::serve::{ServeArgs, startup};

/// `serve` started in-process over `root` with `extra` options: the bus user's ids
/// (`None`: the query user's), or the start error. Bounded: a start that has not returned
/// within 20 s (a read of a fifo) is an error too.
fn bus_user_of(root: &Path, extra: &[&str]) -> Result<Option<(u32, u32)>, String> {
    let args: Vec<OsString> = ["serve", "--listen", "127.0.0.1:0", "--insecure-no-auth"]
        .iter()
        .chain(extra)
        .map(OsString::from)
        .chain(["--root".into(), root.as_os_str().to_owned()])
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = ServeArgs::try_parse_from(args)
            .map_err(|e| e.to_string())
            .and_then(|a| {
                startup(a)
                    .map(|s| s.cfg.plan.sandbox.bus_user.map(|u| (u.uid(), u.gid())))
                    .map_err(|e| e.to_string())
            });
        let _ = tx.send(r);
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| Err("serve's start did not return within 20 s".into()))
}

/// A host root whose `/etc/passwd` is `passwd`.
fn root_with(passwd: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("etc")).unwrap();
    std::fs::write(d.path().join("etc/passwd"), passwd).unwrap();
    d
}

/// Root in every spelling (`root`, `0`, `0:0`, `0:5`, `5:0`, a name whose entry is uid or
/// gid 0, `+0`, `00`), a missing name, malformed entries (ids no numbers, too few fields,
/// `u32::MAX`, an empty uid) and odd values are start errors naming the value (and the file
/// for a lookup); the first entry of a name wins, so a second, harmless `nobody` does not
/// hide a first one of root's.
#[test]
fn a_bus_user_of_root_missing_or_malformed_is_a_start_error() {
    let d = root_with(
        "root:x:0:0::/root:/bin/sh\n\
         toor:x:0:1000::/:/bin/false\n\
         wheel0:x:1000:0::/:/bin/false\n\
         words:x:abc:5::/:/bin/false\n\
         short:x:77\n\
         max:x:4294967295:5::/:/bin/false\n\
         empty:x::5::/:/bin/false\n\
         spaced:x: 77:5::/:/bin/false\n\
         nobody:x:0:0::/:/bin/false\n\
         nobody:x:65534:65534::/:/bin/false\n",
    );
    let passwd = d.path().join("etc/passwd").display().to_string();
    for (given, why) in [
        ("root", "user 0 group 0, root's".to_string()),
        ("0", "user 0 group 0, root's".into()),
        ("0:0", "user 0 group 0, root's".into()),
        ("0:5", "user 0 group 5, root's".into()),
        ("5:0", "user 5 group 0, root's".into()),
        ("toor", "user 0 group 1000, root's".into()),
        ("wheel0", "user 1000 group 0, root's".into()),
        ("nobody", "user 0 group 0, root's".into()),
        ("ghost", format!("no such user in {passwd}")),
        ("short", format!("no such user in {passwd}")),
        (
            "words",
            format!("{passwd} gives it ids that are no numbers"),
        ),
        (
            "empty",
            format!("{passwd} gives it ids that are no numbers"),
        ),
        (
            "spaced",
            format!("{passwd} gives it ids that are no numbers"),
        ),
        ("max", "--plan-bus-user max".into()),
        ("00", format!("no such user in {passwd}")),
        ("", "expected a user's name or uid".into()),
        ("a:b:c", "expected a user's name or uid".into()),
        ("../x", "expected a user's name or uid".into()),
    ] {
        let got = bus_user_of(d.path(), &["--plan-bus-user", given]);
        match got {
            Err(e) => assert!(e.contains(&why), "--plan-bus-user {given:?}: {e}"),
            Ok(u) => panic!("--plan-bus-user {given:?} was taken: {u:?}"),
        }
    }
}

/// `/etc/passwd` a symlink (absolute or relative) to a file outside the host root that
/// names `nobody` and `elsewhere`: resolved inside the root (missing there), so a name
/// given is not found there (naming the root's file) and the default falls back to the
/// query user; the outside file's ids are never taken. A fifo there is not read for ever:
/// an error or the fallback, within the bound.
#[test]
fn a_passwd_out_of_the_host_root_or_a_fifo_is_never_read() {
    let outside = tempfile::tempdir().unwrap();
    let theirs = outside.path().join("passwd");
    std::fs::write(
        &theirs,
        "nobody:x:4242:4242::/:/bin/false\nelsewhere:x:4343:4343::/:/bin/false\n",
    )
    .unwrap();
    let depth = theirs.components().count();
    let relative = format!(
        "{}{}",
        "../".repeat(depth + 2),
        theirs.display().to_string().trim_start_matches('/')
    );
    for target in [theirs.display().to_string(), relative] {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("etc")).unwrap();
        std::os::unix::fs::symlink(&target, d.path().join("etc/passwd")).unwrap();
        let e = bus_user_of(d.path(), &["--plan-bus-user", "elsewhere"]).unwrap_err();
        assert!(
            e.contains(&format!(
                "no such user in {}",
                d.path().join("etc/passwd").display()
            )),
            "{target}: {e}"
        );
        assert_eq!(
            bus_user_of(d.path(), &[]),
            Ok(None),
            "{target}: the default"
        );
        assert!(
            bus_user_of(d.path(), &["--plan-bus-user", "4242"]).is_err(),
            "{target}: uid 4242 taken from outside"
        );
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("etc")).unwrap();
    nix::unistd::mkfifo(
        &d.path().join("etc/passwd"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    // `auto`'s check of the user database reads it first; a fixed query user's start reads
    // it for the bus user alone.
    for query_user in ["auto", "4000:4000"] {
        let got = bus_user_of(
            d.path(),
            &["--plan-query-user", query_user, "--plan-bus-user", "nobody"],
        );
        assert!(
            got.as_ref()
                .is_err_and(|e| e.contains("not a regular file") && e.contains("passwd")),
            "a fifo /etc/passwd, --plan-query-user {query_user}: {got:?}"
        );
    }
}

/// The default bus user (`nobody`) when the host root's `/etc/passwd` has a `nobody` entry
/// that is root's or malformed: a start error saying so, naming the file (it was the
/// fallback to the query user, with a line on stderr saying the file had no `nobody`);
/// without any `nobody` entry (a short line is none), the documented fallback.
#[test]
fn a_default_nobody_of_root_or_malformed_is_a_start_error() {
    for (passwd, why) in [
        ("nobody:x:0:0::/:/bin/false\n", "user 0 group 0, root's"),
        (
            "nobody:x:65534:0::/:/bin/false\n",
            "user 65534 group 0, root's",
        ),
        (
            "nobody:x:nobody:65534::/:/bin/false\n",
            "gives it ids that are no numbers",
        ),
    ] {
        let d = root_with(passwd);
        let got = bus_user_of(d.path(), &[]);
        assert!(
            got.as_ref().is_err_and(|e| e.contains(why)
                && e.contains(&d.path().join("etc/passwd").display().to_string())
                || e.contains(why) && e.contains("--plan-bus-user nobody")),
            "{passwd:?}: {got:?}"
        );
    }
    let d = root_with("nobody:x:65534\n");
    assert_eq!(
        bus_user_of(d.path(), &[]),
        Ok(None),
        "a short line names nobody"
    );
}
