#!/usr/bin/env bash
# A scaled-out blz registry on one machine, for tests and for trying the recipe of
# docs/operating.md ("Scale out"): PostgreSQL 15 for the metadata, an S3 server (Ceph's RADOS
# Gateway, ../shared/tools/ceph-s3) for the blobs, N `blz serve` replicas with their own --data
# directories, and nginx in front of them, round robin.
#
#   eval "$(bash scripts/cluster.sh start DIR N [BLZ])"   # DIR must not exist; N >= 1
#   bash scripts/cluster.sh kill DIR K       # kill -9 replica K (1-based)
#   bash scripts/cluster.sh restart DIR K    # start replica K again (same port, same --data)
#   bash scripts/cluster.sh stop DIR         # stops everything and deletes DIR
#
# `start` prints, for eval: BLZ_CLUSTER_URL (nginx), BLZ_CLUSTER_TOKEN (the admin token the
# first replica printed when it initialized the database), BLZ_CLUSTER_REPLICAS (the replicas'
# own URLs, space separated), BLZ_CLUSTER_PG (the PostgreSQL URL), BLZ_CLUSTER_STORAGE (the
# --storage URL), BLZ_CLUSTER_DIR. Everything else goes to stderr; the logs stay in
# DIR/r<K>/serve.err, DIR/nginx/*.log until `stop`. The S3 keys reach the replicas as
# AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY in their environment, never on a command line.
# Extra `blz serve` flags for every replica: BLZ_CLUSTER_SERVE_FLAGS (word-split), read by
# `start` and kept in DIR/serve_flags for `restart`.
# Exit codes: 0 ok, 1 a part failed to start (its log is printed; `stop DIR` removes what did
# start), 2 usage, 77 a component
# (PostgreSQL, Ceph, nginx) is not installed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
ceph_dir=$here/../shared/tools/ceph-s3
pg_script=$here/tests/store/postgres/postgres_server.sh

usage() { echo "usage: $0 start DIR N [BLZ] | kill DIR K | restart DIR K | stop DIR" >&2; exit 2; }
log() { echo "cluster: $*" >&2; }

# A port below the kernel's ephemeral range (scripts/free_port.py says why).
free_port() { python3 "$here/scripts/free_port.py"; }

# start_replica DIR K: starts replica K on its recorded port and waits until it listens.
start_replica() {
  local dir=$1 k=$2 blz port
  blz=$(cat "$dir/blz")
  port=$(cat "$dir/r$k/port")
  # shellcheck disable=SC1091
  set -a; . "$dir/s3.env"; set +a
  # shellcheck disable=SC2046
  AWS_ACCESS_KEY_ID=$S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$S3_SECRET_KEY AWS_REGION=$S3_REGION \
    setsid "$blz" serve --data "$dir/r$k/data" --listen "127.0.0.1:$port" \
    --metadata "$(cat "$dir/pg.url")" --storage "$(cat "$dir/storage.url")" \
    --trusted-proxy 127.0.0.1 $(cat "$dir/serve_flags") \
    > "$dir/r$k/serve.out" 2>> "$dir/r$k/serve.err" < /dev/null &
  echo $! > "$dir/r$k/pid"
  local pid=$!
  for _ in $(seq 1 300); do
    grep -q '^listening on ' "$dir/r$k/serve.out" 2>/dev/null && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      log "replica $k exited while starting:"; tail -40 "$dir/r$k/serve.err" >&2; return 1
    fi
    sleep 0.1
  done
  log "replica $k did not start in 30 s:"; tail -40 "$dir/r$k/serve.err" >&2
  return 1
}

cmd_start() {
  local dir=$1 n=$2 blz=${3:-$here/build-test/cli/blz}
  [ -e "$dir" ] && { log "$dir exists"; exit 2; }
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || usage
  [ -x "$blz" ] || { log "no blz binary at $blz"; exit 2; }
  command -v nginx > /dev/null 2>&1 || [ -x /usr/sbin/nginx ] || {
    log "nginx is not installed (scripts/setup.sh installs nginx-light)"; exit 77; }
  [ -f "$ceph_dir/start.sh" ] || { log "no S3 server: $ceph_dir/start.sh not found"; exit 77; }
  # Without Ceph, start.sh would try to install it: a missing component is a skip here.
  command -v radosgw > /dev/null 2>&1 || [ -x /usr/bin/radosgw ] || {
    log "Ceph's radosgw is not installed (scripts/setup.sh installs ceph-mon ceph-osd radosgw)"; exit 77; }
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  (cd "$(dirname "$blz")" && echo "$(pwd)/$(basename "$blz")") > "$dir/blz"
  # The extra flags, kept for `restart` (a restarted replica runs as it ran before).
  echo "${BLZ_CLUSTER_SERVE_FLAGS:-}" > "$dir/serve_flags"

  # PostgreSQL (its watchdog is off: the cluster outlives this script; `stop` stops it).
  BLZ_PG_NO_WATCHDOG=1 bash "$pg_script" start "$dir/pg" > "$dir/pg.url" || {
    local rc=$?; log "PostgreSQL did not start"; exit "$rc"; }
  # The S3 server, and the bucket.
  bash "$ceph_dir/start.sh" "$dir/s3" > "$dir/s3.env.raw" || { log "the S3 server did not start"; exit 1; }
  grep -v '^export ' "$dir/s3.env.raw" > "$dir/s3.env"
  # shellcheck disable=SC1091
  set -a; . "$dir/s3.env"; set +a
  curl -sf --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_ACCESS_KEY:$S3_SECRET_KEY" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X PUT "$S3_ENDPOINT/blz" > /dev/null || {
    log "cannot create the bucket blz at $S3_ENDPOINT"; exit 1; }
  echo "s3://blz/registry?endpoint=$S3_ENDPOINT&region=$S3_REGION&path_style=1" > "$dir/storage.url"

  # The replicas: the first one alone (it initializes the database and prints the admin
  # token), then the others.
  local k upstream="" replicas=""
  for k in $(seq 1 "$n"); do
    mkdir -p "$dir/r$k"
    free_port > "$dir/r$k/port"
  done
  for k in $(seq 1 "$n"); do
    # Another listener may take a picked port before the replica binds it: pick again (twice).
    local attempt
    for attempt in 1 2 3; do
      start_replica "$dir" "$k" && break
      if [ "$attempt" -lt 3 ] && grep -q "Address already in use" "$dir/r$k/serve.err"; then
        log "replica $k: port $(cat "$dir/r$k/port") was taken; trying another"
        : > "$dir/r$k/serve.err"
        free_port > "$dir/r$k/port"
        continue
      fi
      exit 1
    done
    upstream+="    server 127.0.0.1:$(cat "$dir/r$k/port") max_fails=1 fail_timeout=2s;"$'\n'
    replicas+="http://127.0.0.1:$(cat "$dir/r$k/port") "
  done
  local token
  token=$(sed -n 's/^admin token: //p' "$dir/r1/serve.out")
  [ -n "$token" ] || { log "replica 1 printed no admin token (was the database not fresh?)"; exit 1; }

  # nginx, round robin; requests go through unbuffered (uploads and downloads stream).
  local port
  port=$(free_port)
  mkdir -p "$dir/nginx/tmp"
  chmod 0777 "$dir/nginx/tmp"
  cat > "$dir/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $dir/nginx/nginx.pid;
error_log $dir/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log $dir/nginx/access.log;
  client_body_temp_path $dir/nginx/tmp/body;
  proxy_temp_path $dir/nginx/tmp/proxy;
  fastcgi_temp_path $dir/nginx/tmp/fastcgi;
  uwsgi_temp_path $dir/nginx/tmp/uwsgi;
  scgi_temp_path $dir/nginx/tmp/scgi;
  upstream blz {
$upstream    keepalive 32;
    keepalive_timeout 20s;
  }
  server {
    listen 127.0.0.1:$port;
    client_max_body_size 0;
    location / {
      proxy_pass http://blz;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$http_host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_request_buffering off;
      proxy_buffering off;
      proxy_read_timeout 600s;
      proxy_send_timeout 600s;
      # A replica that refuses the connection, does not accept it within 2 s or drops it
      # before answering (killed, restarting, host gone): the request goes to the next
      # replica, unless part of the answer already reached the client; a POST or PATCH only if
      # it was not sent yet, and no request whose streamed body was already passed on. At
      # most 3 tries within 10 s (docs/operating.md, "Scale out").
      proxy_connect_timeout 2s;
      proxy_next_upstream error timeout;
      proxy_next_upstream_tries 3;
      proxy_next_upstream_timeout 10s;
    }
  }
}
EOF
  local nginx_bin
  nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
  "$nginx_bin" -p "$dir/nginx" -c "$dir/nginx/nginx.conf" -e "$dir/nginx/error.log" || {
    log "nginx did not start:"; cat "$dir/nginx/error.log" >&2; exit 1; }
  for _ in $(seq 1 50); do
    # Through nginx: a replica that answers /readyz has its database and bucket (docs/operating.md).
    curl -sf -o /dev/null "http://127.0.0.1:$port/readyz" && break
    sleep 0.1
  done
  log "$n replicas behind http://127.0.0.1:$port (PostgreSQL + S3), logs in $dir"
  echo "BLZ_CLUSTER_URL=http://127.0.0.1:$port"
  echo "BLZ_CLUSTER_TOKEN=$token"
  echo "BLZ_CLUSTER_REPLICAS='${replicas% }'"
  echo "BLZ_CLUSTER_PG=$(cat "$dir/pg.url")"
  echo "BLZ_CLUSTER_STORAGE='$(cat "$dir/storage.url")'"
  echo "BLZ_CLUSTER_DIR=$dir"
  echo "export BLZ_CLUSTER_URL BLZ_CLUSTER_TOKEN BLZ_CLUSTER_REPLICAS BLZ_CLUSTER_PG BLZ_CLUSTER_STORAGE BLZ_CLUSTER_DIR"
}

cmd_kill() {
  local dir=$1 k=$2
  [ -f "$dir/r$k/pid" ] || { log "no replica $k in $dir"; exit 2; }
  kill -9 "$(cat "$dir/r$k/pid")" 2>/dev/null || true
}

cmd_stop() {
  local dir=$1 k
  [ -d "$dir" ] || exit 0
  if [ -f "$dir/nginx/nginx.pid" ]; then kill "$(cat "$dir/nginx/nginx.pid")" 2>/dev/null || true; fi
  for k in "$dir"/r*/pid; do
    [ -f "$k" ] && { kill "$(cat "$k")" 2>/dev/null || true; }
  done
  [ -d "$dir/s3" ] && bash "$ceph_dir/stop.sh" "$dir/s3" > /dev/null 2>&1 || true
  [ -d "$dir/pg" ] && bash "$pg_script" stop "$dir/pg" > /dev/null 2>&1 || true
  sleep 0.2
  rm -rf "$dir"
}

case "${1:-}" in
  start) [ $# -ge 3 ] || usage; cmd_start "$2" "$3" "${4:-}" ;;
  kill) [ $# -eq 3 ] || usage; cmd_kill "$2" "$3" ;;
  restart) [ $# -eq 3 ] || usage; start_replica "$(cd "$2" && pwd)" "$3" ;;
  stop) [ $# -eq 2 ] || usage; cmd_stop "$2" ;;
  *) usage ;;
esac
