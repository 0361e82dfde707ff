#!/usr/bin/env python3
"""A/B two skyhook-agent binaries on the same kept bench root.

    KEEP=1 RUNS=1 SETTLE=0 bash benches/agent_overhead.sh      # leaves target/bench-root
    python3 benches/ab_agents.py OLD_AGENT NEW_AGENT [PKG] [N]

Runs `AGENT apply target/bench-root/root PKG` (PKG default /pkg-rhai; /pkg for bash steps) N
times per binary (default 12), alternating which goes first, with the bench's environment and
OVERLAY_ALWAYS_RUN_STEP=true, and prints the median and best wall time and the median CPU time
(user+sys of the agent and its children) of each. Both binaries see the same disk state, so the
difference is the change, not the machine.
"""
import os
import statistics
import subprocess
import sys
import time

old, new = sys.argv[1], sys.argv[2]
pkg = sys.argv[3] if len(sys.argv) > 3 else "/pkg-rhai"
n = int(sys.argv[4]) if len(sys.argv) > 4 else 12
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "bench-root", "root")
env = dict(PATH="/usr/bin:/bin", SKYHOOK_ROOT_DIR="/state", SKYHOOK_LOG_DIR="/log",
           SKYHOOK_RESOURCE_ID="bench-0-1_bench_1.0.0", COPY_RESOLV="false",
           OVERLAY_ALWAYS_RUN_STEP="true")
bins = [("old", old), ("new", new)]
wall = {k: [] for k, _ in bins}
cpu = {k: [] for k, _ in bins}
for i in range(n):
    for k, b in (bins if i % 2 == 0 else bins[::-1]):
        r0, t0 = os.times(), time.perf_counter()
        subprocess.run([b, "apply", root, pkg], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        t1, r1 = time.perf_counter(), os.times()
        wall[k].append((t1 - t0) * 1000)
        cpu[k].append(((r1.children_user - r0.children_user)
                       + (r1.children_system - r0.children_system)) * 1000)
for k, _ in bins:
    print(f"{k} {pkg}: wall median {statistics.median(wall[k]):.1f} ms, best {min(wall[k]):.1f} ms;"
          f" cpu median {statistics.median(cpu[k]):.1f} ms")
