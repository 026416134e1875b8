#!/usr/bin/env python3
"""fdo_effect_jit --after-instrumented: the optimized compile is offered the
pipeline prefix of an instrumented build of the program (as fdod offers a
program's first optimized compile), takes it, and returns what the compile
from nothing returns; bad combinations exit 2. Skipped (exit 77 under CTest,
the reason in $FDO_SKIP_LOG) without clang's training profile of bst.
Usage: test_jit_driver.py BUILD_DIR"""
import json
import pathlib
import subprocess
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "support"))
import fdo_unittest  # noqa: E402

BUILD = pathlib.Path(sys.argv.pop(1) if len(sys.argv) > 1 else "build").resolve()
TOOL = BUILD / "bench" / "fdo_effect" / "fdo_effect_jit"
IR = BUILD / "bench" / "fdo_effect" / "ir" / "bst.ll"
PROFDATA = BUILD / "bench" / "fdo_effect" / "profiles" / "bst.pgo.profdata"
# bst splits into 2 parts at 100 instructions a part (O2).
COMMON = ["--ir", IR, "--entry", "kernel_run", "--profdata", PROFDATA, "--runs", "1",
          "--warmup", "0"]
SPLIT = ["--threads", "2", "--parts", "4", "--part-instructions", "100"]


def run(*args):
    return subprocess.run([str(TOOL), *map(str, args)], capture_output=True, text=True,
                          timeout=300)


@unittest.skipUnless(PROFDATA.exists(),
                     f"no {PROFDATA} (clang PGO tools missing when configuring)")
class AfterInstrumented(unittest.TestCase):
    def test_takes_the_instrumented_builds_prefix(self):
        fresh = run(*COMMON, *SPLIT)
        self.assertEqual(fresh.returncode, 0, fresh.stderr)
        after = run(*COMMON, *SPLIT, "--after-instrumented")
        self.assertEqual(after.returncode, 0, after.stderr)
        a, b = json.loads(fresh.stdout), json.loads(after.stdout)
        self.assertNotIn("prefix", a)
        self.assertEqual(b["prefix"], "reused")
        self.assertGreaterEqual(b["partitions"], 2)
        self.assertEqual(b["checksum"], a["checksum"])

    def test_needs_a_profile_and_threads(self):
        for args in (["--ir", IR, *SPLIT, "--after-instrumented"],
                     [*COMMON, "--threads", "1", "--after-instrumented"]):
            r = run(*args)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertIn("--after-instrumented needs", r.stderr)


if __name__ == "__main__":
    fdo_unittest.main("bench:fdo_effect:jit_driver")
