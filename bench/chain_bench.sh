#!/usr/bin/env bash
# Issue 27, "rebuild throughput of the deepest version and pull latency of a chained version vs
# a whole one": a generated BF16 model (TENSORS tensors of 1024 x COLS, so TENSORS x COLS x 2 KiB)
# and STEPS small training-like steps (F32 master weights N(0, 0.02), + N(0, 2e-5) per value and
# step, cast to BF16), pushed in order into one repository of a fresh `blz serve` (SQLite + local
# files, default chain settings: depth <= 4), so that later versions are stored as chain links
# and the first as its full patch. Then, REPEAT times for each version: the server is restarted
# with its archive cache emptied, and the version's archive blob is downloaded (curl, the OCI
# blob GET `blz pull --no-patch` makes) twice in a row: "cold" (the registry rebuilds the
# archive from its stored form, the whole chain down to the full patch) and "warm" (served from
# its cache). The table gives each version's stored form and depth, the medians (of the whole
# GET and of its first byte, curl's time_starttransfer), and the rebuild throughput = archive
# bytes / (cold - warm).
#
#   bash bench/chain_bench.sh                      (from the repo root)
#
# Environment (defaults in brackets):
#   BLZ      the blz binary             [build-release/cli/blz, else build-test/cli/blz]
#   TENSORS, COLS, STEPS, REPEAT        [8, 2048, 5, 3]
#   WORK     scratch directory (removed at exit unless KEEP=1) [mktemp -d]
# Needs /usr/bin/python3 with numpy. Not part of CI. Output: a markdown table on stdout.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
blz_bench_init chain_bench
TENSORS=${TENSORS:-8} COLS=${COLS:-2048} STEPS=${STEPS:-5} REPEAT=${REPEAT:-3}
"$PY" -c 'import numpy' 2>/dev/null || { log "$PY has no numpy"; exit 77; }
export BLZ_CONFIG_DIR=$WORK/config

log "generating $STEPS versions of $TENSORS x 1024 x $COLS BF16 in $WORK/in"
"$PY" bench/bf16_series.py "$WORK/in" "$STEPS" "$TENSORS" 1024 "$COLS"

start() {
  blz_serve_start "$BLZ" "$WORK/serve.out" "$WORK/serve.err" --data "$WORK/data" \
    --listen 127.0.0.1:0 || exit 1
  server_pid=$blz_pid url=$blz_url
  [ -n "$blz_token" ] && token=$blz_token
  return 0
}
stop() { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""; }

start
i=0
for dir in "$WORK/in"/step-*; do
  i=$((i + 1))
  BLZ_TOKEN=$token BLZ_CACHE_DIR=$WORK/pusher "$BLZ" push -q --json "$dir" \
    "${url#http://}/bench/m:v$i" |
    "$PY" -c 'import json,sys; print(sys.argv[1], json.load(sys.stdin)["digest"])' "v$i" \
    >> "$WORK/digests"
done
blz_wait_idle "$url" "$token" 4800
curl -sf -H "Authorization: Bearer $token" "$url/v2/_blz/storage?repository=bench/m" \
  > "$WORK/storage.json"

: > "$WORK/times"
for r in $(seq 1 "$REPEAT"); do
  while read -r v digest; do
    stop  # a fresh process with an empty cache: nothing of any version is rebuilt yet
    rm -rf "$WORK/data/cache"
    start
    for kind in cold warm; do
      t=$(curl -sf -o /dev/null -w '%{time_total} %{time_starttransfer}' \
        -H "Authorization: Bearer $token" "$url/v2/bench/m/blobs/$digest")
      echo "$v $kind $t" >> "$WORK/times"
    done
  done < "$WORK/digests"
  log "round $r done"
done

"$PY" - "$WORK/storage.json" "$WORK/times" "$i" "$WORK/digests" <<'EOF'
import json, statistics, sys
storage = json.load(open(sys.argv[1]))["repositories"][0]
n = int(sys.argv[3])
digest_of = dict(line.split() for line in open(sys.argv[4]))
times, first = {}, {}
for line in open(sys.argv[2]):
    v, kind, t, f = line.split()
    times.setdefault((v, kind), []).append(float(t))
    first.setdefault((v, kind), []).append(float(f))
by_digest = {a["digest"]: a for a in storage["by_archive"]}
print("| version | stored as | depth | archive | cold GET (rebuild) | cold first byte | warm GET (cached) | rebuild throughput |")
print("|---|---|---|---|---|---|---|---|")
for k in range(1, n + 1):
    v = f"v{k}"
    a = by_digest.get(digest_of[v], {})
    size = a.get("model_bytes", 0)
    cold = statistics.median(times[(v, "cold")])
    warm = statistics.median(times[(v, "warm")])
    rebuild = cold - warm
    tput = f"{size / rebuild / 1e6:.0f} MB/s" if rebuild > 0 else "-"
    cold_first = statistics.median(first[(v, "cold")])
    print(f"| {v} | {a.get('form', '?')} | {a.get('depth', 0)} | {size / 1e6:.1f} MB | "
          f"{cold:.3f} s | {cold_first:.3f} s | {warm:.3f} s | {tput} |")
EOF
