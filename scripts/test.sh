#!/usr/bin/env bash
# Installs what is missing, builds blz with warnings as errors and ASan+UBSan, and runs every
# test (unit, corpus and end-to-end). Tests that need ../shared/corpus skip when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${BLZ_TEST_BUILD_DIR:-build-test}
jobs=$(nproc)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DBLZ_SANITIZE=ON -DBLZ_WERROR=ON -DBLZ_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs"
bash scripts/fuzz.sh short
