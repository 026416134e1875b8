#!/usr/bin/env python3
"""The Python package `fdo` (python/): installed offline with pip into a
temporary directory, then a round trip against a real fdod: handshake,
register, execute with buffers from array/memoryview/bytes (numpy when
present), profile queries after the profile is rewritten, error mapping, a
refused protocol version, a client shared by threads."""
import array
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import harness  # noqa: E402
sys.path.insert(0, str(ROOT / "schemas"))
import validate  # noqa: E402

SITE = tempfile.mkdtemp(prefix="fdo-python-site-")

KERNELS = """
define i64 @sum(ptr %xs, i64 %n) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %acc = phi i64 [ 0, %entry ], [ %acc.next, %loop ]
  %p = getelementptr inbounds i64, ptr %xs, i64 %i
  %x = load i64, ptr %p
  %acc.next = add i64 %acc, %x
  %i.next = add i64 %i, 1
  %more = icmp slt i64 %i.next, %n
  br i1 %more, label %loop, label %done
done:
  %s = phi i64 [ 0, %entry ], [ %acc.next, %loop ]
  ret i64 %s
}

define void @scale(ptr %xs, i64 %n, double %k) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %p = getelementptr inbounds double, ptr %xs, i64 %i
  %x = load double, ptr %p
  %y = fmul double %x, %k
  store double %y, ptr %p
  %i.next = add i64 %i, 1
  %more = icmp slt i64 %i.next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}

define i32 @bytesum(ptr %b, i32 %n) {
entry:
  %empty = icmp sle i32 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %i.next, %loop ]
  %acc = phi i32 [ 0, %entry ], [ %acc.next, %loop ]
  %p = getelementptr inbounds i8, ptr %b, i32 %i
  %c = load i8, ptr %p
  %w = zext i8 %c to i32
  %acc.next = add i32 %acc, %w
  %i.next = add i32 %i, 1
  %more = icmp slt i32 %i.next, %n
  br i1 %more, label %loop, label %done
done:
  %s = phi i32 [ 0, %entry ], [ %acc.next, %loop ]
  ret i32 %s
}
"""


def setUpModule():
    # The package installs offline, without build isolation (Debian 12's pip
    # and setuptools), into a private directory this test imports from.
    # From a copy: pip builds in the source directory it is given.
    src = os.path.join(SITE, "src")
    shutil.copytree(ROOT / "python", src, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                        "__pycache__"))
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                        "--no-index", "--no-deps", "--target", os.path.join(SITE, "lib"), src],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"pip install ./python failed:\n{p.stdout}\n{p.stderr}")
    sys.path.insert(0, os.path.join(SITE, "lib"))
    global fdo
    import fdo  # noqa: F401
    assert pathlib.Path(fdo.__file__).is_relative_to(os.path.join(SITE, "lib")), fdo.__file__


def tearDownModule():
    shutil.rmtree(SITE, ignore_errors=True)


class GpuKernels(unittest.TestCase):
    """execute_gpu against fdod with the fake NVIDIA driver (tests/gpu/fake_cuda.cpp)."""

    FAKE = harness.BUILD / "tests" / "gpu" / "libfdo_fake_cuda.so"

    @classmethod
    def setUpClass(cls):
        if not cls.FAKE.exists():
            raise unittest.SkipTest(f"the fake driver {cls.FAKE} is not built")
        cls.daemon = harness.Daemon({"gpu": "on", "gpu_driver": str(cls.FAKE)},
                                    prefix="fdo-python-gpu-").start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.cleanup()

    def test_a_kernel_with_a_given_and_a_tuned_launch(self):
        ir = (ROOT / "tests" / "jit" / "fixtures" / "gpu_kernels.ll").read_text()
        with fdo.connect(self.daemon.socket, client_name="python-gpu") as c:
            prog = c.register(ir)
            n = 256
            x = array.array("f", [1.0] * n)
            y = array.array("f", [0.5] * n)
            r = c.execute_gpu(prog, "saxpy", [n, 2.0, x, y], grid=2, block=128,
                              return_buffers=True, repeats=2)
            self.assertEqual(list(r.buffers[1]), [4.5] * n)  # two launches: y += 2x twice
            self.assertEqual(r.buffers[1].typecode, "f")
            self.assertEqual(len(r.stage["gpu"]["kernel_ms"]), 2)
            self.assertEqual(r.stage["gpu"]["launch"]["block"], [128, 1, 1])
            t = c.execute_gpu(prog, "saxpy", [n, 2.0, x, y], tune_items=n, return_buffers=True)
            self.assertEqual(t.stage["gpu"]["launch"]["source"], "tuned now")
            self.assertEqual(list(t.buffers[1]), [2.5] * n)
            with self.assertRaises(ValueError):
                c.execute_gpu(prog, "saxpy", [n, 2.0, x, y], grid=2)
            with self.assertRaises(fdo.FdoError) as e:
                c.execute_gpu(prog, "saxpy", [n, 2.0, x, y], grid=1, block=4096)
            self.assertEqual(e.exception.errc, "invalid_argument")


class RoundTrip(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = harness.Daemon(prefix="fdo-python-").start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.cleanup()

    def connect(self):
        return fdo.connect(self.daemon.socket, client_name="python-test")

    def test_handshake_register_execute_profile(self):
        with self.connect() as c:
            self.assertEqual(c.protocol_minor, fdo.PROTOCOL_MINOR)
            self.assertIn("execute", c.capabilities)
            self.assertTrue(c.server_version)
            # hello's params and result as the schema describes them.
            hello = {"client": "python-test", "protocol": {"major": fdo.PROTOCOL_MAJOR,
                                                           "minor": fdo.PROTOCOL_MINOR}}
            reply = c.call("hello", hello)
            self.assertEqual(validate.errors("hello", "params", hello), [])
            self.assertEqual(validate.errors("hello", "result", reply), [])
            self.assertEqual(reply["server_version"], c.server_version)
            prog = c.register(KERNELS, name="kernels")
            self.assertEqual(len(prog.id), 64)
            self.assertEqual({e["name"] for e in prog.entries}, {"sum", "scale", "bytesum"})

            xs = array.array("q", range(1, 1001))
            modes = []
            for _ in range(4):
                r = c.execute(prog, "sum", [xs, len(xs)])
                self.assertEqual(r.value, 500500)
                modes.append(r.stage["mode"])
            self.assertEqual(modes[0], "instrumented")
            self.assertEqual(modes[-1], "optimized")

            # Buffers back: array.array of the same element type, and a
            # memoryview's doubles.
            ds = array.array("d", [1.0, 2.5, -4.0])
            r = c.execute(prog.id, "scale", [memoryview(ds), len(ds), 2.0], return_buffers=True)
            self.assertIsNone(r.value)
            self.assertEqual(list(r.buffers[0]), [2.0, 5.0, -8.0])
            self.assertEqual(r.buffers[0].typecode, "d")
            # bytes are u8.
            r = c.execute(prog.id, "bytesum", [b"\x01\x02\xff", 3])
            self.assertEqual(r.value, 258)

            hist = c.profile_history(prog.profile_key)
            self.assertGreaterEqual(hist["current_version"], 1)
            cur = c.profile(prog.profile_key)
            self.assertEqual(cur["version"], hist["current_version"])
            self.assertIn("sum", cur["profile"]["functions"])
            first = c.profile(prog.profile_key, version=1)
            self.assertEqual(first["version"], 1)

    def test_large_buffers_go_as_memfds(self):
        # fdod takes request lines of at most 256 KiB here: a 1.6 MB buffer
        # reaches it only as a memfd (base64 would make a 2.1 MB line).
        d = harness.Daemon(prefix="fdo-python-memfd-",
                           config={"max_request_bytes": 256 << 10}).start()
        try:
            with fdo.connect(d.socket, client_name="python-test") as c:
                self.assertIn("buffers.memfd", c.capabilities)
                prog = c.register(KERNELS, name="kernels")
                xs = array.array("q", range(200_000))
                self.assertEqual(c.execute(prog, "sum", [xs, len(xs)]).value, sum(xs))
                ds = array.array("d", [0.5] * 100_000)
                r = c.execute(prog, "scale", [ds, len(ds), 4.0], return_buffers=True)
                self.assertEqual(set(r.buffers[0]), {2.0})
                # Small ones still go inline.
                self.assertEqual(c.execute(prog, "sum", [array.array("q", [4, 5]), 2]).value, 9)
        finally:
            d.cleanup()

    def test_numpy_buffers_when_present(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest("numpy is not installed")
        with self.connect() as c:
            prog = c.register(KERNELS)
            r = c.execute(prog, "scale", [np.array([1.0, 3.0]), 2, 0.5], return_buffers=True)
            self.assertIsInstance(r.buffers[0], np.ndarray)
            self.assertEqual(r.buffers[0].tolist(), [0.5, 1.5])

    def test_errors_carry_code_message_and_data(self):
        with self.connect() as c:
            with self.assertRaises(fdo.RpcError) as bad_ir:
                c.register("define i32 @f( {")
            self.assertEqual(bad_ir.exception.errc, "parse")
            self.assertIsInstance(bad_ir.exception.code, int)
            self.assertLess(bad_ir.exception.code, 0)
            prog = c.register(KERNELS)
            with self.assertRaises(fdo.RpcError) as no_entry:
                c.execute(prog, "nope", [])
            self.assertIn("nope", no_entry.exception.message)
            self.assertEqual(no_entry.exception.data.get("code"), no_entry.exception.errc)
            with self.assertRaises(fdo.RpcError) as bad_params:
                c.call("profile.get", {"profile_key": "short"})
            self.assertEqual(bad_params.exception.code, -32602)
            # Bad input on this side: nothing is sent and the connection lives.
            with self.assertRaises(TypeError):
                c.execute(prog, "sum", ["seven", 1])
            with self.assertRaises(ValueError):
                c.register("")
            self.assertEqual(c.call("health")["status"], "ok")
        with self.assertRaises(fdo.TransportError) as gone:
            fdo.connect(os.path.join(self.daemon.tmp, "none.sock"))
        self.assertEqual(gone.exception.errc, "unavailable")

    def test_another_major_protocol_version_is_refused(self):
        from fdo import client as fdo_client
        saved = fdo_client.PROTOCOL_MAJOR
        fdo_client.PROTOCOL_MAJOR = saved + 1
        try:
            with self.assertRaises(fdo.RpcError) as e:
                self.connect()
        finally:
            fdo_client.PROTOCOL_MAJOR = saved
        self.assertEqual(e.exception.errc, "unsupported")
        self.assertIn("protocol version mismatch", e.exception.message)
        self.assertIn(f"protocol {saved + 1}.0", e.exception.message)
        self.assertIn(f"speaks protocol {saved}.", e.exception.message)

    def test_a_client_shared_by_threads(self):
        with self.connect() as c:
            prog = c.register(KERNELS)
            errors, results = [], []

            def worker(k):
                try:
                    for i in range(5):
                        xs = array.array("q", [k, i])
                        results.append((k + i, c.execute(prog, "sum", [xs, 2]).value))
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(e)
            threads = [threading.Thread(target=worker, args=(k * 100,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])
            self.assertEqual(len(results), 20)
            for want, got in results:
                self.assertEqual(want, got)


if __name__ == "__main__":
    # A missing prerequisite reads as skipped (tests/support/fdo_unittest.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fdo_unittest  # noqa: E402

    fdo_unittest.main("python")
