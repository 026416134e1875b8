#!/usr/bin/env bash
# The README's test command: install what is missing, build, run the whole CTest
# suite. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash tools/setup.sh
bash tools/build.sh
BUILD_DIR=${FDO_BUILD_DIR:-build}
echo "[test] ctest --test-dir $BUILD_DIR --output-on-failure -j $(nproc)"
status=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" || status=$?
echo "[test] finished in $(( $(date +%s) - start ))s with status $status"
exit $status
