#!/usr/bin/env python3
"""Sampling in the loop: what it costs and what drift re-profiling buys.

Program: tests/e2e/fixtures/two_phase_vec.ll (--fixture vec, the default),
run(phase, n): phase 0 spends its time in phase_a (a xorshift chain), phase 1 in
phase_b (a byte transform that vectorizes where its profile calls it hot and
stays scalar where phase A's profile calls it cold; two_phase_vec.c says why).
--fixture plain runs tests/e2e/fixtures/two_phase.ll instead, whose two
phase_b versions run the same dependency chain (the 2026-11-24 figures in
docs/perf.md).

1. Overhead. Two fdods side by side, identical but for sampling.frequency_hz
   (0 = off, and --frequency, default 250 Hz as fdod; sampling.events at its
   default), each
   warmed on phase A until its stages are optimized memory hits. Then rounds,
   order alternating, one stage on each: the worker's thread CPU time and
   exec_ns (the entry call, which the kernel's sample interrupts lengthen;
   CPU time is the steadier figure on a loaded host) and the client's round trip
   (which adds the ring drain, attribution and the larger reply). Figures:
   medians per daemon and the ratio sampled/unsampled (target <= 1.02).
2. Phase change. A third fdod (defaults, drift on) runs phase A until
   optimized, then phase B: the number of B stages until a stage runs new
   optimized code (profile version >= 3), with each stage's mode and version.
3. Before/after on B. Rounds alternating between the phase-change daemon, now
   running code optimized for B, and a fourth fdod kept on the code optimized
   for A (drift off: policy.time_share_drift_threshold = 1), both executing
   phase B: median thread CPU time and median exec_ns each, and the ratios
   A-code/B-code on B.

Exit status: 0 ok; 1 a measurement failed; 2 setup problem.
"""
import argparse
import datetime
import json
import os
import pathlib
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "bench"))
import harness  # noqa: E402
from benchhost import host_info, loadavg  # noqa: E402

FIXTURES = {"vec": "two_phase_vec.ll", "plain": "two_phase.ll"}
PROGRAM = None  # --fixture

BUILD_DIR = None  # --build-dir


def daemon(config):
    # The live A/B guard is off: these figures are sampling and drift alone.
    base = {"exec_timeout_ms": 60000, "policy.min_stages": 2, "tier_up": "sync", "guard": "off"}
    base.update(config)
    return harness.Daemon(base, build_dir=BUILD_DIR, prefix="fdo-bench-sampling-").start()


class Runner:
    def __init__(self, d, n):
        self.d = d
        self.c = d.client()
        self.n = n
        self.prog = self.c.call("program.register",
                                {"ir": PROGRAM[1], "name": PROGRAM[0]})["program"]

    def stage(self, phase):
        t0 = time.perf_counter_ns()
        r = self.c.call("execute", {"program": self.prog, "entry": "run", "args": [phase, self.n]})
        rt = time.perf_counter_ns() - t0
        s = r["stage"]
        s["round_trip_ns"] = rt
        return s

    def warm(self, phase, limit=20):
        for _ in range(limit):
            s = self.stage(phase)
            if s["mode"] == "optimized" and s["cache"]["outcome"] == "memory_hit":
                return s
        raise RuntimeError("did not reach optimized memory hits in %d stages" % limit)

    def close(self):
        self.c.close()
        self.d.cleanup()


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def overhead(n, rounds, frequency):
    off = Runner(daemon({"sampling.frequency_hz": 0}), n)
    on = Runner(daemon({"policy.time_share_drift_threshold": 1, "sampling.frequency_hz": frequency}),
                n)
    try:
        off.warm(0)
        on.warm(0)
        res = {name: {"exec_ns": [], "cpu_ns": [], "round_trip_ns": []} for name in ("off", "on")}
        res["samples_per_stage"] = []
        for i in range(rounds):
            order = [("off", off), ("on", on)] if i % 2 == 0 else [("on", on), ("off", off)]
            for name, r in order:
                s = r.stage(0)
                res[name]["exec_ns"].append(s["exec_ns"])
                res[name]["cpu_ns"].append(s["counters"]["thread_cpu_ns"])
                res[name]["round_trip_ns"].append(s["round_trip_ns"])
                if name == "on" and s.get("samples"):
                    res["samples_per_stage"].append(s["samples"]["recorded"])
                    res["events"] = s["samples"]["events"]
        return res
    finally:
        off.close()
        on.close()


def phase_change(n, rounds, max_b):
    moving = Runner(daemon({}), n)
    stay = Runner(daemon({"policy.time_share_drift_threshold": 1}), n)
    try:
        moving.warm(0)
        stay.warm(0)
        trail = []
        for _ in range(max_b):
            s = moving.stage(1)
            trail.append({"mode": s["mode"], "version": s["profile_version"],
                          "exec_ns": s["exec_ns"], "policy": s["policy"],
                          "rewritten": s["profile_rewritten"]})
            if s["mode"] == "optimized" and s["profile_version"] >= 3:
                break
        reached = trail[-1]["mode"] == "optimized" and trail[-1]["version"] >= 3
        moving.warm(1)
        res = {"trail": trail, "stages_to_new_code": len(trail) if reached else None,
               "a_code_on_b": [], "b_code_on_b": [], "a_exec_on_b": [], "b_exec_on_b": [],
               "versions": {}}
        for i in range(rounds):
            order = [(moving, "b"), (stay, "a")]
            if i % 2:
                order.reverse()
            for r, side in order:
                s = r.stage(1)
                res[side + "_code_on_b"].append(s["counters"]["thread_cpu_ns"] or s["exec_ns"])
                res[side + "_exec_on_b"].append(s["exec_ns"])
                res["versions"].setdefault(side, set()).add((s["mode"], s["profile_version"]))
        res["versions"] = {k: sorted(v) for k, v in res["versions"].items()}
        return res
    finally:
        moving.close()
        stay.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=40_000_000, help="loop iterations per stage")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--max-b-stages", type=int, default=12)
    ap.add_argument("--frequency", type=int, default=250,
                    help="sampling.frequency_hz of the sampled daemon in the overhead part (default: "
                    "fdod's default)")
    ap.add_argument("--fixture", choices=sorted(FIXTURES), default="vec",
                    help="vec: two_phase_vec.ll (phase B gains from its profile; default); plain: "
                    "two_phase.ll (both phase_b versions run one dependency chain)")
    ap.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    ap.add_argument("--json", help="write the full results here")
    ap.add_argument("--build-dir", default=str(harness.BUILD), help="the build with fdod")
    a = ap.parse_args()
    global BUILD_DIR, PROGRAM
    BUILD_DIR = a.build_dir
    name = FIXTURES[a.fixture]
    PROGRAM = (name[:-3], (REPO / "tests" / "e2e" / "fixtures" / name).read_text())
    if a.quick:
        a.iterations, a.rounds = 10_000_000, 4
    if not (pathlib.Path(a.build_dir) / "fdod").exists():
        print("no fdod in %s" % a.build_dir, file=sys.stderr)
        return 2
    started = datetime.datetime.now(datetime.timezone.utc).isoformat()
    load_before = loadavg()
    ov = overhead(a.iterations, a.rounds, a.frequency)
    pc = phase_change(a.iterations, a.rounds, a.max_b_stages)

    off_e, on_e = med(ov["off"]["exec_ns"]), med(ov["on"]["exec_ns"])
    off_c, on_c = med(ov["off"]["cpu_ns"]), med(ov["on"]["cpu_ns"])
    off_r, on_r = med(ov["off"]["round_trip_ns"]), med(ov["on"]["round_trip_ns"])
    print("Sampling overhead per stage (phase A, %d iterations, %d rounds, %d Hz, medians)" %
          (a.iterations, a.rounds, a.frequency))
    print("  events: %s" % ", ".join("%s=%s" % (e["name"], e["status"]) for e in ov.get("events", [])))
    print("  samples recorded per stage (median): %s" % med(ov["samples_per_stage"]))
    print("  thread CPU  off %10.0f  on %10.0f  ratio on/off %.4f" % (off_c, on_c, on_c / off_c))
    print("  exec_ns     off %10.0f  on %10.0f  ratio on/off %.4f" % (off_e, on_e, on_e / off_e))
    print("  round trip  off %10.0f  on %10.0f  ratio on/off %.4f" % (off_r, on_r, on_r / off_r))
    print()
    print("Phase change A -> B (%s, tier_up sync, policy.min_stages 2, window 3 stages)" %
          FIXTURES[a.fixture])
    for i, t in enumerate(pc["trail"]):
        rw = t["rewritten"]
        print("  B stage %2d: %-12s v%d  exec %8.2f ms  %s" %
              (i + 1, t["mode"], t["version"], t["exec_ns"] / 1e6,
               ("rewrote v%d->v%d: %s" % (rw["from"], rw["to"], rw["reason"])) if rw else ""))
    print("  stages from the phase change to new optimized code: %s" % pc["stages_to_new_code"])
    a_on_b, b_on_b = med(pc["a_code_on_b"]), med(pc["b_code_on_b"])
    a_ex, b_ex = med(pc["a_exec_on_b"]), med(pc["b_exec_on_b"])
    print("Before/after on phase B (%d rounds interleaved, medians; A-code %s, B-code %s)" %
          (a.rounds, pc["versions"].get("a"), pc["versions"].get("b")))
    for what, a_ns, b_ns in (("thread CPU", a_on_b, b_on_b), ("exec_ns", a_ex, b_ex)):
        print("  %-10s  code optimized for A %10.0f ns  for B %10.0f ns  ratio A-code/B-code %.3f" %
              (what, a_ns, b_ns, a_ns / b_ns))
    out = {"started": started, "host": host_info(), "load_before": load_before,
           "load_after": loadavg(), "params": vars(a), "overhead": ov, "phase_change": pc}
    if a.json:
        pathlib.Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(a.json).write_text(json.dumps(out, indent=1))
    ok = pc["stages_to_new_code"] is not None
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
