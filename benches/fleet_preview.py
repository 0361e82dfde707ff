#!/usr/bin/env python3
"""Benchmark the fleet preview (`skyhook-run plan`, docs/fleet.md): N nodes previewed at once
against the slowest single node's preview, on loopback, and the preview's memory.

    cargo build --bins                      # or --release (BIN=target/release)
    python3 benches/fleet_preview.py        # N=100, 10 single-node samples
    python3 benches/fleet_preview.py --nodes 50 --samples 5 --json out.json

Python 3, stdlib only; as root (each package plan leaves the mount namespace and makes the
host root read-only, which needs CAP_SYS_ADMIN). It:

1. makes N host roots, each a copy of tests/fakehosts/ubuntu-22.04, and two packages beside a
   Skyhook CR (`base` writes a file naming the distribution and lists a process step;
   `tuning` dependsOn base, writes a file from its configMap and asks for a containerd
   restart the CR declares);
2. starts N `skyhook-agent serve` processes, one per root (`--listen 127.0.0.1:0`, a tokens
   file with a plan-scoped token), and waits for each to listen (bounded);
3. single: previews each of --samples nodes alone (`skyhook-run plan` with a NODES file of
   that one node), wall time from spawn to exit; T1 = the slowest;
4. fleet: previews all N nodes at once (`--parallel N`), wall time T_N; the client's CPU
   time and peak RSS (getrusage of the child); every server's CPU time during the run
   (utime+stime of /proc/PID/stat) and RSS after it;
5. checks that the N-node output groups all N nodes into one plan, and prints the figures and
   T_N / T1.

On one machine every node's planning shares the same cores, so T_N also carries N nodes'
worth of server CPU; on a fleet each node plans on its own. The script prints that CPU too, and
`fleet-equivalent` = T1 + the client's own CPU time for N nodes, what the preview would take
when each node plans on its own CPU.
"""
import argparse
import hashlib
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


def proc_cpu(pid):
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
    return int(m.group(1)) if m else 0


def start_servers(agent, roots, tokens, w):
    procs = []
    for i, root in enumerate(roots):
        log = open(os.path.join(w, f"serve-{i}.log"), "w+")
        p = subprocess.Popen([agent, "serve", "--listen", "127.0.0.1:0", "--root", root,
                              "--tokens-file", tokens, "--cgroup-root", "none"],
                             stdout=subprocess.DEVNULL, stderr=log)
        procs.append((p, log))
    addrs = []
    deadline = time.monotonic() + 60
    for p, log in procs:
        while True:
            log.seek(0)
            m = re.search(r"listening on (127\.0\.0\.1:\d+)", log.read())
            if m:
                addrs.append("http://" + m.group(1))
                break
            if p.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                sys.exit(f"serve did not start: {log.read()}")
            time.sleep(0.02)
    return [p for p, _ in procs], addrs


def nodes_file(path, names_addrs):
    with open(path, "w") as f:
        json.dump([{"name": n, "labels": {"nvidia.com/gpu.present": "true"}, "address": a}
                   for n, a in names_addrs], f)


def preview(run, cr, nodes, token_file, parallel):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    out = subprocess.run([run, "plan", "--skyhook-cr", cr, "--nodes", nodes,
                          "--token-file", token_file, "--mode", "apply",
                          "--parallel", str(parallel), "--node-timeout", "300s"],
                         capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if out.returncode != 0:
        sys.exit(f"skyhook-run plan exited {out.returncode}: {out.stdout[-2000:]}{out.stderr}")
    return wall, cpu, after.ru_maxrss, out.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--bin", default=os.environ.get("BIN", os.path.join(REPO, "target/debug")))
    ap.add_argument("--json")
    a = ap.parse_args()
    agent = os.path.join(a.bin, "skyhook-agent")
    run = os.path.join(a.bin, "skyhook-run")
    w = tempfile.mkdtemp(prefix="fleet-bench-")
    procs = []
    try:
        cr = make_packages(w)
        tokens = os.path.join(w, "engines")
        write(tokens, f"bench {hashlib.sha256(TOKEN.encode()).hexdigest()} plan\n")
        token_file = os.path.join(w, "token")
        write(token_file, TOKEN + "\n")
        layer = os.path.join(REPO, "tests/fakehosts/ubuntu-22.04")
        roots = []
        for i in range(a.nodes):
            r = os.path.join(w, "roots", f"n{i:03}")
            shutil.copytree(layer, r, symlinks=True)
            roots.append(r)
        procs, addrs = start_servers(agent, roots, tokens, w)
        names = [f"n{i:03}" for i in range(a.nodes)]
        singles = []
        for i in range(min(a.samples, a.nodes)):
            nf = os.path.join(w, f"one-{i}.json")
            nodes_file(nf, [(names[i], addrs[i])])
            wall, _, _, _ = preview(run, cr, nf, token_file, 1)
            singles.append(wall)
        t1 = max(singles)
        nf = os.path.join(w, "all.json")
        nodes_file(nf, list(zip(names, addrs)))
        cpu0 = sum(proc_cpu(p.pid) for p in procs)
        wall, client_cpu, client_rss, out = preview(run, cr, nf, token_file, a.nodes)
        server_cpu = sum(proc_cpu(p.pid) for p in procs) - cpu0
        server_rss = [proc_rss_kib(p.pid) for p in procs]
        want = f"{a.nodes} selected: {a.nodes} would change (1 plan), 0 converged, 0 failed"
        if want not in out:
            sys.exit(f"unexpected preview: {out[-2000:]}")
        fig = {
            "nodes": a.nodes,
            "single_node_walls_s": [round(s, 3) for s in singles],
            "t1_slowest_single_s": round(t1, 3),
            "tn_wall_s": round(wall, 3),
            "tn_over_t1": round(wall / t1, 2),
            "client_cpu_s": round(client_cpu, 3),
            "client_peak_rss_mib": round(client_rss / 1024, 1),
            "servers_cpu_s": round(server_cpu, 3),
            "server_rss_mib_max": round(max(server_rss) / 1024, 1),
            "fleet_equivalent_s": round(t1 + client_cpu, 3),
            "fleet_equivalent_over_t1": round((t1 + client_cpu) / t1, 2),
            "cores": os.cpu_count(),
            "bin": a.bin,
        }
        for k, v in fig.items():
            print(f"{k:28} {v}")
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
        shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    main()
