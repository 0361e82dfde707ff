#!/usr/bin/env bash
# check-reproducible.sh [TARGET...] — build HEAD a second time in a fresh clone at another path
# (its own target dir, inside the clone) and compare the binaries' sha256 with this checkout's.
#
#   scripts/check-reproducible.sh                          # x86_64-unknown-linux-gnu
#   scripts/check-reproducible.sh x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu
#
# Builds this checkout first (scripts/build-static.sh, a no-op when up to date), then the
# clone. Prints one line per binary, `same SHA256 NAME` or `DIFFERENT A B NAME`, and exits 1
# when any differs. Needs a clean tree (the clone has only what is committed). Each target is
# a full LTO release build from scratch in the clone: minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -z "$(git status --porcelain --untracked-files=no)" ] || {
  echo "$0: the tree has uncommitted changes; commit them first (the clone builds HEAD)" >&2
  exit 1
}
targets=("${@:-x86_64-unknown-linux-gnu}")
work=$(mktemp -d /tmp/skyhook-repro.XXXXXX)
trap 'rm -rf "$work"' EXIT
git clone -q --no-hardlinks . "$work/elsewhere"
status=0
for t in "${targets[@]}"; do
  a=$(scripts/build-static.sh "$t" | tail -n 1)
  b=$("$work/elsewhere/scripts/build-static.sh" "$t" | tail -n 1)
  for bin in skyhook-agent skyhook-run; do
    x=$(sha256sum < "$a/$bin" | cut -d' ' -f1)
    y=$(sha256sum < "$b/$bin" | cut -d' ' -f1)
    if [ "$x" = "$y" ]; then
      echo "same $x $t/$bin"
    else
      echo "DIFFERENT $x $y $t/$bin"
      status=1
    fi
  done
done
exit $status
