#!/usr/bin/env bash
# The budgeted local store (issue 14, docs/client.md "Budgeted store") on a scripted access
# pattern: which versions `blz cache prune --budget` keeps, and why.
#
# A real `blz serve` on a free loopback port holds seven small versions from the shared corpus:
#   adapters/ckpt-500 .. ckpt-2400   four LoRA checkpoints of one fine-tuning run
#                                    (corpus/roberta-lora), an adapter pool
#   gpt2/base, gpt2/ft               corpus/tiny-gpt2/{base,ft-v1}
#   llama/random                     corpus/llama-tiny-random
# One client store pulls them over 30 simulated days (BLZ_NOW, the test clock of
# client/usage.h), so each pull records a use, and what it cost (a patch from a held version,
# or a full download):
#   day 0      every version pulled once, in the order above (the checkpoints patch from one
#              another, gpt2/ft from gpt2/base)
#   days 1-29  ckpt-2400 daily; gpt2/ft every 3 days; ckpt-1000 on days 10 and 20;
#              llama/random on day 25
#   day 30     `blz ls`, then `blz cache prune --budget` to each of BUDGET_PCTS % of the store
#              as a dry run (every version's utility and reason), then for real at the last
#              of them, then `blz ls`.
#
#   bench/cache_prune_pattern.sh        (from the repo root)
#
# Environment (defaults in brackets):
#   BLZ         the blz binary                        [build-dev/cli/blz]
#   CORPUS      the shared corpus                     [../shared/corpus]
#   BUDGET_PCTS budgets, percentages of the store      ["70 45"]
#   HALF_LIFE   half-life of the use score            [7d]
#   WORK        scratch directory (removed at exit)   [/tmp/blz-prune-pattern]
# Output: the commands' output on stdout; progress on stderr.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BLZ="$(realpath "${BLZ:-build-dev/cli/blz}")"
CORPUS="$(realpath "${CORPUS:-../shared/corpus}")"
BUDGET_PCTS="${BUDGET_PCTS:-70 45}"
HALF_LIFE="${HALF_LIFE:-7d}"
WORK="${WORK:-/tmp/blz-prune-pattern}"

rm -rf "$WORK"
mkdir -p "$WORK"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "cache_prune_pattern: $*" >&2; }

export BLZ_CONFIG_DIR="$WORK/config"
export BLZ_CACHE_DIR="$WORK/cache"
mkdir -p "$BLZ_CONFIG_DIR"
echo "{\"cache\": {\"half_life\": \"$HALF_LIFE\"}}" >"$BLZ_CONFIG_DIR/client.json"
blz_serve_start "$BLZ" "$WORK/serve.out" "$WORK/serve.log" --data "$WORK/registry" \
  --listen 127.0.0.1:0
server_pid=$blz_pid addr=$blz_addr
export BLZ_TOKEN=$blz_token
log "registry on $addr"

declare -A src=(
  [adapters:ckpt-500]="$CORPUS/roberta-lora/checkpoint-500"
  [adapters:ckpt-1000]="$CORPUS/roberta-lora/checkpoint-1000"
  [adapters:ckpt-2000]="$CORPUS/roberta-lora/checkpoint-2000"
  [adapters:ckpt-2400]="$CORPUS/roberta-lora/checkpoint-2400"
  [gpt2:base]="$CORPUS/tiny-gpt2/base"
  [gpt2:ft]="$CORPUS/tiny-gpt2/ft-v1"
  [llama:random]="$CORPUS/llama-tiny-random"
)
order=(adapters:ckpt-500 adapters:ckpt-1000 adapters:ckpt-2000 adapters:ckpt-2400 gpt2:base
       gpt2:ft llama:random)
: >"$WORK/names"
for ref in "${order[@]}"; do
  d=$("$BLZ" push "${src[$ref]}" "$addr/pool/$ref" --quiet --json |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["digest"])')
  echo "$d $ref" >>"$WORK/names"
done
log "pushed ${#order[@]} versions"

day=86400
t0=1800000000
pull() {  # pull DAY REF
  BLZ_NOW=$((t0 + $1 * day)) "$BLZ" pull "$addr/pool/$2" --quiet --json >"$WORK/pull.json"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1]));
names=dict(l.split() for l in open(sys.argv[4]))
print("day %2s  pull %-20s %-10s %8d of %8d bytes%s" % (sys.argv[2], sys.argv[3], j["transfer"],
      j["bytes_downloaded"], j["full_bytes"],
      "  (patch from %s)" % names.get(j["patch_from"], j["patch_from"]) if j["patch_from"] else ""))' \
    "$WORK/pull.json" "$1" "$2" "$WORK/names"
}

echo "## Access pattern"
echo
for ref in "${order[@]}"; do pull 0 "$ref"; done
for d in $(seq 1 29); do
  pull "$d" adapters:ckpt-2400 >/dev/null
  if [ $((d % 3)) -eq 0 ]; then pull "$d" gpt2:ft >/dev/null; fi
  if [ "$d" -eq 10 ] || [ "$d" -eq 20 ]; then pull "$d" adapters:ckpt-1000 >/dev/null; fi
  if [ "$d" -eq 25 ]; then pull "$d" llama:random >/dev/null; fi
done
echo "days 1-29: ckpt-2400 daily, gpt2:ft every 3 days, ckpt-1000 on days 10 and 20, llama:random on day 25"
echo

export BLZ_NOW=$((t0 + 30 * day))
total=$("$BLZ" ls --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes"])')
echo "## Day 30: blz ls"
echo
"$BLZ" ls | sed "s|$WORK|\$WORK|"
for pct in $BUDGET_PCTS; do
  budget=$((total * pct / 100))
  echo
  echo "## blz cache prune --budget $budget --dry-run ($pct % of $total bytes, half-life $HALF_LIFE)"
  echo
  "$BLZ" cache prune --budget "$budget" --dry-run
done
echo
echo "## blz cache prune --budget $budget; blz ls"
echo
"$BLZ" cache prune --budget "$budget" | tail -n1
"$BLZ" ls | sed "s|$WORK|\$WORK|"
