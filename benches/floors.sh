#!/usr/bin/env bash
# floors.sh — issue 31's table in one run: each figure of the agent beside its floor, measured
# alternately in the same run on the same disk (docs/benchmarks.md, "The table").
#
# Usage (as root: steps are chrooted):
#   sudo bash benches/floors.sh                          # builds the release agent first
#   sudo BIN=path/to/dir bash benches/floors.sh          # skyhook-agent and skyhook-run from DIR
#   REPS=5 STEPS=100 FILES=20000 STARTS=10 BENCH_WORK=$PWD/target/floors NICE=19   # the defaults
#   RHAI_SIZES="100 1000"   # the .rhai rows; "100 1000 10000" adds the flatness reading
#
# Rows (medians over REPS; agent and floor alternate within each rep; wall times from bash's
# $EPOCHREALTIME around each command, so both sides pay the same fork + exec of the wrapper):
#   rhai step, 100 / 1,000   `skyhook-agent apply ROOT /pkg-rhai-N`: N steps `t.rhai I` ("let
#                            x = 1;"), logs on, OVERLAY_ALWAYS_RUN_STEP=true, state and logs kept
#                            from a warm-up (as on a node); wall / N. Floor: benches/step_floor.c
#                            `rhai`: per step two new log files (retention: 5 per path) and one
#                            durable flag (temp, write, fsync, rename, fsync dir); wall / N.
#   start-up, net            `skyhook-agent apply ROOT /pkg-skip` (one bash step, skipped: its
#                            flag exists) minus a spawn of /bin/true. Floor: benches/startup_floor.c
#                            (read config.json, stat the flag, write START durably, print the skip
#                            line) minus the same /bin/true. Each is run STARTS times in a row
#                            per rep (bash's `times` has a 1 ms resolution).
#   remove_all of FILES      `skyhook-run rm.rhai --root R --apply` (`fs::remove_all("/d")`, 20
#                            directories of FILES/20 empty files) minus the same run on a root
#                            without /d. Floor: `rm -rf` of a copy of the same tree, same disk.
#                            Both trees are written and synced before either is timed.
#   preflight of tuning      `skyhook-agent config` of examples/tuning on a fresh
#                            scripts/make-host-root.sh root: the "preflight" log line's total_us
#                            against the rest of the run (wall - preflight).
#   bash step, 100           `skyhook-agent apply ROOT /pkg-bash`: STEPS steps `t.sh I`; wall / N.
#                            Floor: step_floor `bash` (as `rhai`, plus fork, stdout/stderr on the
#                            logs, chroot, chdir, execv, waitpid).
#
# Everything runs under `nice -n $NICE` (default 19: a shared machine). Wall times on a loaded
# machine carry its noise: compare ratios of one run, not figures across runs.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-5}
STEPS=${STEPS:-100}
RHAI_SIZES=${RHAI_SIZES:-100 1000}
FILES=${FILES:-20000}
NICE=${NICE:-19}
STARTS=${STARTS:-10}

if [ "$(id -u)" != 0 ]; then
    echo "floors.sh: needs root (steps run in a chroot)" >&2
    exit 1
fi
if [ -z "${BIN:-}" ]; then
    nice -n "$NICE" cargo build --quiet --release --bins
    BIN=$PWD/target/release
fi
BIN=$(readlink -f "$BIN")
AGENT=$BIN/skyhook-agent
RUN=$BIN/skyhook-run

WORK=${BENCH_WORK:-$PWD/target/floors}
WORK=$(mkdir -p "$WORK" && cd "$WORK" && pwd -P)
rm -rf "${WORK:?}"/*
trap '[ -n "${KEEP:-}" ] || rm -rf "${WORK:?}"' EXIT
ROOT=$WORK/root
mkdir -p "$ROOT/bin"
for b in sh true; do
    cp -L "/bin/$b" "$ROOT/bin/$b"
    for lib in $(ldd "/bin/$b" | grep -o '/[^ ]*'); do
        mkdir -p "$ROOT$(dirname "$lib")"
        [ -e "$ROOT$lib" ] || cp -L "$lib" "$ROOT$lib"
    done
done

python3 - "$ROOT" "$STEPS" "$RHAI_SIZES" <<'PY'
import json, os, sys
root, n = sys.argv[1], int(sys.argv[2])
sh, rhai = "#!/bin/sh\nexit 0\n", "let x = 1;\n"

def step(name, path, args):
    return {"name": name, "path": path, "arguments": args, "returncodes": [0],
            "on_host": True, "idempotence": False, "upgrade_step": False}

def package(copy_dir, name, steps):
    d = os.path.join(root, copy_dir, "skyhook_dir")
    os.makedirs(d)
    for f, c in [("t.sh", sh), ("t.rhai", rhai)]:
        with open(os.path.join(d, f), "w") as out:
            out.write(c)
        os.chmod(os.path.join(d, f), 0o755)
    config = {"schema_version": "v1", "root_dir": "/", "expected_config_files": [],
              "package_name": name, "package_version": "1.0.0",
              "modes": {"apply": steps, "apply-check": [step("check", "t.sh", [])]}}
    with open(os.path.join(root, copy_dir, "config.json"), "w") as out:
        json.dump(config, out)

for k in map(int, sys.argv[3].split()):
    package(f"pkg-rhai-{k}", f"rhai{k}", [step(f"s{i}", "t.rhai", [str(i)]) for i in range(k)])
package("pkg-bash", "bash", [step(f"s{i}", "t.sh", [str(i)]) for i in range(n)])
package("pkg-skip", "skip", [step("skip", "t.sh", ["skip"])])
PY

cc -O2 -o "$WORK/step_floor" benches/step_floor.c
cc -O2 -o "$WORK/startup_floor" benches/startup_floor.c

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export SKYHOOK_ROOT_DIR=/state SKYHOOK_LOG_DIR=/log COPY_RESOLV=false
export SKYHOOK_RESOURCE_ID=bench-0-1_bench_1.0.0 OVERLAY_ALWAYS_RUN_STEP=true

# children_us: set CHILD_US to the user + sys CPU µs of every child waited for so far (bash's
# `times`, run in this shell: a command substitution would report its own subshell's children).
children_us() {
    { times; } > "$WORK/times"
    CHILD_US=$(tail -1 "$WORK/times" | awk '{
        t = 0
        for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); t += p[1] * 60 + p[2] }
        printf "%d\n", t * 1e6 }')
}

# timed NAME CMD...: run CMD under nice, output to $WORK/out; append its wall µs to
# $WORK/t.NAME and its CPU µs (user + sys of it and its children) to $WORK/c.NAME.
timed() {
    local name=$1 t0 t1 c0 c1
    shift
    children_us
    c0=$CHILD_US
    t0=${EPOCHREALTIME/./}
    if ! nice -n "$NICE" "$@" > "$WORK/out" 2>&1; then
        echo "floors.sh: $* failed:" >&2
        tail -20 "$WORK/out" >&2
        exit 1
    fi
    t1=${EPOCHREALTIME/./}
    children_us
    c1=$CHILD_US
    echo $((t1 - t0)) >> "$WORK/t.$name"
    echo $((c1 - c0)) >> "$WORK/c.$name"
}
# median NAME [c]: the median wall (or, with c, CPU) µs of NAME.
median() { sort -n "$WORK/${2:-t}.$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# The step floors' log and flag directories, fresh for each run (not timed).
floor_dirs() {
    rm -rf "$WORK/floor"
    mkdir -p "$WORK/floor/log" "$WORK/floor/flags"
}

# Warm-up: flags, log directories at their steady size (retention), START.
for p in $(printf "pkg-rhai-%s " $RHAI_SIZES) pkg-bash pkg-skip; do
    nice -n "$NICE" "$AGENT" apply "$ROOT" "/$p" > /dev/null 2>&1
done

# remove_all trees: a template of FILES empty files in 20 directories, copied per rep.
mkdir -p "$WORK/tree/d"
for i in $(seq 0 19); do
    mkdir "$WORK/tree/d/$i"
    (cd "$WORK/tree/d/$i" && seq -f "f%.0f" 0 $((FILES / 20 - 1)) | xargs touch)
done
echo 'fs::remove_all("/d");' > "$WORK/rm.rhai"
mkdir -p "$WORK/rm-empty"

LOOP='for _ in $(seq '"$STARTS"'); do "$@" > /dev/null || exit 1; done'
SKIP_FLAG=$ROOT/state/flags/skip/1.0.0
SKIP_FLAG=$(ls "$SKIP_FLAG"/t.sh_* | head -1)

for rep in $(seq "$REPS"); do
    echo "floors.sh: rep $rep of $REPS" >&2
    for k in $RHAI_SIZES; do
        timed "rhai$k" "$AGENT" apply "$ROOT" "/pkg-rhai-$k"
        floor_dirs
        timed "rhai${k}_floor" "$WORK/step_floor" rhai "$WORK/floor/log" "$WORK/floor/flags" "$k"
    done

    # Start-ups are short against the 1 ms resolution of `times`: each is timed STARTS times
    # in a row from one shell, and so is the /bin/true they are net of.
    timed true bash -c "$LOOP" - /bin/true
    OVERLAY_ALWAYS_RUN_STEP=false timed startup bash -c "$LOOP" - "$AGENT" apply "$ROOT" /pkg-skip
    timed startup_floor bash -c "$LOOP" - "$WORK/startup_floor" "$ROOT/pkg-skip/config.json" \
        "$SKIP_FLAG" "$ROOT/state/flags"

    rm -rf "$WORK/rm-agent" "$WORK/rm-floor"
    cp -a "$WORK/tree" "$WORK/rm-agent"
    cp -a "$WORK/tree" "$WORK/rm-floor"
    sync
    timed rm_noop "$RUN" "$WORK/rm.rhai" --root "$WORK/rm-empty" --apply
    timed rm "$RUN" "$WORK/rm.rhai" --root "$WORK/rm-agent" --apply
    timed rm_floor rm -rf "$WORK/rm-floor/d"

    rm -rf "$WORK/tuning"
    R=$(scripts/make-host-root.sh "$WORK/tuning")
    for k in net/core/rmem_max net/core/wmem_max fs/inotify/max_user_instances vm/max_map_count; do
        mkdir -p "$R/proc/sys/$(dirname "$k")"
        echo 100 > "$R/proc/sys/$k"
    done
    mkdir -p "$R/etc/default/grub.d" "$R/var/lib/skyhook/tuning"
    sed 's/systemctl/update-grub/' "$R/usr/local/bin/systemctl" > "$R/usr/local/bin/update-grub"
    chmod 755 "$R/usr/local/bin/update-grub"
    cp -r examples/tuning/. "$R/var/lib/skyhook/tuning"
    SKYHOOK_LOG=skyhook=info SKYHOOK_RESOURCE_ID=bench-1_tuning_2.0.0 OVERLAY_ALWAYS_RUN_STEP=false \
        timed tuning "$AGENT" config "$R" /var/lib/skyhook/tuning
    sed -n 's/.*preflight.*total_us=\([0-9]*\).*/\1/p' "$WORK/out" | head -1 >> "$WORK/t.preflight"
    [ -s "$WORK/t.preflight" ] || { echo "floors.sh: no preflight log line" >&2; exit 1; }
    echo $(($(tail -1 "$WORK/t.tuning") - $(tail -1 "$WORK/t.preflight"))) >> "$WORK/t.tuning_rest"

    timed bash "$AGENT" apply "$ROOT" /pkg-bash
    floor_dirs
    timed bash_floor "$WORK/step_floor" bash "$WORK/floor/log" "$WORK/floor/flags" "$STEPS" \
        "$ROOT" /pkg-bash/skyhook_dir/t.sh
done

# The table: figure, agent and floor as median wall ms (median CPU ms), ratio of the walls
# (of the CPU times), target.
row() { # row TEXT AGENT_WALL AGENT_CPU FLOOR_WALL FLOOR_CPU DIVISOR UNIT TARGET  (µs in)
    awk -v t="$1" -v aw="$2" -v ac="$3" -v fw="$4" -v fc="$5" -v d="$6" -v u="$7" -v g="$8" 'BEGIN {
        s = (u == "s") ? 1e6 : 1e3
        printf "| %s | %.3g %s (%.3g) | %.3g %s (%.3g) | %.2f (%.2f) | %s |\n",
            t, aw / d / s, u, ac / d / s, fw / d / s, u, fc / d / s, aw / fw, (fc > 0 ? ac / fc : 0), g }' | sed 's/(0\.00) |/(-) |/'
}
{
    echo "| figure | agent: wall (CPU) | floor: wall (CPU) | ratio: wall (CPU) | target |"
    echo "|---|---|---|---|---|"
    for k in $RHAI_SIZES; do
        row "\`.rhai\` no-op step, $k steps (per step)" "$(median "rhai$k")" "$(median "rhai$k" c)" \
            "$(median "rhai${k}_floor")" "$(median "rhai${k}_floor" c)" "$k" ms "wall <= floor + 0.3 ms"
    done
    t=$(median true) tc=$(median true c)
    row "start-up, bash-only package, net of /bin/true" \
        $(($(median startup) - t)) $(($(median startup c) - tc)) \
        $(($(median startup_floor) - t)) $(($(median startup_floor c) - tc)) "$STARTS" ms "<= 5 ms"
    row "\`fs::remove_all\` of $FILES files, net of skyhook-run; floor \`rm -rf\`" \
        $(($(median rm) - $(median rm_noop))) $(($(median rm c) - $(median rm_noop c))) \
        "$(median rm_floor)" "$(median rm_floor c)" 1 s "<= 2x"
    awk -v p="$(median preflight)" -v r="$(median tuning_rest)" 'BEGIN {
        printf "| preflight of `config` of examples/tuning; floor: the rest of that run | %.3g ms | %.3g ms | %.1f %% | <= 10 %% |\n",
            p / 1000, r / 1000, 100 * p / r }'
    row "bash step, $STEPS steps (per step)" "$(median bash)" "$(median bash c)" \
        "$(median bash_floor)" "$(median bash_floor c)" "$STEPS" ms "at its floor"
}
echo "(medians of $REPS reps, wall time, nice -n $NICE, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), work dir $WORK on $(findmnt -no FSTYPE -T "$WORK" 2>/dev/null || stat -f -c %T "$WORK"))"
