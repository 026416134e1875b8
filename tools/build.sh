#!/usr/bin/env bash
# Configures and builds fdo into ${FDO_BUILD_DIR:-build} (Ninja). Release by
# default; with FDO_SANITIZE=address,undefined or thread, a RelWithDebInfo build
# with those sanitizers (tools/test.sh --sanitize=... sets both).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FDO_BUILD_DIR:-build}
JOBS=${FDO_JOBS:-$(nproc)}
SANITIZE=${FDO_SANITIZE:-}
TYPE=Release
[ -n "$SANITIZE" ] && TYPE=RelWithDebInfo
echo "[build] cmake -S . -B $BUILD_DIR -G Ninja -DCMAKE_BUILD_TYPE=$TYPE -DFDO_SANITIZE=$SANITIZE"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$TYPE" -DFDO_SANITIZE="$SANITIZE" >/dev/null
echo "[build] ninja -C $BUILD_DIR -j $JOBS"
ninja -C "$BUILD_DIR" -j "$JOBS"
