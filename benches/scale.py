#!/usr/bin/env python3
"""Scale benchmark: does every cost grow linearly with its work? (figures in docs/benchmarks.md)

    sudo python3 benches/scale.py                         # builds release binaries first
    sudo BINS=target/release python3 benches/scale.py     # a directory with skyhook-run/-agent
    sudo BINS="old=/tmp/a new=/tmp/b" python3 benches/scale.py   # A/B, interleaved per rep
    SIZES=10,100,1000,10000 REPS=3 BENCH_WORK=/dev/shm/scale ...  # defaults shown

For each N in SIZES it measures, each beside its floor:

- `fs::write` of N files (`skyhook-run` of a Rhai script, `--apply`, into a fresh root); floor:
  a Python loop doing the same atomic writes (temp file, write, fsync, rename; one directory
  fsync at the end: the session's `fsync1` policy, `src/host/root/durability.rs`);
- `fs::ensure_line` of N distinct lines into one file: plan (no `--apply`, nothing written),
  apply (fresh root), and a second apply that changes nothing. Floors: plan, a Python loop
  with a set of lines (no I/O); apply, a Python loop making the same N whole-file atomic
  rewrites (itself O(N^2) bytes); second apply, a Python loop that stats the file N times and
  checks a set built from one read;
- agent apply of N trivial bash steps (`t.sh I`, logs on, OVERLAY_ALWAYS_RUN_STEP=true, state
  and logs kept from a warm-up run); floor: a C loop of N fork + chroot + chdir + execv + wait
  (as `benches/agent_overhead.sh`);
- agent apply of N trivial Rhai steps (`t.rhai I` = `let x = 1;`, logs on); floor: the same
  package with every step skipped (flags exist: config, compile-ahead and flag lookups, zero
  executed steps).

Each figure is the median over REPS runs (the binaries and the floor alternate within each
rep) of the wall time and of the CPU time (user + sys of the process and its children, from
wait4). Growth exponent between two sizes = log(t2 / t1) / log(N2 / N1) (1.0 = linear). For
steps the script also prints the per-step overhead (run - floor) / N and its ratio to that at
the previous size (1.0 = flat). Needs root (chroot) for the step rows; without root they are
skipped. SKIP=write,line,bash,rhai leaves rows out.
"""
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SIZES = [int(x) for x in os.environ.get("SIZES", "10,100,1000,10000").split(",")]
REPS = int(os.environ.get("REPS", "3"))
WORK = os.environ.get("BENCH_WORK", os.path.join(REPO, "target", "bench-scale"))
SKIP = set(filter(None, os.environ.get("SKIP", "").split(",")))
ROOT_USER = os.geteuid() == 0


def bins():
    spec = os.environ.get("BINS")
    if not spec:
        subprocess.run(["cargo", "build", "--quiet", "--release", "--bins"], cwd=REPO, check=True)
        spec = os.path.join(REPO, "target", "release")
    out = []
    for part in spec.split():
        name, _, d = part.rpartition("=")
        out.append((name or "run", os.path.abspath(d)))
    return out


def spawn(argv, env=None, cwd=None):
    """Run argv to completion: (wall s, CPU s of it and its children)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env or {"PATH": "/usr/bin:/bin"}, cwd=cwd,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        sys.exit(f"{argv} failed ({status}):\n{out.decode(errors='replace')[-3000:]}")
    return wall, ru.ru_utime + ru.ru_stime


def fresh(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def py_floor(code, *args):
    return spawn([sys.executable, "-c", code, *map(str, args)])


# ---- floors (Python loops doing the same file operations) ----
ATOMIC = r"""
import os, sys
def atomic(path, data):
    d = os.path.dirname(path)
    tmp = os.path.join(d, ".tmp-bench")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, data); os.fsync(fd); os.close(fd)
    os.rename(tmp, path)
def dirsync(d):
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY); os.fsync(dfd); os.close(dfd)
"""
FLOOR_WRITE = ATOMIC + r"""
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d + "/d", exist_ok=True)
for i in range(n):
    p = f"{d}/d/f{i}"
    try:
        if open(p, "rb").read() == b"x\n": continue
    except FileNotFoundError:
        pass
    atomic(p, b"x\n")
dirsync(d + "/d")
"""
FLOOR_LINE_PLAN = r"""
import sys
n = int(sys.argv[2]); lines = []; seen = set()
for i in range(n):
    l = f"line {i}"
    if l not in seen: seen.add(l); lines.append(l)
"""
FLOOR_LINE_APPLY = ATOMIC + r"""
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d + "/etc", exist_ok=True)
lines = []; seen = set()
for i in range(n):
    l = f"line {i}"
    if l in seen: continue
    seen.add(l); lines.append(l)
    atomic(d + "/etc/f", ("\n".join(lines) + "\n").encode())
dirsync(d + "/etc")
"""
FLOOR_LINE_AGAIN = r"""
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
seen = set(open(d + "/etc/f").read().splitlines())
for i in range(n):
    os.stat(d + "/etc/f")
    assert f"line {i}" in seen
"""


def rhai(path, body):
    with open(path, "w") as f:
        f.write(body)
    return path


def run_script(b, script, root, apply):
    argv = [os.path.join(b, "skyhook-run"), script, "--root", root] + (["--apply"] if apply else [])
    return spawn(argv)


# ---- the bench root for steps (as agent_overhead.sh) ----
def step_root(n):
    import json
    root = fresh(os.path.join(WORK, f"steps-{n}", "root"))
    os.makedirs(root + "/bin")
    for b in ["sh", "true"]:
        shutil.copy(f"/bin/{b}", f"{root}/bin/{b}")
        for lib in subprocess.run(["ldd", f"/bin/{b}"], capture_output=True,
                                  text=True).stdout.split():
            if lib.startswith("/") and not os.path.exists(root + lib):
                os.makedirs(os.path.dirname(root + lib), exist_ok=True)
                shutil.copy(lib, root + lib)

    def step(name, path, args):
        return {"name": name, "path": path, "arguments": args, "returncodes": [0],
                "on_host": True, "idempotence": False, "upgrade_step": False}

    for pkg, name, path in [("pkg", "bench", "t.sh"), ("pkg-rhai", "benchrhai", "t.rhai")]:
        d = os.path.join(root, pkg, "skyhook_dir")
        os.makedirs(d)
        for fname, content in [("t.sh", "#!/bin/sh\nexit 0\n"), ("t.rhai", "let x = 1;\n")]:
            with open(os.path.join(d, fname), "w") as f:
                f.write(content)
            os.chmod(os.path.join(d, fname), 0o755)
        config = {"schema_version": "v1", "root_dir": "/", "expected_config_files": [],
                  "package_name": name, "package_version": "1.0.0",
                  "modes": {"apply": [step(f"s{i}", path, [str(i)]) for i in range(n)],
                            "apply-check": [step("check", "t.sh", [])]}}
        with open(os.path.join(root, pkg, "config.json"), "w") as f:
            json.dump(config, f)
    return root




def spawn_loop():
    src = os.path.join(HERE, "spawn_loop.c")
    exe = os.path.join(WORK, "spawn_loop")
    subprocess.run(["cc", "-O2", "-o", exe, src], check=True)
    return exe


AGENT_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "SKYHOOK_ROOT_DIR": "/state", "SKYHOOK_LOG_DIR": "/log",
             "SKYHOOK_RESOURCE_ID": "bench-0-1_bench_1.0.0", "COPY_RESOLV": "false",
             "OVERLAY_ALWAYS_RUN_STEP": "true"}


def agent(b, root, pkg, always=True):
    env = dict(AGENT_ENV, OVERLAY_ALWAYS_RUN_STEP="true" if always else "false")
    return spawn([os.path.join(b, "skyhook-agent"), "apply", root, pkg], env)


def main():
    binaries = bins()
    os.makedirs(WORK, exist_ok=True)
    loop = spawn_loop() if ROOT_USER and shutil.which("cc") else None
    # results[(row, label, n)] = [(wall, cpu), ...]
    res = {}

    def add(row, label, n, v):
        res.setdefault((row, label, n), []).append(v)

    rows = []
    for n in SIZES:
        wr = os.path.join(WORK, "write.rhai")
        rhai(wr, f'for i in 0..{n} {{ fs::write(`/d/f${{i}}`, "x\\n"); }}\n')
        lr = os.path.join(WORK, "line.rhai")
        rhai(lr, f'for i in 0..{n} {{ fs::ensure_line("/etc/f", `line ${{i}}`); }}\n')
        steps = ROOT_USER and n <= 1000
        roots = {}
        if steps and not {"bash", "rhai"} <= SKIP:
            for label, b in binaries:
                r = step_root(n) if label == binaries[0][0] else roots[binaries[0][0]]
                roots[label] = r
            # warm-up: flags, log directories at their steady size
            for label, b in binaries:
                for _ in range(2):
                    agent(b, roots[label], "/pkg")
                    agent(b, roots[label], "/pkg-rhai")
        for rep in range(REPS):
            order = binaries if rep % 2 == 0 else binaries[::-1]
            if "write" not in SKIP:
                add("fs::write N files", "floor", n,
                    py_floor(FLOOR_WRITE, fresh(os.path.join(WORK, "fw")), n))
                for label, b in order:
                    add("fs::write N files", label, n,
                        run_script(b, wr, fresh(os.path.join(WORK, "w")), True))
            if "line" not in SKIP:
                add("ensure_line N, plan", "floor", n, py_floor(FLOOR_LINE_PLAN, "-", n))
                d = fresh(os.path.join(WORK, "fl"))
                add("ensure_line N, apply", "floor", n, py_floor(FLOOR_LINE_APPLY, d, n))
                add("ensure_line N, second apply", "floor", n, py_floor(FLOOR_LINE_AGAIN, d, n))
                for label, b in order:
                    r = fresh(os.path.join(WORK, "l"))
                    add("ensure_line N, plan", label, n, run_script(b, lr, r, False))
                    add("ensure_line N, apply", label, n, run_script(b, lr, r, True))
                    add("ensure_line N, second apply", label, n, run_script(b, lr, r, True))
            if steps and "bash" not in SKIP:
                if loop:
                    add("agent: N bash steps", "floor", n,
                        spawn([loop, roots[binaries[0][0]], "/pkg/skyhook_dir/t.sh", str(n)]))
                for label, b in order:
                    add("agent: N bash steps", label, n, agent(b, roots[label], "/pkg"))
            if steps and "rhai" not in SKIP:
                for label, b in order:
                    add("agent: N Rhai steps", "floor " + label, n,
                        agent(b, roots[label], "/pkg-rhai", always=False))
                    add("agent: N Rhai steps", label, n, agent(b, roots[label], "/pkg-rhai"))
            print(f"N={n} rep {rep + 1}/{REPS} done", file=sys.stderr, flush=True)
        for key in res:
            if key[0] not in rows:
                rows.append(key[0])

    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
           for k, v in res.items()}
    print(f"# scale.py: SIZES={','.join(map(str, SIZES))} REPS={REPS} WORK={WORK}")
    print("# cells: median wall ms / median CPU ms; exp = growth exponent of wall (CPU) "
          "from the previous size")
    for row in rows:
        labels = []
        for (r, label, _n) in res:
            if r == row and label not in labels:
                labels.append(label)
        print(f"\n## {row}")
        print("| N | " + " | ".join(labels) + " |")
        print("|---|" + "---|" * len(labels))
        for i, n in enumerate(SIZES):
            cells = []
            for label in labels:
                m = med.get((row, label, n))
                if not m:
                    cells.append("")
                    continue
                cell = f"{m[0] * 1e3:.1f} / {m[1] * 1e3:.1f}"
                p = med.get((row, label, SIZES[i - 1])) if i else None
                if p and p[0] > 0 and p[1] > 0 and m[1] > 0:
                    k = math.log(n / SIZES[i - 1])
                    cell += (f" (exp {math.log(m[0] / p[0]) / k:.2f} "
                             f"({math.log(m[1] / p[1]) / k:.2f}))")
                cells.append(cell)
            print(f"| {n} | " + " | ".join(cells) + " |")
        if row.startswith("agent"):
            print("\nper step over the floor, ms wall / CPU (ratio to the previous size):")
            for label, _ in binaries:
                floor = "floor" if "bash" in row else "floor " + label
                prev = None
                parts = []
                for n in SIZES:
                    m, f = med.get((row, label, n)), med.get((row, floor, n))
                    if not m or not f:
                        continue
                    ps = ((m[0] - f[0]) / n * 1e3, (m[1] - f[1]) / n * 1e3)
                    s = f"N={n}: {ps[0]:.3f} / {ps[1]:.3f}"
                    if prev and prev[0] > 0 and prev[1] > 0:
                        s += f" ({ps[0] / prev[0]:.2f}x / {ps[1] / prev[1]:.2f}x)"
                    parts.append(s)
                    prev = ps
                print(f"- {label}: " + "; ".join(parts))


if __name__ == "__main__":
    main()
