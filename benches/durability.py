#!/usr/bin/env python3
"""Durability policies of a step's file writes, measured (issue 13; figures in docs/benchmarks.md).

    python3 benches/durability.py                 # BENCH_WORK=target/bench-durability (ext4 here)
    N=1000 REPS=5 BENCH_WORK=/var/tmp/d python3 benches/durability.py

Two write patterns of one step, each under five policies, median wall ms over REPS reps
(policies alternate within a rep), in a directory on the file system under test:

- `lines`: N whole-file rewrites of one file growing by one line each (N `fs::ensure_line`
  calls that each change the file), as an unbatched apply does;
- `files`: N distinct files written once each (N `fs::write`).

Policies:

- `fsync2`: the atomic write per change of the agent's own state (and of a session's
  writes before `fsync1`): temp file, write, fsync(temp), rename, fsync(dir);
- `fsync1`: a session's writes since issue 13's fourth round: temp, write, fsync(temp),
  rename per change (the data durable before the name points at it); one fsync of the
  directory at the step's end;
- `dirsync`: temp, write, rename per change; one fsync of the directory at the step's end
  (no file fsync: NOT crash-safe on its own, the data may not be on disk when the rename is);
- `syncfs`: temp, write, rename per change; one syncfs(2) of the file system at the step's end;
- `batched`: what batching the writes of one step would do: for `lines` the final content
  written once with `fsync2`; for `files` the N writes, then one syncfs, then N renames and
  one fsync per directory (every file's data durable before any rename).
"""
import ctypes
import os
import shutil
import statistics
import sys
import time

N = int(os.environ.get("N", "1000"))
REPS = int(os.environ.get("REPS", "5"))
HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.environ.get("BENCH_WORK", os.path.join(os.path.dirname(HERE), "target", "bench-durability"))
libc = ctypes.CDLL(None, use_errno=True)


def syncfs(d):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if libc.syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs")
    finally:
        os.close(fd)


def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def put(path, data, fsync_file):
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if fsync_file:
            os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


def lines(d, policy):
    path = os.path.join(d, "f")
    content = b""
    if policy == "batched":
        content = b"".join(b"line %d\n" % i for i in range(N))
        os.rename(put(path, content, True), path)
        fsync_dir(d)
        return
    for i in range(N):
        content += b"line %d\n" % i
        os.rename(put(path, content, policy in ("fsync2", "fsync1")), path)
        if policy == "fsync2":
            fsync_dir(d)
    end(d, policy)


def files(d, policy):
    if policy == "batched":
        tmps = [(put(os.path.join(d, f"f{i}"), b"x\n", False), os.path.join(d, f"f{i}")) for i in range(N)]
        syncfs(d)
        for tmp, path in tmps:
            os.rename(tmp, path)
        fsync_dir(d)
        return
    for i in range(N):
        path = os.path.join(d, f"f{i}")
        os.rename(put(path, b"x\n", policy in ("fsync2", "fsync1")), path)
        if policy == "fsync2":
            fsync_dir(d)
    end(d, policy)


def end(d, policy):
    if policy in ("dirsync", "fsync1"):
        fsync_dir(d)
    elif policy == "syncfs":
        syncfs(d)


def main():
    policies = ["fsync2", "fsync1", "dirsync", "syncfs", "batched"]
    print(f"N = {N}, REPS = {REPS}, in {WORK} ({fs_type(WORK)}); median wall ms")
    print(f"{'pattern':8} " + " ".join(f"{p:>10}" for p in policies))
    for name, fn in (("lines", lines), ("files", files)):
        t = {p: [] for p in policies}
        for _ in range(REPS):
            for p in policies:
                d = os.path.join(WORK, p)
                shutil.rmtree(d, ignore_errors=True)
                os.makedirs(d)
                syncfs(d)
                t0 = time.perf_counter()
                fn(d, p)
                t[p].append((time.perf_counter() - t0) * 1000)
        print(f"{name:8} " + " ".join(f"{statistics.median(t[p]):10.1f}" for p in policies))
    shutil.rmtree(WORK, ignore_errors=True)


def fs_type(path):
    os.makedirs(path, exist_ok=True)
    best = ("?", "")
    with open("/proc/mounts") as m:
        for line in m:
            dev, mnt, typ = line.split()[:3]
            if os.path.realpath(path).startswith(mnt) and len(mnt) >= len(best[1]):
                best = (f"{typ} on {dev}", mnt)
    return best[0]


if __name__ == "__main__":
    sys.exit(main())
