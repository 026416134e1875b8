#!/usr/bin/env bash
# cpack -G DEB on the build tree, then dpkg-deb -c / -I / -e on the package:
# the files an operator needs, the control fields, the conffile, and the
# maintainer scripts run against stub systemctl/systemd-sysusers/... (never
# the host's) to see what they would do on install, removal and purge.
# Usage: deb_test.sh BUILD_DIR SOURCE_DIR. Exit 77 = skipped.
set -uo pipefail
. "$(dirname "$0")/../support/skip.sh"
build=$1
src=$2
fail() { echo "FAIL: $*"; exit 1; }
for tool in cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null 2>&1 ||
    fdo_skip "packaging: .deb" "$tool is not installed (packages cmake, dpkg, dpkg-dev)"
done
tmp=$(mktemp -d /tmp/fdo-deb-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/out") >"$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log"; fail "cpack -G DEB failed"; }
deb=$(ls "$tmp"/out/fdo_*.deb 2>/dev/null | head -1)
[[ -n $deb ]] || { cat "$tmp/cpack.log"; fail "cpack made no fdo_*.deb"; }
echo "built $(basename "$deb") ($(stat -c %s "$deb") bytes)"

contents=$(dpkg-deb -c "$deb") || fail "dpkg-deb -c failed"
for f in ./usr/sbin/fdod ./usr/bin/fdoctl ./usr/libexec/fdo/fdo-worker \
         ./usr/lib/systemd/system/fdod.service ./usr/lib/systemd/system/fdod.socket \
         ./usr/lib/sysusers.d/fdod.conf ./usr/lib/tmpfiles.d/fdod.conf ./etc/fdod/fdod.conf \
         ./usr/share/man/man8/fdod.8.gz ./usr/share/man/man1/fdoctl.1.gz \
         ./usr/share/man/man5/fdod.conf.5.gz ./usr/share/doc/fdo/fdod.md \
         ./usr/share/bash-completion/completions/fdoctl; do
  grep -qE " $f\$" <<<"$contents" || fail "the package lacks $f"
done
grep -E ' \./usr/sbin/fdod$' <<<"$contents" | grep -q '^-rwxr-xr-x root/root' ||
  fail "fdod is not 0755 root/root: $(grep ' ./usr/sbin/fdod$' <<<"$contents")"
grep -qE ' \./(usr/local|var/lib/fdod)' <<<"$contents" &&
  fail "the package installs under /usr/local or ships the state dir"

info=$(dpkg-deb -I "$deb") || fail "dpkg-deb -I failed"
echo "$info"
for want in "Package: fdo" "Version: " "Architecture: " "Depends: " "Description: "; do
  grep -q "^ $want" <<<"$info" || fail "control lacks '$want'"
done
depends=$(grep '^ Depends:' <<<"$info")
for dep in systemd libc6 libllvm16 libsqlite3-0 libsystemd0 libjs-chart.js; do
  grep -q "$dep" <<<"$depends" || fail "Depends lacks $dep: $depends"
done
for script in postinst prerm postrm conffiles; do
  grep -qE "^ +[0-9]+ bytes, +[0-9]+ lines +\*? *$script" <<<"$info" || fail "no $script in the package"
done

dpkg-deb -e "$deb" "$tmp/control" || fail "dpkg-deb -e failed"
grep -qx /etc/fdod/fdod.conf "$tmp/control/conffiles" || fail "/etc/fdod/fdod.conf is not a conffile"
for script in postinst prerm postrm; do
  [[ -x $tmp/control/$script ]] || fail "$script is not executable"
  sh -n "$tmp/control/$script" || fail "$script: shell syntax"
done

# Run the scripts with stub tools that only log their arguments.
stubs=$tmp/stubs
mkdir -p "$stubs"
for tool in systemctl systemd-sysusers systemd-tmpfiles rm userdel groupdel deluser; do
  printf '#!/bin/sh\necho "%s $*" >>"%s"\n' "$tool" "$tmp/calls" >"$stubs/$tool"
  chmod +x "$stubs/$tool"
done
runscript() { : >"$tmp/calls"; PATH=$stubs:$PATH sh "$tmp/control/$1" "${@:2}" ||
  fail "$1 $* exited $?"; calls=$(cat "$tmp/calls"); echo "$1 ${*:2}: ${calls//$'\n'/; }"; }
runscript postinst configure ""
grep -qx "systemd-sysusers /usr/lib/sysusers.d/fdod.conf" <<<"$calls" || fail "postinst: no sysusers"
grep -qx "systemd-tmpfiles --create /usr/lib/tmpfiles.d/fdod.conf" <<<"$calls" ||
  fail "postinst: no tmpfiles"
grep -qx "systemctl enable fdod.socket" <<<"$calls" || fail "postinst: fdod.socket not enabled"
grep -q "^systemctl enable fdod.service" <<<"$calls" && fail "postinst enables the service itself"
runscript prerm remove
grep -q "^systemctl disable fdod.socket" <<<"$calls" || fail "prerm remove: socket not disabled"
for action in remove purge; do
  runscript postrm "$action"
  grep -qE '^(rm|userdel|groupdel|deluser) ' <<<"$calls" &&
    fail "postrm $action deletes something: $calls"
done
grep -q "/var/lib/fdod" "$tmp/control/postrm" || fail "postrm does not say the state dir is kept"
echo "PASS: fdo .deb contents, control fields, conffile and maintainer scripts"
