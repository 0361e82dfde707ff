#!/usr/bin/env python3
"""Interleaved A/B of skyhook-agent builds on one kept step root (issue 13, fifth round).

    python3 benches/ab_steps.py ROOT PKG REPS name=BIN_DIR name=BIN_DIR ...
    ALWAYS=false python3 benches/ab_steps.py ...     # the floor: every step skipped

ROOT is a `benches/scale.py` `step_root(N)` (warmed up: flags and logs at their steady size),
PKG `/pkg` (bash steps) or `/pkg-rhai`. Runs `BIN_DIR/skyhook-agent apply ROOT PKG` REPS times
per build, alternating which goes first, with scale.py's environment, and prints per build the
median wall, CPU (user + sys of the agent and its children, `wait4`), user and sys seconds, and
the CPU of every rep.
"""
import os
import statistics
import subprocess
import sys
import time

root, pkg, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
bins = dict(b.split("=") for b in sys.argv[4:])
env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SKYHOOK_ROOT_DIR": "/state",
       "SKYHOOK_LOG_DIR": "/log", "SKYHOOK_RESOURCE_ID": "bench-0-1_bench_1.0.0", "COPY_RESOLV": "false",
       "OVERLAY_ALWAYS_RUN_STEP": os.environ.get("ALWAYS", "true")}
res = {k: [] for k in bins}
for r in range(reps):
    order = list(bins.items()) if r % 2 == 0 else list(bins.items())[::-1]
    for name, b in order:
        t0 = time.perf_counter()
        p = subprocess.Popen([b + "/skyhook-agent", "apply", root, pkg], env=env, cwd="/",
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, st, ru = os.wait4(p.pid, 0)
        assert st == 0, st
        res[name].append((time.perf_counter() - t0, ru.ru_utime + ru.ru_stime, ru.ru_utime, ru.ru_stime))
for k, v in res.items():
    print(k, "wall %.3f cpu %.3f user %.3f sys %.3f" % tuple(statistics.median(x[i] for x in v) for i in range(4)),
          "cpu reps", " ".join("%.2f" % x[1] for x in v))
