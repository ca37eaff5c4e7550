#!/usr/bin/env bash
# nginx routes around a killed replica (docs/operating.md, "Scale out", "nginx in front"):
# 2 replicas on PostgreSQL + S3 behind nginx (scripts/cluster.sh); a model is pushed; then one
# replica is killed with kill -9 and, with no retry on the client side (curl, `blz --retries
# 0`), every manifest GET, blob GET, pull and push through nginx must succeed; the same with
# the other replica dead. Finally a control: the same requests with nginx's retry turned off
# (`proxy_next_upstream off`, reloaded) must fail at least once, or this test could not tell a
# configuration that routes around a dead replica from one that does not.
#
#   bash scripts/cluster_failover.sh [BLZ_BINARY]      (default: build-test/cli/blz)
# Exit status: 0 passed, 1 a check failed, 2 the cluster did not start, 77 PostgreSQL, Ceph
# or nginx is not installed (skipped, saying so).
set -euo pipefail
cd "$(dirname "$0")/.."
blz=${1:-build-test/cli/blz}
blz=$(cd "$(dirname "$blz")" && pwd)/$(basename "$blz")
work=$(mktemp -d)
chmod 711 "$work"   # PostgreSQL runs as another user when this runs as root
cleanup() { bash scripts/cluster.sh stop "$work/cluster"; rm -rf "$work"; }
trap cleanup EXIT
status=0
settings=$(bash scripts/cluster.sh start "$work/cluster" 2 "$blz") || status=$?
if [ "$status" -eq 77 ]; then
  echo "failover: SKIPPED: a cluster component (PostgreSQL, Ceph, nginx) is not installed"
  exit 77
fi
if [ "$status" -ne 0 ]; then echo "failover: the cluster did not start" >&2; exit 2; fi
eval "$settings"
dir=$BLZ_CLUSTER_DIR
host=${BLZ_CLUSTER_URL#http://}
export BLZ_TOKEN=$BLZ_CLUSTER_TOKEN BLZ_CONFIG_DIR=$work/config
failures=0
fail() { echo "failover: FAIL: $*" >&2; failures=$((failures + 1)); }

python3 -B -c 'import sys; sys.path.insert(0, "scripts"); from cluster_churn import write_model
for v in range(4): write_model(sys.argv[1] + "/v%d" % v, 7, v)' "$work/models"
BLZ_CACHE_DIR=$work/cache-push "$blz" push "$work/models/v0" "$host/failover/m:v0" -q --json \
  > "$work/push.json"
manifest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifest_digest"])' "$work/push.json")
archive=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"])' "$work/push.json")

# requests_through_nginx LABEL: prints how many of 20 manifest GETs and 20 blob GETs (curl,
# no retry) were not 200 with the right bytes.
requests_through_nginx() {
  local bad=0 code
  for _ in $(seq 1 20); do
    code=$(curl -s -o "$work/m.json" -w '%{http_code}' -H "Authorization: Bearer $BLZ_TOKEN" \
      -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
      "$BLZ_CLUSTER_URL/v2/failover/m/manifests/v0") || true
    [ "$code" = 200 ] && [ "sha256:$(sha256sum < "$work/m.json" | cut -d' ' -f1)" = "$manifest" ] ||
      bad=$((bad + 1))
    code=$(curl -s -o "$work/b.bin" -w '%{http_code}' -H "Authorization: Bearer $BLZ_TOKEN" \
      "$BLZ_CLUSTER_URL/v2/failover/m/blobs/$archive") || true
    [ "$code" = 200 ] && [ "sha256:$(sha256sum < "$work/b.bin" | cut -d' ' -f1)" = "$archive" ] ||
      bad=$((bad + 1))
  done
  echo "$bad"
}

version=1
for dead in 1 2; do
  bash scripts/cluster.sh kill "$dir" "$dead"
  echo "failover: replica $dead killed (kill -9)"
  bad=$(requests_through_nginx)
  [ "$bad" -eq 0 ] || fail "replica $dead dead: $bad of 40 GETs through nginx failed"
  rm -rf "$work/out"
  if ! BLZ_CACHE_DIR=$work/cache-pull$dead "$blz" pull "$host/failover/m:v0" -o "$work/out" \
      --retries 0 -q > "$work/pull.err" 2>&1; then
    fail "replica $dead dead: blz pull --retries 0 failed: $(tail -3 "$work/pull.err")"
  elif ! diff -r "$work/out" "$work/models/v0" > /dev/null; then
    fail "replica $dead dead: the pull is not byte-identical"
  fi
  if ! BLZ_CACHE_DIR=$work/cache-push "$blz" push "$work/models/v$version" \
      "$host/failover/m:v$version" --retries 0 -q > "$work/push.err" 2>&1; then
    fail "replica $dead dead: blz push --retries 0 failed: $(tail -3 "$work/push.err")"
  fi
  version=$((version + 1))
  bash scripts/cluster.sh restart "$dir" "$dead"
  # nginx sends it requests again once its fail_timeout (2 s) since its last failure is over;
  # until then the other replica is the only one (a second failure inside that window is a
  # 502: docs/operating.md).
  sleep 3
  echo "failover: replica $dead restarted"
done
echo "failover: nginx error.log: $(grep -c 'connect() failed' "$dir/nginx/error.log" || true) refused connections, each passed to the other replica"

# The control: no retry in nginx; a dead replica must now show.
sed -i 's/proxy_next_upstream error timeout;/proxy_next_upstream off;/' "$dir/nginx/nginx.conf"
grep -q 'proxy_next_upstream off;' "$dir/nginx/nginx.conf" || fail "the control could not edit nginx.conf"
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
"$nginx_bin" -p "$dir/nginx" -c "$dir/nginx/nginx.conf" -e "$dir/nginx/error.log" -s reload
sleep 3   # the reload, and the last fail_timeout (2 s) of the replica restarted above
bash scripts/cluster.sh kill "$dir" 1
bad=$(requests_through_nginx)
if [ "$bad" -eq 0 ]; then
  fail "control: with proxy_next_upstream off every GET still succeeded; this test cannot tell"
else
  echo "failover: control: without nginx's retry, $bad of 40 GETs failed (expected: some)"
fi
if [ "$failures" -ne 0 ]; then echo "failover: FAILED ($failures checks)"; exit 1; fi
echo "failover: PASSED (2 replicas, each killed in turn: every GET, pull and push through nginx succeeded)"
