#!/usr/bin/env python3
"""What compiling in parts costs the code: the settled program whole and in parts, side by side.

Compiles a program of bench/programs with its settled profile
(build/bench/programs/<name>/settled_profile.json, written by run_programs.py)
twice with fdo_effect_jit --serve: in one piece (--threads 1) and in parts
(--threads N), each kept in its own process, then times ROUNDS rounds of 5
calls in each, alternating which goes first (thread CPU clock), and prints
the median per round of each and their ratio (parts / whole) per round.

With --before EXE, the first of the pair is not the program in one piece
but the program in parts compiled by EXE (an fdo_effect_jit built before a
change): the ratio is then parts after / parts before.

Usage: ab_parts.py [--build-dir build] [--threads N] [--rounds 20] [--before EXE] NAME
Exit status: 0 ok; 2 setup problem (no settled profile: run run_programs.py).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
ARGS = {"lua": 20000, "brotli": 256}


def start(build, prog_dir, arg, threads, exe=None):
    return subprocess.Popen(
        [str(exe or build / "bench" / "fdo_effect" / "fdo_effect_jit"), "--ir",
         str(prog_dir / "program.bc"), "--profile", str(prog_dir / "settled_profile.json"),
         "--entry", "run", "--arg", str(arg), "--threads", str(threads), "--clock", "thread-cpu",
         "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def batch(proc):
    proc.stdin.write("run 5 1\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError("fdo_effect_jit ended early")
    return json.loads(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.environ.get("FDO_BUILD_DIR", str(REPO / "build")))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--before", metavar="EXE",
                    help="compare with the parts this fdo_effect_jit compiles, not one piece")
    ap.add_argument("name", choices=sorted(ARGS))
    args = ap.parse_args()
    build = pathlib.Path(args.build_dir).resolve()
    prog_dir = build / "bench" / "programs" / args.name
    if not (prog_dir / "settled_profile.json").exists():
        print(f"no settled profile in {prog_dir}: run run_programs.py first", file=sys.stderr)
        return 2
    threads_first = max(2, args.threads) if args.before else 1
    procs = {"whole": start(build, prog_dir, ARGS[args.name], threads_first, args.before),
             "parts": start(build, prog_dir, ARGS[args.name], max(2, args.threads))}
    medians = {"whole": [], "parts": []}
    ratios, checksums, parts = [], set(), 1
    try:
        for r in range(args.rounds):
            here = {}
            for which in ("whole", "parts") if r % 2 == 0 else ("parts", "whole"):
                out = batch(procs[which])
                checksums.add(out["checksum"])
                if which == "parts":
                    parts = out.get("partitions", 1)
                here[which] = statistics.median(out["ns"]) / 1e6
                medians[which].append(here[which])
            ratios.append(here["parts"] / here["whole"])
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.stdin.write("quit\n")
                p.stdin.flush()
                p.wait()
    load = os.getloadavg()
    first = "before" if args.before else "whole"
    print(f"{args.name}: {first} {statistics.median(medians['whole']):.3f} ms "
          f"(min {min(medians['whole']):.3f}), {parts} parts "
          f"{statistics.median(medians['parts']):.3f} ms (min {min(medians['parts']):.3f}); "
          f"parts/{first} per round: median {statistics.median(ratios):.3f}, "
          f"range {min(ratios):.3f}-{max(ratios):.3f}; load {load[0]:.2f}")
    if len(checksums) != 1:
        print(f"{args.name}: the two builds returned different values: {sorted(checksums)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
