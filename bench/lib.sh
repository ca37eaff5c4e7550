# What the bench scripts share (source it: . "$(dirname "$0")/lib.sh"). Functions only: sourcing
# it runs nothing.

# blz_serve_start BIN OUT ERR ARGS...: starts `BIN serve ARGS...` in the background (stdout to
# OUT, stderr to ERR) and waits at most 20 s for its "listening on" line. Sets blz_pid, blz_url
# ("http://HOST:PORT", as printed), blz_addr ("HOST:PORT") and blz_token (the admin token, which
# only a data directory's first start prints; empty otherwise). Returns 1, naming ERR's last
# lines, when the server did not start.
blz_serve_start() {
  local bin=$1 out=$2 err=$3
  shift 3
  "$bin" serve "$@" >"$out" 2>"$err" &
  blz_pid=$!
  for _ in $(seq 1 200); do
    grep -q '^listening on ' "$out" 2>/dev/null && break
    kill -0 "$blz_pid" 2>/dev/null || break  # it exited
    sleep 0.1
  done
  blz_url=$(sed -n 's/^listening on //p' "$out" | head -n1)
  if [ -z "$blz_url" ]; then
    echo "blz serve did not start: $(tail -n 5 "$err" 2>/dev/null)" >&2
    return 1
  fi
  blz_addr=${blz_url#*://}
  blz_token=$(sed -n 's/^admin token: //p' "$out" | head -n1)
}

# blz_wait_idle URL TOKEN [TRIES]: waits until GET URL/v2/_blz/storage says "pending": 0 (the
# registry's background compression is done), one look every 0.25 s, at most TRIES (1200).
blz_wait_idle() {
  for _ in $(seq 1 "${3:-1200}"); do
    curl -sf -H "Authorization: Bearer $2" "$1/v2/_blz/storage" |
      python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin).get("pending", 1) == 0 else 1)' &&
      return 0
    sleep 0.25
  done
  echo "the registry at $1 did not become idle" >&2
  return 1
}

# blz_bench_init NAME: the common start of a script that runs one `blz serve` at a time (call
# it after `cd` to the repo root). Sets BLZ (default build-release/cli/blz, else
# build-test/cli/blz) to an absolute path, WORK (default: a new temporary directory; created),
# PY=/usr/bin/python3 and server_pid="" (set it to the server's pid: it is killed at exit);
# defines log (a line on stderr prefixed "NAME: "); at exit WORK is removed unless KEEP=1.
blz_bench_init() {
  blz_bench_name=$1
  if [ -z "${BLZ:-}" ]; then
    BLZ=build-release/cli/blz
    [ -x "$BLZ" ] || BLZ=build-test/cli/blz
  fi
  BLZ=$(realpath "$BLZ")
  WORK=${WORK:-$(mktemp -d)}
  PY=/usr/bin/python3
  mkdir -p "$WORK"
  server_pid=""
  trap blz_bench_cleanup EXIT
}
blz_bench_cleanup() {
  if [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null; then
    wait "$server_pid" 2>/dev/null || true
  fi
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
log() { echo "${blz_bench_name:-bench}: $*" >&2; }

# measure_medians WAY RUNS: RUNS is bench/measure_run lines ("<wall s> <CPU s> <peak RssAnon
# KiB> <exit status>") joined by ';'. Prints "<median wall> <median CPU> <median RssAnon KiB>";
# fails, naming WAY on stderr, when a run did not exit 0.
measure_medians() {
  local way=$1 line w c k st
  local -a rs walls=() cpus=() rss=()
  IFS=';' read -r -a rs <<<"$2"
  for line in "${rs[@]}"; do
    [ -z "$line" ] && continue
    read -r w c k st <<<"$line"
    [ "$st" = 0 ] || { echo "$way failed (exit $st)" >&2; return 1; }
    walls+=("$w"); cpus+=("$c"); rss+=("$k")
  done
  /usr/bin/python3 -c 'import sys, statistics as s
a = [float(x) for x in sys.argv[1:]]; n = len(a) // 3
print(*(s.median(a[i * n:(i + 1) * n]) for i in range(3)))' "${walls[@]}" "${cpus[@]}" "${rss[@]}"
}

# llama_pair_args SIZE: the bench/gen_llama_pair flags of the generated BF16 pair of SIZE (64M,
# 256M or 1G: 59 MB, 265 MB, 0.93 GB of tensors per model), as bench/pull_bench.sh and
# bench/dir_apply_bench.sh use them.
llama_pair_args() {
  case $1 in
    64M) echo "--layers 1 --hidden 1024 --intermediate 2816 --vocab 8192";;
    256M) echo "--layers 9 --hidden 1024 --intermediate 2816 --vocab 8192";;
    1G) echo "--layers 1";;
    *) echo "unknown size $1 (64M, 256M or 1G)" >&2; return 2;;
  esac
}
