#!/usr/bin/env python3
"""Real programs through fdod: compile times against clang, where they go, and values.

For each program of bench/programs (build.py: upstream sources as one IR
module with the entry `long run(long n)`, and a native clang -O2 build), in
one run on this host:

1. clang -O2 building the sources natively, one compile at a time and with
   as many at once as the host has cores, and clang -O2 compiling the linked
   module (the same input fdod gets) in one process: the wall times fdo's
   compiles are set against.
2. fdod with the test harness's settings (tests/e2e/harness.py: one compile
   worker, `policy.min_stages = 2`, no context-sensitive round) and `tier_up =
   sync` (so each stage kind is met in order): stages until optimized code is
   served and settled; per compile mode, the longest a stage of that mode
   waited for its build (round trip - exec: its own compile, or the one it
   joined); every stage's value must equal the native build's (exit 1
   otherwise).
3. The settled profile (`profile.export`) compiled again in optimized mode in
   one process (`fdo_effect_jit --profile`), in one piece (`--threads 1`) and
   in parts on every core (`--threads N`, docs/jit.md "Partitioned
   compiles"), one after the other, and in parts after an instrumented
   build of the program whose pipeline prefix it is offered, as fdod runs a
   program's first optimized compile (`--after-instrumented`): wall time and
   the compile's own phase times, and what they leave unaccounted; then the
   settled code of the first two
   timed against the native build, call for call. Then two rewrites that
   double the counts of 10 % of the profiled functions, scattered over the
   program or clustered in one run of it, and one of one function, each
   compiled in up to 8 parts from nothing, from the first build's parts, and
   from its parts and pipeline prefix (docs/jit.md "Incremental recompiles",
   "The pipeline's prefix"): the recompile's share of a full compile, parts
   reused, and the incremental builds' value (they must equal the full
   compile's bytes).
4. fdod with its defaults (background tier-up), a client calling `run`
   back to back: how many stages, and how long, until the first optimized
   stage (`--async-limit` seconds at most).

Usage: run_programs.py [--build-dir build] [--only NAME] [--json FILE] [--smoke]
(--smoke: step 2 only, the values; CTest bench:programs:smoke runs it on Lua.)
Exit status: 0 ok; 1 a value differed from the native build's; 2 setup problem.
"""
import argparse
import base64
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(HERE))
import build as programs  # noqa: E402
import harness  # noqa: E402

# run's argument per program: ~10 ms a call natively on this host.
ARGS = {"lua": 20000, "brotli": 256}
RECOMPILE_PERCENT = 10
# Parts of the recompile runs (fdod's default is as many as compile threads:
# more parts than cores make a recompile that reaches few of them cheaper).
RECOMPILE_PARTS = 8
PHASES = ("parse", "canonicalize", "instrument_or_annotate", "optimize", "codegen")


def native_times(native, n, reps):
    out = subprocess.run([str(native), str(n), str(reps)], capture_output=True, text=True,
                         check=True).stdout.split()
    return int(out[0]), [int(x) / 1e6 for x in out[1:]]


def clang_module_seconds(ir, out):
    start = time.monotonic()
    subprocess.run([programs.CLANG, "-O2", "-c", str(ir), "-o", str(out)], check=True)
    return time.monotonic() - start


def start_daemon(build, settings, prefix):
    d = harness.Daemon(config=settings, build_dir=build, prefix=prefix)
    d.start()
    return d


def register(c, ir, name):
    r = c.call("program.register",
               {"ir_base64": base64.b64encode(ir.read_bytes()).decode(), "name": name})
    return r["program"], r["profile_key"]


def sync_run(build, ir, name, n, expected, stages, bad):
    """Stages under tier_up = sync until settled: per mode, its compile_ms;
    the settled stages' exec times and overheads (round trip - exec, ms);
    the exported profile document."""
    settings = {"tier_up": "sync", "exec_timeout_ms": 120000}
    d = start_daemon(build, settings, "fdo-programs-")
    compiles, settled, overhead, last_mode = {}, [], [], None
    try:
        c = harness.Client(d.socket, timeout=900)
        pid, pk = register(c, ir, name)
        for i in range(stages):
            t0 = time.monotonic()
            r = c.call("execute", {"program": pid, "entry": "run", "args": [n]},
                       check_schema=False)
            rtt_ms = (time.monotonic() - t0) * 1e3
            st = r["stage"]
            if r["value"] != expected:
                bad.append(f"{name} stage {i} ({st['mode']}): {r['value']} != native {expected}")
            # What the stage waited for its build: its own compile, or one
            # under way that it joined (a rewrite's build starts right after
            # the stage that rewrote the profile).
            if st["cache"]["outcome"] in ("compiled", "joined"):
                compiles.setdefault(st["mode"], []).append(rtt_ms - st["exec_ns"] / 1e6)
            if st["mode"] == "optimized" and last_mode == "optimized":
                settled.append(st["exec_ns"] / 1e6)
                if st["cache"]["outcome"] not in ("compiled", "joined"):
                    overhead.append(rtt_ms - st["exec_ns"] / 1e6)
            last_mode = st["mode"]
        bundle = c.call("profile.export", {"profile_keys": [pk], "format": "json"})["bundle"]
        # What fdod's compiles said of their parts (docs/jit.md, "Partitioned compiles").
        text = json.dumps(c.call("cache.explain", {"program": pid}, check_schema=False))
        parts = sorted(set(re.findall(r"compiled in \d+ parts at once[^;\"]*", text)))
        print(f"{name}: fdod's builds: "
              f"{'; '.join(parts) if parts else 'none in parts among the explain records kept'}")
    finally:
        d.cleanup()
    profiles = bundle.get("profiles") or [{}]
    doc = (profiles[0].get("current") or {}).get("profile")
    return compiles, (settled, overhead), doc


def async_run(build, ir, name, n, expected, limit_s, bad):
    """fdod's defaults; back-to-back calls until the first optimized stage."""
    d = start_daemon(build, {"exec_timeout_ms": 120000}, "fdo-programs-async-")
    try:
        c = harness.Client(d.socket, timeout=900)
        pid, _ = register(c, ir, name)
        start, count, modes = time.monotonic(), 0, {}
        while time.monotonic() - start < limit_s:
            r = c.call("execute", {"program": pid, "entry": "run", "args": [n]},
                       check_schema=False)
            mode = r["stage"]["mode"]
            if r["value"] != expected:
                bad.append(f"{name} async stage {count} ({mode}): {r['value']} != {expected}")
            if mode == "optimized":
                return count, time.monotonic() - start, modes
            modes[mode] = modes.get(mode, 0) + 1
            count += 1
        return None, time.monotonic() - start, modes
    finally:
        d.cleanup()


def jit_run(build, ir, doc, n, tmp, threads, extra=()):
    """fdo_effect_jit on the settled profile with up to `threads` parts: its JSON line."""
    path = tmp / "profile.json"
    path.write_text(json.dumps(doc))
    r = subprocess.run([str(build / "bench" / "fdo_effect" / "fdo_effect_jit"), "--ir", str(ir),
                        "--entry", "run", "--arg", str(n), "--profile", str(path), "--runs", "15",
                        "--warmup", "2", "--threads", str(threads), *extra], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError(f"fdo_effect_jit: {r.stderr.strip()}")
    return json.loads(r.stdout)


def jit_compile(build, ir, doc, n, tmp, threads, extra=()):
    """The settled profile compiled in one process with up to `threads` parts:
    (wall ms, phases, checksum, call times, parts)."""
    out = jit_run(build, ir, doc, n, tmp, threads, extra)
    return (out["compile_ms"], out["times_us"], out["checksum"], [x / 1e6 for x in out["ns"]],
            out.get("partitions", 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.environ.get("FDO_BUILD_DIR", str(REPO / "build")))
    ap.add_argument("--only", choices=sorted(programs.PROGRAMS))
    ap.add_argument("--stages", type=int, default=24, help="stages of the sync run")
    ap.add_argument("--async-limit", type=float, default=180.0,
                    help="seconds the back-to-back client runs at most (0: skip)")
    ap.add_argument("--smoke", action="store_true",
                    help="values only (CTest): the sync run's stages against the native build; "
                         "no timed builds, no compile in one process, no background run")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    build = pathlib.Path(args.build_dir).resolve()
    if not (build / "fdod").exists():
        print(f"no fdod in {build}: build first", file=sys.stderr)
        return 2
    out_dir = build / "bench" / "programs"
    cores = os.cpu_count() or 1
    # bad: a value differs from the native build's (or a stage is missing);
    # differs: an incremental build's objects differ from the full compile's
    # with equal values (determinism: docs/jit.md, "Determinism").
    bad, differs, report = [], [], {}
    for name, program in programs.PROGRAMS.items():
        if args.only and name != args.only:
            continue
        try:
            ir, native = programs.build(program, out_dir)
        except RuntimeError as e:
            print(f"run_programs: {name}: {e}", file=sys.stderr)
            return 2
        n = ARGS[name]
        expected, native_ms = native_times(native, n, 15)
        if args.smoke:
            compiles, (settled, _), _ = sync_run(build, ir, name, n, expected, args.stages, bad)
            print(f"{name}: run({n}) = {expected} natively; {args.stages} stages through fdod "
                  f"(compiled {', '.join(compiles)}, {len(settled)} settled optimized stages)")
            if not settled:
                bad.append(f"{name}: no two optimized stages in a row in {args.stages} stages")
            continue
        with tempfile.TemporaryDirectory(prefix="fdo-programs-") as t:
            tmp = pathlib.Path(t)
            serial = programs.timed_native_build(program, out_dir, 1)
            parallel = programs.timed_native_build(program, out_dir, cores)
            module = clang_module_seconds(ir, tmp / "module.o")
            compiles, (settled, overhead), doc = sync_run(build, ir, name, n, expected,
                                                          args.stages, bad)
            if doc is None:
                print(f"run_programs: {name}: no profile exported", file=sys.stderr)
                return 2
            # Kept to compile again by hand: fdo_effect_jit --profile FILE.
            (out_dir / name / "settled_profile.json").write_text(json.dumps(doc))
            wall_ms, phases, checksum, fdo_ms, _ = jit_compile(build, ir, doc, n, tmp, 1)
            if checksum != expected:
                bad.append(f"{name}: fdo_effect_jit's optimized build returned {checksum}")
            split_ms, split_phases, checksum, split_call_ms, parts = jit_compile(
                build, ir, doc, n, tmp, cores)
            if checksum != expected:
                bad.append(f"{name}: fdo_effect_jit's partitioned optimized build returned "
                           f"{checksum}")
            # The program's first optimized compile as fdod runs it: offered
            # the prefix its instrumented build kept (docs/jit.md, "The
            # pipeline's prefix").
            after = jit_run(build, ir, doc, n, tmp, cores, ("--after-instrumented",))
            if after["checksum"] != expected:
                bad.append(f"{name}: the optimized build after an instrumented one returned "
                           f"{after['checksum']}")
            # A rewrite that moves RECOMPILE_PERCENT % of the functions' counts,
            # compiled from nothing, from the first build's parts, and from its
            # parts and pipeline prefix (docs/jit.md "Incremental recompiles",
            # "The pipeline's prefix"); the kernel runs the last.
            rec_out = jit_run(build, ir, doc, n, tmp, max(cores, 2),
                              ("--recompile-percent", str(RECOMPILE_PERCENT),
                               "--parts", str(RECOMPILE_PARTS)))
            recompile = rec_out["recompile"]
            if rec_out["checksum"] != expected:
                bad.append(f"{name}: the incremental optimized build returned "
                           f"{rec_out['checksum']}")
            for spread, r in recompile.items():
                if not r["identical"]:
                    differs.append(f"{name}: the {spread} incremental build differs from the "
                                   f"full compile's (parts: {r.get('differing')})")
            first_opt = (async_run(build, ir, name, n, expected, args.async_limit, bad)
                         if args.async_limit > 0 else None)
        rec = {"functions": doc and len(doc.get("functions", {})), "arg": n,
               "clang_o2_serial_s": serial, f"clang_o2_j{cores}_s": parallel,
               "clang_o2_module_s": module,
               "fdod_compile_ms": compiles, "settled_exec_ms": settled,
               "settled_overhead_ms": overhead,
               "jit_optimized_wall_ms": wall_ms, "jit_phases_us": phases,
               "jit_partitioned_wall_ms": split_ms, "jit_partitioned_phases_us": split_phases,
               "jit_partitions": parts, "fdo_partitioned_call_ms": split_call_ms,
               "jit_after_instrumented_wall_ms": after["compile_ms"],
               "jit_after_instrumented_phases_us": after["times_us"],
               "jit_after_instrumented_prefix": after.get("prefix"),
               "native_call_ms": native_ms, "fdo_call_ms": fdo_ms, "recompile": recompile}
        if first_opt is not None:
            rec["async_stages_before_optimized"], rec["async_seconds"], rec["async_modes"] = \
                first_opt
        report[name] = rec
        load = os.getloadavg()
        print(f"\n== {name}: {ir.stat().st_size / 1e6:.1f} MB of bitcode, run({n}); "
              f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        print(f"clang -O2 from source: {serial:6.2f} s one at a time, {parallel:6.2f} s "
              f"{cores} at once; the linked module in one process: {module:6.2f} s")
        for mode, ms in compiles.items():
            worst = max(ms) / 1e3
            print(f"fdod {mode:16s} stage waited {worst:6.2f} s = {worst / parallel:5.2f}x clang "
                  f"-j{cores}, {worst / module:5.2f}x the module")
        for label, ms, ph in (("in one piece", wall_ms, phases),
                              (f"in {parts} parts", split_ms, split_phases),
                              (f"in {after.get('partitions', 1)} parts, as fdod's first "
                               f"(prefix of the instrumented build: {after.get('prefix')})",
                               after["compile_ms"], after["times_us"])):
            accounted = sum(ph.get(p, 0) for p in PHASES) / 1e3
            print(f"optimized compile {label:12s}: {ms / 1e3:6.2f} s = {ms / 1e3 / parallel:5.2f}x "
                  f"clang -j{cores}; phases (s): " +
                  ", ".join(f"{p} {ph.get(p, 0) / 1e6:.2f}" for p in PHASES) +
                  f"; unaccounted {(ms - accounted) / 1e3:.2f}")
        for spread, r in recompile.items():
            print(f"recompile, a rewrite doubling {r['functions_changed']} of {r['functions']} "
                  f"functions' counts ({spread}): {r['ms'] / 1e3:6.2f} s = "
                  f"{r['ms'] / r['full_ms']:4.2f}x a full compile in parts "
                  f"({r['full_ms'] / 1e3:.2f} s); {r['reused']} of {r['parts']} parts reused, "
                  f"pipeline prefix {r['prefix']} (offered the parts alone: "
                  f"{r['parts_only_ms'] / r['full_ms']:4.2f}x); "
                  f"whole-module share before the cut {r['optimize_ms'] / 1e3:.2f} s; "
                  f"identical to the full compile: {'yes' if r['identical'] else 'NO'}")
        print(f"  per call, median: in one piece {statistics.median(fdo_ms):.2f} ms, in parts "
              f"{statistics.median(split_call_ms):.2f} ms")
        nat, fdo = statistics.median(native_ms), statistics.median(fdo_ms)
        print(f"run({n}) per call, median (min): native clang -O2 {nat:7.2f} "
              f"({min(native_ms):.2f}) ms, fdo settled {fdo:7.2f} ({min(fdo_ms):.2f}) ms: "
              f"{fdo / nat:4.2f}x ({min(fdo_ms) / min(native_ms):4.2f}x); fdod settled stages' "
              f"exec {statistics.median(settled) if settled else float('nan'):7.2f} ms")
        if overhead:
            print(f"fdod settled stages (memory hits): round trip - exec median "
                  f"{statistics.median(overhead):.2f} ms (min {min(overhead):.2f}) over "
                  f"{len(overhead)} stages")
        if first_opt is not None:
            count, secs, modes = first_opt
            shown = "none within the limit" if count is None else f"{count}"
            print(f"background tier-up, back-to-back calls: stages before the first optimized "
                  f"one: {shown} ({secs:.1f} s; served {modes})")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1))
    if differs:
        print("\nNOT BYTE-IDENTICAL (values equal):\n  " + "\n  ".join(differs))
    if bad:
        print("\nWRONG VALUES:\n  " + "\n  ".join(bad))
    return 1 if bad or differs else 0


if __name__ == "__main__":
    sys.exit(main())
