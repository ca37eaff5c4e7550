#!/usr/bin/env bash
# The churn test of issue 25 (docs/operating.md, "Scale out"): 3 replicas on PostgreSQL + S3
# behind nginx (scripts/cluster.sh); concurrent pushes, removals, untags and garbage
# collections through nginx while replicas are killed with kill -9 at random moments and
# restarted; then every live tag must pull byte-identical with no BLOB_UNKNOWN, and the bucket
# must hold nothing beyond what the live tags reference (and nothing at all once every
# manifest is deleted and collected). scripts/cluster_churn.py says what runs and checks.
#
#   bash scripts/cluster_churn.sh [BLZ_BINARY]          (default: build-test/cli/blz)
#   BLZ_CHURN_SEED=N        the seed (default: random, printed first; rerun with it)
#   BLZ_CHURN_SECONDS=S     how long the churn runs (default 40; the whole test ~1.5-2 min)
#   BLZ_CHURN_REPLICAS=N    replicas (default 3)
# Exit status: 0 passed, 1 a check failed (the seed and the failed checks are printed), 2 the
# cluster did not start, 77 PostgreSQL, Ceph or nginx is not installed (skipped, saying so).
set -euo pipefail
cd "$(dirname "$0")/.."
blz=${1:-build-test/cli/blz}
blz=$(cd "$(dirname "$blz")" && pwd)/$(basename "$blz")
replicas=${BLZ_CHURN_REPLICAS:-3}
grace=3         # --gc-grace: short, so that the test's collections remove what churn left
idle=10         # --upload-idle-timeout: parts of uploads cut by a kill go after it
work=$(mktemp -d)
# PostgreSQL runs as another user when this runs as root: it must traverse mktemp's 0700 dir.
chmod 711 "$work"
cleanup() { bash scripts/cluster.sh stop "$work/cluster"; rm -rf "$work"; }
trap cleanup EXIT

status=0
# --job-lease: a killed replica's leases block the others this long (default 30 s), which was
# most of the wait for idle compression after the churn.
settings=$(BLZ_CLUSTER_SERVE_FLAGS="--gc-grace ${grace}s --upload-idle-timeout ${idle}s --job-lease 5s" \
  bash scripts/cluster.sh start "$work/cluster" "$replicas" "$blz") || status=$?
if [ "$status" -eq 77 ]; then
  echo "churn: SKIPPED: a cluster component (PostgreSQL, Ceph, nginx) is not installed"
  exit 77
fi
if [ "$status" -ne 0 ]; then echo "churn: the cluster did not start" >&2; exit 2; fi
eval "$settings"
mkdir -p "$work/client"
seed_flag=()
[ -n "${BLZ_CHURN_SEED:-}" ] && seed_flag=(--seed "$BLZ_CHURN_SEED")
status=0
python3 scripts/cluster_churn.py --url "$BLZ_CLUSTER_URL" --token "$BLZ_CLUSTER_TOKEN" \
  --replicas "$BLZ_CLUSTER_REPLICAS" --cluster-dir "$BLZ_CLUSTER_DIR" --pg "$BLZ_CLUSTER_PG" \
  --blz "$blz" --work "$work/client" --duration "${BLZ_CHURN_SECONDS:-40}" \
  --grace "$grace" --idle-timeout "$idle" "${seed_flag[@]}" || status=$?
if [ "$status" -ne 0 ]; then
  # The replicas' last words, for the failure's story (logs are deleted with the cluster).
  for k in $(seq 1 "$replicas"); do
    echo "--- replica $k: tail of serve.err" >&2
    tail -5 "$BLZ_CLUSTER_DIR/r$k/serve.err" >&2 || true
  done
fi
exit "$status"
