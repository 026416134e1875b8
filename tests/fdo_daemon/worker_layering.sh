#!/usr/bin/env bash
# Fails if the fdo-worker binary carries code it must not: SQLite, Boost.Asio,
# libsystemd, or fdod's store, server, service or cache layers. Reads the
# dynamic section (NEEDED) and the symbol table of the binary as built.
set -euo pipefail
bin=$1
[ -x "$bin" ] || { echo "no executable at $bin"; exit 1; }
fail=0
needed=$(readelf -d "$bin" | awk '/NEEDED/ {print $NF}')
for lib in libsqlite3 libsystemd libboost libpq libhiredis; do
  if grep -q "$lib" <<<"$needed"; then
    echo "fdo-worker links $lib dynamically:"; echo "$needed"; fail=1
  fi
done
symbols=$(nm -C --defined-only "$bin" 2>/dev/null || true)
[ -n "$symbols" ] || { echo "cannot read symbols of $bin (stripped?)"; exit 1; }
check() {
  local what=$1 pattern=$2 hits
  hits=$(grep -E "$pattern" <<<"$symbols" | head -5 || true)
  if [ -n "$hits" ]; then
    echo "fdo-worker contains $what:"; echo "$hits"; fail=1
  fi
}
check "SQLite" ' sqlite3_[a-z_]+$'
check "Boost.Asio" 'boost::asio::'
check "libsystemd" ' sd_(notify|listen_fds|booted|watchdog)'
check "the profile store" 'fdo::profile_store::'
check "the cache" 'fdo::cache::'
check "the server" 'fdo::daemon::Server(::|$)'
check "the service" 'fdo::daemon::(Service|FeedbackLoop|ProgramRegistry)'
check "the config" 'fdo::daemon::Config::'
[ $fail -eq 0 ] && echo "fdo-worker: $(wc -l <<<"$symbols") defined symbols, none from the daemon-only layers"
exit $fail
