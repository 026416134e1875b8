#!/usr/bin/env python3
"""The guard end to end (docs/guard.md): a program whose profiled build is
slower than its plain build on the workload it is served (fixtures/pgo_loses.c:
trained on one input distribution, then served another). The guard trials the
profiled build against the plain build on live stages, rejects it, records the
verdict in the profile, and later stages (across a restart too) run the plain
build. And one whose profiled build is faster (fixtures/pgo_wins.c: a hot
indirect call the profile promotes and inlines): kept, and served from then on.

Run through CTest (tests/e2e/CMakeLists.txt) or directly:
  FDO_BUILD_DIR=build python3 tests/e2e/test_guard.py [-v]"""
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import BUILD, Daemon, ir  # noqa: E402

TRAIN, SERVE = [0], [1]  # run(mode): 0 = the training distribution, 1 = the served one


class GuardRevertsSlowerProfile(unittest.TestCase):
    def test_slower_profiled_build_is_rejected_and_plain_served(self):
        d = Daemon({"guard.min_stages": 0, "exec_timeout_ms": 20000}).start()
        try:
            c = d.client()
            prog = c.call("program.register", {"ir": ir("pgo_loses.ll"), "name": "pgo_loses"})
            prog = prog["program"]

            # Train: instrumented stages on mode 0 until the profile is written.
            for _ in range(6):
                st = c.call("execute", {"program": prog, "entry": "run", "args": TRAIN})["stage"]
                self.assertEqual(st["variant"]["role"], "current", st["variant"])
                if st["profile_rewritten"]:
                    break
            self.assertTrue(st["profile_rewritten"], st["policy"])
            pk = st["profile_key"]

            # Serve mode 1: the guard runs blocks of plain and profiled stages
            # (I C C I or C I I C) until it decides.
            stages, verdict = [], None
            for _ in range(100):
                r = c.call("execute", {"program": prog, "entry": "run", "args": SERVE})
                st = r["stage"]
                stages.append(st)
                if "rejected" in (st["variant"]["trial"] or ""):
                    verdict = st["variant"]["trial"]
                    break
            roles = [s["variant"]["role"] for s in stages]
            self.assertIsNotNone(verdict, [(s["variant"], s["mode"]) for s in stages])
            self.assertIn("v1 profiled O2 rejected: ", verdict)
            self.assertIn("x slower than plain O2 over ", verdict)
            self.assertIn("candidate", roles)
            self.assertIn("incumbent", roles)
            for s in stages:  # each arm ran what it says
                if s["variant"]["counted"]:
                    want = "optimized" if s["variant"]["role"] == "candidate" else "plain"
                    self.assertEqual(s["mode"], want, s)
            # Decided at one of the first looks: a clearly slower build is
            # rejected after five blocks of four stages (reject_alpha 0.05),
            # not at the end of the budget (64 pairs).
            self.assertGreaterEqual(roles.count("candidate"), 10, roles)
            self.assertLessEqual(roles.count("candidate"), 24, roles)
            counted = [s["variant"]["role"] for s in stages if s["variant"]["counted"]]
            for b in range(0, len(counted) - 3, 4):  # blocks: I C C I or C I I C
                blk = counted[b:b + 4]
                self.assertEqual(blk[0], blk[3], counted)
                self.assertEqual(blk[1], blk[2], counted)
                self.assertNotEqual(blk[0], blk[1], counted)

            # Later stages run the plain build, from the cache.
            for _ in range(3):
                st = c.call("execute", {"program": prog, "entry": "run", "args": SERVE})["stage"]
                self.assertEqual(st["variant"]["role"], "incumbent")
                self.assertEqual(st["variant"]["name"], "plain O2")
                self.assertEqual(st["mode"], "plain")
                self.assertFalse(st["recompiled"])
                self.assertIn("rejected", st["variant"]["reason"])

            # The verdict is in the profile document, with its figures.
            got = c.call("profile.get", {"profile_key": pk})
            guard = got["profile"]["guard"]
            self.assertEqual(guard["incumbent"]["base"], "plain")
            trial = guard["trials"][-1]
            self.assertEqual(trial["verdict"], "rejected")
            self.assertGreater(trial["ratio"], 1.2)
            self.assertEqual(trial["candidate"], "v1 profiled O2")
            # v2 onwards: a checkpoint every guard.checkpoint_pairs (4) pairs
            # before the verdict's, then the verdict.
            pairs = int(re.search(r"over (\d+)\+", verdict).group(1))
            hist = c.call("profile.history", {"profile_key": pk})
            self.assertEqual(hist["current_version"], 2 + (pairs - 1) // 4, hist)
            explain = c.call("cache.explain", {"program": prog})
            self.assertEqual(explain["guard"]["trials"][-1]["verdict"], "rejected")
            metrics = c.call("metrics", {})["text"]
            self.assertIn('fdo_guard_trials_total{verdict="rejected"} 1', metrics)
            self.assertIn("fdo_guard_trials_started_total 1", metrics)
            c.close()

            # A restart keeps the decision: the plain build, from disk.
            self.assertEqual(d.stop(), 0, d.log_text())
            d.start()
            c = d.client()
            st = c.call("execute", {"program": prog, "entry": "run", "args": SERVE})["stage"]
            self.assertEqual(st["variant"]["name"], "plain O2")
            self.assertEqual(st["mode"], "plain")
            self.assertEqual(st["cache"]["outcome"], "disk_hit", st)
            c.close()

            # fdoctl shows the verdict.
            out = subprocess.run([str(BUILD / "fdoctl"), "--socket", d.socket, "profile", "show",
                                  pk], capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("guard: serving plain build", out.stdout)
            self.assertIn("v1 profiled O2", out.stdout)
            self.assertIn("rejected", out.stdout)
        finally:
            d.cleanup()


class GuardKeepsFasterProfile(unittest.TestCase):
    def test_faster_profiled_build_is_kept_and_served(self):
        d = Daemon({"guard.min_stages": 0, "exec_timeout_ms": 20000}).start()
        try:
            c = d.client()
            prog = c.call("program.register", {"ir": ir("pgo_wins.ll"), "name": "pgo_wins"})
            prog = prog["program"]
            pk = train(self, c, prog, [0])["profile_key"]

            stages, verdict = [], None
            for _ in range(100):
                st = c.call("execute", {"program": prog, "entry": "run", "args": [0]})["stage"]
                stages.append(st)
                trial = st["variant"]["trial"] or ""
                if "accepted" in trial or "rejected" in trial or "not taken" in trial:
                    verdict = trial
                    break
            seen = [(s["variant"], s["mode"]) for s in stages]
            self.assertIsNotNone(verdict, seen)
            self.assertIn("v1 profiled O2 accepted: ", verdict, seen)
            self.assertIn("x faster than plain O2 over ", verdict)
            for s in stages:  # each arm ran what it says
                if s["variant"]["counted"]:
                    want = "optimized" if s["variant"]["role"] == "candidate" else "plain"
                    self.assertEqual(s["mode"], want, s)

            # From now on the profiled build is the incumbent, served without a trial.
            for _ in range(3):
                st = c.call("execute", {"program": prog, "entry": "run", "args": [0]})["stage"]
                self.assertEqual(st["variant"]["role"], "incumbent", st["variant"])
                self.assertEqual(st["variant"]["name"], "v1 profiled O2")
                self.assertEqual(st["mode"], "optimized")
                self.assertFalse(st["variant"]["counted"])
            guard = c.call("profile.get", {"profile_key": pk})["profile"]["guard"]
            self.assertEqual(guard["incumbent"]["base"], "profiled")
            trial = guard["trials"][-1]
            self.assertEqual(trial["verdict"], "accepted")
            self.assertLess(trial["ratio"], 1 / 1.2)
            metrics = c.call("metrics", {})["text"]
            self.assertIn('fdo_guard_trials_total{verdict="accepted"} 1', metrics)
            c.close()
        finally:
            d.cleanup()


def train(test, c, prog, args=TRAIN):
    """Instrumented stages on the training input until the profile is written."""
    for _ in range(6):
        st = c.call("execute", {"program": prog, "entry": "run", "args": args})["stage"]
        if st["profile_rewritten"]:
            return st
    test.fail(st["policy"])


def serve(c, prog):
    return c.call("execute", {"program": prog, "entry": "run", "args": SERVE})["stage"]


def two_pairs(test, c, prog):
    """Served stages until two pairs of the trial are counted (no verdict yet:
    the test decides from guard.min_pairs, 10, on). Returns the counted stages."""
    counted = []
    for _ in range(20):
        st = serve(c, prog)
        if st["variant"]["counted"]:
            counted.append(st)
        test.assertNotIn("rejected", st["variant"]["trial"] or "", st["variant"])
        if len(counted) == 4:
            break
    test.assertEqual(len(counted), 4)
    return counted


def wait_for(predicate, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    return None


class PlainBuildAheadOfTrial(unittest.TestCase):
    def test_plain_build_is_compiled_when_the_profile_arrives(self):
        d = Daemon({"guard.min_stages": 3, "exec_timeout_ms": 20000}).start()
        try:
            c = d.client()
            prog = c.call("program.register", {"ir": ir("pgo_loses.ll"), "name": "ahead"})
            prog = prog["program"]
            train(self, c, prog)

            # The rewrite queued the plain build in the background: it is
            # installed without any stage asking for it.
            def plain_installed():
                recs = c.call("cache.explain", {"program": prog})["records"]
                return [r for r in recs
                        if r["outcome"] == "background_compiled" and r["mode"] == "plain"]
            self.assertTrue(wait_for(plain_installed), c.call("cache.explain", {"program": prog}))

            # Stages before the trial (guard.min_stages counts the stage that
            # starts it) serve the profile; the trial's first plain stage
            # finds its build in the cache (the first block may start with the
            # candidate: then the plain arm runs second).
            for _ in range(2):
                st = serve(c, prog)
                self.assertEqual(st["variant"]["role"], "current", st["variant"])
            first = serve(c, prog)
            if first["variant"]["role"] == "candidate":
                first = serve(c, prog)
            self.assertEqual(first["variant"]["role"], "incumbent", first["variant"])
            self.assertEqual(first["variant"]["name"], "plain O2")
            self.assertEqual(first["mode"], "plain")
            self.assertEqual(first["cache"]["outcome"], "memory_hit", first["cache"])
            self.assertFalse(first["recompiled"])
            self.assertTrue(first["variant"]["counted"], first["variant"])
            c.close()
        finally:
            d.cleanup()


class TrialSurvivesRestart(unittest.TestCase):
    def test_restart_continues_the_trial(self):
        d = Daemon({"guard.min_stages": 0, "guard.checkpoint_pairs": 1,
                    "exec_timeout_ms": 20000}).start()
        try:
            c = d.client()
            prog = c.call("program.register", {"ir": ir("pgo_loses.ll"), "name": "restart"})
            prog = prog["program"]
            pk = train(self, c, prog)["profile_key"]
            counted = two_pairs(self, c, prog)  # then stop the daemon
            saved = c.call("profile.get", {"profile_key": pk})["profile"]["guard"]["running"]
            self.assertEqual(len(saved["incumbent_ns"]), 2, saved)
            self.assertEqual(len(saved["candidate_ns"]), 2, saved)
            # The trial compares the worker's process CPU time (guard.clock
            # cpu, the default), not the wall time: the saved samples are the
            # stages' process_cpu_ns, and the id names the clock.
            self.assertTrue(saved["id"].endswith(" cpu"), saved["id"])
            for role, key in (("incumbent", "incumbent_ns"), ("candidate", "candidate_ns")):
                mine = [s["counters"]["process_cpu_ns"] for s in counted
                        if s["variant"]["role"] == role]
                self.assertEqual(saved[key], mine, (role, counted))
            for s in counted:
                cnt = s["counters"]
                self.assertGreaterEqual(cnt["process_cpu_ns"], cnt["thread_cpu_ns"], cnt)
                self.assertGreater(cnt["process_cpu_ns"], 0, cnt)
            c.close()
            self.assertEqual(d.stop(), 0, d.log_text())

            d.start()
            c = d.client()
            st = serve(c, prog)
            self.assertIn("2+2 stages", st["variant"]["reason"], st["variant"])
            verdict, seen = None, [st["variant"]]
            after = 0  # stages counted since the restart
            for _ in range(100):
                after += st["variant"]["counted"]
                if "rejected" in (st["variant"]["trial"] or ""):
                    verdict = st["variant"]["trial"]
                    break
                st = serve(c, prog)
                seen.append(st["variant"])
            self.assertIsNotNone(verdict, seen)
            # The verdict counts the two pairs from before the restart.
            pairs = re.search(r"over (\d+)\+(\d+) stages", verdict)
            self.assertIsNotNone(pairs, verdict)
            self.assertEqual(2 * int(pairs.group(1)), 4 + after, (verdict, seen))
            metrics = c.call("metrics", {})["text"]
            self.assertIn("fdo_guard_trials_resumed_total 1", metrics)
            self.assertIn("fdo_guard_trials_started_total 0", metrics)
            guard = c.call("profile.get", {"profile_key": pk})["profile"]["guard"]
            self.assertIsNone(guard["running"])
            c.close()
        finally:
            d.cleanup()


class TrialSavedAtShutdown(unittest.TestCase):
    def test_clean_stop_saves_the_pairs_since_the_last_checkpoint(self):
        # checkpoint_pairs far above the trial's length: only the shutdown saves.
        d = Daemon({"guard.min_stages": 0, "guard.checkpoint_pairs": 100,
                    "exec_timeout_ms": 20000}).start()
        try:
            c = d.client()
            prog = c.call("program.register", {"ir": ir("pgo_loses.ll"), "name": "shutdown"})
            prog = prog["program"]
            pk = train(self, c, prog)["profile_key"]
            two_pairs(self, c, prog)
            before = c.call("profile.get", {"profile_key": pk})["profile"].get("guard") or {}
            self.assertIsNone(before.get("running"), before)  # no periodic save happened
            c.close()
            self.assertEqual(d.stop(), 0, d.log_text())  # SIGTERM
            self.assertIn("running trial saved at shutdown", d.log_text())

            d.start()
            c = d.client()
            saved = c.call("profile.get", {"profile_key": pk})["profile"]["guard"]["running"]
            self.assertEqual(len(saved["incumbent_ns"]), 2, saved)
            self.assertEqual(len(saved["candidate_ns"]), 2, saved)
            st = serve(c, prog)
            self.assertIn("2+2 stages", st["variant"]["reason"], st["variant"])
            metrics = c.call("metrics", {})["text"]
            self.assertIn("fdo_guard_trials_resumed_total 1", metrics)
            self.assertIn("fdo_guard_trials_started_total 0", metrics)
            c.close()
        finally:
            d.cleanup()


class KnobTuningManyStages(unittest.TestCase):
    def test_knob_variants_are_trialled_and_the_budget_respected(self):
        d = Daemon({"guard.min_stages": 0, "guard.tune_min_stages": 8,
                    "guard.tune_max_variants": 2, "guard.max_pairs": 8,
                    "exec_timeout_ms": 20000}).start()
        try:
            c = d.client()
            prog = c.call("program.register", {"ir": ir("pgo_loses.ll"), "name": "tuning"})
            prog = prog["program"]
            pk = train(self, c, prog)["profile_key"]
            names = set()
            guard = None
            for _ in range(120):
                st = serve(c, prog)
                names.add((st["variant"]["role"], st["variant"]["name"]))
                if st["variant"]["counted"]:  # each arm ran what it says
                    self.assertEqual(st["mode"], "plain" if st["variant"]["name"].startswith(
                        "plain") else "optimized", st)
                guard = c.call("profile.get", {"profile_key": pk})["profile"].get("guard")
                if guard and len(guard["trials"]) == 3:
                    break
            trials = guard["trials"]
            self.assertEqual(len(trials), 3, trials)
            # The profile trial, then two knob variants of the incumbent.
            self.assertEqual(trials[0]["candidate"], "v1 profiled O2")
            self.assertEqual(trials[1]["candidate"], "plain O3")
            self.assertEqual(trials[1]["incumbent"], "plain O2")
            # O3 is step 0 and the text offset 32 step 1 (docs/guard.md, "Knob tuning"):
            # from the plain incumbent, the profile's build at that offset.
            self.assertRegex(trials[2]["candidate"], r"^v\d+ profiled O[23] text\+32$")
            self.assertEqual(guard["tuning_step"], 2)
            self.assertIn(("candidate", "plain O3"), names)
            for t in trials[1:]:
                self.assertLessEqual(t["candidate_stages"], 8)
            # The budget is spent: every later stage runs the incumbent, counted by no trial.
            served = describe_incumbent(guard["incumbent"])
            for _ in range(4):
                st = serve(c, prog)
                self.assertEqual(st["variant"]["role"], "incumbent", st["variant"])
                self.assertEqual(st["variant"]["name"], served)
                self.assertFalse(st["variant"]["counted"])
            metrics = c.call("metrics", {})["text"]
            self.assertIn("fdo_guard_trials_started_total 3", metrics)
            c.close()
        finally:
            d.cleanup()


def describe_incumbent(inc):
    """The incumbent's name as the guard gives it (plain builds carry no version)."""
    k = inc["knobs"] or {}
    name = inc["base"] + " O" + str(k.get("opt_level", 2))
    if k.get("unroll") is False:
        name += " -unroll"
    if k.get("vectorize") is False:
        name += " -vectorize"
    if k.get("inline_threshold") is not None:
        name += " inline=" + str(k["inline_threshold"])
    if k.get("text_offset"):
        name += " text+" + str(k["text_offset"])
    if inc["base"] == "profiled":
        name = "v" + str(inc["version"]) + " " + name
    return name


if __name__ == "__main__":
    # A missing prerequisite reads as skipped (tests/support/fdo_unittest.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fdo_unittest  # noqa: E402

    fdo_unittest.main("guard")
