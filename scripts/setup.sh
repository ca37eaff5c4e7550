#!/usr/bin/env bash
# Installs the Debian packages blz needs to build and test. Idempotent: apt-get runs
# only when a package is missing. Needs root (or sudo) only in that case.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libboost-dev libsqlite3-dev libzstd-dev libxxhash-dev libssl-dev
  nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  zstd xdelta3 curl python3 openssl
  skopeo
  clang-14 libclang-rt-14-dev
  zlib1g-dev
  libeigen3-dev
  python3-torch python3-numpy
  # The web view's browser tests (web/tests, Playwright) drive Debian's chromium headless
  # (Playwright cannot download browsers here); fonts-liberation is only a Recommends of
  # chromium-common, which --no-install-recommends skips, and pages render text with it.
  chromium fonts-liberation
  # The PostgreSQL metadata driver (store/postgres) links libpq; its tests start a real
  # PostgreSQL 15 server of their own in a temp dir (tests/store/postgres/postgres_server.sh).
  libpq-dev postgresql-15
  # The S3 tests (tests/store/s3) run a real S3 server, Ceph's RADOS Gateway, as a throwaway
  # single-node cluster (../shared/tools/ceph-s3/start.sh): ~51 packages, 252 MiB installed.
  ceph-mon ceph-osd radosgw
  # The round-robin load balancer in front of `blz serve` replicas (scripts/cluster.sh; the
  # conformance suite through 2 replicas in scripts/test.sh).
  nginx-light
)
# The web view (web/) is built with Node.js and npm (web/CMakeLists.txt fails without them),
# and the export tests read GGUF files with an independent reader (@huggingface/gguf, web/):
# Debian's nodejs and npm unless the machine already has both commands.
if ! command -v node > /dev/null 2>&1 || ! command -v npm > /dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
