#!/usr/bin/env python3
"""`fdoctl profile annotate` end to end: a real fdod runs a C program (turned
into IR as a front end would) through instrumented and optimized stages; the
annotated IR must carry the counts those stages produced: the loop body runs
trip count x calls, the if-branch ceil(n/3) x calls, a static helper's entry
count the else-branch's count, in source names. Then the same offline
(--state-dir, daemon stopped), and bad input. A second program with a long hot
loop runs through sampled stages (the software clock, no PMU needed): its loop
blocks carry the samples (docs/fdoctl.md, "profile annotate").

Run through CTest or directly:  FDO_BUILD_DIR=build python3 tests/tools/fdoctl_annotate_e2e.py"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("FDO_BUILD_DIR", ROOT / "build")).resolve()
FDOCTL = BUILD / "fdoctl"
CLANG = os.environ.get("CLANG16") or shutil.which("clang-16") or "clang-16"
IR_FLAGS = ["-O2", "-Xclang", "-disable-llvm-optzns", "-fno-discard-value-names"]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "schemas"))
import harness  # noqa: E402
import validate  # noqa: E402

N = 37  # the loop's trip count per call

SOURCE = r"""
__attribute__((noinline)) static long step(long i) { return (i * 7) ^ (i >> 2); }

long work(long n) {
  long s = 0;
  for (long i = 0; i < n; i++) {
    if (i % 3 == 0)
      s += i;
    else
      s -= step(i);
  }
  return s;
}
"""

SPIN_N = 20_000_000  # tens of milliseconds per stage: enough clock samples at 2 kHz

SPIN_SOURCE = r"""
long spin(long n) {
  long s = 0;
  for (long i = 0; i < n; i++)
    s = s * 31 + (i ^ (s >> 3));
  return s;
}
"""


class Annotate(unittest.TestCase):
    daemon = None

    @classmethod
    def setUpClass(cls):
        if not FDOCTL.exists():
            raise unittest.SkipTest(f"{FDOCTL} is not built")
        cls.tmp = tempfile.mkdtemp(prefix="fdoctl-annotate-")
        src = pathlib.Path(cls.tmp, "loops.c")
        src.write_text(SOURCE)
        cls.ir = pathlib.Path(cls.tmp, "loops.ll")
        subprocess.run([CLANG, "-S", "-emit-llvm", *IR_FLAGS, "-o", str(cls.ir), str(src)], check=True)
        spin = pathlib.Path(cls.tmp, "spin.c")
        spin.write_text(SPIN_SOURCE)
        cls.spin_ir = pathlib.Path(cls.tmp, "spin.ll")
        subprocess.run([CLANG, "-S", "-emit-llvm", *IR_FLAGS, "-o", str(cls.spin_ir), str(spin)],
                       check=True)
        cls.daemon = harness.Daemon({"sampling.frequency_hz": 2000,
                                     "exec_timeout_ms": 20000}).start()

    @classmethod
    def tearDownClass(cls):
        if cls.daemon:
            cls.daemon.cleanup()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def fdoctl(self, *args, expect=0, offline=False):
        where = (["--state-dir", self.daemon.state_dir, "--offline"] if offline
                 else ["--socket", self.daemon.socket])
        r = subprocess.run([str(FDOCTL), *where, *map(str, args)], capture_output=True, text=True,
                           timeout=120)
        if expect is not None:
            self.assertEqual(r.returncode, expect, f"fdoctl {args}\nstdout:\n{r.stdout[-3000:]}\n"
                                                   f"stderr:\n{r.stderr[-3000:]}")
        return r

    def json_of(self, *args, **kw):
        return json.loads(self.fdoctl("--json", *args, **kw).stdout)

    def check_counts(self, doc, calls):
        fns = {f["name"]: f for f in doc["functions"]}
        self.assertEqual(set(fns), {"work", "step"}, "source names, not canonical ones")
        work, step = fns["work"], fns["step"]
        self.assertEqual(work["entry_count"], calls)
        counts = [b["count"] for b in work["blocks"]]
        self.assertNotIn(None, counts, work)
        taken = (N + 2) // 3  # i % 3 == 0 for i in 0..N-1
        # The loop body runs N times a call, the if-branch `taken` times, the
        # else-branch (the call to step) the rest; the entry block once.
        self.assertEqual(work["blocks"][0]["count"], calls)
        self.assertIn(N * calls, counts, work)
        self.assertIn(taken * calls, counts, work)
        self.assertIn((N - taken) * calls, counts, work)
        body = next(b for b in work["blocks"] if b["count"] == N * calls)
        self.assertAlmostEqual(body["per_call"], float(N))
        # The block calling step names it by its source name, and step's own
        # entry count is that block's count.
        caller = [b for b in work["blocks"] if any("call" in l and "@step(" in l for l in b["lines"])]
        self.assertEqual(len(caller), 1, work)
        self.assertEqual(caller[0]["count"], (N - taken) * calls)
        self.assertEqual(step["entry_count"], (N - taken) * calls)
        self.assertTrue(step["source_name"].endswith("step"), step)
        self.assertTrue(step["pgo_name"] != step["source_name"], "step is a renamed local")
        self.assertFalse(work["approximate"])
        self.assertIn("@work(", work["signature"])

    def test_1_counts_through_the_daemon_and_offline(self):
        run = self.json_of("run", self.ir, "--entry", "work", "--arg", N, "--stages", 4)
        modes = [s["stage"]["mode"] for s in run["stages"]]
        calls = modes.count("instrumented")
        self.assertGreaterEqual(calls, 2, modes)
        self.assertIn("optimized", modes, "the profile was rewritten and used")
        ik, pk = run["program"]["program"], run["program"]["profile_key"]

        for target in ("loops", ik, ik[:12], pk, pk[:12]):
            doc = self.json_of("profile", "annotate", target)
            self.assertEqual(doc["program"], ik)
            self.assertEqual(doc["profile_key"], pk)
            self.check_counts(doc, calls)

        # The wire method behind it, against its schema.
        c = self.daemon.client()
        src = c.call("program.source", {"program": ik})
        c.close()
        self.assertEqual(validate.errors("program.source", "result", src), [])
        self.assertEqual(src["format"], "text")

        # --function and the text rendering: each block's count after its label.
        text = self.fdoctl("profile", "annotate", "loops", "--function", "work").stdout
        self.assertIn(f"; function work: entry count {calls}", text)
        self.assertRegex(text, rf"\n\S+:\s+; count {N * calls}, {N}\.00 per call\n")
        self.assertRegex(text, r"call (fastcc )?i64 @step\(")
        self.assertNotIn("define internal i64 @step", text, "--function work shows work only")
        self.assertNotIn("fdo.local", text)
        one = self.json_of("profile", "annotate", ik, "--function", "step")
        self.assertEqual([f["name"] for f in one["functions"]], ["step"])

        # Offline, from the state dir with the daemon stopped: the same numbers.
        self.daemon.stop()
        try:
            doc = self.json_of("profile", "annotate", ik, offline=True)
            self.check_counts(doc, calls)
        finally:
            self.daemon.start()

    def test_2_bad_input_is_a_clear_error(self):
        r = self.fdoctl("profile", "annotate", "no-such-program", expect=None)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no program or profile 'no-such-program'", r.stderr)
        r = self.fdoctl("profile", "annotate", "loops", "--function", "nope", expect=None)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no function 'nope'", r.stderr)
        # A program that has not run has no profile yet.
        fresh = pathlib.Path(self.tmp, "fresh.ll")
        fresh.write_text(self.ir.read_text().replace("@work(", "@work2(").replace("loops.c", "fresh.c"))
        c = self.daemon.client()
        reg = c.call("program.register", {"ir": fresh.read_text(), "name": "fresh.ll"})
        c.close()
        r = self.fdoctl("profile", "annotate", reg["program"], expect=None)
        self.assertNotEqual(r.returncode, 0)
        self.assertRegex(r.stderr, "no profile|holds no counts")
        # Nothing was lost: the first program still annotates.
        self.assertTrue(self.json_of("profile", "annotate", "loops")["functions"])

    def test_3_sampled_stages_put_their_samples_on_the_hot_loop(self):
        run = self.json_of("run", self.spin_ir, "--entry", "spin", "--arg", SPIN_N, "--stages", 4)
        modes = [s["stage"]["mode"] for s in run["stages"]]
        self.assertIn("optimized", modes, "the profile was rewritten and used")
        ik = run["program"]["program"]
        # The daemon records per-block samples when it writes a version: here
        # v1, made from the sampled instrumented stages (the block numbering
        # is the canonical IR's in every mode, so they count for the same blocks).
        doc = self.json_of("profile", "annotate", ik, "--function", "spin")
        if doc["sampling"] is None:
            samples = [s["stage"].get("samples") for s in run["stages"]]
            self.skipTest(f"no clock samples reached the profile on this host: {samples}")
        self.assertEqual(doc["sampling"]["event"], "cpu-clock")
        total = doc["sampling"]["samples"]
        self.assertGreater(total, 0, doc["sampling"])
        (spin,) = doc["functions"]
        calls = spin["entry_count"]
        self.assertGreaterEqual(calls, 1)
        by_label = {b["label"]: b for b in spin["blocks"]}
        # The loop's blocks run SPIN_N times a call; they hold nearly all the
        # time, so nearly all of the function's clock samples.
        loop = [b for b in spin["blocks"] if b["count"] is not None and b["count"] >= SPIN_N * calls]
        self.assertTrue(loop, by_label)
        in_loop = sum(b["samples"].get("cpu-clock", 0) for b in loop)
        in_fn = sum(b["samples"].get("cpu-clock", 0) for b in spin["blocks"])
        self.assertGreater(in_loop, 0, spin["blocks"])
        self.assertGreaterEqual(in_loop, 0.8 * in_fn, spin["blocks"])
        hottest = max(loop, key=lambda b: b["samples"].get("cpu-clock", 0))
        self.assertAlmostEqual(hottest["sample_share"], hottest["samples"]["cpu-clock"] / total)
        self.assertGreater(hottest["sample_share"], 0.0)
        # The blocks name the canonical blocks their samples came from, each once.
        shown = [i for b in spin["blocks"] for i in b["canonical_blocks"]]
        self.assertEqual(len(shown), len(set(shown)), spin["blocks"])
        # The text: the loop block's line carries its count and its share.
        text = self.fdoctl("profile", "annotate", ik, "--function", "spin").stdout
        self.assertIn("samples in program code", text)
        share = f"{hottest['sample_share'] * 100:.1f}% of samples"
        self.assertRegex(text, rf"\n{re.escape(hottest['label'])}:\s+; count {hottest['count']}, "
                               rf"[0-9.]+ per call, {re.escape(share)}")


if __name__ == "__main__":
    # A missing prerequisite reads as skipped (tests/support/fdo_unittest.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fdo_unittest  # noqa: E402

    fdo_unittest.main("fdoctl annotate")
