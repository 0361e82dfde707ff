#!/usr/bin/env python3
"""Load on `skyhook-agent serve` (issue 22): what the server holds and how fast health answers.

    cargo build --bins
    python3 benches/serve_load.py                                  # target/debug/skyhook-agent
    python3 benches/serve_load.py --agent path/to/skyhook-agent --size 256MiB --json out.json

Python 3, stdlib only. One server on 127.0.0.1:0 with RLIMIT_NOFILE 256 (soft and hard, as in
the issue's measurement), `--root /`, a hashed tokens file and `--state-dir` in a temp dir,
every other option at its default; stopped by its pid. Phases, each bounded by a count and
socket timeouts (2 s per health request: a health request that times out is counted, not
waited for):

1. idle: 300 TCP connections opened and held without a byte; then 20 health requests (new
   connection each); then, 12 s later, how many of the 300 the server has closed.
2. connects: 1,000 health requests, one new connection each, sequentially.
3. starts: 200 `POST /v1/executions` (`sh -c 'sleep 0.2'`) sent at once from 200 connections;
   statuses counted (200, 429, or the connection closed by the server).
4. stream: one execution writing SIZE of 79-byte lines, read to the end by a client; 10
   health requests on other connections during it; the end must be the exit event.
5. first event on a reused connection: 21 POSTs (`echo hi; echo ho`) one after another on one
   kept-alive connection, the first a warm-up; time from each POST to its first event line
   and to the end of its stream (n=20). With Nagle on the server's socket, a small write
   waits for the client's delayed ACK of the previous one (~40 ms).

After every phase: the server's VmRSS, VmHWM and open descriptors (/proc/PID).
"""
import argparse
import hashlib
import json
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TOKEN = "bench-token"
HERE = os.path.dirname(os.path.abspath(__file__))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def parse_size(s):
    m = re.fullmatch(r"(\d+)\s*(KiB|MiB|GiB)?", s.strip())
    mult = {None: 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)]
    return int(m.group(1)) * mult


def proc(pid):
    st = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                st[k] = int(v.split()[0])
    st["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return st


def limit_fds():
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def start(agent, tmp):
    with open(os.path.join(tmp, "engines"), "w") as f:
        f.write(f"bench {hashlib.sha256(TOKEN.encode()).hexdigest()}\n")
    err = open(os.path.join(tmp, "audit.log"), "w")
    p = subprocess.Popen(
        [agent, "serve", "--listen", "127.0.0.1:0", "--root", "/",
         "--tokens-file", os.path.join(tmp, "engines"),
         "--state-dir", os.path.join(tmp, "state"), "--log-format", "json"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
        preexec_fn=limit_fds)
    deadline = time.time() + 10
    while time.time() < deadline:
        with open(os.path.join(tmp, "audit.log")) as f:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", f.read())
        if m:
            return p, int(m.group(1))
        time.sleep(0.05)
    p.kill()
    raise SystemExit("server did not start")


def request(method, path, body=None, close=True):
    b = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(b)}\r\n")
    if close:
        head += "Connection: close\r\n"
    return head.encode() + b"\r\n" + b


def health(port, timeout=2.0):
    """Seconds to a whole health answer on a new connection, or None (refused, closed, slow)."""
    t = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(request("GET", "/v1/health"))
            data = b""
            while True:
                c = s.recv(65536)
                if not c:
                    break
                data += c
        return time.perf_counter() - t if data.startswith(b"HTTP/1.1 200") else None
    except OSError:
        return None


def lat(xs):
    ok = sorted(x for x in xs if x is not None)
    if not ok:
        return {"ok": 0, "failed": len(xs)}
    return {"ok": len(ok), "failed": len(xs) - len(ok),
            "median_ms": round(statistics.median(ok) * 1e3, 2),
            "p99_ms": round(ok[min(len(ok) - 1, int(len(ok) * 0.99))] * 1e3, 2),
            "max_ms": round(ok[-1] * 1e3, 2)}


def closed_by_peer(s):
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def phase_idle(port, out):
    held = []
    for _ in range(300):
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            break
    out["idle_opened"] = len(held)
    out["idle_health"] = lat([health(port) for _ in range(20)])
    time.sleep(12)  # the default --header-timeout is 10 s: see what the server closed by then
    out["idle_closed_after_12s"] = sum(closed_by_peer(s) for s in held)
    for s in held:
        s.close()


def phase_connects(port, out):
    out["connects_health"] = lat([health(port) for _ in range(1000)])


def phase_starts(port, out):
    socks = []
    for i in range(200):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            socks.append(s)
        except OSError:
            socks.append(None)
    for i, s in enumerate(socks):
        if s is None:
            continue
        body = {"id": f"load-{os.getpid()}-{i}", "kind": "sh", "command": "sleep 0.2"}
        try:
            s.sendall(request("POST", "/v1/executions", body))
        except OSError:
            pass
    counts = {}
    for s in socks:
        key = "connect failed"
        if s is not None:
            data = b""
            try:
                while True:
                    c = s.recv(65536)
                    if not c:
                        break
                    data += c
            except OSError:
                pass
            s.close()
            key = data[9:12].decode() if data.startswith(b"HTTP/1.1 ") else "closed"
        counts[key] = counts.get(key, 0) + 1
    out["starts"] = counts


def wait_idle(port, budget=30):
    """Until health says nothing runs (executions of the starts phase whose connections
    the server closed still finish), `budget` seconds at most."""
    deadline = time.time() + budget
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(request("GET", "/v1/health"))
                if b'"running":0}' in s.recv(65536):
                    return
        except OSError:
            pass
        time.sleep(0.1)


def phase_stream(port, size, out):
    wait_idle(port)
    cmd = f"head -c {size} /dev/zero | tr '\\0' x | fold -w 79"
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(request("POST", "/v1/executions", {"id": f"stream-{os.getpid()}", "kind": "sh",
                                                 "command": cmd}))
    t = time.perf_counter()
    head, tail, total, lats, nxt = b"", b"", 0, [], time.perf_counter() + 1
    buf = bytearray(1 << 20)
    while True:
        n = s.recv_into(buf)
        if n == 0:
            break
        total += n
        if len(head) < 300:
            head += bytes(buf[:min(n, 300)])
        tail = (tail + bytes(buf[:n]))[-4096:]
        if len(lats) < 10 and time.perf_counter() > nxt:
            lats.append(health(port))
            nxt = time.perf_counter() + 1
    s.close()
    lines = [l for c in tail.split(b"\r\n") for l in c.split(b"\n") if l.startswith(b"{")]
    last = json.loads(lines[-1]) if lines else {}
    out["stream"] = {"bytes_on_wire": total, "seconds": round(time.perf_counter() - t, 1),
                     "ends_with_exit": "exit" in last,
                     "head": head[:300].decode(errors="replace") if "exit" not in last else None, "exit": last.get("exit"),
                     "lost_events_in_tail": tail.count(b'"lost"'),
                     "health_during": lat(lats)}


def phase_reused(port, out):
    """POST after POST on one kept-alive connection; the first is a warm-up."""
    firsts, exits = [], []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        for i in range(21):
            body = {"id": f"reuse-{os.getpid()}-{i}", "kind": "sh", "command": "echo hi; echo ho"}
            t = time.perf_counter()
            s.sendall(request("POST", "/v1/executions", body, close=False))
            data, first = b"", None
            while not data.endswith(b"\r\n0\r\n\r\n"):
                c = s.recv(65536)
                if not c:
                    break
                data += c
                if first is None and b'"seq":1' in data:
                    first = time.perf_counter() - t
            if i > 0:
                firsts.append(first)
                exits.append(time.perf_counter() - t)
    out["first_event_reused"] = lat(firsts)
    out["exit_event_reused"] = lat(exits)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", default=os.path.join(HERE, "..", "target", "debug", "skyhook-agent"))
    ap.add_argument("--size", type=parse_size, default="1GiB")
    ap.add_argument("--json")
    ap.add_argument("--phases", default="idle,connects,starts,stream,reused",
                    help="comma-separated subset, in this order")
    a = ap.parse_args()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        p, port = start(a.agent, tmp)
        try:
            out["start"] = proc(p.pid)
            for name, f in (("idle", lambda: phase_idle(port, out)),
                            ("connects", lambda: phase_connects(port, out)),
                            ("starts", lambda: phase_starts(port, out)),
                            ("stream", lambda: phase_stream(port, a.size, out)),
                            ("reused", lambda: phase_reused(port, out))):
                if name not in a.phases.split(","):
                    continue
                log(f"phase {name}")
                f()
                out[f"after_{name}"] = proc(p.pid)
                log(json.dumps({k: v for k, v in out.items()}))
        finally:
            os.kill(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=40)
            except subprocess.TimeoutExpired:
                p.kill()
    print(json.dumps(out, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
