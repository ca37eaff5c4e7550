#!/usr/bin/env bash
# Replays a fuzz target's seeds (its crafted inputs plus the corpus files, scripts/fuzz_seeds.sh)
# through a target built without libFuzzer (fuzz/replay_main.cc), in the test build's
# ASan+UBSan: the ctest tests fuzz_replay_<what> (fuzz/CMakeLists.txt). Non-zero on a finding.
#
#   bash scripts/fuzz_replay.sh BIN TARGET [CORPUS_SRC]
set -euo pipefail
bin=$1
target=$2
root="$(cd "$(dirname "$0")/.." && pwd)"
corpus_src=${3:-${BLZ_CORPUS_DIR:-$root/../shared/corpus}}
source "$root/scripts/fuzz_seeds.sh"
seeds=$(mktemp -d "${TMPDIR:-/tmp}/blz-fuzz-replay-XXXXXX")
trap 'rm -rf "$seeds" "$seeds.log"' EXIT
fuzz_write_seeds "$bin" "$target" "$seeds" "$corpus_src"
count=$(find "$seeds" -type f | wc -l)
if [ "$count" -eq 0 ]; then
  echo "fuzz_replay: $target wrote no seeds" >&2
  exit 1
fi
[ -d "$corpus_src" ] || echo "fuzz_replay: $corpus_src is missing: crafted seeds only"
status=0
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  "$bin" "$seeds" 2> "$seeds.log" || status=$?
if [ "$status" -ne 0 ]; then
  tail -40 "$seeds.log" >&2
  exit "$status"
fi
