#!/usr/bin/env python3
"""Benchmark the fleet preview (`skyhook-run plan`, docs/fleet.md): N nodes previewed at once
against the slowest single node's preview, on loopback, over TLS and plain http, and the
preview's memory.

    cargo build --release --bins --example fleet_replay
    BIN=target/release python3 benches/fleet_preview.py --model both --nodes 100 --samples 5
    BIN=target/release python3 benches/fleet_preview.py --model replay --packages gpu

Python 3, stdlib and the `openssl` CLI; as root (each package plan leaves the mount namespace
and makes the host root read-only, which needs CAP_SYS_ADMIN). On a shared machine run it in
an autogroup of its own at high priority (docs/fleet.md "Measured"): `nice` alone ranks it
only against the processes of its own session. It:

1. makes N host roots, each a copy of tests/fakehosts/ubuntu-22.04, and two packages beside a
   Skyhook CR (`base` writes a file naming the distribution and lists a process step;
   `tuning` dependsOn base, writes a file from its configMap and asks for a containerd
   restart the CR declares); a CA and a certificate for 127.0.0.1 it signed, both keys of
   --key-type (p256, ed25519, rsa2048), by `openssl`;
2. starts N `skyhook-agent serve` processes, one per root (`--listen 127.0.0.1:0`, a tokens
   file with a plan-scoped token), and --samples more over TLS (`--tls-cert`, `--tls-key`)
   over the first roots, and waits for each to listen (bounded);
3. single: after one uncounted preview over each scheme (the binaries' pages, the first
   plan's caches), previews each of --samples nodes alone over http and over https
   (`skyhook-run plan` with a NODES file of that one node, `--tls-ca` the CA), wall time
   from spawn to exit; T1 of a scheme = the slowest of its samples;
4. fleet (--model real or both): previews all N nodes at once over http, wall time T_N; the
   client's CPU time and peak RSS (getrusage of the child); every server's CPU time during
   the run (utime+stime of /proc/PID/stat) and RSS after it; checks that the N-node output
   groups all N nodes into one plan, and prints the figures and T_N / T1.

On one machine every node's planning shares the same cores, so T_N also carries N nodes'
worth of server CPU; on a fleet each node plans on its own. The script prints that CPU too, and
`fleet-equivalent` = T1 + the client's own CPU time for N nodes.

--model replay (or both) measures what the criterion means on a fleet (every node plans on
its own CPU), with the client's fan-out as the work on this machine:

5. record: one real node's answer (the raw HTTP response of its `package_plan` chain, through
   a recording proxy on loopback);
6. replay: N replaying nodes per scheme, one loopback port each. --replayer rust (the
   default) is `examples/fleet_replay` (one process, a thread per core): over https each
   port has serve's own TLS server configuration (`serve::tls::server_config`, its own
   session cache, as each node's serve), so a handshake costs the replaying side what it
   costs a node. --replayer python: one asyncio process per core (Python's ssl, one
   SSLContext per process), kept to compare. Each node reads the client's request, answers
   after its scheme's T1 (a timer standing for the node's own plan time, which on a fleet
   costs this machine nothing), then sends the recorded response;
7. previews the N replaying nodes with the client's default --parallel, --fleet-samples
   times per scheme, https and http alternating (both meet the same load): wall time
   T_model (against 2 x T1 of its scheme), the client's CPU (per node too) and peak RSS,
   the replaying processes' CPU (their TLS handshakes share this machine's cores: on a fleet
   they are the nodes'), the wall time's parts (spawn to the first request read, the spread
   of the requests' arrivals, the last answer to the exit), and how many nodes were
   answered more than T1 / 2 after the first (0 when nothing is serialised).

--packages gpu previews the shipped CR of NVIDIA's setup port instead of the two small
packages (examples/nvidia-setup/skyhook.yaml: the exact kernel, then the full setup on it,
dependsOn chaining them; `--package` gives their directory), each node a GPU node of the EKS
H100 host layer (scripts/make-host-root.sh, tests/fakehosts/ubuntu-24.04-eks-x86_64 over it,
its stubs' tools: as tests/nvidia_ports.rs `fake_host` builds one; 10 MB a node, so
--model real or both with it copies N of them), so T1 is what a real node's plan of a real
package costs. --keep keeps the work directory (the recorded answer,
the CA, the node lists) to profile a preview by hand.

FLEET_BENCH_DEBUG=1 prints each replayed run's wall time and answer times (seconds after
the spawn) on stderr; FLEET_BENCH_CLIENT_PREFIX runs each replayed preview under a command
(`{scheme}` replaced), e.g. 'strace -f -c -o /tmp/strace-{scheme}.txt' (its figures are
then not the client's alone). `examples/tls_handshakes` splits one handshake's CPU into its parts.
"""
import argparse
import asyncio
import hashlib
import statistics
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "bench-plan-token"


def step(name, path):
    return {"name": name, "path": path, "arguments": [], "returncodes": [0],
            "on_host": True, "idempotence": False, "upgrade_step": False}


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def make_packages(w):
    base = os.path.join(w, "base")
    write(os.path.join(base, "config.json"), json.dumps({
        "schema_version": "v1", "root_dir": "/", "expected_config_files": [],
        "package_name": "base", "package_version": "1.0.0",
        "modes": {"apply": [step("base", "base.rhai"), step("setup", "setup.sh")],
                  "apply-check": [step("base_check", "check.sh")]}}))
    write(os.path.join(base, "skyhook_dir/base.rhai"),
          'let id = os::id();\n'
          'fs::write("/etc/fleet-demo/base.conf", "managed=base\\nos=" + id + "\\n");\n')
    write(os.path.join(base, "skyhook_dir/setup.sh"), "#!/bin/sh\ntrue\n", 0o755)
    tuning = os.path.join(w, "tuning")
    write(os.path.join(tuning, "config.json"), json.dumps({
        "schema_version": "v1", "root_dir": "/", "expected_config_files": ["threads"],
        "package_name": "tuning", "package_version": "2.0.0",
        "modes": {"apply": [step("tune", "tune.rhai")],
                  "apply-check": [step("tune_check", "check.sh")]}}))
    write(os.path.join(tuning, "skyhook_dir/tune.rhai"),
          'fs::write("/etc/fleet-demo/tuning.conf", "threads=" + config::get("threads") + "\\n");\n'
          'interrupt::restart_services(["containerd"]);\n')
    write(os.path.join(tuning, "configmaps/threads"), "4")
    for p in (base, tuning):
        write(os.path.join(p, "skyhook_dir/check.sh"), "#!/bin/sh\nexit 0\n", 0o755)
    cr = os.path.join(w, "skyhook.yaml")
    write(cr, "apiVersion: skyhook.nvidia.com/v1alpha1\nkind: Skyhook\n"
              "metadata: {name: fleet-bench}\nspec:\n"
              "  nodeSelectors: {matchLabels: {nvidia.com/gpu.present: \"true\"}}\n"
              "  packages:\n"
              "    tuning:\n      version: 2.0.0\n      dependsOn: {base: 1.0.0}\n"
              "      interrupt: {type: service, services: [containerd]}\n"
              "      configMap: {threads: \"8\"}\n"
              "    base: {version: 1.0.0}\n")
    return cr


# The GPU variant (--packages gpu): the shipped CR of NVIDIA's setup port,
# examples/nvidia-setup/skyhook.yaml as it is (the exact kernel, then the full setup on it:
# EFA, the OFI NCCL paths, chrony, the upgrade; dependsOn chaining them), planned against
# the EKS H100 host layer. (nvidia-tuned cannot follow it in one chain: the plan cannot know
# what the EFA installer, which only an apply runs, leaves under /var/lib/skyhook, so a later
# package's copy there fails the plan.)
GPU_LAYER = "ubuntu-24.04-eks-x86_64"
GPU_CR = os.path.join(REPO, "examples/nvidia-setup/skyhook.yaml")
GPU_PACKAGES = {"nvidia-setup-kernel": "nvidia-setup", "nvidia-setup-full": "nvidia-setup"}
# What the layers' stubs run, besides make-host-root.sh's tools (tests/nvidia_ports.rs
# STUB_TOOLS, benches/preflight_cost.sh copy_tools).
GPU_TOOLS = ["sed", "grep", "ln", "basename", "dirname", "cut", "sort", "find", "xargs", "wc",
             "readlink", "tail", "mknod", "mktemp", "tee", "awk"]


def gpu_packages():
    """The GPU variant's CR (GPU_CR) and its `--package NAME=DIR` arguments."""
    extra = []
    for name, example in GPU_PACKAGES.items():
        extra += ["--package", f"{name}={os.path.join(REPO, 'examples', example)}"]
    return GPU_CR, extra


def gpu_node_template(w):
    """A GPU node's root, built once (copied per node): scripts/make-host-root.sh, the
    GPU_LAYER host layer over it with the links its snapshot flattened made links again,
    the tools its stubs run with their libraries, /dev/null (as tests/nvidia_ports.rs
    `fake_host` builds a node)."""
    r = os.path.join(w, "gpu-template")
    subprocess.run([os.path.join(REPO, "scripts/make-host-root.sh"), r], check=True,
                   capture_output=True)
    for stub in ("systemctl", "sysctl", "service", "reboot"):
        try:
            os.remove(os.path.join(r, "usr/local/bin", stub))
        except FileNotFoundError:
            pass
    subprocess.run(["cp", "-a", os.path.join(REPO, "tests/fakehosts", GPU_LAYER) + "/.", r + "/"],
                   check=True)
    dirs = [os.path.join(r, d) for d in ("usr/local/bin", "usr/local/sbin", "proc/sys/kernel")]
    sysd = os.path.join(r, "etc/systemd/system")
    if os.path.isdir(sysd):
        dirs += [os.path.join(sysd, d) for d in os.listdir(sysd) if d.endswith(".wants")]
    for d in dirs:
        if not os.path.isdir(d):
            continue
        for e in os.scandir(d):
            if not e.is_file(follow_symlinks=False):
                continue
            st = e.stat(follow_symlinks=False)
            if st.st_size > 200 or st.st_mode & 0o111:
                continue
            target = open(e.path, errors="replace").read()
            named = os.path.join(r, target.lstrip("/")) if target.startswith("/") \
                else os.path.join(d, target)
            if not target or any(c.isspace() for c in target) or not os.path.isfile(named):
                continue
            os.remove(e.path)
            os.symlink(target, e.path)
    for t in GPU_TOOLS:
        exe = shutil.which(t)
        if not exe:
            continue
        libs = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
        for f in [exe] + re.findall(r"(/\S+) \(0x", libs):
            real = os.path.realpath(f)
            for src in {f, real}:
                dst = r + src
                if not os.path.lexists(dst):
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    shutil.copy2(real, dst)
    null = os.path.join(r, "dev/null")
    os.makedirs(os.path.dirname(null), exist_ok=True)
    if os.path.lexists(null):
        os.remove(null)
    os.mknod(null, 0o20666, os.makedev(1, 3))
    os.chmod(null, 0o666)
    return r


def proc_cpu(pid):
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
    return int(m.group(1)) if m else 0


def start_servers(agent, roots, tokens, w, tls=None, tag=""):
    """One serve per root; `tls` (cert, key): over TLS (`https://` addresses)."""
    procs = []
    for i, root in enumerate(roots):
        log = open(os.path.join(w, f"serve{tag}-{i}.log"), "w+")
        args = [agent, "serve", "--listen", "127.0.0.1:0", "--root", root,
                "--tokens-file", tokens, "--cgroup-root", "none"]
        if tls:
            args += ["--tls-cert", tls[0], "--tls-key", tls[1]]
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)
        procs.append((p, log))
    addrs = []
    deadline = time.monotonic() + 60
    for p, log in procs:
        while True:
            log.seek(0)
            m = re.search(r"listening on (127\.0\.0\.1:\d+)", log.read())
            if m:
                addrs.append(("https://" if tls else "http://") + m.group(1))
                break
            if p.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                sys.exit(f"serve did not start: {log.read()}")
            time.sleep(0.02)
    return [p for p, _ in procs], addrs


def nodes_file(path, names_addrs):
    with open(path, "w") as f:
        json.dump([{"name": n, "address": a,
                    # the tiny CR's selector and the GPU one's (examples/nvidia-setup)
                    "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu": "true"}}
                   for n, a in names_addrs], f)


def preview(run, cr, nodes, token_file, parallel, ca=None, prefix=()):
    """One `skyhook-run plan`: wall, CPU (user+sys), peak RSS (KiB; of the largest child so
    far), stdout. `parallel` None: the client's default; `prefix`: a command it runs under;
    the packages' directories (`--package`) from `preview.packages`."""
    args = [*prefix, run, "plan", "--skyhook-cr", cr, "--nodes", nodes, "--token-file", token_file,
            "--mode", "apply", "--node-timeout", "300s", *preview.packages]
    if parallel is not None:
        args += ["--parallel", str(parallel)]
    if ca:
        args += ["--tls-ca", ca]
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        t = time.monotonic()
        preview.spawned = time.time()
        p = subprocess.Popen(args, stdout=so, stderr=se)
        # wait4: this child's own CPU and peak RSS (bounded: --node-timeout ends it)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.monotonic() - t
        preview.exited = time.time()
        p.returncode = os.waitstatus_to_exitcode(status)
        so.seek(0)
        se.seek(0)
        stdout = so.read()
        if p.returncode != 0:
            sys.exit(f"skyhook-run plan exited {p.returncode}: {stdout[-2000:]}{se.read()}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss, stdout


preview.packages = []


KEY_TYPES = {
    "p256": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
    "ed25519": ["-newkey", "ed25519"],
    "rsa2048": ["-newkey", "rsa:2048"],
}


def make_tls(w, key_type):
    """A CA and a certificate for 127.0.0.1 it signed, both keys of `key_type` (KEY_TYPES),
    by the openssl CLI: (CA file, certificate file, key file)."""
    ca_key, ca, key, csr, cert = (os.path.join(w, f"{key_type}-{n}") for n in
                                  ("ca.key", "ca.pem", "node.key", "node.csr", "node.pem"))
    ext = os.path.join(w, "san.ext")
    write(ext, "subjectAltName=IP:127.0.0.1\n")
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)
    new = KEY_TYPES[key_type]
    run("openssl", "req", "-x509", *new, "-nodes", "-keyout", ca_key, "-out", ca, "-days", "2",
        "-subj", "/CN=bench-ca")
    run("openssl", "req", *new, "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1")
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
        "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext)
    return ca, cert, key


async def read_request(reader):
    """One HTTP/1.1 request's head and Content-Length body; False at EOF."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = await reader.read(65536)
        if not chunk:
            return False
        head += chunk
        if len(head) > 1 << 20:
            return False
    head, _, body = head.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    want = int(m.group(1)) if m else 0
    while len(body) < want:
        chunk = await reader.read(65536)
        if not chunk:
            return False
        body += chunk
    return True


async def record_proxy(upstream_port, out_path, ready):
    """A loopback proxy to a real serve: the first connection's response bytes go to
    out_path."""
    async def handle(cr, cw):
        ur, uw = await asyncio.open_connection("127.0.0.1", upstream_port)
        got = bytearray()

        async def up():
            while data := await cr.read(65536):
                uw.write(data)
                await uw.drain()
            # the client is gone: so is the upstream connection (serve would keep it open
            # idle, and the recording would wait for its close)
            uw.close()

        async def down():
            while data := await ur.read(65536):
                got.extend(data)
                cw.write(data)
                await cw.drain()
            cw.close()

        t = asyncio.ensure_future(up())
        await down()
        t.cancel()
        with open(out_path + ".part", "wb") as f:
            f.write(bytes(got))
        os.replace(out_path + ".part", out_path)  # whole, once it appears
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    ready.set_result(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


def replay_server_main(a):
    """--replay-server: N listeners answering every request with the recorded response
    after --delay seconds; prints their ports (one JSON line), serves until stdin closes.
    One SSLContext for its ports: a node may resume a session another of them began."""
    import ssl
    response = open(a.response, "rb").read()
    ctx = None
    if a.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.cert, a.key)
        ctx.set_alpn_protocols(["http/1.1"])
    times = []

    async def main():
        loop = asyncio.get_running_loop()

        async def handle(r, w):
            if await read_request(r):
                asked = time.time()
                await asyncio.sleep(a.delay)
                w.write(response)
                await w.drain()
                times.append([asked, time.time()])
            w.close()
        servers = [await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx, backlog=1024)
                   for _ in range(a.replay_nodes)]
        print(json.dumps([s.sockets[0].getsockname()[1] for s in servers]), flush=True)
        # Each line on stdin asks for the [read, answered] times (seconds since the epoch) of
        # the requests answered since the last ask (then clears them).
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while await reader.readline():
            print(json.dumps(times), flush=True)
            times.clear()
    asyncio.run(main())


def start_replayers(a, recorded, delay, tls):
    """The replaying nodes of one scheme: (processes, ports). `tls` (cert, key) or None.

    rust (the default): one `examples/fleet_replay` process (a thread per core), each port
    speaking TLS with serve's own server configuration, so a handshake costs the replaying
    side what it costs a node's serve. python: one asyncio process per core (the ssl module,
    OpenSSL), kept to compare: its handshakes cost this machine more than serve's."""
    if a.replayer == "rust":
        exe = os.path.join(a.bin, "examples", "fleet_replay")
        args = [exe, str(a.nodes), recorded, str(delay)] + (list(tls) if tls else [])
        shares = [args]
    else:
        k = max(1, min(os.cpu_count() or 1, a.nodes))
        shares = []
        for i in range(k):
            n = a.nodes // k + (1 if i < a.nodes % k else 0)
            args = [sys.executable, os.path.abspath(__file__), "--replay-server",
                    "--replay-nodes", str(n), "--response", recorded, "--delay", str(delay)]
            if tls:
                args += ["--cert", tls[0], "--key", tls[1]]
            shares.append(args)
    procs = [subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for args in shares]
    ports = [p for rs in procs for p in json.loads(rs.stdout.readline())]
    return procs, ports


def replay_runs(a, run, cr, token_file, t1, addr, w, tls):
    """Record one real node's answer, then preview a.nodes replaying nodes over TLS and over
    plain http, the two schemes' runs alternating (so both meet the same load); each
    scheme's nodes answer after that scheme's T1."""
    import threading
    recorded = os.path.join(w, "recorded.http")
    loop = asyncio.new_event_loop()
    ready = loop.create_future()
    port = int(addr.rsplit(":", 1)[1])
    threading.Thread(target=lambda: loop.run_until_complete(record_proxy(port, recorded, ready)),
                     daemon=True).start()
    deadline = time.monotonic() + 30
    while not ready.done() and time.monotonic() < deadline:
        time.sleep(0.01)
    nf = os.path.join(w, "rec.json")
    nodes_file(nf, [("rec", f"http://127.0.0.1:{ready.result()}")])
    preview(run, cr, nf, token_file, None)
    deadline = time.monotonic() + 30
    while not os.path.exists(recorded):
        if time.monotonic() > deadline:
            sys.exit("the recording proxy wrote no response within 30 s")
        time.sleep(0.01)
    ca, cert, key = tls
    schemes = ("https", "http")
    replayers, nfs = {}, {}
    samples = {s: {k: [] for k in ("wall", "cpu", "rss", "srv", "late", "first", "spread", "tail")}
               for s in schemes}
    try:
        for scheme in schemes:
            procs, ports = start_replayers(a, recorded, t1[scheme],
                                           (cert, key) if scheme == "https" else None)
            replayers[scheme] = procs
            nfs[scheme] = os.path.join(w, f"replay-{scheme}.json")
            nodes_file(nfs[scheme], [(f"r{i:03}", f"{scheme}://127.0.0.1:{p}")
                                     for i, p in enumerate(ports)])
        for _ in range(a.fleet_samples):
            for scheme in schemes:
                procs, got = replayers[scheme], samples[scheme]
                c0 = sum(proc_cpu(rs.pid) for rs in procs)
                prefix = os.environ.get("FLEET_BENCH_CLIENT_PREFIX", "").format(scheme=scheme)
                wall, cpu, rss, out = preview(run, cr, nfs[scheme], token_file, None,
                                              ca if scheme == "https" else None, prefix.split())
                got["srv"].append(sum(proc_cpu(rs.pid) for rs in procs) - c0)
                answered = []
                for rs in procs:
                    rs.stdin.write("\n")
                    rs.stdin.flush()
                    answered += json.loads(rs.stdout.readline())
                if os.environ.get("FLEET_BENCH_DEBUG"):
                    print(scheme, round(wall, 3), sorted(round(t - preview.spawned, 3)
                                                         for t, _ in answered), file=sys.stderr)
                asked = sorted(t for t, _ in answered)
                done = sorted(t for _, t in answered)
                got["late"].append(sum(1 for t in done if t - done[0] > 0.5 * t1[scheme]))
                # the wall time's parts: spawn to the first request read, first to last
                # request read (the fan-out's spread), last answer written to the exit
                got["first"].append(asked[0] - preview.spawned)
                got["spread"].append(asked[-1] - asked[0])
                got["tail"].append(preview.exited - done[-1])
                want = f"{a.nodes} selected: {a.nodes} would change (1 plan), 0 converged, 0 failed"
                if want not in out:
                    sys.exit(f"unexpected replayed preview: {out[-2000:]}")
                got["wall"].append(wall)
                got["cpu"].append(cpu)
                got["rss"].append(rss)
    finally:
        for procs in replayers.values():
            for rs in procs:
                rs.stdin.close()
            for rs in procs:
                rs.wait(timeout=30)
    figs = {}
    for scheme in schemes:
        g = samples[scheme]
        walls, med = g["wall"], statistics.median(g["wall"])
        figs[scheme] = {
            "t_model_s_median_min_max": [round(med, 3), round(min(walls), 3), round(max(walls), 3)],
            "t_model_over_t1_median_min_max": [round(med / t1[scheme], 2),
                                               round(min(walls) / t1[scheme], 2),
                                               round(max(walls) / t1[scheme], 2)],
            "client_cpu_s_median": round(statistics.median(g["cpu"]), 3),
            "client_cpu_ms_per_node": round(1000 * statistics.median(g["cpu"]) / a.nodes, 3),
            "client_peak_rss_mib_max": round(max(g["rss"]) / 1024, 1),
            "replayers_cpu_s_median": round(statistics.median(g["srv"]), 3),
            "replayers_cpu_ms_per_node": round(1000 * statistics.median(g["srv"]) / a.nodes, 3),
            "nodes_answered_late_max": max(g["late"]),
            "spawn_to_first_request_s_median": round(statistics.median(g["first"]), 3),
            "request_spread_s_median_max": [round(statistics.median(g["spread"]), 3),
                                            round(max(g["spread"]), 3)],
            "last_answer_to_exit_s_median": round(statistics.median(g["tail"]), 3),
        }
    return figs


def main():
    if "--replay-server" in sys.argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--replay-server", action="store_true")
        ap.add_argument("--replay-nodes", type=int)
        ap.add_argument("--response")
        ap.add_argument("--delay", type=float)
        ap.add_argument("--cert")
        ap.add_argument("--key")
        return replay_server_main(ap.parse_args())
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--bin", default=os.environ.get("BIN", os.path.join(REPO, "target/debug")))
    ap.add_argument("--json")
    ap.add_argument("--model", choices=["real", "replay", "both"], default="real",
                    help="real: N serve processes on this machine; replay: N replaying nodes; both")
    ap.add_argument("--fleet-samples", type=int, default=5)
    ap.add_argument("--key-type", choices=sorted(KEY_TYPES), default="p256",
                    help="the CA's and the nodes' key type")
    ap.add_argument("--replayer", choices=["rust", "python"], default="rust",
                    help="the replaying nodes' TLS: serve's (rust) or Python's ssl")
    ap.add_argument("--packages", choices=["tiny", "gpu"], default="tiny",
                    help="tiny: the two small packages on ubuntu-22.04; gpu: NVIDIA's ports "
                         "(setup kernel, setup, tuned) on the EKS H100 host layer")
    ap.add_argument("--keep", action="store_true",
                    help="keep the work directory (printed on stderr), to profile by hand")
    a = ap.parse_args()
    agent = os.path.join(a.bin, "skyhook-agent")
    run = os.path.join(a.bin, "skyhook-run")
    w = tempfile.mkdtemp(prefix="fleet-bench-")
    procs = []
    load0 = os.getloadavg()
    try:
        if a.packages == "gpu":
            cr, preview.packages = gpu_packages()
            layer = gpu_node_template(w)
        else:
            cr = make_packages(w)
            layer = os.path.join(REPO, "tests/fakehosts/ubuntu-22.04")
        tokens = os.path.join(w, "engines")
        write(tokens, f"bench {hashlib.sha256(TOKEN.encode()).hexdigest()} plan\n")
        token_file = os.path.join(w, "token")
        write(token_file, TOKEN + "\n")
        tls = make_tls(w, a.key_type)
        roots = []
        for i in range(a.nodes if a.model != "replay" else min(a.samples, a.nodes)):
            r = os.path.join(w, "roots", f"n{i:03}")
            os.makedirs(os.path.dirname(r), exist_ok=True)
            # cp -a: the GPU template's /dev/null stays a device
            subprocess.run(["cp", "-a", layer, r], check=True)
            roots.append(r)
        procs, addrs = start_servers(agent, roots, tokens, w)
        # The single-node samples over TLS: a serve with the certificate over each sample's
        # root (plans are read-only, so the two serves of a root do not disturb each other).
        n1 = min(a.samples, a.nodes)
        tls_procs, tls_addrs = start_servers(agent, roots[:n1], tokens, w, tls[1:], "-tls")
        procs += tls_procs
        names = [f"n{i:03}" for i in range(a.nodes)]
        singles = {"http": [], "https": []}
        # One preview over each scheme first, not counted: the binaries' pages, the first
        # plan's caches; T1 is then the slowest of warm previews, as each of the fleet's is.
        for scheme, addr in (("http", addrs[0]), ("https", tls_addrs[0])):
            nf = os.path.join(w, f"warm-{scheme}.json")
            nodes_file(nf, [(names[0], addr)])
            preview(run, cr, nf, token_file, 1, tls[0] if scheme == "https" else None)
        for i in range(n1):
            for scheme, addr in (("http", addrs[i]), ("https", tls_addrs[i])):
                nf = os.path.join(w, f"one-{scheme}-{i}.json")
                nodes_file(nf, [(names[i], addr)])
                wall, _, _, _ = preview(run, cr, nf, token_file, 1,
                                        tls[0] if scheme == "https" else None)
                singles[scheme].append(wall)
        t1 = {s: max(v) for s, v in singles.items()}
        fig = {"nodes": a.nodes, "packages": a.packages, "key_type": a.key_type,
               "replayer": a.replayer,
               "single_node_walls_s_http": [round(s, 3) for s in singles["http"]],
               "single_node_walls_s_https": [round(s, 3) for s in singles["https"]],
               "t1_slowest_single_s_http": round(t1["http"], 3),
               "t1_slowest_single_s_https": round(t1["https"], 3),
               "cores": os.cpu_count(), "bin": a.bin}
        if a.model != "real":
            for scheme, f in replay_runs(a, run, cr, token_file, t1, addrs[0], w, tls).items():
                fig.update({f"replay_{scheme}_{k}": v for k, v in f.items()})
        if a.model != "replay":
            fig.update(real_run(a, run, cr, token_file, t1["http"], procs[:len(addrs)],
                                names, addrs, w))
        fig["load_average_1min_before_after"] = [round(load0[0], 2),
                                                 round(os.getloadavg()[0], 2)]
        for k, v in fig.items():
            print(f"{k:40} {v}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(fig, f, indent=2)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if a.keep:
            print(f"kept {w}", file=sys.stderr)
        else:
            shutil.rmtree(w, ignore_errors=True)


def real_run(a, run, cr, token_file, t1, procs, names, addrs, w):
    """All N real serve processes at once."""
    nf = os.path.join(w, "all.json")
    nodes_file(nf, list(zip(names, addrs)))
    cpu0 = sum(proc_cpu(p.pid) for p in procs)
    wall, client_cpu, client_rss, out = preview(run, cr, nf, token_file, None)
    server_cpu = sum(proc_cpu(p.pid) for p in procs) - cpu0
    server_rss = [proc_rss_kib(p.pid) for p in procs]
    want = f"{a.nodes} selected: {a.nodes} would change (1 plan), 0 converged, 0 failed"
    if want not in out:
        sys.exit(f"unexpected preview: {out[-2000:]}")
    return {
        "tn_wall_s": round(wall, 3),
        "tn_over_t1": round(wall / t1, 2),
        "client_cpu_s": round(client_cpu, 3),
        "client_peak_rss_mib": round(client_rss / 1024, 1),
        "servers_cpu_s": round(server_cpu, 3),
        "servers_cpu_bound_s": round(server_cpu / os.cpu_count(), 3),
        "server_rss_mib_max": round(max(server_rss) / 1024, 1),
        "fleet_equivalent_s": round(t1 + client_cpu, 3),
        "fleet_equivalent_over_t1": round((t1 + client_cpu) / t1, 2),
    }


if __name__ == "__main__":
    main()
