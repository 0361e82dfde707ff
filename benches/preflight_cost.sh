#!/bin/bash
# preflight_cost.sh [N] — what the preflight (validate, then plan) of a mode costs, against one
# dry run and against the apply, for examples/tuning in mode config (the closest example to a
# real tuning package: sysctl live values and sysctl.d, limits.d and PAM, containerd drop-in,
# grub cmdline), as same-run ratios.
#
# Each of N rounds (default 10) on fresh throwaway roots (scripts/make-host-root.sh: recording
# stubs for systemctl, sysctl, ...; plus one for update-grub and the four /proc/sys keys):
#   dry   wall time of `skyhook-run --package examples/tuning --mode config --root R`
#   run   wall time of `skyhook-run ... --apply` (the agent flow, preflight included), with
#         the preflight's own time from its log line (SKYHOOK_LOG=info: "preflight of the
#         package directory total_us", which includes loading and compiling DIR)
#   agent wall time of `skyhook-agent config R COPY_DIR` and its "preflight ... total_us"
#         (the agent reuses the scripts it compiled anyway)
# and prints the medians and the ratios preflight/dry and preflight/(apply without it).
#
# Commands are stubs, so the apply here is a lower bound of a node's (real systemctl
# daemon-reload, restarts and update-grub take longer): the ratio to the apply is an upper
# bound. Use release binaries: cargo build --release --bins; as root (the agent chroots).
set -euo pipefail

N=${1:-10}
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release}
W=$(mktemp -d /tmp/preflight-cost.XXXXXX)
trap 'rm -rf "$W"' EXIT
export PATH=/usr/local/bin:/usr/bin:/bin COPY_RESOLV=false

fresh_root() {
    rm -rf "$W/root"
    local r
    r=$(scripts/make-host-root.sh "$W/root")
    for k in net/core/rmem_max net/core/wmem_max fs/inotify/max_user_instances vm/max_map_count; do
        mkdir -p "$r/proc/sys/$(dirname "$k")"
        echo 100 > "$r/proc/sys/$k"
    done
    mkdir -p "$r/etc/default/grub.d"
    sed 's/systemctl/update-grub/' "$r/usr/local/bin/systemctl" > "$r/usr/local/bin/update-grub"
    chmod 755 "$r/usr/local/bin/update-grub"
    echo "$r"
}

now_us() { echo $(( $(date +%s%N) / 1000 )); }
us_of() { sed -n "s/.*$1.*total_us=\([0-9]*\).*/\1/p" "$2" | head -1; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

: > "$W/dry"; : > "$W/run"; : > "$W/run_pf"; : > "$W/agent"; : > "$W/agent_pf"
for _ in $(seq "$N"); do
    R=$(fresh_root)
    t0=$(now_us)
    "$BIN/skyhook-run" --package examples/tuning --mode config --root "$R" > /dev/null
    t1=$(now_us)
    echo $((t1 - t0)) >> "$W/dry"

    t0=$(now_us)
    SKYHOOK_LOG=skyhook=info "$BIN/skyhook-run" --package examples/tuning --mode config \
        --apply --root "$R" > /dev/null 2> "$W/log"
    t1=$(now_us)
    echo $((t1 - t0)) >> "$W/run"
    us_of "preflight of the package directory" "$W/log" >> "$W/run_pf"

    R=$(fresh_root)
    mkdir -p "$R/var/lib/skyhook/tuning"
    cp -r examples/tuning/. "$R/var/lib/skyhook/tuning"
    t0=$(now_us)
    SKYHOOK_LOG=skyhook=info SKYHOOK_RESOURCE_ID=bench-1_tuning_2.0.0 \
        "$BIN/skyhook-agent" config "$R" /var/lib/skyhook/tuning > /dev/null 2> "$W/log"
    t1=$(now_us)
    echo $((t1 - t0)) >> "$W/agent"
    us_of "preflight mode" "$W/log" >> "$W/agent_pf"
done

dry=$(median < "$W/dry"); run=$(median < "$W/run"); run_pf=$(median < "$W/run_pf")
agent=$(median < "$W/agent"); agent_pf=$(median < "$W/agent_pf")
echo "rounds: $N (medians, microseconds)"
echo "dry run (skyhook-run --package, whole process): $dry"
echo "skyhook-run --apply: $run, of which preflight $run_pf"
echo "skyhook-agent config: $agent, of which preflight $agent_pf"
awk -v d="$dry" -v r="$run" -v p="$run_pf" -v a="$agent" -v q="$agent_pf" 'BEGIN {
    printf "skyhook-run preflight / dry run: %.2f; / (apply without it): %.1f %%\n", p / d, 100 * p / (r - p)
    printf "agent preflight / dry run: %.2f; / (apply without it): %.1f %%\n", q / d, 100 * q / (a - q)
}'
