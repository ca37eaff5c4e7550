#!/usr/bin/env bash
# Patch benchmark (issue 3): blz diff/apply against zstd --patch-from and xdelta3 on the corpus
# pairs, and speed / peak memory of blz on a generated Llama-shaped BF16 pair.
#
#   bench/patch_bench.sh [corpus|gen|all]          (default all; run from the repo root)
#
# Environment (defaults in brackets):
#   BLZ      the blz binary                         [build-bench/cli/blz]
#   GEN      the gen_llama_pair binary              [build-bench/bench/gen_llama_pair]
#   CORPUS   the shared corpus                      [../shared/corpus]
#   WORK     scratch directory (removed at the end) [/tmp/blz-patch-bench]
#   LAYERS   Llama layers of the generated pair     [19 -> 8.22 GB of BF16 tensors per model]
#   GEN_ARGS extra gen_llama_pair flags             []
#
# Build first (Release):
#   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLZ_BUILD_TESTS=OFF
#   ninja -C build-bench blz gen_llama_pair
#
# Part "corpus": each pair (tiny-gpt2 base->ft-v1; roberta-lora 500->1000, 1000->2000,
# 2000->2400; F32 as stored) is packed, then `blz diff A.blz B.blz -o P` (default level, all
# cores) and `blz apply` (output compared with cmp), and the baselines
# `zstd -19 --long=27 --patch-from=A.blz B.blz` and `xdelta3 -9 -e -s A.blz B.blz` run on the
# same archive files. Sizes are printed as a fraction of the target's tensor bytes.
# Part "gen": gen_llama_pair writes the pair, both are packed (then the HF dirs are deleted),
# `blz diff --threads 1`, `--threads 2` and `blz apply` are timed (wall clock) and their peak
# anonymous resident memory (RssAnon from /proc/PID/status, polled every 50 ms: mapped input
# files do not count) recorded; the applied archive is compared with the target (cmp).
# Output: markdown tables on stdout; progress on stderr.
set -euo pipefail

MODE="${1:-all}"
BLZ="${BLZ:-build-bench/cli/blz}"
GEN="${GEN:-build-bench/bench/gen_llama_pair}"
CORPUS="${CORPUS:-../shared/corpus}"
WORK="${WORK:-/tmp/blz-patch-bench}"
LAYERS="${LAYERS:-19}"
GEN_ARGS="${GEN_ARGS:-}"

for tool in "$BLZ" zstd xdelta3 python3; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "$tool" ] || {
    echo "patch_bench: missing $tool (build blz; zstd, xdelta3, python3: scripts/setup.sh)" >&2
    exit 2
  }
done
BLZ="$(realpath "$BLZ")"
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT

log() { echo "[$(date +%T)] $*" >&2; }

# run_measured OUT_PREFIX CMD...: runs CMD, writes wall seconds to OUT_PREFIX.sec and the peak
# RssAnon (kB) of the process to OUT_PREFIX.rss; CMD's stdout goes to OUT_PREFIX.out.
run_measured() {
  local prefix="$1"; shift
  local start end peak=0 rss pid status
  start=$(date +%s.%N)
  "$@" >"$prefix.out" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    if [ -n "$rss" ] && [ "$rss" -gt "$peak" ]; then peak=$rss; fi
    sleep 0.05
  done
  status=0
  wait "$pid" || status=$?
  end=$(date +%s.%N)
  echo "$end - $start" | bc -l >"$prefix.sec"
  echo "$peak" >"$prefix.rss"
  return "$status"
}

ratio() { python3 -c 'import sys; print("%.4f" % (int(sys.argv[1]) / int(sys.argv[2])))' "$1" "$2"; }
fsize() { stat -c %s "$1"; }
# Sum of the tensor data bytes of every *.safetensors file below a model directory.
tensor_bytes() {
  python3 - "$1" <<'PY'
import json, os, struct, sys
total = 0
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        if f.endswith(".safetensors"):
            with open(os.path.join(root, f), "rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                h = json.loads(fh.read(n))
            total += sum(v["data_offsets"][1] - v["data_offsets"][0]
                         for k, v in h.items() if k != "__metadata__")
print(total)
PY
}

corpus_part() {
  local pairs=(
    "tiny-gpt2 base→ft-v1|tiny-gpt2/base|tiny-gpt2/ft-v1"
    "roberta-lora 500→1000|roberta-lora/checkpoint-500|roberta-lora/checkpoint-1000"
    "roberta-lora 1000→2000|roberta-lora/checkpoint-1000|roberta-lora/checkpoint-2000"
    "roberta-lora 2000→2400|roberta-lora/checkpoint-2000|roberta-lora/checkpoint-2400"
  )
  echo
  echo "Corpus pairs (F32 as stored); sizes in bytes, (fraction of target tensor bytes):"
  echo
  echo "| pair | target tensor bytes | target archive | blz patch | zstd -19 --long=27 --patch-from | xdelta3 -9 | blz diff s | blz apply s | apply = target |"
  echo "|---|---|---|---|---|---|---|---|---|"
  local entry label a b d
  for entry in "${pairs[@]}"; do
    IFS='|' read -r label a b <<<"$entry"
    d="$WORK/corpus/${a//\//_}__${b//\//_}"
    mkdir -p "$d"
    log "corpus: $label"
    "$BLZ" pack "$CORPUS/$a" -o "$d/A.blz" >/dev/null
    "$BLZ" pack "$CORPUS/$b" -o "$d/B.blz" >/dev/null
    run_measured "$d/diff" "$BLZ" diff "$d/A.blz" "$d/B.blz" -o "$d/P.blzpatch" --json
    run_measured "$d/apply" "$BLZ" apply "$d/A.blz" "$d/P.blzpatch" -o "$d/B2.blz"
    local same=no
    cmp -s "$d/B.blz" "$d/B2.blz" && same=yes
    zstd -q -19 --long=27 --patch-from="$d/A.blz" "$d/B.blz" -o "$d/B.zst" 2>/dev/null
    xdelta3 -9 -e -f -s "$d/A.blz" "$d/B.blz" "$d/B.xd3"
    # Baselines must decode too.
    zstd -q -d --long=27 --patch-from="$d/A.blz" "$d/B.zst" -o "$d/B.unzst"
    xdelta3 -d -f -s "$d/A.blz" "$d/B.xd3" "$d/B.unxd3"
    cmp -s "$d/B.blz" "$d/B.unzst" || echo "zstd baseline round trip FAILED on $label" >&2
    cmp -s "$d/B.blz" "$d/B.unxd3" || echo "xdelta3 baseline round trip FAILED on $label" >&2
    local tb pb zb xb
    tb=$(tensor_bytes "$CORPUS/$b")
    pb=$(fsize "$d/P.blzpatch"); zb=$(fsize "$d/B.zst"); xb=$(fsize "$d/B.xd3")
    printf '| %s | %s | %s | %s (%s) | %s (%s) | %s (%s) | %.3f | %.3f | %s |\n' \
      "$label" "$tb" "$(fsize "$d/B.blz")" "$pb" "$(ratio "$pb" "$tb")" "$zb" "$(ratio "$zb" "$tb")" \
      "$xb" "$(ratio "$xb" "$tb")" "$(cat "$d/diff.sec")" "$(cat "$d/apply.sec")" "$same"
  done
  rm -rf "$WORK/corpus"
}

gen_part() {
  [ -x "$GEN" ] || { echo "patch_bench: missing $GEN (ninja -C build-bench gen_llama_pair)" >&2; exit 2; }
  local g="$WORK/gen"
  mkdir -p "$g"
  log "gen: writing the pair ($LAYERS layers)"
  local t0 t1
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$GEN" "$g/base" "$g/target" --layers "$LAYERS" $GEN_ARGS >"$g/gen.out"
  t1=$(date +%s.%N)
  local gen_sec; gen_sec=$(echo "$t1 - $t0" | bc -l)
  log "gen: $(cat "$g/gen.out") in ${gen_sec}s; packing"
  run_measured "$g/packA" "$BLZ" pack "$g/base" -o "$g/A.blz"
  run_measured "$g/packB" "$BLZ" pack "$g/target" -o "$g/B.blz"
  local tb; tb=$(tensor_bytes "$g/target")
  rm -rf "$g/base" "$g/target"
  log "gen: diff --threads 1"
  run_measured "$g/diff1" "$BLZ" diff "$g/A.blz" "$g/B.blz" -o "$g/P1.blzpatch" --threads 1 --json
  log "gen: diff --threads 2"
  run_measured "$g/diff2" "$BLZ" diff "$g/A.blz" "$g/B.blz" -o "$g/P2.blzpatch" --threads 2 --json
  local patches_equal=no
  cmp -s "$g/P1.blzpatch" "$g/P2.blzpatch" && patches_equal=yes
  rm -f "$g/P1.blzpatch"
  log "gen: apply"
  run_measured "$g/apply" "$BLZ" apply "$g/A.blz" "$g/P2.blzpatch" -o "$g/B2.blz"
  local same=no
  cmp -s "$g/B.blz" "$g/B2.blz" && same=yes
  local pb
  pb=$(fsize "$g/P2.blzpatch")
  echo
  echo "Generated Llama-shaped BF16 pair: $(cat "$g/gen.out"); target archive $(fsize "$g/B.blz") bytes;"
  echo "blz patch $pb bytes = $(ratio "$pb" "$tb") of target tensor bytes; patch --threads 1 == --threads 2: $patches_equal;"
  echo "applied archive == target archive (cmp): $same. Generation took $(printf %.0f "$gen_sec") s."
  echo
  echo "| step | wall s | MB/s of target tensor bytes | peak RssAnon MiB |"
  echo "|---|---|---|---|"
  local step label
  for step in packA:"pack base" packB:"pack target" diff1:"diff --threads 1" diff2:"diff --threads 2" apply:"apply (all cores)"; do
    label="${step#*:}"; step="${step%%:*}"
    python3 - "$label" "$(cat "$g/$step.sec")" "$tb" "$(cat "$g/$step.rss")" <<'EOF'
import sys
label, sec, tb, rss = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print("| %s | %.1f | %.0f | %.0f |" % (label, sec, tb / sec / 1e6, rss / 1024))
EOF
  done
  rm -rf "$g"
}

echo "blz patch benchmark, $(date -u +%F), $(nproc) cores, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
case "$MODE" in
  corpus) corpus_part ;;
  gen) gen_part ;;
  all) corpus_part; gen_part ;;
  *) echo "usage: bench/patch_bench.sh [corpus|gen|all]" >&2; exit 2 ;;
esac
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
