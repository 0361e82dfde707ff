//! Attacks on the bus user (`serve --plan-bus-user`): a hostile plan query against the
//! socket broker's bus connector and the read-only filter's claim rewrite and bounds. Each
//! test asserts the guarantee holds (docs/fleet.md "The bus user"). The queries are
//! `python3` scripts run in a plan's sandbox (an `auto` query user, the bus user `nobody`)
//! on this machine's root; the bus is a test's own listener acting as one, or a private
//! reference `dbus-daemon`.

use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use super::tests::{
    accept_within, allowing, dir, listening, peer, runnable, sandboxed_both, system_bus,
};
use crate::process::dbus_filter::Encoder;
use crate::process::sandbox::{Limits, QueryUsers};

/// The query scripts' shared part: `connect_to(path)`, `call(serial, member, iface, dest,
/// path, body_sig, body)` (a little-endian `METHOD_CALL`), `hello(serial)`, `read_msg(s)`
/// (one whole message: its type, reply serial and body), `sasl(s, text)` (send, then read
/// one reply line).
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
    c.set_nonblocking(false).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut nul = [1u8; 1];
    c.read_exact(&mut nul).unwrap();
    assert_eq!(nul, [0]);
    let mut lines = Vec::new();
    loop {
        let l = bus_line(c);
        lines.push(l.clone());
        if l == "BEGIN" {
            break;
        }
        c.write_all(b"OK 0123456789abcdef0123456789abcdef\r\n")
            .unwrap();
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
    if !runnable() || !python() {
        return;
    }
    let d = dir(false);
    let (sock, l) = listening(d.path(), "system_bus_socket");
    let bus = std::thread::spawn(move || {
        let mut c = accept_within(&l, 20_000).expect("the query's bus connection");
        let lines = bus_side_until_hello(&mut c);
        (c, lines)
    });
    let (out, err) = query(auto_plan(11, &sock), IN_FLIGHT, &[sock.to_str().unwrap()]);
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
