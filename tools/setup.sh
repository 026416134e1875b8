#!/usr/bin/env bash
# Installs every Debian 12 package fdo needs to build, test, demo and benchmark.
# Idempotent: installs only what is missing, runs `apt-get update` at most once,
# never reads stdin. Run as root, or as a user with passwordless sudo.
set -euo pipefail

PACKAGES=(
  # build
  build-essential cmake ninja-build pkg-config git
  # LLVM 16: libraries + CMake package, clang for example/bench IR, tools (llvm-profdata-16)
  llvm-16-dev llvm-16-tools clang-16 libclang-rt-16-dev
  # components
  libpfm4-dev libsqlite3-dev libboost-dev nlohmann-json3-dev libcli11-dev libsystemd-dev
  # fdod's allocator (docs/fdod.md, "Memory")
  libjemalloc-dev
  # fleet (docs/fleet.md): the remote object tier's client (hiredis); real Redis and
  # PostgreSQL servers for the test fixtures (tests/support), libpq for their smoke test
  libhiredis-dev libpq-dev redis-server postgresql
  # the sandbox of client code (seccomp filters; docs/security.md)
  libseccomp-dev
  # fdod's metrics registry and its Prometheus HTTP endpoint (metrics_listen)
  prometheus-cpp-dev
  # man pages generated from docs/ at build time (tools/packaging)
  pandoc
  # `fdoctl web`: Chart.js for its charts; chromium for its headless-browser test
  libjs-chart.js chromium
  # tests
  catch2 python3 python3-jsonschema sqlite3 systemd util-linux procps
  # packaging tests: man -l and groff on the man pages, dpkg-shlibdeps for cpack -G DEB
  man-db groff-base dpkg-dev
  # bench/service/run_instructions.py: fdod's instructions per request under callgrind
  valgrind
  # the Python package (python/): pip installs it offline, without build isolation
  python3-pip python3-setuptools python3-wheel
  # its buffer protocol test with numpy arrays (tests/python)
  python3-numpy
)

log() { printf '[setup] %s\n' "$*"; }

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  log "all ${#PACKAGES[@]} required packages are installed"
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
  else
    log "missing packages: ${missing[*]}"
    log "not root and no sudo: install them as root, then run this again" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
log "missing packages: ${missing[*]}"
log "running: apt-get update"
"${SUDO[@]}" apt-get update -qq </dev/null
log "running: apt-get install -y --no-install-recommends ${missing[*]}"
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
log "installed ${#missing[@]} package(s)"
