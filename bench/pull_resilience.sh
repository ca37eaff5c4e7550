#!/usr/bin/env bash
# Pulls over a bad network (issue 12): bytes downloaded and wall time of a pull of a ~1 GB
# generated fine-tune from a client that holds its base, on loopback through
# bench/fault_proxy.py:
#   clean      no faults;
#   cut x5     the connection is cut 5 times, every ~1/6 of the patch;
#   kill -9    `blz pull` is killed with SIGKILL once half of the patch has arrived (the proxy
#              stalls there so the point is exact), then run again;
#   no base    a client with an empty store (the archive's full patch), for scale.
# "downloaded" is what the proxy sent downstream (HTTP bodies and headers of every attempt).
#
#   bench/pull_resilience.sh            (from the repo root)
#
# Environment (defaults in brackets):
#   BLZ     the blz binary                       [build-release/cli/blz]
#   GEN     the gen_llama_pair binary            [build-bench/bench/gen_llama_pair]
#   LAYERS  Llama layers of the pair             [1 -> 0.93 GB of BF16 tensors per model]
#   WORK    scratch directory (removed at exit)  [/tmp/blz-pull-bench]
#   GEN_ARGS extra gen_llama_pair flags (e.g. --hidden 1024 for a quick run) []
# Build first: cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLZ_BUILD_TESTS=OFF
#              ninja -C build-bench blz gen_llama_pair   (then BLZ=build-bench/cli/blz)
# Output: a markdown table on stdout; progress on stderr.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BLZ="$(realpath "${BLZ:-build-release/cli/blz}")"
GEN="$(realpath "${GEN:-build-bench/bench/gen_llama_pair}")"
PROXY="$(realpath bench/fault_proxy.py)"
LAYERS="${LAYERS:-1}"
WORK="${WORK:-/tmp/blz-pull-bench}"

rm -rf "$WORK"
mkdir -p "$WORK"
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "pull_resilience: $*" >&2; }
now() { date +%s.%N; }

log "generating the pair ($LAYERS layers)"
"$GEN" "$WORK/base" "$WORK/ft" --layers "$LAYERS" ${GEN_ARGS:-} >/dev/null

export BLZ_CONFIG_DIR="$WORK/config"
blz_serve_start "$BLZ" "$WORK/serve.out" "$WORK/serve.log" --data "$WORK/registry" \
  --listen 127.0.0.1:0
pids+=("$blz_pid")
addr=$blz_addr
export BLZ_TOKEN=$blz_token
log "registry on $addr"

"$BLZ" push "$WORK/base" "$addr/bench/m:base" --json >"$WORK/push-base.json"
"$BLZ" push "$WORK/ft" "$addr/bench/m:ft" --json >"$WORK/push-ft.json"
rm -rf "$WORK/base" "$WORK/ft"
archive=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["archive_size"])' "$WORK/push-ft.json")

log "client store holding the base"
"$BLZ" pull "$addr/bench/m:base" --cache "$WORK/cache0" --json >/dev/null
log "warming the registry's patch cache"
cp -al "$WORK/cache0" "$WORK/cache-warm"
"$BLZ" pull "$addr/bench/m:ft" --cache "$WORK/cache-warm" --json >"$WORK/warm.json"
patch=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes_downloaded"])' "$WORK/warm.json")
rm -rf "$WORK/cache-warm"

port=0
start_proxy() {  # start_proxy NAME [proxy flags...]: sets $proxy_addr and $proxy_pid
  local name=$1; shift
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  python3 "$PROXY" "$port" "$addr" --stats "$WORK/$name.stats" "$@" >"$WORK/$name.proxy" 2>&1 &
  proxy_pid=$!
  pids+=($proxy_pid)
  for _ in $(seq 1 50); do [ -s "$WORK/$name.stats" ] && break; sleep 0.1; done
  proxy_addr="127.0.0.1:$port"
}
stop_proxy() { kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; }
down() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["down"])' "$WORK/$1.stats"; }

declare -A bytes wall status
run_pull() {  # run_pull NAME CACHE: pulls through $proxy_addr, records wall time and exit code
  local t0 t1 rc=0
  t0=$(now)
  "$BLZ" pull "$proxy_addr/bench/m:ft" --cache "$2" --json >"$WORK/$1.json" 2>"$WORK/$1.err" || rc=$?
  t1=$(now)
  wall[$1]=$(python3 -c "print(f'{$t1 - $t0:.1f}')")
  status[$1]=$rc
}

log "clean pull"
cp -al "$WORK/cache0" "$WORK/cache-clean"
start_proxy clean
run_pull clean "$WORK/cache-clean"
stop_proxy
bytes[clean]=$(down clean)

log "pull cut 5 times"
cp -al "$WORK/cache0" "$WORK/cache-cut"
start_proxy cut --cut-after $((patch / 6)) --cuts 5
run_pull cut "$WORK/cache-cut"
stop_proxy
bytes[cut]=$(down cut)

log "kill -9 at 50%, then a re-run"
cp -al "$WORK/cache0" "$WORK/cache-kill"
start_proxy kill1 --stall-after $((patch / 2)) --stall-seconds 600
t0=$(now)
"$BLZ" pull "$proxy_addr/bench/m:ft" --cache "$WORK/cache-kill" >/dev/null 2>"$WORK/kill1.err" &
victim=$!
for _ in $(seq 1 6000); do
  [ "$(down kill1)" -ge $((patch / 2)) ] && break
  sleep 0.05
done
kill -9 "$victim" 2>/dev/null || true
wait "$victim" 2>/dev/null || true
stop_proxy
first=$(down kill1)
start_proxy kill2
run_pull kill "$WORK/cache-kill"
stop_proxy
t1=$(now)
bytes[kill]=$((first + $(down kill2)))
wall[kill]=$(python3 -c "print(f'{$t1 - $t0:.1f}')")
kill_first=$first

log "no base (empty store)"
start_proxy nobase
run_pull nobase "$WORK/cache-empty"
stop_proxy
bytes[nobase]=$(down nobase)

mib() { python3 -c "print(f'{$1/1048576:.1f}')"; }
pct() { python3 -c "print(f'{100*$1/$2:.1f}')"; }
echo "Archive (full size): $archive bytes ($(mib "$archive") MiB); patch from the held base: $patch bytes ($(mib "$patch") MiB)."
echo
echo "| pull | exit | downloaded | of the patch | of the full size | wall |"
echo "|---|---|---|---|---|---|"
for k in clean cut kill nobase; do
  label=$k
  case $k in
    clean) label="clean (base held)";;
    cut) label="cut 5 times (base held)";;
    kill) label="kill -9 at 50% + re-run (base held; first run sent $(mib "$kill_first") MiB)";;
    nobase) label="no base (full patch)";;
  esac
  echo "| $label | ${status[$k]} | $(mib "${bytes[$k]}") MiB | $(pct "${bytes[$k]}" "$patch")% | $(pct "${bytes[$k]}" "$archive")% | ${wall[$k]} s |"
done
