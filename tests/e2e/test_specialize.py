#!/usr/bin/env python3
"""Value specialization end to end (docs/jit.md, "Value specialization"), with a real fdod.

A client calls run(n, 4) stage after stage: the instrumented stages record that step() is
always called with width 4; the profile keeps it (arg_values); the optimized build clones
step() for width 4 behind a guard, and the stage's explain record says so. The values are
those the instrumented and the plain code give, for the dominant width and for any other
(the guard sends them to the general body). When the workload moves to width 7 the clone is
not taken and the values stay right. Nothing is timed here (bench/fdo_effect times it).

Run through CTest (tests/e2e/CMakeLists.txt) or directly:
  FDO_BUILD_DIR=build python3 tests/e2e/test_specialize.py"""
import pathlib
import sys
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from harness import Daemon, ir  # noqa: E402

MASK = (1 << 64) - 1


def expected(n, width):
    """run(n, width) of spec_width.c, in Python."""
    total = 0
    for i in range(n):
        acc = i
        for k in range(width & 0xFFFFFFFF):
            acc = (acc * 31 + k + (acc >> 7)) & MASK
        total = (total + acc) & MASK
    return total


class ValueSpecialization(unittest.TestCase):
    def setUp(self):
        self.d = Daemon({"policy.cs_pgo_stages": 0, "policy.min_stages": 2,
                         "policy.min_counts": 1, "tier_up": "sync"}).start()
        self.c = self.d.client()

    def tearDown(self):
        self.c.close()
        self.d.cleanup()

    def run_stage(self, prog, n, width):
        r = self.c.call("execute", {"program": prog, "entry": "run", "args": [n, width]})
        self.assertEqual(r["value"], expected(n, width), (n, width, r["stage"]["mode"]))
        return r

    def test_a_dominant_width_is_specialized_and_other_widths_stay_right(self):
        prog = self.c.call("program.register",
                           {"ir": ir("spec_width.ll"), "name": "spec_width"})["program"]
        stages = [self.run_stage(prog, 3000, 4) for _ in range(4)]
        modes = [r["stage"]["mode"] for r in stages]
        self.assertEqual(modes[:2], ["instrumented"] * 2, modes)
        self.assertEqual(modes[2:], ["optimized"] * 2, modes)
        pk = stages[0]["stage"]["profile_key"]
        doc = self.c.call("profile.get", {"profile_key": pk})["profile"]
        args = [(name, f["arg_values"]) for name, f in doc["functions"].items()
                if f.get("source_name", "").endswith(":step") and "arg_values" in f]
        self.assertEqual(len(args), 1, doc["functions"])
        width = [a for a in args[0][1] if a["arg"] == 1]
        self.assertEqual(width, [{"arg": 1, "values": [[4, 6000]], "other": 0}])

        # The optimized stage's compile says what it specialized, by source name.
        ex = self.c.call("cache.explain", {"program": prog})
        details = [r["detail"] for r in ex["records"] if r["mode"] == "optimized"]
        self.assertTrue(any("value specialization: spec_width.c:step (arg 1 = 4" in d
                            for d in details), details)

        # Other widths, through the same optimized code: the general body.
        for w in (0, 1, 5, 7, 33):
            r = self.run_stage(prog, 500, w)
            self.assertEqual(r["stage"]["mode"], "optimized")
        # A new workload: width 7 from now on. Never a wrong value.
        for _ in range(4):
            self.run_stage(prog, 3000, 7)


if __name__ == "__main__":
    unittest.main()
