#!/usr/bin/env bash
# Runs the OCI distribution-spec conformance suite (v1.1.1, vendored in
# ../shared/tools/oci-conformance) against a fresh `blz serve`, all four workflows (pull, push,
# content discovery, content management), authenticating with HTTP Basic (user "admin", the
# admin token as password), automatic cross-repository mounts on.
#   bash scripts/conformance.sh [BLZ_BINARY]     (default: build-test/cli/blz)
#   bash scripts/conformance.sh --cluster N [BLZ_BINARY]
# With --cluster N the suite runs through nginx round robin over N replicas on PostgreSQL + S3
# (scripts/cluster.sh), so consecutive requests of one upload or one pull land on different
# replicas.
# Exit status: the suite's (0 when every spec passed). Reports: $OCI_REPORT_DIR (default
# build-conformance/). Skips (exit 0, with a message) when the suite is not there.
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=0
if [ "${1:-}" = "--cluster" ]; then cluster=${2:?--cluster needs a replica count}; shift 2; fi
blz=${1:-build-test/cli/blz}
suite=../shared/tools/oci-conformance/run.sh
if [ ! -f "$suite" ]; then
  echo "conformance: SKIPPED: $suite not found (the shared tools are not beside the repo)"
  exit 0
fi
suite=$(cd "$(dirname "$suite")" && pwd)/run.sh
work=$(mktemp -d)
reports=${OCI_REPORT_DIR:-build-conformance}
mkdir -p "$reports"
reports=$(cd "$reports" && pwd)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  if [ "$cluster" -gt 0 ]; then bash scripts/cluster.sh stop "$work/cluster"; fi
  rm -rf "$work"
}
trap cleanup EXIT

if [ "$cluster" -gt 0 ]; then
  # PostgreSQL runs as another user when this runs as root: it must traverse mktemp's 0700 dir.
  chmod 711 "$work"
  status=0
  settings=$(bash scripts/cluster.sh start "$work/cluster" "$cluster" "$blz") || status=$?
  if [ "$status" -eq 77 ]; then echo "conformance: SKIPPED: a cluster component is not installed"; exit 0; fi
  if [ "$status" -ne 0 ]; then echo "conformance: the cluster did not start" >&2; exit 2; fi
  eval "$settings"
  url=$BLZ_CLUSTER_URL
  token=$BLZ_CLUSTER_TOKEN
  echo "conformance: $cluster replicas on PostgreSQL + S3 behind nginx round robin"
else
  "$blz" serve --data "$work/data" --listen 127.0.0.1:0 > "$work/serve.out" 2> "$work/serve.err" &
  server_pid=$!
  for _ in $(seq 1 100); do
    grep -q '^listening on ' "$work/serve.out" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.err" >&2; exit 2; }
    sleep 0.1
  done
  url=$(sed -n 's/^listening on //p' "$work/serve.out")
  token=$(sed -n 's/^admin token: //p' "$work/serve.out")
  if [ -z "$url" ] || [ -z "$token" ]; then
    echo "conformance: blz serve did not start" >&2
    cat "$work/serve.err" >&2
    exit 2
  fi
fi
echo "conformance: suite against $url (Basic auth, all workflows)"
status=0
(cd "$work" && OCI_USERNAME=admin OCI_PASSWORD="$token" OCI_AUTOMATIC_CROSSMOUNT=1 \
   OCI_REPORT_DIR="$reports" bash "$suite" "$url" > "$reports/console.log" 2>&1) || status=$?
grep -E '^(Ran |SUCCESS|FAIL)' "$reports/console.log" || true
if [ "$status" -ne 0 ]; then
  echo "conformance: FAILED (exit $status); failing specs:" >&2
  grep -E '^\s*\[FAIL\]' "$reports/console.log" >&2 || tail -40 "$reports/console.log" >&2
fi
tail -1 "$reports/console.log" | sed 's/^/conformance: /'
exit "$status"
