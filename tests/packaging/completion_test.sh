#!/usr/bin/env bash
# The bash completion (tools/packaging/fdoctl.bash) offers every command
# `fdoctl --help` lists, and each command's options where it lists them.
# Usage: completion_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
fdoctl=$build/fdoctl
# shellcheck source=/dev/null
source "$src/tools/packaging/fdoctl.bash"

complete_words() { # the words completed for a command line ending in "$@" (last word = prefix)
  COMP_WORDS=(fdoctl "$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _fdoctl
  printf '%s\n' "${COMPREPLY[@]}"
}

fail=0
top=$(complete_words "")
# The commands of `fdoctl --help` (CLI11 lists them under "Subcommands:").
commands=$("$fdoctl" --help | awk '/^Subcommands:/{on=1; next} on && /^  [a-z]/{print $1} on && /^$/{exit}')
[[ -n $commands ]] || { echo "no commands in fdoctl --help"; exit 1; }
for c in $commands; do
  grep -qx -- "$c" <<<"$top" || { echo "completion lacks the command '$c'"; fail=1; }
done
# Each command's long options from its own --help.
for c in $commands; do
  [[ $c == profile || $c == program || $c == cache ]] && continue
  opts=$("$fdoctl" "$c" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u | grep -vx -- '--help' || true)
  got=$(complete_words "$c" "--")
  for o in $opts; do
    grep -qx -- "$o" <<<"$got" || { echo "completion of '$c' lacks '$o'"; fail=1; }
  done
done
# The command groups' subcommands, and each subcommand's long options.
for g in profile program cache; do
  subs=$("$fdoctl" "$g" --help | awk '/^Subcommands:/{on=1; next} on && /^  [a-z]/{print $1} on && /^$/{exit}')
  got=$(complete_words "$g" "")
  for s in $subs; do
    grep -qx -- "$s" <<<"$got" || { echo "completion of '$g' lacks '$s'"; fail=1; }
    opts=$("$fdoctl" "$g" "$s" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u | grep -vx -- '--help' || true)
    sgot=$(complete_words "$g" "$s" "--")
    for o in $opts; do
      grep -qx -- "$o" <<<"$sgot" || { echo "completion of '$g $s' lacks '$o'"; fail=1; }
    done
  done
done
exit $fail
