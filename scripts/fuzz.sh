#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, docs/fuzzing.md) with clang in build-fuzz, seeds their
# corpora and runs the targets (BLZ_FUZZ_JOBS at a time, default one per core), then prints a
# table of target / executions / crashes.
# Exits non-zero if any target crashed (the reproducer is under build-fuzz/fuzz-artifacts/).
#
#   bash scripts/fuzz.sh short [SECONDS] [TARGET...]  # CI: BLZ_FUZZ_SECONDS (default 20) each
#   bash scripts/fuzz.sh long SECONDS [TARGET...]   # the campaign: SECONDS each, nice -n 10
#
# BLZ_FUZZ_RUNS=N stops each target after N executions (or SECONDS, whichever comes first):
# the campaign's goal is 10 M executions per target, and fast targets need not use all the time.
#
# Corpora grow in build-fuzz/fuzz-corpus/<target> and are kept between runs. Seeds are made
# fresh each run: the targets' own crafted inputs (BLZ_FUZZ_WRITE_SEEDS, see fuzz/fuzz_util.h)
# plus the real files of ../shared/corpus when present (read there; larger files are cut to
# their first 64 KiB, which the header-only parsers take as they are). Nothing is written into
# the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

mode=${1:-short}
shift || true
case "$mode" in
  short)
    seconds=${BLZ_FUZZ_SECONDS:-20}
    # An optional first number overrides BLZ_FUZZ_SECONDS (no target name is a number).
    if [[ ${1:-} =~ ^[0-9]+$ ]]; then seconds=$1; shift; fi
    nice_level=${BLZ_FUZZ_NICE:-0} ;;
  long)
    seconds=${1:?usage: scripts/fuzz.sh long SECONDS [TARGET...]}
    shift
    nice_level=${BLZ_FUZZ_NICE:-10} ;;
  *) echo "usage: scripts/fuzz.sh short|long SECONDS [TARGET...]" >&2; exit 2 ;;
esac

all_targets=(safetensors gguf blz_archive patch_parse patch_apply codec manifest reference wire
  registry_request squizd hf_plan wdelta)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")

build=${BLZ_FUZZ_BUILD_DIR:-build-fuzz}
corpus_src=${BLZ_CORPUS_DIR:-$root/../shared/corpus}
cxx=${BLZ_FUZZ_CXX:-clang++-14}

bash scripts/setup.sh
start_build=$(date +%s)
# -O1 with line tables only: what libFuzzer's docs use, and a third quicker to build than -O2 -g
# (a second full build, which is why CI replays seeds in the test build instead).
# ccache when the machine has it (as scripts/test.sh).
launcher=()
if command -v ccache > /dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" "${launcher[@]}" \
  -DBLZ_FUZZ=ON -DBLZ_BUILD_TESTS=OFF -DBLZ_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target blz_fuzzers
echo "fuzz: build took $(( $(date +%s) - start_build )) s"

# fuzz_write_seeds: the crafted seeds plus the corpus files.
source scripts/fuzz_seeds.sh

# The per-target maximum input length.
max_len() {
  case "$1" in
    manifest|reference|wire) echo 4096 ;;
    registry_request) echo 8192 ;;
    *) echo 65536 ;;
  esac
}

# Runs target $1 and writes its table row to $build/fuzz-rows/$1 (and, on a crash, its report to
# stderr); returns non-zero on a crash, leak, timeout or out-of-memory.
run_target() {
  local t=$1
  local bin="$build/fuzz/fuzz_$t"
  local seeds="$build/fuzz-seeds/$t"
  local corpus="$build/fuzz-corpus/$t"
  local artifacts="$build/fuzz-artifacts/$t"
  local log="$build/fuzz-logs/$t.log"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")" "$build/fuzz-rows"
  fuzz_write_seeds "$bin" "$t" "$seeds" "$corpus_src"
  local dict=()
  [ -f "fuzz/$t.dict" ] && dict=("-dict=fuzz/$t.dict")
  local runs=()
  [ -n "${BLZ_FUZZ_RUNS:-}" ] && runs=("-runs=$BLZ_FUZZ_RUNS")
  echo "fuzz: $t for ${seconds} s ($(ls "$seeds" | wc -l) seeds, $(ls "$corpus" | wc -l) corpus entries)"
  local rc=0
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  nice -n "$nice_level" "$bin" -max_total_time="$seconds" -max_len="$(max_len "$t")" \
    -timeout=30 -rss_limit_mb=2560 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "${dict[@]}" "${runs[@]}" "$corpus" "$seeds" >"$log" 2>&1 || rc=$?
  local execs crashes
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  crashes=$(find "$artifacts" -type f -newer "$seeds" \( -name 'crash-*' -o -name 'leak-*' \
    -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes=1; fi
  printf '%-18s %8s %12s %10s %8s\n' "fuzz_$t" "$seconds" "${execs:-0}" \
    "$(ls "$corpus" | wc -l)" "$crashes" > "$build/fuzz-rows/$t"
  if [ "$crashes" -ne 0 ]; then
    echo "fuzz: $t FAILED (exit $rc); log: $log; artifacts: $artifacts" >&2
    grep -m1 -A30 -E 'ERROR: |runtime error|fuzz property violated|fuzz setup failed' "$log" >&2 || tail -30 "$log" >&2
    return 1
  fi
}

for t in "${targets[@]}"; do
  [ -x "$build/fuzz/fuzz_$t" ] || { echo "fuzz: no target $t" >&2; exit 2; }
done
rm -rf "$build/fuzz-rows"
# BLZ_FUZZ_JOBS targets at a time (default: one per core), each on its own corpus; libFuzzer
# itself runs one input at a time, so two targets on two cores take half the wall time.
jobs=${BLZ_FUZZ_JOBS:-$(nproc)}
failed=0
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  run_target "$t" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
results=()
for t in "${targets[@]}"; do
  results+=("$(cat "$build/fuzz-rows/$t" 2>/dev/null || printf '%-18s %8s %12s %10s %8s' "fuzz_$t" "$seconds" "-" "-" "no result")")
done
{
  printf '%-18s %8s %12s %10s %8s\n' target seconds executions corpus crashes
  printf '%s\n' "${results[@]}"
} | tee "$build/fuzz-results.txt"
exit "$failed"
