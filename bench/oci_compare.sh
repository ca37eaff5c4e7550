#!/usr/bin/env bash
# Issue 28: push (and a minimal pull) of the same bytes through blz and through CNCF
# distribution + skopeo, side by side on one machine (loopback).
#
#   bench/oci_compare.sh [push|pull|all]                 (from the repo root; default: push)
#   SIZES="64 256 1024" RUNS=3 BLZ=build-bench/cli/blz bench/oci_compare.sh push
#
# Environment (defaults in brackets):
#   BLZ     the blz binary (a Release build, no sanitizers)      [build-bench/cli/blz]
#   BEFORE  an older blz binary, pushed too in every push run (rows "blz_before_*"), so that a
#           change is measured interleaved with what it replaces     [none]
#   GEN     bench/gen_llama_pair                                  [build-bench/bench/gen_llama_pair]
#   SIZES   model sizes in MB (approximate; see below)            [64 256]
#   RUNS    runs of each measurement (interleaved; medians)       [3]
#   WORK    scratch directory (removed at exit unless KEEP=1)     [/dev/shm/blz-oci-compare]
#   REGISTRY  the distribution binary                             [docker-registry]
#   MODELS  where the packed models are kept between invocations (so two blz builds push the
#           very same archives; reused when present)                [WORK/models, removed]
# Build: cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLZ_BUILD_BENCH=ON
#        && ninja -C build-bench blz gen_llama_pair
# Needs skopeo (scripts/setup.sh) and distribution 2.8.2 (Debian `docker-registry`; installed
# here with apt-get when missing and running as root). Not part of CI.
#
# Models: `gen_llama_pair` base models, BF16, hidden 1024, intermediate 2816, vocab 4096, with
# 2 / 9 / 39 layers for 64 / 256 / 1024 (68, 248, 1019 MB of tensors), packed once with
# `blz pack`. The same .blz archive is what both sides move:
#   blz      `blz push ARCHIVE.blz 127.0.0.1:P/bench/m:rN --no-patch` into a fresh `blz serve`
#            (SQLite + file storage under WORK);
#   skopeo   `skopeo copy --preserve-digests oci:LAYOUT:v1 docker://127.0.0.1:P/bench/m:rN
#            --dest-tls-verify=false` into a fresh distribution (filesystem storage under WORK),
#            LAYOUT an OCI image layout whose one layer is the archive (hard link, no copy;
#            --preserve-digests: skopeo sends the bytes as they are instead of gzipping them).
# Each run starts both registries fresh (empty storage), so nothing is deduplicated. Measured:
# wall time of the client command, and the server's CPU seconds (utime + stime from
# /proc/PID/stat) between just before the command and its end; for blz also the CPU the
# server spends after the push returned, until its background storage work is done
# (GET /v2/_blz/storage "pending" 0: the archive's compression into a full patch).
# Pull mode (kept minimal): from a registry holding the archive, `curl` of the blob, `skopeo
# copy` out to an OCI layout, and `blz pull --no-patch` (unpack included) into an empty store.
# Output: markdown tables on stdout (median and range of RUNS), progress on stderr, raw lines
# in WORK/results.txt.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
MODE=${1:-push}
BLZ=$(realpath "${BLZ:-build-bench/cli/blz}")
GEN=$(realpath "${GEN:-build-bench/bench/gen_llama_pair}")
SIZES=${SIZES:-64 256}
RUNS=${RUNS:-3}
WORK=${WORK:-/dev/shm/blz-oci-compare}
REGISTRY=${REGISTRY:-docker-registry}
TICK=$(getconf CLK_TCK)

if ! command -v "$REGISTRY" >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y docker-registry >&2
  fi
  command -v "$REGISTRY" >/dev/null || { echo "oci_compare: missing $REGISTRY (apt-get install docker-registry)" >&2; exit 77; }
fi
for tool in skopeo curl python3; do
  command -v "$tool" >/dev/null || { echo "oci_compare: missing $tool" >&2; exit 77; }
done
[ -x "$BLZ" ] && [ -x "$GEN" ] || { echo "oci_compare: build blz and gen_llama_pair first (see atop this script)" >&2; exit 2; }

rm -rf "$WORK"
mkdir -p "$WORK"
results=$WORK/results.txt
: > "$results"
server_pid=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
cleanup() {
  stop_server
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "oci_compare [$(date +%T)]: $*" >&2; }
now() { date +%s.%N; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
record() {  # WHAT SIZE VALUE
  echo "$1 $2 $3" >> "$results"
  log "$1 size=$2: $3"
}

# ---- models: one packed archive per size, and an OCI layout holding it as its layer ----
MODELS=${MODELS:-$WORK/models}
layers_for() { case $1 in 64) echo 2 ;; 256) echo 9 ;; 1024) echo 39 ;; *) echo $(( $1 / 26 )) ;; esac; }
prepare_model() {  # SIZE
  local size=$1 dir=$MODELS/model-$1
  if [ -f "$dir/hex" ]; then log "model $size MB: reusing $dir"; return 0; fi
  rm -rf "$dir"
  mkdir -p "$dir"
  "$GEN" "$dir/base" "$dir/ft" --layers "$(layers_for "$size")" --hidden 1024 \
    --intermediate 2816 --vocab 4096 --seed "$((20261127 + size))" 2>/dev/null
  rm -rf "$dir/ft"
  BLZ_CACHE_DIR=$dir/pack-cache "$BLZ" pack "$dir/base" -o "$dir/model.blz" -q > /dev/null
  rm -rf "$dir/base" "$dir/pack-cache"
  local archive=$dir/model.blz layout=$dir/oci
  local hex bytes config config_hex manifest manifest_hex
  hex=$(sha256sum "$archive" | cut -d' ' -f1)
  bytes=$(stat -c %s "$archive")
  mkdir -p "$layout/blobs/sha256"
  ln "$archive" "$layout/blobs/sha256/$hex"
  config='{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":["sha256:'$hex'"]}}'
  printf '%s' "$config" > "$layout/config.json"
  config_hex=$(sha256sum "$layout/config.json" | cut -d' ' -f1)
  mv "$layout/config.json" "$layout/blobs/sha256/$config_hex"
  manifest='{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:'$config_hex'","size":'${#config}'},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:'$hex'","size":'$bytes'}]}'
  printf '%s' "$manifest" > "$layout/manifest.json"
  manifest_hex=$(sha256sum "$layout/manifest.json" | cut -d' ' -f1)
  mv "$layout/manifest.json" "$layout/blobs/sha256/$manifest_hex"
  printf '{"imageLayoutVersion":"1.0.0"}' > "$layout/oci-layout"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%d,"annotations":{"org.opencontainers.image.ref.name":"v1"}}]}' \
    "$manifest_hex" "${#manifest}" > "$layout/index.json"
  echo "$bytes" > "$dir/bytes"
  echo "$hex" > "$dir/hex"
  log "model $size MB: archive $bytes bytes sha256:$hex"
}

# ---- servers (fresh storage each time) ----
start_blz() {  # DATA_DIR [BIN]; sets server_pid, url, token
  rm -rf "$1"
  blz_serve_start "${2:-$BLZ}" "$1.out" "$1.err" --data "$1" --listen 127.0.0.1:0 || exit 1
  server_pid=$blz_pid url=$blz_url token=$blz_token
}
start_distribution() {  # DATA_DIR; sets server_pid, url
  rm -rf "$1"
  mkdir -p "$1"
  local port
  port=$(free_port)
  cat > "$1.yml" <<EOF
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $1
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
EOF
  "$REGISTRY" serve "$1.yml" > "$1.out" 2>&1 &
  server_pid=$!
  url=http://127.0.0.1:$port
  for _ in $(seq 1 200); do curl -sf "$url/v2/" > /dev/null && return 0; sleep 0.05; done
  log "distribution did not start: $(cat "$1.out")"; exit 1
}

# ---- push ----
push_blz() {  # SIZE RUN [BIN LABEL]
  local size=$1 run=$2 dir=$MODELS/model-$1 bin=${3:-$BLZ} label=${4:-blz} t0 t1 c0 c1 c2 bytes
  local hex put_ms
  bytes=$(cat "$dir/bytes")
  hex=$(cat "$dir/hex")
  start_blz "$WORK/blz-data" "$bin"
  rm -rf "$WORK/client"
  c0=$(cpu_ticks "$server_pid")
  t0=$(now)
  BLZ_TOKEN=$token BLZ_CACHE_DIR=$WORK/client/cache BLZ_CONFIG_DIR=$WORK/client/config \
    "$bin" push "$dir/model.blz" "${url#http://}/bench/m:r$run" --no-patch -q > /dev/null
  t1=$(now)
  c1=$(cpu_ticks "$server_pid")
  blz_wait_idle "$url" "$token" 2400
  c2=$(cpu_ticks "$server_pid")
  stop_server
  # The closing PUT of the archive's upload session, from the access log (last field: "12.3ms").
  put_ms=$(grep " PUT /v2/bench/m/blobs/uploads/[^ ]*digest=sha256:$hex " "$WORK/blz-data.err" |
    awk '{sub(/ms$/, "", $NF); print $NF}' | tail -n1)
  record "${label}_push_wall_s" "$size" "$(python3 -c "print(round($t1 - $t0, 3))")"
  record "${label}_push_MBps" "$size" "$(python3 -c "print(round($bytes / 1e6 / ($t1 - $t0), 1))")"
  [ -n "$put_ms" ] && record "${label}_closing_put_ms" "$size" "$put_ms"
  record "${label}_push_server_cpu_s_per_GB" "$size" "$(python3 -c "print(round(($c1 - $c0) / $TICK / ($bytes / 1e9), 2))")"
  record "${label}_background_cpu_s_per_GB" "$size" "$(python3 -c "print(round(($c2 - $c1) / $TICK / ($bytes / 1e9), 2))")"
}
push_skopeo() {  # SIZE RUN
  local size=$1 run=$2 dir=$MODELS/model-$1 t0 t1 c0 c1 bytes
  bytes=$(cat "$dir/bytes")
  start_distribution "$WORK/dist-data"
  c0=$(cpu_ticks "$server_pid")
  t0=$(now)
  skopeo copy -q --preserve-digests --dest-tls-verify=false "oci:$dir/oci:v1" \
    "docker://${url#http://}/bench/m:r$run" > /dev/null
  t1=$(now)
  c1=$(cpu_ticks "$server_pid")
  stop_server
  record "skopeo_push_wall_s" "$size" "$(python3 -c "print(round($t1 - $t0, 3))")"
  record "skopeo_push_MBps" "$size" "$(python3 -c "print(round($bytes / 1e6 / ($t1 - $t0), 1))")"
  record "distribution_push_server_cpu_s_per_GB" "$size" "$(python3 -c "print(round(($c1 - $c0) / $TICK / ($bytes / 1e9), 2))")"
}

# ---- pull (minimal: the full bytes out of a registry that holds them) ----
pull_all() {  # SIZE RUN
  local size=$1 run=$2 dir=$MODELS/model-$1 hex bytes t0 t1
  hex=$(cat "$dir/hex")
  bytes=$(cat "$dir/bytes")
  start_blz "$WORK/blz-data"
  BLZ_TOKEN=$token BLZ_CACHE_DIR=$WORK/client/cache BLZ_CONFIG_DIR=$WORK/client/config \
    "$BLZ" push "$dir/model.blz" "${url#http://}/bench/m:r1" --no-patch -q > /dev/null
  blz_wait_idle "$url" "$token" 2400
  t0=$(now)
  curl -sf -H "Authorization: Bearer $token" -o "$WORK/blob" "$url/v2/bench/m/blobs/sha256:$hex"
  t1=$(now)
  record "blz_curl_blob_s" "$size" "$(python3 -c "print(round($t1 - $t0, 3))")"
  rm -rf "$WORK/blob" "$WORK/pull-out" "$WORK/pull-client"
  t0=$(now)
  BLZ_TOKEN=$token BLZ_CACHE_DIR=$WORK/pull-client/cache BLZ_CONFIG_DIR=$WORK/client/config \
    "$BLZ" pull "${url#http://}/bench/m:r1" -o "$WORK/pull-out" --no-patch -q > /dev/null
  t1=$(now)
  record "blz_pull_full_s" "$size" "$(python3 -c "print(round($t1 - $t0, 3))")"
  rm -rf "$WORK/pull-out" "$WORK/pull-client" "$WORK/client"
  stop_server
  start_distribution "$WORK/dist-data"
  skopeo copy -q --preserve-digests --dest-tls-verify=false "oci:$dir/oci:v1" \
    "docker://${url#http://}/bench/m:r1" > /dev/null
  t0=$(now)
  curl -sf -o "$WORK/blob" "$url/v2/bench/m/blobs/sha256:$hex"
  t1=$(now)
  record "distribution_curl_blob_s" "$size" "$(python3 -c "print(round($t1 - $t0, 3))")"
  rm -rf "$WORK/blob" "$WORK/skopeo-out"
  t0=$(now)
  skopeo copy -q --preserve-digests --src-tls-verify=false "docker://${url#http://}/bench/m:r1" \
    "oci:$WORK/skopeo-out:v1" > /dev/null
  t1=$(now)
  record "skopeo_pull_s" "$size" "$(python3 -c "print(round($t1 - $t0, 3))")"
  rm -rf "$WORK/skopeo-out"
  stop_server
}

for size in $SIZES; do prepare_model "$size"; done
for run in $(seq 1 "$RUNS"); do
  for size in $SIZES; do
    if [ "$MODE" = push ] || [ "$MODE" = all ]; then
      # Alternate which side goes first, so drift in the machine's speed hits both.
      # With BEFORE, odd runs: blz, skopeo, before; even runs: before, skopeo, blz.
      before() { [ -z "${BEFORE:-}" ] || push_blz "$size" "$run" "$(realpath "$BEFORE")" blz_before; }
      if [ $((run % 2)) = 1 ]; then push_blz "$size" "$run"; push_skopeo "$size" "$run"; before;
      else before; push_skopeo "$size" "$run"; push_blz "$size" "$run"; fi
    fi
    if [ "$MODE" = pull ] || [ "$MODE" = all ]; then pull_all "$size" "$run"; fi
  done
done

# ---- tables: median (range) per measurement and size ----
python3 - "$results" <<'EOF'
import statistics, sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    what, size, value = line.split()
    rows[(what, int(size))].append(float(value))
sizes = sorted({s for _, s in rows})
whats = list(dict.fromkeys(w for w, _ in rows))
print("| measurement | " + " | ".join(f"{s} MB: median (range)" for s in sizes) + " |")
print("|---|" + "---|" * len(sizes))
for w in whats:
    cells = []
    for s in sizes:
        v = rows.get((w, s))
        cells.append(f"{statistics.median(v):g} ({min(v):g}-{max(v):g})" if v else "-")
    print(f"| {w} | " + " | ".join(cells) + " |")
for s in sizes:
    k = rows.get(("skopeo_push_wall_s", s))
    for label in ("blz", "blz_before"):
        b = rows.get((label + "_push_wall_s", s))
        if b and k:
            print(f"\n{s} MB: {label} push / skopeo copy wall = {statistics.median(b) / statistics.median(k):.2f}")
EOF
