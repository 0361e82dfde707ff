#!/usr/bin/env bash
# Instruction counts (valgrind callgrind) of skyhook-agent builds on the same throwaway host
# root, for comparing builds on a shared, noisy machine: instruction counts repeat where wall
# time does not. Counts the agent process only (steps are children and are not traced).
#
# Usage (as root: steps are chrooted):
#   [STEPS=20] bash benches/callgrind_ab.sh base=/path/to/skyhook-agent new=/path/to/skyhook-agent
#
# Cases, each run once to warm (flags, logs) and then once under callgrind, per build, each
# build on its own copy of the same fresh root:
#   start    apply of a package whose one bash step is skipped (its flag exists): the fixed cost
#   bash     STEPS bash steps (t.sh: exit 0), OVERLAY_ALWAYS_RUN_STEP=true
#   rhai     STEPS .rhai steps (`let x = 1;`)
#   edit     STEPS .rhai steps, each fs::ensure_line on /etc/bench.conf (present after the first)
#   write    STEPS .rhai steps, each one file change every run: fs::write of a counter to
#            /etc/bench-<i>.conf (the cost of one change, its undo journal included)
#   write10  STEPS .rhai steps, each ten such changes (/etc/bench-<i>-<j>.conf): with write,
#            the cost of one more change in a step
# Prints per case and build the instructions (Ir), per step for the STEPS cases
# ((Ir - Ir(start)) / STEPS), and each build's ratio to the first build named.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-20}
[ "$(id -u)" = 0 ] || { echo "callgrind_ab.sh: needs root (steps run in a chroot)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "callgrind_ab.sh: needs valgrind" >&2; exit 1; }
[ $# -ge 1 ] || { echo "usage: callgrind_ab.sh name=AGENT [name=AGENT ...]" >&2; exit 2; }

WORK=$(mktemp -d /tmp/skyhook-callgrind.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ROOT=$(scripts/make-host-root.sh "$WORK/root")   # sh and its libraries, recording stubs

python3 - "$ROOT" "$STEPS" <<'PY'
import json, os, sys
root, n = sys.argv[1], int(sys.argv[2])
def step(name, path, args):
    return {"name": name, "path": path, "arguments": args, "returncodes": [0],
            "on_host": True, "idempotence": False, "upgrade_step": False}
def package(name, steps, files):
    d = os.path.join(root, name, "skyhook_dir")
    os.makedirs(d)
    for f, content in files.items():
        with open(os.path.join(d, f), "w") as fh:
            fh.write(content)
        os.chmod(os.path.join(d, f), 0o755)
    config = {"schema_version": "v1", "root_dir": "/", "expected_config_files": [],
              "package_name": name, "package_version": "1.0.0",
              "modes": {"apply": steps, "apply-check": [step("check", "t.sh", [])]}}
    with open(os.path.join(root, name, "config.json"), "w") as fh:
        json.dump(config, fh)
sh = "#!/bin/sh\nexit 0\n"
package("start", [step("skip", "t.sh", ["skip"])], {"t.sh": sh})
package("bash", [step(f"s{i}", "t.sh", [str(i)]) for i in range(n)], {"t.sh": sh})
package("rhai", [step(f"s{i}", "t.rhai", [str(i)]) for i in range(n)],
        {"t.sh": sh, "t.rhai": "let x = 1;\n"})
package("edit", [step(f"s{i}", "t.rhai", [str(i)]) for i in range(n)],
        {"t.sh": sh, "t.rhai": 'fs::ensure_line("/etc/bench.conf", "bench=1");\n'})
package("write", [step(f"s{i}", "t.rhai", [str(i)]) for i in range(n)],
        {"t.sh": sh, "t.rhai": 'let p = "/etc/bench-" + step.args[0] + ".conf";\n'
                              'let s = fs::read_or(p, "0"); s.trim();\n'
                              'fs::write(p, `${s.parse_int() + 1}\n`);\n'})
package("write10", [step(f"s{i}", "t.rhai", [str(i)]) for i in range(n)],
        {"t.sh": sh, "t.rhai": 'for j in 0..10 {\n'
                              'let p = "/etc/bench-" + step.args[0] + "-" + j + ".conf";\n'
                              'let s = fs::read_or(p, "0"); s.trim();\n'
                              'fs::write(p, `${s.parse_int() + 1}\n`);\n}\n'})
PY

run() {  # run AGENT PKG ALWAYS [valgrind...]
    local agent=$1 pkg=$2 always=$3; shift 3
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SKYHOOK_ROOT_DIR=/state SKYHOOK_LOG_DIR=/log \
        SKYHOOK_RESOURCE_ID=bench-0-1_bench_1.0.0 COPY_RESOLV=false \
        OVERLAY_ALWAYS_RUN_STEP=$always "$@" "$agent" apply "$ROOT" "/$pkg" \
        > "$WORK/out" 2>&1 || { cat "$WORK/out" >&2; echo "callgrind_ab.sh: $agent apply $pkg failed" >&2; exit 1; }
}
# Every build starts from the same root: the state, logs and history one build's runs leave
# (the agent reads them: flags, log retention) would otherwise make the later build look
# slower (1-4% on start and rhai).
cp -a "$ROOT" "$WORK/pristine"
declare -A ir
names=()
for spec in "$@"; do
    name=${spec%%=*}; agent=$(readlink -f "${spec#*=}"); names+=("$name")
    rm -rf "$ROOT" && cp -a "$WORK/pristine" "$ROOT"
    for pkg in start bash rhai edit write write10; do
        always=true; [ $pkg = start ] && always=false
        run "$agent" $pkg $always
        run "$agent" $pkg $always valgrind --tool=callgrind --callgrind-out-file=/dev/null \
            --trace-children=no
        ir[$name,$pkg]=$(grep -o 'Collected : [0-9]*' "$WORK/out" | grep -o '[0-9]*$')
    done
done
first=${names[0]}
printf '%-8s %-8s %15s %15s %8s\n' case build Ir Ir/step "/$first"
for pkg in start bash rhai edit write write10; do
    for name in "${names[@]}"; do
        total=${ir[$name,$pkg]}
        per=-; [ $pkg = start ] || per=$(( (total - ${ir[$name,start]}) / STEPS ))
        ratio=$(python3 -c "print(f'{$total / ${ir[$first,$pkg]}:.3f}')")
        printf '%-8s %-8s %15s %15s %8s\n' $pkg "$name" "$total" "$per" "$ratio"
    done
done
