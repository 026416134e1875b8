"""In-process execution against a real fdod (docs/runtimes.md): program.lease
hands the compiled object over as a memfd (SCM_RIGHTS), feedback.submit
rewrites the profile from a runtime's own counts, and a client killed while it
holds leases leaves nothing behind in fdod."""
import ctypes
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import unittest

from harness import BUILD, Client, Daemon, RpcError, ir, validate


class FdClient(Client):
    """A Client that keeps the descriptors a reply carries."""

    def call_fds(self, method, params):
        rid = self.next_id
        self.next_id += 1
        self.send_raw((json.dumps(
            {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + "\n").encode())
        fds = []
        while b"\n" not in self.buf:
            data, got, _flags, _addr = socket.recv_fds(self.sock, 1 << 20, 8)
            if not data:
                raise ConnectionError("fdod closed the connection")
            fds += got
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        resp = json.loads(line)
        if "error" in resp:
            for fd in fds:
                os.close(fd)
            raise RpcError(resp["error"])
        errs = validate.errors(method, "result", resp["result"]) + \
            validate.errors(method, "params", params)
        if errs:
            raise AssertionError("schema violations:\n" + "\n".join(errs))
        return resp["result"], fds


def plausible_counts(layout, scale):
    return {f["function"]: [scale * (i + 1) for i in range(f["counters"])] for f in layout}


class Leases(unittest.TestCase):
    def setUp(self):
        self.d = Daemon().start()
        self.c = FdClient(self.d.socket)
        reg = self.c.call("program.register", {"ir": ir("branchy.ll"), "name": "branchy"})
        self.program = reg["program"]

    def tearDown(self):
        self.c.close()
        self.d.cleanup()

    def leases_open(self):
        return self.c.call("health")["inprocess"]["leases"]

    def test_lease_submit_rewrite_and_newer_code(self):
        params = {"program": self.program, "entries": ["branchy", "run"]}
        lease, fds = self.c.call_fds("program.lease", params)
        self.assertEqual(len(fds), 1)
        with os.fdopen(fds[0], "rb") as f:
            obj = f.read()
        self.assertEqual(obj[:4], b"\x7fELF")
        self.assertEqual(len(obj), lease["object_size"])
        self.assertEqual(lease["mode"], "instrumented")
        self.assertTrue(lease["counters_layout"])
        # Whether fdod samples this process's threads depends on the host
        # (InProcessSampling below); either way it says why.
        self.assertIsInstance(lease["sampling"]["available"], bool)
        self.assertTrue(lease["sampling"]["reason"])
        self.assertEqual(self.leases_open(), 1)

        batch = {"calls": 50, "exec_ns": 50000,
                 "counts": plausible_counts(lease["counters_layout"], 100)}
        first = self.c.call("feedback.submit", {"lease": lease["lease"], "batches": [batch]})
        self.assertFalse(first["stale"])
        # A count vector of the wrong length is refused and changes nothing.
        bad = dict(batch, counts={lease["counters_layout"][0]["function"]: [1]})
        with self.assertRaises(RpcError) as e:
            self.c.call("feedback.submit", {"lease": lease["lease"], "batches": [bad]})
        self.assertEqual(e.exception.code, -32602)
        second = self.c.call("feedback.submit", {"lease": lease["lease"], "batches": [batch]})
        self.assertIsNotNone(second["profile_rewritten"], second["policy"])
        self.assertTrue(second["stale"])

        newer, fds = self.c.call_fds("program.lease",
                                     dict(params, unless_storage_key=lease["storage_key"]))
        self.assertEqual(len(fds), 1)
        os.close(fds[0])
        self.assertFalse(newer["unchanged"])
        self.assertEqual(newer["mode"], "optimized")
        self.assertEqual(newer["profile_version"], second["profile_version"])
        same, fds = self.c.call_fds("program.lease",
                                    dict(params, unless_storage_key=newer["storage_key"]))
        self.assertTrue(same["unchanged"])
        self.assertEqual(fds, [])
        # execute serves the same output the runtime now has.
        stage = self.c.call("execute", {"program": self.program, "entry": "run"})["stage"]
        self.assertEqual(stage["storage_key"], newer["storage_key"])

        self.c.call("program.release", {"lease": lease["lease"]})
        self.assertEqual(self.leases_open(), 1)

    def test_other_connections_cannot_use_a_lease(self):
        lease, fds = self.c.call_fds("program.lease", {"program": self.program,
                                                       "entries": ["run"]})
        for fd in fds:
            os.close(fd)
        other = Client(self.d.socket)
        try:
            with self.assertRaises(RpcError) as e:
                other.call("feedback.submit", {"lease": lease["lease"],
                                               "batches": [{"calls": 1, "exec_ns": 1}]})
            self.assertEqual(e.exception.errc, "not_found")
            with self.assertRaises(RpcError):
                other.call("program.release", {"lease": lease["lease"]})
        finally:
            other.close()
        self.assertEqual(self.leases_open(), 1)

    def test_killed_client_frees_its_leases(self):
        here = pathlib.Path(__file__).resolve().parent
        script = textwrap.dedent(f"""
            import os, sys, threading, time
            sys.path.insert(0, {str(here)!r})
            from test_inprocess import FdClient
            c = FdClient({self.d.socket!r})
            for _ in range(3):
                lease, fds = c.call_fds("program.lease", {{"program": {self.program!r},
                                                           "entries": ["run"]}})
                if lease["sampling"]["available"]:
                    c.call("program.sample", {{"lease": lease["lease"], "pid": os.getpid(),
                                               "threads": [threading.get_native_id()],
                                               "ranges": [{{"name": "run", "start": 4096,
                                                            "size": 64}}]}})
            print("leased", flush=True)
            time.sleep(600)
        """)
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
        try:
            self.assertEqual(child.stdout.readline().strip(), b"leased")
            self.assertEqual(self.leases_open(), 3)
            child.send_signal(signal.SIGKILL)
            child.wait(30)
            deadline = time.time() + 20
            while self.leases_open() != 0 and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(self.leases_open(), 0)
            # The samplers fdod opened on the child's thread closed with its
            # leases (fdod is not dumpable: only root reads its fd table).
            if os.geteuid() == 0:
                self.assertEqual(perf_fds(self.d.proc.pid), 0)
            health = self.c.call("health")
            self.assertEqual(health["inprocess"]["leases_granted"], 3)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stdout.close()


def perf_fds(pid):
    """How many perf event descriptors process `pid` holds."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[perf_event]"
        except OSError:
            pass
    return n


class InprocOptions(ctypes.Structure):
    _fields_ = [("flushing", ctypes.c_int), ("flush_interval_ms", ctypes.c_uint32),
                ("time_every", ctypes.c_uint32)]


def load_libfdo():
    lib = ctypes.CDLL(str(BUILD / "libfdo" / "libfdo.so.1"))
    p, u64p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)
    lib.fdo_connect.argtypes = [ctypes.c_char_p, ctypes.POINTER(p), ctypes.POINTER(p)]
    lib.fdo_close.argtypes = [p]
    lib.fdo_error_message.argtypes = [p]
    lib.fdo_error_message.restype = ctypes.c_char_p
    lib.fdo_inproc_open.argtypes = [p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p),
                                    ctypes.c_size_t, ctypes.POINTER(InprocOptions),
                                    ctypes.POINTER(p), ctypes.POINTER(p)]
    lib.fdo_inproc_entry.argtypes = [p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t),
                                     ctypes.POINTER(p)]
    lib.fdo_inproc_call.argtypes = [p, ctypes.c_size_t, u64p, u64p]
    lib.fdo_inproc_generation.argtypes = [p]
    lib.fdo_inproc_generation.restype = ctypes.c_uint64
    lib.fdo_inproc_close.argtypes = [p]
    lib.fdo_inproc_hold_open.argtypes = [p, ctypes.POINTER(p), ctypes.POINTER(p)]
    lib.fdo_inproc_hold_call.argtypes = [p, ctypes.c_size_t, u64p, u64p]
    lib.fdo_inproc_hold_generation.argtypes = [p]
    lib.fdo_inproc_hold_generation.restype = ctypes.c_uint64
    lib.fdo_inproc_hold_close.argtypes = [p]
    lib.fdo_inproc_flush.argtypes = [p, p, ctypes.POINTER(p)]
    lib.fdo_inproc_mode.argtypes = [p]
    lib.fdo_inproc_profile_version.argtypes = [p]
    lib.fdo_inproc_profile_version.restype = ctypes.c_int64
    lib.fdo_inproc_sampling_json.argtypes = [p]
    lib.fdo_inproc_sampling_json.restype = p
    lib.fdo_inproc_variant_json.argtypes = [p]
    lib.fdo_inproc_variant_json.restype = p
    lib.fdo_string_free.argtypes = [p]
    lib.fdo_inproc_thread_open.argtypes = [p, ctypes.POINTER(p), ctypes.POINTER(p)]
    lib.fdo_inproc_thread_entry.argtypes = [p, ctypes.c_size_t]
    lib.fdo_inproc_thread_entry.restype = p
    lib.fdo_inproc_thread_quiescent.argtypes = [p]
    lib.fdo_inproc_thread_count.argtypes = [p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint64,
                                            ctypes.c_uint64]
    lib.fdo_inproc_thread_generation.argtypes = [p]
    lib.fdo_inproc_thread_generation.restype = ctypes.c_uint64
    lib.fdo_inproc_thread_mode.argtypes = [p]
    lib.fdo_inproc_thread_close.argtypes = [p]
    return lib


def sampling_state(lib, h):
    raw = lib.fdo_inproc_sampling_json(h)
    try:
        return json.loads(ctypes.string_at(raw).decode())
    finally:
        lib.fdo_string_free(raw)


def variant_of(lib, h):
    raw = lib.fdo_inproc_variant_json(h)
    try:
        return json.loads(ctypes.string_at(raw).decode())
    finally:
        lib.fdo_string_free(raw)


def branchy(n):
    """tests/e2e/fixtures/branchy.ll's @branchy, in Python."""
    acc = 1
    for i in range(n):
        acc = (acc * 7 if i % 10 == 0 else acc + 3) & 0xFFFFFFFFFFFFFFFF
    return acc


class LibfdoCase(unittest.TestCase):
    """A real fdod, a JSON client of it and libfdo loaded into this process."""

    def setUp(self):
        self.d = Daemon().start()  # policy: 2 stages, 100 counts
        self.c = self.d.client()
        self.lib = load_libfdo()

    def tearDown(self):
        self.c.close()
        self.d.cleanup()

    def check(self, rc, err):
        if rc != 0:
            self.fail(self.lib.fdo_error_message(err).decode())


class InProcessRuntime(LibfdoCase):
    """The must-show: a program runs in this (test) process through libfdo,
    its profile is rewritten from its own calls, and the new code is swapped
    in while four threads keep calling it (every result checked)."""

    def test_profile_rewritten_from_own_calls_and_new_code_swapped_in(self):
        lib = self.lib
        reg = self.c.call("program.register", {"ir": ir("branchy.ll"), "name": "branchy"})
        conn, err, h = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        self.check(lib.fdo_connect(self.d.socket.encode(), ctypes.byref(conn),
                                   ctypes.byref(err)), err)
        entries = (ctypes.c_char_p * 1)(b"branchy")
        opts = InprocOptions(0, 50, 4)  # background flushes every 50 ms
        self.check(lib.fdo_inproc_open(conn, reg["program"].encode(), entries, 1,
                                       ctypes.byref(opts), ctypes.byref(h),
                                       ctypes.byref(err)), err)
        index = ctypes.c_size_t()
        self.check(lib.fdo_inproc_entry(h, b"branchy", ctypes.byref(index),
                                        ctypes.byref(err)), err)
        self.assertEqual(lib.fdo_inproc_generation(h), 1)
        first = self.c.call("health")["inprocess"]
        self.assertEqual(first["leases"], 1)

        expected = {n: branchy(n) for n in range(1, 64)}
        stop = threading.Event()
        seen = {"calls": 0, "wrong": [], "generations": set()}
        lock = threading.Lock()

        def caller(seed):
            # Thread 0 calls through holds of 50 calls (closed at its "safe
            # points"), the others one call at a time.
            arg, ret = (ctypes.c_uint64 * 1)(), ctypes.c_uint64()
            n, hold, held = seed, ctypes.c_void_p(), 0
            while not stop.is_set():
                n = n % 63 + 1
                arg[0] = n
                if seed == 0:
                    if not hold:
                        self.assertEqual(lib.fdo_inproc_hold_open(h, ctypes.byref(hold), None), 0)
                    rc = lib.fdo_inproc_hold_call(hold, index.value, arg, ctypes.byref(ret))
                    gen = lib.fdo_inproc_hold_generation(hold)
                    held += 1
                    if held % 50 == 0:
                        lib.fdo_inproc_hold_close(hold)
                        hold = ctypes.c_void_p()
                else:
                    rc = lib.fdo_inproc_call(h, index.value, arg, ctypes.byref(ret))
                    gen = lib.fdo_inproc_generation(h)
                with lock:
                    seen["calls"] += 1
                    seen["generations"].add(gen)
                    if rc != 0 or ret.value != expected[n]:
                        seen["wrong"].append((n, rc, ret.value))
            lib.fdo_inproc_hold_close(hold)

        threads = [threading.Thread(target=caller, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        try:
            deadline = time.time() + 120
            while lib.fdo_inproc_generation(h) < 2 and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(lib.fdo_inproc_generation(h), 2, self.d.log_text())
            at_swap = seen["calls"]
            while seen["calls"] < at_swap + 2000:
                time.sleep(0.01)
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertEqual(seen["wrong"], [])
        self.assertEqual(seen["generations"], {1, 2})

        # The profile was rewritten from the runtime's own counts: version 1,
        # with branch counts for branchy, and the runtime now runs the
        # optimized output that execute would serve.
        prof = self.c.call("profile.get", {"profile_key": reg["profile_key"]})
        self.assertGreaterEqual(prof["version"], 1)
        self.assertIn("branchy", prof["profile"]["functions"])
        self.assertGreater(sum(prof["profile"]["functions"]["branchy"]["counts"]), 100)
        stage = self.c.call("execute", {"program": reg["program"], "entry": "branchy",
                                        "args": [30]})
        self.assertEqual(stage["value"], branchy(30))
        self.assertEqual(stage["stage"]["mode"], "optimized")
        health = self.c.call("health")["inprocess"]
        self.assertEqual(health["leases"], 1)  # the old lease was released
        self.assertGreaterEqual(health["batches"], 2)

        lib.fdo_inproc_close(h)
        lib.fdo_close(conn)
        deadline = time.time() + 20
        while self.c.call("health")["inprocess"]["leases"] != 0 and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.c.call("health")["inprocess"]["leases"], 0)



SPIN_IR = """
define i64 @spin(i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  %x = phi i64 [88172645463325252, %entry], [%x3, %loop]
  %a = shl i64 %x, 13
  %x1 = xor i64 %x, %a
  %b = lshr i64 %x1, 7
  %x2 = xor i64 %x1, %b
  %c = shl i64 %x2, 17
  %x3 = xor i64 %x2, %c
  %i1 = add i64 %i, 1
  %done = icmp uge i64 %i1, %n
  br i1 %done, label %exit, label %loop
exit:
  ret i64 %x3
}
"""


class InFlushResult(ctypes.Structure):
    _fields_ = [("batches", ctypes.c_uint32), ("stale", ctypes.c_int), ("swapped", ctypes.c_int),
                ("generation", ctypes.c_uint64), ("profile_version", ctypes.c_int64)]


class NativeEntriesAndValueProfiles(LibfdoCase):
    """A native entry (the entry's own C function pointer) runs
    fixtures/pgo_wins.ll in this process: a hot indirect call whose target is
    op_add for 97% of the objects. The flushes carry the instrumented code's
    indirect-call value profile, so the rewritten profile holds it as an
    execute stage's would (docs/runtimes.md, "What is and is not measured"),
    and the thread picks up the optimized code at its next quiescent point."""

    def test_value_profiles_from_native_calls_reach_the_profile(self):
        lib = self.lib
        reg = self.c.call("program.register", {"ir": ir("pgo_wins.ll"), "name": "pgo_wins"})
        conn, err, h, t = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        self.check(lib.fdo_connect(self.d.socket.encode(), ctypes.byref(conn),
                                   ctypes.byref(err)), err)
        try:
            entries = (ctypes.c_char_p * 1)(b"run")
            opts = InprocOptions(1, 0, 0)  # manual flushes
            self.check(lib.fdo_inproc_open(conn, reg["program"].encode(), entries, 1,
                                           ctypes.byref(opts), ctypes.byref(h),
                                           ctypes.byref(err)), err)
            self.check(lib.fdo_inproc_thread_open(h, ctypes.byref(t), ctypes.byref(err)), err)
            run_type = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)
            expected, modes, swapped = None, [], False
            for _ in range(8):
                lib.fdo_inproc_thread_quiescent(t)
                run = run_type(lib.fdo_inproc_thread_entry(t, 0))
                modes.append(lib.fdo_inproc_thread_mode(t))
                value = run(20)
                if expected is None:
                    expected = value
                self.assertEqual(value, expected)  # every generation computes the same
                lib.fdo_inproc_thread_count(t, 0, 1, 0, 0)
                del run
                lib.fdo_inproc_thread_quiescent(t)
                flushed = InFlushResult()
                self.check(lib.fdo_inproc_flush(h, ctypes.byref(flushed), ctypes.byref(err)), err)
                if swapped:
                    break
                swapped = bool(flushed.swapped)
            self.assertTrue(swapped, self.d.log_text())
            self.assertEqual(modes[0], 1)   # instrumented
            self.assertEqual(modes[-1], 2)  # the rewritten profile's optimized code
        finally:
            lib.fdo_inproc_thread_close(t)
            lib.fdo_inproc_close(h)
            lib.fdo_close(conn)
        prof = self.c.call("profile.get", {"profile_key": reg["profile_key"]})
        run_profile = prof["profile"]["functions"]["run"]
        sites = run_profile.get("indirect_calls")
        self.assertTrue(sites, run_profile)
        targets = sorted((count for _, count in sites[0]), reverse=True)
        # op_add takes 97% of the calls (4096 objects x 20 rounds per call).
        self.assertGreaterEqual(targets[0], 0.9 * sum(targets), sites)
        self.assertGreaterEqual(sum(targets), 4096 * 20, sites)


class InProcessSampling(LibfdoCase):
    """fdod samples the runtime's own thread (software cpu-clock: no PMU
    needed) while it runs leased code, attributes the samples to the leased
    function, folds them into the profile, and says per event what it could
    not open (hardware events on a host without a PMU)."""

    def test_cpu_clock_samples_land_in_the_leased_code(self):
        lib = self.lib
        reg = self.c.call("program.register", {"ir": SPIN_IR, "name": "spin"})
        conn, err, h = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        self.check(lib.fdo_connect(self.d.socket.encode(), ctypes.byref(conn),
                                   ctypes.byref(err)), err)
        entries = (ctypes.c_char_p * 1)(b"spin")
        opts = InprocOptions(1, 0, 1)  # manual flushes, every call timed
        self.check(lib.fdo_inproc_open(conn, reg["program"].encode(), entries, 1,
                                       ctypes.byref(opts), ctypes.byref(h),
                                       ctypes.byref(err)), err)
        try:
            self.assertEqual(lib.fdo_inproc_mode(h), 1)  # FDO_CODE_INSTRUMENTED
            self.assertEqual(lib.fdo_inproc_profile_version(h), 0)
            state = sampling_state(lib, h)
            if not state["available"]:
                if os.geteuid() == 0:
                    self.fail("fdod runs as root but does not sample: " + state["reason"])
                self.skipTest("fdod may not sample this process here: " + state["reason"])
            self.assertEqual(state["threads"], 1, state)
            root = os.geteuid() == 0  # fdod is not dumpable: only root reads its fds
            if root:
                self.assertGreaterEqual(perf_fds(self.d.proc.pid), 1)
            clock = [e for e in state["events"] if e["name"] == "cpu-clock"]
            if not clock or clock[0]["status"] != "available":
                self.skipTest(f"cpu-clock cannot sample here: {state['events']}")
            for e in state["events"]:  # what could not be opened says why
                if e["status"] != "available":
                    self.assertTrue(e["reason"], e)

            arg, ret = (ctypes.c_uint64 * 1)(30_000_000), ctypes.c_uint64()
            for flush in range(2):
                until = time.process_time() + 0.4
                while time.process_time() < until:
                    self.assertEqual(lib.fdo_inproc_call(h, 0, arg, ctypes.byref(ret)), 0)
                self.check(lib.fdo_inproc_flush(h, None, ctypes.byref(err)), err)
                last = sampling_state(lib, h)["last_submit"]
                self.assertIsNotNone(last, sampling_state(lib, h))
                print(f"flush {flush}: samples {json.dumps(last)}", file=sys.stderr)
                self.assertEqual(last["clock_event"], "cpu-clock")
                self.assertGreaterEqual(last["attributed"], 20)  # ~100 at 250 Hz
                in_spin = last["functions"].get("spin", 0)
                self.assertGreaterEqual(in_spin * 10, last["attributed"] * 7, last)

            # The second stage rewrote the profile; its sampling record holds
            # the runtime's samples, attributed to spin.
            prof = self.c.call("profile.get", {"profile_key": reg["profile_key"]})
            self.assertGreaterEqual(prof["version"], 1)
            record = prof["profile"].get("hardware", {}).get("sampling")
            self.assertIsNotNone(record, prof["profile"])
            self.assertIn("spin", json.dumps(record))
        finally:
            lib.fdo_inproc_close(h)
            lib.fdo_close(conn)
        if os.geteuid() == 0:  # closing the connection closed fdod's samplers
            deadline = time.time() + 20
            while perf_fds(self.d.proc.pid) != 0 and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(perf_fds(self.d.proc.pid), 0)


class GuardedInProcess(unittest.TestCase):
    """The guard judges in-process code in the runtime's own process
    (docs/runtimes.md, "Guarded leases"): each flush is a stage the guard
    planned; the engine switches between a trial's two arms as told, each
    linked once; the verdict comes from this process's own timings and is
    served from then on, here and to execute."""

    def setUp(self):
        self.d = Daemon({"guard.min_stages": 0, "exec_timeout_ms": 20000}).start()
        self.c = self.d.client()
        self.lib = load_libfdo()
        self.conn, self.err, self.h = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()

    def tearDown(self):
        self.lib.fdo_inproc_close(self.h)
        self.lib.fdo_close(self.conn)
        self.c.close()
        self.d.cleanup()

    def check(self, rc):
        if rc != 0:
            self.fail(self.lib.fdo_error_message(self.err).decode())

    def open(self, fixture, time_every):
        reg = self.c.call("program.register", {"ir": ir(fixture + ".ll"), "name": fixture})
        lib = self.lib
        self.check(lib.fdo_connect(self.d.socket.encode(), ctypes.byref(self.conn),
                                   ctypes.byref(self.err)))
        entries = (ctypes.c_char_p * 1)(b"run")
        opts = InprocOptions(1, 0, time_every)  # manual flushes
        self.check(lib.fdo_inproc_open(self.conn, reg["program"].encode(), entries, 1,
                                       ctypes.byref(opts), ctypes.byref(self.h),
                                       ctypes.byref(self.err)))
        self.assertEqual(lib.fdo_inproc_mode(self.h), 1)  # instrumented
        self.assertTrue(variant_of(lib, self.h)["guarded"])
        return reg

    def flush(self):
        flushed = InFlushResult()
        self.check(self.lib.fdo_inproc_flush(self.h, ctypes.byref(flushed),
                                             ctypes.byref(self.err)))
        return flushed

    def until_verdict(self, stage, word):
        """Runs stages (stage() then a flush) until the guard's verdict
        contains `word`; returns it and what each stage ran."""
        seen = []
        for _ in range(160):
            role = variant_of(self.lib, self.h)["role"]
            seen.append((role, self.lib.fdo_inproc_mode(self.h),
                         self.lib.fdo_inproc_generation(self.h)))
            stage()
            self.flush()
            trial = variant_of(self.lib, self.h).get("trial") or ""
            if word in trial:
                return trial, seen
        self.fail((seen, self.d.log_text()[-3000:]))

    def check_arms(self, seen, candidate_mode, incumbent_mode):
        roles = [r for r, _, _ in seen]
        self.assertIn("candidate", roles)
        self.assertIn("incumbent", roles)
        for role, mode, _ in seen:  # each arm runs its own build
            if role == "candidate":
                self.assertEqual(mode, candidate_mode, seen)
            elif role == "incumbent":
                self.assertEqual(mode, incumbent_mode, seen)
        # Three objects linked in all (instrumented, profiled, plain),
        # however often the arms were switched.
        self.assertLessEqual(max(g for _, _, g in seen), 3, seen)

    def test_faster_profiled_build_is_kept_from_in_process_timings(self):
        """fixtures/pgo_wins.ll: a hot indirect call the profile promotes
        and inlines (1.6-1.9x faster than plain here, timed in process)."""
        lib = self.lib
        reg = self.open("pgo_wins", 1)  # every call timed
        arg, ret = (ctypes.c_uint64 * 1)(20), ctypes.c_uint64()
        want = []

        def stage():
            for _ in range(3):
                self.assertEqual(lib.fdo_inproc_call(self.h, 0, arg, ctypes.byref(ret)), 0)
                want.append(ret.value)
                self.assertEqual(ret.value, want[0])  # every build computes the same

        for _ in range(8):  # counts until the profile's build runs
            stage()
            self.flush()
            if lib.fdo_inproc_mode(self.h) == 2:
                break
        self.assertEqual(lib.fdo_inproc_mode(self.h), 2, self.d.log_text())
        verdict, seen = self.until_verdict(stage, "accepted")
        self.assertIn("v1 profiled O2 accepted: ", verdict)
        self.check_arms(seen, 2, 0)

        stage()
        self.flush()
        v = variant_of(lib, self.h)
        self.assertEqual((v["role"], v["name"], v["renew"]),
                         ("incumbent", "v1 profiled O2", False), v)
        self.assertEqual(lib.fdo_inproc_mode(self.h), 2)
        guard = self.c.call("profile.get",
                            {"profile_key": reg["profile_key"]})["profile"]["guard"]
        self.assertEqual(guard["incumbent"]["base"], "profiled")
        self.assertEqual(guard["trials"][-1]["verdict"], "accepted")
        self.assertLess(guard["trials"][-1]["ratio"], 0.9)

    def test_planted_slower_candidate_is_rejected_and_the_incumbent_kept(self):
        """fixtures/pgo_loses.ll through a native entry, the runtime timing
        its own calls (fdo_inproc_thread_count) and planting 60% more time on
        every call of the profiled build: the guard rejects it from those
        timings alone and keeps the plain build, which runs from then on."""
        lib = self.lib
        reg = self.open("pgo_loses", 64)
        lib.fdo_inproc_thread_mode.restype = ctypes.c_int
        t = ctypes.c_void_p()
        self.check(lib.fdo_inproc_thread_open(self.h, ctypes.byref(t), ctypes.byref(self.err)))
        run_type = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)
        want = {}
        try:
            def stage(mode=1):
                lib.fdo_inproc_thread_quiescent(t)
                run = run_type(lib.fdo_inproc_thread_entry(t, 0))
                planted = 1.6 if lib.fdo_inproc_thread_mode(t) == 2 else 1.0
                for _ in range(3):
                    t0 = time.perf_counter_ns()
                    value = run(mode)
                    ns = int((time.perf_counter_ns() - t0) * planted)
                    want.setdefault(mode, value)
                    self.assertEqual(value, want[mode])
                    lib.fdo_inproc_thread_count(t, 0, 1, 1, ns)
                lib.fdo_inproc_thread_quiescent(t)

            for _ in range(8):
                stage(0)
                self.flush()
                if lib.fdo_inproc_mode(self.h) == 2:
                    break
            self.assertEqual(lib.fdo_inproc_mode(self.h), 2, self.d.log_text())
            verdict, seen = self.until_verdict(stage, "rejected")
            self.assertIn("v1 profiled O2 rejected: ", verdict)
            self.check_arms(seen, 2, 0)

            stage()
            self.flush()
            v = variant_of(lib, self.h)
            self.assertEqual((v["role"], v["name"], v["renew"]),
                             ("incumbent", "plain O2", False), v)
            self.assertIn("rejected", v["reason"])
            lib.fdo_inproc_thread_quiescent(t)
            self.assertEqual(lib.fdo_inproc_thread_mode(t), 0)  # the plain build runs here
        finally:
            lib.fdo_inproc_thread_close(t)
        guard = self.c.call("profile.get", {"profile_key": reg["profile_key"]})["profile"]["guard"]
        self.assertEqual(guard["incumbent"]["base"], "plain")
        self.assertEqual(guard["trials"][-1]["verdict"], "rejected")
        self.assertGreater(guard["trials"][-1]["ratio"], 1.3)
        st = self.c.call("execute", {"program": reg["program"], "entry": "run", "args": [1]})
        self.assertEqual(st["stage"]["variant"]["name"], "plain O2")
        self.assertEqual(st["stage"]["mode"], "plain")
        self.assertEqual(st["value"], want[1])

if __name__ == "__main__":
    # A missing prerequisite reads as skipped (tests/support/fdo_unittest.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fdo_unittest  # noqa: E402

    fdo_unittest.main("in-process")
