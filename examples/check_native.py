#!/usr/bin/env python3
"""Checks examples.json against a native run of the example programs.

Runs the native_check driver (the examples compiled natively by clang-16 -O2),
compares every no-argument entry's checksum and every buffer example (inputs,
return value, output buffers) with examples.json, and prints a table. Exit
status 0 when everything matches, 1 on any mismatch, 2 when the driver cannot
be run. Python standard library only.

Usage: check_native.py --driver PATH [--manifest examples.json]
"""
import argparse
import json
import os
import subprocess
import sys


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--driver", required=True, help="path of the native_check executable")
    ap.add_argument("--manifest", default=os.path.join(here, "examples.json"))
    args = ap.parse_args()

    with open(args.manifest, encoding="utf-8") as f:
        manifest = json.load(f)
    try:
        proc = subprocess.run([args.driver], capture_output=True, text=True, timeout=120, check=False)
    except OSError as e:
        print(f"check_native: cannot run {args.driver}: {e}", file=sys.stderr)
        return 2
    if proc.returncode != 0:
        print(f"check_native: {args.driver} exited with {proc.returncode}:\n{proc.stderr}", file=sys.stderr)
        return 2
    try:
        native = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        print(f"check_native: driver output is not JSON ({e}):\n{proc.stdout}", file=sys.stderr)
        return 2

    failures = []
    print(f"{'program':<8} {'entry':<16} {'expected checksum':>22} {'native':>22} {'ms':>8}  result")
    for prog in manifest["programs"]:
        entry = prog["noarg_entry"]
        got = native["noarg"].get(entry)
        if got is None:
            failures.append(f"{entry}: not run by the driver")
            continue
        ok = got["checksum"] == prog["expected_checksum"] and got["repeatable"]
        if got["checksum"] != prog["expected_checksum"]:
            failures.append(f"{entry}: checksum {got['checksum']} != expected {prog['expected_checksum']}")
        if not got["repeatable"]:
            failures.append(f"{entry}: two calls returned different checksums")
        if int(prog["expected_checksum_hex"], 16) != prog["expected_checksum"]:
            failures.append(f"{entry}: expected_checksum_hex disagrees with expected_checksum in the manifest")
            ok = False
        ms = got.get("ms", float("nan"))
        print(f"{prog['name']:<8} {entry:<16} {prog['expected_checksum']:>22} {got['checksum']:>22} "
              f"{ms:>8.1f}  {'ok' if ok else 'MISMATCH'}")

        be = prog["buffer_example"]
        gb = native["buffer"].get(be["entry"])
        if gb is None:
            failures.append(f"{be['entry']}: not run by the driver")
            continue
        problems = []
        if gb["args"] != be["args"]:
            problems.append("the driver's inputs differ from the manifest's")
        if gb["return"] != be["expected_return"]:
            problems.append(f"returned {gb['return']}, expected {be['expected_return']}")
        if gb["buffers"] != be["expected_buffers"]:
            problems.append(f"buffers {gb['buffers']} != expected {be['expected_buffers']}")
        failures += [f"{be['entry']}: {p}" for p in problems]
        print(f"{prog['name']:<8} {be['entry']:<16} {'return ' + str(be['expected_return']):>22} "
              f"{'return ' + str(gb['return']):>22} {'':>8}  {'ok' if not problems else 'MISMATCH'}")

    if failures:
        print("\nexamples_check FAILED:", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        return 1
    print("\nexamples_check: all native results match examples.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
