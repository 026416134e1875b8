#!/usr/bin/env bash
# systemd-analyze verify on tools/systemd/fdod.{socket,service}, with
# ExecStart pointed at a built binary (verify checks the program exists).
# Usage: verify_units.sh UNIT_DIR EXECUTABLE. Exit 77 = skipped.
set -euo pipefail
. "$(dirname "$0")/../../support/skip.sh"
unit_dir=$1
exe=$2
if ! command -v systemd-analyze >/dev/null 2>&1; then
  fdo_skip "systemd units" "systemd-analyze is not installed (package systemd)"
fi
[[ -x $exe ]] || { echo "FAIL: $exe is not an executable"; exit 1; }
tmp=$(mktemp -d /tmp/fdod-units-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cp "$unit_dir/fdod.socket" "$tmp/fdod.socket"
# The unit is a template: the install rules replace @sbindir@ (tools/packaging).
grep -q '^ExecStart=@sbindir@/fdod$' "$unit_dir/fdod.service" ||
  { echo "FAIL: fdod.service has no 'ExecStart=@sbindir@/fdod' line"; exit 1; }
sed "s|^ExecStart=@sbindir@/fdod$|ExecStart=$exe|" "$unit_dir/fdod.service" >"$tmp/fdod.service"
# The properties the issue asks for, so a later edit cannot drop them silently.
for want in 'Type=notify' 'ListenStream=/run/fdod/fdod.sock' 'SocketMode=0660' \
            'ProtectSystem=strict' 'NoNewPrivileges=yes' 'PrivateTmp=yes' \
            'StateDirectory=fdod' 'RuntimeDirectory=fdod' 'WatchdogSec=' \
            'ExecReload=/bin/kill -HUP $MAINPID' 'Restart=on-failure' 'User=fdod' \
            'RestrictAddressFamilies=AF_UNIX' 'SystemCallArchitectures=native' \
            'PrivateNetwork=yes' 'SystemCallErrorNumber=EPERM' \
            'SystemCallFilter=~@clock @cpu-emulation @module @mount @obsolete @raw-io @reboot @swap' \
            'AmbientCapabilities=CAP_SETUID CAP_SETGID CAP_PERFMON'; do
  grep -qF -- "$want" "$tmp/fdod.service" "$tmp/fdod.socket" ||
    { echo "FAIL: units lack '$want'"; exit 1; }
done
if grep -q '^MemoryDenyWriteExecute=yes' "$tmp/fdod.service"; then
  echo "FAIL: MemoryDenyWriteExecute=yes breaks JIT execution"
  exit 1
fi
out=$(systemd-analyze verify --man=no "$tmp/fdod.socket" "$tmp/fdod.service" 2>&1) && rc=0 || rc=$?
# verify also reports problems in unrelated units of the host; keep ours.
ours=$(grep -E 'fdod\.(service|socket)' <<<"$out" || true)
echo "systemd-analyze verify exit status $rc"
[[ -n $out ]] && echo "$out"
if [[ $rc -ne 0 || -n $ours ]]; then
  echo "FAIL: systemd-analyze verify reported problems with the fdod units"
  exit 1
fi
echo "PASS: fdod.socket and fdod.service verified"
