//! A system bus for the tests: the reference `dbus-daemon` (libdbus's, Debian's package
//! `dbus-daemon`) started on a configuration of the test's own, and a bare Unix listener
//! standing where a daemon's socket (the system bus's among them) is in a host root.

use std::io::BufRead as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::FakeRoot;

/// Host path of the D-Bus system bus's socket.
pub const SYSTEM_BUS: &str = "/run/dbus/system_bus_socket";

/// A `<policy context="default">` allowing every user to send to and receive from anyone.
pub const OPEN_POLICY: &str =
    r#"<allow user="*"/><allow send_destination="*"/><allow receive_sender="*"/>"#;

/// A running `dbus-daemon` with `EXTERNAL` authentication, killed and reaped when dropped.
pub struct DbusDaemon {
    child: Child,
    /// Holds its configuration (and, for [`DbusDaemon::private`], its socket).
    _dir: tempfile::TempDir,
    /// The socket it listens on, as a path on this machine.
    pub socket: PathBuf,
}

impl DbusDaemon {
    /// A bus listening at `bus.sock` of a temporary directory, its default policy the
    /// `<allow>`/`<deny>` rules `policy`; `None` when `dbus-daemon` is not installed.
    pub fn private(policy: &str) -> Option<DbusDaemon> {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("bus.sock");
        DbusDaemon::start(dir, socket, "", policy)
    }

    /// The system bus (`<type>system</type>`) of host root `fr`, listening at its
    /// [`SYSTEM_BUS`] (its directory made), its default policy `policy`; `None` when
    /// `dbus-daemon` is not installed.
    pub fn system(fr: &FakeRoot, policy: &str) -> Option<DbusDaemon> {
        let socket = fr.host(SYSTEM_BUS);
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        DbusDaemon::start(dir, socket, "\n  <type>system</type>", policy)
    }

    /// `dbus-daemon --nofork` on a `bus.conf` written in `dir` (`extra` its elements before
    /// `<listen>`), returned once it printed its address, that is once it listens.
    fn start(
        dir: tempfile::TempDir,
        socket: PathBuf,
        extra: &str,
        policy: &str,
    ) -> Option<DbusDaemon> {
        let config = dir.path().join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>{extra}
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">{policy}</policy>
</busconfig>
"#,
                socket.display()
            ),
        )
        .unwrap();
        let spawned = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match spawned {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            r => r.unwrap(),
        };
        let mut address = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut address)
            .unwrap();
        // Built before the assertion, so a failing one still kills the daemon.
        let bus = DbusDaemon {
            child,
            _dir: dir,
            socket,
        };
        assert!(
            address.starts_with("unix:path="),
            "dbus-daemon: {address:?}"
        );
        Some(bus)
    }
}

impl Drop for DbusDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A stream socket listening at `path` of host root `fr` (its directories made) with
/// permissions `mode`, as a daemon's: its path on this machine and the listener.
pub fn listener(fr: &FakeRoot, path: &str, mode: u32) -> (PathBuf, UnixListener) {
    let path = fr.host(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let listener = UnixListener::bind(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    (path, listener)
}

/// [`listener`] with mode 0777, as the host's world-writable daemon sockets.
pub fn world_writable_listener(fr: &FakeRoot, path: &str) -> (PathBuf, UnixListener) {
    listener(fr, path, 0o777)
}

/// A stand-in for host root `fr`'s system bus: a world-writable listener at its
/// [`SYSTEM_BUS`] that speaks no D-Bus; its path on this machine and the listener.
pub fn system_bus_listener(fr: &FakeRoot) -> (PathBuf, UnixListener) {
    world_writable_listener(fr, SYSTEM_BUS)
}
