#!/usr/bin/env python3
"""The undo journal's wall time per file change, of two builds on the same run (issue 28).

    python3 benches/journal_cost.py base=/work/main/target/debug/skyhook-run \\
        new=target/debug/skyhook-run                   # N=40 REPS=7 BENCH_WORK=target/bench-journal

Each build applies, with `skyhook-run --apply SCRIPT --root ROOT` (an apply keeps the undo
journal), on its own copy of the same fresh root in BENCH_WORK (the file system under test),
one `.rhai` script per case; runs alternate between the builds within a rep, median wall
ms over REPS reps:

- `none`:   a script that changes nothing (the fixed cost: start, preflight, session);
- `write`:  N `fs::write` of a new value to N existing files (each journaled: content copy,
            digest, record, fdatasync);
- `edit`:   N `fs::ensure_line` / `fs::remove_line` (alternating runs) on N files (line
            edits: the line batch, the journal's line record);
- `remove`: N `fs::remove` of 64 KiB files the harness puts back before each run (the
            journal copies each one on the base, moves it aside on the new).

Per change: (median(case) - median(none)) / N. Prints each case's per-change ms per build
and new/base; the mean of the three ratios is the journal's cost ratio.
"""
import os
import shutil
import statistics
import subprocess
import sys
import time

N = int(os.environ.get("N", "40"))
REPS = int(os.environ.get("REPS", "7"))
HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.environ.get("BENCH_WORK", os.path.join(os.path.dirname(HERE), "target", "bench-journal"))

SCRIPTS = {
    "none": "let x = 1;\n",
    "write": "let s = fs::read(\"/etc/bench/counter\");\ns.trim();\nlet c = parse_int(s) + 1;\n"
    "fs::write(\"/etc/bench/counter\", `${c}`);\n"
    f"for i in 0..{N - 1} {{ fs::write(`/etc/bench/w-${{i}}.conf`, `v=${{c}}\\n`); }}\n",
    "edit": "let on = !fs::exists(\"/etc/bench/on\");\n"
    "if on { fs::write(\"/etc/bench/on\", \"\"); } else { fs::remove(\"/etc/bench/on\"); }\n"
    f"for i in 0..{N - 1} {{\n"
    "  if on { fs::ensure_line(`/etc/bench/e-${i}.conf`, \"added=1\"); }\n"
    "  else { fs::remove_line(`/etc/bench/e-${i}.conf`, \"added=1\"); }\n"
    "}\n",
    "remove": f"for i in 0..{N} {{ fs::remove(`/var/bench/r-${{i}}.bin`); }}\n",
}


def fresh_root(path):
    shutil.rmtree(path, ignore_errors=True)
    for d in ["etc/bench", "var/bench", "var/lib/skyhook", "tmp"]:
        os.makedirs(os.path.join(path, d), exist_ok=True)
    with open(os.path.join(path, "etc/bench/counter"), "w") as f:
        f.write("0\n")
    for i in range(N):
        with open(os.path.join(path, f"etc/bench/w-{i}.conf"), "w") as f:
            f.write("v=0\n")
        with open(os.path.join(path, f"etc/bench/e-{i}.conf"), "w") as f:
            f.write("a=1\nb=2\n")


def put_back_removed(root):
    block = bytes(range(256)) * 256
    for i in range(N):
        p = os.path.join(root, f"var/bench/r-{i}.bin")
        if not os.path.exists(p):
            with open(p, "wb") as f:
                f.write(block)


def run(binary, root, script):
    if script.endswith("remove.rhai"):
        put_back_removed(root)
        os.sync()
    t = time.perf_counter()
    p = subprocess.run([binary, script, "--root", root, "--apply"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = (time.perf_counter() - t) * 1000
    if p.returncode != 0:
        sys.exit(f"{binary} {script}: exit {p.returncode}: {p.stderr.decode()[-2000:]}")
    return dt


def main():
    builds = [a.split("=", 1) for a in sys.argv[1:]]
    if len(builds) < 2:
        sys.exit(__doc__)
    os.makedirs(WORK, exist_ok=True)
    scripts = {}
    for name, src in SCRIPTS.items():
        p = os.path.join(WORK, f"{name}.rhai")
        with open(p, "w") as f:
            f.write(src)
        scripts[name] = p
    roots = {}
    for name, _ in builds:
        roots[name] = os.path.join(WORK, f"root-{name}")
        fresh_root(roots[name])
    times = {(b, c): [] for b, _ in builds for c in SCRIPTS}
    for _ in range(REPS):
        for case in SCRIPTS:
            for name, binary in builds:
                times[(name, case)].append(run(binary, roots[name], scripts[case]))
    base = builds[0][0]
    per = {}
    for name, _ in builds:
        fixed = statistics.median(times[(name, "none")])
        for case in SCRIPTS:
            if case == "none":
                continue
            per[(name, case)] = (statistics.median(times[(name, case)]) - fixed) / N
    print(f"N={N} REPS={REPS} work={WORK}")
    for name, _ in builds:
        print(f"{name}: fixed {statistics.median(times[(name, 'none')]):.1f} ms/run")
    ratios = []
    for case in ["write", "edit", "remove"]:
        cells = " ".join(f"{name}={per[(name, case)]:.3f}" for name, _ in builds)
        r = [per[(name, case)] / per[(base, case)] for name, _ in builds[1:]]
        ratios.extend(r)
        print(f"{case}: ms/change {cells} ratio {' '.join(f'{x:.3f}' for x in r)}")
    print(f"mean ratio {statistics.mean(ratios):.3f}")


if __name__ == "__main__":
    main()
