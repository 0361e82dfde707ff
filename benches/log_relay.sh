#!/usr/bin/env bash
# Log relay throughput and memory benchmark (architecture.md "Performance targets").
#
# Usage: [RUNS=3] benches/log_relay.sh [SIZE_BYTES (default 1 GiB)] [BUFFER_LIMIT (default 8192)]
#
# Builds the driver `examples/log_relay.rs` (release) and compares:
#   baseline: sh -c "yes <79 x> | head -c SIZE" | cat > FILE
#   relay:    the same generator run by skyhook::step::ProcessRunner, stdout relayed with
#             [out]<timestamp> prefixes to this script's stdout (/dev/null) and to a .log
#             file on disk (under target/, not /tmp, which may be tmpfs)
# and prints both times, the relay/cat throughput ratio (target >= 0.5) and the driver's
# peak RSS (target < 20 MiB), from /usr/bin/time -v or else the driver's own
# /proc/self/status VmHWM read just before it exits.
set -euo pipefail

SIZE=${1:-1073741824}
LIMIT=${2:-8192}
cd "$(dirname "$0")/.."
cargo build --quiet --release --example log_relay
BIN=target/release/examples/log_relay
WORK=target/log_relay_bench
rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT
LINE=$(printf '%079d' 0 | tr 0 x)

RUNS=${RUNS:-3}

now() { date +%s.%N; }
calc() { awk "BEGIN { print $1 }"; }
min() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 < b + 0) ? a : b }'; }

# Alternate the two measurements RUNS times and keep the best of each: the machine is
# shared, so single runs are noisy.
cat_s=1000000
relay_s=1000000
rss_kb=0
for _ in $(seq "$RUNS"); do
    t0=$(now)
    sh -c "yes $LINE | head -c $SIZE" | cat > "$WORK/cat.out"
    t1=$(now)
    cat_s=$(min "$cat_s" "$(calc "$t1 - $t0")")
    rm -f "$WORK/cat.out"

    rm -rf "$WORK/root"
    if [ -x /usr/bin/time ]; then
        t0=$(now)
        /usr/bin/time -v "$BIN" "$SIZE" "$WORK/root" "$LIMIT" > /dev/null 2> "$WORK/time.txt"
        t1=$(now)
        rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$WORK/time.txt")
        driver=$(grep '^elapsed_s=' "$WORK/time.txt")
    else
        t0=$(now)
        "$BIN" "$SIZE" "$WORK/root" "$LIMIT" > /dev/null 2> "$WORK/driver.txt"
        t1=$(now)
        driver=$(grep '^elapsed_s=' "$WORK/driver.txt")
        rss=${driver##*vmhwm_kb=}
    fi
    relay_s=$(min "$relay_s" "$(calc "$t1 - $t0")")
    [ "$rss" -gt "$rss_kb" ] && rss_kb=$rss
done
rm -rf "$WORK/root"

printf 'size:            %d bytes (80-byte lines), buffer limit %d, best of %d runs\n' "$SIZE" "$LIMIT" "$RUNS"
printf 'cat > file:      %.3f s (%.0f MiB/s)\n' "$cat_s" "$(calc "$SIZE / 1048576 / $cat_s")"
printf 'relay:           %.3f s (%.0f MiB/s) [last driver run: %s]\n' "$relay_s" "$(calc "$SIZE / 1048576 / $relay_s")" "$driver"
printf 'ratio relay/cat: %.2f (throughput; target >= 0.5)\n' "$(calc "$cat_s / $relay_s")"
printf 'peak RSS:        %d KiB, max over runs (target < 20480)\n' "$rss_kb"
