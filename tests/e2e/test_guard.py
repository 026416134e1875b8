#!/usr/bin/env python3
"""The guard end to end (docs/guard.md): a program whose profiled build is
slower than its plain build on the workload it is served (fixtures/pgo_loses.c:
trained on one input distribution, then served another). The guard trials the
profiled build against the plain build on live stages, rejects it, records the
verdict in the profile, and later stages (across a restart too) run the plain
build.

Run through CTest (tests/e2e/CMakeLists.txt) or directly:
  FDO_BUILD_DIR=build python3 tests/e2e/test_guard.py [-v]"""
import os
import subprocess
import sys
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

            # Serve mode 1: the guard alternates plain and profiled until it decides.
            stages, verdict = [], None
            for _ in range(60):
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
            # Stopped early: the loser ran a bounded number of stages.
            self.assertLessEqual(roles.count("candidate"), 12, roles)

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
            hist = c.call("profile.history", {"profile_key": pk})
            self.assertEqual(hist["current_version"], 2)
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


if __name__ == "__main__":
    unittest.main()
