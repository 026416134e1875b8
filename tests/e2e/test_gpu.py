"""GPU programs through a real fdod (docs/gpu.md), on hosts without a GPU: the
daemon loads the fake NVIDIA driver (tests/gpu/fake_cuda.cpp, the driver API
over host memory running the test kernels as host functions) exactly as it
loads libcuda.so.1, so the whole path runs — the probe in a sandboxed GPU
worker, the compile to PTX, the cache and its keys, the launch, the copies
and timing, tuning, every error class and the replacement of a worker whose
GPU context a fault lost. bench/gpu/run_check.sh runs the real thing on a GPU."""
import os
import sys
import time
import unittest
from pathlib import Path

from harness import BUILD, ROOT, Daemon, RpcError

FAKE = BUILD / "tests" / "gpu" / "libfdo_fake_cuda.so"
KERNELS = (ROOT / "tests" / "jit" / "fixtures" / "gpu_kernels.ll").read_text()
FAULTS = (ROOT / "tests" / "e2e" / "fixtures" / "gpu_faults.ll").read_text()


def fake_env(sm=90, driver=12040, free_bytes=64 << 20):
    os.environ["FDO_FAKE_CUDA_SM"] = str(sm)
    os.environ["FDO_FAKE_CUDA_DRIVER"] = str(driver)
    os.environ["FDO_FAKE_CUDA_FREE_BYTES"] = str(free_bytes)


def gpu_daemon(state_dir=None, **extra):
    config = {"gpu": "on", "gpu_driver": str(FAKE), "gpu_kernel_timeout_ms": 400}
    config.update(extra)
    return Daemon(config, state_dir=state_dir, prefix="fdo-gpu-")


def saxpy(c, program, x, y, a=2.0, **launch):
    params = {"program": program, "entry": "saxpy",
              "args": [len(x), a, {"buffer": 0}, {"buffer": 1}],
              "buffers": [{"type": "f32", "data": x}, {"type": "f32", "data": y}],
              "return_buffers": True}
    params.update(launch or {"grid": 4, "block": 128})
    return c.call("execute", params)


def close(a, b, tol=1e-4):
    return abs(a - b) <= tol * max(1.0, abs(b))


class Gpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not FAKE.exists():
            raise unittest.SkipTest(f"the fake driver {FAKE} is not built")
        fake_env(free_bytes=8 << 20)
        cls.d = gpu_daemon().start()
        cls.c = cls.d.client()
        cls.kernels = cls.c.call("program.register", {"ir": KERNELS})["program"]
        cls.faults = cls.c.call("program.register", {"ir": FAULTS})["program"]

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.d.cleanup()

    def test_01_capabilities_name_the_gpu_and_the_identity_embeds_it(self):
        caps = self.c.call("capabilities")
        gpu = caps["gpu"]
        self.assertTrue(gpu["available"], gpu)
        self.assertEqual(gpu["arch"], "sm_90")
        self.assertEqual(gpu["driver_version"], 12040)
        self.assertEqual(gpu["gpus"][0]["name"], "Fake GPU 0")
        self.assertIn("cpu=sm_90", gpu["identity"])
        self.assertIn("driver=12040", gpu["identity"])
        self.assertIn(";gpu=" + gpu["identity"], caps["compiler_identity"])
        programs = {p["program"]: p for p in self.c.call("program.list")["programs"]}
        self.assertIn(self.kernels, programs)

    def test_02_three_kernels_equal_their_host_references(self):
        n = 1000
        x = [float(i % 97) / 7 for i in range(n)]
        y = [float(i % 13) for i in range(n)]
        r = saxpy(self.c, self.kernels, x, y, 2.5)
        got = r["buffers"][1]["data"]
        self.assertTrue(all(close(g, 2.5 * a + b) for g, a, b in zip(got, x, y)))
        st = r["stage"]
        self.assertEqual(st["target"], "nvptx")
        self.assertEqual(st["gpu"]["arch"], "sm_90")
        self.assertEqual(st["gpu"]["launch"], {"grid": [4, 1, 1], "block": [128, 1, 1],
                                               "source": "given"})
        self.assertEqual(len(st["gpu"]["kernel_ms"]), 1)

        blocks = 8
        r = self.c.call("execute", {
            "program": self.kernels, "entry": "reduce_sum", "grid": blocks, "block": 64,
            "args": [n, {"buffer": 0}, {"buffer": 1}],
            "buffers": [{"type": "f32", "data": x}, {"type": "f32", "length": blocks}],
            "return_buffers": True})
        self.assertTrue(close(sum(r["buffers"][1]["data"]), sum(x)))

        m = 24
        a = [float((i * 7) % 11 - 5) for i in range(m * m)]
        b = [float((i * 3) % 5 - 2) for i in range(m * m)]
        tiles = (m + 15) // 16
        r = self.c.call("execute", {
            "program": self.kernels, "entry": "matmul_tiled", "grid": [tiles, tiles],
            "block": [16, 16], "args": [m, {"buffer": 0}, {"buffer": 1}, {"buffer": 2}],
            "buffers": [{"type": "f32", "data": a}, {"type": "f32", "data": b},
                        {"type": "f32", "length": m * m}],
            "return_buffers": True})
        c = r["buffers"][2]["data"]
        for i in range(m):
            for j in range(m):
                want = sum(a[i * m + k] * b[k * m + j] for k in range(m))
                self.assertTrue(close(c[i * m + j], want), (i, j))

    def test_03_a_second_stage_is_a_memory_hit_on_a_loaded_module(self):
        first = saxpy(self.c, self.kernels, [1.0] * 8, [0.0] * 8)
        again = saxpy(self.c, self.kernels, [1.0] * 8, [0.0] * 8, repeats=3, grid=1, block=32)
        self.assertEqual(again["stage"]["cache"]["outcome"], "memory_hit")
        self.assertEqual(again["stage"]["storage_key"], first["stage"]["storage_key"])
        self.assertFalse(again["stage"]["gpu"]["module_loaded"])
        self.assertEqual(len(again["stage"]["gpu"]["kernel_ms"]), 3)
        # Three launches on the same buffers: y = 3 * 2x.
        self.assertEqual(again["buffers"][1]["data"], [6.0] * 8)

    def test_04_tuned_once_then_reused(self):
        n = 4096
        r = saxpy(self.c, self.kernels, [1.0] * n, [1.0] * n, tune={"items": n})
        gpu = r["stage"]["gpu"]
        self.assertEqual(gpu["launch"]["source"], "tuned now")
        self.assertGreater(len(gpu["tuned"]), 1)
        self.assertGreater(gpu["tune_launches"], len(gpu["tuned"]))
        best = min(gpu["tuned"], key=lambda t: t["median_ms"])
        # The fake's time falls with the threads launched: the tuned launch is
        # one of the fastest candidates.
        self.assertLessEqual(gpu["median_ms"], best["median_ms"] * 1.01 + 1e-6)
        # Tuning's launches did not leak into the result: y = 2x + y once.
        self.assertEqual(r["buffers"][1]["data"], [3.0] * n)
        again = saxpy(self.c, self.kernels, [1.0] * n, [1.0] * n, tune={"items": n})
        self.assertEqual(again["stage"]["gpu"]["launch"]["source"], "tuned earlier")
        self.assertEqual(again["stage"]["gpu"]["launch"]["block"], gpu["launch"]["block"])
        self.assertNotIn("tuned", again["stage"]["gpu"])

    def test_05_bad_requests_get_clear_errors(self):
        with self.assertRaises(RpcError) as e:
            self.c.call("execute", {"program": self.kernels, "entry": "nope", "grid": 1,
                                    "block": 1})
        self.assertIn("has no entry 'nope'", e.exception.message)
        with self.assertRaises(RpcError) as e:
            self.c.call("execute", {"program": self.kernels, "entry": "saxpy",
                                    "args": [1, 1.0, {"buffer": 0}, {"buffer": 1}],
                                    "buffers": [{"type": "f32", "data": [1]},
                                                {"type": "f32", "data": [1]}]})
        self.assertIn('needs "grid"', e.exception.message)
        with self.assertRaises(RpcError) as e:
            saxpy(self.c, self.kernels, [1.0], [1.0], grid=[1, 0], block=32)
        self.assertIn("grid dimensions", e.exception.message)
        with self.assertRaises(RpcError) as e:
            saxpy(self.c, self.kernels, [1.0], [1.0], grid=1, block=4096)
        self.assertIn("more than saxpy can run with", e.exception.message)

    def test_06_out_of_device_memory_is_a_clear_error(self):
        with self.assertRaises(RpcError) as e:
            self.c.call("execute", {
                "program": self.kernels, "entry": "reduce_sum", "grid": 1, "block": 32,
                "args": [1, {"buffer": 0}, {"buffer": 1}],
                "buffers": [{"type": "f32", "length": 3 << 20},  # 12 MiB of 8
                            {"type": "f32", "length": 1}]})
        self.assertEqual(e.exception.errc, "resource_exhausted")
        self.assertIn("CUDA_ERROR_OUT_OF_MEMORY", e.exception.message)
        saxpy(self.c, self.kernels, [1.0], [1.0])  # and the worker goes on

    def test_07_a_fault_fails_the_stage_and_its_worker_is_replaced(self):
        before = self.c.call("capabilities")["gpu"]
        with self.assertRaises(RpcError) as e:
            self.c.call("execute", {"program": self.faults, "entry": "wild_store", "grid": 1,
                                    "block": 1, "args": [{"buffer": 0}],
                                    "buffers": [{"type": "i32", "data": [0]}]})
        self.assertEqual(e.exception.errc, "crashed")
        self.assertIn("CUDA_ERROR_ILLEGAL_ADDRESS", e.exception.message)
        self.assertTrue(before["available"])
        # A fresh worker (a fresh context) serves the next stage.
        r = saxpy(self.c, self.kernels, [2.0] * 4, [1.0] * 4)
        self.assertEqual(r["buffers"][1]["data"], [5.0] * 4)
        self.assertTrue(r["stage"]["gpu"]["module_loaded"])
        self.assertIn("lost to a kernel fault", self.d.log_text())

    def test_08_a_kernel_that_never_ends_is_stopped_at_the_limit(self):
        t = time.time()
        with self.assertRaises(RpcError) as e:
            self.c.call("execute", {"program": self.faults, "entry": "spin_forever",
                                    "grid": 1, "block": 1, "args": [{"buffer": 0}],
                                    "buffers": [{"type": "i32", "data": [0]}]})
        self.assertEqual(e.exception.errc, "timeout")
        self.assertIn("did not finish within 400 ms", e.exception.message)
        self.assertLess(time.time() - t, 30)
        r = saxpy(self.c, self.kernels, [1.0] * 4, [1.0] * 4)
        self.assertEqual(r["buffers"][1]["data"], [3.0] * 4)


class GpuTuningInTheProfile(unittest.TestCase):
    """Tuned launches and launch-bound trials kept in the profile store
    (docs/gpu.md, "Feedback and tuning"). The fake driver times a module
    compiled with launch bounds at FDO_FAKE_CUDA_BOUNDED_PERCENT of the time
    without them."""

    def setUp(self):
        if not FAKE.exists():
            self.skipTest(f"the fake driver {FAKE} is not built")

    def tearDown(self):
        os.environ.pop("FDO_FAKE_CUDA_BOUNDED_PERCENT", None)
        os.environ.pop("FDO_FAKE_CUDA_CAPPED_PERCENT", None)

    def run_trial(self, c, program, block=128, limit=400, bounds=None):
        """Stages of one shape until the launch-bound trial decides."""
        builds = {}
        for _ in range(limit):
            r = saxpy(c, program, [1.0] * 64, [0.5] * 64, grid=2, block=block)
            self.assertEqual(r["buffers"][1]["data"], [2.5] * 64)  # every build computes the same
            trial = r["stage"]["gpu"].get("trial")
            if trial is None:
                continue
            builds.setdefault(trial["build"], r["stage"]["storage_key"])
            self.assertEqual(trial["bounds"], bounds or f"launch bounds {block}")
            if trial["verdict"] != "undecided":
                return r, trial, builds
        self.fail(f"no verdict in {limit} stages")

    def test_faster_bounds_are_kept_and_tunings_survive_a_restart(self):
        fake_env()
        os.environ["FDO_FAKE_CUDA_BOUNDED_PERCENT"] = "70"
        os.environ["FDO_FAKE_CUDA_CAPPED_PERCENT"] = "130"  # the register cap is slower
        d = gpu_daemon(**{"guard.min_stages": 2}).start()
        d2 = None
        try:
            c = d.client()
            program = c.call("program.register", {"ir": KERNELS})["program"]
            r, trial, builds = self.run_trial(c, program)
            self.assertEqual(trial["verdict"], "accepted", trial)
            self.assertLess(trial["ratio"], 0.75)
            self.assertEqual(set(builds), {"current", "candidate"})
            self.assertNotEqual(builds["current"], builds["candidate"])
            pk = r["stage"]["profile_key"]
            doc = c.call("profile.get", {"profile_key": pk})["profile"]
            self.assertEqual(doc["gpu"]["launch_bounds"],
                             [{"arch": "sm_90", "kernel": "saxpy", "max_threads": 128}])
            self.assertEqual(doc["gpu"]["trials"][0]["verdict"], "accepted")
            # Next: the bound with a register cap for two blocks per SM, timed
            # against the kept bound; slower on this fake, so rejected.
            _, capped, capped_builds = self.run_trial(
                c, program, bounds="launch bounds 128, 2 blocks/SM")
            self.assertEqual(capped["verdict"], "rejected", capped)
            self.assertEqual(capped_builds["current"], builds["candidate"])
            doc = c.call("profile.get", {"profile_key": pk})["profile"]
            self.assertEqual([t["verdict"] for t in doc["gpu"]["trials"]], ["accepted", "rejected"])
            self.assertEqual(doc["gpu"]["trials"][1]["bounds"]["min_blocks_per_sm"], 2)
            # Kept: the current build is now the bounded one, no more trials.
            after = saxpy(c, program, [1.0] * 64, [0.5] * 64, grid=2, block=128)["stage"]
            self.assertNotIn("trial", after["gpu"])
            self.assertEqual(after["storage_key"], builds["candidate"])
            # A launch wider than the bound runs a build without it.
            wide = saxpy(c, program, [1.0] * 64, [0.5] * 64, grid=1, block=256)
            self.assertEqual(wide["stage"]["gpu"]["trial"]["build"], "unbounded")
            self.assertEqual(wide["buffers"][1]["data"], [2.5] * 64)
            self.assertEqual(wide["stage"]["storage_key"], builds["current"])
            # A tuned launch is written into the profile...
            n = 4096
            tuned = saxpy(c, program, [1.0] * n, [1.0] * n, tune={"items": n})["stage"]["gpu"]
            self.assertEqual(tuned["launch"]["source"], "tuned now")
            version = tuned["launch"]["profile_version"]
            doc = c.call("profile.get", {"profile_key": pk})["profile"]
            launch = doc["gpu"]["launches"][0]
            self.assertEqual((launch["arch"], launch["kernel"], launch["items"]),
                             ("sm_90", "saxpy", n))
            self.assertEqual(launch["chosen"]["block"], tuned["launch"]["block"])
            self.assertEqual(len(launch["candidates"]), len(tuned["tuned"]))
            history = c.call("profile.history", {"profile_key": pk})
            self.assertIn("tuned for 4096 items on sm_90", str(history))
            c.close()
            d.stop()
            # ...so a restarted daemon launches with it without tuning again.
            d2 = Daemon(d_config(d), state_dir=d.state_dir, prefix="fdo-gpu-").start()
            c = d2.client()
            again = saxpy(c, program, [1.0] * n, [1.0] * n, tune={"items": n})
            self.assertEqual(again["stage"]["gpu"]["launch"]["source"], "tuned earlier")
            self.assertEqual(again["stage"]["gpu"]["launch"]["block"], tuned["launch"]["block"])
            self.assertNotIn("tuned", again["stage"]["gpu"])
            self.assertGreaterEqual(again["stage"]["profile_version"], version)
            self.assertEqual(again["buffers"][1]["data"], [3.0] * n)
            # The kept bound is still the build (a disk hit), and no trial starts.
            kept = saxpy(c, program, [1.0] * 64, [0.5] * 64, grid=2, block=128)["stage"]
            self.assertEqual(kept["storage_key"], builds["candidate"])
            self.assertNotIn("trial", kept["gpu"])
            c.close()
        finally:
            if d2:
                d2.cleanup()
            d.cleanup()

    def test_slower_bounds_are_rejected_and_recorded(self):
        fake_env()
        os.environ["FDO_FAKE_CUDA_BOUNDED_PERCENT"] = "130"
        os.environ["FDO_FAKE_CUDA_CAPPED_PERCENT"] = "130"
        d = gpu_daemon(**{"guard.min_stages": 2}).start()
        try:
            c = d.client()
            program = c.call("program.register", {"ir": KERNELS})["program"]
            r, trial, builds = self.run_trial(c, program)
            self.assertEqual(trial["verdict"], "rejected", trial)
            _, capped, _ = self.run_trial(c, program, bounds="launch bounds 128, 2 blocks/SM")
            self.assertEqual(capped["verdict"], "rejected", capped)
            doc = c.call("profile.get", {"profile_key": r["stage"]["profile_key"]})["profile"]
            self.assertNotIn("launch_bounds", doc["gpu"])
            self.assertEqual([t["verdict"] for t in doc["gpu"]["trials"]], ["rejected", "rejected"])
            after = saxpy(c, program, [1.0] * 64, [0.5] * 64, grid=2, block=128)["stage"]
            self.assertNotIn("trial", after["gpu"])
            self.assertEqual(after["storage_key"], builds["current"])
            c.close()
        finally:
            d.cleanup()

    def test_guard_off_runs_no_trial(self):
        fake_env()
        d = gpu_daemon(**{"guard.min_stages": 0, "guard": "off"}).start()
        try:
            c = d.client()
            program = c.call("program.register", {"ir": KERNELS})["program"]
            for _ in range(6):
                r = saxpy(c, program, [1.0] * 64, [0.5] * 64, grid=2, block=128)
                self.assertNotIn("trial", r["stage"]["gpu"])
            c.close()
        finally:
            d.cleanup()


class GpuRestartAndIdentity(unittest.TestCase):
    def setUp(self):
        if not FAKE.exists():
            self.skipTest(f"the fake driver {FAKE} is not built")

    def test_restart_is_served_from_disk_and_a_new_driver_recompiles(self):
        fake_env()
        d = gpu_daemon().start()
        c = d.client()
        program = c.call("program.register", {"ir": KERNELS})["program"]
        first = saxpy(c, program, [1.0], [1.0])["stage"]
        self.assertEqual(first["cache"]["outcome"], "compiled")
        # The driver compiled the PTX (linked to a cubin that fdod keeps).
        self.assertTrue(first["gpu"]["module_loaded"])
        self.assertEqual(first["gpu"]["image"], "ptx")
        c.close()
        d.stop()
        # The same GPU and driver after a restart: the PTX comes from disk.
        d2 = Daemon(d_config(d), state_dir=d.state_dir, prefix="fdo-gpu-").start()
        c = d2.client()
        again = saxpy(c, program, [1.0], [1.0])["stage"]
        self.assertEqual(again["cache"]["outcome"], "disk_hit")
        self.assertEqual(again["storage_key"], first["storage_key"])
        self.assertTrue(again["gpu"]["module_loaded"])
        # The new worker got the cubin from the disk tier: no JIT compile.
        self.assertEqual(again["gpu"]["image"], "cubin")
        self.assertEqual(saxpy(c, program, [1.0], [2.0])["buffers"][1]["data"], [4.0])
        c.close()
        d2.stop()
        # A new driver: another identity, so another key, compiled afresh.
        fake_env(driver=12080)
        d3 = Daemon(d_config(d), state_dir=d.state_dir, prefix="fdo-gpu-").start()
        try:
            c = d3.client()
            self.assertIn("driver=12080", c.call("capabilities")["gpu"]["identity"])
            newer = saxpy(c, program, [1.0], [1.0])["stage"]
            self.assertEqual(newer["cache"]["outcome"], "compiled")
            self.assertEqual(newer["gpu"]["image"], "ptx")  # no cubin of another driver
            self.assertNotEqual(newer["program"], first["program"])
            c.close()
        finally:
            fake_env()
            d3.cleanup()
            d2.cleanup()
            d.cleanup()

    def test_a_damaged_cubin_on_disk_is_dropped_for_the_ptx(self):
        fake_env()
        d = gpu_daemon().start()
        d2 = None
        try:
            c = d.client()
            program = c.call("program.register", {"ir": KERNELS})["program"]
            saxpy(c, program, [1.0], [1.0])
            c.close()
            d.stop()
            cubins = [p for p in Path(d.state_dir).rglob("*.obj")
                      if b'"image":"cubin"' in p.read_bytes()]
            self.assertEqual(len(cubins), 1, cubins)
            raw = bytearray(cubins[0].read_bytes())
            raw[-40] ^= 0xFF  # one flipped byte: the entry's checksum no longer holds
            cubins[0].write_bytes(bytes(raw))
            d2 = Daemon(d_config(d), state_dir=d.state_dir, prefix="fdo-gpu-").start()
            c = d2.client()
            again = saxpy(c, program, [1.0], [2.0])
            self.assertEqual(again["stage"]["gpu"]["image"], "ptx")
            self.assertEqual(again["buffers"][1]["data"], [4.0])
            c.close()
        finally:
            if d2:
                d2.cleanup()
            d.cleanup()

    def test_gpu_off_refuses_nvptx_programs_and_says_why(self):
        d = Daemon({"gpu": "off"}, prefix="fdo-gpu-").start()
        try:
            c = d.client()
            gpu = c.call("capabilities")["gpu"]
            self.assertFalse(gpu["available"])
            self.assertEqual(gpu["reason"], "gpu = off")
            with self.assertRaises(RpcError) as e:
                saxpy(c, c.call("program.register", {"ir": KERNELS})["program"], [1.0], [1.0])
            self.assertEqual(e.exception.errc, "unsupported")
            self.assertIn("runs no GPU programs here: gpu = off", e.exception.message)
            c.close()
        finally:
            d.cleanup()

    def test_a_missing_driver_is_reported_not_fatal(self):
        d = Daemon({"gpu": "on", "gpu_driver": "/nonexistent/libcuda.so.1"},
                   prefix="fdo-gpu-").start()
        try:
            c = d.client()
            gpu = c.call("capabilities")["gpu"]
            self.assertFalse(gpu["available"])
            self.assertIn("cannot load /nonexistent/libcuda.so.1", gpu["reason"])
            self.assertEqual(c.call("health")["status"], "ok")
            c.close()
        finally:
            d.cleanup()


def d_config(d):
    """The configuration a Daemon was started with, as a dict."""
    out = {}
    with open(d.config) as f:
        for line in f:
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fdo_unittest  # noqa: E402

    fdo_unittest.main("GPU through fdod")
