# Sourced by the shell tests: fdo_skip NAME REASON prints the skip, records it
# in $FDO_SKIP_LOG (tools/test.sh lists that file at the end) and exits 77,
# which CTest reports as skipped (SKIP_RETURN_CODE 77) — never as passed.
fdo_skip() {
  echo "SKIPPED: $1: $2"
  if [[ -n ${FDO_SKIP_LOG:-} ]]; then echo "$1: $2" >>"$FDO_SKIP_LOG"; fi
  exit 77
}
