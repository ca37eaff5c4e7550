#!/usr/bin/env bash
# Patch benchmark (issue 3): blz diff/apply against zstd --patch-from, xdelta3 and two reference
# tensor codecs on the corpus pairs in F32, BF16 and F16; single-model (no base) compression;
# speed and peak memory of blz on the corpus pairs and on a generated Llama-shaped BF16 pair.
#
#   bench/patch_bench.sh [corpus|gen|speed|all]    (all = corpus + gen, the default; run
#                                                   from the repo root)
#
# Environment (defaults in brackets):
#   BLZ      the blz binary                                   [build-bench/cli/blz]
#   BENCH    directory of the bench programs (gen_llama_pair, cast_safetensors, codec_lab,
#            measure_run)                                     [build-bench/bench]
#   GEN      the gen_llama_pair binary                        [$BENCH/gen_llama_pair]
#   CORPUS   the shared corpus                                [../shared/corpus]
#   WORK     scratch directory (removed at the end)           [/tmp/blz-patch-bench]
#   REPEAT   runs of each timed command on the corpus pairs   [20]
#   LAYERS   Llama layers of the generated pair               [19 -> 8.22 GB of BF16 tensors]
#   GEN_ARGS extra gen_llama_pair flags                       []
#   LAYERS_SPEED  layers of part "speed"'s pair               [4 -> 2.14 GB per model]
#   SPEED_REPEAT  runs of each step in part "speed"           [5]
#
# Build first (Release):
#   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLZ_BUILD_TESTS=OFF
#   ninja -C build-bench blz gen_llama_pair cast_safetensors codec_lab measure_run
#
# Part "corpus": for each pair (tiny-gpt2 base->ft-v1; roberta-lora 500->1000, 1000->2000,
# 2000->2400) and each cast (F32 as stored; BF16 and F16 made by bench/cast_safetensors: every
# F32 tensor rounded to nearest even, other files copied as they are), both model directories
# are built and packed, then
#   blz       `blz diff A.blz B.blz -o P` (default settings), `blz apply` (output cmp'd with
#             B.blz);
#   zstd      `zstd -19 --long=27 --patch-from=A.blz B.blz`, and
#   xdelta3   `xdelta3 -9 -e -s A.blz B.blz`, both on the same archive files (both decoded and
#             checked too);
#   FullXor   BLAZE-X: per tensor (4 MiB chunks) base XOR target, zstd level 9;
#   BitX      ZipLLM: per tensor XOR split into an exponent stream and a sign+mantissa stream,
#             zstd level 19 each (both references: `codec_lab --refs` on the two safetensors
#             files; tensor bytes only, so they are a lower bound for a whole-archive format).
# Sizes are printed as bytes and as the fraction of the target's tensor bytes. Then the speed
# table: `blz diff` and `blz apply` with --threads 1 and --threads $(nproc), each run REPEAT
# times (the corpus files are small); the mean wall time (process start to exit) gives MB/s of
# target tensor bytes, and the peak RssAnon is the largest over the runs. `blz apply` without a
# --threads flag: its --threads 1 column says n/a and the other one is its default. Last, the
# no-base table (`codec_lab --nobase`).
# Part "gen": gen_llama_pair writes the pair, both are packed (then the HF dirs are deleted),
# `blz diff --threads 1`, `--threads 2` and `blz apply --threads 1`, `--threads 2` (n/a without
# the flag: then one default `blz apply`) are timed once each (wall clock) with their peak
# RssAnon; applied archives are compared with the target (cmp).
# Timing and peak memory come from bench/measure_run (RssAnon from /proc/PID/status, polled
# every 1 ms for 2 s, then every 10 ms: memory-mapped input files do not count).
# Output: markdown tables on stdout; progress on stderr.
set -euo pipefail

MODE="${1:-all}"
BLZ="${BLZ:-build-bench/cli/blz}"
BENCH="${BENCH:-build-bench/bench}"
GEN="${GEN:-$BENCH/gen_llama_pair}"
CAST="$BENCH/cast_safetensors"
LAB="$BENCH/codec_lab"
MEASURE="$BENCH/measure_run"
CORPUS="${CORPUS:-../shared/corpus}"
WORK="${WORK:-/tmp/blz-patch-bench}"
REPEAT="${REPEAT:-20}"
LAYERS="${LAYERS:-19}"
GEN_ARGS="${GEN_ARGS:-}"
NPROC="$(nproc)"

for tool in "$BLZ" "$MEASURE" zstd xdelta3 python3 cmp; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "$tool" ] || {
    echo "patch_bench: missing $tool (build blz and the bench programs, see atop this script;" \
      "zstd, xdelta3, python3: scripts/setup.sh)" >&2
    exit 2
  }
done
BLZ="$(realpath "$BLZ")"
MEASURE="$(realpath "$MEASURE")"
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT

log() { echo "[$(date +%T)] $*" >&2; }

# Does `blz apply` take --threads?
APPLY_THREADS=no
"$BLZ" apply --help 2>&1 | grep -q -- '--threads' && APPLY_THREADS=yes

# run_measured OUT_PREFIX CMD...: runs CMD under measure_run; writes the wall seconds to
# OUT_PREFIX.sec and the peak RssAnon (KiB) to OUT_PREFIX.rss; CMD's stdout goes to
# OUT_PREFIX.out. Fails when CMD fails.
run_measured() {
  local prefix="$1"; shift
  local status=0
  "$MEASURE" --out "$prefix.m" -- "$@" >"$prefix.out" || status=$?
  [ -f "$prefix.m" ] || return "${status:-1}"
  awk '{print $1}' "$prefix.m" >"$prefix.sec"
  awk '{print $3}' "$prefix.m" >"$prefix.rss"
  return "$status"
}

# repeat_measured OUT_PREFIX N OUTPUT CMD...: runs CMD (which writes OUTPUT, removed after
# each run) N times; writes the mean wall seconds to OUT_PREFIX.sec and the largest peak
# RssAnon (KiB) to OUT_PREFIX.rss.
repeat_measured() {
  local prefix="$1" n="$2" output="$3"; shift 3
  local i
  : >"$prefix.all"
  for ((i = 0; i < n; i++)); do
    rm -rf "$output"
    run_measured "$prefix.run" "$@"
    cat "$prefix.run.m" >>"$prefix.all"
  done
  rm -rf "$output"
  awk '{s += $1; if ($3 > p) p = $3} END {printf "%.6f\n", s / NR}' "$prefix.all" >"$prefix.sec"
  awk '{if ($3 > p) p = $3} END {print p + 0}' "$prefix.all" >"$prefix.rss"
}

ratio() { python3 -c 'import sys; print("%.4f" % (int(sys.argv[1]) / int(sys.argv[2])))' "$1" "$2"; }
fsize() { stat -c %s "$1"; }
mbps() { python3 -c 'import sys; print("%.0f" % (int(sys.argv[1]) / float(sys.argv[2]) / 1e6))' "$1" "$2"; }
mib() { python3 -c 'import sys; print("%.1f" % (int(sys.argv[1]) / 1024))' "$1"; }
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

# make_model SRC DST CAST: copies the model directory SRC to DST; with CAST bf16 or f16 every
# *.safetensors file is replaced by its cast (cast_safetensors).
make_model() {
  local src="$1" dst="$2" cast="$3" f rel
  mkdir -p "$dst"
  cp -r "$src/." "$dst/"
  [ "$cast" = f32 ] && return 0
  while IFS= read -r -d '' f; do
    rel="${f#"$dst"/}"
    rm -f "$f"
    "$CAST" "$src/$rel" "$f" --to "$cast" >/dev/null
  done < <(find "$dst" -name '*.safetensors' -print0)
}

# refs_sizes A_DIR B_DIR: "FULLXOR BITX TENSOR_BYTES" summed over B's safetensors files, each
# against the file at the same relative path in A (codec_lab --refs).
refs_sizes() {
  local a="$1" b="$2" f rel fx=0 bx=0 tb=0 x y t
  while IFS= read -r -d '' f; do
    rel="${f#"$b"/}"
    read -r x y t < <("$LAB" --refs "$a/$rel" "$f")
    fx=$((fx + x)); bx=$((bx + y)); tb=$((tb + t))
  done < <(find "$b" -name '*.safetensors' -print0)
  echo "$fx $bx $tb"
}

corpus_part() {
  for tool in "$CAST" "$LAB"; do
    [ -x "$tool" ] || { echo "patch_bench: missing $tool (ninja -C build-bench $(basename "$tool"))" >&2; exit 2; }
  done
  local pairs=(
    "tiny-gpt2 base→ft-v1|tiny-gpt2/base|tiny-gpt2/ft-v1"
    "roberta-lora 500→1000|roberta-lora/checkpoint-500|roberta-lora/checkpoint-1000"
    "roberta-lora 1000→2000|roberta-lora/checkpoint-1000|roberta-lora/checkpoint-2000"
    "roberta-lora 2000→2400|roberta-lora/checkpoint-2000|roberta-lora/checkpoint-2400"
  )
  local sizes=() speeds=()
  local entry label a b d cast
  for entry in "${pairs[@]}"; do
    IFS='|' read -r label a b <<<"$entry"
    for cast in f32 bf16 f16; do
      local castname="${cast^^}"
      d="$WORK/corpus/${a//\//_}__${b//\//_}_$cast"
      mkdir -p "$d"
      log "corpus: $label $castname"
      make_model "$CORPUS/$a" "$d/a" "$cast"
      make_model "$CORPUS/$b" "$d/b" "$cast"
      "$BLZ" pack "$d/a" -o "$d/A.blz" >/dev/null
      "$BLZ" pack "$d/b" -o "$d/B.blz" >/dev/null
      local tb; tb=$(tensor_bytes "$d/b")
      # Sizes: blz at default settings, the byte-level baselines, the reference codecs.
      "$BLZ" diff "$d/A.blz" "$d/B.blz" -o "$d/P.blzpatch" >/dev/null
      "$BLZ" apply "$d/A.blz" "$d/P.blzpatch" -o "$d/B2.blz" >/dev/null
      local same=no
      cmp -s "$d/B.blz" "$d/B2.blz" && same=yes
      rm -f "$d/B2.blz"
      zstd -q -19 --long=27 --patch-from="$d/A.blz" "$d/B.blz" -o "$d/B.zst" 2>/dev/null
      xdelta3 -9 -e -f -s "$d/A.blz" "$d/B.blz" "$d/B.xd3"
      zstd -q -d --long=27 --patch-from="$d/A.blz" "$d/B.zst" -o "$d/B.unzst"
      xdelta3 -d -f -s "$d/A.blz" "$d/B.xd3" "$d/B.unxd3"
      cmp -s "$d/B.blz" "$d/B.unzst" || { echo "zstd round trip FAILED: $label $castname" >&2; exit 1; }
      cmp -s "$d/B.blz" "$d/B.unxd3" || { echo "xdelta3 round trip FAILED: $label $castname" >&2; exit 1; }
      local fx bx rtb
      read -r fx bx rtb < <(refs_sizes "$d/a" "$d/b")
      [ "$rtb" = "$tb" ] || { echo "codec_lab counted $rtb tensor bytes, expected $tb" >&2; exit 1; }
      local pb zb xb
      pb=$(fsize "$d/P.blzpatch"); zb=$(fsize "$d/B.zst"); xb=$(fsize "$d/B.xd3")
      sizes+=("$(printf '| %s | %s | %s | %s (%s) | %s (%s) | %s (%s) | %s (%s) | %s (%s) | %s | %s |' \
        "$label" "$castname" "$tb" "$pb" "$(ratio "$pb" "$tb")" "$zb" "$(ratio "$zb" "$tb")" \
        "$xb" "$(ratio "$xb" "$tb")" "$fx" "$(ratio "$fx" "$tb")" "$bx" "$(ratio "$bx" "$tb")" \
        "$(ratio "$pb" "$bx")" "$same")")
      # Speed: REPEAT runs of each command, mean wall time, largest peak RssAnon.
      log "corpus: $label $castname: timing ($REPEAT runs per command)"
      repeat_measured "$d/d1" "$REPEAT" "$d/Pt.blzpatch" \
        "$BLZ" diff "$d/A.blz" "$d/B.blz" -o "$d/Pt.blzpatch" --threads 1
      repeat_measured "$d/dn" "$REPEAT" "$d/Pt.blzpatch" \
        "$BLZ" diff "$d/A.blz" "$d/B.blz" -o "$d/Pt.blzpatch" --threads "$NPROC"
      local a1="n/a" an a1_rss="n/a" an_rss
      if [ "$APPLY_THREADS" = yes ]; then
        repeat_measured "$d/a1" "$REPEAT" "$d/Bt.blz" \
          "$BLZ" apply "$d/A.blz" "$d/P.blzpatch" -o "$d/Bt.blz" --threads 1
        repeat_measured "$d/an" "$REPEAT" "$d/Bt.blz" \
          "$BLZ" apply "$d/A.blz" "$d/P.blzpatch" -o "$d/Bt.blz" --threads "$NPROC"
        a1=$(mbps "$tb" "$(cat "$d/a1.sec")"); a1_rss=$(mib "$(cat "$d/a1.rss")")
      else
        repeat_measured "$d/an" "$REPEAT" "$d/Bt.blz" \
          "$BLZ" apply "$d/A.blz" "$d/P.blzpatch" -o "$d/Bt.blz"
      fi
      an=$(mbps "$tb" "$(cat "$d/an.sec")"); an_rss=$(mib "$(cat "$d/an.rss")")
      speeds+=("$(printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |' \
        "$label" "$castname" "$tb" \
        "$(mbps "$tb" "$(cat "$d/d1.sec")")" "$(mbps "$tb" "$(cat "$d/dn.sec")")" "$a1" "$an" \
        "$(mib "$(cat "$d/d1.rss")") / $(mib "$(cat "$d/dn.rss")")" "$a1_rss / $an_rss")")
      rm -rf "$d"
    done
  done
  echo
  echo "Corpus pairs; sizes in bytes (fraction of the target's tensor bytes); BF16 and F16 are"
  echo "cast from the F32 files by bench/cast_safetensors (round to nearest even):"
  echo
  echo "| pair | cast | target tensor bytes | blz | zstd -19 --long=27 --patch-from | xdelta3 -9 -e -s | FullXor (XOR, zstd 9) | BitX (XOR, exp / sign+mantissa, zstd 19) | blz / BitX | apply = target |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${sizes[@]}"
  echo
  local apply_note="apply has --threads"
  [ "$APPLY_THREADS" = yes ] || apply_note="this blz apply has no --threads flag: n/a, and 'all' is its default"
  echo "Corpus pairs, speed: MB/s of target tensor bytes, mean wall time (process start to exit)"
  echo "of $REPEAT runs each; peak RssAnon MiB, largest of the runs; all = --threads $NPROC ($apply_note):"
  echo
  echo "| pair | cast | target tensor bytes | diff MB/s, 1 thread | diff MB/s, all | apply MB/s, 1 thread | apply MB/s, all | diff peak MiB (1 / all) | apply peak MiB (1 / all) |"
  echo "|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${speeds[@]}"
  rm -rf "$WORK/corpus"
  echo
  echo "No base: each model alone (codec_lab --nobase); bytes (fraction of raw tensor bytes):"
  "$LAB" "$CORPUS" --nobase
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
  local same=""
  local steps=("packA|pack base" "packB|pack target" "diff1|diff --threads 1" "diff2|diff --threads 2")
  if [ "$APPLY_THREADS" = yes ]; then
    local t
    for t in 1 2; do
      log "gen: apply --threads $t"
      run_measured "$g/apply$t" "$BLZ" apply "$g/A.blz" "$g/P2.blzpatch" -o "$g/B2.blz" --threads "$t"
      if cmp -s "$g/B.blz" "$g/B2.blz"; then same="$same --threads $t: yes;"; else same="$same --threads $t: NO;"; fi
      rm -f "$g/B2.blz"
    done
    steps+=("apply1|apply --threads 1" "apply2|apply --threads 2")
  else
    log "gen: apply (no --threads flag)"
    run_measured "$g/apply" "$BLZ" apply "$g/A.blz" "$g/P2.blzpatch" -o "$g/B2.blz"
    if cmp -s "$g/B.blz" "$g/B2.blz"; then same=" yes;"; else same=" NO;"; fi
    rm -f "$g/B2.blz"
    steps+=("apply1|apply --threads 1 (no --threads flag)" "apply|apply (default threads)")
  fi
  local pb
  pb=$(fsize "$g/P2.blzpatch")
  echo
  echo "Generated Llama-shaped BF16 pair: $(cat "$g/gen.out"); target archive $(fsize "$g/B.blz") bytes;"
  echo "blz patch $pb bytes = $(ratio "$pb" "$tb") of target tensor bytes; patch --threads 1 == --threads 2: $patches_equal;"
  echo "applied archive == target archive (cmp):$same generation took $(printf %.0f "$gen_sec") s."
  echo
  echo "| step | wall s | MB/s of target tensor bytes | peak RssAnon MiB |"
  echo "|---|---|---|---|"
  local entry step label
  for entry in "${steps[@]}"; do
    IFS='|' read -r step label <<<"$entry"
    if [ ! -f "$g/$step.sec" ]; then
      echo "| $label | n/a | n/a | n/a |"
      continue
    fi
    python3 - "$label" "$(cat "$g/$step.sec")" "$tb" "$(cat "$g/$step.rss")" <<'EOF'
import sys
label, sec, tb, rss = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print("| %s | %.1f | %.0f | %.0f |" % (label, sec, tb / sec / 1e6, rss / 1024))
EOF
  done
  rm -rf "$g"
}

# Part "speed": what blz itself sustains, without the disk. The generated pair (LAYERS_SPEED
# layers: 2.1 GB per model by default) is written, packed and patched in WORK (put it on tmpfs:
# WORK=/dev/shm/blz-speed), then `blz diff` and `blz apply` with --threads 1 and 2 run
# SPEED_REPEAT times each, interleaved (1, 2, 1, 2, ...: a slow spell of the machine hits both).
# Per step: the median and the best wall time, MB/s of target tensor bytes at each, CPU seconds
# (user + sys) of the median run, MB/s per CPU second (the per-core figure), the 2-thread
# speed-up of the medians, and the largest peak RssAnon. Every patch is compared with the first
# and every applied archive with the target. With $BENCH/registry_diff built, the same for a diff
# computed as `blz serve` computes it (the archives' digests known, so not hashed; its wall and
# CPU time cover CreatePatch alone).
speed_part() {
  [ -x "$GEN" ] || { echo "patch_bench: missing $GEN (ninja -C build-bench gen_llama_pair)" >&2; exit 2; }
  local g="$WORK/speed" n="${SPEED_REPEAT:-5}" layers="${LAYERS_SPEED:-4}"
  mkdir -p "$g"
  log "speed: writing the pair ($layers layers) in $g"
  # shellcheck disable=SC2086
  "$GEN" "$g/base" "$g/target" --layers "$layers" $GEN_ARGS >"$g/gen.out"
  "$BLZ" pack "$g/base" -o "$g/A.blz" >/dev/null
  "$BLZ" pack "$g/target" -o "$g/B.blz" >/dev/null
  local tb; tb=$(tensor_bytes "$g/target")
  rm -rf "$g/base" "$g/target"
  "$BLZ" diff "$g/A.blz" "$g/B.blz" -o "$g/P.blzpatch" >/dev/null
  local k t same=yes
  for k in $(seq "$n"); do
    for t in 1 2; do
      log "speed: run $k/$n, --threads $t"
      "$MEASURE" --out "$g/diff$t.$k.m" -- "$BLZ" diff "$g/A.blz" "$g/B.blz" -o "$g/Q.blzpatch" \
        --threads "$t" >/dev/null
      cmp -s "$g/Q.blzpatch" "$g/P.blzpatch" || same=no
      rm -f "$g/Q.blzpatch"
      "$MEASURE" --out "$g/apply$t.$k.m" -- "$BLZ" apply "$g/A.blz" "$g/P.blzpatch" -o "$g/C.blz" \
        --threads "$t" >/dev/null
      cmp -s "$g/C.blz" "$g/B.blz" || same=no
      rm -f "$g/C.blz"
      if [ -x "$BENCH/registry_diff" ]; then
        # As `blz serve` computes it: digests known (hashed first, untimed by the tool itself).
        "$MEASURE" --out "$g/reg$t.$k.raw" -- "$BENCH/registry_diff" "$g/A.blz" "$g/B.blz" \
          "$g/Q.blzpatch" --threads "$t" >"$g/reg$t.$k.out"
        cmp -s "$g/Q.blzpatch" "$g/P.blzpatch" || same=no
        rm -f "$g/Q.blzpatch"
        # wall and CPU of CreatePatch alone (the tool's line), peak RssAnon and status (measure_run).
        echo "$(cut -d' ' -f1-2 "$g/reg$t.$k.out") $(cut -d' ' -f3-4 "$g/reg$t.$k.raw")" >"$g/reg$t.$k.m"
      fi
    done
  done
  echo
  echo "Speed without the disk (WORK=$WORK): generated pair: $(cat "$g/gen.out"); patch $(fsize "$g/P.blzpatch") bytes;"
  echo "$n runs per step, interleaved; every patch identical and every applied archive == target: $same."
  echo
  echo "| step | wall s, median (best) | MB/s, median (best) | CPU s (median run) | MB/s per CPU s | 2-thread speed-up (medians) | peak RssAnon MiB |"
  echo "|---|---|---|---|---|---|---|"
  python3 - "$g" "$tb" "$n" <<'EOF'
import sys
g, tb, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def runs(step):
    out = []
    for k in range(1, n + 1):
        wall, cpu, rss, status = open("%s/%s.%d.m" % (g, step, k)).read().split()
        if int(status) != 0:
            sys.exit("speed: %s run %d failed (exit %s)" % (step, k, status))
        out.append((float(wall), float(cpu), int(rss)))
    return sorted(out)
import os
ops = [("diff", "diff"), ("apply", "apply")]
if os.path.exists("%s/reg1.1.m" % g):
    ops.insert(1, ("reg", "registry diff (digests known)"))
for op, label in ops:
    med1 = None
    for t in (1, 2):
        r = runs("%s%d" % (op, t))
        med, best = r[(len(r) - 1) // 2], r[0]  # the lower median: an actual run
        if t == 1:
            med1, speedup = med[0], ""
        else:
            speedup = "%.2fx" % (med1 / med[0])
        print("| %s --threads %d | %.2f (%.2f) | %.0f (%.0f) | %.2f | %.0f | %s | %.0f |" % (
            label, t, med[0], best[0], tb / med[0] / 1e6, tb / best[0] / 1e6, med[1],
            tb / med[1] / 1e6, speedup, max(x[2] for x in r) / 1024))
EOF
  rm -rf "$g"
}

echo "blz patch benchmark, $(date -u +%F), $NPROC cores, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "blz apply --threads: $APPLY_THREADS"
case "$MODE" in
  corpus) corpus_part ;;
  gen) gen_part ;;
  speed) speed_part ;;
  all) corpus_part; gen_part ;;
  *) echo "usage: bench/patch_bench.sh [corpus|gen|speed|all]" >&2; exit 2 ;;
esac
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
