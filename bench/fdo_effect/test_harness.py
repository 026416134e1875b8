#!/usr/bin/env python3
"""Unit tests of the FDO-effect harness's bookkeeping (run_native.py): the
interleaving order, multi-column runners, checksum checks, failures, ratios and
geometric means, and codegen_gap.py's comparison of disassembled code. No daemon,
no native builds: fake runners and fake disassembly only."""
import math
import pathlib
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import codegen_gap as cg  # noqa: E402
import run_native as rn  # noqa: E402


def fixed(ns, checksum=7, log=None, name=None):
    def run(k):
        if log is not None:
            log.append((k["name"], name))
        return {"checksum": checksum, "ns": list(ns)}
    return run


class Interleaving(unittest.TestCase):
    def test_order_rotates_every_round(self):
        log = []
        variants = [rn.Variant(n, n, fixed([1], log=log, name=n)) for n in ("a", "b", "c")]
        rn.measure_interleaved([{"name": "k"}], variants, rounds=3)
        self.assertEqual([n for _, n in log], ["a", "b", "c", "b", "c", "a", "c", "a", "b"])

    def test_medians_over_all_samples_of_all_rounds(self):
        calls = iter([[10, 30], [20, 40], [50, 60]])
        v = rn.Variant("o2", "O2", lambda k: {"checksum": 1, "ns": next(calls)})
        res = rn.measure_interleaved([{"name": "k"}], [v], rounds=3)["k"]
        self.assertEqual(res["o2"]["samples_ns"], [10, 30, 20, 40, 50, 60])
        self.assertEqual(res["o2"]["median_ns"], 35)
        self.assertEqual(res["o2"]["round_medians_ns"], [20, 30, 55])
        self.assertEqual(res["o2"]["min_ns"], 10)
        self.assertEqual(res["_errors"], [])


class MultiColumn(unittest.TestCase):
    def test_columns_and_details_are_kept_apart(self):
        def fdod(k):
            return {"checksum": 7, "columns": {"s0": [100], "final": [40, 42]},
                    "details": {"first_opt": 3}}
        variants = [rn.Variant("o2", "O2", fixed([50])),
                    rn.Variant("fdod", "fdod", fdod, columns=[("s0", "stage 0"),
                                                              ("final", "final")])]
        self.assertEqual(rn.columns_of(variants), [("o2", "O2"), ("s0", "stage 0"),
                                                   ("final", "final")])
        res = rn.measure_interleaved([{"name": "k"}], variants, rounds=2)["k"]
        self.assertEqual(res["s0"]["samples_ns"], [100, 100])
        self.assertEqual(res["final"]["samples_ns"], [40, 42, 40, 42])
        self.assertEqual(res["_details"]["fdod"], [{"first_opt": 3}, {"first_opt": 3}])
        self.assertEqual(res["_errors"], [])

    def test_a_missing_column_fails_every_column_of_the_runner(self):
        v = rn.Variant("fdod", "fdod", lambda k: {"checksum": 1, "columns": {"a": [1]}},
                       columns=[("a", "A"), ("b", "B")])
        res = rn.measure_interleaved([{"name": "k"}], [v], rounds=2)["k"]
        self.assertIn("no samples for b", res["a"]["failed"])
        self.assertIsNone(res["a"]["median_ns"])
        self.assertIsNone(res["b"]["median_ns"])
        self.assertEqual(len(res["_errors"]), 1)  # failed once, then skipped


class Checks(unittest.TestCase):
    def test_variants_disagreeing_on_the_checksum_is_an_error(self):
        variants = [rn.Variant("o2", "O2", fixed([1], checksum=1)),
                    rn.Variant("pgo", "PGO", fixed([1], checksum=2))]
        res = rn.measure_interleaved([{"name": "k"}], variants, rounds=1)["k"]
        self.assertTrue(any("disagree" in e for e in res["_errors"]))

    def test_a_checksum_changing_between_rounds_is_an_error(self):
        sums = iter([5, 6])
        v = rn.Variant("o2", "O2", lambda k: {"checksum": next(sums), "ns": [1]})
        res = rn.measure_interleaved([{"name": "k"}], [v], rounds=2)["k"]
        self.assertTrue(any("changed between rounds" in e for e in res["_errors"]))

    def test_a_failing_runner_is_reported_and_not_retried(self):
        calls = []

        def bad(k):
            calls.append(1)
            raise rn.BenchError("exploded")
        variants = [rn.Variant("o2", "O2", fixed([1])), rn.Variant("x", "X", bad)]
        res = rn.measure_interleaved([{"name": "k"}], variants, rounds=3)["k"]
        self.assertEqual(len(calls), 1)
        self.assertEqual(res["x"]["failed"], "exploded")
        self.assertEqual(res["_errors"], ["x: exploded"])
        self.assertEqual(res["o2"]["samples_ns"], [1, 1, 1])


class Ratios(unittest.TestCase):
    def test_ratios_to_baseline_pairs_and_geomeans(self):
        results = {
            "k1": {"o2": {"median_ns": 100}, "pgo": {"median_ns": 80}, "fin": {"median_ns": 40},
                   "_errors": []},
            "k2": {"o2": {"median_ns": 100}, "pgo": {"median_ns": 125}, "fin": {"median_ns": 250},
                   "_errors": []},
        }
        s = rn.summarize(results, ["o2", "pgo", "fin"], "o2", pair_ratios=[("fin", "pgo")])
        self.assertEqual(s["pairs"], ["pgo/o2", "fin/o2", "fin/pgo"])
        self.assertAlmostEqual(s["ratios"]["k1"]["pgo/o2"], 0.8)
        self.assertAlmostEqual(s["ratios"]["k2"]["fin/pgo"], 2.0)
        self.assertAlmostEqual(s["geomean"]["pgo/o2"], math.sqrt(0.8 * 1.25))
        self.assertAlmostEqual(s["geomean"]["fin/pgo"], 1.0)

    def test_a_failed_column_has_no_ratio_and_is_left_out_of_the_geomean(self):
        results = {"k1": {"o2": {"median_ns": 100}, "x": {"median_ns": None}, "_errors": ["x"]},
                   "k2": {"o2": {"median_ns": 100}, "x": {"median_ns": 50}, "_errors": []}}
        s = rn.summarize(results, ["o2", "x"], "o2")
        self.assertIsNone(s["ratios"]["k1"]["x/o2"])
        self.assertAlmostEqual(s["geomean"]["x/o2"], 0.5)
        table = rn.format_ratio_table(results, s, {"o2": "O2", "x": "X"},
                                      [("x/o2", "X vs O2")])
        self.assertIn("X vs O2", table)
        self.assertIn("n/a", table)
        self.assertIn("ERROR k1: x", table)

    def test_rounds_must_be_positive(self):
        with self.assertRaises(rn.BenchError):
            rn.measure_interleaved([{"name": "k"}], [rn.Variant("a", "a", fixed([1]))], rounds=0)



def _stage(mode, role, trial=None):
    return {"mode": mode, "role": role, "trial": trial}


class GuardColumn(unittest.TestCase):
    """guarded.py: the guard's cost and the targets, from fake stages and medians."""

    def setUp(self):
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "e2e"))
        import guarded
        self.g = guarded

    def test_losing_stages_follow_each_verdict(self):
        stages = [_stage("instrumented", "current"), _stage("optimized", "current"),
                  _stage("plain", "incumbent"), _stage("optimized", "candidate"),
                  _stage("optimized", "candidate"),
                  _stage("plain", "incumbent", "v1 profiled O2 rejected: 1.30x slower than "
                                               "plain O2 over 2+2 stages (profile v2)"),
                  _stage("plain", "incumbent"), _stage("plain", "candidate"),
                  _stage("plain", "candidate", "plain O3 accepted: 1.10x faster than plain O2 "
                                               "over 1+1 stages (profile v3)"),
                  _stage("plain", "incumbent"), _stage("plain", "candidate"),
                  _stage("plain", "incumbent", "plain O3 -unroll not taken (no difference): no "
                                               "faster or slower (1.000x) than plain O3"),
                  _stage("optimized", "candidate"),
                  _stage("optimized", "incumbent", "v2 profiled O3 kept (no difference, faster "
                                                   "median): 1.30x faster than plain O3 over "
                                                   "10+10 stages")]
        losing, under, verdicts = self.g.losing_stages(stages)
        # Rejected profile: its current stage and two candidate stages lost;
        # accepted O3: the incumbent stage of that trial lost; no difference
        # (either way): none.
        self.assertEqual(losing, 3 + 1)
        self.assertEqual(under, 13)
        self.assertEqual(len(verdicts), 4)

    def test_targets_use_the_printed_noise_and_the_geomean(self):
        res = {"k1": {"o2": {"median_ns": 100, "spread": 0.1}, "pgo": {"median_ns": 90, "spread": 0.1},
                      "g": {"median_ns": 93, "spread": 0.1}},
               "k2": {"o2": {"median_ns": 100, "spread": 0.02}, "pgo": {"median_ns": 120, "spread": 0.02},
                      "g": {"median_ns": 110, "spread": 0.02}}}
        summary = {"geomean": {"g/pgo": rn.geomean([93 / 90, 110 / 120])}}
        lines, met = self.g.targets(res, summary, "g")
        self.assertFalse(met)
        self.assertIn("k1: 0.00 ms vs best native 0.00 ms", lines[0])
        self.assertTrue(lines[0].endswith(": met"))  # 93 vs 90 within ±4.65
        self.assertTrue(lines[1].endswith("NOT met"))  # 110 vs 100, noise ±1.1
        self.assertIn("(target <= 0.95): NOT met", lines[2])
        summary = {"geomean": {"g/pgo": 0.9}}
        res["k2"]["g"]["median_ns"] = 100
        self.assertTrue(self.g.targets(res, summary, "g")[1])


class CodegenGap(unittest.TestCase):
    def test_normalize_drops_what_depends_on_the_link_address(self):
        a = cg.normalize("jne    15f0 <kernel_run+0x40>")
        b = cg.normalize("jne    40 <kernel_run+0x40>")
        self.assertEqual(a, b)
        self.assertEqual(cg.normalize("vmovdqa 0x1c2e(%rip),%ymm0   # 3230 <_IO_stdin_used+0x30>"),
                         cg.normalize("vmovdqa 0x0(%rip),%ymm0   # 8 <kernel_run+0x8>"))
        # Registers and immediates stay: they are the code.
        self.assertNotEqual(cg.normalize("add    $0x1,%rax"), cg.normalize("add    $0x2,%rax"))
        self.assertNotEqual(cg.normalize("vpaddd %ymm1,%ymm0,%ymm0"),
                            cg.normalize("vpaddd %xmm1,%xmm0,%xmm0"))

    def test_verdicts_match_by_code_not_by_name(self):
        fdo = {"kernel_run": ["push %rbp", "call TARGET"], "fdo.local.7": ["mov %edi,%eax", "ret"],
               "fdo.local.8": ["xor %eax,%eax", "ret"], "__fdo_thunk_kernel_run": ["jmp TARGET"]}
        clang = {"main": ["ret"], "kernel_run": ["push %rbp", "call TARGET"],
                 "log_event": ["mov %edi,%eax", "ret"]}
        v = {x["function"]: x for x in cg.compare_code(fdo, clang)}
        self.assertNotIn("__fdo_thunk_kernel_run", v)  # fdo's own entry thunk
        self.assertTrue(v["kernel_run"]["identical"])
        self.assertEqual(v["kernel_run"]["clang_function"], "kernel_run")
        self.assertEqual(v["fdo.local.7"]["clang_function"], "log_event")
        self.assertFalse(v["fdo.local.8"]["identical"])
        clang["kernel_run"] = ["push %rbp", "call TARGET", "ret"]
        v = {x["function"]: x for x in cg.compare_code(fdo, clang)}
        self.assertFalse(v["kernel_run"]["identical"])
        self.assertEqual(v["kernel_run"]["clang_instructions"], 3)


if __name__ == "__main__":
    unittest.main()
