#!/usr/bin/env bash
# The GPU check, on a GPU host, from the bundle bench/gpu/pack.sh made
# (docs/gpu.md, "Checking a GPU host"). Writes what it saw under $OUT (or
# ./gpu-check-out): the device and driver, the GPU unit tests against the real
# driver's loader, gpu_check's report (results against host references, tuned
# against fixed launch configurations, cold compile vs hit vs restart), and,
# when the bundle holds fdod, the same kernels through a real fdod.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
B=/tmp/fdo-gpu
rm -rf "$B" /tmp/fdo-gpu-cache && mkdir -p "$B"
xz -dc .gpucheck/bundle.tar.xz | tar -C "$B" -xf - || exit 2
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for d in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu; do
  [ -e "$d/libcuda.so.1" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
{
  echo "== host"; uname -r; nproc
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1
  ldconfig -p | grep -m2 libcuda || find / -name 'libcuda.so.1' -not -path '*/proc/*' 2>/dev/null | head -3
} 2>&1 | tee "$OUT/host.txt"
rc=0
echo "== gpu_tests"
"$B/bin/gpu_tests" 2>&1 | tail -4 | tee "$OUT/gpu_tests.txt" || rc=1
echo "== gpu_check (cold, hit, results, tuning)"
"$B/bin/gpu_check" --program "$B/fixtures/gpu_kernels.ll" --cache /tmp/fdo-gpu-cache \
  --json "$OUT/check.json" 2>&1 | tee "$OUT/check.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
echo "== gpu_check (a new process: the disk tier)"
"$B/bin/gpu_check" --program "$B/fixtures/gpu_kernels.ll" --cache /tmp/fdo-gpu-cache \
  --phase restart --json "$OUT/restart.json" 2>&1 | tee "$OUT/restart.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
if [ -x "$B/bin/fdod" ] && [ -f bench/gpu/fdod_check.py ]; then
  echo "== through fdod"
  PY=python3
  $PY -c 'import numpy' 2>/dev/null || PY=/opt/torch/.venv/bin/python3
  FDO_BIN_DIR=$B/bin timeout 300 $PY bench/gpu/fdod_check.py --kernels "$B/fixtures/gpu_kernels.ll" \
    --json "$OUT/fdod.json" 2>&1 | tee "$OUT/fdod.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
echo "== rc $rc"
exit $rc
