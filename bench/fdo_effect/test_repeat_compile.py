#!/usr/bin/env python3
"""fdo_repeat_compile on a kernel that splits into parts: the compiles of one
request agree in one process and across processes (part_objects), --dump
writes nothing when nothing differs, and bad arguments exit 2.
Usage: test_repeat_compile.py BUILD_DIR"""
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest

BUILD = pathlib.Path(sys.argv.pop(1) if len(sys.argv) > 1 else "build").resolve()
TOOL = BUILD / "bench" / "fdo_effect" / "fdo_repeat_compile"
# bst splits into 2 parts at 100 instructions a part (instrumented, O2).
IR = BUILD / "bench" / "fdo_effect" / "ir" / "bst.ll"
SPLIT = ["--threads", "2", "--parts", "4", "--part-instructions", "100"]


def run(*args):
    return subprocess.run([str(TOOL), *map(str, args)], capture_output=True, text=True,
                          timeout=300)


class RepeatCompile(unittest.TestCase):
    def test_parts_agree_within_and_across_processes(self):
        with tempfile.TemporaryDirectory() as dump:
            first = run("--ir", IR, *SPLIT, "--repeat", "2", "--dump", dump)
            self.assertEqual(first.returncode, 0, first.stderr)
            a = json.loads(first.stdout)
            self.assertEqual((a["compiles"], a["identical"], a["differing"]), (2, 2, []))
            self.assertGreaterEqual(a["partitions"], 2)
            self.assertEqual(len(a["part_objects"]), a["partitions"])
            for h in a["part_objects"]:
                self.assertRegex(h, re.compile(r"^[0-9a-f]{64}$"))
            self.assertEqual(len(set(a["part_objects"])), len(a["part_objects"]))
            self.assertEqual(list(pathlib.Path(dump).iterdir()), [])  # nothing differed
        second = run("--ir", IR, *SPLIT, "--repeat", "1")
        self.assertEqual(second.returncode, 0, second.stderr)
        b = json.loads(second.stdout)
        self.assertEqual(b["compiles"], 1)
        self.assertEqual(b["part_objects"], a["part_objects"])

    def test_bad_arguments_exit_2(self):
        for args in (["--repeat", "0"], ["--dump"], ["--bogus"]):
            r = run("--ir", IR, *args)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertIn("fdo_repeat_compile:", r.stderr)


if __name__ == "__main__":
    unittest.main()
