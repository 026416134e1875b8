#!/usr/bin/env python3
"""The program lifecycle end to end (docs/lifecycle.md), with a real fdod.

ExitStatus: a program whose entry ends with exit(n) is profiled and optimized like any
other: the exec worker reads its counts before the program ends; its exit status and
output still come back, and the worker is not lost.

LifecycleSoak: the soak of bench/lifecycle/soak.py, shorter: every program of the project's
corpus through fdod with every mechanism on (the guard, the context-sensitive round,
sampling and drift; tier_up = sync). Steady programs are optimized by stage 10 and never
return to instrumented code, nothing is re-profiled from a trial, no program runs more than
3 consecutive stages on an earlier build, and the phase-change program is re-profiled after
its switch and ends with a profile of its new phase. Shortened for CI: fewer stages, the
guard's first trial after 8 stages instead of 20, sampling at 1000 Hz so that drift is
judged over stages of tens of milliseconds. Nothing is timed here.

Run through CTest (tests/e2e/CMakeLists.txt) or directly:
  FDO_BUILD_DIR=build python3 tests/e2e/test_lifecycle.py [ExitStatus|LifecycleSoak]"""
import os
import pathlib
import sys
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "bench" / "lifecycle"))
from harness import BUILD, Daemon, ir  # noqa: E402
import soak  # noqa: E402


class ExitStatus(unittest.TestCase):
    def setUp(self):
        self.d = Daemon({"policy.cs_pgo_stages": 2}).start()
        self.c = self.d.client()

    def tearDown(self):
        self.c.close()
        self.d.cleanup()

    def run_stage(self, prog, n, status):
        return self.c.call("execute", {"program": prog, "entry": "run", "args": [n, status]})

    def test_a_program_that_exits_is_optimized_within_the_usual_stages(self):
        prog = self.c.call("program.register", {"ir": ir("exits.ll"), "name": "exits"})["program"]
        stages = [self.run_stage(prog, 200_000, 0) for _ in range(7)]
        for r in stages:
            self.assertEqual(r["exit_status"], 0, r)
            self.assertIsNone(r["value"])
            self.assertIn("checksum ", r["output"]["stdout"])
        modes = [r["stage"]["mode"] for r in stages]
        # min_stages 2 instrumented, the CS round's 2, then optimized: the same
        # sequence as a program that returns.
        self.assertEqual(modes, ["instrumented"] * 2 + ["cs_instrumented"] * 2 + ["optimized"] * 3,
                         [r["stage"]["policy"] for r in stages])
        rewrites = [(r["stage"]["profile_rewritten"]["from"], r["stage"]["profile_rewritten"]["to"])
                    for r in stages if r["stage"]["profile_rewritten"]]
        self.assertEqual(rewrites, [(0, 1), (1, 2)])
        pk = stages[0]["stage"]["profile_key"]
        doc = self.c.call("profile.get", {"profile_key": pk})["profile"]
        work = [f for f in doc["functions"].values() if sum(f.get("counts", [])) > 0]
        self.assertTrue(work, doc["functions"])
        self.assertTrue(doc.get("cs_functions"), "the CS round counted nothing")
        phases = [r["stage"]["lifecycle"]["phase"] for r in stages]
        self.assertEqual(phases[:4], ["profiling", "cs_profiling", "cs_profiling", "optimized"])
        causes = [t["cause"] for r in stages for t in r["stage"]["lifecycle"]["transitions"]]
        self.assertEqual(causes[:3], ["new_program", "counts_ready", "cs_counts_ready"])
        # Another status comes back as it is, and the worker that ran it is
        # still there: no exit was a worker's death.
        r = self.run_stage(prog, 1000, 3)
        self.assertEqual(r["exit_status"], 3)
        self.assertEqual(r["stage"]["mode"], "optimized")
        stats = self.c.call("cache.stats")
        self.assertEqual(stats["workers"]["exec"]["failures"]["exited"], 0, stats["workers"])
        # The lifecycle as explain shows it.
        ex = self.c.call("cache.explain", {"program": prog})
        self.assertEqual(ex["lifecycle"]["phase"], "optimized")
        self.assertEqual([h["cause"] for h in ex["lifecycle"]["history"]][:3],
                         ["new_program", "counts_ready", "cs_counts_ready"])


class LifecycleSoak(unittest.TestCase):
    STAGES = 45

    def test_corpus_settles_and_stays_settled(self):
        settings = soak.soak_settings()
        settings.update({"guard.min_stages": 8, "sampling.frequency_hz": 1000})
        soak.TWO_PHASE_ITERATIONS = 20_000_000
        progs = soak.corpus(BUILD)
        self.assertGreaterEqual(len(progs), 15, [p.name for p in progs])
        d = Daemon(settings, prefix="fdo-soak-").start()
        try:
            c = d.client()
            summaries = []
            for prog in progs:
                run = soak.soak_program(c, prog, self.STAGES)
                summaries.append(soak.summarize(prog, run))
                if prog.phase_change:
                    last = run["records"][-1]
                    self.assertEqual(last["workload"], 1)
                    pk = c.call("execute", prog.params(run["program"], 1))["stage"]["profile_key"]
                    share = soak.phase_b_profile_share(c, pk)
                    self.assertGreater(share, 0.8, "the current profile is not phase B's")
            # The same corpus's kernels in this process through libfdo: every lease
            # planned by the lifecycle and the guard (docs/runtimes.md, "Guarded leases").
            import test_inprocess
            lib = test_inprocess.load_libfdo()
            extra = []
            for prog in soak.inprocess_corpus(BUILD):
                run = soak.soak_inprocess(c, lib, d.socket, prog, self.STAGES)
                summaries.append(soak.summarize(prog, run))
                extra += soak.inprocess_violations(summaries[-1], run)
            print("\n" + soak.table(summaries), flush=True)
            bad = [v for s in summaries for v in soak.violations(s)] + extra
            self.assertEqual(bad, [], "\n" + soak.table(summaries))
            exits = next(s for s in summaries if s["name"] == "exits")
            self.assertEqual(exits["exit_statuses"], [0])
            # The guard ran trials on the way (what the soak is about).
            self.assertGreater(sum(s["trials"] for s in summaries), 5)
            c.close()
        finally:
            d.cleanup()


if __name__ == "__main__":
    # A missing prerequisite reads as skipped (tests/support/fdo_unittest.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fdo_unittest  # noqa: E402

    fdo_unittest.main("lifecycle")
