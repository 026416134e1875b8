#!/usr/bin/env bash
# `cmake --install` into a temporary DESTDIR with prefix /usr (as the Debian
# package does), then checks what an operator gets: the tree, the installed
# binaries working together (fdod finds fdo-worker with no FDO_WORKER set),
# systemd-analyze verify and security on the installed units, every man page
# through man -l and groff's warnings, the sample config, the completion.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR. Exit 77 = skipped.
set -uo pipefail
. "$(dirname "$0")/../support/skip.sh"
build=$1
src=$2
tmp=$(mktemp -d /tmp/fdo-install-XXXXXX)
daemon=""
cleanup() {
  [[ -n $daemon ]] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
dest=$tmp/root

DESTDIR=$dest cmake --install "$build" --prefix /usr >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "DESTDIR=$dest cmake --install failed"; }
echo "installed into $dest:"
(cd "$dest" && find . -type f -o -type l | sort)

want=(
  usr/sbin/fdod usr/bin/fdoctl usr/libexec/fdo/fdo-worker
  usr/lib/systemd/system/fdod.service usr/lib/systemd/system/fdod.socket
  usr/lib/sysusers.d/fdod.conf usr/lib/tmpfiles.d/fdod.conf
  etc/fdod/fdod.conf usr/share/doc/fdo/examples/fdod.conf
  usr/share/man/man8/fdod.8.gz usr/share/man/man1/fdoctl.1.gz usr/share/man/man5/fdod.conf.5.gz
  usr/share/doc/fdo/fdod.md usr/share/doc/fdo/fdod-config.md usr/share/doc/fdo/security.md
  usr/share/doc/fdo/README.systemd.md
  usr/share/bash-completion/completions/fdoctl
  # libfdo (docs/runtimes.md): the library, its headers, pkg-config and CMake package
  usr/include/fdo/fdo.h usr/include/fdo/fdo.hpp
)
libdir=$(cd "$dest/usr" && ls -d lib/*/pkgconfig/fdo.pc lib/pkgconfig/fdo.pc 2>/dev/null | head -1)
[[ -n $libdir ]] || fail "not installed: fdo.pc"
libdir=${libdir%/pkgconfig/fdo.pc}
for f in "$libdir/libfdo.so.1" "$libdir/libfdo.so" "$libdir/cmake/fdo/fdoConfig.cmake" \
         "$libdir/cmake/fdo/fdoConfigVersion.cmake" "$libdir/cmake/fdo/fdoTargets.cmake"; do
  [[ -e $dest/usr/$f ]] || fail "not installed: /usr/$f"
done
for f in "${want[@]}"; do [[ -f $dest/$f ]] || fail "not installed: /$f"; done
for f in usr/sbin/fdod usr/bin/fdoctl usr/libexec/fdo/fdo-worker; do
  [[ -x $dest/$f ]] || fail "/$f is not executable"
done
[[ -e $dest/usr/sbin/fdo-worker || -e $dest/usr/bin/fdo-worker ]] &&
  fail "fdo-worker belongs in /usr/libexec/fdo, not on PATH"

# The installed binaries run (no build-tree RPATH needed) and agree.
v=$("$dest/usr/sbin/fdod" --version) || fail "installed fdod --version failed"
c=$("$dest/usr/bin/fdoctl" --version) || fail "installed fdoctl --version failed"
[[ ${v%%$'\n'*} == "fdod (fdo) ${c#fdoctl (fdo) }" ]] || fail "versions differ: '$v' vs '$c'"

# The sample config: every key commented out, so it changes nothing.
"$dest/usr/sbin/fdod" --config "$dest/etc/fdod/fdod.conf" --print-config >"$tmp/sample.txt" ||
  fail "fdod cannot read the installed sample config"
[[ $(grep -c '^# from default$' "$tmp/sample.txt") -eq $(grep -c ' = ' "$tmp/sample.txt") ]] ||
  fail "the sample config sets a key: $(grep -v '^# from default' "$tmp/sample.txt" | head)"
grep -q '^#exec_workers = 2$' "$dest/etc/fdod/fdod.conf" || fail "sample config lacks exec_workers"
cmp -s "$dest/etc/fdod/fdod.conf" "$dest/usr/share/doc/fdo/examples/fdod.conf" ||
  fail "the two sample configs differ"

# The installed fdod finds the installed fdo-worker by itself and serves.
sock=$tmp/fdod.sock
env -u FDO_WORKER "$dest/usr/sbin/fdod" --no-config --socket "$sock" --state-dir "$tmp/state" \
  >"$tmp/fdod.log" 2>&1 &
daemon=$!
for _ in $(seq 1 200); do [[ -S $sock ]] && break; sleep 0.05; done
out=$("$dest/usr/bin/fdoctl" --socket "$sock" --json status 2>&1) ||
  { cat "$tmp/fdod.log"; fail "installed fdoctl status against installed fdod: $out"; }
grep -q '"status": *"ok"' <<<"$out" || fail "status: $out"
kill -TERM "$daemon"; wait "$daemon"; rc=$?; daemon=""
[[ $rc -eq 0 ]] || { cat "$tmp/fdod.log"; fail "fdod exited $rc on SIGTERM"; }

# Units as installed.
unit_dir=$dest/usr/lib/systemd/system
grep -qx 'ExecStart=/usr/sbin/fdod' "$unit_dir/fdod.service" ||
  fail "ExecStart does not name the installed fdod: $(grep ExecStart "$unit_dir/fdod.service")"
grep -q '@sbindir@' "$unit_dir/fdod.service" && fail "unsubstituted @sbindir@ in the unit"
grep -q '^Documentation=man:fdod(8)' "$unit_dir/fdod.service" || fail "Documentation= not man:fdod(8)"
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$tmp/units"
  # verify checks that ExecStart's program exists: point it into DESTDIR.
  sed "s|^ExecStart=/usr/sbin/fdod|ExecStart=$dest/usr/sbin/fdod|" "$unit_dir/fdod.service" \
    >"$tmp/units/fdod.service"
  cp "$unit_dir/fdod.socket" "$tmp/units/"
  out=$(systemd-analyze verify --man=no "$tmp/units/fdod.socket" "$tmp/units/fdod.service" 2>&1)
  rc=$?
  echo "systemd-analyze verify: exit $rc${out:+; }$out"
  [[ $rc -eq 0 ]] && ! grep -qE 'fdod\.(service|socket)' <<<"$out" ||
    fail "systemd-analyze verify reported problems with the installed units"
  # The exposure score of the unit as installed (issue 18: at most 2.5).
  score=$(cd "$unit_dir" && systemd-analyze security --offline=yes ./fdod.service 2>&1 |
          sed -n 's/.*Overall exposure level for fdod.service: \([0-9.]*\).*/\1/p')
  echo "systemd-analyze security --offline=yes fdod.service: $score"
  [[ -n $score ]] || fail "no exposure score from systemd-analyze security --offline=yes"
  awk -v s="$score" 'BEGIN { exit !(s <= 2.5) }' || fail "exposure $score > 2.5"
  # With the metrics drop-in (network for metrics_listen) it stays within 2.5.
  drop=$dest/usr/share/doc/fdo/examples/fdod-metrics.conf
  [[ -f $drop ]] || fail "fdod-metrics.conf drop-in not installed"
  mkdir -p "$tmp/merged"
  # (a second [Service] section in one file merges like a drop-in)
  cat "$unit_dir/fdod.service" "$drop" >"$tmp/merged/fdod.service"
  cp "$unit_dir/fdod.socket" "$tmp/merged/"
  score=$(cd "$tmp/merged" && systemd-analyze security --offline=yes ./fdod.service 2>&1 |
          sed -n 's/.*Overall exposure level for fdod.service: \([0-9.]*\).*/\1/p')
  echo "... with the metrics drop-in: $score"
  awk -v s="$score" 'BEGIN { exit !(s <= 2.5) }' || fail "exposure with the drop-in $score > 2.5"
  # The GPU drop-in (docs/gpu.md: the host's /dev, only NVIDIA char devices
  # past the device cgroup) keeps the unit valid and within 2.5 too.
  drop=$dest/usr/share/doc/fdo/examples/fdod-gpu.conf
  [[ -f $drop ]] || fail "fdod-gpu.conf drop-in not installed"
  grep -q '^DevicePolicy=closed' "$drop" || fail "the GPU drop-in must keep DevicePolicy=closed"
  mkdir -p "$tmp/gpu"
  cat "$tmp/units/fdod.service" "$drop" >"$tmp/gpu/fdod.service"
  cp "$unit_dir/fdod.socket" "$tmp/gpu/"
  out=$(systemd-analyze verify --man=no "$tmp/gpu/fdod.socket" "$tmp/gpu/fdod.service" 2>&1)
  rc=$?
  [[ $rc -eq 0 ]] || { echo "$out"; fail "systemd-analyze verify: the unit with the GPU drop-in"; }
  score=$(cd "$tmp/gpu" && systemd-analyze security --offline=yes ./fdod.service 2>&1 |
          sed -n 's/.*Overall exposure level for fdod.service: \([0-9.]*\).*/\1/p')
  echo "... with the GPU drop-in: $score"
  [[ -n $score ]] || fail "no exposure score with the GPU drop-in"
  awk -v s="$score" 'BEGIN { exit !(s <= 2.5) }' || fail "exposure with the GPU drop-in $score > 2.5"
  if command -v systemd-sysusers >/dev/null 2>&1; then
    systemd-sysusers --dry-run --root="$dest" "$dest/usr/lib/sysusers.d/fdod.conf" \
      >"$tmp/sysusers.log" 2>&1 || { cat "$tmp/sysusers.log"; fail "sysusers.d entry rejected"; }
  fi
else
  echo "NOTE: systemd-analyze is not installed (package systemd): units not verified"
fi

# Man pages: man -l renders each (no diagnostics, NAME and SYNOPSIS, the
# title line); groff finds no markup problem in them.
if command -v man >/dev/null 2>&1 && command -v groff >/dev/null 2>&1; then
  for page in man8/fdod.8.gz man1/fdoctl.1.gz man5/fdod.conf.5.gz; do
    f=$dest/usr/share/man/$page
    name=$(basename "$page" .gz)
    text=$(MANWIDTH=100 LC_ALL=C.UTF-8 man -l "$f" 2>"$tmp/man.err") ||
      fail "man -l $page failed: $(cat "$tmp/man.err")"
    # man reports layout notes for its page size (long table cells); anything
    # else on its stderr is a problem.
    other=$(grep -vE "cannot adjust line|can't break line|table text block will not fit|table wider than line width|^warning: (file|page)" "$tmp/man.err")
    [[ -z $other ]] || fail "man -l $page: $other"
    for section in NAME SYNOPSIS; do
      grep -q "^$section" <<<"$text" || fail "$page has no $section section"
    done
    head -1 <<<"$text" | grep -qi "^${name%.*}(${name##*.})" ||
      fail "$page title line: $(head -1 <<<"$text")"
    # Every warning category but 'break' (cannot adjust/break a line: layout
    # in a given width, not markup), on one continuous page as man renders.
    warnings=$(zcat "$f" | groff -t -man -Tutf8 -rLL=200n -rcR=1 -z -ww -W break 2>&1)
    [[ -z $warnings ]] || fail "groff warnings in $page: $warnings"
    echo "man page $page: $(wc -l <<<"$text") lines, no warnings"
  done
else
  fdo_skip "packaging: install" "man or groff is not installed (packages man-db, groff-base)"
fi

# Completion: commands and subcommands complete; they exist in fdoctl.
comp=$dest/usr/share/bash-completion/completions/fdoctl
complete_words() { # complete_words WORD... (the last one is being completed)
  bash -c 'source "$1"; shift; COMP_WORDS=(fdoctl "$@"); COMP_CWORD=$#; _fdoctl
           printf "%s\n" "${COMPREPLY[@]}"' _ "$comp" "$@"
}
[[ $(complete_words prof | sort | tr '\n' ' ') == "profile profiles " ]] ||
  fail "completing 'prof': $(complete_words prof)"
[[ $(complete_words profile "" | tr '\n' ' ') == *"pin unpin reset delete export import"* ]] ||
  fail "completing 'profile ': $(complete_words profile "")"
offered=$(complete_words "")
for cmd in $offered; do
  [[ $cmd == -* ]] && continue
  "$dest/usr/bin/fdoctl" "$cmd" --help >/dev/null 2>&1 || fail "completion offers '$cmd', fdoctl has none"
done
help=$("$dest/usr/bin/fdoctl" --help)
commands=$(sed -n '/^Subcommands:/,/^$/p' <<<"$help" | awk 'NR>1 && NF {print $1}')
[[ -n $commands ]] || fail "no Subcommands: section in fdoctl --help"
for cmd in $commands; do
  grep -qx -- "$cmd" <<<"$offered" || fail "completion lacks fdoctl command '$cmd'"
done
echo "PASS: install tree, installed fdod+fdo-worker+fdoctl, units, man pages, sample config, completion"
