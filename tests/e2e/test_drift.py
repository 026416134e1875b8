#!/usr/bin/env python3
"""Drift end to end (docs/perf.md, "Drift"): a real fdod samples every stage with the
software clock (no PMU needed), sees a two-phase program move from phase A to phase B,
re-profiles it with instrumented stages and writes a profile for B within a bounded number
of stages; no churn before or after.

DriftGain does the same on two_phase_vec.ll, whose phase B gains from its own profile,
and checks in the objects fdod serves (program.lease) that the re-profiled code for B
differs as the mechanism predicts: under phase A's profile phase_b is cold (in
.text.unlikely) and scalar, under B's it is hot and vectorized. Nothing is timed here;
bench/sampling/run_sampling.py measures the gain.

Run through CTest (tests/e2e/CMakeLists.txt) or directly:
  FDO_BUILD_DIR=build python3 tests/e2e/test_drift.py [Drift|DriftGain]"""
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, RpcError, ir, validate  # noqa: E402

ITERATIONS = 30_000_000  # a few tens of milliseconds per stage
WINDOW = 3
MIN_STAGES = 2


class DriftDaemon(unittest.TestCase):
    """A daemon that samples every stage at 2000 Hz and judges drift over WINDOW stages."""

    EXTRA_CONFIG = {}

    def setUp(self):
        self.d = Daemon({
            "sampling.frequency_hz": 2000,
            "policy.time_share_window_stages": WINDOW,
            "policy.time_share_min_samples": 30,
            "policy.time_share_drift_threshold": 0.3,
            "policy.min_stages": MIN_STAGES,
            "exec_timeout_ms": 20000,
            **self.EXTRA_CONFIG,
        }).start()
        self.c = self.d.client()

    def tearDown(self):
        self.c.close()
        self.d.cleanup()

    def stage(self, prog, phase):
        r = self.c.call("execute", {"program": prog, "entry": "run", "args": [phase, ITERATIONS]})
        return r["stage"]

    def named(self, doc, source):
        """The PGO name (profile key) of the function whose source name ends in `source`."""
        names = [k for k, f in doc["functions"].items() if f.get("source_name", k).endswith(source)]
        self.assertEqual(len(names), 1, list(doc["functions"].items()))
        return names[0]


class Drift(DriftDaemon):
    def test_phase_shift_reprofiles_within_bounded_stages(self):
        prog = self.c.call("program.register", {"ir": ir("two_phase.ll"), "name": "two_phase"})[
            "program"]
        first = self.stage(prog, 0)
        samples = first["samples"]
        self.assertIsNotNone(samples, first)
        if samples["clock_event"] is None:
            self.skipTest("no software clock can be sampled here: %s" % samples["events"])
        pk = first["profile_key"]

        # Phase A: instrumented stages write v1, then optimized code runs without churn.
        a = [first] + [self.stage(prog, 0) for _ in range(MIN_STAGES + WINDOW + 2)]
        rewrites = [s["profile_rewritten"] for s in a if s["profile_rewritten"]]
        self.assertEqual([(r["from"], r["to"]) for r in rewrites], [(0, 1)],
                         [s["policy"] for s in a])
        self.assertEqual(a[-1]["mode"], "optimized")
        self.assertIn("below threshold", a[-1]["policy"])
        v1 = self.c.call("profile.get", {"profile_key": pk})["profile"]
        shares = v1["hardware"]["sampling"]["time_share"]
        phase_a = self.named(v1, "phase_a")
        self.assertGreater(shares.get(phase_a, 0), 0.8, shares)
        self.assertGreater(a[-1]["samples"]["functions"].get(phase_a, 0), 0, a[-1]["samples"])

        # Phase B: drift detected within the window, instrumented stages again,
        # then a version made from B's counts, and optimized code for B.
        b = []
        bound = WINDOW + MIN_STAGES + 2
        while len(b) < bound:
            b.append(self.stage(prog, 1))
            if b[-1]["profile_rewritten"] and b[-1]["profile_rewritten"]["from"] >= 2:
                break
        written = [s["profile_rewritten"] for s in b if s["profile_rewritten"]]
        self.assertEqual(len(written), 2, [s["policy"] for s in b])
        self.assertIn("time-share drift", written[0]["reason"])
        self.assertIn("re-profiling", written[0]["reason"])
        self.assertEqual((written[0]["from"], written[0]["to"]), (1, 2))
        self.assertEqual((written[1]["from"], written[1]["to"]), (2, 3))
        self.assertIn("instrumented", [s["mode"] for s in b])
        v3 = self.c.call("profile.get", {"profile_key": pk})["profile"]
        shares = v3["hardware"]["sampling"]["time_share"]
        self.assertGreater(shares.get(self.named(v3, "phase_b"), 0), 0.8, shares)

        # B goes on: optimized under v3, no further rewrite.
        after = [self.stage(prog, 1) for _ in range(WINDOW + 2)]
        self.assertEqual(after[-1]["mode"], "optimized")
        self.assertEqual(after[-1]["profile_version"], 3)
        self.assertFalse([s for s in after if s["profile_rewritten"]], [s["policy"] for s in after])
        hist = self.c.call("profile.history", {"profile_key": pk})
        self.assertEqual([v["version"] for v in hist["versions"]], [1, 2, 3])
        reasons = {v["version"]: v["reason"] for v in hist["versions"]}
        self.assertIn("time-share drift", reasons[2])


def elf_functions(obj):
    """{name: (section name, st_size, section index, st_value)} of the function symbols in a
    little-endian ELF64 relocatable object."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise ValueError("not a little-endian ELF64 object")
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]

    def cstr(table, off):
        start = sections[table][4] + off
        return obj[start:obj.index(b"\0", start)].decode()

    out = {}
    for sec in sections:
        if sec[1] != 2:  # SHT_SYMTAB
            continue
        strtab, entsize = sec[6], sec[9]
        for i in range(sec[5] // entsize):
            name, info, _other, shndx, value, size = struct.unpack_from(
                "<IBBHQQ", obj, sec[4] + i * entsize)
            if info & 0xF == 2 and 0 < shndx < len(sections):  # STT_FUNC, defined
                out[cstr(strtab, name)] = (cstr(shstrndx, sections[shndx][0]), size, shndx, value)
    return out


def disassembler(symbol="phase_b"):
    """The command line that disassembles one function of an object, or None."""
    for tool, only in (("llvm-objdump-16", "--disassemble-symbols="),
                       ("llvm-objdump", "--disassemble-symbols="), ("objdump", "--disassemble=")):
        if shutil.which(tool):
            return [tool, "-d", "--no-show-raw-insn", only + symbol]
    return None


class DriftGain(DriftDaemon):
    """A re-profile for phase B changes phase_b's code the way two_phase_vec.c predicts."""

    # Every stage runs the profile's own build: no guard trial alternating with another
    # build, so the leased object is the one the stages ran.
    EXTRA_CONFIG = {"guard": "off"}

    def lease_object(self, prog):
        """The object fdod serves now for `run`, with the lease's reply; the lease is released."""
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(self.d.socket)
        try:
            params = {"program": prog, "entries": ["run"]}
            c.sendall((json.dumps({"jsonrpc": "2.0", "id": 1, "method": "program.lease",
                                   "params": params}) + "\n").encode())
            buf, fds = b"", []
            while b"\n" not in buf:
                data, got, _flags, _addr = socket.recv_fds(c, 1 << 20, 8)
                fds += got
                if not data:
                    break
                buf += data
            resp = json.loads(buf.split(b"\n", 1)[0])
            if "error" in resp:
                raise RpcError(resp["error"])
            lease = resp["result"]
            self.assertEqual(validate.errors("program.lease", "result", lease), [])
            self.assertEqual(len(fds), 1, lease)
            with os.fdopen(fds[0], "rb") as f:
                obj = f.read()
            self.assertEqual(len(obj), lease["object_size"])
            c.sendall((json.dumps({"jsonrpc": "2.0", "id": 2, "method": "program.release",
                                   "params": {"lease": lease["lease"]}}) + "\n").encode())
            buf = buf.split(b"\n", 1)[1]
            while b"\n" not in buf:
                data = c.recv(1 << 16)
                if not data:
                    break
                buf += data
            self.assertNotIn("error", json.loads(buf.split(b"\n", 1)[0]))
            return lease, obj
        finally:
            c.close()

    def phase_b_code(self, obj):
        """(section of phase_b, its size, its disassembly or None without a disassembler).

        Where value specialization cloned phase_b for the length phase B passes (docs/jit.md),
        the clone is the code B runs: phase_b itself is then the guard in front of it."""
        fns = elf_functions(obj)
        self.assertIn("phase_b", fns, sorted(fns))
        symbol = "phase_b.fdo.spec" if "phase_b.fdo.spec" in fns else "phase_b"
        section, size, _index, _value = fns[symbol]
        tool = disassembler(symbol)
        if tool is None:
            return section, size, None
        with tempfile.NamedTemporaryFile(suffix=".o") as f:
            f.write(obj)
            f.flush()
            text = subprocess.run(tool + [f.name], check=True, capture_output=True,
                                  text=True).stdout
        body = text[text.index("<%s>:" % symbol):]
        self.assertGreater(len(body.splitlines()), 3, text)
        return section, size, body

    def test_reprofiled_code_for_b_is_hot_and_vectorized(self):
        prog = self.c.call("program.register",
                           {"ir": ir("two_phase_vec.ll"), "name": "two_phase_vec"})["program"]
        first = self.stage(prog, 0)
        if first["samples"]["clock_event"] is None:
            self.skipTest("no software clock can be sampled here: %s" % first["samples"]["events"])
        pk = first["profile_key"]
        a = [first] + [self.stage(prog, 0) for _ in range(MIN_STAGES + WINDOW + 2)]
        self.assertEqual(a[-1]["mode"], "optimized", [s["policy"] for s in a])
        self.assertEqual(a[-1]["profile_version"], 1)
        lease_a, obj_a = self.lease_object(prog)
        self.assertEqual((lease_a["mode"], lease_a["profile_version"]), ("optimized", 1))
        # The object the stages of phase A run; phase B's first stage runs it too.
        self.assertEqual(lease_a["storage_key"], a[-1]["storage_key"])
        b_first = self.c.call("execute", {"program": prog, "entry": "run", "args": [1, ITERATIONS]})
        self.assertEqual(b_first["stage"]["storage_key"], lease_a["storage_key"])

        # Phase B: drift, re-profile, a version made from B's counts within the bound.
        b = [b_first["stage"]]
        bound = WINDOW + MIN_STAGES + 2
        while len(b) < bound and not (b[-1]["profile_rewritten"] and
                                      b[-1]["profile_rewritten"]["from"] >= 2):
            b.append(self.stage(prog, 1))
        written = [s["profile_rewritten"] for s in b if s["profile_rewritten"]]
        self.assertEqual([(w["from"], w["to"]) for w in written], [(1, 2), (2, 3)],
                         [s["policy"] for s in b])
        self.assertIn("time-share drift", written[0]["reason"])
        after = [self.stage(prog, 1) for _ in range(WINDOW + 2)]
        self.assertEqual((after[-1]["mode"], after[-1]["profile_version"]), ("optimized", 3),
                         [s["policy"] for s in after])
        self.assertFalse([s for s in after if s["profile_rewritten"]], [s["policy"] for s in after])
        lease_b, obj_b = self.lease_object(prog)
        self.assertEqual((lease_b["mode"], lease_b["profile_version"]), ("optimized", 3))
        self.assertEqual(lease_b["storage_key"], after[-1]["storage_key"])
        last = self.c.call("execute", {"program": prog, "entry": "run", "args": [1, ITERATIONS]})
        self.assertEqual(last["value"], b_first["value"])  # same answer from both codes

        # What each profile said about phase_b.
        v1 = self.c.call("profile.get", {"profile_key": pk, "version": 1})["profile"]
        v3 = self.c.call("profile.get", {"profile_key": pk})["profile"]
        name = self.named(v3, "phase_b")
        self.assertFalse(any(v1["functions"][name]["counts"]), v1["functions"][name])
        self.assertTrue(any(v3["functions"][name]["counts"]), v3["functions"][name])

        # A's code: phase_b cold (placed in .text.unlikely) and scalar; B's: hot and vectorized.
        sec_a, size_a, dis_a = self.phase_b_code(obj_a)
        sec_b, size_b, dis_b = self.phase_b_code(obj_b)
        self.assertTrue(sec_a.startswith(".text.unlikely"), sec_a)
        self.assertFalse(sec_b.startswith(".text.unlikely"), sec_b)
        # The vector loop, its overlap check and scalar remainder make B's code much larger.
        self.assertGreater(size_b, 2 * size_a, (size_a, size_b))
        if dis_a is None or struct.unpack_from("<H", obj_a, 0x12)[0] != 62:
            return  # no disassembler, or not x86-64: the section and size checks stand
        vector = re.compile(r"%[xyz]mm\d+")
        self.assertFalse(vector.search(dis_a), dis_a)
        self.assertTrue(vector.search(dis_b), dis_b)


if __name__ == "__main__":
    # A missing prerequisite reads as skipped (tests/support/fdo_unittest.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fdo_unittest  # noqa: E402

    fdo_unittest.main("drift")
