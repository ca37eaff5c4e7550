#!/usr/bin/env bash
# `blz apply` and `blz diff` on model directories against the same commands on their packed
# archives (issue 28: "diff and apply on model directories within 1.1x of archive-to-archive").
# For each size a generated BF16 Llama-shaped pair (bench/gen_llama_pair: base and fine-tune
# directories) is packed once and diffed once (the patch every apply uses), then, interleaved,
# REPEAT times each, for every client binary:
#   apply a2a   `blz apply A.blz P -o B.blz`        archive to archive (the reference)
#   apply d2d   `blz apply A/ P -o B/`              model directory to model directory
#   apply a2d   `blz apply A.blz P -o B/`           archive to model directory
#   diff a2a    `blz diff A.blz B.blz -o P`         archives
#   diff d2d    `blz diff A/ B/ -o P`               model directories
# and `zstd -d --long=31 --patch-from=A.blz` of a `zstd -3 --long=31 --patch-from` patch (the
# outside reference for apply). Every output is checked (cmp / diff -r) once per binary.
# Each run goes through bench/measure_run (wall, user+sys CPU, peak RssAnon).
#
#   bench/dir_apply_bench.sh [SIZE...]     SIZE: 64M, 256M, 1G   (default: 64M 256M)
#
# Environment (defaults in brackets):
#   BLZ      the blz binary                                  [build-bench/cli/blz]
#   CLIENTS  space-separated LABEL=PATH binaries timed side by side
#            (e.g. "before=/tmp/blz-old after=build-bench/cli/blz")  [blz=$BLZ]
#   BENCH    directory of gen_llama_pair and measure_run     [build-bench/bench]
#   WORK     scratch directory (removed at exit)             [/dev/shm/blz-dir-apply]
#   REPEAT   runs of each command per size                   [3]
# Build first (Release, no sanitizers):
#   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLZ_BUILD_BENCH=ON
#   ninja -C build-bench blz gen_llama_pair measure_run
# Not part of CI: timings depend on the machine. Output: a markdown table on stdout.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BLZ="$(realpath "${BLZ:-build-bench/cli/blz}")"
BENCH="$(realpath "${BENCH:-build-bench/bench}")"
WORK="${WORK:-/dev/shm/blz-dir-apply}"
REPEAT="${REPEAT:-3}"
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(64M 256M)

rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT
log() { echo "dir_apply_bench: $*" >&2; }

clients=(${CLIENTS:-blz=$BLZ})
client_path() { for c in "${clients[@]}"; do [ "${c%%=*}" = "$1" ] && realpath "${c#*=}"; done; return 0; }
ways=(zstd)
for c in "${clients[@]}"; do
  for w in apply-a2a apply-d2d apply-a2d diff-a2a diff-d2d; do ways+=("${c%%=*}:$w"); done
done

echo "| size | way | wall s | CPU s | wall / a2a | CPU / a2a | peak RssAnon MiB |"
echo "|---|---|---|---|---|---|---|"
for size in "${sizes[@]}"; do
  log "size $size: generating, packing, diffing"
  d="$WORK/$size"
  rm -rf "$d"; mkdir -p "$d"
  # shellcheck disable=SC2046
  "$BENCH/gen_llama_pair" "$d/A" "$d/B" $(llama_pair_args "$size") >/dev/null
  "$BLZ" pack "$d/A" -o "$d/A.blz" >/dev/null
  "$BLZ" pack "$d/B" -o "$d/B.blz" >/dev/null
  "$BLZ" diff "$d/A.blz" "$d/B.blz" -o "$d/P" >/dev/null
  zstd -q -3 --long=31 --patch-from="$d/A.blz" "$d/B.blz" -o "$d/Z" -T0
  for c in "${clients[@]}"; do  # every output checked once per binary
    bin=$(client_path "${c%%=*}")
    rm -rf "$d/o"*
    "$bin" apply "$d/A" "$d/P" -o "$d/o.blz" >/dev/null && cmp "$d/o.blz" "$d/B.blz"
    "$bin" apply "$d/A" "$d/P" -o "$d/od" >/dev/null && diff -r "$d/od" "$d/B"
    "$bin" diff "$d/A" "$d/B" -o "$d/op" >/dev/null
    "$bin" apply "$d/A.blz" "$d/op" -o "$d/o2.blz" >/dev/null && cmp "$d/o2.blz" "$d/B.blz"
  done
  rm -rf "$d/o"*
  declare -A runs=()
  for r in $(seq 1 "$REPEAT"); do
    for way in "${ways[@]}"; do
      rm -rf "$d/o"*
      bin=$(client_path "${way%%:*}")
      case $way in
        zstd) cmd=(zstd -q -d --long=31 --patch-from="$d/A.blz" "$d/Z" -o "$d/o.blz");;
        *:apply-a2a) cmd=("$bin" apply "$d/A.blz" "$d/P" -o "$d/o.blz");;
        *:apply-d2d) cmd=("$bin" apply "$d/A" "$d/P" -o "$d/od");;
        *:apply-a2d) cmd=("$bin" apply "$d/A.blz" "$d/P" -o "$d/od");;
        *:diff-a2a) cmd=("$bin" diff "$d/A.blz" "$d/B.blz" -o "$d/op");;
        *:diff-d2d) cmd=("$bin" diff "$d/A" "$d/B" -o "$d/op");;
      esac
      sync
      "$BENCH/measure_run" --out "$d/m" -- "${cmd[@]}" >/dev/null
      runs[$way]+="$(cat "$d/m");"
    done
  done
  declare -A mwall=() mcpu=() mrss=()
  for way in "${ways[@]}"; do
    m=$(measure_medians "$way" "${runs[$way]}") || exit 1
    read -r "mwall[$way]" "mcpu[$way]" "mrss[$way]" <<<"$m"
  done
  for way in "${ways[@]}"; do
    label=${way%%:*}
    ref=$label:apply-a2a
    case $way in *diff-*) ref=$label:diff-a2a;; zstd) ref=${clients[0]%%=*}:apply-a2a;; esac
    rw=$(/usr/bin/python3 -c "print(f'{${mwall[$way]}/${mwall[$ref]}:.2f}')")
    rc=$(/usr/bin/python3 -c "print(f'{${mcpu[$way]}/${mcpu[$ref]}:.2f}')")
    echo "| $size | $way | ${mwall[$way]} | ${mcpu[$way]} | $rw | $rc | $(/usr/bin/python3 -c "print(round(${mrss[$way]}/1024))") |"
  done
  unset runs mwall mcpu mrss
  rm -rf "$d"
done
