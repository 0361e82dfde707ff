//! Tests of the D-Bus filter (`dbus_filter.rs`): its header reader on hand-made messages, the
//! filter between a test client and a test bus (socket pairs the test plays), and the filter
//! between `busctl`/`dbus-send` and a private `dbus-daemon` with an activatable service.

use super::*;
use std::io::{BufRead as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

/// A method call of `member` (path `/`), with the interface and destination given.
fn call(
    big_endian: bool,
    serial: u32,
    flags: u8,
    destination: Option<&str>,
    interface: Option<&str>,
    member: &str,
) -> Vec<u8> {
    let mut e = Encoder::new(big_endian, METHOD_CALL, flags, serial);
    e.field_str(1, 'o', "/");
    if let Some(i) = interface {
        e.field_str(2, 's', i);
    }
    e.field_str(3, 's', member);
    if let Some(d) = destination {
        e.field_str(6, 's', d);
    }
    e.finish(&[])
}

/// A message of `kind` whose header fields are `(code, type, value)`: `s`, `o` and `g` take
/// the value, `u` its number; any other type is its signature alone (no value follows).
fn message(kind: u8, serial: u32, fields: &[(u8, &str, &str)]) -> Vec<u8> {
    let mut e = Encoder::new(false, kind, 0, serial);
    for &(code, t, v) in fields {
        match t {
            "s" | "o" | "g" => e.field_str(code, t.chars().next().unwrap(), v),
            "u" => e.field_u32(code, v.parse().unwrap()),
            _ => {
                e.pad(8);
                e.buf.push(code);
                e.signature(t);
            }
        }
    }
    e.finish(&[])
}

/// A signal `org.skyhook.Test.Fire`.
fn signal(serial: u32) -> Vec<u8> {
    message(
        SIGNAL,
        serial,
        &[
            (1, "o", "/"),
            (2, "s", "org.skyhook.Test"),
            (3, "s", "Fire"),
        ],
    )
}

/// A call of the bus's own interface.
fn bus_call(serial: u32, member: &str) -> Vec<u8> {
    call(false, serial, 0, Some(BUS), Some(BUS), member)
}

/// A method return answering `serial`, with a string body.
fn method_return(serial: u32, reply_to: u32, body: &str) -> Vec<u8> {
    let mut b = Encoder::body(false);
    b.string(body);
    reply(serial, reply_to, None, None, "s", &b.buf)
}

/// A reply (an error when `error` names one) to call `reply_to`, to `destination`.
fn reply(
    serial: u32,
    reply_to: u32,
    destination: Option<&str>,
    error: Option<&str>,
    signature: &str,
    body: &[u8],
) -> Vec<u8> {
    let kind = if error.is_some() {
        ERROR
    } else {
        METHOD_RETURN
    };
    let mut e = Encoder::new(false, kind, NO_REPLY_EXPECTED, serial);
    e.field_u32(5, reply_to);
    if let Some(name) = error {
        e.field_str(4, 's', name);
    }
    if let Some(d) = destination {
        e.field_str(6, 's', d);
    }
    e.field_str(8, 'g', signature);
    e.finish(body)
}

fn header_of(msg: &[u8]) -> Header {
    let fixed: [u8; 16] = msg[..16].try_into().unwrap();
    assert_eq!(frame(&fixed, MAX_BUS_MESSAGE), Ok(msg.len()));
    parse(msg).unwrap()
}

/// The body's first string (an error's message).
fn first_string(msg: &[u8]) -> String {
    let h = header_of(msg);
    let fields = u32_at(msg, 12, h.big_endian) as usize;
    let body = align(16 + fields, 8);
    let len = u32_at(msg, body, h.big_endian) as usize;
    String::from_utf8(msg[body + 4..body + 4 + len].to_vec()).unwrap()
}

#[test]
fn a_header_is_read_in_either_byte_order() {
    for big_endian in [false, true] {
        let mut e = Encoder::new(big_endian, METHOD_CALL, NO_REPLY_EXPECTED, 7);
        e.field_str(1, 'o', "/org/freedesktop/systemd1");
        e.field_str(6, 's', SYSTEMD);
        e.field_str(2, 's', "org.freedesktop.systemd1.Manager");
        // An unknown field (the specification says to ignore it) between known ones.
        e.field_u32(42, 9);
        e.field_str(3, 's', "GetUnitFileState");
        e.field_str(8, 'g', "s");
        let mut body = Encoder::body(big_endian);
        body.string("ssh.service");
        let msg = e.finish(&body.buf);
        let (serial, fields) = (&msg[8..12], &msg[12..16]);
        if big_endian {
            assert_eq!((msg[0], serial), (b'B', &[0, 0, 0, 7][..]));
        } else {
            assert_eq!((msg[0], serial), (b'l', &[7, 0, 0, 0][..]));
        }
        // The last field (the signature) ends at 7 past an 8-boundary: the body is padded.
        assert_eq!(u32_at(fields, 0, big_endian), 175);
        assert_eq!(
            header_of(&msg),
            Header {
                big_endian,
                kind: METHOD_CALL,
                flags: NO_REPLY_EXPECTED,
                serial: 7,
                path: Some("/org/freedesktop/systemd1".into()),
                interface: Some("org.freedesktop.systemd1.Manager".into()),
                member: Some("GetUnitFileState".into()),
                destination: Some(SYSTEMD.into()),
                signature: Some("s".into()),
                ..Header::default()
            }
        );
        assert_eq!(judge(&header_of(&msg)), Verdict::Forward);
        assert_eq!(first_string(&msg), "ssh.service");
    }
}

/// Every malformed header is refused with a reason: the filter never guesses what the bus
/// would read (two `INTERFACE` fields, say, of which it might read the other).
#[test]
fn a_malformed_header_is_refused() {
    let good = bus_call(2, "ListNames");
    let mut unterminated = good.clone();
    let at = good.windows(10).position(|w| w == b"ListNames\0").unwrap();
    unterminated[at + 9] = b'X';
    let mut short_array = good.clone();
    let fields = u32_at(&good, 12, false) - 4;
    short_array[12..16].copy_from_slice(&fields.to_le_bytes());
    let set = |at: usize, b: u8| {
        let mut m = good.clone();
        m[at] = b;
        m
    };
    let call =
        |fields: &[(u8, &str, &str)]| message(METHOD_CALL, 2, &[&[(1, "o", "/")], fields].concat());
    let (peer, ping) = ((2, "s", "org.freedesktop.DBus.Peer"), (3, "s", "Ping"));
    #[rustfmt::skip]
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("byte order", set(0, b'x'), "unknown byte order"),
        ("version", set(3, 2), "protocol version 2"),
        ("type 0", set(1, 0), "unknown message type 0"),
        ("type 5", set(1, 5), "unknown message type 5"),
        ("serial 0", set(8, 0), "serial 0"),
        ("unterminated member", unterminated, "NUL-terminated"),
        ("array shorter than its fields", short_array, "runs past the field array"),
        ("interface twice", call(&[peer, ping, (2, "s", SYSTEMD)]), "field 2 appears twice"),
        ("interface as a path", call(&[(2, "o", "/org"), ping]), "field 2 is of type 'o', not 's'"),
        ("a container field", call(&[(2, "as", ""), ping]), "not a basic type"),
        ("an unknown field of an unknown type", call(&[(77, "v", ""), ping]), "unknown type 'v'"),
        ("a call without a member", call(&[peer]), "lacks a required field"),
        ("interface with a NUL", call(&[(2, "s", "org.freedesktop.DBus\0x"), ping]), "holds a NUL"),
    ];
    for (name, msg, want) in cases {
        let fixed: [u8; 16] = msg[..16].try_into().unwrap();
        let got = frame(&fixed, MAX_MESSAGE).and_then(|_| parse(&msg));
        match got {
            Err(why) => assert!(why.contains(want), "{name}: {why:?}, wanted {want:?}"),
            Ok(h) => panic!("{name}: read as {h:?}"),
        }
    }
    let mut big = Encoder::new(false, METHOD_CALL, 0, 2);
    big.field_str(1, 'o', "/");
    let big = big.finish(&vec![0; MAX_MESSAGE]);
    let fixed: [u8; 16] = big[..16].try_into().unwrap();
    assert_eq!(
        frame(&fixed, MAX_MESSAGE),
        Err(format!(
            "a message of {} bytes, over the limit of {MAX_MESSAGE}",
            big.len()
        ))
    );
}

#[test]
fn only_allowed_calls_at_their_destinations_are_forwarded() {
    let judged = |dest: Option<&str>, iface: Option<&str>, member: &str| {
        judge(&header_of(&call(false, 3, 0, dest, iface, member)))
    };
    let manager = Some("org.freedesktop.systemd1.Manager");
    assert_eq!(
        judged(Some(SYSTEMD), manager, "ListUnitsByPatterns"),
        Verdict::Forward
    );
    assert_eq!(
        judged(
            Some(":1.7"),
            Some("org.freedesktop.DBus.Properties"),
            "GetAll"
        ),
        Verdict::Forward
    );
    for (dest, iface, member) in [
        (Some(SYSTEMD), manager, "StartUnit"),
        (
            Some(SYSTEMD),
            Some("org.freedesktop.DBus.Properties"),
            "Set",
        ),
        // The manager's interface at another name, the bus's at systemd's.
        (Some(":1.0"), manager, "ListUnits"),
        (Some(SYSTEMD), Some(BUS), "ListNames"),
        (Some(BUS), Some(BUS), "StartServiceByName"),
        (Some(BUS), Some(BUS), "UpdateActivationEnvironment"),
        (Some(BUS), Some(BUS), "RequestName"),
        (Some(BUS), Some(BUS), "BecomeMonitor"),
        (Some(BUS), None, "ListNames"),
        (None, Some(BUS), "ListNames"),
    ] {
        assert!(
            matches!(judged(dest, iface, member), Verdict::Deny(_)),
            "{dest:?} {iface:?} {member} was not denied"
        );
    }
    let peer = [
        (1, "o", "/"),
        (2, "s", "org.freedesktop.DBus.Peer"),
        (3, "s", "Ping"),
    ];
    let fds = message(
        METHOD_CALL,
        3,
        &[&peer[..], &[(6, "s", BUS), (9, "u", "1")]].concat(),
    );
    assert_eq!(
        judge(&header_of(&fds)),
        Verdict::Deny("org.freedesktop.DBus.Peer.Ping passes file descriptors".into())
    );
    assert_eq!(judge(&header_of(&signal(3))), Verdict::Drop);
    assert_eq!(
        judge(&header_of(&method_return(4, 9, "x"))),
        Verdict::Forward
    );
}

// ---- The filter between a client and a bus the test plays. ----

/// A filter between two socket pairs: (the client's end, the bus's end, the filter's thread).
fn filtered() -> (UnixStream, UnixStream, JoinHandle<()>) {
    let (client, filter_client) = UnixStream::pair().unwrap();
    let (bus, filter_bus) = UnixStream::pair().unwrap();
    for s in [&client, &bus] {
        s.set_read_timeout(Some(WAIT)).unwrap();
    }
    (client, bus, spawn(filter_client, filter_bus).unwrap())
}

fn read_n(s: &mut UnixStream, n: usize) -> Vec<u8> {
    let mut b = vec![0; n];
    s.read_exact(&mut b).unwrap();
    b
}

fn read_message(s: &mut UnixStream) -> Vec<u8> {
    try_read_message(s).unwrap()
}

fn try_read_message(s: &mut UnixStream) -> io::Result<Vec<u8>> {
    let mut m = vec![0; 16];
    s.read_exact(&mut m)?;
    let len = frame(&m[..16].try_into().unwrap(), MAX_BUS_MESSAGE).map_err(bad)?;
    m.resize(len, 0);
    s.read_exact(&mut m[16..])?;
    Ok(m)
}

/// True when `s` reaches its end (after whatever is still to be read) within [`WAIT`].
fn ends(s: &mut UnixStream) -> bool {
    let mut sink = Vec::new();
    s.read_to_end(&mut sink).is_ok()
}

/// True when the filter's thread ends within [`WAIT`].
fn ends_within(t: JoinHandle<()>) -> bool {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = t.join();
        let _ = tx.send(());
    });
    rx.recv_timeout(WAIT).is_ok()
}

const GUID: &str = "OK 0123456789abcdef0123456789abcdef";

/// sd-bus's pipelined handshake and `Hello`, through the filter to the test's bus; returns
/// the `Hello` as the bus received it.
fn begin(client: &mut UnixStream, bus: &mut UnixStream) -> Vec<u8> {
    let mut hello = b"\0AUTH EXTERNAL 30\r\nNEGOTIATE_UNIX_FD\r\nBEGIN\r\n".to_vec();
    hello.extend(bus_call(1, "Hello"));
    client.write_all(&hello).unwrap();
    assert_eq!(read_n(bus, 19), b"\0AUTH EXTERNAL 30\r\n");
    bus.write_all(format!("{GUID}\r\n").as_bytes()).unwrap();
    // NEGOTIATE_UNIX_FD never reaches the bus: BEGIN comes next.
    assert_eq!(String::from_utf8(read_n(bus, 7)).unwrap(), "BEGIN\r\n");
    let reply = format!("{GUID}\r\nERROR\r\n");
    assert_eq!(
        String::from_utf8(read_n(client, reply.len())).unwrap(),
        reply
    );
    read_message(bus)
}

#[test]
fn the_handshake_is_relayed_and_descriptor_passing_never_agreed() {
    let (mut client, mut bus, filter) = filtered();
    let hello = begin(&mut client, &mut bus);
    assert_eq!(hello[2], NO_AUTO_START, "the Hello's flags");
    assert_eq!(hello[3..], bus_call(1, "Hello")[3..]);
    drop(client);
    assert!(ends(&mut bus) && ends_within(filter));

    // A bus that agreed anyway (it was never asked) is refused to the client too, and the
    // client's other commands get their replies in order.
    let (mut client, mut bus, filter) = filtered();
    client
        .write_all(b"\0AUTH\r\nFOO\r\nAUTH EXTERNAL\r\nDATA 30\r\n")
        .unwrap();
    let mut expect = |bus_gets: &str, bus_says: &str| {
        assert_eq!(
            String::from_utf8(read_n(&mut bus, bus_gets.len())).unwrap(),
            bus_gets
        );
        bus.write_all(bus_says.as_bytes()).unwrap();
    };
    expect("\0AUTH\r\n", "REJECTED EXTERNAL\r\n");
    expect("AUTH EXTERNAL\r\n", "DATA\r\n");
    expect("DATA 30\r\n", "AGREE_UNIX_FD\r\n");
    let want = "REJECTED EXTERNAL\r\nERROR \"unknown command\"\r\nDATA\r\nERROR\r\n";
    assert_eq!(
        String::from_utf8(read_n(&mut client, want.len())).unwrap(),
        want
    );
    // Not accepted (the bus said no OK): BEGIN closes the connection.
    client.write_all(b"BEGIN\r\n").unwrap();
    assert!(ends(&mut client) && ends(&mut bus) && ends_within(filter));
}

/// The hex of `uid`'s decimal ASCII (`AUTH EXTERNAL`'s identity).
fn hex_of(uid: u32) -> String {
    uid.to_string()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A bus connection made as another user (`spawn_as`): a claim of exactly the query
/// user's uid is rewritten to the bus user's, in `AUTH EXTERNAL <hex>` (libdbus) and in
/// the `DATA <hex>` that follows a bare `AUTH EXTERNAL` (sd-bus); any other claim, a
/// `DATA` of another mechanism and every other line pass unchanged.
#[test]
fn a_claim_of_the_query_uid_is_rewritten_to_the_bus_users_and_no_other() {
    let claim = Claim {
        query: 2147478695,
        bus: 65534,
    };
    let (q, b) = (hex_of(claim.query), hex_of(claim.bus));
    assert_eq!(b, "3635353334");
    let run = |lines: &[&str]| -> Vec<String> {
        let mut external = false;
        lines
            .iter()
            .map(|l| {
                let out = rewrite_claim(l.as_bytes().to_vec(), &mut external, claim);
                String::from_utf8(out).unwrap()
            })
            .collect()
    };
    assert_eq!(
        run(&[&format!("AUTH EXTERNAL {q}")]),
        [format!("AUTH EXTERNAL {b}")]
    );
    // Upper-case hex is the same claim.
    let upper = q.to_uppercase();
    assert_eq!(
        run(&[&format!("AUTH EXTERNAL {upper}")]),
        [format!("AUTH EXTERNAL {b}")]
    );
    assert_eq!(
        run(&["AUTH EXTERNAL", &format!("DATA {q}")]),
        ["AUTH EXTERNAL".to_string(), format!("DATA {b}")]
    );
    // Unchanged: another uid (root's, a prefix of the query's, the query's with a digit
    // more), the bare sd-bus DATA, a DATA without AUTH EXTERNAL before it or of another
    // mechanism, a second DATA, a claim with more words, other lines.
    let unchanged = [
        vec!["AUTH EXTERNAL 30".to_string()],
        vec![format!("AUTH EXTERNAL {}", hex_of(214747869))],
        vec![format!("AUTH EXTERNAL {}", hex_of(2147478695) + "30")],
        vec!["AUTH EXTERNAL".into(), "DATA".into()],
        vec![format!("DATA {q}")],
        vec!["AUTH ANONYMOUS".into(), format!("DATA {q}")],
        vec!["AUTH EXTERNAL".into(), "DATA".into(), format!("DATA {q}")],
        vec!["AUTH EXTERNAL".into(), "CANCEL".into(), format!("DATA {q}")],
        vec![format!("AUTH EXTERNAL {q} x")],
        vec![format!("AUTH EXTERNAL {q}0")],
        vec!["NEGOTIATE_UNIX_FD".into(), "BEGIN".into()],
    ];
    for lines in unchanged {
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        assert_eq!(run(&lines), lines, "rewritten");
    }
}

/// Through the filter (`spawn_as`, the bus played by the test): the bus receives the
/// rewritten claim; without a claim to rewrite (`spawn`) it receives the client's.
#[test]
fn the_bus_receives_the_rewritten_claim_through_the_filter() {
    let claim = Claim {
        query: 2147478690,
        bus: 65534,
    };
    let (client, filter_client) = UnixStream::pair().unwrap();
    let (bus, filter_bus) = UnixStream::pair().unwrap();
    for s in [&client, &bus] {
        s.set_read_timeout(Some(WAIT)).unwrap();
    }
    let filter = spawn_as(filter_client, filter_bus, claim, ()).unwrap();
    let (mut client, mut bus) = (client, bus);
    let sent = format!("\0AUTH EXTERNAL {}\r\n", hex_of(claim.query));
    client.write_all(sent.as_bytes()).unwrap();
    let want = format!("\0AUTH EXTERNAL {}\r\n", hex_of(claim.bus));
    assert_eq!(text(&read_n(&mut bus, want.len())), want);
    bus.write_all(format!("{GUID}\r\n").as_bytes()).unwrap();
    assert_eq!(text(&read_line(&mut client)), format!("{GUID}\r\n"));
    drop(client);
    assert!(ends(&mut bus) && ends_within(filter));

    let (mut client, mut bus, filter) = filtered();
    client.write_all(sent.as_bytes()).unwrap();
    assert_eq!(text(&read_n(&mut bus, sent.len())), sent);
    bus.write_all(b"REJECTED EXTERNAL\r\n").unwrap();
    assert_eq!(text(&read_line(&mut client)), "REJECTED EXTERNAL\r\n");
    drop(client);
    assert!(ends(&mut bus) && ends_within(filter));
}

#[test]
fn a_call_off_the_allowlist_is_denied_and_never_reaches_the_bus() {
    let (mut client, mut bus, filter) = filtered();
    begin(&mut client, &mut bus);
    let quiet = call(
        false,
        3,
        NO_REPLY_EXPECTED,
        Some(BUS),
        Some(BUS),
        "UpdateActivationEnvironment",
    );
    let sent = [
        bus_call(2, "StartServiceByName"),
        quiet,
        signal(4),
        call(true, 5, 0, Some(BUS), Some(BUS), "ListNames"),
    ]
    .concat();
    client.write_all(&sent).unwrap();
    // The bus answers Hello; the filter's error waits for that reply to reach the client.
    bus.write_all(&method_return(1, 1, ":1.1")).unwrap();
    let list = read_message(&mut bus);
    let h = header_of(&list);
    assert_eq!(
        (h.serial, h.member.as_deref(), h.big_endian),
        (5, Some("ListNames"), true)
    );
    assert_eq!(h.flags, NO_AUTO_START);
    bus.write_all(&method_return(2, 5, "names")).unwrap();

    assert_eq!(header_of(&read_message(&mut client)).reply_serial, Some(1));
    let denied = read_message(&mut client);
    let h = header_of(&denied);
    assert_eq!(
        (
            h.kind,
            h.reply_serial,
            h.error_name.as_deref(),
            h.signature.as_deref()
        ),
        (ERROR, Some(2), Some(ACCESS_DENIED), Some("s"))
    );
    assert_eq!(
        first_string(&denied),
        "skyhook D-Bus filter: org.freedesktop.DBus.StartServiceByName (to org.freedesktop.DBus) \
         is not a read-only call this filter forwards"
    );
    // Nothing for the call that wanted no reply nor for the signal: the next is ListNames'.
    assert_eq!(header_of(&read_message(&mut client)).reply_serial, Some(5));
    drop(bus);
    assert!(ends(&mut client) && ends_within(filter));
}

#[test]
fn a_message_the_filter_cannot_read_closes_both_sides() {
    let mut garbage = bus_call(2, "ListNames");
    garbage[0] = b'x';
    let mut oversized = bus_call(2, "ListNames");
    oversized[4..8].copy_from_slice(&(MAX_MESSAGE as u32).to_le_bytes());
    let mut twice = Encoder::new(false, METHOD_CALL, 0, 2);
    twice.field_str(1, 'o', "/");
    twice.field_str(6, 's', BUS);
    twice.field_str(2, 's', "org.freedesktop.DBus.Peer");
    twice.field_str(3, 's', "Ping");
    twice.field_str(2, 's', BUS);
    for (name, bad) in [
        ("garbage", garbage),
        ("oversized", oversized[..16].to_vec()),
        ("interface twice", twice.finish(&[])),
    ] {
        let (mut client, mut bus, filter) = filtered();
        begin(&mut client, &mut bus);
        client.write_all(&bad).unwrap();
        assert!(ends(&mut bus), "{name}: the bus side stayed open");
        assert!(ends(&mut client), "{name}: the client side stayed open");
        assert!(
            ends_within(filter),
            "{name}: the filter's thread did not end"
        );
    }
    // A first message other than Hello.
    let (mut client, mut bus, filter) = filtered();
    client.write_all(b"\0AUTH EXTERNAL 30\r\n").unwrap();
    read_n(&mut bus, 19);
    bus.write_all(format!("{GUID}\r\n").as_bytes()).unwrap();
    client.write_all(b"BEGIN\r\n").unwrap();
    client.write_all(&bus_call(1, "ListNames")).unwrap();
    assert_eq!(read_n(&mut bus, 7), b"BEGIN\r\n");
    assert!(ends(&mut bus) && ends_within(filter));
}

#[test]
fn the_filter_ends_when_either_side_closes() {
    // The client closes during authentication, and after it.
    let (client, mut bus, filter) = filtered();
    drop(client);
    assert!(ends(&mut bus) && ends_within(filter));
    let (mut client, mut bus, filter) = filtered();
    begin(&mut client, &mut bus);
    drop(client);
    assert!(ends(&mut bus) && ends_within(filter));
    // The bus closes while the filter waits for the client's next line, and after BEGIN.
    let (mut client, bus, filter) = filtered();
    client.write_all(b"\0").unwrap();
    drop(bus);
    assert!(ends(&mut client) && ends_within(filter));
    let (mut client, mut bus, filter) = filtered();
    begin(&mut client, &mut bus);
    drop(bus);
    assert!(ends(&mut client) && ends_within(filter));
}

/// At most the bound of connections are filtered at once (each holds two threads): one more
/// is refused with `EAGAIN`; when one ends its place is free again.
#[test]
fn no_more_connections_than_the_bound_are_filtered_at_once() {
    static THREE: Budget = Budget::new(3);
    let open = || {
        let (client, filter_client) = UnixStream::pair().unwrap();
        let (bus, filter_bus) = UnixStream::pair().unwrap();
        (
            client,
            bus,
            spawn_counted(filter_client, filter_bus, &THREE, None, ()),
        )
    };
    let mut running: Vec<_> = (0..3).map(|_| open()).collect();
    assert!(running.iter().all(|(_, _, t)| t.is_ok()));
    let (_, _, refused) = open();
    assert_eq!(refused.unwrap_err().raw_os_error(), Some(libc::EAGAIN));
    let (client, _bus, filter) = running.pop().unwrap();
    drop(client);
    assert!(ends_within(filter.unwrap()));
    let (client, _bus, again) = open();
    assert!(again.is_ok(), "{again:?}");
    running.push((client, _bus, again));
    for (client, _bus, filter) in running {
        drop(client);
        assert!(ends_within(filter.unwrap()));
    }
    assert_eq!(THREE.count.load(Ordering::Acquire), 0);
}

// ---- The filter between real clients and a private dbus-daemon. ----

const MARKER_NAME: &str = "org.skyhook.Test.Marker";

/// A private `dbus-daemon` in a temporary directory: a permissive policy, `EXTERNAL`
/// authentication, and one activatable service, `org.skyhook.Test.Marker`, whose program
/// writes `marker` and exits with 3.
struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Daemon {
    /// `None` (the test skipped, or failed under `SKYHOOK_REQUIRE_ALL=1`) without
    /// `dbus-daemon`, `busctl` or `dbus-send`.
    fn start() -> Option<Daemon> {
        for tool in ["dbus-daemon", "busctl", "dbus-send"] {
            // Found when it starts (dbus-send has no --version: it exits 1).
            let found = Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok();
            if !found {
                crate::host::testutil::skip(&format!(
                    "{tool} is not installed (Debian: dbus-daemon, dbus-bin, systemd)"
                ));
                return None;
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let socket = d.join("bus.sock");
        std::fs::create_dir(d.join("services")).unwrap();
        let (script, marker) = (d.join("mark.sh"), d.join("marker").display().to_string());
        // Exiting non-zero fails the activation at once (with 0 the bus waits for the name,
        // taking the service for one that went to the background).
        std::fs::write(
            &script,
            format!("#!/bin/sh\necho activated > {marker}\nexit 3\n"),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let service = format!(
            "[D-BUS Service]\nName={MARKER_NAME}\nExec={}\n",
            script.display()
        );
        std::fs::write(d.join(format!("services/{MARKER_NAME}.service")), service).unwrap();
        let config = d.join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <servicedir>{}</servicedir>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                socket.display(),
                d.join("services").display()
            ),
        )
        .unwrap();
        let mut child = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(d.join("daemon.log")).unwrap())
            .spawn()
            .unwrap();
        // It prints its address once it listens.
        let mut address = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut address)
            .unwrap();
        assert!(
            address.starts_with("unix:path="),
            "dbus-daemon did not start: {address:?} {}",
            std::fs::read_to_string(d.join("daemon.log")).unwrap_or_default()
        );
        Some(Daemon { child, dir, socket })
    }

    fn marker(&self) -> PathBuf {
        self.dir.path().join("marker")
    }

    /// `busctl` straight to the daemon.
    fn busctl_direct(&self, args: &[&str]) -> Output {
        busctl(&format!("unix:path={}", self.socket.display()), args)
    }

    /// Runs `client` with the address of a listener whose one connection the test hands to
    /// [`spawn`] with a fresh connection to the daemon; checks the filter's thread ended
    /// with the client.
    fn through_filter<T>(&self, client: impl FnOnce(&str, &Path) -> T) -> T {
        let path = self.dir.path().join("filter.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let bus_path = self.socket.clone();
        let acceptor = std::thread::spawn(move || {
            let mut p = libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut p, 1, WAIT.as_millis() as i32) } != 1 {
                return None;
            }
            let (client, _) = listener.accept().unwrap();
            let bus = UnixStream::connect(&bus_path).unwrap();
            Some(spawn(client, bus).unwrap())
        });
        let out = client(&format!("unix:path={}", path.display()), &path);
        let filter = acceptor
            .join()
            .unwrap()
            .expect("the client never connected");
        assert!(
            ends_within(filter),
            "the filter's thread outlived its client"
        );
        out
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn busctl(address: &str, args: &[&str]) -> Output {
    Command::new("busctl")
        .arg(format!("--address={address}"))
        .arg("--timeout=10")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn words(s: &str) -> Vec<&str> {
    s.split(' ').collect()
}

/// The `EXTERNAL` identity of this process: its uid in decimal, hex-encoded.
fn hex_uid() -> String {
    let uid = nix::unistd::getuid().to_string();
    uid.bytes().map(|b| format!("{b:02x}")).collect()
}

/// One authentication line, with its `\r\n`.
fn read_line(s: &mut UnixStream) -> Vec<u8> {
    let mut line = Vec::new();
    while !line.ends_with(b"\r\n") {
        line.extend(read_n(s, 1));
    }
    line
}

const DBUS_PATH: &str = "/org/freedesktop/DBus";

#[test]
fn reads_pass_the_filter_to_a_real_bus() {
    let Some(d) = Daemon::start() else { return };
    let introspect =
        format!("call {BUS} {DBUS_PATH} org.freedesktop.DBus.Introspectable Introspect");
    let get_all = format!("call {BUS} {DBUS_PATH} org.freedesktop.DBus.Properties GetAll s {BUS}");
    #[rustfmt::skip]
    let reads = [
        (format!("call {BUS} {DBUS_PATH} {BUS} ListNames"), "\"org.freedesktop.DBus\""),
        (introspect, "<interface name=\\\"org.freedesktop.DBus.Properties\\\">"),
        (get_all, "\"Features\""),
        (format!("call {BUS} {DBUS_PATH} {BUS} GetNameOwner s {BUS}"), "s \"org.freedesktop.DBus\""),
    ];
    for (args, want) in reads {
        let args = words(&args);
        let out = d.through_filter(|address, _| busctl(address, &args));
        assert!(
            out.status.success() && text(&out.stdout).contains(want),
            "busctl {args:?}: {out:?}"
        );
    }
    // libdbus's handshake (one line at a time) too.
    let out = d.through_filter(|address, _| {
        dbus_send(
            address,
            BUS,
            DBUS_PATH,
            "org.freedesktop.DBus.ListActivatableNames",
            &[],
        )
    });
    assert!(
        out.status.success() && text(&out.stdout).contains(&format!("string \"{MARKER_NAME}\"")),
        "dbus-send: {out:?}"
    );
}

/// `dbus-send` (libdbus) calling `member` (interface.member) with `args`, printing the reply.
fn dbus_send(address: &str, dest: &str, path: &str, member: &str, args: &[&str]) -> Output {
    Command::new("dbus-send")
        .arg(format!("--bus={address}"))
        .arg("--print-reply")
        .arg(format!("--dest={dest}"))
        .args([path, member])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// What sd-bus shows of any `AccessDenied` (it replaces the message; systemctl's exit code is
/// 4, "no permission"); libdbus shows the filter's reason.
const SD_BUS_DENIED: &str = "Access denied";

fn denied_text(member: &str, dest: &str) -> String {
    format!(
        "Error org.freedesktop.DBus.Error.AccessDenied: skyhook D-Bus filter: {member} (to {dest}) \
         is not a read-only call this filter forwards"
    )
}

#[test]
fn a_call_through_the_filter_never_activates_a_service() {
    let Some(d) = Daemon::start() else { return };
    let ping = [
        "call",
        MARKER_NAME,
        "/",
        "org.freedesktop.DBus.Peer",
        "Ping",
    ];
    let out = d.through_filter(|address, _| busctl(address, &ping));
    // The bus's answer to a call that may not start its destination.
    assert!(
        text(&out.stderr).contains(&format!("Name \"{MARKER_NAME}\" does not exist")),
        "{out:?}"
    );
    assert!(
        !d.marker().exists(),
        "activated through the filter: {out:?}"
    );
    // A call the filter refuses does not activate either.
    let out = d.through_filter(|address, _| {
        busctl(
            address,
            &["call", MARKER_NAME, "/", "org.skyhook.Test", "Do"],
        )
    });
    assert!(text(&out.stderr).contains(SD_BUS_DENIED), "{out:?}");
    let out = d.through_filter(|address, _| {
        dbus_send(address, MARKER_NAME, "/", "org.skyhook.Test.Do", &[])
    });
    assert!(
        text(&out.stderr).contains(&denied_text("org.skyhook.Test.Do", MARKER_NAME)),
        "{out:?}"
    );
    assert!(
        !d.marker().exists(),
        "activated through the filter: {out:?}"
    );
    // The control: the same Ping straight to the bus starts the service (which exits).
    let out = d.busctl_direct(&ping);
    assert!(
        d.marker().exists(),
        "the direct call did not activate: {out:?}"
    );
}

#[test]
fn starting_a_service_or_changing_the_activation_environment_is_denied() {
    let Some(d) = Daemon::start() else { return };
    let start = format!("call {BUS} {DBUS_PATH} {BUS} StartServiceByName su {MARKER_NAME} 0");
    let env = format!("call {BUS} {DBUS_PATH} {BUS} UpdateActivationEnvironment a{{ss}} 1 A b");
    let (start, env) = (words(&start), words(&env));
    let name = format!("string:{MARKER_NAME}");
    for (busctl_args, send_args) in [
        (&start[..], &[name.as_str(), "uint32:0"][..]),
        (&env[..], &["dict:string:string:A,b"][..]),
    ] {
        let member = format!("{BUS}.{}", busctl_args[4]);
        let out = d.through_filter(|address, _| busctl(address, busctl_args));
        assert!(
            !out.status.success() && text(&out.stderr).contains(SD_BUS_DENIED),
            "busctl {member}: {out:?}"
        );
        let out =
            d.through_filter(|address, _| dbus_send(address, BUS, DBUS_PATH, &member, send_args));
        assert!(
            text(&out.stderr).contains(&denied_text(&member, BUS)),
            "dbus-send {member}: {out:?}"
        );
        assert!(
            !d.marker().exists(),
            "{member} through the filter started the service"
        );
    }
    let out = d.busctl_direct(&start);
    assert!(
        d.marker().exists(),
        "the direct StartServiceByName did not start it: {out:?}"
    );
}

/// A raw client's handshake and `Hello` through the filter; returns its connection after
/// the `Hello` reply.
fn raw_hello(path: &Path) -> UnixStream {
    let mut s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(format!("\0AUTH EXTERNAL {}\r\n", hex_uid()).as_bytes())
        .unwrap();
    let ok = read_line(&mut s);
    assert!(ok.starts_with(b"OK "), "{}", text(&ok));
    s.write_all(&[&b"BEGIN\r\n"[..], &bus_call(1, "Hello")].concat())
        .unwrap();
    assert_eq!(header_of(&read_message(&mut s)).reply_serial, Some(1));
    s
}

#[test]
fn an_oversized_message_or_the_clients_end_closes_a_real_connection() {
    let Some(d) = Daemon::start() else { return };
    d.through_filter(|_, path| {
        let mut s = raw_hello(path);
        let mut huge = bus_call(2, "ListNames");
        huge[4..8].copy_from_slice(&(2 * MAX_MESSAGE as u32).to_le_bytes());
        s.write_all(&huge).unwrap();
        // The bus's NameAcquired signal may come first; then the end.
        assert!(ends(&mut s), "the connection stayed open");
    });
    d.through_filter(|_, path| drop(raw_hello(path)));
    let out = d.busctl_direct(&["call", BUS, DBUS_PATH, BUS, "GetId"]);
    assert!(
        out.status.success(),
        "the bus itself is still there: {out:?}"
    );
}

/// The leading string arguments of a message's body (as far as its signature is `s`/`o`).
fn body_strings(msg: &[u8]) -> Vec<String> {
    let h = header_of(msg);
    let mut pos = align(16 + u32_at(msg, 12, h.big_endian) as usize, 8);
    let mut out = Vec::new();
    for t in h.signature.unwrap_or_default().chars() {
        if t != 's' && t != 'o' {
            break;
        }
        pos = align(pos, 4);
        let len = u32_at(msg, pos, h.big_endian) as usize;
        out.push(text(&msg[pos + 4..pos + 4 + len]));
        pos += 4 + len + 1;
    }
    out
}

/// A stand-in for systemd on the private bus, connected straight to it: it owns
/// `org.freedesktop.systemd1` and answers `Properties.Get`/`GetAll` (a unit that is
/// `loaded`, `active`, `running`) and `GetUnitFileState` (`enabled`); any other call gets
/// an `UnknownMethod` error `fake systemd: no <member>`. It ends with the bus.
fn fake_systemd(socket: &Path) -> JoinHandle<()> {
    let mut s = UnixStream::connect(socket).unwrap();
    let mut request = Encoder::body(false);
    request.string(SYSTEMD);
    request.u32(4); // DBUS_NAME_FLAG_DO_NOT_QUEUE
    let mut e = Encoder::new(false, METHOD_CALL, 0, 2);
    e.field_str(1, 'o', DBUS_PATH);
    e.field_str(2, 's', BUS);
    e.field_str(3, 's', "RequestName");
    e.field_str(6, 's', BUS);
    e.field_str(8, 'g', "su");
    let start = [
        format!("\0AUTH EXTERNAL {}\r\nBEGIN\r\n", hex_uid()).as_bytes(),
        &bus_call(1, "Hello"),
        &e.finish(&request.buf),
    ]
    .concat();
    s.write_all(&start).unwrap();
    read_line(&mut s);
    // Owning the name: the RequestName reply (1, the primary owner).
    while header_of(&read_message(&mut s)).reply_serial != Some(2) {}
    let props = [
        ("Id", "ssh.service"),
        ("LoadState", "loaded"),
        ("ActiveState", "active"),
        ("SubState", "running"),
    ];
    std::thread::spawn(move || {
        let mut serial = 10;
        while let Ok(msg) = try_read_message(&mut s) {
            let h = header_of(&msg);
            if h.kind != METHOD_CALL {
                continue;
            }
            let args = body_strings(&msg);
            let member = h.member.clone().unwrap_or_default();
            let mut body = Encoder::body(false);
            let sig = match (h.interface.as_deref().unwrap_or_default(), member.as_str()) {
                ("org.freedesktop.DBus.Properties", "Get") => {
                    let name = args.get(1).cloned().unwrap_or_default();
                    match props.iter().find(|(k, _)| *k == name) {
                        Some((_, v)) => {
                            body.signature("s");
                            body.string(v);
                            Some("v")
                        }
                        None => None,
                    }
                }
                ("org.freedesktop.DBus.Properties", "GetAll") => {
                    body.u32(0);
                    body.pad(8);
                    let start = body.buf.len();
                    for (k, v) in props {
                        body.pad(8);
                        body.string(k);
                        body.signature("s");
                        body.string(v);
                    }
                    let n = (body.buf.len() - start) as u32;
                    body.buf[0..4].copy_from_slice(&n.to_le_bytes());
                    Some("a{sv}")
                }
                ("org.freedesktop.systemd1.Manager", "GetUnitFileState") => {
                    body.string("enabled");
                    Some("s")
                }
                _ => None,
            };
            serial += 1;
            let to = h.sender.as_deref();
            let answer = match sig {
                Some(sig) => reply(serial, h.serial, to, None, sig, &body.buf),
                None => {
                    let mut b = Encoder::body(false);
                    b.string(&format!("fake systemd: no {member}"));
                    let unknown = Some("org.freedesktop.DBus.Error.UnknownMethod");
                    reply(serial, h.serial, to, unknown, "s", &b.buf)
                }
            };
            if s.write_all(&answer).is_err() {
                return;
            }
        }
    })
}

/// `systemctl` (sd-bus, as a plan's query runs it) through the filter to the private bus,
/// where a stand-in answers for systemd: the read verbs get their answers (`is-active`,
/// `show`, `status`, `is-enabled`), or the stand-in's own error (`list-units`,
/// `list-unit-files`: their calls were forwarded), and `start` is denied by the filter. As
/// root only (a mount namespace makes systemctl believe systemd runs);
/// `SYSTEMCTL_FORCE_BUS=1` takes root's systemctl to the bus as a user's.
#[test]
fn systemctls_reads_pass_the_filter_and_start_does_not() {
    if !nix::unistd::geteuid().is_root() {
        return crate::host::testutil::skip("needs root (a mount namespace for systemctl)");
    }
    let Some(d) = Daemon::start() else { return };
    let systemd = fake_systemd(&d.socket);
    let systemctl = |address: &str, args: &[&str]| {
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            // sd_booted(): systemctl refuses a system not booted with systemd.
            .arg("mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/system && exec systemctl \"$@\"")
            .arg("sh")
            .args(args)
            .env("SYSTEMCTL_FORCE_BUS", "1")
            .env("DBUS_SYSTEM_BUS_ADDRESS", address)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for (args, stdout) in [
        (&["is-active", "ssh.service"][..], "active\n"),
        (
            &["show", "-p", "ActiveState", "--value", "ssh.service"][..],
            "active\n",
        ),
        (&["is-enabled", "ssh.service"][..], "enabled\n"),
    ] {
        let out = d.through_filter(|address, _| systemctl(address, args));
        assert!(
            out.status.success() && text(&out.stdout) == stdout,
            "systemctl {args:?}: {out:?}"
        );
    }
    let out = d.through_filter(|address, _| systemctl(address, &["status", "ssh.service"]));
    assert!(
        text(&out.stdout).contains("Active: active (running)"),
        "systemctl status: {out:?}"
    );
    for (args, member) in [
        (&["list-units"][..], "ListUnitsFiltered"),
        (&["list-unit-files"][..], "ListUnitFiles"),
    ] {
        let out = d.through_filter(|address, _| systemctl(address, args));
        assert!(
            text(&out.stderr).contains(&format!("fake systemd: no {member}")),
            "systemctl {args:?}: {out:?}"
        );
    }
    // Denied by the filter: the stand-in would have answered "fake systemd: no StartUnit".
    let out = d.through_filter(|address, _| systemctl(address, &["start", "ssh.service"]));
    assert!(
        out.status.code() == Some(4) && text(&out.stderr).contains(SD_BUS_DENIED),
        "systemctl start: {out:?}"
    );
    drop(d);
    assert!(ends_within(systemd), "the stand-in outlived its bus");
}
