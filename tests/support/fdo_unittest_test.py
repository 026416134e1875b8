"""fdo_unittest.py and skip.sh checked on their own: a suite that skips exits
$FDO_SKIP_RETURN_CODE (77 under CTest) and records its reason in $FDO_SKIP_LOG,
0 run by hand, 1 when anything fails (a skip never hides a failure); a shell
test's fdo_skip does the same."""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

SUITE = textwrap.dedent('''
    import os, sys, unittest
    sys.path.insert(0, {here!r})
    import fdo_unittest

    class T(unittest.TestCase):
        def test_runs(self):
            self.assertEqual(os.environ.get("MODE", "") in ("", "skip", "fail"), True)

        def test_needs_something(self):
            if os.environ.get("MODE") in ("skip", "fail"):
                self.skipTest("no such server here")

        def test_may_fail(self):
            self.assertNotEqual(os.environ.get("MODE"), "fail")

    fdo_unittest.main("selftest")
''')


class Runner(unittest.TestCase):
    def run_suite(self, mode, skip_code="77"):
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "suite.py")
            with open(script, "w") as f:
                f.write(SUITE.format(here=HERE))
            log = os.path.join(tmp, "skipped.txt")
            env = dict(os.environ, MODE=mode, FDO_SKIP_LOG=log)
            env.pop("FDO_SKIP_RETURN_CODE", None)
            if skip_code is not None:
                env["FDO_SKIP_RETURN_CODE"] = skip_code
            p = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True)
            logged = open(log).read() if os.path.exists(log) else ""
            return p.returncode, p.stdout + p.stderr, logged

    def test_all_pass(self):
        rc, out, logged = self.run_suite("")
        self.assertEqual(rc, 0, out)
        self.assertEqual(logged, "")
        self.assertIn("selftest: 3 passed, 0 failed, 0 skipped", out)

    def test_a_skip_reads_as_skipped_with_its_reason(self):
        rc, out, logged = self.run_suite("skip")
        self.assertEqual(rc, 77, out)
        self.assertIn("SKIPPED: __main__.T.test_needs_something: no such server here", out)
        self.assertEqual(logged, "__main__.T.test_needs_something: no such server here\n")

    def test_by_hand_a_skip_exits_zero(self):
        rc, out, _ = self.run_suite("skip", skip_code=None)
        self.assertEqual(rc, 0, out)
        self.assertIn("1 skipped", out)

    def test_a_failure_beside_a_skip_fails(self):
        rc, out, logged = self.run_suite("fail")
        self.assertEqual(rc, 1, out)
        self.assertIn("1 failed", out)
        self.assertIn("no such server here", logged)

    def test_shell_fdo_skip(self):
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "skipped.txt")
            p = subprocess.run(
                ["bash", "-c", f'. "{HERE}/skip.sh"; fdo_skip "a shell test" "tool X is missing"; '
                 'echo "not reached"'],
                env=dict(os.environ, FDO_SKIP_LOG=log), capture_output=True, text=True)
            self.assertEqual(p.returncode, 77)
            self.assertIn("SKIPPED: a shell test: tool X is missing", p.stdout)
            self.assertNotIn("not reached", p.stdout)
            self.assertEqual(open(log).read(), "a shell test: tool X is missing\n")


if __name__ == "__main__":
    unittest.main(verbosity=2)
