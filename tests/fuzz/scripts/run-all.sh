#!/usr/bin/env bash
# Run every fuzz target in turn for SECS seconds (default 180), one fuzzer process at a time,
# then minimise its corpus (set cover); the libFuzzer output goes to tests/fuzz/logs/TARGET.log (ignored by
# git) and one summary line per target to stdout.
set -uo pipefail
cd "$(dirname "$0")/../../.."
secs=${1:-180}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo +nightly fuzz list --fuzz-dir tests/fuzz)
mkdir -p tests/fuzz/logs
for t in "${targets[@]}"; do
  log=tests/fuzz/logs/$t.log
  mkdir -p "tests/fuzz/corpus/$t"
  cargo +nightly fuzz run --fuzz-dir tests/fuzz "$t" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1
  rc=$?
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)
  cargo +nightly fuzz cmin --fuzz-dir tests/fuzz "$t" -- -set_cover_merge=1 >>"$log" 2>&1
  execs=$(grep -E '^stat::number_of_executed_units' "$log" | tail -1 | awk '{print $2}')
  files=$(ls "tests/fuzz/corpus/$t" | wc -l)
  echo "$t rc=$rc execs=$execs corpus_files=$files | $done_line"
done
