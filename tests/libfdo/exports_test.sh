#!/bin/sh
# libfdo.so exports only the C API (fdo_*) and carries the SONAME libfdo.so.1.
set -eu
lib="$1"
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }')
if [ "$soname" != "libfdo.so.1" ]; then
  echo "FAIL: SONAME is '$soname', expected libfdo.so.1" >&2
  exit 1
fi
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ { print $3 }' | sed 's/@.*//' | sort -u)
stray=$(printf '%s\n' "$exported" | grep -v '^fdo_' | grep -v '^FDO_1$' || true)
if [ -n "$stray" ]; then
  echo "FAIL: libfdo exports symbols outside the C API:" >&2
  printf '%s\n' "$stray" | head -20 >&2
  exit 1
fi
for sym in fdo_connect fdo_close fdo_error_free fdo_error_message fdo_error_rpc_code; do
  printf '%s\n' "$exported" | grep -qx "$sym" || { echo "FAIL: $sym is not exported" >&2; exit 1; }
done
echo "ok: $(printf '%s\n' "$exported" | wc -l) fdo_* symbols, SONAME $soname"
