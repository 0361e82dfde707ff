//! A read-only filter for one D-Bus connection of a package plan's query.
//!
//! A query (`systemctl show`, `is-active`, `is-enabled`, `status`, `list-units` as a user
//! that is not root) asks systemd over the D-Bus system bus. Unfiltered, a query could do on
//! the bus whatever an unprivileged, sessionless user may: have a call D-Bus-activate a
//! service, call `StartServiceByName`, use polkit `allow_any` methods, emit signals. The
//! server's socket broker hands the query one end of a socket pair and [`spawn`] the other
//! (`client`), with a connection to the real bus made as the query user (`bus`), or
//! [`spawn_as`] with one made as the bus user (serve's `--plan-bus-user`); the filter
//! passes only reads.
//!
//! - **Authentication** (SASL, line by line, each line at most [`MAX_LINE`] bytes, at most
//!   [`MAX_AUTH_LINES`] of them): the client's leading NUL byte and its `AUTH`, `DATA`,
//!   `CANCEL` and `ERROR` lines go to the bus, and the bus's one reply to each comes back
//!   before the next line is read, so replies keep their order when a client pipelines (sd-bus
//!   sends `AUTH`, `NEGOTIATE_UNIX_FD` and `BEGIN` at once). `NEGOTIATE_UNIX_FD` never
//!   reaches the bus: the filter answers `ERROR` itself, so descriptor passing is never agreed
//!   on either side (a bus `AGREE_UNIX_FD` would become `ERROR` too). Any other command gets
//!   `ERROR`. `BEGIN` is forwarded only after the bus said `OK`; then messages flow. With
//!   a [`Claim`] ([`spawn_as`]: the bus connection's peer is the bus user, not the client),
//!   the client's `EXTERNAL` claim of exactly its own uid (`AUTH EXTERNAL <hex>`, or the
//!   `DATA <hex>` after a bare `AUTH EXTERNAL`) is rewritten to the bus user's; any other
//!   claim passes as it is, and the bus, which checks it against the peer, rejects it.
//! - **Client to bus**: every message's fixed header and header fields are read (either
//!   byte order, the specification's alignment, at most [`MAX_MESSAGE`] bytes, every string
//!   NUL-terminated and UTF-8, no field twice, known fields of their one type). A malformed
//!   message closes the connection. The first message must be `Hello`. A `METHOD_CALL` is
//!   forwarded only when it names a destination and an interface, passes no descriptor
//!   (`UNIX_FDS`), and its (interface, member) is a read (the allowlist below; the bus's own
//!   and systemd's manager interfaces only at their well-known names), and every forwarded
//!   call gets `NO_AUTO_START`, so no call starts a service. Any other call is answered by
//!   an `org.freedesktop.DBus.Error.AccessDenied` error (`REPLY_SERIAL` the call's serial,
//!   the reason in its body), unless it asked for no reply. A signal is dropped (it takes no
//!   reply). Method returns and errors pass (the bus routes only replies it expects).
//! - **Bus to client**: each message passes as it is, streamed in 64 KiB pieces; the filter
//!   only reads its length, so its own errors go in between whole messages, and only after
//!   the bus's first message (the `Hello` reply, which sd-bus requires first).
//!
//! Bounds: the filter holds at most one client message (≤ 1 MiB) and 64 KiB of the bus's
//! stream; a side that does not read blocks the filter (and so the other side), nothing
//! queues. Two threads and two descriptors per connection, at most [`MAX_CONNECTIONS`]
//! connections in the process; when either side closes, or a message is malformed, both
//! sockets are shut down and both threads end.
//!
//! Allowed calls:
//!
//! | interface | members | destination |
//! |---|---|---|
//! | `org.freedesktop.DBus` | `Hello`, `GetNameOwner`, `NameHasOwner`, `ListNames`, `ListActivatableNames`, `AddMatch`, `RemoveMatch`, `GetId`, `GetConnectionUnixUser`, `GetConnectionUnixProcessID`, `GetConnectionCredentials` | `org.freedesktop.DBus` |
//! | `org.freedesktop.DBus.Properties` | `Get`, `GetAll` | any |
//! | `org.freedesktop.DBus.Introspectable` | `Introspect` | any |
//! | `org.freedesktop.DBus.Peer` | `Ping`, `GetMachineId` | any |
//! | `org.freedesktop.systemd1.Manager` | `GetUnit`, `GetUnitByPID`, `LoadUnit`, `ListUnits`, `ListUnitsFiltered`, `ListUnitsByPatterns`, `ListUnitsByNames`, `ListUnitFiles`, `ListUnitFilesByPatterns`, `GetUnitFileState`, `GetDefaultTarget`, `GetUnitFileLinks`, `ListJobs`, `GetUnitProcesses` | `org.freedesktop.systemd1` |
//!
//! These are what systemctl's read verbs call as non-root (systemd's systemctl sources):
//! `show`/`status` take `Properties.GetAll` of the unit's path, `status` also
//! `GetUnitProcesses` for its CGroup tree; `is-active` `Properties.Get` of `ActiveState` and
//! `LoadState`; `is-enabled` `GetUnitFileState` (`--full`: `GetUnitFileLinks`); globs and
//! `list-units` `ListUnitsByPatterns`, falling back to `ListUnitsFiltered` on `AccessDenied`;
//! `list-unit-files` `ListUnitFilesByPatterns`; a PID `GetUnitByPID` (`GetUnitByPIDFD` needs
//! descriptor passing, so sd-bus falls back without sending it).

use std::io::{self, Read as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// The largest message a client may send through the filter, in bytes (header and body).
pub const MAX_MESSAGE: usize = 1 << 20;
/// The longest authentication line, in bytes without its `\r\n`.
pub const MAX_LINE: usize = 4096;
/// The most authentication lines a client may send before `BEGIN`.
pub const MAX_AUTH_LINES: usize = 64;

/// The largest message the bus may send (the specification's limit, 128 MiB); it is
/// streamed, never held whole.
const MAX_BUS_MESSAGE: usize = 1 << 27;
/// What one read takes from a socket, and so the most of the bus's stream held at once.
const CHUNK: usize = 64 << 10;

const METHOD_CALL: u8 = 1;
const METHOD_RETURN: u8 = 2;
const ERROR: u8 = 3;
const SIGNAL: u8 = 4;
const NO_REPLY_EXPECTED: u8 = 0x1;
const NO_AUTO_START: u8 = 0x2;

const BUS: &str = "org.freedesktop.DBus";
const SYSTEMD: &str = "org.freedesktop.systemd1";
const ACCESS_DENIED: &str = "org.freedesktop.DBus.Error.AccessDenied";

/// The read-only calls: (the destination it must name, or any; interface; members).
const ALLOWED: &[(Option<&str>, &str, &[&str])] = &[
    (
        Some(BUS),
        "org.freedesktop.DBus",
        &[
            "Hello",
            "GetNameOwner",
            "NameHasOwner",
            "ListNames",
            "ListActivatableNames",
            "AddMatch",
            "RemoveMatch",
            "GetId",
            "GetConnectionUnixUser",
            "GetConnectionUnixProcessID",
            "GetConnectionCredentials",
        ],
    ),
    (None, "org.freedesktop.DBus.Properties", &["Get", "GetAll"]),
    (None, "org.freedesktop.DBus.Introspectable", &["Introspect"]),
    (None, "org.freedesktop.DBus.Peer", &["Ping", "GetMachineId"]),
    (
        Some(SYSTEMD),
        "org.freedesktop.systemd1.Manager",
        &[
            "GetUnit",
            "GetUnitByPID",
            "LoadUnit",
            "ListUnits",
            "ListUnitsFiltered",
            "ListUnitsByPatterns",
            "ListUnitsByNames",
            "ListUnitFiles",
            "ListUnitFilesByPatterns",
            "GetUnitFileState",
            "GetDefaultTarget",
            "GetUnitFileLinks",
            "ListJobs",
            "GetUnitProcesses",
        ],
    ),
];

/// Pumps one D-Bus connection between a plan's query (`client`) and the system bus (`bus`,
/// connected as the query user) until either side closes, forwarding only read-only calls.
///
/// Both sockets are put in blocking mode. The thread ends, with both sockets shut down, when
/// either side closes, a message is malformed or over [`MAX_MESSAGE`] bytes, or
/// authentication fails; it leaves no other thread behind. Errors (the sockets are then
/// dropped, which closes them): [`MAX_CONNECTIONS`] filters run already (`EAGAIN`, what a
/// `connect` to a Unix socket whose queue is full returns), or the thread could not be
/// started.
pub fn spawn(client: UnixStream, bus: UnixStream) -> io::Result<JoinHandle<()>> {
    spawn_counted(client, bus, &LIVE, None, ())
}

/// The uid a client claims in `AUTH EXTERNAL` (its own, the query user's) and the one the
/// bus sees as the connection's peer (`SO_PEERCRED`, the bus user's): the filter rewrites a
/// claim of exactly `query` to `bus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// The client's own uid (the query user's).
    pub query: u32,
    /// The bus connection's peer uid (the bus user's).
    pub bus: u32,
}

/// [`spawn`] for a `bus` connection made as another user than the client's: `claim`
/// rewritten in authentication, and `hold` kept until the filter's thread ends (the
/// broker's count of connections made as that user).
///
/// # Errors
/// As [`spawn`].
pub fn spawn_as(
    client: UnixStream,
    bus: UnixStream,
    claim: Claim,
    hold: impl Send + 'static,
) -> io::Result<JoinHandle<()>> {
    spawn_counted(client, bus, &LIVE, Some(claim), hold)
}

/// The most filters (connections) running at once in the process: each holds two threads
/// and two descriptors.
pub const MAX_CONNECTIONS: usize = 256;

/// The filters running.
static LIVE: Budget = Budget::new(MAX_CONNECTIONS);

/// A count of live things (connections) with its bound, shared by threads: the filters
/// running ([`MAX_CONNECTIONS`]), and the socket broker's connections made as the bus user.
#[derive(Debug)]
pub(crate) struct Budget {
    count: AtomicUsize,
    max: usize,
}

impl Budget {
    pub(crate) const fn new(max: usize) -> Budget {
        Budget {
            count: AtomicUsize::new(0),
            max,
        }
    }

    /// One more, unless `max` are live.
    pub(crate) fn take(&self) -> bool {
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok()
    }

    /// One fewer (one [`Budget::take`] ended).
    pub(crate) fn give_back(&self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One running filter of a [`Budget`], given back when dropped.
struct Counted(&'static Budget);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.give_back();
    }
}

/// [`spawn`], counted in `live`, rewriting `claim` ([`spawn_as`]), holding `hold`.
fn spawn_counted(
    client: UnixStream,
    bus: UnixStream,
    live: &'static Budget,
    claim: Option<Claim>,
    hold: impl Send + 'static,
) -> io::Result<JoinHandle<()>> {
    if !live.take() {
        return Err(io::Error::from_raw_os_error(libc::EAGAIN));
    }
    let counted = Counted(live);
    let (client, bus) = (Arc::new(client), Arc::new(bus));
    std::thread::Builder::new()
        .name("dbus-filter".into())
        .spawn(move || {
            let (_counted, _hold) = (counted, hold);
            if let Err(e) = pump(&client, &bus, claim) {
                tracing::debug!("D-Bus filter: connection closed: {e}");
            }
            let _ = client.shutdown(std::net::Shutdown::Both);
            let _ = bus.shutdown(std::net::Shutdown::Both);
        })
}

fn bad(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// Authentication, then the two directions: client to bus on this thread, bus to client on
/// a second one, joined before returning.
fn pump(client: &Arc<UnixStream>, bus: &Arc<UnixStream>, claim: Option<Claim>) -> io::Result<()> {
    client.set_nonblocking(false)?;
    bus.set_nonblocking(false)?;
    let mut from_client = Reader::new(client.clone());
    let mut from_bus = Reader::new(bus.clone());
    authenticate(&mut from_client, &mut from_bus, client, bus, claim)?;

    let to_client = Arc::new(ToClient {
        stream: client.clone(),
        state: Mutex::new(ToClientState {
            bus_spoke: false,
            closed: false,
        }),
        spoke: Condvar::new(),
    });
    let down = {
        let to_client = to_client.clone();
        let (client, bus) = (client.clone(), bus.clone());
        std::thread::Builder::new()
            .name("dbus-filter-down".into())
            .spawn(move || {
                let r = bus_to_client(&mut from_bus, &to_client);
                to_client.lock().closed = true;
                to_client.spoke.notify_all();
                let _ = client.shutdown(std::net::Shutdown::Both);
                let _ = bus.shutdown(std::net::Shutdown::Both);
                r
            })?
    };
    let up = client_to_bus(&mut from_client, bus, &to_client);
    // Wakes the other direction (its read or write fails) so it can be joined.
    let _ = client.shutdown(std::net::Shutdown::Both);
    let _ = bus.shutdown(std::net::Shutdown::Both);
    let down = down
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the bus-to-client thread panicked")));
    up.and(down)
}

/// The SASL exchange, one client line at a time: each line the bus answers is forwarded
/// (with `claim`, its uid claim rewritten: [`rewrite_claim`]) and its reply relayed before
/// the next line is read.
fn authenticate(
    from_client: &mut Reader,
    from_bus: &mut Reader,
    client: &UnixStream,
    bus: &UnixStream,
    claim: Option<Claim>,
) -> io::Result<()> {
    let mut nul = [0u8; 1];
    from_client.exact(&mut nul, Some(bus))?;
    if nul[0] != 0 {
        return Err(bad("the client's first byte is not the credentials NUL"));
    }
    send_all(bus, &nul)?;
    let mut authenticated = false;
    let mut external = false;
    for _ in 0..MAX_AUTH_LINES {
        let mut line = from_client.line(Some(bus))?;
        if let Some(claim) = claim {
            line = rewrite_claim(line, &mut external, claim);
        }
        let command = line.split(|&b| b == b' ').next().unwrap_or_default();
        match command {
            b"BEGIN" if line == b"BEGIN" && authenticated => {
                return send_all(bus, b"BEGIN\r\n");
            }
            b"BEGIN" => return Err(bad("BEGIN before the bus accepted the client")),
            b"NEGOTIATE_UNIX_FD" => send_all(client, b"ERROR\r\n")?,
            b"AUTH" | b"DATA" | b"CANCEL" | b"ERROR" => {
                send_all(bus, &[&line[..], b"\r\n"].concat())?;
                let reply = from_bus.line(None)?;
                let answer = reply.split(|&b| b == b' ').next().unwrap_or_default();
                match answer {
                    b"OK" | b"REJECTED" | b"DATA" | b"ERROR" => {
                        authenticated = answer == b"OK";
                        send_all(client, &[&reply[..], b"\r\n"].concat())?;
                    }
                    b"AGREE_UNIX_FD" => send_all(client, b"ERROR\r\n")?,
                    _ => return Err(bad("the bus sent an unknown authentication reply")),
                }
            }
            _ => send_all(client, b"ERROR \"unknown command\"\r\n")?,
        }
    }
    Err(bad(format!(
        "more than {MAX_AUTH_LINES} authentication lines"
    )))
}

/// One client authentication `line` with a uid claim of exactly `claim.query` rewritten to
/// `claim.bus`: `AUTH EXTERNAL <hex>` (the hex of the uid's decimal ASCII, libdbus's
/// initial response), or `DATA <hex>` after an `AUTH EXTERNAL` without one (`external`,
/// kept across lines: set by `AUTH EXTERNAL`, cleared by the next `DATA`, any other `AUTH`
/// or `CANCEL`). Any other line, or claim, passes unchanged (a claim of another uid then
/// fails at the bus, which checks it against the connection's peer, as before). A rewritten
/// line is at most 34 bytes (a uid has at most 10 digits). It gives a client nothing it
/// could not claim itself: the bus takes the bus user's claim only from a connection whose
/// peer is the bus user.
fn rewrite_claim(line: Vec<u8>, external: &mut bool, claim: Claim) -> Vec<u8> {
    let words: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let hex = match words[..] {
        [b"AUTH", b"EXTERNAL", ..] => {
            *external = words.len() == 2;
            words.get(2).copied()
        }
        [b"AUTH", ..] | [b"CANCEL", ..] => {
            *external = false;
            None
        }
        [b"DATA", ..] => std::mem::take(external)
            .then(|| words.get(1).copied())
            .flatten(),
        _ => None,
    };
    let query = claim.query.to_string();
    let byte = |pair: &[u8]| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok();
    let claims_query = hex.is_some_and(|h| {
        words.len() == if words[0] == b"AUTH" { 3 } else { 2 }
            && h.len() == 2 * query.len()
            && h.chunks(2)
                .zip(query.bytes())
                .all(|(pair, digit)| byte(pair) == Some(digit))
    });
    if !claims_query {
        return line;
    }
    let bus: String = claim
        .bus
        .to_string()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    let head = words[..words.len() - 1].join(&b' ');
    [&head[..], b" ", bus.as_bytes()].concat()
}

/// The client's messages: judged, forwarded with `NO_AUTO_START`, answered, or dropped.
fn client_to_bus(
    from_client: &mut Reader,
    bus: &UnixStream,
    to_client: &ToClient,
) -> io::Result<()> {
    let mut serial = 0u32;
    let mut first = true;
    loop {
        let mut fixed = [0u8; 16];
        match from_client.exact(&mut fixed, None) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            r => r?,
        }
        let len = frame(&fixed, MAX_MESSAGE).map_err(bad)?;
        let mut msg = vec![0u8; len];
        msg[..16].copy_from_slice(&fixed);
        from_client.exact(&mut msg[16..], None)?;
        let header = parse(&msg).map_err(bad)?;
        let verdict = judge(&header);
        if std::mem::take(&mut first)
            && !(verdict == Verdict::Forward && header.member.as_deref() == Some("Hello"))
        {
            return Err(bad("the first message is not Hello"));
        }
        match verdict {
            Verdict::Forward => {
                if header.kind == METHOD_CALL {
                    msg[2] |= NO_AUTO_START;
                }
                send_all(bus, &msg)?;
            }
            Verdict::Deny(_) if header.flags & NO_REPLY_EXPECTED != 0 => {}
            Verdict::Deny(why) => {
                serial = serial.wrapping_add(1).max(1);
                let reply = access_denied(&header, serial, &why);
                let mut state = to_client.lock();
                // The bus's first message (the Hello reply) goes to the client first.
                while !state.bus_spoke && !state.closed {
                    state = to_client
                        .spoke
                        .wait(state)
                        .unwrap_or_else(|e| e.into_inner());
                }
                if state.closed {
                    return Ok(());
                }
                send_all(&to_client.stream, &reply)?;
            }
            Verdict::Drop => {}
        }
    }
}

/// The bus's messages, each passed whole and as it is, under the client-writing lock.
fn bus_to_client(from_bus: &mut Reader, to_client: &ToClient) -> io::Result<()> {
    loop {
        let mut fixed = [0u8; 16];
        match from_bus.exact(&mut fixed, None) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            r => r?,
        }
        let len = frame(&fixed, MAX_BUS_MESSAGE).map_err(bad)?;
        let mut state = to_client.lock();
        send_all(&to_client.stream, &fixed)?;
        let mut left = len - 16;
        while left > 0 {
            let piece = from_bus.some(left)?;
            send_all(&to_client.stream, piece)?;
            left -= piece.len();
        }
        if !state.bus_spoke {
            state.bus_spoke = true;
            to_client.spoke.notify_all();
        }
    }
}

/// The client's socket, written by both directions: whole messages only, one at a time (a
/// writer holds `state`'s lock).
struct ToClient {
    stream: Arc<UnixStream>,
    state: Mutex<ToClientState>,
    /// Signalled when the bus's first message was passed or the bus side ended.
    spoke: Condvar,
}

struct ToClientState {
    bus_spoke: bool,
    closed: bool,
}

impl ToClient {
    fn lock(&self) -> MutexGuard<'_, ToClientState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What to do with one client message.
#[derive(Debug, PartialEq)]
enum Verdict {
    Forward,
    /// Not forwarded; answered with `AccessDenied` and this reason.
    Deny(String),
    /// Not forwarded, not answered.
    Drop,
}

fn judge(h: &Header) -> Verdict {
    match h.kind {
        METHOD_RETURN | ERROR => Verdict::Forward,
        SIGNAL => Verdict::Drop,
        _ => {
            let member = h.member.as_deref().unwrap_or_default();
            let (Some(dest), Some(iface)) = (h.destination.as_deref(), h.interface.as_deref())
            else {
                return Verdict::Deny(format!(
                    "a call of {member} without a destination and an interface is not forwarded"
                ));
            };
            if h.unix_fds {
                return Verdict::Deny(format!("{iface}.{member} passes file descriptors"));
            }
            let allowed = ALLOWED.iter().any(|(d, i, members)| {
                *i == iface && d.is_none_or(|d| d == dest) && members.contains(&member)
            });
            if allowed {
                Verdict::Forward
            } else {
                Verdict::Deny(format!(
                    "{iface}.{member} (to {dest}) is not a read-only call this filter forwards"
                ))
            }
        }
    }
}

/// What the filter reads of a message's header.
#[derive(Debug, Default, PartialEq)]
struct Header {
    big_endian: bool,
    kind: u8,
    flags: u8,
    serial: u32,
    path: Option<String>,
    interface: Option<String>,
    member: Option<String>,
    error_name: Option<String>,
    reply_serial: Option<u32>,
    destination: Option<String>,
    /// Read by the tests only.
    #[cfg_attr(not(test), allow(dead_code))]
    sender: Option<String>,
    /// Read by the tests only.
    #[cfg_attr(not(test), allow(dead_code))]
    signature: Option<String>,
    unix_fds: bool,
}

fn align(pos: usize, to: usize) -> usize {
    pos.div_ceil(to) * to
}

fn u32_at(b: &[u8], pos: usize, big_endian: bool) -> u32 {
    let w = [b[pos], b[pos + 1], b[pos + 2], b[pos + 3]];
    if big_endian {
        u32::from_be_bytes(w)
    } else {
        u32::from_le_bytes(w)
    }
}

/// The whole length of the message whose 16-byte fixed header is `fixed`: the header
/// fields padded to 8, then the body. Errors: an unknown byte order or protocol version, or
/// a length over `max`.
fn frame(fixed: &[u8; 16], max: usize) -> Result<usize, String> {
    let big_endian = match fixed[0] {
        b'l' => false,
        b'B' => true,
        b => return Err(format!("unknown byte order {b:#04x}")),
    };
    if fixed[3] != 1 {
        return Err(format!("protocol version {} (not 1)", fixed[3]));
    }
    let body = u32_at(fixed, 4, big_endian) as usize;
    let fields = u32_at(fixed, 12, big_endian) as usize;
    let len = align(16 + fields, 8).saturating_add(body);
    if len > max {
        return Err(format!("a message of {len} bytes, over the limit of {max}"));
    }
    Ok(len)
}

/// Reads the header of the whole message `msg` (as long as [`frame`] said). Errors name
/// what is malformed: an unknown message type, serial 0, a field that runs past the field
/// array, a known field of the wrong type or twice, a string that is not NUL-terminated
/// UTF-8 without NUL, a field of a container type, or a required field missing.
fn parse(msg: &[u8]) -> Result<Header, String> {
    let big_endian = msg[0] == b'B';
    let mut h = Header {
        big_endian,
        kind: msg[1],
        flags: msg[2],
        serial: u32_at(msg, 8, big_endian),
        ..Header::default()
    };
    if !(METHOD_CALL..=SIGNAL).contains(&h.kind) {
        return Err(format!("unknown message type {}", h.kind));
    }
    if h.serial == 0 {
        return Err("serial 0".into());
    }
    let end = 16 + u32_at(msg, 12, big_endian) as usize;
    let mut at = Cursor {
        msg,
        pos: 16,
        end,
        big_endian,
    };
    let mut seen = 0u16;
    while at.pos < end {
        at.pos = align(at.pos, 8);
        let code = at.byte()?;
        let sig = at.signature()?;
        let &[t] = sig.as_bytes() else {
            return Err(format!(
                "header field {code} is of type {sig:?}, not a basic type"
            ));
        };
        if (1..=9).contains(&code) {
            if seen & (1 << code) != 0 {
                return Err(format!("header field {code} appears twice"));
            }
            seen |= 1 << code;
        }
        let want = match code {
            1 => b'o',
            2..=4 | 6 | 7 => b's',
            5 | 9 => b'u',
            8 => b'g',
            0 => return Err("header field code 0".into()),
            _ => {
                at.skip(t)?;
                continue;
            }
        };
        if t != want {
            return Err(format!(
                "header field {code} is of type {:?}, not {:?}",
                t as char, want as char
            ));
        }
        match code {
            1 => h.path = Some(at.string()?),
            2 => h.interface = Some(at.string()?),
            3 => h.member = Some(at.string()?),
            4 => h.error_name = Some(at.string()?),
            5 => h.reply_serial = Some(at.u32()?),
            6 => h.destination = Some(at.string()?),
            7 => h.sender = Some(at.string()?),
            8 => h.signature = Some(at.signature()?),
            _ => h.unix_fds = at.u32()? > 0,
        }
    }
    let required = match h.kind {
        METHOD_CALL => h.path.is_some() && h.member.is_some(),
        METHOD_RETURN => h.reply_serial.is_some(),
        ERROR => h.reply_serial.is_some() && h.error_name.is_some(),
        _ => h.path.is_some() && h.interface.is_some() && h.member.is_some(),
    };
    if !required {
        return Err(format!(
            "a message of type {} lacks a required field",
            h.kind
        ));
    }
    Ok(h)
}

/// A position in the header field array of `msg`, which ends at `end`.
struct Cursor<'a> {
    msg: &'a [u8],
    pos: usize,
    end: usize,
    big_endian: bool,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize, alignment: usize) -> Result<&[u8], String> {
        let start = align(self.pos, alignment);
        if start + n > self.end {
            return Err("a header field runs past the field array".into());
        }
        self.pos = start + n;
        Ok(&self.msg[start..start + n])
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1, 1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let big_endian = self.big_endian;
        Ok(u32_at(self.take(4, 4)?, 0, big_endian))
    }

    /// `len` bytes, then a NUL; the bytes UTF-8 without NUL.
    fn text(&mut self, len: usize) -> Result<String, String> {
        let b = self.take(len + 1, 1)?;
        let (text, nul) = b.split_at(len);
        if nul != [0] || text.contains(&0) {
            return Err("a header string is not NUL-terminated or holds a NUL".into());
        }
        String::from_utf8(text.to_vec()).map_err(|_| "a header string is not UTF-8".into())
    }

    /// A string or object path: a `u32` length, aligned to 4.
    fn string(&mut self) -> Result<String, String> {
        let len = self.u32()? as usize;
        self.text(len)
    }

    /// A signature: a one-byte length.
    fn signature(&mut self) -> Result<String, String> {
        let len = self.byte()? as usize;
        self.text(len)
    }

    /// Skips the value of an unknown field (the specification says to ignore them), of a
    /// basic type only.
    fn skip(&mut self, t: u8) -> Result<(), String> {
        let size = match t {
            b'y' => 1,
            b'n' | b'q' => 2,
            b'b' | b'i' | b'u' | b'h' => 4,
            b'x' | b't' | b'd' => 8,
            b's' | b'o' => return self.string().map(|_| ()),
            b'g' => return self.signature().map(|_| ()),
            _ => return Err(format!("a header field of unknown type {:?}", t as char)),
        };
        self.take(size, size).map(|_| ())
    }
}

/// Encodes D-Bus messages in either byte order (the filter's own errors; the tests' messages).
pub(crate) struct Encoder {
    pub(crate) buf: Vec<u8>,
    big_endian: bool,
}

impl Encoder {
    /// A message's fixed header; the lengths are filled in by [`Encoder::finish`].
    pub(crate) fn new(big_endian: bool, kind: u8, flags: u8, serial: u32) -> Self {
        let mut e = Encoder {
            buf: vec![if big_endian { b'B' } else { b'l' }, kind, flags, 1],
            big_endian,
        };
        e.u32(0);
        e.u32(serial);
        e.u32(0);
        e
    }

    /// A message body (its alignment counts from its own start, which is 8-aligned).
    pub(crate) fn body(big_endian: bool) -> Self {
        Encoder {
            buf: Vec::new(),
            big_endian,
        }
    }

    pub(crate) fn pad(&mut self, to: usize) {
        self.buf.resize(align(self.buf.len(), to), 0);
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.pad(4);
        let b = if self.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.buf.extend_from_slice(&b);
    }

    pub(crate) fn string(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }

    pub(crate) fn signature(&mut self, s: &str) {
        self.buf.push(s.len() as u8);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }

    /// A header field of a string type (`s`, `o`) or `g`.
    pub(crate) fn field_str(&mut self, code: u8, t: char, v: &str) {
        self.pad(8);
        self.buf.push(code);
        self.signature(&t.to_string());
        if t == 'g' {
            self.signature(v);
        } else {
            self.string(v);
        }
    }

    pub(crate) fn field_u32(&mut self, code: u8, v: u32) {
        self.pad(8);
        self.buf.push(code);
        self.signature("u");
        self.u32(v);
    }

    /// Ends the header fields, appends `body` (encoded from an 8-aligned start) and fills
    /// in both lengths.
    pub(crate) fn finish(mut self, body: &[u8]) -> Vec<u8> {
        let fields = (self.buf.len() - 16) as u32;
        self.pad(8);
        self.buf.extend_from_slice(body);
        let put = |b: &mut Vec<u8>, at: usize, v: u32| {
            let w = if self.big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            };
            b[at..at + 4].copy_from_slice(&w);
        };
        put(&mut self.buf, 4, body.len() as u32);
        put(&mut self.buf, 12, fields);
        self.buf
    }
}

/// The `AccessDenied` error answering the call `call`, in its byte order.
fn access_denied(call: &Header, serial: u32, why: &str) -> Vec<u8> {
    let mut body = Encoder::body(call.big_endian);
    body.string(&format!("skyhook D-Bus filter: {why}"));
    let body = body.buf;
    let mut e = Encoder::new(call.big_endian, ERROR, NO_REPLY_EXPECTED, serial);
    e.field_u32(5, call.serial);
    e.field_str(4, 's', ACCESS_DENIED);
    e.field_str(8, 'g', "s");
    e.finish(&body)
}

/// Writes all of `b`, with `MSG_NOSIGNAL` (a closed peer is an error, not a `SIGPIPE`).
fn send_all(stream: &UnixStream, mut b: &[u8]) -> io::Result<()> {
    while !b.is_empty() {
        // SAFETY: a valid buffer of b.len() bytes on a socket we hold.
        let n = unsafe {
            libc::send(
                stream.as_raw_fd(),
                b.as_ptr().cast(),
                b.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        b = &b[n as usize..];
    }
    Ok(())
}

/// A socket's incoming bytes, buffered ([`CHUNK`] at most).
struct Reader {
    stream: Arc<UnixStream>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Reader {
    fn new(stream: Arc<UnixStream>) -> Self {
        Reader {
            stream,
            buf: vec![0; CHUNK],
            start: 0,
            end: 0,
        }
    }

    /// Reads more. With `watch`, first waits until this socket or `watch` is readable: the
    /// other side speaking (or closing) out of turn is an error.
    fn fill(&mut self, watch: Option<&UnixStream>) -> io::Result<()> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if let Some(other) = watch {
            wait_for(&self.stream, other)?;
        }
        let n = loop {
            match (&*self.stream).read(&mut self.buf[self.end..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r?,
            }
        };
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.end += n;
        Ok(())
    }

    /// One `\r\n`-terminated line of printable ASCII, without its end.
    fn line(&mut self, watch: Option<&UnixStream>) -> io::Result<Vec<u8>> {
        loop {
            let held = &self.buf[self.start..self.end];
            if let Some(i) = held.windows(2).position(|w| w == b"\r\n") {
                let line = held[..i].to_vec();
                if i > MAX_LINE || !line.iter().all(|b| (0x20..0x7f).contains(b)) {
                    return Err(bad("an authentication line is too long or not printable"));
                }
                self.start += i + 2;
                return Ok(line);
            }
            if held.len() > MAX_LINE + 1 {
                return Err(bad("an authentication line is too long"));
            }
            self.fill(watch)?;
        }
    }

    /// Exactly `out.len()` bytes; `UnexpectedEof` when the socket ends before the first.
    fn exact(&mut self, out: &mut [u8], watch: Option<&UnixStream>) -> io::Result<()> {
        let mut got = 0;
        while got < out.len() {
            if self.start == self.end {
                match self.fill(watch) {
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && got > 0 => {
                        return Err(bad("the stream ended inside a message"));
                    }
                    r => r?,
                }
            }
            let n = (out.len() - got).min(self.end - self.start);
            out[got..got + n].copy_from_slice(&self.buf[self.start..self.start + n]);
            (got, self.start) = (got + n, self.start + n);
        }
        Ok(())
    }

    /// Between 1 and `max` bytes, read if none are held.
    fn some(&mut self, max: usize) -> io::Result<&[u8]> {
        if self.start == self.end {
            match self.fill(None) {
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Err(bad("the stream ended inside a message"));
                }
                r => r?,
            }
        }
        let n = max.min(self.end - self.start);
        self.start += n;
        Ok(&self.buf[self.start - n..self.start])
    }
}

/// Waits until `this` or `other` is readable; `other` first (data or its end) is an error.
fn wait_for(this: &UnixStream, other: &UnixStream) -> io::Result<()> {
    let mut p = [this, other].map(|s| libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    loop {
        // SAFETY: two valid pollfds.
        let n = unsafe { libc::poll(p.as_mut_ptr(), 2, -1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if p[0].revents != 0 {
            return Ok(());
        }
        if p[1].revents != 0 {
            return Err(bad("the bus spoke or closed out of turn"));
        }
    }
}

#[cfg(test)]
#[path = "dbus_filter_tests.rs"]
mod tests;
