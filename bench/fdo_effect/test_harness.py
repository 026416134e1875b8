#!/usr/bin/env python3
"""Unit tests of the FDO-effect harness's bookkeeping (run_native.py): the
interleaving order, multi-column runners, checksum checks, failures, ratios and
geometric means, which clock every column is taken on (--clock), and
codegen_gap.py's comparison of disassembled code. No daemon, no native builds:
fake runners, fake drivers, fake stage replies and fake disassembly only."""
import math
import os
import pathlib
import sys
import tempfile
import textwrap
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
        # (A context-sensitive round's stages are instrumentation, like the
        # first round's: neither under the profile nor lost.)
        stages = [_stage("instrumented", "current"), _stage("cs_instrumented", "current"),
                  _stage("optimized", "current"),
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


# A fake driver.c / fdo_effect_jit: prints the JSON line of one batch whose
# times say which clock it was asked for (100 ns on thread-cpu, 900 ns on
# monotonic, its default) and logs its arguments; with --serve it answers
# "run N W" lines like fdo_effect_jit.
FAKE_DRIVER = textwrap.dedent("""\
    #!{python}
    import json, sys
    args = sys.argv[1:]
    with open({log!r}, "a") as f:
        f.write(" ".join(args) + "\\n")
    clock = args[args.index("--clock") + 1] if "--clock" in args else "monotonic"
    ns = {{"thread-cpu": 100, "monotonic": 900}}[clock]
    def batch(runs):
        return json.dumps({{"checksum": 7, "ns": [ns] * runs, "compile_ms": 1.0}})
    if "--serve" in args:
        for line in sys.stdin:
            if line.startswith("quit"):
                break
            print(batch(int(line.split()[1])), flush=True)
    else:
        print(batch(int(args[args.index("--runs") + 1])))
    """)


def _reply(i, mode, version, exec_ns, cpu_ns="same", variant=None):
    """An execute reply of stage i; cpu_ns "same": exec_ns / 10, None: no
    counters.thread_cpu_ns."""
    counters = {"wall_ns": exec_ns, "events": []}
    if cpu_ns is not None:
        counters["thread_cpu_ns"] = exec_ns // 10 if cpu_ns == "same" else cpu_ns
    stage = {"number": i, "mode": mode, "profile_version": version,
             "cache": {"outcome": "compiled" if i == 0 else "memory_hit"}, "compile_ms": 5.0,
             "recompiled": i == 0, "exec_ns": exec_ns, "counters": counters, "policy": "p"}
    if variant is not None:
        stage["variant"] = variant
    return {"value": 42, "stage": stage}


class FakeClient:
    """fdod's RPC as the runners use it: program.register, execute (the given
    replies, in order) and metrics."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.executed = 0

    def call(self, method, params=None, check_schema=True):
        if method == "program.register":
            return {"program": "p1", "profile_key": "pk1"}
        if method == "metrics":
            return {"text": f"fdo_cache_compiles_total {2 + self.executed}\n"}
        assert method == "execute", method
        self.executed += 1
        return self.replies.pop(0)


def _plain_replies(cpu_of_stage3="same"):
    # min-stages 2, final-stages 2: two instrumented stages, the first
    # optimized one (stage 2), then stages 3 and 4 on the same version.
    return [_reply(0, "instrumented", 0, 1000), _reply(1, "instrumented", 0, 2000),
            _reply(2, "optimized", 1, 3000), _reply(3, "optimized", 1, 4000, cpu_of_stage3),
            _reply(4, "optimized", 1, 5000)]


class Clock(unittest.TestCase):
    """--clock: thread-cpu takes every column as CPU time of the running thread
    (drivers with --clock thread-cpu, fdod's counters.thread_cpu_ns), monotonic
    as before (drivers' default, fdod's exec_ns)."""

    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "e2e"))
        import guarded
        import run_fdo_effect
        cls.g = guarded
        cls.fe = run_fdo_effect

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="fdo-effect-test-")
        self.log = os.path.join(self.tmp.name, "args.log")
        self.exe = os.path.join(self.tmp.name, "driver")
        with open(self.exe, "w", encoding="utf-8") as f:
            f.write(FAKE_DRIVER.format(python=sys.executable, log=self.log))
        os.chmod(self.exe, 0o755)

    def tearDown(self):
        self.tmp.cleanup()

    def logged(self):
        with open(self.log, encoding="utf-8") as f:
            return f.read().splitlines()

    def test_the_default_is_thread_cpu(self):
        self.assertEqual(rn.DEFAULT_CLOCK, "thread-cpu")
        self.assertEqual(rn.CLOCKS, ("thread-cpu", "monotonic"))

    def test_native_drivers_run_on_the_chosen_clock(self):
        cpu = rn.run_driver(self.exe, 3, 1, clock="thread-cpu")
        wall = rn.run_driver(self.exe, 2, 0, clock="monotonic")
        self.assertEqual(cpu, {"checksum": 7, "ns": [100, 100, 100]})
        self.assertEqual(wall, {"checksum": 7, "ns": [900, 900]})
        # monotonic: the command line exactly as before the option.
        self.assertEqual(self.logged(), ["--runs 3 --warmup 1 --clock thread-cpu",
                                         "--runs 2 --warmup 0"])
        with self.assertRaises(rn.BenchError):
            rn.run_driver(self.exe, 1, 0, clock="cpu")

    def test_native_variants_and_clang_instr_take_the_clock(self):
        manifest = {"pgo_available": True}
        kernel = {"name": "k", "o2": self.exe, "pgo": self.exe, "pgo_gen": self.exe}
        profiles = os.path.join(self.tmp.name, "profraw")  # emptied after each run
        os.mkdir(profiles)
        for clock, ns in (("thread-cpu", 100), ("monotonic", 900)):
            variants = rn.native_variants(manifest, 2, 0, clock)
            variants.append(self.fe.clang_instr_variant(manifest, 2, 0, profiles, clock))
            self.assertEqual([v.name for v in variants], ["o2", "pgo", "clang_instr"])
            for v in variants:
                self.assertEqual(v.run(kernel)["ns"], [ns, ns], (clock, v.name))

    def test_the_jit_runner_serves_on_the_chosen_clock(self):
        for clock, ns in (("thread-cpu", 100), ("monotonic", 900)):
            runner = self.fe.JitPlainRunner(self.exe, 2, 1, clock)
            try:
                self.assertEqual(runner({"name": "k", "ir": "k.ll"})["ns"], [ns, ns])
            finally:
                runner.close()
        self.assertEqual(self.logged(), ["--ir k.ll --serve --clock thread-cpu",
                                         "--ir k.ll --serve"])

    def test_fdod_columns_take_thread_cpu_ns_or_exec_ns(self):
        expected = {"monotonic": {"fdo_stage0": [1000], "fdo_instr": [1000, 2000],
                                  "fdo_first_opt": [3000], "fdo_final": [4000, 5000]},
                    "thread-cpu": {"fdo_stage0": [100], "fdo_instr": [100, 200],
                                   "fdo_first_opt": [300], "fdo_final": [400, 500]}}
        for clock, columns in expected.items():
            runner = self.fe.FdodRunner(FakeClient(_plain_replies()), "kernel_run", 2, 2,
                                        clock=clock)
            runner.texts["k"] = "; ir"
            out = runner({"name": "k", "ir": "unused"})
            self.assertEqual(out["columns"], columns, clock)
            self.assertEqual(out["checksum"], 42)
            # Both figures stay in the details, whatever the clock.
            st = out["details"]["stages"][3]
            self.assertEqual((st["exec_ns"], st["cpu_ns"]), (4000, 400))

    def test_fdod_cs_columns_take_the_clock(self):
        replies = [_reply(0, "instrumented", 0, 1000), _reply(1, "optimized", 1, 2000),
                   _reply(2, "cs_instrumented", 1, 3000), _reply(3, "optimized", 2, 4000),
                   _reply(4, "optimized", 2, 5000)]
        runner = self.fe.FdodRunner(FakeClient(replies), "kernel_run", 1, 2, cs_stages=1,
                                    clock="thread-cpu")
        runner.texts["k"] = "; ir"
        out = runner({"name": "k"})
        # Final: the last two stages, both on profile v2 (counts + CS counts).
        self.assertEqual(out["columns"], {"fdocs_cs_instr": [300], "fdocs_final": [400, 500]})

    def test_a_stage_without_cpu_time_fails_loudly_on_thread_cpu_only(self):
        for bad, why in ((None, "no counters.thread_cpu_ns"), (0, "thread_cpu_ns is 0")):
            runner = self.fe.FdodRunner(FakeClient(_plain_replies(bad)), "kernel_run", 2, 2,
                                        clock="thread-cpu")
            runner.texts["k"] = "; ir"
            with self.assertRaises(rn.BenchError) as e:
                runner({"name": "k"})
            self.assertIn("k round 0 stage 3 (optimized)", str(e.exception))
            self.assertIn(why, str(e.exception))
            # Wall time does not need the CPU figure.
            runner = self.fe.FdodRunner(FakeClient(_plain_replies(bad)), "kernel_run", 2, 2,
                                        clock="monotonic")
            runner.texts["k"] = "; ir"
            self.assertEqual(runner({"name": "k"})["columns"]["fdo_final"], [4000, 5000])
        # 0 CPU time for a stage that took no wall time either is a figure, not an error.
        self.assertEqual(rn.stage_ns({"exec_ns": 0, "counters": {"thread_cpu_ns": 0}},
                                     "thread-cpu", "s"), 0)

    def test_a_failing_stage_fails_its_runner_in_the_bench(self):
        runner = self.fe.FdodRunner(FakeClient(_plain_replies(0)), "kernel_run", 2, 2,
                                    clock="thread-cpu")
        runner.texts["k"] = "; ir"
        v = rn.Variant("fdod", "fdod", runner, columns=self.fe.FDOD_COLUMNS)
        res = rn.measure_interleaved([{"name": "k"}], [v], rounds=1)["k"]
        self.assertIsNone(res["fdo_final"]["median_ns"])
        self.assertEqual(len(res["_errors"]), 1)
        self.assertIn("thread_cpu_ns is 0 but exec_ns is 4000", res["_errors"][0])

    def _guarded(self, clock, cpu_of_last="same", column=None):
        incumbent = {"role": "incumbent", "name": "v1 profiled O2", "counted": False,
                     "trial": None}
        verdict = dict(incumbent, trial="v1 profiled O2 accepted: 1.20x faster than plain O2 "
                                        "over 2+2 stages (profile v1)")
        replies = [_reply(0, "instrumented", 0, 1000, variant={
                       "role": "current", "name": "instr", "counted": False, "trial": None}),
                   _reply(1, "optimized", 1, 2000, variant=verdict),
                   _reply(2, "optimized", 1, 3000, cpu_of_last, variant=incumbent)]
        config = {"policy.min_stages": 1, "guard.tune_max_variants": 0, "guard.max_pairs": 2,
                  "guard.tune_min_stages": 0}
        runner = self.g.GuardedRunner(FakeClient(replies), "kernel_run", config, 2,
                                      lambda k: "; ir", clock=clock,
                                      **({"column": column} if column else {}))
        return runner({"name": "k"})

    def test_a_budget_larger_than_the_steps_settles_after_a_quiet_tail(self):
        # Budget 10, but only one knob step applied: two verdicts, then the
        # incumbent outside any trial. Settled after guard.tune_min_stages +
        # 2 x final-stages (here 1 + 4) quiet stages, not before; the column
        # is the last final-stages of them.
        inc = {"role": "incumbent", "name": "v1 profiled O3", "counted": False, "trial": None}
        cand = dict(inc, role="candidate", counted=True, trial="trial: 1+1 stages")
        prof = dict(inc, counted=True, name="v1 profiled O2",
                    trial="v1 profiled O2 accepted: 1.20x faster than plain O2 over 2+2 stages")
        knob = dict(cand, trial="v1 profiled O3 accepted: 1.05x faster than v1 profiled O2 "
                                "over 6+6 stages")
        config = {"policy.min_stages": 1, "guard.tune_max_variants": 10, "guard.max_pairs": 6,
                  "guard.tune_min_stages": 1}

        def replies(quiet):
            r = [_reply(0, "instrumented", 0, 1000, variant=dict(inc, role="current", trial=None)),
                 _reply(1, "optimized", 1, 2000, variant=prof),
                 _reply(2, "optimized", 1, 2000, variant=cand),
                 _reply(3, "optimized", 1, 2000, variant=knob)]
            return r + [_reply(4 + i, "optimized", 1, 3000 + i, variant=inc) for i in range(quiet)]

        runner = self.g.GuardedRunner(FakeClient(replies(5)), "kernel_run", config, 2,
                                      lambda k: "; ir", clock="monotonic")
        got = runner({"name": "k"})
        self.assertEqual(got["columns"], {"fdo_guard_final": [3003, 3004]})
        self.assertEqual(len(got["details"]["verdicts"]), 2)
        runner = self.g.GuardedRunner(FakeClient(replies(4)), "kernel_run", config, 2,
                                      lambda k: "; ir", clock="monotonic")
        with self.assertRaises(IndexError):  # wanted a fifth quiet stage: not settled at four
            runner({"name": "k"})
        self.assertTrue(self.g.settled([{"role": "incumbent", "counted": False, "trial": None,
                                         "name": "a"}] * 3, 3))
        self.assertFalse(self.g.settled([{"role": "incumbent", "counted": True,
                                          "trial": "trial: 1+0 stages", "name": "a"}] * 3, 3))
        self.assertFalse(self.g.settled([{"role": "incumbent", "counted": False, "name": n}
                                         for n in "aab"], 3))
        self.assertFalse(self.g.settled([], 0))

    def test_guard_b_changes_guard_and_policy_settings_only_and_is_its_own_column(self):
        base = self.g.settings(3, False)
        self.assertEqual(base["guard.clock"], "cpu")
        b, changes = self.g.b_settings(base, ["guard.clock=wall", "guard.tune_max_variants=10",
                                              "guard.min_effect=0.02"])
        self.assertEqual((b["guard.clock"], b["guard.tune_max_variants"], b["guard.min_effect"]),
                         ("wall", 10, 0.02))
        self.assertEqual(base["guard.clock"], "cpu")  # the A guard's settings are untouched
        self.assertEqual(changes, "guard.clock wall, guard.tune_max_variants 10, "
                                  "guard.min_effect 0.02")
        b, changes = self.g.b_settings(base, ["policy.cs_pgo_stages=0"])
        self.assertEqual((b["policy.cs_pgo_stages"], changes), (0, "policy.cs_pgo_stages 0"))
        self.assertEqual(base["policy.cs_pgo_stages"], 2)  # fdod's default
        for bad in (["tier_up=async"], ["guard.clock"], ["guard.clock="], ["exec_workers=2"], []):
            with self.assertRaises(rn.BenchError):
                self.g.b_settings(base, bad)
        got = self._guarded("thread-cpu", column=self.g.B_COLUMNS[0][0])
        self.assertEqual(got["columns"], {"fdo_guard_b_final": [200, 300]})

    def test_trial_compiles_leave_out_the_unguarded_compiles(self):
        # instrumented + optimized, and cs_instrumented with the CS round
        # (fdod's default): the rest are the guard's.
        config = {"policy.min_stages": 1, "guard.tune_max_variants": 0, "guard.max_pairs": 2,
                  "guard.tune_min_stages": 0}
        make = lambda c: self.g.GuardedRunner(FakeClient([]), "kernel_run", c, 2, lambda k: "")
        self.assertEqual(make(config).base_compiles, 3)
        self.assertEqual(make(dict(config, **{"policy.cs_pgo_stages": 0})).base_compiles, 2)
        self.assertEqual(make(dict(config, **{"policy.cs_pgo_stages": 0})).limit + 2,
                         make(config).limit)

    def test_the_guard_column_takes_the_clock(self):
        self.assertEqual(self._guarded("monotonic")["columns"], {"fdo_guard_final": [2000, 3000]})
        self.assertEqual(self._guarded("thread-cpu")["columns"], {"fdo_guard_final": [200, 300]})
        with self.assertRaises(rn.BenchError) as e:
            self._guarded("thread-cpu", cpu_of_last=None)
        self.assertIn("k guarded round 0 stage 2 (optimized)", str(e.exception))

    def test_issue_targets_against_clang_pgo(self):
        summary = {"ratios": {"a": {"f/pgo": 0.8}, "http_fsm": {"f/pgo": 1.0},
                              "c": {"f/pgo": 1.04}},
                   "geomean": {"f/pgo": 0.94}}
        lines, met = self.fe.pgo_targets(summary, "f")
        self.assertTrue(met, lines)
        summary["ratios"]["c"]["f/pgo"] = 1.06
        lines, met = self.fe.pgo_targets(summary, "f")
        self.assertFalse(met)
        self.assertIn("  kernels above 1.05 x clang PGO: c 1.060: NOT met", lines)
        summary["ratios"]["c"]["f/pgo"] = 0.9
        summary["ratios"]["http_fsm"]["f/pgo"] = 1.01
        lines, met = self.fe.pgo_targets(summary, "f")
        self.assertFalse(met)
        self.assertIn("  http_fsm f / clang PGO = 1.010 (<= 1.0): NOT met", lines)
        summary["ratios"]["http_fsm"]["f/pgo"] = 0.9
        summary["geomean"]["f/pgo"] = 0.951
        self.assertFalse(self.fe.pgo_targets(summary, "f")[1])


class ProfileGapRecords(unittest.TestCase):
    TEXT = textwrap.dedent("""\
        # IR level Instrumentation Flag
        :ir
        /src/k.c:op_add
        # Func Hash:
        742261418966908927
        # Num Counters:
        1
        # Counter Values:
        2656000

        kernel_run
        # Func Hash:
        12
        # Num Counters:
        2
        # Counter Values:
        5
        7

        main
        # Func Hash:
        3
        # Num Counters:
        1
        # Counter Values:
        19
        """)

    def test_records_split_by_name_with_the_header_apart(self):
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "e2e"))
        import profile_gap as pg
        header, records = pg.text_records(self.TEXT)
        self.assertEqual(header, ["# IR level Instrumentation Flag", ":ir"])
        self.assertEqual([n for n, _ in records], ["/src/k.c:op_add", "kernel_run", "main"])
        self.assertTrue(records[1][1].startswith("kernel_run\n# Func Hash:\n12"))
        self.assertTrue(records[1][1].endswith("5\n7"))
        self.assertEqual(pg.text_records("# c\n:ir\n"), (["# c", ":ir"], []))


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


class TextOffsets(unittest.TestCase):
    def test_offsets_are_checked_and_deduplicated(self):
        self.assertEqual(cg.parse_offsets(None), [])
        self.assertEqual(cg.parse_offsets("32,16,32"), [32, 16])
        for bad in ("0", "8", "64", "x", "16,"):
            with self.assertRaises(rn.BenchError):
                cg.parse_offsets(bad)

    def test_variants_pass_each_offset_to_the_driver(self):
        manifest = {"jit_driver": "/bin/fdo_effect_jit"}
        names = [v.name for v in cg.variants(manifest, 1, 0, True, [16, 48])]
        self.assertIn("fdopgo_cpu_t16", names)
        self.assertIn("fdopgo_cpu_t48", names)
        self.assertEqual([v.name for v in cg.variants(manifest, 1, 0, False, [16])
                          if v.name.startswith("fdopgo")], [])

    def test_best_offset_is_the_lowest_median_against_clang_pgo(self):
        results = {
            "memops": {"pgo_cpu": {"median_ns": 100}, "fdopgo_cpu": {"median_ns": 130},
                       "fdopgo_cpu_t16": {"median_ns": 90}, "fdopgo_cpu_t32": {"median_ns": 95}},
            "knn": {"pgo_cpu": {"median_ns": 200}, "fdopgo_cpu": {"median_ns": 190},
                    "fdopgo_cpu_t16": {"median_ns": 210}, "fdopgo_cpu_t32": {"median_ns": None}},
        }
        best = cg.best_offsets(results, [16, 32])
        self.assertEqual(best["kernels"]["memops"], {"offset": 16, "ratio": 0.9})
        self.assertEqual(best["kernels"]["knn"], {"offset": 0, "ratio": 0.95})
        self.assertAlmostEqual(best["geomean"], math.sqrt(0.9 * 0.95))


if __name__ == "__main__":
    unittest.main()
