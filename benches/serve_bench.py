#!/usr/bin/env python3
"""Benchmark `skyhook-agent serve` (the remote step API, ../shared/docs/remote-api.md) on loopback.

    cargo build --release --bins
    python3 benches/serve_bench.py                      # all three, 1 GiB stream
    python3 benches/serve_bench.py --only latency --n 200
    python3 benches/serve_bench.py --only stream --size 256MiB --reps 3
    python3 benches/serve_bench.py --only heartbeat --window 20 --reps 2
    python3 benches/serve_bench.py --agent path/to/skyhook-agent --json out.json

Python 3, stdlib only (socket, subprocess). Each section starts its own server on 127.0.0.1:0
(`--root /`, a hashed tokens file, `--state-dir` and `--secrets-dir` in a temp dir, audit log
to a file) and interleaves every measurement with its baseline, alternating which goes first,
so both see the same machine load. Every loop is bounded by a count and a deadline.

1. latency: `POST /v1/executions` {"kind": "sh", "command": "true"} on a new TCP connection,
   from before connect() to the exit event parsed (also: to the response head), vs
   subprocess.run(["/bin/true"]) (and subprocess.run(["/bin/sh", "-c", "true"]), what the
   server runs). Ratio of medians.
2. stream: one execution running GEN = `head -c SIZE /dev/zero | tr '\\0' x | fold -w 79`,
   its NDJSON stream read to the end by the client (raw socket reads: the chunked framing
   is not decoded, the body's last bytes are parsed for the exit event, and its seq is checked
   against the expected number of line events), vs `sh -c 'GEN | cat > /dev/null'`. Payload
   throughput = SIZE / wall; ratio serve/cat. Server peak RSS = VmHWM of /proc/PID/status,
   reset before each run by writing 5 to /proc/PID/clear_refs (needs root or the same uid;
   if that fails, the figure is the peak since the server started). Before the timed runs, a
   small stream (--check-size) is decoded fully (chunks, JSON, seq order, every line) once.
3. heartbeat: server CPU (utime+stime from /proc/PID/stat, clock ticks) over a window while
   one silent execution `sleep WINDOW` streams to a connected client at --alive-every 1s, vs
   the same server with no execution over the same wall time. Also the sum of the threads'
   on-CPU ns from /proc/PID/task/*/schedstat (finer than ticks, but threads that exit during
   the window are lost) and the number of heartbeats the client received.
"""
import argparse
import hashlib
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TOKEN = "bench-token"
HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def parse_size(s):
    m = re.fullmatch(r"(\d+)\s*(B|KiB|MiB|GiB|K|M|G)?", s.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {s!r}")
    mult = {None: 1, "B": 1, "K": 1 << 10, "KiB": 1 << 10, "M": 1 << 20, "MiB": 1 << 20,
            "G": 1 << 30, "GiB": 1 << 30}[m.group(2)]
    return int(m.group(1)) * mult


def human(n):
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


def med_best(xs, best=min):
    return (statistics.median(xs), best(xs)) if xs else (float("nan"), float("nan"))


# ---------------------------------------------------------------- server


class Server:
    """`skyhook-agent serve` on 127.0.0.1:0 in a temp dir; stopped by its pid only."""

    def __init__(self, agent, alive_every, extra=()):
        self.dir = tempfile.TemporaryDirectory(prefix="serve-bench-")
        d = self.dir.name
        tok = hashlib.sha256(TOKEN.encode()).hexdigest()
        with open(os.path.join(d, "engines"), "w") as f:
            f.write(f"bench {tok}\n")
        os.mkdir(os.path.join(d, "secrets"))
        self.logpath = os.path.join(d, "serve.log")
        self.logf = open(self.logpath, "wb")
        argv = [agent, "serve", "--listen", "127.0.0.1:0", "--root", "/",
                "--tokens-file", os.path.join(d, "engines"),
                "--secrets-dir", os.path.join(d, "secrets"),
                "--state-dir", os.path.join(d, "state"),
                "--alive-every", alive_every, "--log-format", "json", *extra]
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.logf)
        self.pid = self.proc.pid
        self.port = None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with open(self.logpath, "rb") as f:
                m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", f.read())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        if self.port is None:
            self.stop()
            with open(self.logpath, "rb") as f:
                raise SystemExit(f"server did not start: {f.read().decode(errors='replace')}")

    def stat_cpu(self):
        """utime + stime of the server (all its threads, live and exited), in ticks."""
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # fields 14, 15 of proc(5)

    def sched_ns(self):
        """On-CPU ns summed over the server's live threads (/proc/PID/task/*/schedstat)."""
        total = 0
        for t in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{t}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
        return total

    def threads(self):
        return len(os.listdir(f"/proc/{self.pid}/task"))

    def status(self, key):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])  # kB
        return None

    def reset_hwm(self):
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.logf.close()
        self.dir.cleanup()


# ---------------------------------------------------------------- raw HTTP/1.1 client


class Stream:
    """POST /v1/executions on a new connection; the response head read, the body left."""

    def __init__(self, port, body, timeout=60.0):
        self.t0 = time.perf_counter()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = json.dumps(body).encode()
        head = (f"POST /v1/executions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode()
        self.sock.sendall(head + data)
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            b = self.sock.recv(65536)
            if not b:
                raise RuntimeError(f"connection closed in the head: {self.buf!r}")
            self.buf += b
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        self.t_head = time.perf_counter()
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.strip().lower(): v.strip()
                        for k, v in (l.split(":", 1) for l in lines[1:])}
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "")
        self.pending = b""

    def _more(self):
        b = self.sock.recv(1 << 16)
        if not b:
            raise RuntimeError("connection closed mid-body")
        self.buf += b

    def chunks(self):
        """Decoded body chunks (small bodies: latency, heartbeat and the check stream)."""
        if not self.chunked:
            n = int(self.headers.get("content-length", "0"))
            while len(self.buf) < n:
                self._more()
            yield self.buf[:n]
            return
        while True:
            while b"\r\n" not in self.buf:
                self._more()
            size, self.buf = self.buf.split(b"\r\n", 1)
            n = int(size.split(b";")[0], 16)
            while len(self.buf) < n + 2:
                self._more()
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            if n == 0:
                return
            yield data

    def lines(self):
        """NDJSON lines as dicts (heartbeats included), each with the perf_counter it arrived."""
        pend = b""
        for c in self.chunks():
            pend += c
            while b"\n" in pend:
                l, pend = pend.split(b"\n", 1)
                yield time.perf_counter(), json.loads(l)
        if pend.strip():
            yield time.perf_counter(), json.loads(pend)

    def drain_raw(self, deadline):
        """Read the raw body to its terminating chunk without decoding it; (bytes, tail)."""
        total = len(self.buf)
        tail = self.buf[-8192:]
        bufsz = 1 << 20
        ba = bytearray(bufsz)
        mv = memoryview(ba)
        recv_into = self.sock.recv_into
        checks = 0
        while True:
            n = recv_into(mv, bufsz)
            if n == 0:
                break
            total += n
            if n >= 8192:
                tail = bytes(mv[n - 8192:n])
            else:
                tail = (tail + bytes(mv[:n]))[-8192:]
            if tail.endswith(b"\r\n0\r\n\r\n"):
                break
            checks += 1
            if checks & 1023 == 0 and time.perf_counter() > deadline:
                raise TimeoutError("stream deadline passed")
        return total, tail

    def close(self):
        self.sock.close()


def exit_from_tail(tail):
    """The last event with "exit" in the raw chunked tail of a stream."""
    i = tail.rfind(b'"exit"')
    if i < 0:
        return None
    start = tail.rfind(b"\n", 0, i) + 1  # after the previous event or the chunk size line
    end = tail.find(b"\n", i)
    return json.loads(tail[start:end])


# ---------------------------------------------------------------- 1. latency


def latency(agent, n, budget):
    srv = Server(agent, "10s")
    res = {"serve_exit": [], "serve_head": [], "true": [], "sh_true": []}
    try:
        # warm-up: page cache, first connection, first spawn
        for i in range(5):
            s = Stream(srv.port, {"id": f"warm-{os.getpid()}-{i}", "kind": "sh", "command": "true"})
            list(s.lines())
            s.close()
            subprocess.run(["/bin/true"])
        deadline = time.monotonic() + budget
        for i in range(n):
            if time.monotonic() > deadline:
                log(f"latency: budget {budget}s reached after {i} rounds")
                break

            def serve():
                s = Stream(srv.port, {"id": f"lat-{os.getpid()}-{i}", "kind": "sh",
                                      "command": "true"}, timeout=30)
                assert s.status == 200, s.status
                ex = None
                for t, ev in s.lines():
                    if "exit" in ev:
                        ex = (t, ev)
                        break
                s.close()
                assert ex and ex[1]["exit"] == {"code": 0}, ex
                res["serve_exit"].append(ex[0] - s.t0)
                res["serve_head"].append(s.t_head - s.t0)

            def true():
                t0 = time.perf_counter()
                subprocess.run(["/bin/true"], check=True)
                res["true"].append(time.perf_counter() - t0)

            def sh_true():
                t0 = time.perf_counter()
                subprocess.run(["/bin/sh", "-c", "true"], check=True)
                res["sh_true"].append(time.perf_counter() - t0)

            order = [serve, true, sh_true]
            k = i % 3
            for f in order[k:] + order[:k]:
                f()
        res["rss_kb_after"] = srv.status("VmRSS")
    finally:
        srv.stop()
    return res


# ---------------------------------------------------------------- 2. stream throughput


def gen_cmd(size):
    return f"head -c {size} /dev/zero | tr '\\0' 'x' | fold -w 79"


def check_stream(srv, size):
    """A small stream decoded fully: seq 1.. in order, every line 79 x's, the exit last."""
    s = Stream(srv.port, {"id": f"check-{os.getpid()}", "kind": "sh", "command": gen_cmd(size)})
    assert s.status == 200, s.status
    seq, nbytes, alive = 0, 0, 0
    last = None
    for _, ev in s.lines():
        if "alive" in ev:
            alive += 1
            continue
        seq += 1
        assert ev["seq"] == seq, (ev, seq)
        if "exit" in ev:
            last = ev
            break
        assert ev["stream"] == "stdout" and set(ev["line"]) == {"x"} and len(ev["line"]) <= 79, ev
        nbytes += len(ev["line"])
    s.close()
    assert last and last["exit"] == {"code": 0}, last
    assert nbytes == size, (nbytes, size)
    return seq


def stream(agent, size, reps, budget, check_size):
    srv = Server(agent, "10s")
    lines = -(-size // 79)
    res = {"serve_s": [], "cat_s": [], "wire_bytes": [], "hwm_kb": [], "rss_kb_end": [],
           "server_cpu_s": [], "client_cpu_s": [], "hwm_reset": None, "lines": lines}
    try:
        res["check_events"] = check_stream(srv, check_size)
        res["rss_kb_idle"] = srv.status("VmRSS")
        deadline = time.monotonic() + budget

        def serve(i):
            res["hwm_reset"] = srv.reset_hwm() if res["hwm_reset"] is not False else False
            c0, u0 = srv.stat_cpu(), os.times()
            s = Stream(srv.port, {"id": f"tp-{os.getpid()}-{i}", "kind": "sh",
                                  "command": gen_cmd(size)}, timeout=60)
            assert s.status == 200, s.status
            total, tail = s.drain_raw(deadline)
            t1 = time.perf_counter()
            c1, u1 = srv.stat_cpu(), os.times()
            s.close()
            res["server_cpu_s"].append((c1 - c0) / TICK)
            res["client_cpu_s"].append(u1.user + u1.system - u0.user - u0.system)
            ex = exit_from_tail(tail)
            assert ex and ex["exit"] == {"code": 0} and ex["seq"] == lines + 1, (ex, lines)
            res["serve_s"].append(t1 - s.t0)
            res["wire_bytes"].append(total)
            res["hwm_kb"].append(srv.status("VmHWM"))
            res["rss_kb_end"].append(srv.status("VmRSS"))

        def cat(i):
            t0 = time.perf_counter()
            subprocess.run(["/bin/sh", "-c", gen_cmd(size) + " | cat > /dev/null"], check=True,
                           timeout=max(1, deadline - time.monotonic()))
            res["cat_s"].append(time.perf_counter() - t0)

        for i in range(reps):
            if time.monotonic() > deadline:
                log(f"stream: budget {budget}s reached after {i} reps")
                break
            for f in ((cat, serve) if i % 2 == 0 else (serve, cat)):
                f(i)
            log(f"stream rep {i}: cat {res['cat_s'][-1]:.2f}s serve {res['serve_s'][-1]:.2f}s"
                f" HWM {res['hwm_kb'][-1]} kB")
    finally:
        srv.stop()
    return res


# ---------------------------------------------------------------- 3. heartbeat overhead


def heartbeat(agent, window, reps):
    srv = Server(agent, "1s")
    res = {"busy_ticks": [], "idle_ticks": [], "busy_ns": [], "idle_ns": [], "busy_wall": [],
           "idle_wall": [], "alive": [], "threads": [], "hb_only": []}
    try:
        time.sleep(1)  # let startup settle

        def busy(i):
            s = Stream(srv.port, {"id": f"hb-{os.getpid()}-{i}", "kind": "sh",
                                  "command": f"sleep {window}"}, timeout=window + 15)
            assert s.status == 200, s.status
            c0, n0, w0 = srv.stat_cpu(), srv.sched_ns(), time.perf_counter()
            res["threads"].append(srv.threads())
            alive, ex, marks = 0, None, []
            for _, ev in s.lines():  # bounded: the step exits after `window` s, timeout above
                if "alive" in ev:
                    alive += 1
                    marks.append((srv.stat_cpu(), srv.sched_ns(), time.perf_counter()))
                elif "exit" in ev:
                    ex = ev
                    break
            c1, n1, w1 = srv.stat_cpu(), srv.sched_ns(), time.perf_counter()
            s.close()
            assert ex and ex["exit"] == {"code": 0}, ex
            res["busy_ticks"].append(c1 - c0)
            res["busy_ns"].append(n1 - n0)
            res["busy_wall"].append(w1 - w0)
            res["alive"].append(alive)
            if len(marks) >= 2:  # first to last heartbeat: no spawn, no exit in it
                (a0, b0, t0), (a1, b1, t1) = marks[0], marks[-1]
                res["hb_only"].append({"beats": len(marks) - 1, "ticks": a1 - a0, "ns": b1 - b0,
                                       "wall": t1 - t0})

        def idle(i):
            c0, n0, w0 = srv.stat_cpu(), srv.sched_ns(), time.perf_counter()
            time.sleep(window)
            c1, n1, w1 = srv.stat_cpu(), srv.sched_ns(), time.perf_counter()
            res["idle_ticks"].append(c1 - c0)
            res["idle_ns"].append(n1 - n0)
            res["idle_wall"].append(w1 - w0)

        for i in range(reps):
            for f in ((idle, busy) if i % 2 == 0 else (busy, idle)):
                f(i)
            log(f"heartbeat rep {i}: idle {res['idle_ticks'][-1]} ticks "
                f"{res['idle_ns'][-1] / 1e6:.2f} ms, busy {res['busy_ticks'][-1]} ticks "
                f"{res['busy_ns'][-1] / 1e6:.2f} ms, {res['alive'][-1]} heartbeats")
    finally:
        srv.stop()
    return res


# ---------------------------------------------------------------- report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--agent", default=os.path.join(HERE, "..", "target", "release",
                                                    "skyhook-agent"))
    ap.add_argument("--only", choices=["latency", "stream", "heartbeat"], action="append")
    ap.add_argument("--n", type=int, default=200, help="latency rounds (default 200)")
    ap.add_argument("--latency-budget", type=float, default=120, help="seconds (default 120)")
    ap.add_argument("--size", type=parse_size, default=1 << 30, help="stream bytes (1GiB)")
    ap.add_argument("--reps", type=int, default=3, help="stream reps (default 3)")
    ap.add_argument("--stream-budget", type=float, default=600, help="seconds (default 600)")
    ap.add_argument("--check-size", type=parse_size, default=1 << 20, help="decoded check")
    ap.add_argument("--window", type=int, default=20, help="heartbeat window s (default 20)")
    ap.add_argument("--hb-reps", type=int, default=2, help="heartbeat reps (default 2)")
    ap.add_argument("--json", help="also write the raw figures here")
    a = ap.parse_args()
    agent = os.path.abspath(a.agent)
    if not os.access(agent, os.X_OK):
        raise SystemExit(f"no agent binary at {agent}: cargo build --release --bins")
    only = a.only or ["latency", "stream", "heartbeat"]
    out = {"agent": agent, "agent_bytes": os.path.getsize(agent), "nproc": os.cpu_count(),
           "loadavg_start": os.getloadavg(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                   time.gmtime())}
    rows = []
    if "latency" in only:
        r = latency(agent, a.n, a.latency_budget)
        out["latency"] = r
        ms = {k: [x * 1e3 for x in r[k]] for k in ("serve_exit", "serve_head", "true", "sh_true")}
        m = {k: med_best(v) for k, v in ms.items()}
        rows += [
            (f"latency: POST sh `true` → exit event (n={len(ms['serve_exit'])})",
             "%.2f / %.2f ms" % m["serve_exit"], ""),
            ("latency: POST → response head (200)", "%.2f / %.2f ms" % m["serve_head"], ""),
            ("baseline: subprocess.run(['/bin/true'])", "%.2f / %.2f ms" % m["true"], ""),
            ("baseline: subprocess.run(['/bin/sh','-c','true'])", "%.2f / %.2f ms" % m["sh_true"],
             ""),
            ("ratio serve / `/bin/true` (median, best)",
             "%.1f× / %.1f×" % (m["serve_exit"][0] / m["true"][0], m["serve_exit"][1] / m["true"][1]),
             ""),
            ("ratio serve / `sh -c true` (median, best)",
             "%.1f× / %.1f×" % (m["serve_exit"][0] / m["sh_true"][0],
                                m["serve_exit"][1] / m["sh_true"][1]), ""),
            ("serve − `/bin/true` (medians)", "%.2f ms" % (m["serve_exit"][0] - m["true"][0]), ""),
        ]
    if "stream" in only:
        r = stream(agent, a.size, a.reps, a.stream_budget, a.check_size)
        out["stream"] = r
        if r["serve_s"]:
            sv, ct = med_best(r["serve_s"]), med_best(r["cat_s"])
            mib = a.size / (1 << 20)
            wire = statistics.median(r["wire_bytes"])
            rows += [
                (f"stream {human(a.size)}: serve, client reads to the end (n={len(r['serve_s'])})",
                 "%.2f / %.2f s" % sv, "%.0f / %.0f MiB/s" % (mib / sv[0], mib / sv[1])),
                ("baseline: same generator `| cat > /dev/null`", "%.2f / %.2f s" % ct,
                 "%.0f / %.0f MiB/s" % (mib / ct[0], mib / ct[1])),
                ("ratio serve / cat throughput (median, best)",
                 "%.2f / %.2f" % (ct[0] / sv[0], ct[1] / sv[1]), ""),
                ("bytes on the wire per payload byte", "%.2f" % (wire / a.size),
                 "%d events" % (r["lines"] + 1)),
                ("CPU during a serve run: server (utime+stime) / this client (median)",
                 "%.2f / %.2f s" % (statistics.median(r["server_cpu_s"]),
                                    statistics.median(r["client_cpu_s"])), ""),
                ("server peak RSS during the stream (VmHWM, max of runs)",
                 "%.1f MiB" % (max(r["hwm_kb"]) / 1024),
                 "reset per run" if r["hwm_reset"] else "since server start"),
                ("server RSS idle before / after the runs",
                 "%.1f / %.1f MiB" % (r["rss_kb_idle"] / 1024, r["rss_kb_end"][-1] / 1024), ""),
            ]
    if "heartbeat" in only:
        r = heartbeat(agent, a.window, a.hb_reps)
        out["heartbeat"] = r
        bt, it = med_best(r["busy_ticks"]), med_best(r["idle_ticks"])
        bn = med_best([x / 1e6 for x in r["busy_ns"]])
        inn = med_best([x / 1e6 for x in r["idle_ns"]])
        tick_ms = 1000 / TICK
        rows += [
            (f"heartbeat: `sleep {a.window}` streaming, --alive-every 1s (n={len(r['busy_ticks'])})",
             "%g / %g ticks (%.0f / %.0f ms)" % (bt[0], bt[1], bt[0] * tick_ms, bt[1] * tick_ms),
             "schedstat %.2f / %.2f ms" % bn),
            (f"baseline: same server, no execution, {a.window} s",
             "%g / %g ticks (%.0f / %.0f ms)" % (it[0], it[1], it[0] * tick_ms, it[1] * tick_ms),
             "schedstat %.2f / %.2f ms" % inn),
            ("difference, whole window (schedstat medians)", "%.2f ms" % (bn[0] - inn[0]),
             "%g heartbeats received (median)" % statistics.median(r["alive"])),
        ]
        if r["hb_only"]:
            idle_rate = statistics.median(x / w for x, w in zip(r["idle_ns"], r["idle_wall"]))
            per = [(h["ns"] - idle_rate * h["wall"]) / h["beats"] / 1e3 for h in r["hb_only"]]
            rows += [
            ("per heartbeat, first → last heartbeat only (schedstat, minus idle rate)",
             "%.1f / %.1f µs" % med_best(per),
             "%g ticks over %g beats" % (statistics.median(h["ticks"] for h in r["hb_only"]),
                                         statistics.median(h["beats"] for h in r["hb_only"]))),
            ]
        rows += [
            ("server CPU share with the execution (stat, median)",
             "%.3f %%" % (100 * bt[0] * tick_ms / 1000 / statistics.median(r["busy_wall"])), ""),
        ]
    out["loadavg_end"] = os.getloadavg()
    print(f"agent {agent} ({out['agent_bytes']} bytes), {out['nproc']} CPUs, "
          f"load {out['loadavg_start'][0]:.2f} → {out['loadavg_end'][0]:.2f}, {out['time']}")
    print("| measurement | median / best | |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
