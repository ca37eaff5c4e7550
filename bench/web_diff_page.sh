#!/usr/bin/env bash
# The web view's diff page on a big model (issue 13): a generated Llama-shaped pair with 80
# layers (723 tensors) is pushed to a real `blz serve`, its value diff and patch report are
# computed once (the registry caches them, as it does for every visitor after the first), then
# headless Debian chromium loads the diff page N times; the time is from navigation until both
# heatmaps and the whole tensor table are in the DOM (web/tests/dev/bench_diff.mjs). Also prints
# the page weight (JS+CSS as served, identity / gzip / brotli) from the embedded build's manifest.
#
#   bench/web_diff_page.sh            (from the repo root)
#
# Environment (defaults in brackets):
#   BLZ     the blz binary                 [build-dev/cli/blz]
#   GEN     the gen_llama_pair binary      [build-bench/bench/gen_llama_pair]
#   RUNS    page loads measured            [9]
#   WORK    scratch directory (removed)    [/tmp/blz-web-bench]
# Needs web/node_modules (npm ci in web/) and /usr/bin/chromium (scripts/setup.sh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BLZ="$(realpath "${BLZ:-build-dev/cli/blz}")"
GEN="$(realpath "${GEN:-build-bench/bench/gen_llama_pair}")"
RUNS="${RUNS:-9}"
WORK="${WORK:-/tmp/blz-web-bench}"
manifest="$(dirname "$(dirname "$BLZ")")/web/dist/manifest.json"

rm -rf "$WORK"
mkdir -p "$WORK"
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "web_diff_page: $*" >&2; }

log "generating an 80-layer pair"
"$GEN" "$WORK/base" "$WORK/ft" --layers 80 --hidden 256 --intermediate 512 --vocab 1024 >&2
blz_serve_start "$BLZ" "$WORK/serve.out" "$WORK/serve.log" --data "$WORK/registry" \
  --listen 127.0.0.1:0
server=$blz_pid addr=$blz_addr
export BLZ_TOKEN=$blz_token
"$BLZ" push -q "$WORK/base" "$addr/bench/llama-80:base" --json >"$WORK/push-base.json"
"$BLZ" push -q "$WORK/ft" "$addr/bench/llama-80:ft" --json >"$WORK/push-ft.json"
digest() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"])' "$1"; }
from=$(digest "$WORK/push-base.json")
to=$(digest "$WORK/push-ft.json")
tensors=$(curl -sf "http://$addr/v2/bench/llama-80/blz/version?digest=$to" |
  /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tensors"]))')
log "computing the value diff and the patch report once ($tensors tensors)"
for e in diff patch-report; do
  curl -sf -o /dev/null "http://$addr/v2/bench/llama-80/blz/$e?from=$from&to=$to"
done
(cd web && node tests/dev/bench_diff.mjs "http://$addr" "$RUNS" bench/llama-80 "$from" "$to" "$tensors")
if [ -f "$manifest" ]; then
  /usr/bin/python3 -c 'import json,sys; w=json.load(open(sys.argv[1]))["weight_js_css"]; print("page weight (JS+CSS): %d bytes, %d gzip, %d brotli" % (w["identity"], w["gzip"], w["br"]))' "$manifest"
fi
