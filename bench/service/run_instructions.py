#!/usr/bin/env python3
"""fdod's own instructions per warm request, counted by callgrind.

The service bench (run_service.py) times requests on a shared 2-vCPU VM, where
a change of a tenth of fdod's CPU is inside the noise between runs. This bench
counts instead: fdod runs under valgrind's callgrind with instrumentation off;
once the program is warm (optimized code, a memory hit) it is switched on for
N `execute` calls, dumped, switched on again for N `health` calls and dumped
again. Instruction counts do not depend on the host's load, so two builds can
be compared run against run. What they leave out: the kernel (system calls,
waking threads), the exec worker (a separate process, not traced), cache
misses; run_service.py and `strace -c` measure those.

Prints, per window, fdod's instructions per call and, for the execute window,
the inclusive instructions per call of the stage's main parts (from
callgrind_annotate). Checks that the window saw exactly N calls of the method.

Usage: run_instructions.py --build-dir BUILD [--executes N] [--health N]
                           [--json FILE] [--keep DIR]
Exit status: 0 measured, 1 a check failed, 2 setup problem, 77 valgrind is
not installed (tools/setup.sh installs it).
"""
import argparse
import collections
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# The service bench's program and fdod settings (the steady state, optimized
# and a memory hit, in three stages; the guard off), and its path setup.
from run_service import ENTRY, FDOD_SETTINGS, PROGRAM_IR, harness  # noqa: E402
from benchhost import host_info, loadavg  # noqa: E402
sys.path.insert(0, str(HERE.parents[1] / "tests" / "support"))
from fdo_unittest import report_skip  # noqa: E402

# Parts of a warm execute, by the function that does each (inclusive counts).
PARTS = [
    ("request parse (JSON-RPC)", "fdo::daemon::Dispatcher::parse("),
    ("execute method", "fdo::daemon::methods::execute(fdo::daemon::ServiceState&"),
    ("  stage start (plan, cache lookup)", "fdo::daemon::methods::start_stage("),
    ("  worker round trip (pool)", "fdo::daemon::WorkerPool::Impl::run("),
    ("  fold (feedback)", "fdo::daemon::FeedbackLoop::fold("),
    ("reply strings (JsonText::string)", "fdo::JsonText::string("),
    ("reply keys (JsonText::key)", "fdo::JsonText::key("),
    ("feedback flush (store)", "fdo::daemon::FeedbackLoop::flush("),
]


class SetupError(Exception):
    pass


def progress(msg):
    print(f"[instructions] {msg}", file=sys.stderr, flush=True)


def run_tool(args, what):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise SetupError(f"{what} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    return r.stdout


def read_dump(path):
    """(total instructions, {function: calls}) of a callgrind dump."""
    names = {}
    calls = collections.Counter()
    total = None
    pending = None
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith(("fn=", "cfn=")):
                m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
                if m:
                    if m.group(2):
                        names[m.group(1)] = m.group(2)
                    if line.startswith("cfn="):
                        pending = m.group(1)
            elif line.startswith("calls=") and pending is not None:
                calls[pending] += int(line[6:].split()[0])
                pending = None
            elif line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
    return total, {names.get(k, k): v for k, v in calls.items()}


def calls_of(calls, method):
    """Calls of the method's handler itself (not of lambdas inside it)."""
    pat = re.compile(r"fdo::daemon::methods::(\(anonymous namespace\)::)?" + re.escape(method) +
                     r"\(fdo::daemon::ServiceState&[^{]*$")
    return sum(v for k, v in calls.items() if pat.match(k))


def inclusive(dump, wanted):
    """Inclusive instructions of each wanted function prefix (callgrind_annotate)."""
    out = run_tool(["callgrind_annotate", "--inclusive=yes", "--threshold=100", dump],
                   "callgrind_annotate")
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([\s\d.]+%\)\s+\S*?:(.*)", line)
        if not m:
            continue
        fn = m.group(2)
        for _, prefix in wanted:
            if fn.startswith(prefix) and prefix not in found:
                found[prefix] = int(m.group(1).replace(",", ""))
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--executes", type=int, default=2000)
    ap.add_argument("--health", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--keep", help="copy the callgrind dumps into this directory")
    args = ap.parse_args()
    if min(args.executes, args.health) < 1 or args.warmup < 0:
        ap.error("--executes and --health must be at least 1, --warmup at least 0")
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if shutil.which(tool) is None:
            # Listed with its reason at the end of tools/test.sh's run.
            report_skip("bench:service:instructions",
                        f"{tool} is not installed (tools/setup.sh installs valgrind)")
            return 77
    build = pathlib.Path(args.build_dir).resolve()
    try:
        return run(build, args)
    except SetupError as e:
        print(f"run_instructions: setup problem: {e}", file=sys.stderr)
        return 2


def run(build, args):
    for exe in (build / "fdod", build / "fdo-worker"):
        if not os.access(exe, os.X_OK):
            raise SetupError(f"{exe} is missing: build it with `ninja -C {build} fdod fdo-worker`")
    dumps = tempfile.mkdtemp(prefix="fdo-bench-instr-")
    prefix = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
              f"--callgrind-out-file={dumps}/cg.%p"]
    daemon = harness.Daemon(build_dir=build, prefix="fdo-bench-instr-", command_prefix=prefix)
    with open(daemon.config, "w") as f:
        for k, v in FDOD_SETTINGS.items():
            f.write(f"{k} = {v}\n")
    results = {"bench": "instructions", "host": host_info(), "loadavg_start": loadavg(),
               "fdod": str(build / "fdod"), "settings": FDOD_SETTINGS,
               "executes": args.executes, "health": args.health, "problems": []}
    try:
        progress(f"starting fdod from {build} under callgrind")
        try:
            daemon.start(timeout=120)
        except RuntimeError as e:
            raise SetupError(f"fdod would not start under valgrind: {e}") from None
        pid = str(daemon.proc.pid)
        client = daemon.client(timeout=300)
        program = client.call("program.register", {"ir": PROGRAM_IR, "name": ENTRY})["program"]
        call = {"program": program, "entry": ENTRY, "args": [40, 2]}
        warm = None
        for _ in range(20):
            warm = client.call("execute", call)
            if warm["stage"]["mode"] == "optimized" and \
                    warm["stage"]["cache"]["outcome"] == "memory_hit":
                break
        else:
            raise SetupError(f"the program did not reach optimized memory hits: {warm['stage']}")
        for _ in range(args.warmup):
            client.call("execute", call)

        windows = {}
        for name, n, method, params in (("execute", args.executes, "execute", call),
                                        ("health", args.health, "health", None)):
            run_tool(["callgrind_control", "-i", "on", pid], "callgrind_control -i on")
            wrong = 0
            for _ in range(n):
                r = client.call(method, params) if params else client.call(method)
                if method == "execute" and (r.get("value") != 42 or
                                            r["stage"]["cache"]["outcome"] != "memory_hit"):
                    wrong += 1
            run_tool(["callgrind_control", "-i", "off", pid], "callgrind_control -i off")
            before = set(os.listdir(dumps))
            run_tool(["callgrind_control", "-d", pid], "callgrind_control -d")
            deadline = time.time() + 60
            new = []
            while time.time() < deadline and not new:
                new = [x for x in set(os.listdir(dumps)) - before if x.startswith(f"cg.{pid}.")]
                time.sleep(0.1)
            if not new:
                raise SetupError("callgrind wrote no dump for the window")
            dump = os.path.join(dumps, sorted(new)[-1])
            total, calls = read_dump(dump)
            seen = calls_of(calls, method)
            w = {"calls": n, "instructions": total, "per_call": total / n if total else None,
                 "method_calls_seen": seen, "wrong_replies": wrong, "dump": dump}
            if seen != n:
                results["problems"].append(f"{name}: callgrind saw {seen} calls of "
                                           f"methods::{method}, expected {n}")
            if wrong:
                results["problems"].append(f"{name}: {wrong} replies not 42 from a memory hit")
            if method == "execute":
                inc = inclusive(dump, PARTS)
                w["parts_per_call"] = {label: inc.get(prefix, 0) / n for label, prefix in PARTS}
            windows[name] = w
        results["windows"] = windows
    finally:
        daemon.stop()
        if args.keep:
            pathlib.Path(args.keep).mkdir(parents=True, exist_ok=True)
            for x in os.listdir(dumps):
                shutil.copy(os.path.join(dumps, x), args.keep)
        daemon.cleanup()
        shutil.rmtree(dumps, ignore_errors=True)
    results["loadavg_end"] = loadavg()

    ex, he = results["windows"]["execute"], results["windows"]["health"]
    print(f"fdod instructions per call (callgrind; kernel and exec worker not counted), "
          f"{args.executes} executes / {args.health} health:")
    print(f"  execute (warm, memory hit)   {ex['per_call']:>12,.0f}")
    for label, v in ex["parts_per_call"].items():
        print(f"    {label:<34} {v:>12,.0f}")
    print(f"  health                       {he['per_call']:>12,.0f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    for p in results["problems"]:
        print(f"run_instructions: check failed: {p}", file=sys.stderr)
    return 1 if results["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
