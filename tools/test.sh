#!/usr/bin/env bash
# The README's test command: install what is missing, build, run the whole CTest
# suite. Exits non-zero on any failure.
#
#   tools/test.sh                              Release build in build/, every test
#   tools/test.sh --sanitize=address,undefined ASan+UBSan build in build-asan/, every test
#   tools/test.sh --sanitize=thread            TSan build in build-tsan/, every test but the
#                                              benchmarks (label bench: timing only)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
SANITIZE=""
for arg in "$@"; do
  case "$arg" in
    --sanitize=*) SANITIZE=${arg#--sanitize=} ;;
    *) echo "usage: tools/test.sh [--sanitize=address,undefined|thread]" >&2; exit 64 ;;
  esac
done
CTEST_ARGS=(--output-on-failure -j "$(nproc)")
case "$SANITIZE" in
  "") BUILD_DIR=${FDO_BUILD_DIR:-build} ;;
  address,undefined|undefined,address)
    BUILD_DIR=${FDO_BUILD_DIR:-build-asan}
    # Leak checking stays on; a finding fails the process that met it.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:strict_string_checks=1:check_initialization_order=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    ;;
  thread)
    BUILD_DIR=${FDO_BUILD_DIR:-build-tsan}
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tools/tsan.supp}
    CTEST_ARGS+=(-LE bench)
    ;;
  *) echo "tools/test.sh: unknown sanitizer set '$SANITIZE' (address,undefined or thread)" >&2; exit 64 ;;
esac
bash tools/setup.sh
FDO_BUILD_DIR=$BUILD_DIR FDO_SANITIZE=$SANITIZE bash tools/build.sh
# Every test that skips for a missing prerequisite appends "name: reason" here
# (tests/support/skip.h, fdo_unittest.py, skip.sh); the list ends the run.
export FDO_SKIP_LOG=$(cd "$BUILD_DIR" && pwd)/Testing/skipped.txt
mkdir -p "$(dirname "$FDO_SKIP_LOG")"
: >"$FDO_SKIP_LOG"
echo "[test] ctest --test-dir $BUILD_DIR ${CTEST_ARGS[*]}"
status=0
ctest --test-dir "$BUILD_DIR" "${CTEST_ARGS[@]}" || status=$?
if [[ -s $FDO_SKIP_LOG ]]; then
  echo "[test] skipped for a missing prerequisite ($(sort -u "$FDO_SKIP_LOG" | wc -l)):"
  sort -u "$FDO_SKIP_LOG" | sed 's/^/[test]   /'
else
  echo "[test] no test skipped"
fi
echo "[test] ${SANITIZE:+($SANITIZE) }finished in $(( $(date +%s) - start ))s with status $status"
exit $status
