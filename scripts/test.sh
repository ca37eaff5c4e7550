#!/usr/bin/env bash
# Installs what is missing, builds blz with warnings as errors and ASan+UBSan, and runs every
# test (unit, corpus and end-to-end). Tests that need ../shared/corpus skip when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The Node packages of web/ (the export tests' independent GGUF reader), as locked.
(cd web && npm ci --no-audit --no-fund --loglevel=error)
build=${BLZ_TEST_BUILD_DIR:-build-test}
jobs=$(nproc)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DBLZ_SANITIZE=ON -DBLZ_WERROR=ON -DBLZ_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs" | tee "$build/ctest-summary.log"
# The OCI distribution-spec conformance suite (v1.1.1, ../shared/tools/oci-conformance), all
# four workflows, against this build's `blz serve` with Basic credentials (docs/registry-api.md,
# "Conformance"); non-zero on any failed spec.
bash scripts/conformance.sh "$build/cli/blz"
# Then every libFuzzer target briefly (docs/fuzzing.md); non-zero on any crash.
bash scripts/fuzz.sh short
# The closing line: ctest's counts again, since the fuzz table came after them (ctest exits
# non-zero on a failure, so a run that gets here has none).
read -r failed total < <(sed -n \
  's/^[0-9]*% tests passed, \([0-9]*\) tests failed out of \([0-9]*\)$/\1 \2/p' \
  "$build/ctest-summary.log" | tail -1)
echo "tests: $((total - failed)) passed, $failed failed"
