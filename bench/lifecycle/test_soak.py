#!/usr/bin/env python3
"""Unit tests of the lifecycle soak's bookkeeping (soak.py): what it counts from stage
records and which summaries break the properties it checks. No daemon: fake records."""
import pathlib
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import soak  # noqa: E402


def rec(i, mode, cache="memory_hit", phase="steady", transitions=(), workload=0):
    return {"stage": i, "mode": mode, "version": 1, "cache": cache, "role": "current",
            "variant": None, "policy": "", "phase": phase, "transitions": list(transitions),
            "cpu_ns": 1, "exit_status": None, "workload": workload}


def steady_run(n=20):
    recs = [rec(0, "instrumented", "compiled", "profiling", [("profiling", "profiling", "new_program")])]
    recs += [rec(i, "instrumented", phase="profiling") for i in (1, 2)]
    recs[-1]["transitions"] = [("profiling", "cs_profiling", "counts_ready")]
    recs += [rec(i, "cs_instrumented", phase="cs_profiling") for i in (3, 4)]
    recs[-1]["transitions"] = [("cs_profiling", "optimized", "cs_counts_ready")]
    recs += [rec(i, "optimized") for i in range(5, n)]
    return {"program": "p", "records": recs, "switched_at": None}


class Summaries(unittest.TestCase):
    def prog(self, phase_change=False):
        return soak.Program("p", "", "run", phase_change=phase_change)

    def test_a_steady_program_holds(self):
        s = soak.summarize(self.prog(), steady_run())
        self.assertEqual(s["to_optimized"], 5)
        self.assertEqual(s["reprofiles"], 0)
        self.assertEqual(s["final_mode"], "optimized")
        self.assertEqual(soak.violations(s), [])

    def test_a_return_to_instrumented_code_is_a_violation(self):
        run = steady_run()
        run["records"][12]["mode"] = "instrumented"
        run["records"][12]["transitions"] = [("steady", "reprofiling", "drift")]
        s = soak.summarize(self.prog(), run)
        self.assertEqual(s["instrumented_after_optimized"], 1)
        self.assertEqual(s["reprofile_stages"], [12])
        v = soak.violations(s)
        self.assertTrue(any("instrumented stage" in x for x in v), v)
        self.assertTrue(any("re-profiled" in x for x in v), v)

    def test_stale_runs_and_trial_reprofiles_are_counted(self):
        run = steady_run()
        for i in (7, 8, 9, 10):
            run["records"][i]["cache"] = "tier_up_pending"
        run["records"][14]["transitions"] = [("trial", "reprofiling", "drift")]
        run["records"][13]["cache"] = "tier_up_pending"
        s = soak.summarize(self.prog(), run)
        self.assertEqual(s["longest_stale_run"], 4)
        self.assertEqual(s["stale_stages"], 5)
        self.assertEqual(s["trial_reprofiles"], 1)
        v = soak.violations(s)
        self.assertTrue(any("4 consecutive stages" in x for x in v), v)
        self.assertTrue(any("from a trial" in x for x in v), v)

    def test_late_optimization_is_a_violation(self):
        run = steady_run()
        for r in run["records"][:12]:
            r["mode"] = "instrumented"
        s = soak.summarize(self.prog(), run)
        self.assertEqual(s["to_optimized"], 12)
        self.assertTrue(soak.violations(s))

    def test_the_phase_change_program_must_be_reprofiled_after_its_switch(self):
        run = steady_run(30)
        run["switched_at"] = 15
        s = soak.summarize(self.prog(phase_change=True), run)
        self.assertTrue(any("not re-profiled" in x for x in soak.violations(s)))
        run["records"][17]["transitions"] = [("steady", "reprofiling", "drift")]
        for i in (18, 19, 20):
            run["records"][i]["mode"] = "instrumented"
        s = soak.summarize(self.prog(phase_change=True), run)
        self.assertEqual(soak.violations(s), [])

    def test_table_has_a_row_per_program(self):
        s = soak.summarize(self.prog(), steady_run())
        lines = soak.table([s, s]).splitlines()
        self.assertEqual(len(lines), 3)
        self.assertTrue(lines[0].startswith("program"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
