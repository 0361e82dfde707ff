#!/usr/bin/env bash
# Run the agent on a bundled example package against a throwaway host root (no cluster).
#
#   bash scripts/demo.sh [EXAMPLE] [WORKDIR]
#
# EXAMPLE defaults to examples/hello; WORKDIR to /tmp/skyhook-demo (wiped first). Steps:
#  1. build the binaries (debug profile);
#  2. make a throwaway host root at WORKDIR/root (scripts/make-host-root.sh);
#  3. install the package into the copy dir as the operator's init container does
#     (`mkdir -p /root/$SKYHOOK_DIR && cp -r /skyhook-package/* /root/$SKYHOOK_DIR`), with the
#     package's configmaps/ laid out as a Kubernetes configMap volume (..data symlinks);
#  4. run `skyhook-agent apply` then `apply-check` with the operator's environment;
#  5. print the resulting state: flags, history, logs and the host files the package wrote;
#  6. plan examples/motd.rhai against the same root with skyhook-run (a dry run: diffs, nothing
#     changes), apply it, and plan again (`Plan: 0 to change`).
# Needs root (steps run chrooted into the host root).
set -euo pipefail
cd "$(dirname "$0")/.."
example=${1:-examples/hello}
work=${2:-/tmp/skyhook-demo}
cargo build --quiet --bins
agent=$PWD/target/debug/skyhook-agent
run=$PWD/target/debug/skyhook-run

rm -rf "$work"
root=$(bash scripts/make-host-root.sh "$work/root" | tail -n 1)
pkg=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["package_name"]+"-"+c["package_version"])' "$example/config.json")
copy_dir=/var/lib/skyhook/demo/$pkg-0000-1

# The package image's /skyhook-package, with a configMap volume mounted at configmaps/.
stage=$work/skyhook-package
mkdir -p "$stage"
for f in "$example"/*; do
  [ "$(basename "$f")" = configmaps ] || cp -r "$f" "$stage/"
done
if [ -d "$example/configmaps" ]; then
  ts=..2026_11_30_00_00_00.000000001
  mkdir -p "$stage/configmaps/$ts"
  cp "$example"/configmaps/* "$stage/configmaps/$ts/"
  ln -s "$ts" "$stage/configmaps/..data"
  for f in "$stage/configmaps/$ts"/*; do ln -s "..data/$(basename "$f")" "$stage/configmaps/$(basename "$f")"; done
fi
mkdir -p "$root$copy_dir" && cp -r "$stage"/* "$root$copy_dir"

export SKYHOOK_RESOURCE_ID=demo-0000-1_${pkg%-*}_${pkg##*-}
export SKYHOOK_ROOT_DIR=/var/lib/skyhook/demo SKYHOOK_LOG_DIR=/var/log/skyhook/demo COPY_RESOLV=false
export NODE_NAME=${NODE_NAME:-demo-node}
for mode in apply apply-check; do
  echo "================ skyhook-agent $mode $root $copy_dir"
  "$agent" "$mode" "$root" "$copy_dir"
  echo "================ exit status $?"
done

echo "================ state under $root"
(cd "$root" && find var/lib/skyhook/demo/flags var/lib/skyhook/demo/history var/log/skyhook/demo -type f | sort)
echo "---- history:"; cat "$root/var/lib/skyhook/demo/history/${pkg%-*}.json"; echo
echo "---- files the package wrote:"
(cd "$root" && find etc -newer "$root$copy_dir/config.json" -type f 2>/dev/null | sort | while read -r f; do echo "/$f:"; sed 's/^/    /' "$f"; done)
echo "---- a step log ($(cd "$root" && ls var/log/skyhook/demo/*/*/*.log | head -n 1)):"
cat "$(ls "$root"/var/log/skyhook/demo/*/*/*.log | head -n 1)"; echo

echo
echo "================ skyhook-run examples/motd.rhai --root $root        (dry run: the plan)"
"$run" examples/motd.rhai --root "$root"
echo "================ skyhook-run examples/motd.rhai --root $root --apply"
"$run" examples/motd.rhai --root "$root" --apply
echo "================ skyhook-run examples/motd.rhai --root $root        (dry run again)"
"$run" examples/motd.rhai --root "$root"
