//! Attacks on the bus user (`serve --plan-bus-user`): a hostile plan query against the
//! socket broker's bus connector and the read-only filter's claim rewrite and bounds. Each
//! test asserts the guarantee holds (docs/fleet.md "The bus user"). The queries are
//! `python3` scripts run in a plan's sandbox (an `auto` query user, the bus user `nobody`)
//! on this machine's root; the bus is a test's own listener acting as one, or a private
//! reference `dbus-daemon`.

use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::tests::{
    accept_within, allowing, assert_connector_gone, dir, listening_in, peer, proc_status,
    sandboxed_both, server_pid, test_bus,
};
use crate::process::dbus_filter::Encoder;
use crate::process::sandbox::{Limits, QueryUsers};

/// The query scripts' shared part: `connect_to(path)`, `call(serial, member, iface, dest,
/// path, body_sig, body)` (a little-endian `METHOD_CALL`), `hello(serial)`, `read_msg(s)`
/// (one whole message: its type, reply serial and body), `line(s)` (one SASL reply line),
/// `whoami(s)` (after `OK`: `BEGIN`, `Hello`, and the pid the bus sees as the peer).
const PRELUDE: &str = r#"
import errno, os, socket, struct, sys
def pad(b, n):
    return b + b"\0" * (-len(b) % n)
def field_s(fields, code, sig, val):
    fields = pad(fields, 8) + bytes([code, 1]) + sig.encode() + b"\0"
    v = val.encode()
    if sig == "g":
        return fields + bytes([len(v)]) + v + b"\0"
    return pad(fields, 4) + struct.pack("<I", len(v)) + v + b"\0"
def call(serial, member, iface="org.freedesktop.DBus", dest="org.freedesktop.DBus",
         path="/org/freedesktop/DBus", sig="", body=b""):
    f = b""
    f = field_s(f, 1, "o", path)
    f = field_s(f, 2, "s", iface)
    f = field_s(f, 3, "s", member)
    f = field_s(f, 6, "s", dest)
    if sig:
        f = field_s(f, 8, "g", sig)
    head = b"l\x01\x00\x01" + struct.pack("<III", len(body), serial, len(f)) + f
    return pad(head, 8) + body
def hello(serial=1):
    return call(serial, "Hello")
def string_body(v):
    v = v.encode()
    return struct.pack("<I", len(v)) + v + b"\0"
def exact(s, n):
    b = b""
    while len(b) < n:
        got = s.recv(n - len(b))
        if not got:
            raise EOFError("closed")
        b += got
    return b
def read_msg(s):
    fixed = exact(s, 16)
    body_len, serial, flen = struct.unpack("<III", fixed[4:16])
    rest = exact(s, (-(16 + flen) % 8) + flen + body_len)
    fields = rest[:flen]
    body = rest[len(rest) - body_len:]
    reply_serial = None
    i = 0
    while i < len(fields):
        i += -i % 8
        code = fields[i]; slen = fields[i + 1]; sig = fields[i + 2:i + 2 + slen]; i += 3 + slen
        if sig in (b"s", b"o"):
            i += -(i + 16) % 4
            (n,) = struct.unpack("<I", fields[i:i + 4]); i += 4 + n + 1
        elif sig == b"g":
            n = fields[i]; i += 1 + n + 1
        elif sig == b"u":
            i += -(i + 16) % 4
            (v,) = struct.unpack("<I", fields[i:i + 4]); i += 4
            if code == 5:
                reply_serial = v
        else:
            raise ValueError("field type %r" % sig)
    return fixed[1], reply_serial, body
def line(s):
    b = b""
    while not b.endswith(b"\r\n"):
        got = s.recv(1)
        if not got:
            return "closed"
        b += got
    return b[:-2].decode()
def connect_to(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s
def own_hex():
    return str(os.getuid()).encode().hex()
def whoami(s):
    s.sendall(b"BEGIN\r\n" + hello(1))
    while True:
        t, rs, body = read_msg(s)
        if rs == 1:
            break
    (n,) = struct.unpack("<I", body[:4])
    s.sendall(call(2, "GetConnectionUnixProcessID", sig="s", body=string_body(body[4:4 + n].decode())))
    while True:
        t, rs, body = read_msg(s)
        if rs == 2:
            return struct.unpack("<I", body[:4])[0]
"#;

fn python() -> bool {
    Path::new("/usr/bin/python3").exists()
}

/// `script` (after [`PRELUDE`]) run by `python3` in a plan's sandbox of `limits`, with
/// `args`: its standard output and error; the plan is over when this returns.
fn query(limits: Limits, script: &str, args: &[&str]) -> (String, String) {
    let code = format!("{PRELUDE}\n{script}");
    let mut all = vec!["-c", code.as_str()];
    all.extend_from_slice(args);
    sandboxed_both(limits, "/usr/bin/python3", &all)
}

/// A plan of an `auto` query user (slot `slot`) whose only allowed socket is `sock`; its bus
/// user is the default, `nobody`.
fn auto_plan(slot: usize, sock: &Path) -> Limits {
    Limits {
        query_user: QueryUsers::Auto.for_slot(slot),
        ..allowing(&[sock])
    }
}

/// `script` run as [`query`] in a plan of `auto`'s slot `slot` whose only allowed socket
/// is a real `dbus-daemon` system bus of the test's ([`system_bus`]), with the bus's path as
/// its argument; the bus is stopped when the plan is over. `None` when the test cannot run
/// here (not root, no `python3` or no `dbus-daemon`: skipped as those say).
fn query_at_a_bus(slot: usize, script: &str) -> Option<(String, String)> {
    if !python() {
        return None;
    }
    let (_d, bus) = test_bus()?;
    Some(query_at(slot, &bus.sock, script))
}

/// `script` run as [`query`] in a plan of `auto`'s slot `slot` whose only allowed socket is
/// `sock`, with `sock`'s path as its argument.
fn query_at(slot: usize, sock: &Path, script: &str) -> (String, String) {
    query(auto_plan(slot, sock), script, &[sock.to_str().unwrap()])
}

/// Where the test can run (root, `python3`): the test's listener acting as a system bus
/// (a socket named `system_bus_socket` in a fresh directory); None (the test returns)
/// elsewhere.
fn fake_bus() -> Option<(tempfile::TempDir, PathBuf, std::os::unix::net::UnixListener)> {
    if !python() {
        return None;
    }
    listening_in(false, "system_bus_socket")
}

/// The bus's `OK` to a client's `AUTH`, with a server GUID.
const BUS_OK: &[u8] = b"OK 0123456789abcdef0123456789abcdef\r\n";

/// Acts as the bus on `c` (blocking, reads time out after 20 s) until the client's first
/// SASL line: the NUL, then that line.
fn bus_reads_claim(c: &mut UnixStream) -> String {
    c.set_nonblocking(false).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut nul = [1u8; 1];
    c.read_exact(&mut nul).unwrap();
    assert_eq!(nul, [0]);
    bus_line(c)
}

/// One `\r\n` line from the bus's side of a connection.
fn bus_line(c: &mut UnixStream) -> String {
    let mut b = Vec::new();
    let mut one = [0u8; 1];
    while !b.ends_with(b"\r\n") {
        assert_eq!(
            c.read(&mut one).unwrap(),
            1,
            "the filter closed in SASL: {b:?}"
        );
        b.push(one[0]);
    }
    String::from_utf8_lossy(&b[..b.len() - 2]).into_owned()
}

/// Acts as the bus on `c` up to the client's `Hello`, as `dbus-daemon` would: the NUL,
/// `OK` to an `AUTH`, then after `BEGIN` a return of the `Hello`. The SASL lines it got.
fn bus_side_until_hello(c: &mut UnixStream) -> Vec<String> {
    let mut lines = vec![bus_reads_claim(c)];
    while lines.last().unwrap() != "BEGIN" {
        c.write_all(BUS_OK).unwrap();
        lines.push(bus_line(c));
    }
    let mut fixed = [0u8; 16];
    c.read_exact(&mut fixed).unwrap();
    let word = |at: usize| u32::from_le_bytes(fixed[at..at + 4].try_into().unwrap()) as usize;
    let (body, serial, fields) = (word(4), word(8), word(12));
    let mut rest = vec![0u8; (16 + fields).div_ceil(8) * 8 - 16 + body];
    c.read_exact(&mut rest).unwrap();
    let mut reply = Encoder::new(false, 2, 0, 1);
    reply.field_u32(5, serial as u32);
    reply.field_str(8, 'g', "s");
    let mut b = Encoder::body(false);
    b.string(":1.1");
    c.write_all(&reply.finish(&b.buf)).unwrap();
    lines
}

/// Whether `c` reads its end (EOF) within `ms` milliseconds.
fn ends_within(c: &mut UnixStream, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd: c.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) on one pollfd of ours.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    if n != 1 {
        return false;
    }
    c.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

/// The query's flood: after `Hello`, calls the filter refuses (`StartServiceByName`), sent
/// without reading one `AccessDenied` until its socket would block (the filter's thread is
/// then stuck writing to it, holding the connection), then its own end sent over itself
/// (`SCM_RIGHTS`) behind what the filter will never read: its end lives on, in flight, after
/// the query has exited.
const IN_FLIGHT: &str = r#"
s = connect_to(sys.argv[1])
s.sendall(b"\0AUTH EXTERNAL " + own_hex().encode() + b"\r\n")
assert line(s).startswith("OK"), "auth"
s.sendall(b"BEGIN\r\n" + hello())
s.setblocking(False)
pending, serial, sent = b"", 2, 0
for _ in range(200000):
    if not pending:
        pending = b"".join(call(serial + i, "StartServiceByName", sig="su",
                                body=string_body("org.example.Evil") + b"\0\0\0\0")
                           for i in range(100))
        serial += 100
    try:
        n = s.send(pending)
    except BlockingIOError:
        break
    sent += n
    pending = pending[n:]
else:
    print("never blocked"); sys.exit(1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
s.sendmsg([pending or b"l"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", s.fileno()))])
print("in flight after %d bytes" % sent)
"#;

/// A query whose socket's own end is in flight on itself, behind a flood of refused calls
/// it never reads the answers of, exits: its plan's end still ends its bus connection (the
/// bus sees it close), so the bus user's place comes back and no bus connection of
/// `nobody` is held for ever. Four such plans would otherwise hold the process's 32 places
/// for good (every later plan's bus `connect` refused).
#[test]
fn a_query_keeping_its_end_in_flight_holds_no_bus_connection_past_its_plan() {
    let Some((_d, sock, l)) = fake_bus() else {
        return;
    };
    let bus = std::thread::spawn(move || {
        let mut c = accept_within(&l, 20_000).expect("the query's bus connection");
        let lines = bus_side_until_hello(&mut c);
        (c, lines)
    });
    let (out, err) = query_at(11, &sock, IN_FLIGHT);
    let (mut c, lines) = bus.join().unwrap();
    assert!(out.starts_with("in flight"), "{out} {err}");
    assert_eq!(
        lines,
        ["AUTH EXTERNAL 3635353334", "BEGIN"],
        "the claim reaches the bus as nobody's"
    );
    assert_eq!(peer(&c).uid, 65534, "the bus's peer");
    assert!(
        ends_within(&mut c, 10_000),
        "the bus connection of a plan that ended was still open 10 s later ({out})"
    );
}

/// The SASL variants: each connects, sends the NUL, its lines and `BEGIN` at once (`B` the
/// bus user's claim, `U` the query's own), reads one reply a line, then (if the filter let
/// it through) `Hello` and asks the bus who it is: `NAME:uid=N,pid=P` or `NAME:closed`.
const SASL_VARIANTS: &str = r#"
U, B = own_hex(), str(65534).encode().hex()
variants = [
    ("pipelined", ["AUTH EXTERNAL " + U, "NEGOTIATE_UNIX_FD"]),
    ("data", ["AUTH EXTERNAL", "DATA " + U]),
    ("bus_uid", ["AUTH EXTERNAL " + B]),
    ("lower_first", ["auth external " + U, "AUTH EXTERNAL " + U]),
    ("empty_data", ["AUTH EXTERNAL", "DATA"]),
    ("root", ["AUTH EXTERNAL 30"]),
    ("leading_zero", ["AUTH EXTERNAL 30" + U]),
    ("upper_hex_root", ["AUTH EXTERNAL 3" + "0".upper()]),
    ("odd_hex", ["AUTH EXTERNAL " + U + "3"]),
    ("extra_word", ["AUTH EXTERNAL " + U + " " + U]),
    ("two_spaces", ["AUTH  EXTERNAL " + U]),
    ("cancel_reauth_root", ["AUTH EXTERNAL " + U, "CANCEL", "AUTH EXTERNAL 30"]),
    ("auth_after_ok", ["AUTH EXTERNAL " + U, "AUTH EXTERNAL 30"]),
    ("data_after_ok", ["AUTH EXTERNAL " + U, "DATA 30"]),
    ("cancel_then_data", ["AUTH EXTERNAL", "CANCEL", "DATA " + U]),
    ("anonymous", ["AUTH ANONYMOUS"]),
    ("long_line", ["AUTH EXTERNAL " + "3" * 5000]),
    ("begin_first", []),
]
for name, lines in variants:
    s = connect_to(sys.argv[1])
    try:
        s.sendall(b"\0" + b"".join(l.encode() + b"\r\n" for l in lines + ["BEGIN"]))
        replies = [line(s) for _ in lines]
        s.sendall(hello())
        while True:
            t, rs, body = read_msg(s)
            if rs == 1:
                break
        (n,) = struct.unpack("<I", body[:4])
        me = body[4:4 + n].decode()
        s.sendall(call(2, "GetConnectionUnixUser", sig="s", body=string_body(me))
                  + call(3, "GetConnectionUnixProcessID", sig="s", body=string_body(me)))
        got = {}
        while len(got) < 2:
            t, rs, body = read_msg(s)
            if rs in (2, 3):
                got[rs] = struct.unpack("<I", body[:4])[0] if t == 2 else "error"
        print("%s:uid=%s,pid=%s" % (name, got[2], got[3]))
    except (EOFError, OSError):
        print("%s:closed" % name)
    s.close()
"#;

/// Whatever a query says in SASL (pipelined lines, `NEGOTIATE_UNIX_FD`, a bare `AUTH
/// EXTERNAL` and `DATA`, a claim of root, of the bus user, with a leading zero, odd hex,
/// extra words, `CANCEL` and a new `AUTH` after the rewrite, an `AUTH` or `DATA` after
/// `OK`, `ANONYMOUS`, a 5000-byte line, `BEGIN` first), the reference `dbus-daemon` either
/// refuses it or takes it for the bus user (`GetConnectionUnixUser` 65534), its peer pid
/// the bus connector's (not the server's); the four a client sends are taken.
#[test]
fn every_sasl_variant_is_the_bus_user_or_refused_at_the_reference_dbus_daemon() {
    let Some((out, err)) = query_at_a_bus(12, SASL_VARIANTS) else {
        return;
    };
    eprintln!("{out}");
    let results: std::collections::BTreeMap<&str, &str> =
        out.lines().filter_map(|l| l.split_once(':')).collect();
    assert_eq!(results.len(), 18, "{out} {err}");
    let server = server_pid();
    for (name, got) in &results {
        if *got == "closed" {
            continue;
        }
        let (uid, pid) = got
            .strip_prefix("uid=")
            .and_then(|g| g.split_once(",pid="))
            .unwrap_or_else(|| panic!("{name}: {got}"));
        assert_eq!(uid, "65534", "{name}: the bus took the query for uid {uid}");
        assert_ne!(
            pid,
            server.to_string(),
            "{name}: the bus's peer is the server"
        );
    }
    for taken in ["pipelined", "data", "bus_uid", "lower_first"] {
        assert!(
            results[taken].starts_with("uid=65534,pid="),
            "{taken}: {}",
            results[taken]
        );
    }
    for refused in [
        "root",
        "leading_zero",
        "upper_hex_root",
        "cancel_reauth_root",
        "long_line",
        "begin_first",
    ] {
        assert_eq!(results[refused], "closed", "{refused}");
    }
}

/// The bound states: connections held in every stage a query can stall in (connected
/// with nothing sent, the NUL alone, half an `AUTH` line, an `AUTH` line without its `\n`,
/// authenticated without `BEGIN`, `BEGIN` without `Hello`, after `Hello`, idle twice) fill
/// the plan's 8; the 9th `connect` is refused. A half-closed one is closed by the filter
/// and its place comes back. Then 150 short connections (each authenticated, `Hello`
/// answered, closed) are all taken, one at a time, and 8 held again after them: no place
/// leaks. `ok`/`refused` counts printed; a refused `connect` right after a close is retried
/// (the filter's thread gives the place back just after the client sees its end), at
/// most 50 times.
const BOUND: &str = r#"
path = sys.argv[1]
U = own_hex()
def try_connect():
    for attempt in range(50):
        try:
            return connect_to(path), attempt
        except ConnectionRefusedError:
            os.sched_yield()
    return None, 50
def authed(s):
    s.sendall(b"\0AUTH EXTERNAL " + U.encode() + b"\r\n")
    assert line(s).startswith("OK")
def greeted(s):
    authed(s)
    s.sendall(b"BEGIN\r\n" + hello())
    while read_msg(s)[1] != 1:
        pass
def to_end(s):
    s.shutdown(socket.SHUT_WR)
    while s.recv(4096):
        pass
    s.close()
stalls = [
    lambda s: None,
    lambda s: s.sendall(b"\0"),
    lambda s: s.sendall(b"\0AUTH EXTE"),
    lambda s: s.sendall(b"\0AUTH EXTERNAL " + U.encode() + b"\r"),
    authed,
    lambda s: (authed(s), s.sendall(b"BEGIN\r\n")),
    greeted,
    greeted,
]
held = []
for stall in stalls:
    s = connect_to(path)
    stall(s)
    held.append(s)
try:
    connect_to(path); print("ninth=ok")
except OSError as e:
    print("ninth=%s" % errno.errorcode[e.errno])
to_end(held.pop(0))
s, tries = try_connect()
print("after_half_close=%s" % ("ok" if s else "refused"))
held.append(s)
for s in held:
    to_end(s)
ok = refused = retries = 0
for i in range(150):
    s, tries = try_connect()
    retries += tries
    if s is None:
        refused += 1
        continue
    greeted(s)
    to_end(s)
    ok += 1
print("short ok=%d refused=%d retries=%d" % (ok, refused, retries))
held = []
for i in range(8):
    s, tries = try_connect()
    if s:
        if i == 0:
            authed(s)
            print("pid=%d" % whoami(s))
        else:
            greeted(s)
        held.append(s)
try:
    connect_to(path); print("again ninth=ok")
except OSError as e:
    print("again ninth=%s" % errno.errorcode[e.errno])
print("held=%d" % len(held))
"#;

/// See [`BOUND`]: the plan's bound holds in every stage a connection can stall in, a
/// closed one's place comes back, many short ones leak none; and no process of the bus
/// user started for the plan outlives it (the pid the bus saw is gone).
#[test]
fn stalled_connections_fill_the_plans_bound_and_closed_ones_give_their_place_back() {
    let Some((out, err)) = query_at_a_bus(13, BOUND) else {
        return;
    };
    eprintln!("{out}");
    let (out, pid) = connector_pid(&out);
    assert_eq!(
        out,
        "ninth=ECONNREFUSED\nafter_half_close=ok\nshort ok=150 refused=0 retries=0\n\
         again ninth=ECONNREFUSED\nheld=8\n"
            .replace("retries=0", &format!("retries={}", retries(&out))),
        "{err}"
    );
    assert_connector_gone(pid, "bus connector");
}

/// The `retries=N` the [`BOUND`] query printed (a count, bounded by the script).
fn retries(out: &str) -> String {
    out.split_whitespace()
        .find_map(|w| w.strip_prefix("retries="))
        .unwrap_or("?")
        .to_string()
}

/// `out` without its `pid=N` line, and N (the bus connector's pid, as the bus saw it).
fn connector_pid(out: &str) -> (String, i32) {
    let pid = out
        .lines()
        .find_map(|l| l.strip_prefix("pid="))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid= line: {out}"));
    let rest: String = out
        .lines()
        .filter(|l| !l.starts_with("pid="))
        .map(|l| format!("{l}\n"))
        .collect();
    (rest, pid)
}

/// The query: a first bus connection waits in SASL (the test, having its claim, kills the
/// bus connector meanwhile, then answers it); then a second and a third `connect`.
const AFTER_KILL: &str = r#"
s1 = connect_to(sys.argv[1])
s1.sendall(b"\0AUTH EXTERNAL " + own_hex().encode() + b"\r\n")
print("first=%s" % line(s1).split(" ")[0])
for name in ("second", "third"):
    try:
        s = connect_to(sys.argv[1]); print("%s=ok" % name)
    except OSError as e:
        print("%s=%s" % (name, errno.errorcode[e.errno]))
"#;

/// The bus connector killed mid-plan (a host process of the bus user's uid can): the
/// connection it made lives on, the plan's next bus `connect` fails, the one after is made
/// by a new connector of the bus user; the broker is not wedged and the plan ends.
#[test]
fn a_killed_bus_connector_fails_one_connect_and_is_forked_anew() {
    let Some((_d, sock, l)) = fake_bus() else {
        return;
    };
    let bus = std::thread::spawn(move || {
        let mut c1 = accept_within(&l, 20_000).expect("the first connection");
        // The filter has the connection once its claim is here (killed before it sent the
        // connection to the broker, the connector would fail the first `connect` instead).
        let claim = bus_reads_claim(&mut c1);
        let first = peer(&c1);
        // SAFETY: pidfd_open, kill and poll of the connector's pid.
        unsafe {
            let pidfd = libc::syscall(libc::SYS_pidfd_open, first.pid, 0) as i32;
            assert!(pidfd >= 0);
            assert_eq!(libc::kill(first.pid, libc::SIGKILL), 0);
            let mut p = libc::pollfd {
                fd: pidfd,
                events: libc::POLLIN,
                revents: 0,
            };
            assert_eq!(
                libc::poll(&mut p, 1, 10_000),
                1,
                "the connector did not die"
            );
            libc::close(pidfd);
        }
        c1.write_all(BUS_OK).unwrap();
        // The second `connect` was answered before the third was made: whatever reached
        // the bus for it is queued by the time the third's connection is.
        let third = accept_within(&l, 10_000).expect("the third connection");
        let later: Vec<libc::ucred> = std::iter::once(third)
            .chain(std::iter::from_fn(|| l.accept().ok().map(|(c, _)| c)))
            .map(|c| peer(&c))
            .collect();
        (first, claim, later, c1)
    });
    let (out, err) = query_at(14, &sock, AFTER_KILL);
    let (first, claim, later, _c1) = bus.join().unwrap();
    assert_eq!(claim, "AUTH EXTERNAL 3635353334");
    assert_eq!(out, "first=OK\nsecond=ECONNREFUSED\nthird=ok\n", "{err}");
    assert_eq!(
        later.len(),
        1,
        "connections that reached the bus after the kill"
    );
    assert_eq!((first.uid, later[0].uid), (65534, 65534));
    assert_ne!(later[0].pid, first.pid, "the new connector");
    assert_connector_gone(later[0].pid, "new connector");
}

/// The query's ways to the bus socket (argv 1) other than its path: a symlink it makes,
/// a hard link, `//` and `/./` spellings (each reached only through the filter, as the bus
/// user: the bus sees the claim rewritten), `/proc/self/fd/N` of an `O_PATH` descriptor and
/// an abstract name (refused). Each sends the NUL and its claim, never waiting for a reply.
/// argv 2 is a directory the query may write.
const OTHER_PATHS: &str = r#"
bus, t = sys.argv[1], sys.argv[2]
ways = []
os.symlink(bus, t + "/sym"); ways.append(("symlink", t + "/sym"))
try:
    os.link(bus, t + "/hard"); ways.append(("hardlink", t + "/hard"))
except OSError as e:
    print("hardlink=not made (%s)" % errno.errorcode[e.errno])
ways.append(("slashes", "/" + bus))
ways.append(("dot", os.path.dirname(bus) + "/./" + os.path.basename(bus)))
fd = os.open(bus, os.O_PATH)
ways.append(("proc_fd", "/proc/self/fd/%d" % fd))
ways.append(("abstract", "\0" + bus))
for name, path in ways:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        s.sendall(b"\0AUTH EXTERNAL " + own_hex().encode() + b"\r\n")
        print("%s=ok" % name)
    except OSError as e:
        print("%s=%s" % (name, errno.errorcode[e.errno]))
    s.close()
"#;

/// See [`OTHER_PATHS`]: whatever path reaches the bus socket's inode goes through the
/// filter as the bus user (the bus gets the claim rewritten, or the part of it forwarded
/// before the plan ended, from a peer of uid 65534 that is not the server); a magic link
/// and an abstract name reach nothing.
#[test]
fn every_path_to_the_bus_socket_goes_through_the_filter_as_the_bus_user() {
    let Some((_d, sock, l)) = fake_bus() else {
        return;
    };
    let writable = dir(true);
    let (out, err) = query(
        auto_plan(15, &sock),
        OTHER_PATHS,
        &[sock.to_str().unwrap(), writable.path().to_str().unwrap()],
    );
    let results: std::collections::BTreeMap<&str, &str> =
        out.lines().filter_map(|l| l.split_once('=')).collect();
    let reached = results.values().filter(|v| **v == "ok").count();
    for way in ["symlink", "slashes", "dot"] {
        assert_eq!(results.get(way), Some(&"ok"), "{way}: {out} {err}");
    }
    // The broker looks `/proc/self/fd/N` up in its own `/proc/self`: a magic link where this
    // process has an fd N open (refused, `ELOOP`), else nothing (`ENOENT`). Tests running
    // beside this one open and close descriptors, so either answer comes; both reach nothing
    // (the bus's connections are counted below).
    assert!(
        matches!(results.get("proc_fd"), Some(&"ELOOP" | &"ENOENT")),
        "proc_fd: {out}"
    );
    assert_eq!(results.get("abstract"), Some(&"ECONNREFUSED"), "{out}");
    // The plan is over: each filter was shut down, so what it sent is there, then the end.
    let conns: Vec<UnixStream> = std::iter::from_fn(|| l.accept().ok().map(|(c, _)| c)).collect();
    assert_eq!(
        conns.len(),
        reached,
        "connections that reached the bus: {out}"
    );
    let server = server_pid();
    for mut c in conns {
        let cred = peer(&c);
        assert_eq!(cred.uid, 65534, "the bus's peer");
        assert_ne!(cred.pid, server, "the bus's peer is the server");
        c.set_nonblocking(false).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        // What the filter forwarded before the plan's end shut it down: a part of the NUL
        // and the rewritten claim, never anything else.
        let claim = b"\0AUTH EXTERNAL 3635353334\r\n";
        assert!(
            claim.starts_with(&got),
            "the bus got {:?} ({out})",
            String::from_utf8_lossy(&got)
        );
    }
}

/// A process of the bus user's uid on the host (as `nobody`'s daemons are) and the plan's
/// bus connector (found as the bus's peer while a query waits in SASL): it may not read
/// the connector's memory (`process_vm_readv`, `/proc/PID/mem`), its environment, its
/// descriptors (`/proc/PID/fd`, `pidfd_getfd`) nor trace it; the connector was forked from
/// the server and holds a copy of its memory. It holds two descriptors (the bus socket's,
/// its channel) and is the bus user with no group, no capability, `no_new_privs`.
#[test]
fn a_host_process_of_the_bus_user_cannot_read_or_trace_the_bus_connector() {
    let Some((_d, sock, l)) = fake_bus() else {
        return;
    };
    let bus = std::thread::spawn(move || {
        let mut c = accept_within(&l, 20_000).expect("the query's connection");
        let pid = peer(&c).pid;
        let probed = probe_as_nobody(pid);
        let fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .map(|e| {
                let target = std::fs::read_link(e.unwrap().path()).unwrap();
                let target = target.to_string_lossy();
                if target.starts_with("socket:") {
                    "socket".to_string()
                } else {
                    target.into_owned()
                }
            })
            .collect();
        let status = proc_status(
            pid,
            &[
                "Uid:",
                "Gid:",
                "Groups:",
                "CapEff:",
                "CapPrm:",
                "NoNewPrivs:",
            ],
        );
        let _ = bus_reads_claim(&mut c);
        c.write_all(BUS_OK).unwrap();
        (pid, probed, fds, status)
    });
    let script = r#"
s = connect_to(sys.argv[1])
s.sendall(b"\0AUTH EXTERNAL " + own_hex().encode() + b"\r\n")
print(line(s).split(" ")[0])
"#;
    let (out, err) = query_at(16, &sock, script);
    let (pid, probed, mut fds, status) = bus.join().unwrap();
    assert_eq!(out, "OK\n", "{err}");
    fds.sort();
    assert_eq!(
        fds,
        [sock.display().to_string(), "socket".into()],
        "the bus connector's descriptors: the bus socket's and its channel alone"
    );
    assert_eq!(
        status,
        [
            "Uid: 65534 65534 65534 65534",
            "Gid: 65534 65534 65534 65534",
            "Groups:",
            "CapPrm: 0000000000000000",
            "CapEff: 0000000000000000",
            "NoNewPrivs: 1",
        ],
        "the bus connector's credentials"
    );
    assert_eq!(
        probed,
        [
            ("process_vm_readv", libc::EPERM),
            ("open /proc/PID/mem", libc::EACCES),
            ("open /proc/PID/environ", libc::EACCES),
            ("readlink /proc/PID/fd/0", libc::EACCES),
            ("ptrace attach", libc::EPERM),
            ("pidfd_getfd 0", libc::EPERM),
        ],
        "what a process of uid 65534 got of the bus connector {pid}"
    );
}

/// In a child of uid and gid 65534 (no group, forked: system calls only), each probe of
/// process `pid` and the `errno` it failed with (0: it worked).
fn probe_as_nobody(pid: i32) -> Vec<(&'static str, i32)> {
    let names = [
        "process_vm_readv",
        "open /proc/PID/mem",
        "open /proc/PID/environ",
        "readlink /proc/PID/fd/0",
        "ptrace attach",
        "pidfd_getfd 0",
    ];
    let paths = [
        format!("/proc/{pid}/mem\0"),
        format!("/proc/{pid}/environ\0"),
        format!("/proc/{pid}/fd/0\0"),
    ];
    let (r, w) = nix::unistd::pipe().unwrap();
    // SAFETY: fork; the child makes system calls only, on data prepared above, writes its
    // results to the pipe and exits.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY (the child): plain system calls on integers and our buffers.
        unsafe {
            let errno = || *libc::__errno_location();
            let mut res = [0i32; 6];
            if libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) != 0
                || libc::syscall(libc::SYS_setresgid, 65534, 65534, 65534) != 0
                || libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) != 0
            {
                libc::_exit(2);
            }
            let mut buf = [0u8; 64];
            let local = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: 8,
            };
            let remote = libc::iovec {
                iov_base: 0x1000 as *mut libc::c_void,
                iov_len: 8,
            };
            res[0] = if libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) < 0 {
                errno()
            } else {
                0
            };
            for (i, p) in paths[..2].iter().enumerate() {
                let fd = libc::open(p.as_ptr().cast(), libc::O_RDONLY);
                res[1 + i] = if fd < 0 { errno() } else { 0 };
            }
            res[3] = if libc::readlink(paths[2].as_ptr().cast(), buf.as_mut_ptr().cast(), 64) < 0 {
                errno()
            } else {
                0
            };
            res[4] = if libc::ptrace(libc::PTRACE_ATTACH, pid, 0, 0) < 0 {
                errno()
            } else {
                0
            };
            let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
            res[5] = if pidfd < 0 {
                1000 + errno()
            } else if libc::syscall(libc::SYS_pidfd_getfd, pidfd, 0, 0) < 0 {
                errno()
            } else {
                0
            };
            libc::write(w.as_raw_fd(), res.as_ptr().cast(), 24);
            libc::_exit(0);
        }
    }
    drop(w);
    let mut got = [0u8; 24];
    std::fs::File::from(r).read_exact(&mut got).unwrap();
    // SAFETY: reap our child.
    unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
    names
        .iter()
        .zip(got.chunks(4))
        .map(|(n, c)| (*n, i32::from_ne_bytes(c.try_into().unwrap())))
        .collect()
}

/// The query: 60 children, each `connect`ing to the bus and killed (`SIGKILL`) by the
/// query at once, so some die before their `connect`, some while the broker answers it,
/// some after; then 8 connections authenticated and held (a refused one retried at most
/// 50 times: a dead child's filter gives its place back once it sees the end) and a 9th.
const DIED_MID_CONNECT: &str = r#"
import signal
path = sys.argv[1]
for i in range(60):
    pid = os.fork()
    if pid == 0:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            s.sendall(b"\0AUTH EXTE")
        except OSError:
            pass
        os._exit(0)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
held = []
for i in range(8):
    for attempt in range(50):
        try:
            s = connect_to(path)
            break
        except ConnectionRefusedError:
            os.sched_yield()
    else:
        print("refused 50 times"); sys.exit(1)
    s.sendall(b"\0AUTH EXTERNAL " + own_hex().encode() + b"\r\n")
    assert line(s).startswith("OK")
    if i == 0:
        print("pid=%d" % whoami(s))
    held.append(s)
try:
    connect_to(path); print("ninth=ok")
except OSError as e:
    print("ninth=%s" % errno.errorcode[e.errno])
print("held=%d" % len(held))
"#;

/// See [`DIED_MID_CONNECT`]: queries killed around their `connect` leave no place taken
/// (8 are held after 60 of them, the 9th refused), and no connector of the plan outlives
/// it.
#[test]
fn queries_killed_mid_connect_leave_no_place_taken() {
    let Some((out, err)) = query_at_a_bus(17, DIED_MID_CONNECT) else {
        return;
    };
    let (out, pid) = connector_pid(&out);
    assert_eq!(out, "ninth=ECONNREFUSED\nheld=8\n", "{err}");
    assert_connector_gone(pid, "bus connector");
}
