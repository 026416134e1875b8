#!/usr/bin/env bash
# fdod's command line without a daemon running: --version, --help,
# --print-config (values and where they came from), the missing-config rules
# and the documented exit codes (docs/fdod.md, "Exit status").
# Usage: fdod_cli_test.sh BUILD_DIR
set -uo pipefail
build=$1
fdod=$build/fdod
tmp=$(mktemp -d /tmp/fdod-cli-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
run() { # run EXPECTED_RC CMD...: stdout in $out, stderr in $err
  local want=$1; shift
  "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  out=$(cat "$tmp/out"); err=$(cat "$tmp/err")
  [[ $rc -eq $want ]] || fail "'$*' exited $rc, expected $want; stdout: $out; stderr: $err"
}

run 0 "$fdod" --version
[[ $out =~ ^fdod\ \(fdo\)\ [0-9]+\.[0-9]+\.[0-9]+ ]] || fail "--version printed: $out"
grep -q "LLVM 16" <<<"$out" || fail "--version does not name LLVM: $out"
run 0 "$fdod" --help
grep -q -- "--print-config" <<<"$out" || fail "--help lacks --print-config"

# Usage errors exit 2 (not CLI11's 105/109).
run 2 "$fdod" --no-such-flag
run 2 "$fdod" --config "$tmp/x.conf" --no-config

# An explicitly given config file that does not exist: exit 2, named.
run 2 "$fdod" --config "$tmp/missing.conf" --print-config
grep -q "$tmp/missing.conf does not exist" <<<"$err" || fail "missing --config message: $err"

# A bad value: exit 2 with file, line and key.
printf 'exec_workers = 3\nrequest_timeout_ms = soon\n' >"$tmp/bad.conf"
run 2 "$fdod" --config "$tmp/bad.conf" --print-config
grep -q "$tmp/bad.conf:2: bad value for 'request_timeout_ms'" <<<"$err" || fail "bad value: $err"

# --print-config: effective values and their origins; the output reads back.
printf '# test\ntier_up = sync\nexec_workers = 3\n' >"$tmp/good.conf"
run 0 "$fdod" --config "$tmp/good.conf" --state-dir "$tmp/state" --print-config
grep -qx "# fdod effective configuration; file: $tmp/good.conf" <<<"$out" || fail "header: $out"
for pair in "$tmp/good.conf:2|tier_up = sync" "$tmp/good.conf:3|exec_workers = 3" \
            "command line|state_dir = $tmp/state" "default|socket = /run/fdod/fdod.sock"; do
  origin=${pair%%|*}; line=${pair#*|}
  grep -qxF -- "$line" <<<"$out" || fail "no '$line' in: $out"
  grep -B1 -xF -- "$line" <<<"$out" | sed -n 1p | grep -qxF "# from $origin" ||
    fail "'$line' not attributed to $origin: $out"
done
[[ -e $tmp/state ]] && fail "--print-config created the state dir"
printf '%s\n' "$out" >"$tmp/printed.conf"
run 0 "$fdod" --config "$tmp/printed.conf" --print-config
grep -qx "exec_workers = 3" <<<"$out" || fail "printed config does not read back"

# --no-config: defaults only.
run 0 "$fdod" --no-config --print-config
grep -qx "# fdod effective configuration; file: none (built-in defaults)" <<<"$out" ||
  fail "--no-config header: $out"
[[ $(grep -c '^# from default$' <<<"$out") -eq $(grep -c ' = ' <<<"$out") ]] ||
  fail "--no-config: a key not from the defaults: $out"

# A setup failure exits 1: the state dir cannot be created.
touch "$tmp/file"
run 1 env FDO_WORKER="$build/fdo-worker" "$fdod" --no-config --socket "$tmp/s.sock" \
  --state-dir "$tmp/file/state"
echo "PASS: fdod --version, --help, --print-config, missing/bad config and exit codes"
