#!/usr/bin/env bash
# The main job, end to end: installs what is missing, builds blz, starts a registry on a free
# loopback port with a temporary data directory, packs and pushes two versions of a model as
# two tags of one repository, pulls the first into a fresh client store, then pulls the second
# (which downloads only a patch), and checks the unpacked files against the originals.
#
# Models: ../shared/corpus/tiny-gpt2/{base,ft-v1} when that folder exists, otherwise a small
# generated GPT-2-shaped pair (scripts/make_demo_model.py).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bash scripts/setup.sh
build=${BLZ_BUILD_DIR:-build-release}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLZ_BUILD_TESTS=OFF \
  -DBLZ_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target blz
blz="$root/$build/cli/blz"

work=$(mktemp -d /tmp/blz-demo-XXXXXX)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

corpus="$root/../shared/corpus"
if [ -d "$corpus/tiny-gpt2/base" ] && [ -d "$corpus/tiny-gpt2/ft-v1" ]; then
  base="$corpus/tiny-gpt2/base"; ft="$corpus/tiny-gpt2/ft-v1"
  echo "demo: using the corpus pair tiny-gpt2/base -> tiny-gpt2/ft-v1"
else
  python3 scripts/make_demo_model.py "$work/models"
  base="$work/models/base"; ft="$work/models/ft"
  echo "demo: ../shared/corpus not found; using a generated model pair"
fi

export BLZ_CONFIG_DIR="$work/config"
# The pusher's own store (push keeps what it pushes, as docker does), never ~/.cache/blz.
export BLZ_CACHE_DIR="$work/push-cache"
"$blz" serve --data "$work/registry" --listen 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.log" &
server_pid=$!
for _ in $(seq 1 100); do
  grep -q '^listening on ' "$work/serve.out" 2>/dev/null && break
  sleep 0.1
done
grep -q '^listening on ' "$work/serve.out" || { echo "demo: server did not start"; cat "$work/serve.log"; exit 1; }
addr=$(sed -n 's|^listening on http://||p' "$work/serve.out" | head -n1)
token=$(sed -n 's|^admin token: ||p' "$work/serve.out" | head -n1)
echo "demo: registry listening on $addr (data in $work/registry)"

printf '%s\n' "$token" | "$blz" login "$addr" --token-stdin
"$blz" push "$base" "$addr/demo/model:base"
"$blz" push "$ft" "$addr/demo/model:ft"

echo "demo: pulling base into a fresh client store"
"$blz" pull "$addr/demo/model:base" -o "$work/out-base" --cache "$work/cache"
echo "demo: pulling the fine-tune (the client holds base, so it asks for a patch)"
"$blz" pull "$addr/demo/model:ft" -o "$work/out-ft" --cache "$work/cache" --json | tee "$work/pull.json"

for f in $(cd "$ft" && find . -type f | sort); do
  cmp -s "$ft/$f" "$work/out-ft/$f" || { echo "demo: FAILED: $f differs"; exit 1; }
done
python3 - "$work/pull.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"demo: pulled {r['reference']}: downloaded {r['bytes_downloaded']:,} bytes of "
      f"{r['full_bytes']:,} ({100.0 * r['bytes_downloaded'] / max(1, r['full_bytes']):.1f}%), "
      f"patch used: {r['used_patch']}")
PY
echo "demo: OK: every file of the fine-tune is byte-identical to the original"
# The web view of what was just pushed: the versions, the upgrade's patch size, and the diff
# heatmaps. BLZ_DEMO_KEEP=1 keeps the registry running for a browser until Ctrl-C.
echo "demo: web view: http://$addr/#/r/demo%2Fmodel"
if [ "${BLZ_DEMO_KEEP:-0}" = 1 ]; then
  echo "demo: the registry keeps running (BLZ_DEMO_KEEP=1); Ctrl-C stops it"
  wait
fi
