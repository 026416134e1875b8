#!/usr/bin/env bash
# Configures and builds fdo into ${FDO_BUILD_DIR:-build} (Release, Ninja).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FDO_BUILD_DIR:-build}
JOBS=${FDO_JOBS:-$(nproc)}
echo "[build] cmake -S . -B $BUILD_DIR -G Ninja -DCMAKE_BUILD_TYPE=Release"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
echo "[build] ninja -C $BUILD_DIR -j $JOBS"
ninja -C "$BUILD_DIR" -j "$JOBS"
