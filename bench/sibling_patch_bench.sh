#!/usr/bin/env bash
# Issue 27, "serving a patch between two chained versions does not have to rebuild both in
# full": the first GET /v2/<name>/blz/patch?from=<ft1>&to=<ft2> between two fine-tunes stored
# as chain links from one base (siblings), by two builds of `blz serve` side by side: BEFORE
# (which rebuilt both archives into its cache, then diffed the files) and BLZ (which reads both
# as stored: registry/blz_handlers.cc PatchInPlace, patcher CreatePatchFromReaders).
#
# A generated BF16 model (TENSORS tensors of 1024 x COLS) and two training-like steps of it
# (bench/bf16_series.py) are pushed into bench/base, bench/ft1 and bench/ft2 of a fresh
# `blz serve --max-chain-depth 1` (so both steps are stored as links from the base) and left
# to compress. Then, REPEAT times per build, on a copy of that data directory (so the patch is
# never cached yet) and a fresh process: the patch ft1 -> ft2 is downloaded with curl. Reported
# (medians): the GET's wall time, the server's CPU time for it (utime + stime from /proc), the
# bytes it wrote into its archive cache, and the patch's size; both builds must serve the same
# patch (SHA-256 compared). Also, once per build (the pushes are made by each build into its
# own data directory), the server's CPU time for ft2's push and background compression (which
# diffs ft2 against the base and verifies the link) and the bytes left in its cache.
#
#   BEFORE=/path/to/old/blz bash bench/sibling_patch_bench.sh        (from the repo root)
#
# Environment (defaults in brackets):
#   BLZ      the blz binary measured as "after" [build-release/cli/blz, else build-test/cli/blz]
#   BEFORE   the blz binary measured as "before" (required)
#   TENSORS, COLS, REPEAT        [16, 8192, 3]  (16 x 1024 x 8192 BF16 = 268 MB per version)
#   CACHE    `blz serve --cache-size` (e.g. 200MB: a base over a quarter of the cache is read
#            as stored by the link's diff and verification)          [the server's default]
#   WORK     scratch directory (removed at exit unless KEEP=1) [mktemp -d]
# Needs /usr/bin/python3 with numpy. Not part of CI. Output: a markdown table on stdout.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
blz_bench_init sibling_patch_bench
[ -n "${BEFORE:-}" ] || { log "set BEFORE=<the older blz binary>"; exit 2; }
BEFORE=$(realpath "$BEFORE")
TENSORS=${TENSORS:-16} COLS=${COLS:-8192} REPEAT=${REPEAT:-3}
"$PY" -c 'import numpy' 2>/dev/null || { log "$PY has no numpy"; exit 77; }
export BLZ_CONFIG_DIR=$WORK/config
hz=$(getconf CLK_TCK)

start() {  # BIN DATA
  blz_serve_start "$1" "$WORK/serve.out" "$WORK/serve.err" --data "$2" \
    --listen 127.0.0.1:0 --max-chain-depth 1 ${CACHE:+--cache-size "$CACHE"} || exit 1
  server_pid=$blz_pid url=$blz_url
  [ -n "$blz_token" ] && token=$blz_token
  return 0
}
stop() { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$server_pid/stat"; }

log "generating 3 versions of $TENSORS x 1024 x $COLS BF16 in $WORK/in"
"$PY" bench/bf16_series.py "$WORK/in" 3 "$TENSORS" 1024 "$COLS"

# setup BUILD BIN: the three pushes into a fresh $WORK/data-BUILD, each compressed before the
# next arrives; records the server's CPU time from ft2's push to the end of its compression
# (ingest, full patch, the link's diff and verification against the base) and the bytes its
# cache holds then.
setup() {
  local build=$1 bin=$2 c0 c1
  rm -rf "$WORK/data-$build"
  start "$bin" "$WORK/data-$build"
  : > "$WORK/digests"
  for pair in "step-00 bench/base" "step-01 bench/ft1" "step-02 bench/ft2"; do
    set -- $pair
    c0=$(cpu_ticks)
    # A fresh client store per push: every version goes up whole and is stored by the registry.
    BLZ_TOKEN=$token BLZ_CACHE_DIR=$WORK/pusher-$build-$1 "$bin" push -q --json "$WORK/in/$1" \
      "${url#http://}/$2:v1" |
      "$PY" -c 'import json,sys; print(sys.argv[1], json.load(sys.stdin)["digest"])' "$2" \
      >> "$WORK/digests"
    blz_wait_idle "$url" "$token" 4800
    c1=$(cpu_ticks)
  done
  echo "$build $(( c1 - c0 )) $(du -sb "$WORK/data-$build/cache" 2>/dev/null | cut -f1)" \
    >> "$WORK/setup"
  curl -sf -H "Authorization: Bearer $token" "$url/v2/_blz/storage" > "$WORK/storage.json"
  stop
}
: > "$WORK/setup"
setup before "$BEFORE"
setup after "$BLZ"
mv "$WORK/data-after" "$WORK/data"
rm -rf "$WORK/data/cache" "$WORK/data-before"
d1=$(awk '$1 == "bench/ft1" {print $2}' "$WORK/digests")
d2=$(awk '$1 == "bench/ft2" {print $2}' "$WORK/digests")
"$PY" - "$WORK/storage.json" "$d1" "$d2" <<'EOF'
import json, sys
forms = {}
for repo in json.load(open(sys.argv[1]))["repositories"]:
    for a in repo["by_archive"]:
        forms[a["digest"]] = (a.get("form"), a.get("depth", 0))
for d in sys.argv[2:]:
    form, depth = forms.get(d, (None, 0))
    if form != "chain" or depth != 1:
        sys.exit(f"sibling_patch_bench: {d} is stored as {form} at depth {depth}, not a link")
EOF

: > "$WORK/times"
for r in $(seq 1 "$REPEAT"); do
  for build in before after; do
    bin=$BLZ
    [ "$build" = before ] && bin=$BEFORE
    rm -rf "$WORK/run"
    cp -a "$WORK/data" "$WORK/run"
    start "$bin" "$WORK/run"
    c0=$(cpu_ticks)
    t=$(curl -sf -o "$WORK/patch-$build" -w '%{time_total}' -H "Authorization: Bearer $token" \
      "$url/v2/bench/ft2/blz/patch?from=$d1&to=$d2")
    c1=$(cpu_ticks)
    cache=$(du -sb "$WORK/run/cache" 2>/dev/null | cut -f1)
    echo "$build $t $(( c1 - c0 )) ${cache:-0} $(stat -c %s "$WORK/patch-$build") $(sha256sum < "$WORK/patch-$build" | cut -c1-16)" >> "$WORK/times"
    stop
  done
  log "round $r done"
done

"$PY" - "$WORK/times" "$hz" "$TENSORS" "$COLS" "$WORK/setup" <<'EOF'
import statistics, sys
hz = int(sys.argv[2])
size = int(sys.argv[3]) * 1024 * int(sys.argv[4]) * 2
rows = {}
for line in open(sys.argv[1]):
    build, t, ticks, cache, patch, sha = line.split()
    rows.setdefault(build, []).append((float(t), int(ticks) / hz, int(cache), int(patch), sha))
shas = {r[4] for rs in rows.values() for r in rs}
if len(shas) != 1:
    sys.exit(f"sibling_patch_bench: the builds served different patches: {sorted(shas)}")
print(f"Tensor bytes per version: {size / 1e6:.0f} MB; the same patch from both builds.")
print()
print("| build | first GET of the patch | server CPU | written into the cache | patch |")
print("|---|---|---|---|---|")
for build in ("before", "after"):
    rs = rows[build]
    wall = statistics.median(r[0] for r in rs)
    cpu = statistics.median(r[1] for r in rs)
    cache = statistics.median(r[2] for r in rs)
    print(f"| {build} | {wall:.2f} s | {cpu:.2f} s | {cache / 1e6:.0f} MB | {rs[0][3] / 1e6:.1f} MB |")
print()
print("| build | server CPU, ft2's push and compression (one run) | cache bytes after it |")
print("|---|---|---|")
for line in open(sys.argv[5]):
    build, ticks, *cache = line.split()
    print(f"| {build} | {int(ticks) / hz:.2f} s | {int(cache[0]) / 1e6 if cache else 0:.0f} MB |")
EOF
