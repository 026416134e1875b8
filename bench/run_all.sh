#!/usr/bin/env bash
# bench/run_all.sh: every fdo-against-the-world benchmark in one command
# (bench/README.md says what each one measures and how to read it):
#   1. FDO effect      bench/fdo_effect/run_fdo_effect.py  (also: instrumentation cost)
#   2. service overhead bench/service/run_service.py
#   3. cache           bench/fdod_cache/run_cache.py
#   4. sampling        bench/sampling/run_sampling.py
# and, with --components, each component's micro-benchmark (build/bench/*/*_bench).
#
# Usage: bash bench/run_all.sh [--quick] [--components] [--no-build]
#   --quick       tiny sample counts (a smoke run, well under a minute of measuring)
#   --components  also run profile_store_bench, jit_bench, cache_bench, remote_bench, perf_bench,
#                 and fdod_cache/run_fleet.py (these start real PostgreSQL/Redis servers)
#   --no-build    skip tools/setup.sh + tools/build.sh (use the build as it is)
# Environment: FDO_BUILD_DIR (default build), FDO_BENCH_OUT (default
# $FDO_BUILD_DIR/bench/results): each bench's full JSON goes there, and the
# text of the whole run to run_all.txt beside it.
# Exit status: 0 when every bench succeeded, 1 when one failed (the others still run).
set -uo pipefail
cd "$(dirname "$0")/.."
quick=()
components=0
build=1
for a in "$@"; do
  case "$a" in
    --quick) quick=(--quick) ;;
    --components) components=1 ;;
    --no-build) build=0 ;;
    -h | --help)
      sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "run_all.sh: unknown argument '$a' (try --help)" >&2
      exit 2
      ;;
  esac
done

BUILD_DIR=${FDO_BUILD_DIR:-build}
if [ "$build" = 1 ]; then
  bash tools/setup.sh || exit 2
  bash tools/build.sh || exit 2
fi
BUILD=$(cd "$BUILD_DIR" 2>/dev/null && pwd) || {
  echo "run_all.sh: no build directory '$BUILD_DIR' (run without --no-build)" >&2
  exit 2
}
OUT=${FDO_BENCH_OUT:-$BUILD/bench/results}
mkdir -p "$OUT"
log="$OUT/run_all.txt"
: >"$log"

start=$(date +%s)
failed=()
run() {
  local name=$1
  shift
  local t0 status
  t0=$(date +%s)
  printf '\n==== %s\n$ %s\n' "$name" "$*" | tee -a "$log"
  "$@" 2> >(tee -a "$log.stderr" >&2) | tee -a "$log"
  status=${PIPESTATUS[0]}
  printf '==== %s: exit %d after %ds\n' "$name" "$status" $(($(date +%s) - t0)) | tee -a "$log"
  [ "$status" = 0 ] || failed+=("$name")
}

printf 'fdo benchmarks, %s, %s, %s CPUs, load %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" "$(nproc)" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"

run "FDO effect + instrumentation cost" python3 bench/fdo_effect/run_fdo_effect.py \
  --build-dir "$BUILD" --json "$OUT/fdo_effect.json" "${quick[@]}"
run "service overhead" python3 bench/service/run_service.py \
  --build-dir "$BUILD" --json "$OUT/service.json" "${quick[@]}"
run "cache through fdod" python3 bench/fdod_cache/run_cache.py \
  --build-dir "$BUILD" --json "$OUT/cache.json" "${quick[@]}"
run "sampling overhead + drift" python3 bench/sampling/run_sampling.py \
  --build-dir "$BUILD" --json "$OUT/sampling.json" "${quick[@]}"

if [ "$components" = 1 ]; then
  run "profile_store micro-bench" "$BUILD/bench/profile_store/profile_store_bench"
  run "profile_store SQLite vs PostgreSQL" "$BUILD/bench/profile_store/profile_store_backends_bench"
  run "jit micro-bench" "$BUILD/bench/jit/jit_bench"
  run "cache micro-bench" "$BUILD/bench/cache/cache_bench"
  run "remote object tier (Redis) micro-bench" "$BUILD/bench/cache/remote_bench" "${quick[@]}"
  run "fleet: a second host on PostgreSQL + Redis" python3 bench/fdod_cache/run_fleet.py \
    --build-dir "$BUILD" --json "$OUT/fleet.json" "${quick[@]}"
  run "perf micro-bench" "$BUILD/bench/perf/perf_bench"
fi

printf '\nall benchmarks: %ds; JSON and this text in %s\n' $(($(date +%s) - start)) "$OUT" | tee -a "$log"
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}" | tee -a "$log"
  exit 1
fi
exit 0
