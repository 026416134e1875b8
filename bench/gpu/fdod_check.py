"""The GPU check through a real fdod on a GPU host (docs/gpu.md, "Checking a
GPU host"); run by bench/gpu/run_check.sh from the bundle pack.sh made.

SAXPY, a reduction and a tiled matrix multiply compiled by fdod for the host
GPU and run in its GPU workers, results compared with numpy; a cold stage
against a memory hit and a restart served from the disk tier; the launch fdod
tunes against a fixed grid of launch configurations timed side by side
(interleaved rounds, through the same execute path); a kernel fault and a
kernel that never ends, each followed by a good stage. Standalone (its own
NDJSON client), so it needs only Python and numpy there.

    FDO_BIN_DIR=/tmp/fdo-gpu/bin python3 bench/gpu/fdod_check.py --kernels K.ll --json OUT
"""
import argparse
import base64
import json
import os
import pathlib
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
FAULTS = HERE.parents[1] / "tests" / "e2e" / "fixtures" / "gpu_faults.ll"


class Fdod:
    def __init__(self, bin_dir, state_dir, config):
        self.tmp = tempfile.mkdtemp(prefix="fdo-gpu-check-")
        self.sock_path = os.path.join(self.tmp, "fdod.sock")
        self.conf = os.path.join(self.tmp, "fdod.conf")
        with open(self.conf, "w") as f:
            for k, v in config.items():
                f.write(f"{k} = {v}\n")
        self.log_path = os.path.join(self.tmp, "fdod.log")
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [os.path.join(bin_dir, "fdod"), "--socket", self.sock_path, "--state-dir", state_dir,
             "--config", self.conf], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("fdod exited:\n" + self.log_text())
            try:
                self.connect()
                self.call("health")
                return
            except (FileNotFoundError, ConnectionRefusedError, ConnectionError):
                if time.time() > deadline:
                    raise RuntimeError("fdod did not start:\n" + self.log_text())
                time.sleep(0.1)

    def connect(self):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(self.sock_path)
        self.buf = b""
        self.next_id = 1

    def call(self, method, params=None):
        req = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        self.next_id += 1
        if params is not None:
            req["params"] = params
        self.s.sendall(json.dumps(req).encode() + b"\n")
        while b"\n" not in self.buf:
            chunk = self.s.recv(1 << 22)
            if not chunk:
                raise ConnectionError("fdod closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        resp = json.loads(line)
        if "error" in resp:
            raise RuntimeError(json.dumps(resp["error"]))
        return resp["result"]

    def log_text(self):
        return pathlib.Path(self.log_path).read_text(errors="replace")[-6000:]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def f32(a):
    return {"type": "f32", "base64": base64.b64encode(np.asarray(a, np.float32).tobytes()).decode()}


def unf32(b):
    return np.frombuffer(base64.b64decode(b["base64"]), np.float32)


def saxpy_params(program, x, y, **launch):
    p = {"program": program, "entry": "saxpy", "args": [len(x), 2.5, {"buffer": 0}, {"buffer": 1}],
         "buffers": [f32(x), f32(y)], "return_buffers": True, "buffer_encoding": "base64"}
    p.update(launch)
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", required=True)
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--config", action="append", default=[], help="KEY=VALUE for fdod.conf")
    ap.add_argument("--probe-only", action="store_true")
    args = ap.parse_args()
    bin_dir = os.environ.get("FDO_BIN_DIR", "build")
    state = tempfile.mkdtemp(prefix="fdo-gpu-state-")
    config = {"gpu_kernel_timeout_ms": 2000, "max_request_bytes": 1 << 29,
              "max_output_bytes": 1 << 29, "log_level": "info", "tier_up": "sync",
              "guard.min_stages": 2}
    for kv in args.config:
        k, _, v = kv.partition("=")
        config[k] = v
    report = {}
    ok = True
    d = Fdod(bin_dir, state, config)
    try:
        caps = d.call("capabilities")
        report["gpu"] = caps["gpu"]
        report["sandbox"] = caps["sandbox"]
        print("capabilities.gpu:", json.dumps(caps["gpu"]))
        if args.probe_only or not caps["gpu"]["available"]:
            print("fdod runs no GPU programs here:", caps["gpu"].get("reason"))
            print(d.log_text())
            return 1
        program = d.call("program.register", {"ir": pathlib.Path(args.kernels).read_text()})["program"]
        rng = np.random.default_rng(5)
        n = int(os.environ.get("FDO_GPU_CHECK_N", 1 << 22))
        x = rng.uniform(-1, 1, n).astype(np.float32)
        y = rng.uniform(-1, 1, n).astype(np.float32)
        stages = {}
        for name in ("cold", "hit"):
            t = time.time()
            r = d.call("execute", saxpy_params(program, x, y, grid=(n + 255) // 256, block=256))
            st = r["stage"]
            stages[name] = {"outcome": st["cache"]["outcome"], "compile_ms": st["compile_ms"],
                            "module_loaded": st["gpu"]["module_loaded"],
                            "jit_load_ms": st["gpu"]["load_ms"], "kernel_ms": st["gpu"]["median_ms"],
                            "round_trip_ms": st["gpu"]["round_trip_ms"],
                            "request_ms": (time.time() - t) * 1000}
            got = unf32(r["buffers"][1])
            err = float(np.max(np.abs(got - (2.5 * x + y))))
            stages[name]["max_abs_error"] = err
            ok &= err <= 1e-6
        report["saxpy_stages"] = stages
        print("saxpy stages:", json.dumps(stages))

        blocks = 528
        r = d.call("execute", {"program": program, "entry": "reduce_sum", "grid": blocks,
                               "block": 256, "args": [n, {"buffer": 0}, {"buffer": 1}],
                               "buffers": [f32(x), {"type": "f32", "length": blocks}],
                               "return_buffers": True, "buffer_encoding": "base64"})
        got = float(np.sum(unf32(r["buffers"][1]).astype(np.float64)))
        want = float(np.sum(x.astype(np.float64)))
        report["reduce_sum"] = {"sum": got, "host": want, "kernel_ms": r["stage"]["gpu"]["median_ms"],
                                "equal": abs(got - want) <= 1e-6 * float(np.sum(np.abs(x)))}
        ok &= report["reduce_sum"]["equal"]

        m = 1024
        a = rng.uniform(-1, 1, (m, m)).astype(np.float32)
        b = rng.uniform(-1, 1, (m, m)).astype(np.float32)
        tiles = (m + 15) // 16
        r = d.call("execute", {"program": program, "entry": "matmul_tiled", "grid": [tiles, tiles],
                               "block": [16, 16], "args": [m, {"buffer": 0}, {"buffer": 1}, {"buffer": 2}],
                               "buffers": [f32(a.ravel()), f32(b.ravel()), {"type": "f32", "length": m * m}],
                               "return_buffers": True, "buffer_encoding": "base64"})
        c = unf32(r["buffers"][2]).reshape(m, m)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = float(np.max(np.abs(c - ref)))
        report["matmul_tiled"] = {"n": m, "max_abs_error": err, "tolerance": 4 * m * 1.2e-7,
                                  "kernel_ms": r["stage"]["gpu"]["median_ms"],
                                  "gflops": 2 * m ** 3 / (r["stage"]["gpu"]["median_ms"] * 1e6)}
        ok &= err <= 4 * m * 1.2e-7
        print("reduce:", json.dumps(report["reduce_sum"]), "matmul:", json.dumps(report["matmul_tiled"]))

        # Tuned through fdod, then timed against a fixed grid side by side.
        r = d.call("execute", saxpy_params(program, x, y, tune={"items": n}))
        tuned = r["stage"]["gpu"]["launch"]
        sms = caps["gpu"]["gpus"][0]["multiprocessors"]
        fixed = [{"grid": g, "block": bl} for bl in (64, 128, 256, 512, 1024)
                 for g in (sms * 4, sms * 16, (n + bl - 1) // bl)]
        arms = fixed + [{"grid": tuned["grid"], "block": tuned["block"], "tuned": True}]
        times = [[] for _ in arms]
        order = list(range(len(arms)))
        random.seed(7)
        for _ in range(args.rounds):
            random.shuffle(order)
            for i in order:
                launch = {k: v for k, v in arms[i].items() if k != "tuned"}
                st = d.call("execute", saxpy_params(program, x, y, repeats=10, **launch))["stage"]
                times[i].append(st["gpu"]["median_ms"])
        med = [statistics.median(t) for t in times]
        best = min(range(len(fixed)), key=lambda i: med[i])
        report["tuning"] = {"tuned": tuned, "tune_launches": r["stage"]["gpu"].get("tune_launches"),
                            "tuned_median_ms": med[-1], "best_fixed": fixed[best],
                            "best_fixed_median_ms": med[best],
                            "tuned_over_best_fixed": med[-1] / med[best],
                            "grid": [{"launch": fixed[i], "median_ms": med[i]} for i in range(len(fixed))],
                            "rounds": args.rounds}
        print("tuning:", json.dumps({k: v for k, v in report["tuning"].items() if k != "grid"}))

        # A launch-bound trial (docs/gpu.md, "Feedback and tuning"): stages of
        # one matmul shape until the guard decides whether launch bounds of
        # its 256 threads make the kernel faster; what each build's kernel
        # took and how many registers ptxas gave it.
        mt = {"program": program, "entry": "matmul_tiled", "grid": [tiles, tiles], "block": [16, 16],
              "args": [m, {"buffer": 0}, {"buffer": 1}, {"buffer": 2}],
              "buffers": [f32(a.ravel()), f32(b.ravel()), {"type": "f32", "length": m * m}],
              "buffer_encoding": "base64"}
        builds = {}
        trial = None
        for i in range(300):
            st = d.call("execute", mt)["stage"]
            tr = st["gpu"].get("trial")
            if tr is None:
                continue
            b = builds.setdefault(tr["build"], {"kernel_ms": [], "registers": st["gpu"]["registers"],
                                                "local_bytes": st["gpu"]["local_bytes"]})
            b["kernel_ms"].append(st["gpu"]["median_ms"])
            if tr.get("verdict", "undecided") != "undecided":
                trial = dict(tr, stages=i + 1)
                break
        for b in builds.values():
            b["median_ms"] = statistics.median(b["kernel_ms"])
            del b["kernel_ms"]
        report["launch_bound_trial"] = {"trial": trial, "builds": builds}
        ok &= trial is not None
        print("launch-bound trial:", json.dumps(report["launch_bound_trial"]))

        # Faults on a real GPU: each fails its stage, the next stage runs.
        faults = d.call("program.register", {"ir": FAULTS.read_text()})["program"]
        for kernel in ("wild_store", "spin_forever"):
            t = time.time()
            try:
                d.call("execute", {"program": faults, "entry": kernel, "grid": 1, "block": 1,
                                   "args": [{"buffer": 0}], "buffers": [{"type": "i32", "data": [0]}]})
                report[kernel] = {"error": None}
                ok = False
            except RuntimeError as e:
                report[kernel] = {"error": json.loads(str(e)), "seconds": time.time() - t}
            after = d.call("execute", saxpy_params(program, x[:1024], y[:1024], grid=4, block=256))
            good = float(np.max(np.abs(unf32(after["buffers"][1]) - (2.5 * x[:1024] + y[:1024])))) <= 1e-6
            report[kernel]["next_stage_ok"] = good
            ok &= good
            print(kernel, json.dumps(report[kernel])[:400])
    finally:
        d.stop()
    # A restart: the PTX comes from the disk tier, and the cubin the driver
    # linked from it too (no JIT compile).
    d = Fdod(bin_dir, state, config)
    try:
        program = d.call("program.register", {"ir": pathlib.Path(args.kernels).read_text()})["program"]
        t = time.time()
        r = d.call("execute", saxpy_params(program, x, y, grid=(n + 255) // 256, block=256))
        st = r["stage"]
        report["restart"] = {"outcome": st["cache"]["outcome"], "compile_ms": st["compile_ms"],
                             "jit_load_ms": st["gpu"]["load_ms"], "image": st["gpu"].get("image"),
                             "round_trip_ms": st["gpu"]["round_trip_ms"],
                             "request_ms": (time.time() - t) * 1000}
        ok &= st["cache"]["outcome"] == "disk_hit" and st["gpu"].get("image") == "cubin"
        again = d.call("execute", saxpy_params(program, x, y, tune={"items": n}))["stage"]["gpu"]
        report["restart"]["tune_source"] = again["launch"]["source"]
        ok &= again["launch"]["source"] == "tuned earlier"  # from the profile store
        print("restart:", json.dumps(report["restart"]))
    finally:
        d.stop()
        shutil.rmtree(state, ignore_errors=True)
    report["ok"] = bool(ok)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1))
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
