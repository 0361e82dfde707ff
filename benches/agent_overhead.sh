#!/usr/bin/env bash
# skyhook-agent overhead benchmark (figures in docs/benchmarks.md).
#
# Usage (as root: steps are chrooted):
#   [RUNS=11] [STEPS=100] [AGENT=path/to/skyhook-agent] bash benches/agent_overhead.sh
#
# Builds the agent (release) unless AGENT is given, makes a throwaway host root under
# target/bench-root (/bin/sh, /bin/true, /bin/date and their ldd libraries; removed on exit) and
# measures, alternating the agent and its baselines RUNS times in one process so that a noisy,
# shared machine affects both alike (medians and bests are reported):
#
#  1. per-step overhead: `skyhook-agent apply ROOT /pkg` on a package of STEPS trivial steps
#     (t.sh = "#!/bin/sh\nexit 0", one step per argument 0..STEPS-1, plus the required
#     apply-check step), OVERLAY_ALWAYS_RUN_STEP=true so every run executes every step, with
#     per-step log files (production default) and with SKYHOOK_AGENT_WRITE_LOGS=false; also a
#     package whose STEPS steps have distinct paths (t000.sh, ...), since steps sharing a path
#     share log names (contract 6.5). Baselines: a /bin/sh loop of STEPS
#     `chroot ROOT /pkg/skyhook_dir/t.sh I` (fork + exec chroot(1) + chroot + exec each), and,
#     if a C compiler is present, a tighter one without the chroot(1) exec: a small C loop doing
#     fork + chroot + chdir + execv + waitpid STEPS times (the least any chrooting runner pays).
#     Overhead per step = (agent_total - baseline_total) / STEPS; target <= 2 ms.
#     Also the same /pkg with every step skipped (flags exist, OVERLAY_ALWAYS_RUN_STEP=false):
#     the agent's fixed cost for this package, i.e. the run with zero executed steps.
#  1b. Rhai steps: /pkg-rhai has STEPS in-process steps t.rhai ("let x = 1;", arguments
#     0..STEPS-1), run with logs on and with SKYHOOK_AGENT_WRITE_LOGS=false. Overhead per step =
#     (agent_total - agent_total with zero executed steps) / STEPS, where the zero-step run is
#     the same package with every step skipped (same config, same compile-ahead of every
#     script, same flag lookups; only execution, logs and flag writes differ). Also reported
#     against the one-step skipped apply of (2), which also charges config size and the
#     compile-ahead to the steps. Target < 1 ms.
#  2. agent start to first step: the only apply step is a copy of date(1) run as
#     `stamp +%s%N`; latency = its printed CLOCK_REALTIME minus the driver's CLOCK_REALTIME just
#     before spawning the agent, minus the same latency for a bare spawn of date(1) (both pay
#     date's own start-up). Also: total runtime of an apply whose only step is skipped (flag
#     exists) minus a bare /bin/true spawn. Target < 10 ms.
#  3. peak RSS of the agent during (1) and (1b) (logs on): /usr/bin/time -v "Maximum resident set size"
#     (the script installs the `time` package with apt-get if /usr/bin/time is missing; if that
#     fails, a Python wrapper reports resource.getrusage(RUSAGE_CHILDREN).ru_maxrss). Either
#     figure is the max over the agent and the steps it waited for (sh, ~1-2 MiB).
#
# Agent environment (as the operator's): SKYHOOK_ROOT_DIR=/state SKYHOOK_LOG_DIR=/log
# SKYHOOK_RESOURCE_ID=bench-0-1_bench_1.0.0 COPY_RESOLV=false. Agent stdout/stderr go to a file
# under target/bench-root. State and logs are kept between runs (as on a node); retention bounds
# each log directory at 5 logs per step path. KEEP=1 keeps target/bench-root for inspection;
# BENCH_WORK=/dev/shm/x puts the work dir (and root) elsewhere, e.g. on tmpfs.
#
# Settling: on ext4, creating an inode within vm.dirty_expire_centisecs (30 s) of a mass
# deletion is slow (__ext4_new_inode -> recently_deleted skips every recently freed inode of the
# group; measured: a 100-step Rhai apply 120 ms -> 220-300 ms, all of it sys time). The work dir
# of a previous run (thousands of log files) is deleted by its EXIT trap or at our start, so the
# script waits dirty_expire_centisecs/100 + 5 s after setup before measuring. SETTLE=0 skips the
# wait; SETTLE=N waits N seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-11}
STEPS=${STEPS:-100}

if [ "$(id -u)" != 0 ]; then
    echo "agent_overhead.sh: needs root (steps run in a chroot)" >&2
    exit 1
fi
if [ -z "${AGENT:-}" ]; then
    cargo build --quiet --release --bin skyhook-agent
    AGENT=$PWD/target/release/skyhook-agent
fi
AGENT=$(readlink -f "$AGENT")

if [ ! -x /usr/bin/time ]; then
    (apt-get install -y -qq time > /dev/null 2>&1 || (apt-get update -qq > /dev/null 2>&1 &&
        apt-get install -y -qq time > /dev/null 2>&1)) || true
fi

WORK=${BENCH_WORK:-$PWD/target/bench-root}   # BENCH_WORK: e.g. /dev/shm/x to compare filesystems
ROOT=$WORK/root
rm -rf "$WORK"
trap '[ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT
mkdir -p "$ROOT/bin"

# The throwaway host root: a few binaries and exactly the libraries ldd names.
for b in sh true date; do
    cp -L "/bin/$b" "$ROOT/bin/$b"
    for lib in $(ldd "/bin/$b" | grep -o '/[^ ]*'); do
        mkdir -p "$ROOT$(dirname "$lib")"
        [ -e "$ROOT$lib" ] || cp -L "$lib" "$ROOT$lib"
    done
done

# Packages, laid out as the operator's copy dir; each has its own name, hence its own flag and
# log directories.
#   /pkg        STEPS steps t.sh 0..STEPS-1
#   /pkg-dist   STEPS steps tNNN.sh (distinct paths, same content)
#   /pkg-first  one step: stamp (a copy of date) +%s%N
#   /pkg-skip   one step t.sh, skipped once its flag exists
#   /pkg-rhai   STEPS in-process steps t.rhai ("let x = 1;") 0..STEPS-1
python3 - "$ROOT" "$STEPS" <<'PY'
import json, os, shutil, sys
root, n = sys.argv[1], int(sys.argv[2])
script = b"#!/bin/sh\nexit 0\n"

def step(name, path, args):
    return {"name": name, "path": path, "arguments": args, "returncodes": [0],
            "on_host": True, "idempotence": False, "upgrade_step": False}

def package(copy_dir, name, apply_steps, files):
    d = os.path.join(root, copy_dir.lstrip("/"), "skyhook_dir")
    os.makedirs(d)
    for file_name, content in files.items():
        with open(os.path.join(d, file_name), "wb") as f:
            f.write(content)
        os.chmod(os.path.join(d, file_name), 0o755)
    config = {"schema_version": "v1", "root_dir": "/", "expected_config_files": [],
              "package_name": name, "package_version": "1.0.0",
              "modes": {"apply": apply_steps, "apply-check": [step("check", "t.sh", [])]}}
    with open(os.path.join(root, copy_dir.lstrip("/"), "config.json"), "w") as f:
        json.dump(config, f, indent=1)

package("/pkg", "bench", [step(f"s{i}", "t.sh", [str(i)]) for i in range(n)], {"t.sh": script})
package("/pkg-dist", "benchdist", [step(f"s{i}", f"t{i:03}.sh", []) for i in range(n)],
        {"t.sh": script, **{f"t{i:03}.sh": script for i in range(n)}})
package("/pkg-first", "benchfirst", [step("stamp", "stamp", ["+%s%N"])],
        {"t.sh": script, "stamp": open("/bin/date", "rb").read()})
package("/pkg-skip", "benchskip", [step("skip", "t.sh", ["skip"])], {"t.sh": script})
package("/pkg-rhai", "benchrhai", [step(f"s{i}", "t.rhai", [str(i)]) for i in range(n)],
        {"t.sh": script, "t.rhai": b"let x = 1;\n"})
PY

# Tight baseline: fork + chroot + exec from a small C process (skipped without a compiler).
if command -v cc > /dev/null; then
    cc -O2 -o "$WORK/spawn_loop" benches/spawn_loop.c
fi

cat > "$WORK/driver.py" <<'PY'
import os, re, resource, shutil, statistics, subprocess, sys, time

agent, root, work, runs, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
out_path = os.path.join(work, "agent.out")
base_env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "SKYHOOK_ROOT_DIR": "/state", "SKYHOOK_LOG_DIR": "/log",
            "SKYHOOK_RESOURCE_ID": "bench-0-1_bench_1.0.0", "COPY_RESOLV": "false",
            "OVERLAY_ALWAYS_RUN_STEP": "true"}
TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None
SPAWN_LOOP = os.path.join(work, "spawn_loop") if os.access(os.path.join(work, "spawn_loop"), os.X_OK) else None

def spawn(argv, env=None):
    """Run argv to completion: (elapsed s, ru_maxrss KiB, user+sys CPU s), the rusage figures of
    argv and the children it waited for."""
    with open(out_path, "wb") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, env=env if env is not None else base_env,
                             stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        _, status, ru = os.wait4(p.pid, 0)
        t1 = time.perf_counter()
    if status != 0:
        sys.exit(f"{argv} failed with wait status {status}:\n" + open(out_path).read()[-2000:])
    return t1 - t0, ru.ru_maxrss, ru.ru_utime + ru.ru_stime

def env_with(**kw):
    e = dict(base_env)
    e.update(kw)
    return e

def chroot_loop():
    loop = (f'i=0; while [ $i -lt {n} ]; do chroot "$1" /pkg/skyhook_dir/t.sh $i || exit 1; '
            'i=$((i+1)); done')
    return spawn(["/bin/sh", "-c", loop, "sh", root])

def fork_loop():
    if not SPAWN_LOOP:
        return float("nan"), 0, float("nan")
    return spawn([SPAWN_LOOP, root, "/pkg/skyhook_dir/t.sh", str(n)])

def agent_apply(pkg, **kw):
    return spawn([agent, "apply", root, pkg], env_with(**kw))

def realtime_latency(argv, env):
    """CLOCK_REALTIME printed by the first step minus CLOCK_REALTIME just before the spawn."""
    with open(out_path, "wb") as out:
        t0 = time.time_ns()
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        status = p.wait()
    text = open(out_path).read()
    m = re.search(r"(?<!\d)(\d{19})(?!\d)", text)
    if status != 0 or not m:
        sys.exit(f"{argv}: status {status}, no timestamp in output:\n{text[-2000:]}")
    return (int(m.group(1)) - t0) / 1e9

def rss_time_v(pkg):
    argv = [agent, "apply", root, pkg]
    if TIME:
        with open(os.path.join(work, "time.txt"), "wb") as err:
            subprocess.run([TIME, "-v"] + argv, env=base_env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=err, check=True)
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)",
                      open(os.path.join(work, "time.txt")).read())
        return int(m.group(1))
    wrapper = ("import resource, subprocess, sys\n"
               "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)\n"
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    r = subprocess.run([sys.executable, "-c", wrapper] + argv, env=base_env,
                       stdin=subprocess.DEVNULL, capture_output=True, check=True, text=True)
    return int(r.stdout.split()[-1])

# Warm-up: page cache, flags, the skip package's flag, and log directories at their steady
# size (retention keeps 5 logs per step path, so /pkg-dist needs 5 runs to fill up).
for _ in range(2):
    chroot_loop(); fork_loop(); agent_apply("/pkg")
    agent_apply("/pkg", SKYHOOK_AGENT_WRITE_LOGS="false")
for _ in range(6):
    agent_apply("/pkg-dist")
agent_apply("/pkg-skip", OVERLAY_ALWAYS_RUN_STEP="false")
agent_apply("/pkg-first")
for _ in range(2):
    agent_apply("/pkg-rhai"); agent_apply("/pkg-rhai", SKYHOOK_AGENT_WRITE_LOGS="false")

FIRST_SAMPLES = 5
m = {k: [] for k in ["chroot", "fork", "agent", "agent_nologs", "agent_dist", "agent_skipall",
                     "rhai", "rhai_nologs", "rhai_skipall", "rss_agent", "rss_rhai",
                     "first_agent", "first_bare", "skip_agent", "true_bare"]}
measures = [
    ("chroot", chroot_loop),
    ("fork", fork_loop),
    ("agent", lambda: agent_apply("/pkg")),
    ("agent_nologs", lambda: agent_apply("/pkg", SKYHOOK_AGENT_WRITE_LOGS="false")),
    ("agent_dist", lambda: agent_apply("/pkg-dist")),
    ("agent_skipall", lambda: agent_apply("/pkg", OVERLAY_ALWAYS_RUN_STEP="false")),
    ("rhai", lambda: agent_apply("/pkg-rhai")),
    ("rhai_nologs", lambda: agent_apply("/pkg-rhai", SKYHOOK_AGENT_WRITE_LOGS="false")),
    ("rhai_skipall", lambda: agent_apply("/pkg-rhai", OVERLAY_ALWAYS_RUN_STEP="false")),
    ("first_agent", lambda: [realtime_latency([agent, "apply", root, "/pkg-first"], base_env)
                             for _ in range(FIRST_SAMPLES)]),
    ("first_bare", lambda: [realtime_latency([os.path.join(root, "bin/date"), "+%s%N"], base_env)
                            for _ in range(FIRST_SAMPLES)]),
    ("skip_agent", lambda: [agent_apply("/pkg-skip", OVERLAY_ALWAYS_RUN_STEP="false")[0]
                            for _ in range(FIRST_SAMPLES)]),
    ("true_bare", lambda: [spawn([os.path.join(root, "bin/true")])[0]
                           for _ in range(FIRST_SAMPLES)]),
    ("rss_agent", lambda: rss_time_v("/pkg")),
    ("rss_rhai", lambda: rss_time_v("/pkg-rhai")),
]
for r in range(runs):
    k = r % len(measures)          # rotate the order so no measurement always goes first
    for name, f in measures[k:] + measures[:k]:
        v = f()
        if isinstance(v, list):
            m[name].extend(v)
        elif isinstance(v, tuple):
            m[name].append(v[0])
            m.setdefault(name + "_cpu", []).append(v[2])
        else:
            m[name].append(v)
    print(f"run {r + 1}/{runs}: agent {m['agent'][-1] * 1e3:.1f} ms, "
          f"chroot loop {m['chroot'][-1] * 1e3:.1f} ms, rhai {m['rhai'][-1] * 1e3:.1f} ms",
          file=sys.stderr)

med = {k: statistics.median(v) for k, v in m.items()}
best = {k: min(v) for k, v in m.items()}
ms = lambda s: s * 1e3

print()
print(f"skyhook-agent overhead, {n} steps, {runs} alternating runs "
      f"({time.strftime('%Y-%m-%d %H:%M %Z')}, {os.cpu_count()} CPUs)")
print()
print(f"{'measurement':<52} {'median':>10} {'best':>10}")
rows = [
    (f"baseline: sh loop of {n} x chroot(1) ROOT t.sh", "chroot"),
    (f"baseline: {n} x fork+chroot+exec t.sh (C loop)", "fork"),
    (f"agent apply, {n} steps, logs on", "agent"),
    (f"agent apply, {n} steps, SKYHOOK_AGENT_WRITE_LOGS=false", "agent_nologs"),
    (f"agent apply, {n} distinct step paths, logs on", "agent_dist"),
    (f"agent apply, {n} steps, all skipped (flags exist)", "agent_skipall"),
    (f"agent apply, {n} rhai steps, logs on", "rhai"),
    (f"agent apply, {n} rhai steps, SKYHOOK_AGENT_WRITE_LOGS=false", "rhai_nologs"),
    (f"agent apply, {n} rhai steps, all skipped (flags exist)", "rhai_skipall"),
    ("agent apply, 1 step, skipped (per spawn)", "skip_agent"),
]
for label, k in rows:
    print(f"{label + ' (ms)':<52} {ms(med[k]):>10.1f} {ms(best[k]):>10.1f}")
print()
print(f"{'per-step overhead (agent - baseline) / ' + str(n) + ', ms':<52} {'median':>10} {'best':>10}"
      f" {'ratio':>7}")
for label, a, b in [("logs on  vs chroot(1) loop", "agent", "chroot"),
                    ("logs on  vs fork+chroot+exec", "agent", "fork"),
                    ("logs off vs chroot(1) loop", "agent_nologs", "chroot"),
                    ("logs off vs fork+chroot+exec", "agent_nologs", "fork"),
                    ("distinct paths, logs on vs chroot(1) loop", "agent_dist", "chroot"),
                    ("distinct paths, logs on vs fork+chroot+exec", "agent_dist", "fork")]:
    print(f"{label:<52} {ms(med[a] - med[b]) / n:>10.3f} {ms(best[a] - best[b]) / n:>10.3f}"
          f" {med[a] / med[b]:>6.2f}x")
print("  (target: <= 2 ms per step; ratio = median agent total / median baseline total)")
print()
print(f"{'rhai per-step overhead (agent - zero-step run) / ' + str(n) + ', ms':<52} {'median':>10} {'best':>10}"
      f" {'ratio':>7}")
for label, a, b in [("rhai logs on  vs same pkg, all skipped", "rhai", "rhai_skipall"),
                    ("rhai logs off vs same pkg, all skipped", "rhai_nologs", "rhai_skipall"),
                    ("rhai logs on  vs 1-step skipped apply", "rhai", "skip_agent"),
                    ("rhai logs off vs 1-step skipped apply", "rhai_nologs", "skip_agent"),
                    ("bash logs on  vs same pkg, all skipped", "agent", "agent_skipall"),
                    ("bash logs off vs same pkg, all skipped", "agent_nologs", "agent_skipall")]:
    print(f"{label:<52} {ms(med[a] - med[b]) / n:>10.3f} {ms(best[a] - best[b]) / n:>10.3f}"
          f" {med[a] / med[b]:>6.2f}x")
print("  (rhai target: < 1 ms per step; the bash rows include the step's fork+chroot+exec)")
print()
print(f"{'CPU (user+sys, incl. steps) overhead per step, ms':<52} {'median':>10} {'best':>10}")
for label, a, b in [("logs on  vs fork+chroot+exec", "agent", "fork"),
                    ("logs off vs fork+chroot+exec", "agent_nologs", "fork"),
                    ("distinct paths, logs on vs fork+chroot+exec", "agent_dist", "fork"),
                    ("rhai logs on  vs same pkg, all skipped", "rhai", "rhai_skipall"),
                    ("rhai logs off vs same pkg, all skipped", "rhai_nologs", "rhai_skipall")]:
    a, b = a + "_cpu", b + "_cpu"
    print(f"{label:<52} {ms(med[a] - med[b]) / n:>10.3f} {ms(best[a] - best[b]) / n:>10.3f}")
print("  (wall minus CPU is waiting, mostly fsync of flag files; a busy shared disk inflates it)")
print()
print(f"{'start to first step, ms':<52} {'median':>10} {'best':>10}")
print(f"{'agent: spawn -> first step prints CLOCK_REALTIME':<52} {ms(med['first_agent']):>10.2f} {ms(best['first_agent']):>10.2f}")
print(f"{'bare: spawn -> date prints CLOCK_REALTIME':<52} {ms(med['first_bare']):>10.2f} {ms(best['first_bare']):>10.2f}")
print(f"{'agent start to first step (difference)':<52} {ms(med['first_agent'] - med['first_bare']):>10.2f} {ms(best['first_agent'] - best['first_bare']):>10.2f}")
print(f"{'agent apply, only step skipped (total)':<52} {ms(med['skip_agent']):>10.2f} {ms(best['skip_agent']):>10.2f}")
print(f"{'bare /bin/true (total)':<52} {ms(med['true_bare']):>10.2f} {ms(best['true_bare']):>10.2f}")
print(f"{'skipped-step apply - /bin/true':<52} {ms(med['skip_agent'] - med['true_bare']):>10.2f} {ms(best['skip_agent'] - best['true_bare']):>10.2f}")
print(f"  (target: < 10 ms; {FIRST_SAMPLES} spawns per run, median/best over all {len(m['first_agent'])})")
print()
src = "/usr/bin/time -v" if TIME else "getrusage(RUSAGE_CHILDREN)"
print(f"peak RSS, agent apply {n} steps, logs on ({src}): median "
      f"{statistics.median(m['rss_agent']) / 1024:.1f} MiB, max {max(m['rss_agent']) / 1024:.1f} MiB"
      " (no separate target; architecture.md gives the log sink < 20 MB)")
print(f"peak RSS, agent apply {n} rhai steps, logs on ({src}): median "
      f"{statistics.median(m['rss_rhai']) / 1024:.1f} MiB, max {max(m['rss_rhai']) / 1024:.1f} MiB")
PY

echo "agent: $AGENT ($(stat -c %s "$AGENT") bytes)" >&2
SETTLE=${SETTLE:-$(( $(cat /proc/sys/vm/dirty_expire_centisecs 2> /dev/null || echo 3000) / 100 + 5 ))}
if [ "$SETTLE" -gt 0 ]; then
    echo "settling ${SETTLE}s (recently deleted inodes; SETTLE=0 skips)" >&2
    sleep "$SETTLE"
fi
python3 "$WORK/driver.py" "$AGENT" "$ROOT" "$WORK" "$RUNS" "$STEPS"
echo
echo "reproduce: sudo RUNS=$RUNS STEPS=$STEPS bash benches/agent_overhead.sh"
