//! `skyhook-agent serve` on loopback, driven with raw HTTP/1.1 requests as any client would
//! (remote-api.md): start/stream/exit for sh and rhai, resume from `after=N` after a dropped
//! connection, 410 on a gap, cancel (grandchildren die), auth (401, SIGHUP revoke), 429, refused
//! starts that leave nothing, secrets split across reads, non-UTF-8 and over-long lines.
//! Steps that must wait block on a FIFO the test writes: nothing sleeps to wait.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

const AGENT: &str = env!("CARGO_BIN_EXE_skyhook-agent");
const SECRET: &str = "hunter2-secret-value";

fn sha(s: &str) -> String {
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(s.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// A running server on a loopback port, its temp dir and its stderr lines.
pub struct Srv {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
    pub log: mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Drop for Srv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Srv {
    pub fn start(extra: &[&str]) -> Srv {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, extra)
    }

    pub fn start_in(dir: tempfile::TempDir, extra: &[&str]) -> Srv {
        Self::start_limited(dir, extra, None)
    }

    /// [`Srv::start_in`], the server's `RLIMIT_NOFILE` (soft and hard) set to `nofile` when
    /// given (in the child only).
    pub fn start_limited(dir: tempfile::TempDir, extra: &[&str], nofile: Option<u64>) -> Srv {
        let d = dir.path();
        std::fs::write(
            d.join("engines"),
            format!("ci {}\nwf {}\n", sha("tok-ci"), sha("tok-wf")),
        )
        .unwrap();
        // kubelet layout
        let db = d.join("secrets/db");
        std::fs::create_dir_all(db.join("..2026_12_01")).unwrap();
        std::fs::write(db.join("..2026_12_01/password"), SECRET).unwrap();
        let _ = std::os::unix::fs::symlink("..2026_12_01", db.join("..data"));
        let _ = std::os::unix::fs::symlink("..data/password", db.join("password"));
        std::fs::create_dir_all(d.join("secrets/other")).unwrap();
        std::fs::write(d.join("secrets/other/k"), "other-value").unwrap();
        let mut args: Vec<String> = [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--root",
            "/",
            "--tokens-file",
            &d.join("engines").display().to_string(),
            "--secrets-dir",
            &d.join("secrets").display().to_string(),
            "--allow-secret",
            "db",
            "--alive-every",
            "200ms",
            "--log-format",
            "json",
            "--state-dir",
            &d.join("state").display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut cmd = Command::new(AGENT);
        cmd.args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe; the closure allocates nothing.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().unwrap();
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut srv = Srv {
            child,
            port: 0,
            dir,
            log: rx,
            seen: Vec::new(),
        };
        let l = srv.wait_log("listening on 127.0.0.1:");
        let port = l.split("127.0.0.1:").nth(1).unwrap();
        srv.port = port.split_whitespace().next().unwrap().parse().unwrap();
        srv
    }

    /// The next stderr line containing `pat` (10 s at most).
    pub fn wait_log(&mut self, pat: &str) -> String {
        loop {
            let l = self
                .log
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("no log line with {pat:?}; seen {:?}", self.seen));
            self.seen.push(l.clone());
            if l.contains(pat) {
                return l;
            }
        }
    }

    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Open a request; the response head is read, the body is left to [`Resp`].
    pub fn open(&self, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> Resp {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut req =
            format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
        if let Some(t) = token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        let body = body.unwrap_or("");
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ));
        s.write_all(req.as_bytes()).unwrap();
        let mut r = BufReader::new(s);
        let mut status_line = String::new();
        r.read_line(&mut status_line).unwrap();
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let mut headers = Vec::new();
        loop {
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
            let l = l.trim_end();
            if l.is_empty() {
                break;
            }
            let (k, v) = l.split_once(':').unwrap();
            headers.push((k.to_ascii_lowercase(), v.trim().to_string()));
        }
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
        let length = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map(|(_, v)| v.parse::<usize>().unwrap());
        Resp {
            status,
            headers,
            r,
            chunked,
            length,
            buf: Vec::new(),
            done: false,
        }
    }

    /// A whole request with the ci token: status and body.
    pub fn call(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let mut r = self.open(method, path, Some("tok-ci"), body);
        (r.status, r.text())
    }

    /// Start `body` (ci token) and read its stream to the end: status and events.
    pub fn run(&self, body: &Value) -> (u16, Vec<Value>) {
        let mut r = self.open(
            "POST",
            "/v1/executions",
            Some("tok-ci"),
            Some(&body.to_string()),
        );
        let status = r.status;
        (status, r.events())
    }
}

/// A response being read (chunked bodies decoded as they arrive).
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    r: BufReader<TcpStream>,
    chunked: bool,
    length: Option<usize>,
    buf: Vec<u8>,
    done: bool,
}

impl Resp {
    pub fn header(&self, k: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }

    fn fill(&mut self) -> bool {
        if self.done {
            return false;
        }
        if !self.chunked {
            let mut b = Vec::new();
            match self.length {
                Some(n) => {
                    b.resize(n, 0);
                    self.r.read_exact(&mut b).unwrap();
                }
                None => {
                    self.r.read_to_end(&mut b).unwrap();
                }
            }
            self.buf.extend_from_slice(&b);
            self.done = true;
            return true;
        }
        let mut size = String::new();
        if self.r.read_line(&mut size).unwrap_or(0) == 0 {
            self.done = true;
            return false;
        }
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            self.done = true;
            return false;
        }
        let mut b = vec![0; n + 2];
        self.r.read_exact(&mut b).unwrap();
        self.buf.extend_from_slice(&b[..n]);
        true
    }

    /// The next NDJSON line of the body, heartbeats included.
    pub fn line(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let l: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(String::from_utf8(l[..i].to_vec()).unwrap());
            }
            if !self.fill() {
                return None;
            }
        }
    }

    /// The next numbered event (heartbeats skipped and checked).
    pub fn event(&mut self) -> Option<Value> {
        loop {
            let l = self.line()?;
            let v: Value = serde_json::from_str(&l).unwrap();
            if v.get("alive").is_some() {
                assert!(v.get("seq").is_none());
                continue;
            }
            return Some(v);
        }
    }

    pub fn events(&mut self) -> Vec<Value> {
        std::iter::from_fn(|| self.event()).collect()
    }

    pub fn text(&mut self) -> String {
        while self.fill() {}
        String::from_utf8(std::mem::take(&mut self.buf)).unwrap()
    }
}

fn lines_of(events: &[Value], stream: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["stream"] == stream)
        .map(|e| e["line"].as_str().unwrap().to_string())
        .collect()
}

fn exit_of(events: &[Value]) -> Value {
    let last = events.last().expect("events");
    last["exit"].clone()
}

fn assert_numbered(events: &[Value], first: u64) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"].as_u64(), Some(first + i as u64), "{events:?}");
    }
}

fn mkfifo(p: &Path) {
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
}

#[test]
fn sh_stream_secret_split_lossy_long_lines_and_status() {
    let srv = Srv::start(&[]);
    let cmd = "echo start; printf 'pw=%s' \"${DB_PW%%2-secret-value}\"; sleep 0.1; printf '2-secret-value\\n'; \
         echo \"env=$DB_PW\" >&2; printf 'bad\\377\\n'; head -c 70000 /dev/zero | tr '\\0' x; echo; exit 3";
    let (status, ev) = srv.run(&json!({
        "id": "sh-1", "kind": "sh", "command": cmd,
        "secrets": [{"env": "DB_PW", "name": "db", "key": "password"}]
    }));
    assert_eq!(status, 200);
    assert_numbered(&ev, 1);
    let all = serde_json::to_string(&ev).unwrap();
    assert!(!all.contains(SECRET) && !all.contains("hunter2"), "{all}");
    let out = lines_of(&ev, "stdout");
    assert_eq!(out[0], "start");
    assert_eq!(out[1], "pw=***");
    assert_eq!(lines_of(&ev, "stderr"), ["env=***"]);
    let lossy = ev.iter().find(|e| e["line"] == "bad\u{fffd}").unwrap();
    assert_eq!(lossy["lossy"], true);
    let long: Vec<&Value> = ev
        .iter()
        .filter(|e| e["line"].as_str().is_some_and(|l| l.starts_with("xxx")))
        .collect();
    assert_eq!(long.len(), 2);
    assert_eq!(long[0]["partial"], true);
    assert!(long[1].get("partial").is_none());
    let total: usize = long.iter().map(|e| e["line"].as_str().unwrap().len()).sum();
    assert_eq!(total, 70000);
    assert_eq!(exit_of(&ev), json!({"code": 3}));
    let (s, body) = srv.call("GET", "/v1/executions/sh-1", None);
    assert_eq!(s, 200);
    let st: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(st["state"], "exited");
    assert_eq!(st["exit"], json!({"code": 3}));
    assert_eq!(st["first_seq"], 1);
    assert_eq!(st["last_seq"].as_u64(), ev.last().unwrap()["seq"].as_u64());
    // the same id again: 409
    let (s, _) = srv.run(&json!({"id": "sh-1", "kind": "sh", "command": "true"}));
    assert_eq!(s, 409);
    // health needs no token
    let mut h = srv.open("GET", "/v1/health", None, None);
    assert_eq!(h.status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&h.text()).unwrap()["running"],
        0
    );
}

#[test]
fn resume_after_drop_and_gap_is_410() {
    let mut srv = Srv::start(&["--ring-lines", "5"]);
    let fifo = srv.dir.path().join("go");
    mkfifo(&fifo);
    let cmd = format!(
        "for i in 1 2 3; do echo a$i; done; read x < {f}; for i in 4 5 6; do echo a$i; done",
        f = fifo.display()
    );
    let mut r = srv.open(
        "POST",
        "/v1/executions",
        Some("tok-ci"),
        Some(&json!({"id": "res-1", "kind": "sh", "command": cmd}).to_string()),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    let first: Vec<Value> = (0..2).map(|_| r.event().unwrap()).collect();
    drop(r); // the connection drops after seq 2
    // let the step go on and end, then resume from seq 2: seq 3.. with nothing lost or repeated
    std::fs::write(&fifo, "go\n").unwrap();
    let mut r = srv.open(
        "GET",
        "/v1/executions/res-1/events?after=2",
        Some("tok-ci"),
        None,
    );
    assert_eq!(r.status, 200);
    let rest = r.events();
    let mut all = first.clone();
    all.extend(rest);
    assert_numbered(&all, 1);
    assert_eq!(
        lines_of(&all, "stdout"),
        ["a1", "a2", "a3", "a4", "a5", "a6"]
    );
    assert_eq!(exit_of(&all), json!({"code": 0}));
    // 7 events, the ring keeps 5 (3..7): after=0 is a gap
    let (s, body) = srv.call("GET", "/v1/executions/res-1/events?after=0", None);
    assert_eq!(s, 410);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"error": "gap", "wanted": 1, "oldest": 3})
    );
    let (s, _) = srv.call("GET", "/v1/executions/res-1/events?after=2", None);
    assert_eq!(s, 200);
    let (s, _) = srv.call("GET", "/v1/executions/res-1/events?after=x", None);
    assert_eq!(s, 400);
    let l = srv.wait_log("\"route\":\"exit\"");
    assert!(l.contains("res-1"), "{l}");
}

#[test]
fn cancel_kills_the_group_and_grandchildren() {
    let srv = Srv::start(&[]);
    let mut r = srv.open(
        "POST",
        "/v1/executions",
        Some("tok-ci"),
        Some(
            &json!({"id": "c-1", "kind": "sh",
                    "command": "sleep 300 & echo $!; sh -c 'sleep 301 & echo $!; wait' & wait"})
            .to_string(),
        ),
    );
    assert_eq!(r.status, 200);
    let pids: Vec<String> = (0..2)
        .map(|_| r.event().unwrap()["line"].as_str().unwrap().to_string())
        .collect();
    for p in &pids {
        assert!(Path::new(&format!("/proc/{p}")).exists());
    }
    let (s, body) = srv.call(
        "POST",
        "/v1/executions/c-1/cancel",
        Some(r#"{"grace_s": 2}"#),
    );
    assert_eq!(s, 202, "{body}");
    let rest = r.events();
    assert_eq!(exit_of(&rest), json!({"signal": 15}));
    for p in &pids {
        let gone =
            std::fs::read_to_string(format!("/proc/{p}/stat")).map_or(true, |s| s.contains(") Z "));
        assert!(gone, "grandchild {p} survived the cancel");
    }
    // cancelling an ended execution: 200 with its exit
    let (s, body) = srv.call("POST", "/v1/executions/c-1/cancel", None);
    assert_eq!(s, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["exit"],
        json!({"signal": 15})
    );
    let (s, _) = srv.call("POST", "/v1/executions/c-1/cancel", Some("{\"grace\": 1}"));
    assert_eq!(s, 400);
    let (s, _) = srv.call("POST", "/v1/executions/nope/cancel", None);
    assert_eq!(s, 404);
    // a timeout
    let (_, ev) =
        srv.run(&json!({"id": "t-1", "kind": "sh", "command": "sleep 300", "timeout_s": 0.2}));
    assert_eq!(exit_of(&ev), json!({"error": "timeout"}));
}

#[test]
fn auth_401_sighup_revokes_and_429_and_refused_starts_leave_nothing() {
    let mut srv = Srv::start(&["--max-running", "1"]);
    // 401: none, wrong, unknown id alike
    for tok in [None, Some("wrong")] {
        let mut r = srv.open("GET", "/v1/executions/whatever", tok, None);
        assert_eq!(r.status, 401);
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        assert_eq!(r.text().trim(), r#"{"error":"unauthorized"}"#);
    }
    let marker = srv.dir.path().join("marker");
    let touch = format!("touch {}", marker.display());
    let refused = [
        (
            json!({"id": "r-1", "kind": "sh", "command": touch,
                "secrets": [{"env": "X", "name": "other", "key": "k"}]}),
            403,
        ),
        (
            json!({"id": "r-2", "kind": "sh", "command": touch,
                "secrets": [{"env": "X", "name": "db", "key": "missing"}]}),
            422,
        ),
        (
            json!({"id": "r-3", "kind": "sh", "command": touch, "bogus": 1}),
            400,
        ),
        (
            json!({"id": "bad id!", "kind": "sh", "command": touch}),
            400,
        ),
        (
            json!({"id": "r-4", "kind": "rhai", "script": "let x = ;"}),
            422,
        ),
        (
            json!({"id": "r-5", "kind": "sh", "command": touch, "workdir": "/nonexistent-dir"}),
            422,
        ),
    ];
    for (body, want) in &refused {
        let (s, ev) = srv.run(body);
        assert_eq!(s, *want, "{body}");
        let id = body["id"].as_str().unwrap();
        if id == "r-1" {
            assert_eq!(ev.len(), 1);
        }
        let (s, _) = srv.call(
            "GET",
            &format!("/v1/executions/{}", id.replace(' ', "%20")),
            None,
        );
        assert_eq!(s, 404, "{id} left a ring entry");
    }
    let (s, body) = srv.call("POST", "/v1/executions", Some(&refused[0].0.to_string()));
    assert_eq!(s, 403);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v,
        json!({"error": "secret not allowed", "name": "other", "key": "k"})
    );
    let (s, body) = srv.call("POST", "/v1/executions", Some(&refused[4].0.to_string()));
    assert_eq!(s, 422);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["line"].as_u64(), v["column"].as_u64()),
        (Some(1), Some(9))
    );
    let (s, _) = srv.call("POST", "/v1/executions", Some("{not json"));
    assert_eq!(s, 400);
    assert!(!marker.exists(), "a refused start ran");
    assert!(
        std::fs::read_dir(srv.dir.path().join("state"))
            .unwrap()
            .next()
            .is_none()
    );
    // 429 past --max-running, with Retry-After
    let fifo = srv.dir.path().join("hold");
    mkfifo(&fifo);
    let mut hold = srv.open(
        "POST",
        "/v1/executions",
        Some("tok-ci"),
        Some(&json!({"id": "h-1", "kind": "sh", "command": format!("echo up; read x < {}", fifo.display())}).to_string()),
    );
    assert_eq!(hold.event().unwrap()["line"], "up");
    let r = srv.open(
        "POST",
        "/v1/executions",
        Some("tok-wf"),
        Some(&json!({"id": "h-2", "kind": "sh", "command": "true"}).to_string()),
    );
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    drop(r);
    std::fs::write(&fifo, "x\n").unwrap();
    assert_eq!(exit_of(&hold.events()), json!({"code": 0}));
    // SIGHUP after deleting wf's line: wf is revoked, ci is not
    std::fs::write(
        srv.dir.path().join("engines"),
        format!("ci {}\n", sha("tok-ci")),
    )
    .unwrap();
    srv.signal("HUP");
    srv.wait_log("tokens reloaded");
    let r = srv.open("GET", "/v1/executions/h-1", Some("tok-wf"), None);
    assert_eq!(r.status, 401);
    let r = srv.open("GET", "/v1/executions/h-1", Some("tok-ci"), None);
    assert_eq!(r.status, 200);
    // audit lines name the engine and never a value
    assert!(
        srv.seen
            .iter()
            .any(|l| l.contains("\"outcome\":429") && l.contains("\"engine\":\"wf\"")),
        "{:?}",
        srv.seen
    );
    for l in &srv.seen {
        assert!(!l.contains(SECRET) && !l.contains("other-value"), "{l}");
    }
}

/// One raw HTTP/1.1 request on a fresh connection (closed after): the whole response.
fn raw(port: u16, head: &str, body: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!(
        "{head}\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn content_type_415_bearer_any_case_and_an_empty_tokens_file_warns() {
    let mut srv = Srv::start(&[]);
    let start = |id: &str| json!({"id": id, "kind": "sh", "command": "echo hi"}).to_string();
    let post = "POST /v1/executions HTTP/1.1\r\nAuthorization: Bearer tok-ci";
    for (ct, id) in [
        ("", "t-1"),
        ("\r\nContent-Type: text/plain", "t-2"),
        ("\r\nContent-Type: application/x-www-form-urlencoded", "t-3"),
    ] {
        let r = raw(srv.port, &format!("{post}{ct}"), &start(id));
        assert!(r.starts_with("HTTP/1.1 415"), "{ct:?}: {r}");
        assert!(r.contains("application/json"), "{r}");
        let (s, _) = srv.call("GET", &format!("/v1/executions/{id}"), None);
        assert_eq!(s, 404, "a refused start ran");
    }
    let r = raw(
        srv.port,
        &format!("{post}\r\nContent-Type: Application/JSON; charset=utf-8"),
        &start("t-4"),
    );
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains("\"line\":\"hi\""), "{r}");
    // a cancel without a body needs no Content-Type; one with a body does
    let cancel = "POST /v1/executions/t-4/cancel HTTP/1.1\r\nAuthorization: Bearer tok-ci";
    assert!(raw(srv.port, cancel, "").starts_with("HTTP/1.1 200"));
    let r = raw(
        srv.port,
        &format!("{cancel}\r\nContent-Type: text/plain"),
        "{}",
    );
    assert!(r.starts_with("HTTP/1.1 415"), "{r}");
    // the scheme in any case
    for scheme in ["bearer", "BEARER"] {
        let r = raw(
            srv.port,
            &format!("GET /v1/executions/t-4 HTTP/1.1\r\nAuthorization: {scheme} tok-ci"),
            "",
        );
        assert!(r.starts_with("HTTP/1.1 200"), "{scheme}: {r}");
    }
    // emptied tokens file: the reload warns
    std::fs::write(srv.dir.path().join("engines"), "# none\n").unwrap();
    srv.signal("HUP");
    let l = srv.wait_log("tokens reloaded");
    assert!(
        l.contains("lists no engine: every request is refused with 401"),
        "{l}"
    );
}

#[test]
fn rhai_apply_plan_check_and_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let mut srv = Srv::start_in(dir, &["--unix", &sock.display().to_string()]);
    srv.wait_log("listening on unix:");
    let target = srv.dir.path().join("app.conf");
    let script = format!(
        "let pw = secret_env(\"PW\"); print(`pw is ${{pw}}`); fs::write(\"{}\", \"a=1\\n\");",
        target.display()
    );
    let body = |id: &str, mode: &str| {
        json!({"id": id, "kind": "rhai", "mode": mode, "script": script,
               "secrets": [{"env": "PW", "name": "db", "key": "password"}]})
    };
    let (s, ev) = srv.run(&body("p-1", "plan"));
    assert_eq!(s, 200);
    assert!(!serde_json::to_string(&ev).unwrap().contains(SECRET));
    assert_eq!(lines_of(&ev, "stdout"), ["pw is ***"]);
    let plan: Vec<&Value> = ev.iter().filter(|e| e.get("plan").is_some()).collect();
    assert_eq!(plan.len(), 1);
    assert_eq!(plan[0]["plan"]["action"], "create");
    assert!(plan[0]["plan"]["diff"].as_str().unwrap().contains("+a=1"));
    assert!(!target.exists(), "a plan wrote");
    assert_eq!(exit_of(&ev), json!({"code": 0}));
    // check before apply: drift, exit 1
    let (_, ev) = srv.run(&body("k-1", "check"));
    assert_eq!(exit_of(&ev)["code"], 1);
    assert!(ev.iter().any(|e| e["plan"]["drift"] == true));
    let (_, ev) = srv.run(&body("a-1", "apply"));
    assert_eq!(exit_of(&ev), json!({"code": 0}));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "a=1\n");
    let (_, ev) = srv.run(&body("k-2", "check"));
    assert_eq!(exit_of(&ev), json!({"code": 0}));
    // the same API on the Unix socket, which only its owner may connect to
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&sock).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    s.write_all(b"GET /v1/executions/a-1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-ci\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("\"state\":\"exited\""), "{text}");
}

#[test]
fn cancel_survives_a_server_restart() {
    let srv = Srv::start(&[]);
    let mut r = srv.open(
        "POST",
        "/v1/executions",
        Some("tok-ci"),
        Some(
            &json!({"id": "rs-1", "kind": "sh", "command": "sleep 300 & echo $!; wait"})
                .to_string(),
        ),
    );
    let pid = r.event().unwrap()["line"].as_str().unwrap().to_string();
    drop(r);
    let state: PathBuf = srv.dir.path().join("state/rs-1.json");
    assert!(state.exists());
    // the server dies hard; its main process goes with it (pdeathsig), the grandchild stays
    let dir = {
        let mut srv = srv;
        let _ = srv.child.kill();
        let _ = srv.child.wait();
        std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap())
    };
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "grandchild gone already"
    );
    let mut srv = Srv::start_in(dir, &[]);
    assert!(
        srv.seen
            .iter()
            .any(|l| l.contains("cancellable by id: rs-1")),
        "{:?}",
        srv.seen
    );
    let (s, body) = srv.call(
        "POST",
        "/v1/executions/rs-1/cancel",
        Some(r#"{"grace_s": 5}"#),
    );
    assert_eq!(s, 202, "{body}");
    // the grandchild is not our child: wait for it on its pidfd-less /proc entry, bounded
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}/stat")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{pid} survived the cancel"
        );
        std::thread::yield_now();
    }
    // the id stays known: 200 with its exit once the cancel finished (202 until then)
    srv.wait_log("\"route\":\"POST /v1/executions/rs-1/cancel\"");
    let (s, _) = srv.call("POST", "/v1/executions/rs-1/cancel", None);
    assert!(s == 200 || s == 202, "{s}");
    let _ = srv.pid();
}

/// A loopback proxy to `port` whose first connection is cut after `cut` bytes of response.
fn cutting_proxy(port: u16, cut: usize) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let me = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (n, c) in l.incoming().enumerate() {
            let Ok(mut c) = c else { break };
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let (mut c2, mut s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c2, &mut s2);
            });
            std::thread::spawn(move || {
                if n == 0 {
                    let mut b = vec![0; cut];
                    let _ = s.read_exact(&mut b);
                    let _ = c.write_all(&b);
                    let _ = c.shutdown(std::net::Shutdown::Both);
                } else {
                    let _ = std::io::copy(&mut s, &mut c);
                }
            });
        }
    });
    me
}

#[test]
fn skyhook_run_remote_renders_the_local_plan_and_resumes_a_dropped_stream() {
    let mut srv = Srv::start(&[]);
    let d = srv.dir.path().to_path_buf();
    std::fs::write(d.join("token"), "tok-ci\n").unwrap();
    let target = d.join("r.conf");
    let script = d.join("s.rhai");
    std::fs::write(
        &script,
        format!(
            "for i in 0..40 {{ print(`line ${{i}}`); }}\nfs::write(\"{}\", \"k=v\\n\");\n",
            target.display()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
            .arg(&script)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8(out.stdout).unwrap())
    };
    let local = run(&["--root", "/", "--detailed-exitcode"]);
    assert_eq!(local.0, Some(3));
    assert!(
        local.1.contains("line 39") && local.1.contains("+k=v"),
        "{}",
        local.1
    );
    let token = d.join("token").display().to_string();
    let url = format!("http://127.0.0.1:{}", srv.port);
    let remote = run(&[
        "--remote",
        &url,
        "--token-file",
        &token,
        "--detailed-exitcode",
    ]);
    assert_eq!(remote, local);
    // the first connection is cut mid-stream: the client resumes with after=N
    let proxy = format!("http://127.0.0.1:{}", cutting_proxy(srv.port, 600));
    let resumed = run(&[
        "--remote",
        &proxy,
        "--token-file",
        &token,
        "--detailed-exitcode",
    ]);
    assert_eq!(resumed, local);
    assert!(
        (0..50).any(|_| srv
            .wait_log("\"route\":\"GET /v1/executions/skyhook-run-")
            .contains("/events")),
        "the client did not resume"
    );
    let (code, json_out) = run(&["--remote", &url, "--token-file", &token, "--output", "json"]);
    assert_eq!(code, Some(0));
    let v: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(v["summary"], "Plan: 1 to change, 0 unchanged.");
    assert!(!target.exists());
    let (code, _) = run(&["--remote", &url, "--token-file", &token, "--mode", "check"]);
    assert_eq!(code, Some(1));
    let (code, _) = run(&["--remote", &url, "--token-file", &token, "--apply"]);
    assert_eq!(code, Some(0));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "k=v\n");
    std::fs::write(d.join("token"), "wrong").unwrap();
    let (code, _) = run(&["--remote", &url, "--token-file", &token]);
    assert_eq!(code, Some(1));
}

/// A CA and a leaf for 127.0.0.1 signed by it, made with openssl: (ca.pem, cert.pem, key.pem).
fn pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let sh = |cmd: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    sh(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout ca.key -out ca.pem -days 2 -subj /CN=test-ca",
    );
    sh(
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout key.pem -out leaf.csr -subj /CN=localhost",
    );
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         extendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    sh(
        "openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
        -out cert.pem -days 2 -extfile ext",
    );
    (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    )
}

#[test]
fn tls_and_client_certificates_with_skyhook_run_remote() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = pki(dir.path());
    let (ca, cert, key) = (
        ca.display().to_string(),
        cert.display().to_string(),
        key.display().to_string(),
    );
    let srv = Srv::start_in(
        dir,
        &["--tls-cert", &cert, "--tls-key", &key, "--client-ca", &ca],
    );
    let d = srv.dir.path();
    std::fs::write(d.join("token"), "tok-ci").unwrap();
    let script = d.join("t.rhai");
    std::fs::write(&script, "print(\"over tls\");").unwrap();
    let token = d.join("token").display().to_string();
    let url = format!("https://127.0.0.1:{}", srv.port);
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
            .arg(&script)
            .args(["--remote", &url, "--token-file", &token, "--tls-ca", &ca])
            .args(extra)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8(out.stdout).unwrap())
    };
    let (code, out) = run(&["--tls-cert", &cert, "--tls-key", &key]);
    assert_eq!(code, Some(0));
    assert_eq!(out, "over tls\nPlan: 0 to change, 0 unchanged.\n");
    // no client certificate: the handshake fails, nothing runs
    assert_eq!(run(&[]).0, Some(1));
    // plain HTTP on the TLS port gets no HTTP answer
    let mut s = TcpStream::connect(("127.0.0.1", srv.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut b = Vec::new();
    let _ = s.read_to_end(&mut b);
    assert!(!b.starts_with(b"HTTP/1.1 200"));
    // non-loopback without TLS is refused at startup
    let out = Command::new(AGENT)
        .args(["serve", "--listen", "0.0.0.0:0", "--insecure-no-auth"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing plain HTTP"));
}

#[test]
fn sigterm_stops_accepting_lets_the_grace_pass_then_cancels() {
    let mut srv = Srv::start(&["--shutdown-grace", "200ms"]);
    let mut r = srv.open(
        "POST",
        "/v1/executions",
        Some("tok-ci"),
        Some(&json!({"id": "g-1", "kind": "sh", "command": "echo up; sleep 300"}).to_string()),
    );
    assert_eq!(r.event().unwrap()["line"], "up");
    srv.signal("TERM");
    srv.wait_log("\"event\":\"shutdown\"");
    let rest = r.events();
    assert_eq!(exit_of(&rest), json!({"signal": 15}));
    let st = srv.child.wait().unwrap();
    assert_eq!(st.code(), Some(0));
    assert!(TcpStream::connect(("127.0.0.1", srv.port)).is_err());
}

#[test]
fn ctrl_c_of_skyhook_run_remote_cancels_the_execution() {
    let mut srv = Srv::start(&[]);
    let d = srv.dir.path().to_path_buf();
    std::fs::write(d.join("token"), "tok-ci").unwrap();
    let script = d.join("w.rhai");
    std::fs::write(
        &script,
        "print(\"up\");\nrun([\"sleep\", \"300\"]);\nprint(\"not reached\");",
    )
    .unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
        .arg(&script)
        .args([
            "--remote",
            &format!("http://127.0.0.1:{}", srv.port),
            "--token-file",
            &d.join("token").display().to_string(),
            "--apply",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    assert_eq!(l, "up\n");
    let st = Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(!rest.contains("not reached"), "{rest}");
    assert_eq!(c.wait().unwrap().code(), Some(1));
    let cancel = srv.wait_log("/cancel");
    assert!(cancel.contains("\"outcome\":202"), "{cancel}");
    let exit = srv.wait_log("\"route\":\"exit\"");
    assert!(exit.contains("skyhook-run-"), "{exit}");
}

fn proc_field(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let l = s.lines().find(|l| l.starts_with(field)).unwrap();
    l.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

fn children(pid: u32) -> String {
    let mut all = String::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let p = t.unwrap().path().join("children");
        all.push_str(&std::fs::read_to_string(p).unwrap_or_default());
    }
    all.trim().to_string()
}

/// Held load, loopback only: 1,000 sequential short executions, then 100 at once. No
/// process or descriptor is left behind and the resident set grows by less than the ring
/// bound (printed: `RSS before/after`).
#[test]
fn held_load_leaks_no_process_fd_or_memory_beyond_the_ring() {
    let srv = Srv::start(&["--max-running", "100", "--ring-bytes", "8MiB"]);
    let pid = srv.pid();
    // warm up (first rhai engine use, allocator arenas)
    for i in 0..20 {
        let (s, _) = srv.run(&json!({"id": format!("w{i}"), "kind": "sh", "command": "echo w"}));
        assert_eq!(s, 200);
    }
    let (rss0, fd0) = (proc_field(pid, "VmRSS:"), fds(pid));
    let t = std::time::Instant::now();
    for i in 0..1000 {
        let (s, ev) = srv.run(&json!({"id": format!("q{i}"), "kind": "sh", "command": "echo $0"}));
        assert_eq!(s, 200);
        assert_eq!(exit_of(&ev), json!({"code": 0}));
    }
    let seq = t.elapsed();
    let t = std::time::Instant::now();
    let mut open: Vec<Resp> = (0..100)
        .map(|i| {
            let body = json!({"id": format!("p{i}"), "kind": "sh", "command": "seq 1 100"});
            let r = srv.open(
                "POST",
                "/v1/executions",
                Some("tok-ci"),
                Some(&body.to_string()),
            );
            assert_eq!(r.status, 200, "p{i}");
            r
        })
        .collect();
    for r in &mut open {
        let ev = r.events();
        assert_eq!(lines_of(&ev, "stdout").len(), 100);
        assert_eq!(exit_of(&ev), json!({"code": 0}));
    }
    drop(open);
    let conc = t.elapsed();
    let (_, h) = srv.call("GET", "/v1/health", None);
    assert_eq!(serde_json::from_str::<Value>(&h).unwrap()["running"], 0);
    let (rss1, fd1) = (proc_field(pid, "VmRSS:"), fds(pid));
    eprintln!(
        "held load: 1000 sequential in {seq:?}, 100 concurrent in {conc:?}; \
         RSS before/after {rss0} KiB / {rss1} KiB; fds {fd0} / {fd1}"
    );
    assert_eq!(children(pid), "", "processes left behind");
    assert!(fd1 <= fd0 + 2, "descriptors leaked: {fd0} -> {fd1}");
    // the rings hold at most 8 MiB, plus the bookkeeping of 1024 ended executions
    assert!(rss1 < rss0 + 24 * 1024, "RSS grew {rss0} -> {rss1} KiB");
}

/// True once `pid` exited (gone, or a zombie), waiting on its pidfd for 10 s at most: the
/// processes watched here are not the test's children.
fn exits_within_10s(pid: &str) -> bool {
    let pid: libc::pid_t = pid.parse().unwrap();
    // SAFETY: pidfd_open(2) with a pid and no flags; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int;
    if fd < 0 {
        return true; // ESRCH: gone already
    }
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, then the descriptor opened above.
    let r = unsafe { libc::poll(&mut p, 1, 10_000) };
    unsafe { libc::close(fd) };
    r == 1
}

fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// SIGKILLs the listed `sleep` processes when dropped: a failing test leaves none behind.
struct KillOnDrop(Vec<String>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for p in &self.0 {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            if cmd.starts_with(b"sleep") {
                // SAFETY: kill(2) on a pid checked to be one of the test's sleeps.
                unsafe { libc::kill(p.parse().unwrap(), libc::SIGKILL) };
            }
        }
    }
}

/// SIGKILL the server (its main processes die with it, by pdeathsig) and keep its dir.
fn crash(mut srv: Srv) -> tempfile::TempDir {
    let _ = srv.child.kill();
    let _ = srv.child.wait();
    std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap())
}

/// Start `rk2` (a background `sleep` and a `setsid sleep`), SIGKILL the server, restart it on
/// the same state dir with `extra`: the pids of the two sleeps and the new server, after
/// checking the id is known (409, status recovered and running, the record kept).
fn rk2_after_a_crash(extra: &[&str], boundary: &str) -> (Vec<String>, Srv, KillOnDrop) {
    let srv = Srv::start(extra);
    assert!(
        srv.seen.iter().any(|l| l.contains(boundary)),
        "{:?}",
        srv.seen
    );
    let mut r = srv.open(
        "POST",
        "/v1/executions",
        Some("tok-ci"),
        Some(
            &json!({"id": "rk2", "kind": "sh",
                    "command": "sleep 1010 & echo $!; setsid sleep 1011 & echo $!; wait"})
            .to_string(),
        ),
    );
    assert_eq!(r.status, 200);
    let pids: Vec<String> = (0..2)
        .map(|_| r.event().unwrap()["line"].as_str().unwrap().to_string())
        .collect();
    let guard = KillOnDrop(pids.clone());
    drop(r);
    let dir = crash(srv);
    for p in &pids {
        assert!(alive(p), "{p} died with the server");
    }
    let mut srv = Srv::start_in(dir, extra);
    assert!(
        srv.seen
            .iter()
            .any(|l| l.contains("cancellable by id: rk2")),
        "{:?}",
        srv.seen
    );
    let (s, body) = srv.call(
        "POST",
        "/v1/executions",
        Some(&json!({"id": "rk2", "kind": "sh", "command": "true"}).to_string()),
    );
    assert_eq!(s, 409, "{body}");
    let (s, body) = srv.call("GET", "/v1/executions/rk2", None);
    assert_eq!(s, 200);
    let st: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&st["state"], &st["recovered"], &st["exit"]),
        (&json!("running"), &json!(true), &Value::Null),
        "{body}"
    );
    assert!(srv.dir.path().join("state/rk2.json").exists());
    let _ = srv.wait_log("\"route\":\"GET /v1/executions/rk2\"");
    (pids, srv, guard)
}

/// Issue 22 item 5: an id recorded by a server that was SIGKILLed is still known after the
/// restart (409, status), and its cancel reaches every process of it through its cgroup,
/// the `setsid sleep` included; then the record and the cgroup are gone.
#[test]
fn an_id_reused_after_a_crash_is_409_and_cancel_kills_every_process_of_it() {
    let (pids, srv, _guard) = rk2_after_a_crash(&[], "a cgroup v2 per execution");
    let cg: Value =
        serde_json::from_slice(&std::fs::read(srv.dir.path().join("state/rk2.json")).unwrap())
            .unwrap();
    let cg = PathBuf::from(cg["cgroup"].as_str().expect("a cgroup recorded"));
    assert!(cg.is_dir());
    let (s, body) = srv.call(
        "POST",
        "/v1/executions/rk2/cancel",
        Some(r#"{"grace_s": 5}"#),
    );
    assert_eq!(s, 202, "{body}");
    for p in &pids {
        assert!(exits_within_10s(p), "{p} survived the cancel");
    }
    // the exit is known once the cancel finished: polled with a bounded deadline
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let body = loop {
        let (_, body) = srv.call("GET", "/v1/executions/rk2", None);
        if body.contains("\"exited\"") || std::time::Instant::now() > until {
            break body;
        }
        std::thread::yield_now();
    };
    let st: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(st["exit"], json!({"error": "cancelled"}), "{body}");
    assert!(!srv.dir.path().join("state/rk2.json").exists());
    assert!(!cg.exists(), "{} left behind", cg.display());
    let (s, _) = srv.call(
        "POST",
        "/v1/executions",
        Some(&json!({"id": "rk2", "kind": "sh", "command": "true"}).to_string()),
    );
    assert_eq!(s, 409, "an ended id stays taken while it is kept");
}

/// The fallback boundary (`--cgroup-root none`): the id is still known after the restart
/// and cancel reaches the process group; a `setsid` grandchild is outside it (documented).
#[test]
fn without_a_cgroup_a_recovered_cancel_reaches_the_process_group_only() {
    let (pids, srv, _guard) = rk2_after_a_crash(
        &["--cgroup-root", "none"],
        "execution boundary: process group + subreaper sweep (no cgroup)",
    );
    let rec = std::fs::read_to_string(srv.dir.path().join("state/rk2.json")).unwrap();
    assert!(!rec.contains("cgroup"), "{rec}");
    let (s, body) = srv.call(
        "POST",
        "/v1/executions/rk2/cancel",
        Some(r#"{"grace_s": 5}"#),
    );
    assert_eq!(s, 202, "{body}");
    assert!(exits_within_10s(&pids[0]), "the group's sleep survived");
    assert!(alive(&pids[1]), "the setsid sleep is outside the group");
}

/// A `--cgroup-root` that is not a cgroup directory is refused at startup, naming it.
#[test]
fn a_cgroup_root_that_is_no_cgroup_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let out = Command::new(AGENT)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--insecure-no-auth",
            "--cgroup-root",
        ])
        .arg(d.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "error: --cgroup-root {}: not a directory of a cgroup filesystem",
            d.path().display()
        )),
        "{err}"
    );
    assert!(!d.path().join("skyhook-serve").exists());
}

/// Issue 22 item 10: two executions at once, each with an orphaned background child (adopted
/// by the server): the end of one leaves the other's orphan running; it dies when its own
/// execution ends.
#[test]
fn concurrent_executions_keep_their_own_orphans() {
    let srv = Srv::start(&[]);
    let fifo = srv.dir.path().join("a-go");
    mkfifo(&fifo);
    let mut a = srv.open(
        "POST",
        "/v1/executions",
        Some("tok-ci"),
        Some(
            &json!({"id": "a", "kind": "sh",
                    "command": format!("sh -c 'sleep 1020 & echo $!'; read x < {}", fifo.display())})
            .to_string(),
        ),
    );
    assert_eq!(a.status, 200);
    let a_orphan = a.event().unwrap()["line"].as_str().unwrap().to_string();
    let mut guard = KillOnDrop(vec![a_orphan.clone()]);
    let mut b = srv.open(
        "POST",
        "/v1/executions",
        Some("tok-ci"),
        Some(
            &json!({"id": "b", "kind": "sh", "command": "sh -c 'sleep 1021 & echo $!'"})
                .to_string(),
        ),
    );
    assert_eq!(b.status, 200);
    let ev = b.events();
    let b_orphan = ev[0]["line"].as_str().unwrap().to_string();
    guard.0.push(b_orphan.clone());
    assert_eq!(exit_of(&ev), json!({"code": 0}));
    // b ended (its exit event comes after its final sweep): its orphan is gone, a's is not
    assert!(exits_within_10s(&b_orphan), "b's orphan outlived b");
    assert!(alive(&a_orphan), "b's end killed a's orphan {a_orphan}");
    std::fs::write(&fifo, "go\n").unwrap();
    assert_eq!(exit_of(&a.events()), json!({"code": 0}));
    assert!(exits_within_10s(&a_orphan), "a's orphan outlived a");
}

/// With more connections held than the server has descriptors (`RLIMIT_NOFILE` 48, the cap
/// set above it, a head timeout that closes nothing during the test), accept fails with
/// EMFILE; the server sheds the oldest idle connection for each failure, keeps accepting,
/// and health answers; it is still running after.
#[test]
fn emfile_sheds_idle_connections_and_health_still_answers() {
    let dir = tempfile::tempdir().unwrap();
    let extra = ["--max-connections", "1000", "--header-timeout", "120s"];
    let mut srv = Srv::start_limited(dir, &extra, Some(48));
    let idle: Vec<TcpStream> = (0..80)
        .map(|_| TcpStream::connect(("127.0.0.1", srv.port)).unwrap())
        .collect();
    let r = raw(srv.port, "GET /v1/health HTTP/1.1", "");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(srv.child.try_wait().unwrap().is_none(), "the server exited");
    let head = "GET /v1/metrics HTTP/1.1\r\nAuthorization: Bearer tok-ci";
    let m = raw(srv.port, head, "");
    let value = |series: &str| -> u64 {
        m.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in {m}"))
    };
    assert!(value("skyhook_serve_accept_errors_total") > 0, "{m}");
    assert!(
        value("skyhook_serve_connections_closed_total{reason=\"over_cap\"}") > 0,
        "{m}"
    );
    drop(idle);
    let r = raw(srv.port, "GET /v1/health HTTP/1.1", "");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
}
