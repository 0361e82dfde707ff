#!/usr/bin/env bash
# CI's bounded fuzz run: build the fuzz targets named in TARGETS (the archive reader and the
# journal parser) and run each for SECONDS (default 30) from its committed corpus; exit 1 on
# a finding (a crash, a failed invariant, a timeout or an out-of-memory), whose input is
# left in tests/fuzz/artifacts/TARGET/ and named on stderr. A target the fuzz workspace does
# not list is skipped with a message. Called from .ci/run: `tests/fuzz/scripts/ci.sh 30`.
#
# The build is kept small: only the listed targets, no sanitizer (`-s none`: the inputs go
# through safe Rust, and ASan does not instrument the bundled C of liblzma anyway). It needs
# cargo-fuzz
# (`cargo install cargo-fuzz --locked`, done here when missing) and uses the nightly toolchain
# when rustup has one, else the stable one. The corpus is not changed (new inputs go to a
# scratch directory).
set -euo pipefail
cd "$(dirname "$0")/../../.."
secs=${1:-30}
TARGETS=${TARGETS:-"archive journal"}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked --quiet
fi
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
fi
fuzz=(cargo "${toolchain[@]}" fuzz)

listed=$("${fuzz[@]}" list --fuzz-dir tests/fuzz)
run=()
for t in $TARGETS; do
  if grep -qx "$t" <<<"$listed"; then
    run+=("$t")
  else
    echo "fuzz: no target $t in tests/fuzz (skipped)"
  fi
done
[ ${#run[@]} -gt 0 ] || { echo "fuzz: no target to run"; exit 0; }

for t in "${run[@]}"; do
  "${fuzz[@]}" build --fuzz-dir tests/fuzz -s none "$t"
done

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
for t in "${run[@]}"; do
  mkdir -p "$scratch/$t" "tests/fuzz/corpus/$t" "tests/fuzz/artifacts/$t"
  log="$scratch/$t.log"
  start=$(date +%s)
  if "${fuzz[@]}" run --fuzz-dir tests/fuzz -s none "$t" "$scratch/$t" "tests/fuzz/corpus/$t" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="tests/fuzz/artifacts/$t/" >"$log" 2>&1; then
    execs=$(awk '/^stat::number_of_executed_units/ {print $2}' "$log" | tail -1)
    echo "fuzz: $t: no finding in $(($(date +%s) - start)) s, ${execs:-?} executions"
  else
    failed=1
    echo "fuzz: $t: FINDING" >&2
    grep -E '^(==[0-9]+== ERROR|thread .* panicked|SUMMARY|artifact_prefix|Test unit written)' "$log" >&2 || tail -40 "$log" >&2
  fi
done
exit $failed
