#!/usr/bin/env bash
# Export benchmark (issue 10): `blz export` speed and peak memory on the generated 8 GB
# Llama-shaped BF16 model (bench/gen_llama_pair's base, 19 layers, 8.22 GB of tensors in four
# shards), for the formats x casts people use:
#   gguf (no cast: BF16 kept, Q/K rows permuted), gguf --cast q8_0, safetensors --cast f16
# each with --threads 1 and --threads 2, timed once, peak RssAnon by bench/measure_run. The
# GGUF exports need a tokenizer: a synthetic byte-level BPE tokenizer.json with the model's
# 32000 tokens is written next to the weights (its content does not matter for the speed).
#
#   bench/export_bench.sh            (from the repo root)
#
# Environment [defaults]: BLZ [build-bench/cli/blz], BENCH [build-bench/bench],
# WORK [/tmp/blz-export-bench] (removed at the end), LAYERS [19].
# Build first (Release):
#   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLZ_BUILD_TESTS=OFF
#   ninja -C build-bench blz gen_llama_pair measure_run
set -euo pipefail
BLZ=${BLZ:-build-bench/cli/blz}
BENCH=${BENCH:-build-bench/bench}
WORK=${WORK:-/tmp/blz-export-bench}
LAYERS=${LAYERS:-19}
rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT

"$BENCH/gen_llama_pair" "$WORK/model" "$WORK/unused-target" --layers "$LAYERS" > /dev/null
rm -rf "$WORK/unused-target"
/usr/bin/python3 - "$WORK/model/tokenizer.json" <<'PY'
import json, sys
vocab = {f"t{i}": i for i in range(32000 - 2)}
tok = {"version": "1.0",
       "added_tokens": [{"id": 31998, "content": "<s>", "special": True},
                        {"id": 31999, "content": "</s>", "special": True}],
       "pre_tokenizer": {"type": "ByteLevel"},
       "model": {"type": "BPE", "vocab": vocab, "merges": []}}
json.dump(tok, open(sys.argv[1], "w"))
PY
bytes=$(du -cb "$WORK"/model/*.safetensors | tail -1 | cut -f1)
echo "model: $bytes bytes of safetensors ($LAYERS layers)"
printf '| export | threads | wall s | MB/s of source bytes | CPU s | peak RssAnon MiB |\n'
printf '|---|---|---|---|---|---|\n'
run() {  # run NAME THREADS ARGS...
  local name=$1 threads=$2; shift 2
  rm -rf "$WORK/out"
  "$BENCH/measure_run" --out "$WORK/m" -- "$BLZ" export "$WORK/model" "$@" \
      --threads "$threads" -o "$WORK/out" > /dev/null 2> "$WORK/err" || {
    cat "$WORK/err" >&2; exit 1; }
  read -r wall cpu kib status < "$WORK/m"
  awk -v n="$name" -v t="$threads" -v w="$wall" -v c="$cpu" -v k="$kib" -v b="$bytes" \
    'BEGIN { printf "| %s | %s | %.1f | %.0f | %.1f | %.0f |\n", n, t, w, b / w / 1e6, c, k / 1024 }'
  rm -rf "$WORK/out"
}
for t in 1 2; do
  run "gguf (bf16 kept)" "$t" --format gguf
  run "gguf --cast q8_0" "$t" --format gguf --cast q8_0
  run "safetensors --cast f16" "$t" --format safetensors --cast f16
done
