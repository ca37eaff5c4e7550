#!/usr/bin/env bash
# The web view's tests (issue 13): the node unit tests of web/src's pure modules, then the
# Playwright browser tests driving Debian's chromium against a real `blz serve` started by
# web/tests/browser/global_setup.mjs (corpus versions pushed with the real `blz push`).
#
#   scripts/browser_test.sh [BLZ_BINARY [PLAYWRIGHT ARGS...]]   (or BLZ_BIN=...; default build-dev/cli/blz)
#   e.g. scripts/browser_test.sh build-dev/cli/blz hostile   runs only hostile.spec.mjs
#
# Needs node + npm (scripts/setup.sh) and chromium (apt-get install -y chromium; Playwright's
# own browser download is never used). Corpus: ../shared/corpus (BLZ_CORPUS overrides); without
# it the browser tests skip with that message. Screenshots: web/test-results/screenshots/.
# Exit status: non-zero when a test fails or something needed is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

blz=${1:-${BLZ_BIN:-build-dev/cli/blz}}
case "$blz" in /*) ;; *) blz="$root/$blz" ;; esac
if [ ! -x "$blz" ]; then
  echo "browser_test: no blz binary at $blz (build it, or pass its path)" >&2
  exit 2
fi
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "browser_test: $tool not found (scripts/setup.sh installs it)" >&2; exit 2; }
done
chromium=${CHROMIUM_PATH:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
  echo "browser_test: no chromium at $chromium (apt-get install -y chromium, or set CHROMIUM_PATH)" >&2
  exit 2
fi

cd web
if [ ! -d node_modules/@playwright/test ]; then
  npm ci --no-audit --no-fund
fi
echo "== web unit tests (node --test)"
node --test tests/unit/
echo "== web browser tests (Playwright, $chromium, blz = $blz)"
BLZ_BIN="$blz" CHROMIUM_PATH="$chromium" ./node_modules/.bin/playwright test "${@:2}"
