#!/usr/bin/env bash
# A new user's first hour with blz, as one script (issue 24): a fresh HOME, a private registry
# over TLS with its own CA, `blz login` once, then push, pull by the reference push printed,
# diff as a CI gate, export, a lossy pull, and an offline re-pull with the registry stopped;
# after the login no command repeats `https://` or the CA.
#
#   bash tests/e2e/first_hour.sh BLZ_BINARY [CORPUS_DIR]
#
# Models: CORPUS_DIR/tiny-gpt2/{base,ft-v1} when present, else the generated pair of
# scripts/make_demo_model.py. Exits 0 when every step did what a user expects, else 1 with
# the step's name and output.
set -euo pipefail
blz=${1:?usage: first_hour.sh BLZ_BINARY [CORPUS_DIR]}
corpus=${2:-}
root=$(cd "$(dirname "$0")/../.." && pwd)

work=$(mktemp -d /tmp/blz-first-hour-XXXXXX)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  [ -n "${BLZ_KEEP_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "first_hour: FAILED: $*" >&2; exit 1; }
step() { echo "first_hour: $*"; }

# run NAME EXPECTED_EXIT CMD...: runs CMD with stdout in $work/NAME.out and stderr in
# $work/NAME.err; fails unless it exits with EXPECTED_EXIT.
run() {
  local name=$1 want=$2
  shift 2
  local rc=0
  "$@" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "--- stdout" >&2; cat "$work/$name.out" >&2
    echo "--- stderr" >&2; cat "$work/$name.err" >&2
    fail "$name: exit $rc, expected $want: $*"
  fi
}

# A fresh user: nothing configured, no cached versions, no proxies, no blz variables.
export HOME="$work/home"
mkdir -p "$HOME"
unset XDG_CONFIG_HOME XDG_CACHE_HOME BLZ_CONFIG_DIR BLZ_CACHE_DIR BLZ_CA_BUNDLE BLZ_TOKEN \
  BLZ_REGISTRY BLZ_OFFLINE https_proxy HTTPS_PROXY http_proxy HTTP_PROXY 2>/dev/null || true

if [ -n "$corpus" ] && [ -d "$corpus/tiny-gpt2/base" ] && [ -d "$corpus/tiny-gpt2/ft-v1" ]; then
  base="$corpus/tiny-gpt2/base"; ft="$corpus/tiny-gpt2/ft-v1"
else
  python3 "$root/scripts/make_demo_model.py" "$work/models" >/dev/null
  base="$work/models/base"; ft="$work/models/ft"
fi

step "a private CA and a certificate for 127.0.0.1"
cat >"$work/ca.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_ca
[dn]
CN = first-hour CA
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
EOF
cat >"$work/srv.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = registry
[v3_srv]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1
EOF
ossl() { openssl "$@" >/dev/null 2>&1 || fail "openssl $*"; }
ossl req -x509 -config "$work/ca.cnf" -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$work/ca.key" -out "$work/ca.pem" -days 2
ossl req -new -config "$work/srv.cnf" -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$work/srv.key" -out "$work/srv.csr"
ossl x509 -req -in "$work/srv.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
  -out "$work/srv.pem" -days 2 -extfile "$work/srv.cnf" -extensions v3_srv

start_registry() {
  "$blz" serve --data "$work/registry" --listen "${1:-127.0.0.1:0}" --private \
    --tls-cert "$work/srv.pem" --tls-key "$work/srv.key" \
    >"$work/serve.out" 2>"$work/serve.log" &
  server_pid=$!
  for _ in $(seq 1 200); do
    grep -q '^listening on ' "$work/serve.out" 2>/dev/null && return 0
    sleep 0.05
  done
  cat "$work/serve.log" >&2
  fail "the registry did not start"
}
stop_registry() {
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
}

step "blz serve --private over TLS"
start_registry
addr=$(sed -n 's|^listening on https://||p' "$work/serve.out" | head -n1)
token=$(sed -n 's|^admin token: ||p' "$work/serve.out" | head -n1)
[ -n "$addr" ] && [ -n "$token" ] || fail "no address or admin token in: $(cat "$work/serve.out")"

step "log in once, with the scheme and the CA"
printf '%s\n' "$token" > "$work/token.txt"
run login 0 "$blz" login "https://$addr" --ca-cert "$work/ca.pem" --token-stdin < "$work/token.txt"
# From here on: no https://, no --ca-cert, no BLZ_CA_BUNDLE.

step "push two versions"
run push-base 0 "$blz" push "$base" "$addr/team/gpt:base"
run push-ft 0 "$blz" push "$ft" "$addr/team/gpt:ft"
ft_ref=$(grep -o "https://$addr/team/gpt@sha256:[0-9a-f]\{64\}" "$work/push-ft.out" | head -n1)
[ -n "$ft_ref" ] || fail "push printed no pasteable reference with its scheme: $(cat "$work/push-ft.out")"

step "pull by the reference push printed: a loadable directory, not an archive path"
run pull-ft 0 "$blz" pull "$ft_ref"
snapshot=$(tail -n1 "$work/pull-ft.out")
[ -d "$snapshot" ] || fail "pull's last line is not a directory: $snapshot"
for f in $(cd "$ft" && find . -type f | sort); do
  cmp -s "$ft/$f" "$snapshot/$f" || fail "$f in $snapshot differs from the pushed file"
done

step "another local store (a CI runner's cache): the fine-tune comes as a patch from the base"
run pull-base 0 env BLZ_CACHE_DIR="$work/store2" "$blz" pull "$addr/team/gpt:base"
run pull-patch 0 env BLZ_CACHE_DIR="$work/store2" "$blz" pull "$addr/team/gpt:ft" \
  -o "$work/ft-dir" --json
python3 - "$work/pull-patch.out" <<'PY' || fail "the fine-tune was not pulled as a patch"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["used_patch"], r
assert r["bytes_downloaded"] < r["full_bytes"], r
PY

step "diff as a CI gate: exit 1 when anything changed, 0 when nothing did"
run diff-changed 1 "$blz" diff "$addr/team/gpt:base" "$addr/team/gpt:ft"
grep -q "IDENTICAL" "$work/diff-changed.out" && fail "diff of two different versions says IDENTICAL"
run diff-same 0 "$blz" diff "$ft_ref" "$work/ft-dir"

step "export a registry version"
run export 0 "$blz" export "$addr/team/gpt:ft" --format safetensors --cast f16 -o "$work/export"
[ -n "$(find "$work/export" -name '*.safetensors' -size +0)" ] || fail "export wrote no safetensors"

step "a lossy pull never downloads more than the lossless patch"
run lossy 0 "$blz" pull "$addr/team/gpt:ft" --lossy auto --max-error 0.01 -o "$work/lossy" --json
python3 - "$work/lossy.out" <<'PY' || fail "the lossy pull report is not what a user needs"
import json, sys
r = json.load(open(sys.argv[1]))
patch = r["lossless_patch_bytes"]
assert r["bytes_downloaded"] <= patch, ("auto downloaded more than the lossless patch", r)
if r["lossy"]:
    assert "delta_rel_l2" in r["error"], ("the report hides how much of the update was lost", r)
else:
    assert r.get("lossless_fallback") or r["error"]["max_abs"] == 0, r
PY

step "offline: the registry is stopped; versions held locally still pull"
stop_registry
run offline-digest 0 "$blz" pull "$ft_ref" -o "$work/offline-digest"
run offline-tag 0 "$blz" pull --offline "$addr/team/gpt:ft" -o "$work/offline-tag"
for d in offline-digest offline-tag; do
  for f in $(cd "$ft" && find . -type f | sort); do
    cmp -s "$ft/$f" "$work/$d/$f" || fail "$d: $f differs"
  done
done
run offline-diff 0 "$blz" diff "$ft_ref" "$work/ft-dir"
run offline-export 0 env BLZ_OFFLINE=1 "$blz" export "$addr/team/gpt:ft" --format safetensors \
  -o "$work/export-offline"
run offline-missing 3 "$blz" pull --offline "$addr/team/gpt:never-pushed" -o "$work/nothing"
[ ! -e "$work/nothing" ] || fail "a failed offline pull left $work/nothing behind"

echo "first_hour: OK"
