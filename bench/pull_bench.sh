#!/usr/bin/env bash
# Patch pull CPU and wall (issue 28): on loopback, a client holding the base pulls the
# fine-tune of a generated BF16 Llama-shaped pair three ways, interleaved, REPEAT times each:
#   patch   `blz pull NAME:ft` (the default: a snapshot directory in the store) from a store
#           holding the base (the registry's patch cache warmed first);
#   patch-o the same with `-o DIR` (the model files written to a new directory);
#   full    `blz pull --no-patch NAME:ft` into an empty store (the whole archive blob);
#   curl    `curl -o FILE` of the archive blob from `blz serve` (the floor: no checks).
# Each run goes through bench/measure_run (wall, user+sys CPU, peak RssAnon of the client
# process). Printed: medians per size, and CPU seconds per GB of target (archive bytes).
#
#   bench/pull_bench.sh [SIZE...]     SIZE: 64M, 256M, 1G   (default: 64M 256M)
#
# Environment (defaults in brackets):
#   BLZ      the blz binary (server, pushes, and the client)  [build-bench/cli/blz]
#   CLIENTS  space-separated LABEL=PATH blz binaries to time side by side on the same registry
#            and pushes (e.g. "before=/tmp/blz-old after=build-bench/cli/blz")  [blz=$BLZ]
#   BENCH    directory of gen_llama_pair and measure_run   [build-bench/bench]
#   WORK     scratch directory (removed at exit)  [/tmp/blz-pull-speed]
#   REPEAT   runs of each way per size            [3]
#   PERF     1 = also `perf record -g` one patch pull per size into $PERF_DIR  [0]
#   PERF_DIR where perf.data files and reports go [/tmp/blz-pull-perf]
# Build first (Release, no sanitizers):
#   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLZ_BUILD_BENCH=ON
#   ninja -C build-bench blz gen_llama_pair measure_run
# Not part of CI: timings depend on the machine. Output: a markdown table on stdout.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BLZ="$(realpath "${BLZ:-build-bench/cli/blz}")"
BENCH="$(realpath "${BENCH:-build-bench/bench}")"
WORK="${WORK:-/tmp/blz-pull-speed}"
REPEAT="${REPEAT:-3}"
PERF="${PERF:-0}"
PERF_DIR="${PERF_DIR:-/tmp/blz-pull-perf}"
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(64M 256M)

rm -rf "$WORK"
mkdir -p "$WORK"
serve_pid=""
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "pull_bench: $*" >&2; }

export BLZ_CONFIG_DIR="$WORK/config"
blz_serve_start "$BLZ" "$WORK/serve.out" "$WORK/serve.log" --data "$WORK/registry" \
  --listen 127.0.0.1:0
serve_pid=$blz_pid addr=$blz_addr
export BLZ_TOKEN=$blz_token
log "registry on $addr"

json() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

clients=(${CLIENTS:-blz=$BLZ})
ways=(curl)
for c in "${clients[@]}"; do
  for w in patch patch-o full; do ways+=("${c%%=*}:$w"); done
done
client_path() { for c in "${clients[@]}"; do [ "${c%%=*}" = "$1" ] && realpath "${c#*=}"; done; return 0; }

echo "| size | archive | patch | way | wall s | CPU s | CPU s per GB of target | peak RssAnon MiB |"
echo "|---|---|---|---|---|---|---|---|"
for size in "${sizes[@]}"; do
  log "size $size: generating and pushing"
  rm -rf "$WORK/base" "$WORK/ft"
  # shellcheck disable=SC2046
  "$BENCH/gen_llama_pair" "$WORK/base" "$WORK/ft" $(llama_pair_args "$size") >/dev/null
  "$BLZ" push "$WORK/base" "$addr/bench/m${size,,}:base" --json >"$WORK/push-base.json"
  "$BLZ" push "$WORK/ft" "$addr/bench/m${size,,}:ft" --json >"$WORK/push-ft.json"
  rm -rf "$WORK/base" "$WORK/ft"
  archive=$(json "$WORK/push-ft.json" archive_size)
  digest=$(json "$WORK/push-ft.json" digest)
  # Each client's store holds the base as that client keeps it (since the store keeps a default
  # pull as its files, client/local_store.h, an older client would not see a newer one's base).
  for c in "${clients[@]}"; do
    rm -rf "$WORK/cache0-${c%%=*}"
    "$(client_path "${c%%=*}")" pull "$addr/bench/m${size,,}:base" --cache "$WORK/cache0-${c%%=*}" \
      --json >/dev/null
  done
  rm -rf "$WORK/cache0"
  cp -al "$WORK/cache0-${clients[0]%%=*}" "$WORK/cache0"
  log "size $size: warming the registry's patch cache"
  cp -al "$WORK/cache0" "$WORK/cache-warm"
  "$BLZ" pull "$addr/bench/m${size,,}:ft" --cache "$WORK/cache-warm" --json >"$WORK/warm.json"
  patch=$(json "$WORK/warm.json" bytes_downloaded)
  [ "$(json "$WORK/warm.json" transfer)" = patch ] || { log "warm pull did not use a patch"; exit 1; }
  rm -rf "$WORK/cache-warm"
  "$BLZ" pull --no-patch "$addr/bench/m${size,,}:ft" --cache "$WORK/cache-warm" --json >/dev/null
  rm -rf "$WORK/cache-warm"

  declare -A runs=()
  for r in $(seq 1 "$REPEAT"); do
    for way in "${ways[@]}"; do
      rm -rf "$WORK/c" "$WORK/out" "$WORK/blob"
      bin=$(client_path "${way%%:*}")
      case $way in
        *:patch|*:patch-o) cp -al "$WORK/cache0-${way%%:*}" "$WORK/c";;
      esac
      sync
      case $way in
        *:patch) cmd=("$bin" pull "$addr/bench/m${size,,}:ft" --cache "$WORK/c" --json);;
        *:patch-o) cmd=("$bin" pull "$addr/bench/m${size,,}:ft" --cache "$WORK/c" -o "$WORK/out" --json);;
        *:full) cmd=("$bin" pull --no-patch "$addr/bench/m${size,,}:ft" --cache "$WORK/c" --json);;
        curl) cmd=(curl -sf -H "Authorization: Bearer $BLZ_TOKEN" -o "$WORK/blob"
                   "http://$addr/v2/bench/m${size,,}/blobs/$digest");;
      esac
      "$BENCH/measure_run" --out "$WORK/m" -- "${cmd[@]}" >"$WORK/run.json"
      runs[$way]+="$(cat "$WORK/m");"
    done
  done
  if [ "$PERF" = 1 ]; then
    mkdir -p "$PERF_DIR"
    for c in "${clients[@]}"; do
      label=${c%%=*}
      rm -rf "$WORK/c"; cp -al "$WORK/cache0-$label" "$WORK/c"
      perf record -g -o "$PERF_DIR/pull-$label-$size.data" -- "$(client_path "$label")" pull \
        "$addr/bench/m${size,,}:ft" --cache "$WORK/c" --json >/dev/null 2>"$PERF_DIR/record-$label-$size.log"
      perf report -i "$PERF_DIR/pull-$label-$size.data" --no-children --sort sym --percent-limit 1.5 \
        --stdio 2>/dev/null | grep '%' | grep -v '^#' | grep -v '^ *|' | grep -v -- '---' | head -30 \
        >"$PERF_DIR/report-$label-$size.txt" || true
      log "profile: $PERF_DIR/report-$label-$size.txt"
    done
  fi
  for way in "${ways[@]}"; do
    m=$(measure_medians "$way" "${runs[$way]}") || exit 1
    read -r mw mc mk <<<"$m"
    printf '| %s | %s | %s | %s | %.2f | %.2f | %.2f | %.0f |\n' "$size" "$archive" "$patch" "$way" \
      "$mw" "$mc" "$(python3 -c "print($mc / ($archive / 1e9))")" "$(python3 -c "print($mk / 1024)")"
  done
  unset runs
done
