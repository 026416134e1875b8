#!/usr/bin/env python3
"""Drift end to end (docs/perf.md, "Drift"): a real fdod samples every stage with the
software clock (no PMU needed), sees a two-phase program move from phase A to phase B,
re-profiles it with instrumented stages and writes a profile for B within a bounded number
of stages; no churn before or after.

Run through CTest (tests/e2e/CMakeLists.txt) or directly:
  FDO_BUILD_DIR=build python3 tests/e2e/test_drift.py"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, ir  # noqa: E402

ITERATIONS = 30_000_000  # a few tens of milliseconds per stage
WINDOW = 3
MIN_STAGES = 2


class Drift(unittest.TestCase):
    def setUp(self):
        self.d = Daemon({
            "sampling.frequency_hz": 2000,
            "policy.time_share_window_stages": WINDOW,
            "policy.time_share_min_samples": 30,
            "policy.time_share_drift_threshold": 0.3,
            "policy.min_stages": MIN_STAGES,
            "exec_timeout_ms": 20000,
        }).start()
        self.c = self.d.client()

    def tearDown(self):
        self.c.close()
        self.d.cleanup()

    def stage(self, prog, phase):
        r = self.c.call("execute", {"program": prog, "entry": "run", "args": [phase, ITERATIONS]})
        return r["stage"]

    def named(self, doc, source):
        """The PGO name (profile key) of the function whose source name ends in `source`."""
        names = [k for k, f in doc["functions"].items() if f.get("source_name", k).endswith(source)]
        self.assertEqual(len(names), 1, list(doc["functions"].items()))
        return names[0]

    def test_phase_shift_reprofiles_within_bounded_stages(self):
        prog = self.c.call("program.register", {"ir": ir("two_phase.ll"), "name": "two_phase"})[
            "program"]
        first = self.stage(prog, 0)
        samples = first["samples"]
        self.assertIsNotNone(samples, first)
        if samples["clock_event"] is None:
            self.skipTest("no software clock can be sampled here: %s" % samples["events"])
        pk = first["profile_key"]

        # Phase A: instrumented stages write v1, then optimized code runs without churn.
        a = [first] + [self.stage(prog, 0) for _ in range(MIN_STAGES + WINDOW + 2)]
        rewrites = [s["profile_rewritten"] for s in a if s["profile_rewritten"]]
        self.assertEqual([(r["from"], r["to"]) for r in rewrites], [(0, 1)],
                         [s["policy"] for s in a])
        self.assertEqual(a[-1]["mode"], "optimized")
        self.assertIn("below threshold", a[-1]["policy"])
        v1 = self.c.call("profile.get", {"profile_key": pk})["profile"]
        shares = v1["hardware"]["sampling"]["time_share"]
        phase_a = self.named(v1, "phase_a")
        self.assertGreater(shares.get(phase_a, 0), 0.8, shares)
        self.assertGreater(a[-1]["samples"]["functions"].get(phase_a, 0), 0, a[-1]["samples"])

        # Phase B: drift detected within the window, instrumented stages again,
        # then a version made from B's counts, and optimized code for B.
        b = []
        bound = WINDOW + MIN_STAGES + 2
        while len(b) < bound:
            b.append(self.stage(prog, 1))
            if b[-1]["profile_rewritten"] and b[-1]["profile_rewritten"]["from"] >= 2:
                break
        written = [s["profile_rewritten"] for s in b if s["profile_rewritten"]]
        self.assertEqual(len(written), 2, [s["policy"] for s in b])
        self.assertIn("time-share drift", written[0]["reason"])
        self.assertIn("re-profiling", written[0]["reason"])
        self.assertEqual((written[0]["from"], written[0]["to"]), (1, 2))
        self.assertEqual((written[1]["from"], written[1]["to"]), (2, 3))
        self.assertIn("instrumented", [s["mode"] for s in b])
        v3 = self.c.call("profile.get", {"profile_key": pk})["profile"]
        shares = v3["hardware"]["sampling"]["time_share"]
        self.assertGreater(shares.get(self.named(v3, "phase_b"), 0), 0.8, shares)

        # B goes on: optimized under v3, no further rewrite.
        after = [self.stage(prog, 1) for _ in range(WINDOW + 2)]
        self.assertEqual(after[-1]["mode"], "optimized")
        self.assertEqual(after[-1]["profile_version"], 3)
        self.assertFalse([s for s in after if s["profile_rewritten"]], [s["policy"] for s in after])
        hist = self.c.call("profile.history", {"profile_key": pk})
        self.assertEqual([v["version"] for v in hist["versions"]], [1, 2, 3])
        reasons = {v["version"]: v["reason"] for v in hist["versions"]}
        self.assertIn("time-share drift", reasons[2])


if __name__ == "__main__":
    unittest.main()
