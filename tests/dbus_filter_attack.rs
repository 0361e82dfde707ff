//! Attacks on `skyhook::process::dbus_filter` (merge of branch `dbus`): a hostile plan query
//! talks to the filter's client end and tries to get a call that is not a read (or one
//! without `NO_AUTO_START`) to the bus, to pass a descriptor, or to make the filter hang or
//! hold more than its bounds. The test plays the bus on a socket pair (so it sees every byte
//! the filter forwards), and a private `dbus-daemon` where the bus's own answer matters.
//!
//! Tests marked `#[ignore = "known hole: ..."]` reproduce an attack that succeeds on main.

use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, MutexGuard, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use skyhook::process::dbus_filter::{MAX_AUTH_LINES, MAX_CONNECTIONS, MAX_LINE, spawn};

use crate::util::bus::{DbusDaemon, OPEN_POLICY};

const WAIT: Duration = Duration::from_secs(10);
const BUS: &str = "org.freedesktop.DBus";
const PEER: &str = "org.freedesktop.DBus.Peer";
const DENIED: &[u8] = b"org.freedesktop.DBus.Error.AccessDenied";
const NO_REPLY_EXPECTED: u8 = 1;
const NO_AUTO_START: u8 = 2;
const ALLOW_INTERACTIVE_AUTHORIZATION: u8 = 4;

/// The filters of this process share one bound ([`MAX_CONNECTIONS`]): the test that fills it
/// runs alone among these.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial_lock() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A D-Bus message encoder that does what it is told (wrong types, junk padding included).
struct Enc {
    buf: Vec<u8>,
    be: bool,
}

impl Enc {
    fn new(be: bool, kind: u8, flags: u8, serial: u32) -> Enc {
        let mut e = Enc {
            buf: vec![if be { b'B' } else { b'l' }, kind, flags, 1],
            be,
        };
        e.u32(0);
        e.u32(serial);
        e.u32(0);
        e
    }

    fn pad(&mut self, to: usize, with: u8) {
        while !self.buf.len().is_multiple_of(to) {
            self.buf.push(with);
        }
    }

    fn u32(&mut self, v: u32) {
        self.pad(4, 0);
        let b = if self.be {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.buf.extend_from_slice(&b);
    }

    fn string(&mut self, s: &[u8]) {
        self.u32(s.len() as u32);
        self.buf.extend_from_slice(s);
        self.buf.push(0);
    }

    fn sig(&mut self, s: &[u8]) {
        self.buf.push(s.len() as u8);
        self.buf.extend_from_slice(s);
        self.buf.push(0);
    }

    /// A header field: `s`/`o` take `v` as a string, `g` as a signature, `u` its number;
    /// any other type is its signature with `v` as the raw value bytes.
    fn field(&mut self, code: u8, t: &str, v: &[u8]) {
        self.pad(8, 0);
        self.buf.push(code);
        self.sig(t.as_bytes());
        match t {
            "s" | "o" => self.string(v),
            "g" => self.sig(v),
            "u" => self.u32(std::str::from_utf8(v).unwrap().parse().unwrap()),
            _ => self.buf.extend_from_slice(v),
        }
    }

    fn finish(mut self, body: &[u8]) -> Vec<u8> {
        let fields = (self.buf.len() - 16) as u32;
        self.pad(8, 0);
        self.buf.extend_from_slice(body);
        let (b, f) = if self.be {
            ((body.len() as u32).to_be_bytes(), fields.to_be_bytes())
        } else {
            ((body.len() as u32).to_le_bytes(), fields.to_le_bytes())
        };
        self.buf[4..8].copy_from_slice(&b);
        self.buf[12..16].copy_from_slice(&f);
        self.buf
    }
}

/// A method call (path `/`) with the header fields given after the path.
fn call_with(be: bool, serial: u32, flags: u8, fields: &[(u8, &str, &[u8])]) -> Vec<u8> {
    let mut e = Enc::new(be, 1, flags, serial);
    e.field(1, "o", b"/");
    for &(code, t, v) in fields {
        e.field(code, t, v);
    }
    e.finish(&[])
}

fn call(serial: u32, dest: &str, iface: &str, member: &str) -> Vec<u8> {
    call_with(
        false,
        serial,
        0,
        &[
            (6, "s", dest.as_bytes()),
            (2, "s", iface.as_bytes()),
            (3, "s", member.as_bytes()),
        ],
    )
}

fn ping(serial: u32) -> Vec<u8> {
    call(serial, BUS, PEER, "Ping")
}

fn method_return(serial: u32, reply_to: u32) -> Vec<u8> {
    let mut e = Enc::new(false, 2, NO_REPLY_EXPECTED, serial);
    e.field(5, "u", reply_to.to_string().as_bytes());
    e.field(8, "g", b"s");
    let mut body = Enc {
        buf: Vec::new(),
        be: false,
    };
    body.string(b":1.1");
    e.finish(&body.buf)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let w = b[at..at + 4].try_into().unwrap();
    if b[0] == b'B' {
        u32::from_be_bytes(w)
    } else {
        u32::from_le_bytes(w)
    }
}

fn read_n(s: &mut UnixStream, n: usize) -> Vec<u8> {
    let mut b = vec![0; n];
    s.read_exact(&mut b).unwrap();
    b
}

fn read_message(s: &mut UnixStream) -> Vec<u8> {
    let mut m = read_n(s, 16);
    let len = (16 + u32_at(&m, 12) as usize).div_ceil(8) * 8 + u32_at(&m, 4) as usize;
    m.resize(len, 0);
    s.read_exact(&mut m[16..]).unwrap();
    m
}

/// What is left to read on `s` until its end (within [`WAIT`]); `None` when it did not end.
fn rest(s: &mut UnixStream) -> Option<Vec<u8>> {
    let mut b = Vec::new();
    s.read_to_end(&mut b).ok().map(|_| b)
}

fn ends_within(t: JoinHandle<()>) -> bool {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = t.join();
        let _ = tx.send(());
    });
    rx.recv_timeout(WAIT).is_ok()
}

/// The client's end, the bus's end (the test plays both) and the filter's thread.
fn filtered() -> (UnixStream, UnixStream, JoinHandle<()>) {
    let (client, filter_client) = UnixStream::pair().unwrap();
    let (bus, filter_bus) = UnixStream::pair().unwrap();
    for s in [&client, &bus] {
        s.set_read_timeout(Some(WAIT)).unwrap();
    }
    (client, bus, spawn(filter_client, filter_bus).unwrap())
}

const GUID: &str = "OK 0123456789abcdef0123456789abcdef\r\n";

/// sd-bus's pipelined handshake and `Hello` through the filter, the bus's `Hello` reply
/// read by the client.
fn begin(client: &mut UnixStream, bus: &mut UnixStream) {
    let mut hello = b"\0AUTH EXTERNAL 30\r\nNEGOTIATE_UNIX_FD\r\nBEGIN\r\n".to_vec();
    hello.extend(call(1, BUS, BUS, "Hello"));
    client.write_all(&hello).unwrap();
    assert_eq!(read_n(bus, 19), b"\0AUTH EXTERNAL 30\r\n");
    bus.write_all(GUID.as_bytes()).unwrap();
    assert_eq!(read_n(bus, 7), b"BEGIN\r\n");
    let hello = read_message(bus);
    assert_eq!((hello[2], u32_at(&hello, 8)), (NO_AUTO_START, 1));
    let want = format!("{GUID}ERROR\r\n");
    assert_eq!(read_n(client, want.len()), want.as_bytes());
    bus.write_all(&method_return(1, 1)).unwrap();
    assert_eq!(read_message(client), method_return(1, 1));
}

/// What the filter did with one message.
#[derive(Debug, PartialEq)]
enum Fate {
    /// Reached the bus as sent but for these flags.
    Forwarded(u8),
    /// Answered `AccessDenied`, nothing reached the bus.
    Denied,
    /// Neither forwarded nor answered.
    Dropped,
    /// Both sides closed, nothing reached the bus.
    Closed,
}

/// Sends `msg` after the handshake and tells its fate: a `Ping` (serial 99) sent after it
/// is the next message the bus must see unless the connection closed.
fn fate_of(msg: &[u8]) -> Fate {
    let _one = serial_lock();
    let (mut client, mut bus, filter) = filtered();
    begin(&mut client, &mut bus);
    client.write_all(msg).unwrap();
    // A closed client end fails this write (EPIPE): the fate is read below.
    let _ = client.write_all(&ping(99));
    let mut fixed = [0u8; 16];
    if bus.read_exact(&mut fixed).is_err() {
        assert!(ends_within(filter), "the filter did not end");
        return Fate::Closed;
    }
    let mut first = fixed.to_vec();
    let len = (16 + u32_at(&first, 12) as usize).div_ceil(8) * 8 + u32_at(&first, 4) as usize;
    first.resize(len, 0);
    bus.read_exact(&mut first[16..]).unwrap();
    let fate = if first[8..12] == ping(99)[8..12] && first.len() == ping(99).len() {
        // The message did not reach the bus: was it answered?
        bus.write_all(&method_return(2, 99)).unwrap();
        let answer = read_message(&mut client);
        if answer[1] == 3 && answer.windows(DENIED.len()).any(|w| w == DENIED) {
            assert_eq!(
                u32_at(&answer, 20),
                u32_at(msg, 8),
                "the error's reply serial"
            );
            assert_eq!(read_message(&mut client), method_return(2, 99));
            Fate::Denied
        } else {
            assert_eq!(answer, method_return(2, 99));
            Fate::Dropped
        }
    } else {
        assert_eq!((first.len(), &first[3..]), (msg.len(), &msg[3..]));
        assert_eq!(&first[..2], &msg[..2]);
        let mut sentinel = ping(99);
        sentinel[2] = NO_AUTO_START;
        assert_eq!(read_message(&mut bus), sentinel);
        Fate::Forwarded(first[2])
    };
    drop(client);
    assert_eq!(
        rest(&mut bus).map(|b| b.len()),
        Some(0),
        "more reached the bus"
    );
    assert!(ends_within(filter), "the filter did not end");
    fate
}

/// Header fields the filter and the bus could read differently: every one is refused or
/// denied, an allowed call keeps its meaning and gets `NO_AUTO_START`.
#[test]
fn header_tricks_never_get_a_call_past_the_filter() {
    let manager = b"org.freedesktop.systemd1.Manager".as_slice();
    let systemd = b"org.freedesktop.systemd1".as_slice();
    let (dest, iface) = ((6, "s", BUS.as_bytes()), (2, "s", PEER.as_bytes()));
    let member = |m: &'static [u8]| (3u8, "s", m);
    let fields = |f: &[(u8, &'static str, &'static [u8])]| call_with(false, 5, 0, f);
    let with = |mut m: Vec<u8>, at: usize, b: u8| {
        m[at] = b;
        m
    };
    // A Ping whose padding after the path field is not zero (the bus refuses such a
    // message; the filter reads the same offsets).
    let mut junk_pad = Enc::new(false, 1, 0, 5);
    junk_pad.field(1, "o", b"/x");
    junk_pad.pad(8, 0xff);
    junk_pad.field(6, "s", b"org.skyhook.Test");
    junk_pad.field(2, "s", b"org.skyhook.Test");
    junk_pad.field(3, "s", b"Do");
    // The field array declared longer than its fields, into the padding before the body.
    let mut long_array = ping(5);
    let n = u32_at(&long_array, 12);
    let pad = (8 - (16 + n) % 8) % 8;
    assert!(pad > 0, "the Ping's fields end on an 8-boundary");
    long_array[12..16].copy_from_slice(&(n + pad).to_le_bytes());
    // The field array declared 4 bytes shorter, cutting the member off.
    let mut short_array = ping(5);
    short_array[12..16].copy_from_slice(&(n - 4).to_le_bytes());
    let big_endian = |flags| {
        call_with(
            true,
            5,
            flags,
            &[
                (6, "s", systemd),
                (2, "s", manager),
                (3, "s", b"GetUnitFileState"),
            ],
        )
    };
    #[rustfmt::skip]
    let cases: Vec<(&str, Vec<u8>, Fate)> = vec![
        ("member twice (Ping, then StartServiceByName)",
         fields(&[dest, iface, member(b"Ping"), member(b"StartServiceByName")]), Fate::Closed),
        ("destination twice", fields(&[dest, (6, "s", systemd), iface, member(b"Ping")]), Fate::Closed),
        ("an unknown field of type v", fields(&[(200, "v", b"\x01s\0\0\0\0\0\0"), dest, iface, member(b"Ping")]), Fate::Closed),
        ("an unknown field of type a{sv}", fields(&[(200, "a{sv}", b"\0\0\0\0\0\0\0\0"), dest, iface, member(b"Ping")]), Fate::Closed),
        ("an unknown field of type (s)", fields(&[(200, "(s)", b"\0\0\0\0\0\0\0\0"), dest, iface, member(b"Ping")]), Fate::Closed),
        ("field code 0", fields(&[(0, "s", b"x"), dest, iface, member(b"Ping")]), Fate::Closed),
        ("member as an object path", fields(&[dest, iface, (3, "o", b"/Ping")]), Fate::Closed),
        ("interface as a signature", fields(&[dest, (2, "g", b"s"), member(b"Ping")]), Fate::Closed),
        ("destination as a u32", fields(&[(6, "u", b"7"), iface, member(b"Ping")]), Fate::Closed),
        ("member with an embedded NUL", fields(&[dest, (2, "s", BUS.as_bytes()), member(b"ListNames\0StartServiceByName")]), Fate::Closed),
        ("interface not UTF-8", fields(&[dest, (2, "s", b"org.freedesktop.DBus.Peer\xff"), member(b"Ping")]), Fate::Closed),
        ("a field array longer than its fields", long_array, Fate::Closed),
        ("a field array shorter than its fields", short_array, Fate::Closed),
        ("protocol version 0", with(ping(5), 3, 0), Fate::Closed),
        ("protocol version 2", with(ping(5), 3, 2), Fate::Closed),
        ("byte order b", with(ping(5), 0, b'b'), Fate::Closed),
        ("type 0", with(ping(5), 1, 0), Fate::Closed),
        ("type 5", with(ping(5), 1, 5), Fate::Closed),
        ("type 255", with(ping(5), 1, 255), Fate::Closed),
        ("serial 0", with(ping(5), 8, 0), Fate::Closed),
        ("a call with non-zero padding", junk_pad.finish(&[]), Fate::Denied),
        ("a call without an interface", fields(&[dest, member(b"Ping")]), Fate::Denied),
        ("a call without a destination", fields(&[iface, member(b"Ping")]), Fate::Denied),
        ("an allowed call passing descriptors", fields(&[dest, iface, member(b"Ping"), (9, "u", b"1")]), Fate::Denied),
        ("the manager's interface at a unique name", fields(&[(6, "s", b":1.0"), (2, "s", manager), member(b"ListUnits")]), Fate::Denied),
        ("an interface with a trailing dot", fields(&[dest, (2, "s", b"org.freedesktop.DBus.Peer."), member(b"Ping")]), Fate::Denied),
        ("a member differing in case", fields(&[(6, "s", systemd), (2, "s", manager), member(b"startunit")]), Fate::Denied),
        ("BecomeMonitor", call(5, BUS, "org.freedesktop.DBus.Monitoring", "BecomeMonitor"), Fate::Denied),
        ("a big-endian StartUnit", call_with(true, 5, 0, &[(6, "s", systemd), (2, "s", manager), member(b"StartUnit")]), Fate::Denied),
        ("a signal to the bus", {
            let mut s = Enc::new(false, 4, 0, 5);
            s.field(1, "o", b"/");
            s.field(2, "s", b"org.skyhook.Test");
            s.field(3, "s", b"Fire");
            s.field(6, "s", BUS.as_bytes());
            s.finish(&[])
        }, Fate::Dropped),
        // Kept as they are: their flags get NO_AUTO_START, nothing else changes.
        ("a big-endian read", big_endian(0), Fate::Forwarded(NO_AUTO_START)),
        ("a read asking for interactive authorization and no reply",
         big_endian(ALLOW_INTERACTIVE_AUTHORIZATION | NO_REPLY_EXPECTED),
         Fate::Forwarded(ALLOW_INTERACTIVE_AUTHORIZATION | NO_REPLY_EXPECTED | NO_AUTO_START)),
        ("all flag bits set", big_endian(0xff), Fate::Forwarded(0xff)),
        ("an unknown field of type h (no descriptor: 4 bytes)", fields(&[(200, "h", b"\0\0\0\0"), dest, iface, member(b"Ping")]), Fate::Forwarded(NO_AUTO_START)),
        ("a signature the empty body does not have", fields(&[dest, iface, member(b"Ping"), (8, "g", b"s")]), Fate::Forwarded(NO_AUTO_START)),
        // A reply passes as it is (the bus routes only replies it expects, by its policy),
        // even one claiming descriptors (the filter never receives any to pass).
        ("a method return claiming a descriptor", {
            let mut r = Enc::new(false, 2, 0, 5);
            r.field(5, "u", b"1");
            r.field(6, "s", BUS.as_bytes());
            r.field(9, "u", b"1");
            r.finish(&[])
        }, Fate::Forwarded(0)),
    ];
    for (name, msg, want) in cases {
        assert_eq!(fate_of(&msg), want, "{name}");
    }
}

/// Messages split across reads (one byte a write) and many pipelined in one write are
/// judged one by one: the bus gets exactly the allowed ones, in order, each with
/// `NO_AUTO_START`; the client gets one `AccessDenied` per denied call, in order.
#[test]
fn split_and_pipelined_messages_are_judged_one_by_one() {
    let _one = serial_lock();
    let (mut client, mut bus, filter) = filtered();
    begin(&mut client, &mut bus);
    for b in call(2, BUS, BUS, "StartServiceByName") {
        client.write_all(&[b]).unwrap();
    }
    let mut many = Vec::new();
    for serial in 3..203u32 {
        many.extend(if serial % 2 == 0 {
            call(serial, BUS, BUS, "RequestName")
        } else {
            call(serial, BUS, BUS, "ListNames")
        });
    }
    let writer = {
        let mut client = client.try_clone().unwrap();
        std::thread::spawn(move || client.write_all(&many).unwrap())
    };
    for serial in (3..203u32).filter(|s| s % 2 == 1) {
        let got = read_message(&mut bus);
        let mut want = call(serial, BUS, BUS, "ListNames");
        want[2] = NO_AUTO_START;
        assert_eq!(got, want, "call {serial}");
    }
    writer.join().unwrap();
    for serial in [2].into_iter().chain((3..203u32).filter(|s| s % 2 == 0)) {
        let denied = read_message(&mut client);
        assert_eq!((denied[1], u32_at(&denied, 20)), (3, serial));
    }
    drop(client);
    assert_eq!(rest(&mut bus).map(|b| b.len()), Some(0));
    assert!(ends_within(filter));
}

/// One authentication attack: what the client sends, what the bus must have read when
/// the filter is done with it (before its end), what the client gets, and whether the
/// connection closes.
struct Sasl {
    name: &'static str,
    sends: Vec<u8>,
    bus_reads: &'static [u8],
    client_gets: &'static str,
    closes: bool,
}

#[test]
fn authentication_tricks_stay_between_client_and_filter() {
    let _one = serial_lock();
    let long = format!("AUTH EXTERNAL {}\r\n", "3".repeat(MAX_LINE)).into_bytes();
    let many = b"\0"
        .iter()
        .copied()
        .chain(b"FOO\r\n".repeat(MAX_AUTH_LINES + 1))
        .collect();
    let many_errors: &'static str = "ERROR \"unknown command\"\r\n"
        .repeat(MAX_AUTH_LINES)
        .leak();
    #[rustfmt::skip]
    let cases = [
        Sasl { name: "no leading NUL", sends: b"AUTH EXTERNAL 30\r\n".to_vec(), bus_reads: b"", client_gets: "", closes: true },
        Sasl { name: "a NUL inside a line", sends: b"\0AUTH\0EXTERNAL 30\r\n".to_vec(), bus_reads: b"\0", client_gets: "", closes: true },
        Sasl { name: "a bare CR inside a line", sends: b"\0AUTH EXTERNAL 30\rBEGIN\r\n".to_vec(), bus_reads: b"\0", client_gets: "", closes: true },
        Sasl { name: "a line over the bound", sends: [&b"\0"[..], &long].concat(), bus_reads: b"\0", client_gets: "", closes: true },
        Sasl { name: "BEGIN before the bus said OK", sends: b"\0BEGIN\r\n".to_vec(), bus_reads: b"\0", client_gets: "", closes: true },
        Sasl { name: "more lines than the bound", sends: many, bus_reads: b"\0", client_gets: many_errors, closes: true },
        Sasl { name: "NEGOTIATE_UNIX_FD with an argument, in lower case, first",
               sends: b"\0NEGOTIATE_UNIX_FD 1\r\nnegotiate_unix_fd\r\nNEGOTIATE_UNIX_FD\r\n".to_vec(),
               bus_reads: b"\0", client_gets: "ERROR\r\nERROR \"unknown command\"\r\nERROR\r\n", closes: false },
        Sasl { name: "commands the bus does not take from a client",
               sends: b"\0OK 0123\r\nREJECTED EXTERNAL\r\nAGREE_UNIX_FD\r\n".to_vec(),
               bus_reads: b"\0", client_gets: "ERROR \"unknown command\"\r\nERROR \"unknown command\"\r\nERROR \"unknown command\"\r\n", closes: false },
    ];
    for c in cases {
        let (mut client, mut bus, filter) = filtered();
        client.write_all(&c.sends).unwrap();
        let got = read_n(&mut client, c.client_gets.len());
        assert_eq!(String::from_utf8_lossy(&got), c.client_gets, "{}", c.name);
        if c.closes {
            assert_eq!(rest(&mut bus).as_deref(), Some(c.bus_reads), "{}", c.name);
            assert_eq!(rest(&mut client).map(|b| b.len()), Some(0), "{}", c.name);
        } else {
            assert_eq!(
                read_n(&mut bus, c.bus_reads.len()),
                c.bus_reads,
                "{}",
                c.name
            );
            // The next line the client sends is the next the bus reads.
            client.write_all(b"AUTH EXTERNAL 30\r\n").unwrap();
            assert_eq!(read_n(&mut bus, 18), b"AUTH EXTERNAL 30\r\n", "{}", c.name);
            bus.write_all(b"REJECTED EXTERNAL\r\n").unwrap();
            assert_eq!(
                read_n(&mut client, 19),
                b"REJECTED EXTERNAL\r\n",
                "{}",
                c.name
            );
            drop(client);
            assert_eq!(rest(&mut bus).map(|b| b.len()), Some(0), "{}", c.name);
        }
        assert!(ends_within(filter), "{}: the filter did not end", c.name);
    }
}

/// A client that stops in the middle of a line (no `\r\n` ever) holds its filter only until
/// the bus gives up on it (dbus-daemon's `auth_timeout` closes the bus side), which the
/// filter watches while it waits.
#[test]
fn a_client_stuck_in_a_line_is_ended_by_the_bus_closing() {
    let _one = serial_lock();
    let (mut client, mut bus, filter) = filtered();
    client.write_all(b"\0AUTH EXTERNAL 30\nBEGIN\n").unwrap();
    assert_eq!(read_n(&mut bus, 1), b"\0");
    drop(bus);
    assert_eq!(rest(&mut client).map(|b| b.len()), Some(0));
    assert!(ends_within(filter));
}

/// Sends `data` with one descriptor (`SCM_RIGHTS`) on `s`.
fn send_with_fd(s: &UnixStream, data: &[u8], fd: i32) -> isize {
    // SAFETY: the iovec, control buffer and msghdr live across the call; the control
    // message is built with the CMSG_* macros in a buffer of CMSG_SPACE(4) bytes.
    unsafe {
        let mut iov = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        let space = libc::CMSG_SPACE(4) as usize;
        let mut control = vec![0u8; space];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(4) as _;
        std::ptr::copy_nonoverlapping(fd.to_ne_bytes().as_ptr(), libc::CMSG_DATA(c), 4);
        libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    }
}

/// Receives exactly `n` bytes on `s` with `recvmsg`; returns them and the number of
/// control bytes (descriptors, credentials) that came with them.
fn recv_with_control(s: &UnixStream, n: usize) -> (Vec<u8>, usize) {
    let (mut out, mut control_bytes) = (vec![0u8; n], 0);
    let mut got = 0;
    while got < n {
        // SAFETY: as in send_with_fd; the buffers outlive the call.
        let (r, controllen) = unsafe {
            let mut iov = libc::iovec {
                iov_base: out[got..].as_mut_ptr().cast(),
                iov_len: n - got,
            };
            let mut control = [0u8; 256];
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = control.len() as _;
            let r = libc::recvmsg(s.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
            (r, msg.msg_controllen as usize)
        };
        assert!(r > 0, "recvmsg: {r} {}", std::io::Error::last_os_error());
        got += r as usize;
        control_bytes += controllen;
    }
    (out, control_bytes)
}

/// A descriptor sent with the credentials byte, an authentication line or a message never
/// reaches the bus (the filter reads without control messages, so the kernel drops it),
/// and the filter goes on.
#[test]
fn a_descriptor_sent_with_any_byte_never_reaches_the_bus() {
    let _one = serial_lock();
    let (mut client, mut bus, filter) = filtered();
    let null = std::fs::File::open("/dev/null").unwrap();
    let fd = null.as_raw_fd();
    assert_eq!(send_with_fd(&client, b"\0", fd), 1);
    assert_eq!(send_with_fd(&client, b"AUTH EXTERNAL 30\r\n", fd), 18);
    assert_eq!(
        recv_with_control(&bus, 19),
        (b"\0AUTH EXTERNAL 30\r\n".to_vec(), 0)
    );
    bus.write_all(GUID.as_bytes()).unwrap();
    assert_eq!(read_n(&mut client, GUID.len()), GUID.as_bytes());
    let hello = [&b"BEGIN\r\n"[..], &call(1, BUS, BUS, "Hello")].concat();
    assert_eq!(send_with_fd(&client, &hello, fd), hello.len() as isize);
    let (got, control) = recv_with_control(&bus, hello.len());
    assert_eq!((got.len(), control), (hello.len(), 0));
    bus.write_all(&method_return(1, 1)).unwrap();
    assert_eq!(read_message(&mut client), method_return(1, 1));
    let msg = ping(2);
    assert_eq!(send_with_fd(&client, &msg, fd), msg.len() as isize);
    let (got, control) = recv_with_control(&bus, msg.len());
    assert_eq!((&got[3..], control), (&msg[3..], 0));
    drop(client);
    assert_eq!(rest(&mut bus).map(|b| b.len()), Some(0));
    assert!(ends_within(filter));
}

/// A client that floods denied calls and never reads its answers blocks only its own
/// filter (nothing queues: the bus gets nothing past `Hello`), another connection is
/// filtered meanwhile, and closing the client ends the stuck filter.
#[test]
fn a_client_that_never_reads_blocks_only_itself() {
    let _one = serial_lock();
    let (mut client, mut bus, filter) = filtered();
    begin(&mut client, &mut bus);
    let flood: Vec<u8> = (2..100_002u32)
        .flat_map(|s| call(s, BUS, BUS, "StartServiceByName"))
        .collect();
    let flooded = flood.len();
    let writer = {
        let mut client = client.try_clone().unwrap();
        std::thread::spawn(move || {
            // Blocks once both socket buffers are full; fails when the test shuts it down.
            let r = client.write_all(&flood);
            (r.is_ok(), flooded)
        })
    };
    // Another connection goes on.
    let (mut other, mut other_bus, other_filter) = filtered();
    begin(&mut other, &mut other_bus);
    other.write_all(&ping(2)).unwrap();
    assert_eq!(read_message(&mut other_bus)[3..], ping(2)[3..]);
    drop(other);
    assert!(ends_within(other_filter));
    // The stuck one: nothing reached its bus, and shutting its client down ends it.
    client.shutdown(std::net::Shutdown::Both).unwrap();
    let (wrote_all, _) = writer.join().unwrap();
    assert!(
        !wrote_all,
        "the filter took {flooded} bytes of denied calls"
    );
    assert_eq!(rest(&mut bus).map(|b| b.len()), Some(0));
    assert!(ends_within(filter));
}

/// A client that half-closes (shuts down its writing side after its calls) ends the
/// connection: its calls reach the bus, then both sides end (as dbus-daemon ends a
/// connection whose client's stream ends).
#[test]
fn a_half_closed_client_ends_its_connection() {
    let _one = serial_lock();
    let (mut client, mut bus, filter) = filtered();
    begin(&mut client, &mut bus);
    client.write_all(&ping(2)).unwrap();
    client.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(read_message(&mut bus)[3..], ping(2)[3..]);
    assert_eq!(rest(&mut bus).map(|b| b.len()), Some(0));
    assert!(rest(&mut client).is_some(), "the client side stayed open");
    assert!(ends_within(filter));
}

/// A client that stops inside a message (its fixed header declares a body that never
/// comes) gets none of it to the bus, and its filter ends when either side closes.
#[test]
fn a_partial_message_reaches_nothing_and_ends_with_either_side() {
    let _one = serial_lock();
    let mut partial = call(2, BUS, BUS, "StartServiceByName");
    partial[4..8].copy_from_slice(&(1u32 << 19).to_le_bytes());
    for client_closes in [true, false] {
        let (mut client, mut bus, filter) = filtered();
        begin(&mut client, &mut bus);
        client.write_all(&partial).unwrap();
        if client_closes {
            drop(client);
            assert_eq!(rest(&mut bus).map(|b| b.len()), Some(0));
        } else {
            bus.shutdown(std::net::Shutdown::Both).unwrap();
            assert_eq!(rest(&mut client).map(|b| b.len()), Some(0));
        }
        assert!(ends_within(filter), "client closes: {client_closes}");
    }
}

/// [`MAX_CONNECTIONS`] filters run at once, the next is refused with `EAGAIN`, and one that
/// ends frees its place; all of them end when their clients close.
#[test]
fn the_connection_bound_holds_and_frees() {
    let _one = serial_lock();
    let open = || {
        let (client, filter_client) = UnixStream::pair().unwrap();
        let (bus, filter_bus) = UnixStream::pair().unwrap();
        (client, bus, spawn(filter_client, filter_bus))
    };
    let mut running: Vec<_> = (0..MAX_CONNECTIONS).map(|_| open()).collect();
    assert!(running.iter().all(|(_, _, t)| t.is_ok()));
    let (_, _, refused) = open();
    assert_eq!(refused.unwrap_err().raw_os_error(), Some(libc::EAGAIN));
    let (client, _bus, filter) = running.pop().unwrap();
    drop(client);
    assert!(ends_within(filter.unwrap()));
    let again = open();
    assert!(again.2.is_ok(), "{:?}", again.2);
    running.push(again);
    for (client, _bus, filter) in running {
        drop(client);
        assert!(ends_within(filter.unwrap()));
    }
    let (_c, _b, after) = open();
    assert!(after.is_ok(), "a place was not given back: {after:?}");
}

/// `uid` in decimal, hex-encoded (the `EXTERNAL` identity).
fn hex_uid(uid: u32) -> String {
    uid.to_string()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One authentication line, with its `\r\n`.
fn line(s: &mut UnixStream) -> String {
    let mut l = Vec::new();
    while !l.ends_with(b"\r\n") {
        l.extend(read_n(s, 1));
    }
    String::from_utf8(l).unwrap()
}

/// A message's header fields of basic types `s`, `o`, `g` (as text) and `u` (in decimal).
fn fields_of(m: &[u8]) -> Vec<(u8, String)> {
    let end = 16 + u32_at(m, 12) as usize;
    let (mut pos, mut out) = (16, Vec::new());
    while pos < end {
        pos = pos.div_ceil(8) * 8;
        let code = m[pos];
        let t = m[pos + 2];
        pos += 4;
        let value = match t {
            b'u' => {
                pos = pos.div_ceil(4) * 4;
                pos += 4;
                u32_at(m, pos - 4).to_string()
            }
            b'g' => {
                let n = m[pos] as usize;
                pos += n + 2;
                String::from_utf8_lossy(&m[pos - n - 1..pos - 1]).into_owned()
            }
            _ => {
                pos = pos.div_ceil(4) * 4;
                let n = u32_at(m, pos) as usize;
                pos += 4 + n + 1;
                String::from_utf8_lossy(&m[pos - n - 1..pos - 1]).into_owned()
            }
        };
        out.push((code, value));
    }
    out
}

fn field(m: &[u8], code: u8) -> Option<String> {
    fields_of(m).into_iter().find(|f| f.0 == code).map(|f| f.1)
}

/// Messages read from `s` up to and with the reply to `serial`.
fn until_reply(s: &mut UnixStream, serial: u32) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    for _ in 0..100 {
        let m = read_message(s);
        let done = m[1] != 1 && m[1] != 4 && field(&m, 5) == Some(serial.to_string());
        got.push(m);
        if done {
            return got;
        }
    }
    panic!("no reply to {serial} in 100 messages");
}

/// A raw connection (to the bus or the filter) after `Hello`: its stream and unique name.
fn raw_hello(mut s: UnixStream) -> (UnixStream, String) {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let me = nix::unistd::getuid().as_raw();
    s.write_all(format!("\0AUTH EXTERNAL {}\r\n", hex_uid(me)).as_bytes())
        .unwrap();
    let ok = line(&mut s);
    assert!(ok.starts_with("OK "), "{ok:?}");
    s.write_all(&[&b"BEGIN\r\n"[..], &call(1, BUS, BUS, "Hello")].concat())
        .unwrap();
    let reply = until_reply(&mut s, 1).pop().unwrap();
    let body = (16 + u32_at(&reply, 12) as usize).div_ceil(8) * 8;
    let n = u32_at(&reply, body) as usize;
    let name = String::from_utf8(reply[body + 4..body + 4 + n].to_vec()).unwrap();
    (s, name)
}

/// The system bus's default policy (dbus's `system.conf`): no calls but the bus's own,
/// signals, and replies only when requested.
const SYSTEM_POLICY: &str = r#"
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
"#;

/// The filter passes a method return as it is (a reply is no call); whether an unrequested
/// one reaches another connection is the bus's policy: dbus-daemon drops it under the system
/// bus's default policy and even under one allowing every send, and delivers it only where rules
/// say `send_requested_reply="false"` and `receive_requested_reply="false"`.
#[test]
fn an_unrequested_reply_reaches_another_connection_only_by_the_buss_policy() {
    let _one = serial_lock();
    for (policy, delivered) in [
        (SYSTEM_POLICY, false),
        (OPEN_POLICY, false),
        // Only rules allowing unrequested replies on both ends let one through.
        (
            r#"<allow user="*"/><allow send_destination="*" send_requested_reply="false"/><allow receive_sender="*" receive_requested_reply="false"/>"#,
            true,
        ),
    ] {
        let Some(d) = DbusDaemon::private(policy) else {
            skip!("dbus-daemon is not installed (Debian: dbus-daemon)");
        };
        let (mut victim, victim_name) = raw_hello(UnixStream::connect(&d.socket).unwrap());
        let (client, filter_client) = UnixStream::pair().unwrap();
        let filter = spawn(filter_client, UnixStream::connect(&d.socket).unwrap()).unwrap();
        let (mut attacker, _) = raw_hello(client);
        let mut forged = Enc::new(false, 2, NO_REPLY_EXPECTED, 2);
        forged.field(5, "u", b"2");
        forged.field(6, "s", victim_name.as_bytes());
        forged.field(8, "g", b"s");
        let mut body = Enc {
            buf: Vec::new(),
            be: false,
        };
        body.string(b"forged by the query");
        attacker.write_all(&forged.finish(&body.buf)).unwrap();
        // The bus has dealt with the forged reply when it answers the next call.
        attacker.write_all(&call(3, BUS, BUS, "GetId")).unwrap();
        until_reply(&mut attacker, 3);
        victim.write_all(&call(2, BUS, BUS, "GetId")).unwrap();
        let got = until_reply(&mut victim, 2);
        let forged_seen = got
            .iter()
            .any(|m| m.windows(19).any(|w| w == b"forged by the query"));
        assert_eq!(forged_seen, delivered, "policy {policy}: {got:?}");
        drop(attacker);
        assert!(ends_within(filter));
    }
}

/// The filter relays `AUTH EXTERNAL` with any claimed uid; dbus-daemon compares it with the
/// credentials of the filter's bus socket and refuses another uid.
#[test]
fn a_claimed_uid_other_than_the_bus_sockets_is_rejected_by_the_bus() {
    let _one = serial_lock();
    let Some(d) = DbusDaemon::private(r#"<allow user="*"/>"#) else {
        skip!("dbus-daemon is not installed (Debian: dbus-daemon)");
    };
    let socket = &d.socket;
    let me = nix::unistd::getuid().as_raw();
    let (mut client, filter_client) = UnixStream::pair().unwrap();
    client.set_read_timeout(Some(WAIT)).unwrap();
    let bus = UnixStream::connect(socket).unwrap();
    let filter = spawn(filter_client, bus).unwrap();
    client
        .write_all(format!("\0AUTH EXTERNAL {}\r\n", hex_uid(me ^ 1)).as_bytes())
        .unwrap();
    let answer = line(&mut client);
    assert!(
        answer.starts_with("REJECTED"),
        "claiming uid {}: {answer:?}",
        me ^ 1
    );
    client
        .write_all(format!("AUTH EXTERNAL {}\r\n", hex_uid(me)).as_bytes())
        .unwrap();
    let answer = line(&mut client);
    assert!(answer.starts_with("OK "), "claiming uid {me}: {answer:?}");
    drop(client);
    assert!(ends_within(filter));
}

/// The filter relays one bus reply per client line and closes when the bus speaks out of
/// turn: dbus-daemon answers every command the filter relays with exactly one line, in every
/// state of its exchange, so the relay never waits for a reply that does not come nor
/// closes on a second one; the connection is then accepted.
#[test]
fn dbus_daemon_answers_each_relayed_line_once() {
    let _one = serial_lock();
    let Some(d) = DbusDaemon::private(OPEN_POLICY) else {
        skip!("dbus-daemon is not installed (Debian: dbus-daemon)");
    };
    let (mut client, filter_client) = UnixStream::pair().unwrap();
    client.set_read_timeout(Some(WAIT)).unwrap();
    let filter = spawn(filter_client, UnixStream::connect(&d.socket).unwrap()).unwrap();
    let me = hex_uid(nix::unistd::getuid().as_raw());
    client.write_all(b"\0").unwrap();
    let mut answers = Vec::new();
    for sent in [
        "AUTH".to_string(),
        "DATA".into(),
        "ERROR".into(),
        "CANCEL".into(),
        "AUTH EXTERNAL".into(),
        "DATA".into(),
        format!("AUTH EXTERNAL {me}"),
        "CANCEL".into(),
        format!("AUTH EXTERNAL {me}"),
    ] {
        client.write_all(format!("{sent}\r\n").as_bytes()).unwrap();
        let answer = line(&mut client);
        let word = answer.split([' ', '\r']).next().unwrap().to_string();
        answers.push(format!("{sent} -> {word}"));
    }
    let want = [
        "AUTH -> REJECTED".to_string(),
        "DATA -> ERROR".into(),
        "ERROR -> REJECTED".into(),
        "CANCEL -> ERROR".into(),
        "AUTH EXTERNAL -> DATA".into(),
        "DATA -> OK".into(),
        format!("AUTH EXTERNAL {me} -> ERROR"),
        "CANCEL -> REJECTED".into(),
        format!("AUTH EXTERNAL {me} -> OK"),
    ];
    assert_eq!(answers, want);
    client
        .write_all(&[&b"BEGIN\r\n"[..], &call(1, BUS, BUS, "Hello")].concat())
        .unwrap();
    until_reply(&mut client, 1);
    drop(client);
    assert!(ends_within(filter));
}
