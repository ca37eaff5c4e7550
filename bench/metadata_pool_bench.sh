#!/usr/bin/env bash
# Issue 25: manifest GETs per second at concurrency 64 against ONE `blz serve` on PostgreSQL
# (file storage, so only the metadata path differs), for two blz binaries, runs interleaved
# (A, B, A, B, ...) so that both see the same machine load; prints the runs and the medians.
# Made to measure MetadataDb's connection pool (store/sql_pool.h) against the single
# connection it replaced; any two builds can be compared.
#
#   A=/path/to/old/blz B=build-release/cli/blz bash bench/metadata_pool_bench.sh
#
# Environment: A, B (blz binaries, required), RUNS [5] per binary, LOAD_SECONDS [10],
# B_METADATA_PARAMS [""] (appended to B's postgresql:// URL, e.g. "?pool=16"), SERVE_ARGS [""]
# (more `blz serve` flags for both, e.g. "--threads 16": the handler threads default to the
# number of cores, which bounds how many metadata calls run at once).
# Needs PostgreSQL 15 (tests/store/postgres/postgres_server.sh; exit 77 without it).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
A=$(realpath "$A"); B=$(realpath "$B")
RUNS=${RUNS:-5}
LOAD_SECONDS=${LOAD_SECONDS:-10}
WORK=$(mktemp -d)
chmod 711 "$WORK"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  bash tests/store/postgres/postgres_server.sh stop "$WORK/pg" > /dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "metadata_pool_bench: $*" >&2; }

status=0
bash tests/store/postgres/postgres_server.sh start "$WORK/pg" > /dev/null || status=$?
[ "$status" -eq 77 ] && { log "SKIPPED: PostgreSQL is not installed"; exit 77; }
[ "$status" -eq 0 ] || exit 2

python3 - "$WORK/model" <<'PY'
import json, os, struct, sys
out = sys.argv[1]; os.makedirs(out)
header = {"w": {"dtype": "BF16", "shape": [64, 64], "data_offsets": [0, 8192]}}
raw = json.dumps(header, separators=(",", ":")).encode(); raw += b" " * ((8 - len(raw) % 8) % 8)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(raw)) + raw + bytes([0x00, 0x3f]) * 4096)
json.dump({"model_type": "llama"}, open(os.path.join(out, "config.json"), "w"))
PY

declare -A url token
for who in A B; do
  db=$(bash tests/store/postgres/postgres_server.sh createdb "$WORK/pg" "bench_$who")
  params=""
  [ "$who" = B ] && params=${B_METADATA_PARAMS:-}
  bin=$A; [ "$who" = B ] && bin=$B
  # shellcheck disable=SC2086
  blz_serve_start "$bin" "$WORK/$who.out" "$WORK/$who.err" --data "$WORK/$who" \
    --listen 127.0.0.1:0 --metadata "$db$params" ${SERVE_ARGS:-}
  pids+=("$blz_pid")
  url[$who]=$blz_url token[$who]=$blz_token
  BLZ_TOKEN=${token[$who]} BLZ_CACHE_DIR=$WORK/client-$who BLZ_CONFIG_DIR=$WORK/config-$who \
    "$bin" push "$WORK/model" "${url[$who]#http://}/bench/m:r1" -q > /dev/null
  log "$who: $bin at ${url[$who]}"
done

for run in $(seq 1 "$RUNS"); do
  for who in A B; do
    out=$(python3 bench/http_load.py "${url[$who]}/v2/bench/m/manifests/r1" -c 64 -d "$LOAD_SECONDS" \
      -H "Authorization: Bearer ${token[$who]}" -H 'Accept: application/vnd.oci.image.manifest.v1+json')
    echo "$who $out" | tee -a "$WORK/runs" >&2
  done
done
python3 - "$WORK/runs" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    who, js = line.split(" ", 1)
    r = json.loads(js)
    if r["non_200"] or r["errors"]:
        sys.exit(f"{who}: {r['non_200']} non-200 answers, {r['errors']} errors")
    rows.setdefault(who, []).append(r)
for who, rs in rows.items():
    rps = [r["rps"] for r in rs]
    print(f"{who}: manifest GETs/s (c=64) median {statistics.median(rps):.0f}, "
          f"range {min(rps):.0f}-{max(rps):.0f}, p50 median "
          f"{statistics.median(r['p50_ms'] for r in rs):.1f} ms ({len(rs)} runs)")
PY
