#!/usr/bin/env bash
# Lossy delta benchmark (issue 14): for every corpus pair, in F32 as stored and as a BF16 cast,
# and for a generated Llama-shaped BF16 pair, the size and the error of every .wdelta strategy
# against blz's lossless patch, with create and apply times.
#
#   bench/lossy_bench.sh            (run from the repo root; markdown table on stdout)
#
# Environment (defaults in brackets):
#   BLZ      the blz binary                                   [build-bench/cli/blz]
#   BENCH    directory of the bench programs                  [build-bench/bench]
#   CORPUS   the shared corpus                                [../shared/corpus]
#   WORK     scratch directory (removed at the end)           [/tmp/blz-lossy-bench]
#   GEN_ARGS gen_llama_pair flags of the generated pair       [--layers 2 --hidden 1024
#            --intermediate 2816 --vocab 8000: 42.1 M parameters, 84 MB of BF16 per model]
#   STRATEGIES                                                [sparse quantized int4 bitdelta
#                                                              lowrank auto]
#
# Build first (Release):
#   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLZ_BUILD_TESTS=OFF
#   ninja -C build-bench blz gen_llama_pair cast_safetensors measure_run
#
# Per pair and strategy: `blz delta create A B -o D --strategy S --json` (defaults: sparsity
# 0.9, outlier fraction 0.01, rank energy 0.95, auto's max error 0.01, tensors under 4096
# elements exact under bitdelta/lowrank/auto), then `blz delta apply A D -o OUT --target B
# --json`, which measures the written reconstruction against the true target. The table gives
# the .wdelta's bytes, the lossless patch's bytes (`blz diff A B -o P`, the whole patch file),
# the ratio of the two and of the .wdelta to the target's tensor bytes, the model-level
# relative L2 error, cosine and max abs error as apply measured them, and the wall time of
# create and apply (one run each, bench/measure_run; all cores).
# The corpus has no half-precision pairs: the BF16 rows are the F32 pairs cast by
# bench/cast_safetensors (round to nearest even), as ../shared/corpus/PROVENANCE.md asks.
set -euo pipefail

BLZ="${BLZ:-build-bench/cli/blz}"
BENCH="${BENCH:-build-bench/bench}"
CORPUS="${CORPUS:-../shared/corpus}"
WORK="${WORK:-/tmp/blz-lossy-bench}"
GEN_ARGS="${GEN_ARGS:---layers 2 --hidden 1024 --intermediate 2816 --vocab 8000}"
STRATEGIES="${STRATEGIES:-sparse quantized int4 bitdelta lowrank auto}"
CAST="$BENCH/cast_safetensors"
GEN="$BENCH/gen_llama_pair"
MEASURE="$BENCH/measure_run"
PY=/usr/bin/python3

for tool in "$BLZ" "$CAST" "$GEN" "$MEASURE" "$PY"; do
  [ -x "$tool" ] || { echo "lossy_bench: missing $tool (see atop this script)" >&2; exit 2; }
done
BLZ="$(realpath "$BLZ")"
rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT
log() { echo "[$(date +%T)] $*" >&2; }

# cast_dir IN OUT: a copy of model directory IN with every safetensors file cast to BF16.
cast_dir() {
  mkdir -p "$2"
  for f in "$1"/*; do
    case "$f" in
      *.safetensors) "$CAST" "$f" "$2/$(basename "$f")" --to bf16 >/dev/null ;;
      *) cp "$f" "$2/" ;;
    esac
  done
}

echo "| pair | dtype | strategy | .wdelta bytes | lossless patch bytes | vs lossless | vs full | rel L2 | cosine | max abs | create s | apply s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"

# bench_pair LABEL DTYPE A B
bench_pair() {
  local label="$1" dtype="$2" a="$3" b="$4"
  local patch="$WORK/p.blzpatch"
  rm -f "$patch"
  "$BLZ" diff "$a" "$b" -o "$patch" >/dev/null
  local lossless
  lossless=$(stat -c %s "$patch")
  for s in $STRATEGIES; do
    log "$label $dtype $s"
    rm -rf "$WORK/d.wdelta" "$WORK/out"
    "$MEASURE" --out "$WORK/c.m" -- "$BLZ" delta create "$a" "$b" -o "$WORK/d.wdelta" \
      --strategy "$s" --json >"$WORK/c.json"
    "$MEASURE" --out "$WORK/a.m" -- "$BLZ" delta apply "$a" "$WORK/d.wdelta" -o "$WORK/out" \
      --target "$b" --json >"$WORK/a.json"
    "$PY" - "$label" "$dtype" "$s" "$lossless" "$WORK/c.json" "$WORK/a.json" "$WORK/c.m" \
      "$WORK/a.m" <<'PYEOF'
import json, sys
label, dtype, s, lossless = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
c = json.load(open(sys.argv[5])); a = json.load(open(sys.argv[6]))
tc = float(open(sys.argv[7]).read().split()[0]); ta = float(open(sys.argv[8]).read().split()[0])
e = a["error"] or {}
fmt = lambda v: "n/a" if v is None else "%.3g" % v
# create's prediction and apply's measurement of the written files must agree (up to the
# order the per-tensor sums are merged in)
assert abs(c["error"]["rel_l2"] - e.get("rel_l2")) <= 1e-12 * max(1e-30, e.get("rel_l2")), (c["error"], e)
print("| %s | %s | %s | %d | %d | %.3f | %.4f | %s | %s | %s | %.2f | %.2f |" % (
    label, dtype, s, c["file_bytes"], lossless, c["file_bytes"] / lossless,
    c["file_bytes"] / c["full_bytes"], fmt(e.get("rel_l2")), fmt(e.get("cosine")),
    fmt(e.get("max_abs")), tc, ta))
PYEOF
  done
}

for pair in "tiny-gpt2 tiny-gpt2/base tiny-gpt2/ft-v1" \
            "roberta-lora 2000->2400 roberta-lora/checkpoint-2000 roberta-lora/checkpoint-2400"; do
  set -- $pair
  if [ "$1" = tiny-gpt2 ]; then label="tiny-gpt2 base->ft-v1"; a="$2"; b="$3";
  else label="roberta-lora $2"; a="$3"; b="$4"; fi
  bench_pair "$label" F32 "$CORPUS/$a" "$CORPUS/$b"
  rm -rf "$WORK/a16" "$WORK/b16"
  cast_dir "$CORPUS/$a" "$WORK/a16"
  cast_dir "$CORPUS/$b" "$WORK/b16"
  bench_pair "$label" "BF16 (cast)" "$WORK/a16" "$WORK/b16"
done

log "generating the Llama-shaped pair ($GEN_ARGS)"
# shellcheck disable=SC2086
"$GEN" "$WORK/gen-a" "$WORK/gen-b" $GEN_ARGS >/dev/null
bench_pair "generated Llama ($GEN_ARGS)" BF16 "$WORK/gen-a" "$WORK/gen-b"
