#!/usr/bin/env bash
# The demo (run by tools/demo.sh after setup and build): starts fdod with an
# embedded SQLite store in a temporary state dir, runs the example programs
# through enough stages to show each profile being rewritten and the recompiled
# code getting faster, shows one profile's history and the cache's reasons,
# and stops the daemon cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(cd "${FDO_BUILD_DIR:-build}" && pwd)
STAGES=${FDO_DEMO_STAGES:-6}
tmp=$(mktemp -d /tmp/fdo-demo.XXXXXX)
sock="$tmp/fdod.sock"
fdoctl() { "$BUILD/fdoctl" --socket "$sock" "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

cat >"$tmp/fdod.conf" <<CONF
# Demo settings: rewrite a profile after two instrumented stages, and let the
# stage that misses wait for its recompile so the table shows it directly.
policy.min_stages = 2
policy.min_counts = 1000
tier_up = sync
compile_workers = 1
exec_workers = 1
CONF

say "starting fdod (state dir $tmp/state)"
echo "\$ fdod --socket $sock --state-dir $tmp/state --config $tmp/fdod.conf"
"$BUILD/fdod" --socket "$sock" --state-dir "$tmp/state" --config "$tmp/fdod.conf" 2>"$tmp/fdod.log" &
pid=$!
cleanup() {
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
for _ in $(seq 1 200); do
  fdoctl status >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/fdod.log"; echo "fdod exited early" >&2; exit 1; }
  sleep 0.05
done
echo "\$ fdoctl status"
fdoctl status

for ex in interp:interp_run forest:forest_run lexer:lex_run sort:sort_run csv:csv_run; do
  name=${ex%%:*}; entry=${ex#*:}
  say "$name: $STAGES stages of $entry"
  echo "\$ fdoctl run examples/$name.ll --entry $entry --stages $STAGES"
  fdoctl run "$BUILD/examples/$name.ll" --entry "$entry" --stages "$STAGES" --name "$name"
done

ids=$(fdoctl run "$BUILD/examples/interp.ll" --entry interp_run --stages 1 --json |
  python3 -c 'import json,sys; p=json.load(sys.stdin)["program"]; print(p["profile_key"], p["program"])')
pk=${ids%% *}; prog=${ids#* }
say "the interpreter's profile history"
echo "\$ fdoctl profile history ${pk:0:16}"
fdoctl profile history "$pk"
say "why each interpreter stage hit or missed the cache"
echo "\$ fdoctl explain ${prog:0:16}"
fdoctl explain "$prog"
say "what this host can measure"
echo "\$ fdoctl doctor"
fdoctl doctor || true

say "stopping fdod (SIGTERM drains and exits 0)"
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
echo "fdod exited with status $status"
exit "$status"
