#!/usr/bin/env bash
# Issue 25: SQLite + local files next to PostgreSQL + S3 (Ceph RGW), on one machine.
#   - push and pull throughput (MB/s of the model's bytes, wall time of `blz push` / `blz pull
#     --no-patch` from an empty client store) of a generated ~SIZE_MB model (BF16 noise, a new
#     one per run, so nothing is deduplicated); with S3 the pull is measured twice: "cold"
#     (the replica's local blob cache emptied first: the bytes come from the bucket) and
#     "warm" (from the replica's cache);
#   - manifest GETs per second at concurrency 64 (bench/http_load.py, keep-alive connections)
#     against one `blz serve` on SQLite, one replica on PostgreSQL + S3 directly, nginx over
#     2 replicas, and nginx over 2 replicas with one of them killed.
# Every measurement RUNS times; the table gives the median and the range.
#
#   BLZ=build-release/cli/blz bash bench/cluster_bench.sh     (from the repo root)
#
# Environment (defaults in brackets):
#   BLZ           the blz binary (a Release build)   [build-release/cli/blz]
#   SIZE_MB       model size                         [256]
#   RUNS          runs of each measurement           [3]
#   LOAD_SECONDS  length of one manifest-GET run     [10]
#   WORK          scratch directory (removed at exit) [mktemp -d]
# Build: cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLZ_BUILD_TESTS=OFF
#        && ninja -C build-release blz
# Needs PostgreSQL 15, Ceph (radosgw) and nginx as scripts/cluster.sh does (exit 77 without).
# Output: a markdown table on stdout; progress on stderr; raw results in WORK/results.jsonl
# (kept when KEEP=1).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
BLZ=$(realpath "${BLZ:-build-release/cli/blz}")
SIZE_MB=${SIZE_MB:-256}
RUNS=${RUNS:-3}
LOAD_SECONDS=${LOAD_SECONDS:-10}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"
chmod 711 "$WORK"   # PostgreSQL runs as another user when this runs as root
results=$WORK/results.jsonl
: > "$results"
single_pid=""
cleanup() {
  [ -n "$single_pid" ] && kill "$single_pid" 2>/dev/null || true
  bash scripts/cluster.sh stop "$WORK/cluster" || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "cluster_bench: $*" >&2; }
now() { date +%s.%N; }
record() { echo "{\"what\": \"$1\", \"value\": $2}" >> "$results"; log "$1: $2"; }

# gen_model DIR SEED: SIZE_MB of BF16 noise in 16 tensors (no NaN/Inf), config.json.
gen_model() {
  python3 - "$1" "$SIZE_MB" "$2" <<'EOF'
import json, os, random, struct, sys
out, mb, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(out, exist_ok=True)
rng, n = random.Random(seed), 16
per = (mb << 20) // n // 2048 * 2048
header, off = {}, 0
for i in range(n):
    header[f"layers.{i}.weight"] = {"dtype": "BF16", "shape": [per // 2048, 1024],
                                    "data_offsets": [off, off + per]}
    off += per
raw = json.dumps(header, separators=(",", ":")).encode()
raw += b" " * ((8 - len(raw) % 8) % 8)
mask = int.from_bytes(b"\xff\xbf" * (per // 2), "little")  # exponent < max: no NaN/Inf
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(raw)))
    f.write(raw)
    for _ in range(n):
        f.write((int.from_bytes(rng.randbytes(per), "little") & mask).to_bytes(per, "little"))
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump({"model_type": "llama", "bench_seed": seed}, f)
EOF
}


# push_pull LABEL URL TOKEN [CACHE_DIR_TO_EMPTY]: RUNS pushes and pulls of fresh models.
push_pull() {
  local label=$1 url=$2 token=$3 cache=${4:-} run bytes t0 t1 seed
  for run in $(seq 1 "$RUNS"); do
    seed=$((RANDOM * 32768 + RANDOM))
    rm -rf "$WORK/model" "$WORK/client" "$WORK/out"
    gen_model "$WORK/model" "$seed"
    bytes=$(du -cb "$WORK/model"/* | tail -1 | cut -f1)
    t0=$(now)
    BLZ_TOKEN=$token BLZ_CACHE_DIR=$WORK/client/push BLZ_CONFIG_DIR=$WORK/client/config \
      "$BLZ" push "$WORK/model" "${url#http://}/bench/m:r$run" -q > /dev/null
    t1=$(now)
    record "$label push MB/s" "$(python3 -c "print(round($bytes / 1e6 / ($t1 - $t0), 1))")"
    blz_wait_idle "$url" "$token"
    local kinds=("")
    [ -n "$cache" ] && kinds=(cold warm)
    local kind
    for kind in "${kinds[@]}"; do
      [ "$kind" = cold ] && find "$cache" -type f -delete
      rm -rf "$WORK/out" "$WORK/client/pull"
      t0=$(now)
      BLZ_TOKEN=$token BLZ_CACHE_DIR=$WORK/client/pull BLZ_CONFIG_DIR=$WORK/client/config \
        "$BLZ" pull "${url#http://}/bench/m:r$run" -o "$WORK/out" --no-patch -q > /dev/null
      t1=$(now)
      cmp -s "$WORK/out/model.safetensors" "$WORK/model/model.safetensors" ||
        { log "$label: the pull differs from the push"; exit 1; }
      record "$label pull${kind:+ ($kind)} MB/s" "$(python3 -c "print(round($bytes / 1e6 / ($t1 - $t0), 1))")"
    done
  done
}

# manifest_load LABEL URL TOKEN: RUNS runs of 64 connections GETting one manifest.
manifest_load() {
  local label=$1 url=$2 token=$3 run out
  for run in $(seq 1 "$RUNS"); do
    out=$(python3 bench/http_load.py "$url/v2/bench/m/manifests/r1" -c 64 -d "$LOAD_SECONDS" \
      -H "Authorization: Bearer $token" -H 'Accept: application/vnd.oci.image.manifest.v1+json')
    echo "{\"what\": \"$label manifest GET/s\", \"load\": $out}" >> "$results"
    log "$label manifest GETs: $out"
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r["non_200"] == 0 else 1)' "$out" ||
      { log "$label: some manifest GETs were not 200"; exit 1; }
  done
}

# 1. One box: SQLite + files.
blz_serve_start "$BLZ" "$WORK/single.out" "$WORK/single.err" --data "$WORK/single" \
  --listen 127.0.0.1:0 || exit 1
single_pid=$blz_pid url=$blz_url token=$blz_token
log "SQLite + file at $url"
push_pull "SQLite+file" "$url" "$token"
manifest_load "SQLite+file, 1 server" "$url" "$token"
kill "$single_pid"; wait "$single_pid" 2>/dev/null || true; single_pid=""

# 2. PostgreSQL + S3: 2 replicas behind nginx; push and pull against replica 1 directly.
status=0
settings=$(CEPH_S3_STORE_BYTES=$((8 << 30)) bash scripts/cluster.sh start "$WORK/cluster" 2 "$BLZ") || status=$?
[ "$status" -eq 77 ] && { log "SKIPPED: PostgreSQL, Ceph or nginx is not installed"; exit 77; }
[ "$status" -eq 0 ] || { log "the cluster did not start"; exit 2; }
eval "$settings"
read -r r1 _ <<< "$BLZ_CLUSTER_REPLICAS"
push_pull "PostgreSQL+S3" "$r1" "$BLZ_CLUSTER_TOKEN" "$BLZ_CLUSTER_DIR/r1/data/cache/blobs"
manifest_load "PostgreSQL+S3, 1 replica (direct)" "$r1" "$BLZ_CLUSTER_TOKEN"
manifest_load "PostgreSQL+S3, 2 replicas behind nginx" "$BLZ_CLUSTER_URL" "$BLZ_CLUSTER_TOKEN"
bash scripts/cluster.sh kill "$BLZ_CLUSTER_DIR" 2
manifest_load "PostgreSQL+S3, nginx over 2 replicas, 1 killed" "$BLZ_CLUSTER_URL" "$BLZ_CLUSTER_TOKEN"

# The table: median [min-max] of the runs.
python3 - "$results" "$SIZE_MB" "$RUNS" "$(nproc)" <<'EOF'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    v = r["load"]["rps"] if "load" in r else r["value"]
    rows.setdefault(r["what"], []).append(v)
print(f"| measurement ({sys.argv[2]} MB model; {sys.argv[3]} runs, {sys.argv[4]} cores) | median | range |")
print("|---|---:|---:|")
for what, vs in rows.items():
    print(f"| {what} | {statistics.median(vs):.1f} | {min(vs):.1f}-{max(vs):.1f} |")
EOF
