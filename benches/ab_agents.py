#!/usr/bin/env python3
"""A/B two skyhook-agent binaries on the same kept bench root.

    KEEP=1 RUNS=1 SETTLE=0 bash benches/agent_overhead.sh      # leaves target/bench-root
    python3 benches/ab_agents.py OLD_AGENT NEW_AGENT [PKG] [N]
    (BENCH_WORK=/dev/shm/x for both commands: the same on a tmpfs root)

Runs `AGENT apply target/bench-root/root PKG` (PKG default /pkg-rhai; /pkg for bash steps) N
times per binary (default 12), alternating which goes first, with the bench's environment and
OVERLAY_ALWAYS_RUN_STEP=true, and prints the median and best wall time and the median CPU time
(user+sys of the agent and its children) of each. Both binaries see the same disk state, so the
difference is the change, not the machine.

Baselines, in the same alternation (each iteration also runs them): every binary on the same PKG
with OVERLAY_ALWAYS_RUN_STEP=false (flags exist: zero executed steps, same config, compile-ahead
and flag lookups), and for a bash package the bench's C loop target/bench-root/spawn_loop
(fork+chroot+exec of t.sh, as agent_overhead.sh) if it is there. Per-step overhead =
(median executed wall - median baseline wall) / steps, steps = the apply steps of PKG's
config.json; and the new - old difference per step.
"""
import json
import os
import statistics
import subprocess
import sys
import time

old, new = sys.argv[1], sys.argv[2]
pkg = sys.argv[3] if len(sys.argv) > 3 else "/pkg-rhai"
n = int(sys.argv[4]) if len(sys.argv) > 4 else 12
work = os.environ.get("BENCH_WORK") or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "..", "target", "bench-root")
root = os.path.join(work, "root")  # BENCH_WORK as for agent_overhead.sh (e.g. a root on tmpfs)
env = dict(PATH="/usr/bin:/bin", SKYHOOK_ROOT_DIR="/state", SKYHOOK_LOG_DIR="/log",
           SKYHOOK_RESOURCE_ID="bench-0-1_bench_1.0.0", COPY_RESOLV="false",
           OVERLAY_ALWAYS_RUN_STEP="true")
skip_env = dict(env, OVERLAY_ALWAYS_RUN_STEP="false")
with open(os.path.join(root, pkg.lstrip("/"), "config.json")) as f:
    config = json.load(f)
steps = len(config["modes"]["apply"])
spawn_loop = os.path.join(work, "spawn_loop")
bash_pkg = all(not s["path"].endswith(".rhai") for s in config["modes"]["apply"])
use_c = bash_pkg and os.access(spawn_loop, os.X_OK)
bins = [("old", old), ("new", new)]
wall = {k: [] for k in ["old", "new", "old_skip", "new_skip", "c_loop"]}
cpu = {k: [] for k in wall}


def timed(key, argv, e):
    """Wall time around the spawn; CPU from wait4 (the process and the children it waited for,
    microseconds, not os.times' clock ticks)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=e, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    t1 = time.perf_counter()
    p.returncode = status
    if status != 0:
        sys.exit(f"{argv} failed with wait status {status}")
    wall[key].append((t1 - t0) * 1000)
    cpu[key].append((ru.ru_utime + ru.ru_stime) * 1000)


for i in range(n):
    for k, b in (bins if i % 2 == 0 else bins[::-1]):
        timed(k, [b, "apply", root, pkg], env)
    for k, b in (bins if i % 2 == 0 else bins[::-1]):
        timed(k + "_skip", [b, "apply", root, pkg], skip_env)
    if use_c:
        timed("c_loop", [spawn_loop, root, "/pkg/skyhook_dir/t.sh", str(steps)], env)
for k, _ in bins:
    print(f"{k} {pkg}: wall median {statistics.median(wall[k]):.1f} ms, best {min(wall[k]):.1f} ms;"
          f" cpu median {statistics.median(cpu[k]):.1f} ms")
med = {k: statistics.median(v) for k, v in wall.items() if v}
best = {k: min(v) for k, v in wall.items() if v}
for k in [k for k in ["old_skip", "new_skip", "c_loop"] if k in med]:
    print(f"baseline {k} {pkg}: wall median {med[k]:.1f} ms, best {best[k]:.1f} ms;"
          f" cpu median {statistics.median(cpu[k]):.1f} ms")
print(f"per step ({steps} steps), ms: median / best (cpu: median)")
for k, _ in bins:
    line = (f"  {k}: vs zero executed {(med[k] - med[k + '_skip']) / steps:.3f} /"
            f" {(best[k] - best[k + '_skip']) / steps:.3f}"
            f" (cpu {(statistics.median(cpu[k]) - statistics.median(cpu[k + '_skip'])) / steps:.3f})")
    if "c_loop" in med:
        line += (f"; vs C fork+chroot+exec {(med[k] - med['c_loop']) / steps:.3f} /"
                 f" {(best[k] - best['c_loop']) / steps:.3f}")
    print(line)
print(f"  new - old: {(med['new'] - med['old']) / steps:+.3f} / {(best['new'] - best['old']) / steps:+.3f}"
      f" (vs zero executed: {((med['new'] - med['new_skip']) - (med['old'] - med['old_skip'])) / steps:+.3f})")
