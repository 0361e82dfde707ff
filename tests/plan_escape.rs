//! More attacks on `serve`'s read-only `package_plan` (docs/fleet.md, "It writes nothing to
//! the host", "Limits"), past the PID and network namespaces of the plan's sandbox: a
//! hostile package's queries run as the plan's query user (its own, no capabilities, with
//! `no_new_privs`; as root with the plan's bounding set before), chrooted in the
//! read-only host root, which on a node is the node's `/`, with the host's `/proc` mounted
//! in it (the DaemonSet mounts hostPath `/`, submounts included). Each test here mounts a
//! `/proc` in its fake root where it needs one, as a node has.
//!
//! Tests marked `#[ignore = "known hole: ..."]` reproduce an attack that succeeds on the
//! branch `sandbox` (their failure line is in the report of branch `attack-sandbox`);
//! `a_plan_query_cannot_reach_the_server_through_proc_or_namespaces` proves the defences
//! that hold.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use skyhook::remote::Client;

use crate::fleet::{PLAN_TOKEN, tokens_file};
use crate::plan_attack::{
    current_rt, host_with, perl_query, plan_body, plan_on, plan_step, plan_with, serve_bin,
};
use crate::util::FakeRoot;
use crate::util::bus::{self, DbusDaemon, OPEN_POLICY};

/// Plan a package whose query is `perl -e code` on a fresh in-process `serve` over `root`
/// with a plan token: the exit event and the line events' text.
fn plan_perl(root: &Path, id: &str, code: &str) -> (Value, String) {
    plan_perl_with(skyhook::serve::Config::new(root), id, code)
}

/// [`plan_perl`] on a `serve` of configuration `cfg` (its root the host root).
fn plan_perl_with(cfg: skyhook::serve::Config, id: &str, code: &str) -> (Value, String) {
    plan_with(cfg, &plan_body(id, &perl_query(code)))
}

/// A throwaway host root with `perl` and a `/dev/null` device.
fn host() -> FakeRoot {
    host_with(&["perl"])
}

/// A directory outside the host root, on the server's own (writable) filesystem.
fn outside() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("plan-escape-outside-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// A procfs mounted at the fake root's `/proc` (of this process's PID namespace, the
/// host's, as a node's `/proc` is), unmounted when dropped (declare it after the root).
pub(crate) struct HostProc(PathBuf);

impl HostProc {
    pub(crate) fn mount(fr: &FakeRoot) -> HostProc {
        let p = fr.host("/proc");
        std::fs::create_dir_all(&p).unwrap();
        use nix::mount::MsFlags;
        nix::mount::mount(
            Some("proc"),
            &p,
            Some("proc"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None::<&str>,
        )
        .unwrap();
        HostProc(p)
    }
}

impl Drop for HostProc {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// A process of the host killed (and reaped) when dropped.
struct HostProcess(std::process::Child);

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `path` without its leading `/` (relative to a directory descriptor of `/`).
fn rel(path: &Path) -> String {
    path.to_str().unwrap().trim_start_matches('/').to_string()
}

/// A node runs daemons as service users (here `sleep` as uid/gid 65534, in its own `/`).
/// With `CAP_SETUID`/`CAP_SETGID` kept, a query switched its effective ids, passed the
/// ptrace check of `/proc/PID/root` of that process, took the host's writable `/` from
/// there, switched back to root and created, truncated and made directories anywhere on the
/// host (`RLIMIT_FSIZE` 0 stops only the bytes of a write). Now the plan's `/proc` is its
/// own (no host process there) and those capabilities are dropped.
#[test]
fn a_plan_query_cannot_write_the_host_through_a_service_users_proc_root() {
    require_root!();
    let fr = host();
    let _proc = HostProc::mount(&fr);
    let out = outside();
    let precious = out.path().join("precious");
    std::fs::write(&precious, "precious\n").unwrap();
    let owned = out.path().join("owned");
    use std::os::unix::process::CommandExt as _;
    let daemon = HostProcess(
        std::process::Command::new("sleep")
            .arg("3600.0441")
            .uid(65534)
            .gid(65534)
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let code = r#"
        my $pid = PID;
        $) = "65534 65534"; $> = 65534;
        opendir(my $d, "/proc/$pid/root") or die "opendir: $!\n";
        $> = 0; $) = "0 0";
        chdir($d) or die "fchdir: $!\n";
        chdir("DIR") or die "chdir: $!\n";
        open(my $f, ">", "owned") or die "create: $!\n"; close $f;
        open(my $g, ">", "precious") or die "truncate: $!\n"; close $g;
        print "wrote the host";
    "#
    .replace("PID", &daemon.0.id().to_string())
    .replace("DIR", &rel(out.path()));
    let (exit, lines) = plan_perl(fr.root(), "proc-root", &code);
    assert!(
        !owned.exists() && std::fs::read_to_string(&precious).unwrap() == "precious\n",
        "a plan's query wrote outside the host root through /proc/{}/root (created {}, \
         precious now {:?}): {lines}",
        daemon.0.id(),
        owned.display(),
        std::fs::read_to_string(&precious).unwrap(),
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// The plan's commands share the host's IPC namespace: a query creates a SysV shared memory
/// segment (and could attach any root-owned one of a host process), which outlives the plan
/// and holds what the plan wrote in the host kernel's memory.
#[test]
fn a_plan_query_leaves_no_sysv_ipc_object_on_the_host() {
    require_root!();
    let fr = host();
    let key = 0x5eed_0000 | (std::process::id() as i32 & 0xffff);
    let code = r#"
        my $id = shmget(KEY, 4096, 01666);
        defined $id or die "shmget: $!\n";
        shmwrite($id, "written-by-plan", 0, 15) or die "shmwrite: $!\n";
        print "shm=$id";
    "#
    .replace("KEY", &key.to_string());
    let (exit, lines) = plan_perl(fr.root(), "sysv", &code);
    // SAFETY: shmget with no flags looks the key up; shmctl(IPC_RMID) removes what it found.
    let left = unsafe { libc::shmget(key, 0, 0) };
    if left >= 0 {
        // the test's own cleanup of what the plan left behind
        unsafe { libc::shmctl(left, libc::IPC_RMID, std::ptr::null_mut()) };
    }
    assert!(
        left < 0,
        "a plan's query left SysV shared memory {key:#x} (id {left}) in the host's IPC \
         namespace: {lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// A daemon of the node listening on a root-owned Unix socket of the host root that others
/// may not write (systemd's `/run/systemd/private` 0600, containerd's 0660, kubelet plugin
/// sockets: each runs what root asks): `connect` through the read-only mount is no write,
/// and a query as root reached it. A query runs as the plan's query user (not root), so the
/// kernel refuses the `connect` (`EACCES`: no write permission on the socket file).
#[test]
fn a_plan_query_cannot_reach_a_host_daemons_unix_socket() {
    require_root!();
    let fr = host();
    let (got, exit, lines) = unix_socket_attack(skyhook::serve::Config::new(fr.root()), &fr);
    assert_eq!(
        got, None,
        "a plan's query reached the host daemon's socket /run/daemon.sock: {lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// A daemon whose socket anyone may write and that is allowed (`--plan-allow-socket`, by
/// default D-Bus's system bus, 0666) takes the connection, and decides by the peer's
/// credentials (`SO_PEERCRED`, taken by the kernel at `connect`: the broker's connector,
/// which connects for the query) what it does for it: they are the plan's query user (by
/// default its slot's, 2147478690 for the only plan), not root, so the daemon's policy for
/// an unprivileged user applies (polkit refuses a sessionless user `StartUnit`).
#[test]
fn a_plan_querys_peer_credentials_at_a_world_writable_socket_are_not_roots() {
    require_root!();
    let fr = host();
    let (sock, listener) = bus::listener(&fr, "/run/bus.sock", 0o666);
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.sandbox.allow_sockets = vec![sock];
    let code = r#"
        socket(my $s, 1, 1, 0) or die "socket: $!\n";
        connect($s, pack("S a108", 1, "/run/bus.sock")) or die "connect: $!\n";
        syswrite($s, "StartUnit evil.service");
        print "ids=$< $> $( $)";
    "#;
    let (exit, lines) = plan_perl_with(cfg, "peercred", code);
    listener.set_nonblocking(true).unwrap();
    let (conn, _) = listener
        .accept()
        .unwrap_or_else(|e| panic!("the query made no connection ({e}): {lines}"));
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    use std::os::fd::AsRawFd as _;
    // SAFETY: getsockopt(SO_PEERCRED) into a ucred of the size given.
    let r = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    assert_eq!(
        (cred.uid, cred.gid),
        (2147478690, 2147478690),
        "the daemon saw the plan's query as uid {} gid {}: {lines}",
        cred.uid,
        cred.gid
    );
    assert!(
        lines.contains("ids=2147478690 2147478690 2147478690 2147478690 "),
        "{lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// A daemon whose socket anyone may write (D-Bus's system bus, journald's
/// `/run/systemd/journal/stdout`, both 0666) took a plan query's connection as the query
/// user's, and did for it what such a daemon does for any local user (a log line, a
/// polkit `allow_any` action, a D-Bus activation). A query's `connect` now goes to the
/// plan's broker, which connects only to the allowed sockets (`--plan-allow-socket`,
/// none here): the query gets `EACCES` and the daemon hears nothing.
#[test]
fn a_plan_query_cannot_connect_to_a_world_writable_socket_that_is_not_allowed() {
    require_root!();
    let fr = host();
    let (_, listener) = bus::world_writable_listener(&fr, "/run/systemd/journal/stdout");
    let code = r#"
        socket(my $s, 1, 1, 0) or die "socket: $!\n";
        connect($s, pack("S a108", 1, "/run/systemd/journal/stdout")) or die "connect: $!\n";
        syswrite($s, "evil\n");
        print "connected";
    "#;
    let (exit, lines) = plan_perl(fr.root(), "world-writable", code);
    listener.set_nonblocking(true).unwrap();
    let got = listener.accept().ok().map(|(mut c, _)| {
        use std::io::Read as _;
        c.set_nonblocking(false).unwrap();
        let mut s = String::new();
        let _ = c.read_to_string(&mut s);
        s
    });
    assert_eq!(
        got, None,
        "a plan's query reached the world-writable socket /run/systemd/journal/stdout: {lines}"
    );
    assert!(lines.contains("err=connect: Permission denied"), "{lines}");
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// A datagram socket anyone may write (`/dev/log`, journald's `/run/systemd/journal/socket`)
/// takes a datagram sent to its address from any socket, no `connect` needed: a query
/// logged as its user. A plan's command may make no datagram (or seqpacket) Unix socket
/// (`EPERM`), and the socket receives nothing.
#[test]
fn a_plan_query_cannot_send_a_datagram_to_a_world_writable_socket() {
    require_root!();
    let fr = host();
    let log = fr.host("/dev/log");
    let dgram = std::os::unix::net::UnixDatagram::bind(&log).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o777)).unwrap();
    let code = r#"
        socket(my $s, 1, 2, 0) or die "socket: $!\n";
        send($s, "<13>evil", 0, pack("S a108", 1, "/dev/log")) or die "send: $!\n";
        print "sent";
    "#;
    let (exit, lines) = plan_perl(fr.root(), "datagram", code);
    dgram.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let got = dgram
        .recv(&mut buf)
        .ok()
        .map(|n| String::from_utf8_lossy(&buf[..n]).into_owned());
    assert_eq!(
        got, None,
        "a plan's query sent a datagram to the world-writable /dev/log: {lines}"
    );
    assert!(
        lines.contains("err=socket: Operation not permitted"),
        "{lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// What the query user changes for a plan: a command reading a root-only file (mode 0600,
/// as `/etc/shadow` or a kubelet's key) gets `EACCES`, as any unprivileged user does, and
/// says so in its stderr; the host API's own reads (`fs::read`, made by the server) still
/// read it.
#[test]
fn a_plan_query_cannot_read_a_root_only_file_and_the_host_api_still_can() {
    require_root!();
    let fr = host();
    let secret = fr.host("/etc/root-only");
    std::fs::write(&secret, "root-only\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let script = format!(
        "print(\"host-api=\" + fs::read(\"/etc/root-only\"));\n{}",
        perl_query(
            r#"open(my $f, "<", "/etc/root-only") or die "open /etc/root-only: $!\n"; print <$f>;"#
        )
    );
    let (exit, lines) = plan_with(
        skyhook::serve::Config::new(fr.root()),
        &plan_body("root-only", &script),
    );
    assert!(lines.contains("host-api=root-only\n"), "{lines}");
    assert!(
        lines.contains(" out= err=open /etc/root-only: Permission denied"),
        "{lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// `--plan-query-user 4242:4343` (here the library's configuration): a query runs with
/// those ids, and a daemon sees them.
#[test]
fn a_plan_query_runs_as_the_configured_query_user() {
    require_root!();
    let fr = host();
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.query_users = skyhook::process::sandbox::QueryUsers::Fixed(
        skyhook::process::sandbox::QueryUser::new(4242, 4343).unwrap(),
    );
    let (exit, lines) = plan_perl_with(cfg, "query-user", r#"print "ids=$< $> $( $)";"#);
    assert!(lines.contains("out=ids=4242 4242 4343 4343 "), "{lines}");
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// A set-user-ID-root program in the host root (`sudo`, `su`, `pkexec`, `mount` on a node;
/// here a copy of `id`, mode 4755) gives a query no root: the plan's mounts are `nosuid` and
/// every command runs with `no_new_privs`, so `exec` keeps the query user's ids and grants
/// no file capability.
#[test]
fn a_set_user_id_root_program_gives_a_plan_query_no_root() {
    require_root!();
    let fr = host_with(&["perl", "id"]);
    let _proc = HostProc::mount(&fr);
    let id = fr.host("/usr/local/bin/suid-id");
    std::fs::copy(fr.host("/usr/bin/id"), &id).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&id, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let code = r#"
        my $u = `/usr/local/bin/suid-id -u`; chomp $u;
        my $n = "?";
        if (open(my $s, "<", "/proc/self/status")) { for (<$s>) { $n = $1 if /^NoNewPrivs:\s+(\d)/ } }
        print "euid=$u nnp=$n";
    "#;
    let (exit, lines) = plan_perl(fr.root(), "setuid", code);
    assert!(lines.contains("euid=2147478690 nnp=1"), "{lines}");
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// With `--plan-deny-unix-sockets`, the query of the test above gets no Unix socket at all
/// (`socket(AF_UNIX)` is `EPERM`) and the daemon receives nothing.
#[test]
fn with_deny_unix_sockets_a_plan_query_cannot_reach_a_host_daemons_unix_socket() {
    require_root!();
    let fr = host();
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.sandbox.unix_sockets = false;
    let (got, exit, lines) = unix_socket_attack(cfg, &fr);
    assert_eq!(got, None, "{lines}");
    assert!(lines.contains("socket: Operation not permitted"), "{lines}");
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// A daemon listening on `/run/daemon.sock` of the host root, a plan whose query connects
/// and writes a request: what the daemon received (if anything), the exit and the lines.
fn unix_socket_attack(
    cfg: skyhook::serve::Config,
    fr: &FakeRoot,
) -> (Option<String>, Value, String) {
    socket_attack(
        cfg,
        fr,
        "/run/daemon.sock",
        None,
        "systemctl start evil.service",
    )
}

/// A daemon listening on Unix socket `path` of the host root (owned by `owner`'s uid and
/// gid with mode 0600 when given, else as bound by root), and a plan whose query connects
/// and writes `request`: what the daemon received (if anything), the exit and the lines.
pub(crate) fn socket_attack(
    cfg: skyhook::serve::Config,
    fr: &FakeRoot,
    path: &str,
    owner: Option<u32>,
    request: &str,
) -> (Option<String>, Value, String) {
    let sock = fr.host(path);
    std::fs::create_dir_all(sock.parent().unwrap()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    if let Some(id) = owner {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&sock, Some(id), Some(id)).unwrap();
    }
    let code = r#"
        socket(my $s, 1, 1, 0) or die "socket: $!\n";
        connect($s, pack("S a108", 1, "PATH")) or die "connect: $!\n";
        syswrite($s, "REQUEST");
        print "connected";
    "#
    .replace("PATH", path)
    .replace("REQUEST", request);
    let (exit, lines) = plan_perl_with(cfg, "unix", &code);
    listener.set_nonblocking(true).unwrap();
    // The plan has ended: a connection it made waits in the backlog, its request in it.
    let got = listener.accept().ok().map(|(mut c, _)| {
        use std::io::Read as _;
        c.set_nonblocking(false).unwrap();
        let mut s = String::new();
        let _ = c.read_to_string(&mut s);
        s
    });
    (got, exit, lines)
}

/// The (device, handle) of the root of the filesystem holding `path`: the directory up from
/// `path` still on its device, and `name_to_handle_at` of it (type, bytes).
fn fs_root_handle(path: &Path) -> (PathBuf, i32, Vec<u8>) {
    use std::os::unix::fs::MetadataExt as _;
    let dev = std::fs::metadata(path).unwrap().dev();
    let mut top = path.to_path_buf();
    while let Some(up) = top.parent() {
        if std::fs::metadata(up).unwrap().dev() != dev {
            break;
        }
        top = up.to_path_buf();
    }
    let mut buf = [0u8; 8 + 128];
    buf[..4].copy_from_slice(&128u32.to_ne_bytes());
    let mut mount_id: libc::c_int = 0;
    let c = std::ffi::CString::new(top.to_str().unwrap()).unwrap();
    // SAFETY: a file_handle buffer of 128 bytes of handle, as its header says.
    let r = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            c.as_ptr(),
            buf.as_mut_ptr(),
            &mut mount_id,
            0,
        )
    };
    assert_eq!(r, 0, "name_to_handle_at {}", top.display());
    let bytes = u32::from_ne_bytes(buf[..4].try_into().unwrap()) as usize;
    let kind = i32::from_ne_bytes(buf[4..8].try_into().unwrap());
    (top, kind, buf[8..8 + bytes].to_vec())
}

/// With `CAP_DAC_READ_SEARCH` (kept before, now dropped), `open_by_handle_at` works: given
/// the handle of its filesystem's root (a constant on ext4: inode 2, generation 0; computed
/// here), a query opens any file of the filesystem under the read-only root's mount, beyond
/// `--root` (here a secret of the server's, beside the host root).
#[test]
#[cfg(target_arch = "x86_64")]
fn a_plan_query_cannot_open_files_outside_the_host_root_by_handle() {
    require_root!();
    let fr = host();
    let out = outside();
    let secret = out.path().join("server-secret");
    std::fs::write(&secret, "server-secret-4711").unwrap();
    let (top, kind, handle) = fs_root_handle(out.path());
    let below = secret.strip_prefix(&top).unwrap();
    let hex: String = handle.iter().map(|b| format!("{b:02x}")).collect();
    let code = r#"
        opendir(my $root, "/") or die "root: $!\n";
        my $h = pack("L l", LEN, KIND) . pack("H*", "HEX");
        my $fd = syscall(304, fileno($root), $h, 0x10000);
        $fd >= 0 or die "open_by_handle_at: $!\n";
        my $p = "PATH";
        my $f = syscall(257, $fd, $p, 0, 0);
        $f >= 0 or die "openat: $!\n";
        my $buf = "\0" x 64; my $n = syscall(0, $f, $buf, 64);
        print "read: ", substr($buf, 0, $n);
    "#
    .replace("LEN", &handle.len().to_string())
    .replace("KIND", &kind.to_string())
    .replace("HEX", &hex)
    .replace("PATH", below.to_str().unwrap());
    let (exit, lines) = plan_perl(fr.root(), "handle", &code);
    assert!(
        !lines.contains("server-secret-4711"),
        "a plan's query read {} outside the host root by handle: {lines}",
        secret.display()
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// Root's user keyring is one for every root process of the host: a query adds a key to it
/// (`add_key` to `@u`), which outlives the plan and is found by the host's root.
#[test]
fn a_plan_query_adds_no_key_to_the_hosts_keyrings() {
    require_root!();
    let fr = host();
    let desc = format!("skyhook-plan-attack-{}", std::process::id());
    let code = r#"
        my ($t, $d, $v) = ("user", "DESC", "from-plan");
        my $k = syscall(248, $t, $d, $v, 9, -4);
        print "key=$k";
    "#
    .replace("DESC", &desc);
    let (exit, lines) = plan_perl(fr.root(), "keyring", &code);
    let (t, d) = (c"user", std::ffi::CString::new(desc.clone()).unwrap());
    // SAFETY: keyctl(KEYCTL_SEARCH, @u, type, description, 0) with C strings.
    let found = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            libc::KEYCTL_SEARCH,
            libc::KEY_SPEC_USER_KEYRING,
            t.as_ptr(),
            d.as_ptr(),
            0,
        )
    };
    if found >= 0 {
        // the test's own cleanup of what the plan left behind
        unsafe { libc::syscall(libc::SYS_keyctl, libc::KEYCTL_INVALIDATE, found) };
    }
    assert!(
        found < 0,
        "a plan's query added key {found} ({desc}) to root's user keyring: {lines}"
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}

/// What holds, with the host's `/proc` in the root: the plan's own procfs is mounted over
/// it, so the server (a host process) is not there at all (no `/proc/PID/mem`, no
/// `/proc/PID` to take a pidfd from); pid 1 there is the plan's init, whose namespaces and
/// root (the server's own `/`) cannot be opened (ptrace check, no `CAP_SYS_PTRACE`); no
/// user namespace can be made (chrooted), `/proc/sys` is read-only, and an abstract Unix
/// socket of the server's network namespace is not there.
#[test]
#[cfg(target_arch = "x86_64")]
fn a_plan_query_cannot_reach_the_server_through_proc_or_namespaces() {
    require_root!();
    let fr = host();
    let _proc = HostProc::mount(&fr);
    use std::os::linux::net::SocketAddrExt as _;
    let name = format!("skyhook-plan-escape-{}", std::process::id());
    let abstract_addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind_addr(&abstract_addr).unwrap();
    let code = r#"
        my $s = SERVER;
        my @r;
        push @r, "mem=" . (open(my $m, "+<", "/proc/$s/mem") ? "OPENED" : "$!");
        push @r, "server=" . (-e "/proc/$s" ? "SEEN" : "absent");
        push @r, "root1=" . (opendir(my $r1, "/proc/1/root/") ? "OPENED" : "$!");
        push @r, "setns=" . (open(my $n, "<", "/proc/1/ns/net")
            ? (syscall(308, fileno($n), 0) == 0 ? "ENTERED" : "$!") : "$!");
        push @r, "userns=" . syscall(272, 0x10000000);
        push @r, "sysctl=" . (open(my $y, ">", "/proc/sys/kernel/domainname") ? "OPENED" : "$!");
        socket(my $u, 1, 1, 0) or die "socket: $!\n";
        push @r, "abstract=" . (connect($u, pack("S", 1) . "\0NAME") ? "CONNECTED" : "$!");
        print join(" ", @r);
    "#
    .replace("SERVER", &std::process::id().to_string())
    .replace("NAME", &name);
    let (exit, lines) = plan_perl(fr.root(), "held", &code);
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
    assert!(
        lines.contains(
            "code=0 out=mem=No such file or directory server=absent root1=Permission denied \
             setns=Permission denied userns=-1 sysctl=Read-only file system abstract=Connection refused"
        ),
        "{lines}"
    );
}

/// The peak (`VmHWM`) and current (`VmRSS`) resident memory of process `pid`, in MiB.
pub(crate) fn mem_mib(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let get = |k: &str| -> u64 {
        let kib: u64 = s
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in /proc/{pid}/status"));
        kib / 1024
    };
    (get("VmHWM:"), get("VmRSS:"))
}

/// Each `.rhai` step of a plan may hold 256 MiB (`max_memory`), but what a step plans to
/// write stays in the server for the steps after it (the plan's view of the host): five
/// steps of 96 MiB of planned writes each held 575 MiB of the server's memory at once, and
/// a package of 3 MiB has room for thousands of steps (`--plan-memory` bounds commands
/// only; the DaemonSet's 256Mi limit has the server killed). Now the plan has a budget of
/// planned content over all its steps (`--plan-bytes`, 64 MiB by default): the fourth
/// 16 MiB write of the first step (after the package's own files) fails the plan, naming the budget and the file. Measured
/// on the `serve` binary (its peak resident memory).
#[test]
fn a_plans_steps_cannot_pile_up_memory_in_the_server() {
    require_root!();
    let fr = host();
    let d = tempfile::tempdir().unwrap();
    let tokens = tokens_file(d.path());
    let (srv, url) = serve_bin(fr.root(), &tokens, &[]);
    let step = |i: usize| {
        format!(
            "let s = \"x\";\nwhile s.len() < 16 * 1024 * 1024 {{ s += s; }}\n\
             for j in 0..6 {{ s.truncate(16 * 1024 * 1024 - 1 - j); s += \"y\"; \
             fs::write(\"/tmp/big{i}_\" + j, s); }}\nprint(\"step {i} planned\");\n"
        )
    };
    let mut body = plan_body("pile", "");
    body["timeout_s"] = json!(240);
    let mut steps = Vec::new();
    for i in 0..5 {
        steps.push(plan_step(&format!("w{i}")));
        body["package"]["files"][format!("skyhook_dir/w{i}.rhai")] = step(i).into();
    }
    body["package"]["config"]["modes"]["apply"] = steps.into();
    let before = mem_mib(srv.0.id()).0;
    let (exit, lines) = current_rt().block_on(async {
        let client = Client::new(&url, PLAN_TOKEN).unwrap();
        plan_on(&client, &body).await
    });
    let peak = mem_mib(srv.0.id()).0;
    eprintln!("serve peak {before} MiB before, {peak} MiB after the plan");
    let said = lines.lines().collect::<Vec<_>>().join(" | ");
    assert!(
        peak < 320,
        "a plan of 5 steps made the server hold {peak} MiB at once ({before} MiB before; \
         max_memory is 256 MiB per step): exit {}, {said}",
        exit["exit"]
    );
    assert_eq!(exit["exit"]["code"], json!(1), "{exit:#}");
    let rendered = exit["rendered"].as_str().unwrap_or_default();
    assert!(
        rendered.contains(
            "failed: <package>/skyhook_dir/w0.rhai:3:69: fs::write: planning 16778749 bytes \
             for /tmp/big0_3 (write: its content, report and events) would take the plan's \
             planned effects past its budget of 67108864 bytes (64 MiB, serve --plan-bytes)"
        ),
        "{rendered}"
    );
    assert!(!said.contains("step 1 planned"), "{said}");
}

/// `--plan-memory` was `RLIMIT_AS`, per process: a query's eight children, 40 MiB each,
/// held 320 MiB at once under `--plan-memory 96MiB` (and up to `--plan-pids` − 1 of them
/// the plan's processes could hold: 511 × 4 GiB by default, a node's memory many times
/// over). Now the plan's commands and their children are in a cgroup of the plan's own
/// (memory and pids, `process::plan_cgroup`): at most two children fit, the kernel kills
/// inside the plan's cgroup, and the plan fails saying so. The children start one after the
/// other (each reports its 40 MiB held, or its pipe ends when it was killed) and are
/// counted as held when they exit normally once released, so every counted child held its
/// 40 MiB while all the others counted did. Needs a cgroup with memory and pids (v2, or v1
/// as on this machine): under `SKYHOOK_REQUIRE_ALL=1` its absence fails the test.
#[test]
fn a_plans_processes_together_are_held_to_its_memory() {
    require_root!();
    if let Err(why) = skyhook::process::plan_cgroup::parents() {
        skip!("no cgroup with memory and pids for plans: {why}");
    }
    let fr = host();
    let _proc = HostProc::mount(&fr);
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.sandbox.memory = 96 << 20;
    let code = r#"
        my $n = 8; my @kids; pipe(my $r2, my $w2);
        for (1..$n) { pipe(my $r, my $w); my $pid = fork();
            if ($pid == 0) { close $r; close $w2; my $x = "x" x (40 << 20);
                syswrite($w, "1"); sysread($r2, my $b, 1); exit 0 }
            close $w; sysread($r, my $b, 1); close $r; push @kids, $pid }
        close $w2; close $r2; my $held = 0;
        for my $k (@kids) { waitpid($k, 0); $held++ if $? == 0 }
        open(my $f, "<", "/proc/self/cgroup"); my @cg = grep { /:memory:|^0::/ } <$f>;
        chomp @cg; print "held=$held cgroup=$cg[0]";
    "#;
    let (exit, lines) = plan_perl_with(cfg, "together", code);
    let held: u64 = lines
        .split("held=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(99);
    assert!(
        held * 40 <= 96,
        "a plan's processes held {} MiB at once under --plan-memory 96MiB: {lines}",
        held * 40
    );
    assert!(
        held >= 1,
        "not even one 40 MiB child fit in 96 MiB: {lines}"
    );
    // The query ran in the plan's cgroup, not in the server's.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    assert!(lines.contains("/skyhook-serve/plan."), "{lines}");
    assert!(!own.contains("/skyhook-serve/plan."), "{own}");
    let error = exit["exit"]["error"].as_str().unwrap_or_default();
    eprintln!("held={held}: {error}");
    assert_eq!(exit["exit"]["code"], json!(1), "{exit:#}");
    assert!(
        error.starts_with(
            "the plan's processes reached its memory limit (96 MiB, --plan-memory): the kernel killed"
        ),
        "{error}"
    );
}

/// `--plan-script-timeout` lowers a numeric `SKYHOOK_SCRIPT_TIMEOUT` but leaves any other
/// value "for the plan to refuse"; an empty (or blank) one is not refused: the plan reads it
/// as unset, the engine's default 600 s. Under a 2 s script timeout, a query sleeping an
/// hour then runs until the plan's own timeout (20 s here) instead of 2 s.
#[test]
fn an_empty_script_timeout_is_held_to_the_servers() {
    require_root!();
    let fr = host();
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.script_timeout = std::time::Duration::from_secs(2);
    let mut body = plan_body(
        "blank",
        "query([\"sleep\", \"3600.0447\"]);\nprint(\"the query returned\");\n",
    );
    body["timeout_s"] = json!(20);
    body["env"] = json!({"SKYHOOK_SCRIPT_TIMEOUT": " "});
    let started = std::time::Instant::now();
    let (exit, _) = plan_with(cfg, &body);
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(15),
        "a step with SKYHOOK_SCRIPT_TIMEOUT=\" \" ran {took:?} under a 2 s script timeout: \
         exit {}",
        exit["exit"]
    );
    let rendered = exit["rendered"].as_str().unwrap_or_default();
    assert!(
        rendered.contains("command sleep 3600.0447 timed out after 2.0s and was killed"),
        "{rendered}"
    );
}

/// A node running the reference `dbus-daemon` (libdbus's: Debian, Ubuntu) as its system
/// bus, which drops the connection of a uid its user database does not know, as `auto`'s
/// query users are: a plan's `dbus-send` query (as 2147478690) gets its `GetId` reply,
/// because serve connects to the bus as the bus user (`--plan-bus-user`, `nobody` by
/// default: the library's `Limits::default`) and the D-Bus filter rewrites the query's
/// `AUTH EXTERNAL` claim of its own uid to that user's. Before, the query failed with
/// `Failed to register ... Did not receive a reply`.
#[test]
fn a_plan_query_of_an_auto_user_reaches_the_reference_dbus_daemon() {
    require_root!();
    use crate::undo_journal::which;
    if which("dbus-send").is_none() {
        skip!("dbus-send is not installed (Debian: dbus-bin)");
    }
    let fr = host_with(&["dbus-send"]);
    let Some(bus) = DbusDaemon::system(&fr, OPEN_POLICY) else {
        skip!("dbus-daemon is not installed (Debian: dbus-daemon)");
    };
    let mut cfg = skyhook::serve::Config::new(fr.root());
    cfg.plan.sandbox.allow_sockets = vec![bus.socket.clone()];
    let script = r#"
        let r = query(["dbus-send", "--bus=unix:path=/run/dbus/system_bus_socket",
                       "--print-reply", "--dest=org.freedesktop.DBus",
                       "/org/freedesktop/DBus", "org.freedesktop.DBus.GetId"]);
        print("code=" + r.code + " out=" + r.stdout + " err=" + r.stderr);
    "#;
    let (exit, lines) = plan_with(cfg, &plan_body("bus", script));
    drop(bus);
    assert!(
        lines.contains("code=0 out=method return") && lines.contains("string \""),
        "a plan's dbus-send as uid {}: {lines}",
        skyhook::process::sandbox::AUTO_BASE
    );
    assert_eq!(exit["exit"], json!({"code": 0}), "{exit:#}");
}
