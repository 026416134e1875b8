#!/usr/bin/env bash
# Packs what the GPU check needs into .gpucheck/bundle.tar.xz (ignored by git):
# the binaries named (default: gpu_check, the GPU tests, fdod, fdo-worker,
# fdoctl), the shared libraries `ldd` lists for them except the C and C++
# runtimes every Linux host has, and the test kernels. GPU machines lent to
# sessions have no LLVM: libLLVM travels here (~25 MB compressed).
#   bash bench/gpu/pack.sh [build-dir]
# then run bench/gpu/run_check.sh there (it unpacks the bundle).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
OUT=.gpucheck
rm -rf "$OUT" && mkdir -p "$OUT/stage/bin" "$OUT/stage/lib" "$OUT/stage/fixtures"
grep -qx '/.gpucheck/' .git/info/exclude 2>/dev/null || echo '/.gpucheck/' >>.git/info/exclude
bins=("$BUILD/bench/gpu/gpu_check" "$BUILD/tests/gpu/gpu_tests")
for extra in fdod fdo-worker fdoctl; do
  [ -x "$BUILD/$extra" ] && bins+=("$BUILD/$extra")
done
for b in "${bins[@]}"; do
  cp "$b" "$OUT/stage/bin/"
  ldd "$b" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
    libc.so.* | libm.so.* | libstdc++.so.* | libgcc_s.so.* | libpthread.so.* | libdl.so.* | librt.so.*) ;;
    *) cp -Ln "$lib" "$OUT/stage/lib/" ;;
    esac
  done
done
cp tests/jit/fixtures/gpu_kernels.ll tests/jit/fixtures/gpu_kernels.cu "$OUT/stage/fixtures/"
strip --strip-unneeded "$OUT"/stage/bin/* 2>/dev/null || true
tar -C "$OUT/stage" -cf - . | xz -T0 -6 >"$OUT/bundle.tar.xz"
rm -rf "$OUT/stage"
ls -l "$OUT/bundle.tar.xz"
