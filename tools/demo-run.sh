#!/usr/bin/env bash
# The demo (run by tools/demo.sh after setup and build): starts fdod with an
# embedded SQLite store in a temporary state dir, runs the example programs
# through enough stages to show each profile being rewritten and the recompiled
# code getting faster, shows one profile's history and the cache's reasons,
# prints the URL of `fdoctl web` (kept up for FDO_DEMO_WEB_SECONDS: 120 at a
# terminal, Enter stops it sooner; 0 otherwise), and stops the daemon cleanly.
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
say "the interpreter's dispatch loop, block by block, with the counts of its profile"
echo "\$ fdoctl profile annotate ${prog:0:16} --function execute   # block labels and counts only"
fdoctl profile annotate "$prog" --function execute >"$tmp/annotate.out" || true
grep -E '^; function|; count' "$tmp/annotate.out" | head -n 24 || true
echo "  ... ($(wc -l <"$tmp/annotate.out") lines of annotated IR)"
say "what this host can measure"
echo "\$ fdoctl doctor"
fdoctl doctor || true

say "the same, to look at: fdoctl web"
echo "\$ fdoctl web --listen 127.0.0.1:0"
"$BUILD/fdoctl" --socket "$sock" web --listen 127.0.0.1:0 >"$tmp/web.out" 2>"$tmp/web.log" &
web_pid=$!
url=""
for _ in $(seq 1 100); do
  url=$(grep -o 'http://[^ ]*' "$tmp/web.out" 2>/dev/null || true)
  [ -n "$url" ] && break
  kill -0 "$web_pid" 2>/dev/null || break
  sleep 0.05
done
if [ -n "$url" ]; then
  echo "open ${url} — programs and profiles; each profile's functions by count (each one's IR"
  echo "shaded by block counts), its history and diffs; each program's stage timeline by profile"
  echo "version and variant, and its cache-key lineage (read-only)"
  # Up for FDO_DEMO_WEB_SECONDS (default: 120 at a terminal, where Enter
  # stops it sooner; 0 otherwise, so the demo never waits for input).
  secs=${FDO_DEMO_WEB_SECONDS:-}
  if [ -z "$secs" ]; then if [ -t 0 ]; then secs=120; else secs=0; fi; fi
  if [ "$secs" -gt 0 ]; then
    if [ -t 0 ]; then
      read -r -t "$secs" -p "the view stays up ${secs}s; press Enter to stop it sooner " _ || true
      echo
    else
      sleep "$secs"
    fi
  fi
else
  cat "$tmp/web.log" >&2
fi
kill -TERM "$web_pid" 2>/dev/null || true
wait "$web_pid" 2>/dev/null || true

say "stopping fdod (SIGTERM drains and exits 0)"
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
echo "fdod exited with status $status"
exit "$status"
