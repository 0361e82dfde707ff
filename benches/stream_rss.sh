#!/usr/bin/env bash
# Peak RSS of fs::copy_tree and fs::extract with big files, before (main's skyhook-run) and
# after (this checkout's), in the same run, alternating: a tree holding one sparse file of
# COPY_MIB (read through: its copy is written whole) and one of 60 MiB (under the 64 MiB
# whole-read limit main has, so both builds copy it), and a tar.gz whose one entry is
# EXTRACT_MIB of zeros. Each run applies into a fresh destination of a fresh root.
#
# Usage (as root):
#   cargo build --bin skyhook-run          # in this checkout (AFTER)
#   BEFORE=/work/main/target/debug/skyhook-run [RUNS=3] [COPY_MIB=512] [EXTRACT_MIB=256] \
#     bash benches/stream_rss.sh
# Prints one line per build and case: the median of RUNS peak RSS in MiB
# (/usr/bin/time -v, "Maximum resident set size") and the exit status of the last run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "stream_rss.sh: needs root" >&2; exit 1; }
BEFORE=${BEFORE:?set BEFORE to the skyhook-run of main}
AFTER=${AFTER:-$PWD/target/debug/skyhook-run}
RUNS=${RUNS:-3} COPY_MIB=${COPY_MIB:-512} EXTRACT_MIB=${EXTRACT_MIB:-256}
for b in "$BEFORE" "$AFTER"; do
    [ -x "$b" ] || { echo "stream_rss.sh: $b is not an executable" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/skyhook-stream-rss.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
SRC=$WORK/src
mkdir -p "$SRC/big/d" "$SRC/small/d" "$SRC/archive"
truncate -s "${COPY_MIB}M" "$SRC/big/d/huge"
echo small >"$SRC/big/small"
head -c 60M /dev/urandom >"$SRC/small/d/sixty"
head -c "${EXTRACT_MIB}M" /dev/zero >"$WORK/entry"
tar -C "$WORK" -czf "$SRC/archive/a.tar.gz" entry
rm "$WORK/entry"
printf 'fs::copy_tree("/src/big", "/dst");\n' >"$WORK/copy_big.rhai"
printf 'fs::copy_tree("/src/small", "/dst");\n' >"$WORK/copy_60.rhai"
printf 'fs::extract("/src/archive/a.tar.gz", "/dst");\n' >"$WORK/extract.rhai"

# Peak RSS in KiB and exit status of one apply of script $2 by build $1 on a fresh root.
one() {
    local root=$WORK/root
    rm -rf "$root"
    mkdir -p "$root/src" "$root/var/lib/skyhook"
    cp -a "$SRC/." "$root/src/"
    local status=0
    /usr/bin/time -v -o "$WORK/time" "$1" "$2" --root "$root" --apply \
        >"$WORK/out" 2>&1 || status=$?
    echo "$(awk -F': ' '/Maximum resident set size/ {print $2}' "$WORK/time") $status"
}

for case in copy_60 copy_big extract; do
    for name in before after; do : >"$WORK/$name.$case"; done
    for _ in $(seq "$RUNS"); do
        for name in before after; do
            bin=$BEFORE
            [ "$name" = after ] && bin=$AFTER
            one "$bin" "$WORK/$case.rhai" >>"$WORK/$name.$case"
        done
    done
    for name in before after; do
        med=$(awk '{print $1}' "$WORK/$name.$case" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
        last=$(tail -1 "$WORK/$name.$case" | awk '{print $2}')
        label=$case
        [ "$case" = copy_big ] && label="copy_${COPY_MIB}MiB"
        [ "$case" = extract ] && label="extract_${EXTRACT_MIB}MiB_entry"
        printf '%-24s %-6s peak RSS %6d MiB  exit %s\n' "$label" "$name" $((med / 1024)) "$last"
    done
done
