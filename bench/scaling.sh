#!/usr/bin/env bash
# Hostile-input scaling benchmark (issue 9): `blz id` on (a) safetensors files with many tiny
# tensors (5k .. 200k; defect 1, the JSON header parse) and (b) GGUF files with a huge u8
# metadata array (5 .. 100 MiB; defect 2, the structural hash of metadata arrays).
#
#   bench/scaling.sh [safetensors|gguf|all]     (run from the repo root; default all)
#
# Environment (defaults in brackets):
#   BLZ      the blz binary (a non-sanitized Release / RelWithDebInfo build)
#                                                          [build-bench/cli/blz]
#   BENCH    directory of make_scaling_inputs and measure_run   [build-bench/bench]
#   WORK     scratch directory (removed at the end)        [/tmp/blz-scaling-bench]
#   TENSORS  tensor counts of part (a)                     [5000 10000 20000 40000 100000 200000]
#   ARRAYS   u8 array sizes in MiB of part (b)             [5 10 25 50 100]
#   REPEAT   runs of each `blz id`                         [3]
#
# Build first:
#   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLZ_BUILD_TESTS=OFF \
#     -DBLZ_BUILD_BENCH=ON
#   ninja -C build-bench blz make_scaling_inputs measure_run
#
# Each input is written by bench/make_scaling_inputs (blz's own writers: safetensors tensors are
# one f32 each; the GGUF has one tensor and the array "hostile.u8"), then `blz id FILE` is run
# REPEAT times under bench/measure_run: the table gives the fastest wall time, the CPU time of
# that run, and the largest peak RssAnon (heap and other private memory; the memory-mapped input
# does not count; polled every 1 ms for 2 s, then every 10 ms). Every run must exit 0.
# Output: markdown tables on stdout; progress on stderr.
set -euo pipefail

MODE="${1:-all}"
BLZ="${BLZ:-build-bench/cli/blz}"
BENCH="${BENCH:-build-bench/bench}"
MAKE="$BENCH/make_scaling_inputs"
MEASURE="$BENCH/measure_run"
WORK="${WORK:-/tmp/blz-scaling-bench}"
TENSORS="${TENSORS:-5000 10000 20000 40000 100000 200000}"
ARRAYS="${ARRAYS:-5 10 25 50 100}"
REPEAT="${REPEAT:-3}"

for tool in "$BLZ" "$MAKE" "$MEASURE"; do
  if [[ ! -x "$tool" ]]; then
    echo "scaling.sh: $tool not found (build it first, see the comment atop this script)" >&2
    exit 2
  fi
done
case "$MODE" in safetensors | gguf | all) ;; *)
  echo "usage: bench/scaling.sh [safetensors|gguf|all]" >&2
  exit 2
  ;;
esac

rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT

# measure FILE: runs `blz id FILE` REPEAT times; prints "<best wall s> <its cpu s> <max KiB>".
measure() {
  local file="$1" best="" cpu="" peak=0 i wall c kib status
  for ((i = 0; i < REPEAT; i++)); do
    "$MEASURE" --out "$WORK/m" -- "$BLZ" id "$file" >/dev/null
    read -r wall c kib status <"$WORK/m"
    if [[ "$status" != 0 ]]; then
      echo "scaling.sh: blz id $file exited $status" >&2
      exit 1
    fi
    if [[ -z "$best" ]] || awk -v a="$wall" -v b="$best" 'BEGIN { exit !(a < b) }'; then
      best="$wall"
      cpu="$c"
    fi
    ((kib > peak)) && peak="$kib"
  done
  echo "$best $cpu $peak"
}

mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

if [[ "$MODE" == safetensors || "$MODE" == all ]]; then
  echo "| tensors | file bytes | blz id wall s | CPU s | peak RssAnon MiB |"
  echo "|---:|---:|---:|---:|---:|"
  for n in $TENSORS; do
    echo "scaling.sh: safetensors, $n tensors" >&2
    f="$WORK/t$n.safetensors"
    "$MAKE" safetensors "$n" "$f"
    read -r wall cpu kib < <(measure "$f")
    echo "| $n | $(stat -c %s "$f") | $wall | $cpu | $(mib "$kib") |"
    rm -f "$f"
  done
  echo
fi

if [[ "$MODE" == gguf || "$MODE" == all ]]; then
  echo "| u8 array MiB | file bytes | blz id wall s | CPU s | peak RssAnon MiB | RSS / file |"
  echo "|---:|---:|---:|---:|---:|---:|"
  for m in $ARRAYS; do
    echo "scaling.sh: gguf, $m MiB u8 array" >&2
    f="$WORK/a$m.gguf"
    "$MAKE" gguf "$m" "$f"
    size="$(stat -c %s "$f")"
    read -r wall cpu kib < <(measure "$f")
    ratio="$(awk -v k="$kib" -v s="$size" 'BEGIN { printf "%.2f", k * 1024 / s }')"
    echo "| $m | $size | $wall | $cpu | $(mib "$kib") | $ratio |"
    rm -f "$f"
  done
fi
