#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests: initdb + pg_ctl in a directory of its own, on a
# loopback port, with trust authentication and fsync off. Used by the C++ harness
# (tests/store/postgres/postgres_server.h) and usable by hand or from test scripts:
#
#   url=$(tests/store/postgres/postgres_server.sh start DIR [PORT])   # prints the URL
#   psql "$url" -c 'select 1'
#   tests/store/postgres/postgres_server.sh createdb DIR NAME          # prints NAME's URL
#   tests/store/postgres/postgres_server.sh stop DIR                   # stops, deletes DIR
#   tests/store/postgres/postgres_server.sh halt DIR     # stops the server, keeps DIR (a fault)
#   tests/store/postgres/postgres_server.sh resume DIR   # starts it again: same port and data
#
# DIR must not exist or be empty. PORT defaults to a free one. The URL is
# postgresql://blz@127.0.0.1:PORT/blz (database "blz", superuser "blz", no password).
# PostgreSQL refuses to run as root, so as root the server runs as the user
# $BLZ_PG_USER (default nobody) and DIR is handed to that user.
# A watchdog stops the server and deletes DIR once the process that ran `start` (this
# script's parent: the test binary, or the calling shell) exits, so a test that crashes leaves
# no server behind; BLZ_PG_NO_WATCHDOG=1 turns it off (for a server started by hand).
# Exit codes: 0 ok, 1 start failed (the logs are printed to stderr and stay in DIR: run stop
# to remove it), 77 no PostgreSQL binaries.
set -euo pipefail

find_bindir() {
  # BLZ_PG_BINDIR: the directory of initdb, pg_ctl and psql (default: PostgreSQL 15's, else
  # the newest installed, else the PATH's).
  if [ -n "${BLZ_PG_BINDIR:-}" ]; then
    if [ -x "$BLZ_PG_BINDIR/initdb" ]; then echo "$BLZ_PG_BINDIR"; else echo ""; fi
    return
  fi
  local d
  for d in /usr/lib/postgresql/15/bin $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return; fi
  done
  if command -v initdb > /dev/null 2>&1; then dirname "$(command -v initdb)"; return; fi
  echo ""
}

as_server_user() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "${BLZ_PG_USER:-nobody}" -- "$@"
  else
    "$@"
  fi
}

# A port below the kernel's ephemeral range (scripts/free_port.py says why).
free_port_py=$(cd "$(dirname "$0")/../../../scripts" && pwd)/free_port.py
free_port() { python3 "$free_port_py"; }

# Starts the server of "$dir/data" on 127.0.0.1:$1.
pg_start() {
  as_server_user "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $1 -k $dir -c fsync=off \
        -c synchronous_commit=off -c full_page_writes=off -c max_connections=50" \
    start > "$dir/pg_ctl.log" 2>&1
}

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 start DIR [PORT] | createdb DIR NAME | halt DIR | resume DIR | stop DIR" >&2
  exit 2
fi
bindir=$(find_bindir)
if [ -z "$bindir" ]; then
  echo "postgres_server: no PostgreSQL binaries (initdb, pg_ctl); install postgresql-15" >&2
  exit 77
fi

case "$cmd" in
  start)
    port=${3:-$(free_port)}
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then chown "${BLZ_PG_USER:-nobody}" "$dir"; fi
    chmod 700 "$dir"
    if ! as_server_user test -w "$dir"; then
      echo "postgres_server: $dir is not writable by ${BLZ_PG_USER:-nobody}" \
        "(its parent directories must be traversable by that user; set TMPDIR)" >&2
      exit 1
    fi
    if ! as_server_user "$bindir/initdb" -D "$dir/data" -U blz --auth=trust -E UTF8 \
        --locale=C.UTF-8 -N > "$dir/initdb.log" 2>&1; then
      echo "postgres_server: initdb failed in $dir/data:" >&2
      cat "$dir/initdb.log" >&2
      exit 1
    fi
    # The unix socket goes into DIR too, so nothing is written to /var/run/postgresql. A free
    # port picked here may be taken by someone else before the server binds it (tests run in
    # parallel): then try another one, unless the caller chose the port.
    for attempt in 1 2 3; do
      if pg_start "$port"; then
        break
      fi
      if [ -z "${3:-}" ] && [ "$attempt" -lt 3 ] && grep -q "could not bind" "$dir/server.log"; then
        port=$(free_port)
        continue
      fi
      echo "postgres_server: pg_ctl start failed on 127.0.0.1:$port:" >&2
      cat "$dir/pg_ctl.log" "$dir/server.log" >&2 || true
      exit 1
    done
    if ! as_server_user "$bindir/psql" -X -q -h "$dir" -p "$port" -U blz -d postgres \
        -c 'CREATE DATABASE blz' > "$dir/createdb.log" 2>&1; then
      echo "postgres_server: CREATE DATABASE failed:" >&2
      cat "$dir/createdb.log" >&2
      as_server_user "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop > /dev/null 2>&1 || true
      exit 1
    fi
    echo "$port" > "$dir/port"
    if [ -z "${BLZ_PG_NO_WATCHDOG:-}" ]; then
      owner=$PPID
      (
        # The postmaster of the moment (halt + resume start a new one).
        alive() {
          postmaster=$(head -n 1 "$dir/data/postmaster.pid" 2> /dev/null) || return 1
          [ -n "$postmaster" ] && kill -0 "$postmaster" 2> /dev/null &&
            grep -q postgres "/proc/$postmaster/cmdline"
        }
        # A halted server (halt: the file "halted") is waited for, not cleaned up.
        while kill -0 "$owner" 2> /dev/null && { alive || [ -e "$dir/halted" ]; }; do sleep 1; done
        if alive; then
          if [ -d "$dir/data" ]; then
            as_server_user "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop > /dev/null 2>&1 || true
          fi
          if alive; then kill -QUIT "$postmaster" 2> /dev/null || true; fi
        fi
        rm -rf "$dir"
      ) < /dev/null > /dev/null 2>&1 &
    fi
    echo "postgresql://blz@127.0.0.1:$port/blz"
    ;;
  createdb)
    name=${3:?usage: $0 createdb DIR NAME}
    port=$(cat "$dir/port")
    if ! as_server_user "$bindir/psql" -X -q -h "$dir" -p "$port" -U blz -d postgres \
        -c "CREATE DATABASE \"$name\"" > "$dir/createdb.log" 2>&1; then
      echo "postgres_server: CREATE DATABASE $name failed:" >&2
      cat "$dir/createdb.log" >&2
      exit 1
    fi
    echo "postgresql://blz@127.0.0.1:$port/$name"
    ;;
  halt)
    touch "$dir/halted"
    as_server_user "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop > "$dir/pg_ctl.log" 2>&1
    ;;
  resume)
    if ! pg_start "$(cat "$dir/port")"; then
      echo "postgres_server: pg_ctl start (resume) failed:" >&2
      cat "$dir/pg_ctl.log" "$dir/server.log" >&2 || true
      exit 1
    fi
    rm -f "$dir/halted"
    ;;
  stop)
    if [ -d "$dir/data" ]; then
      as_server_user "$bindir/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop \
        > /dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
  *)
    echo "usage: $0 start DIR [PORT] | createdb DIR NAME | halt DIR | resume DIR | stop DIR" >&2
    exit 2
    ;;
esac
