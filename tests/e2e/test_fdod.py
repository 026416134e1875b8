#!/usr/bin/env python3
"""End-to-end tests that start a real fdod (design.md section 5, issue: fdod).

Run through CTest (tests/e2e/CMakeLists.txt) or directly:
  FDO_BUILD_DIR=build python3 tests/e2e/test_fdod.py [-k PATTERN]"""
import base64
import shutil
import json
import os
import pathlib
import re
import signal
import sqlite3
import struct
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import BUILD, Client, Daemon, RpcError, ir, worker_children  # noqa: E402


class FeedbackLoop(unittest.TestCase):
    """Stage 0 instrumented through the virtual key; a rewrite; recompile; hits."""

    def setUp(self):
        self.d = Daemon().start()
        self.c = self.d.client()

    def tearDown(self):
        self.c.close()
        self.d.cleanup()

    def test_loop_rewrites_profile_and_recompiles(self):
        reg = self.c.call("program.register", {"ir": ir("branchy.ll"), "name": "branchy"})
        prog = reg["program"]
        self.assertEqual({e["name"] for e in reg["entries"]}, {"branchy", "run", "scale"})
        results = [self.c.call("execute", {"program": prog, "entry": "run"}) for _ in range(6)]
        stages = [r["stage"] for r in results]
        values = {r["value"] for r in results}
        self.assertEqual(len(values), 1, "every stage must compute the same result")

        s0 = stages[0]
        self.assertEqual(s0["mode"], "instrumented")
        self.assertEqual(s0["cache"]["outcome"], "compiled")
        self.assertEqual(s0["cache"]["reason"], "new_program")
        self.assertTrue(s0["storage_key"].endswith("-v"), "first stage is stored under the VK")
        self.assertTrue(s0["recompiled"])
        self.assertEqual(s0["profile_version"], 0)

        # policy.min_stages = 2: stage 1 completes the evidence and rewrites.
        rewrites = [s for s in stages if s["profile_rewritten"]]
        self.assertEqual(len(rewrites), 1, [s["policy"] for s in stages])
        rw = rewrites[0]
        self.assertEqual((rw["profile_rewritten"]["from"], rw["profile_rewritten"]["to"]), (0, 1))
        nxt = stages[rw["number"] + 1]
        self.assertEqual(nxt["mode"], "optimized")
        self.assertEqual(nxt["profile_version"], 1)
        self.assertTrue(nxt["recompiled"])
        self.assertEqual(nxt["cache"]["reason"], "profile_rewritten")
        self.assertNotEqual(nxt["cache_key"], s0["cache_key"])
        for later in stages[rw["number"] + 2:]:
            self.assertFalse(later["recompiled"], later)
            self.assertEqual(later["cache"]["outcome"], "memory_hit")
            self.assertEqual(later["cache_key"], nxt["cache_key"])

        hist = self.c.call("profile.history", {"profile_key": s0["profile_key"]})
        self.assertEqual([v["version"] for v in hist["versions"]], [1])
        self.assertEqual(hist["current_version"], 1)
        got = self.c.call("profile.get", {"profile_key": s0["profile_key"]})
        fn = got["profile"]["functions"]
        self.assertIn("branchy", fn)
        # PGO runs after clang's pre-inliner: branchy's loop is inlined into
        # run before it is instrumented, so its counts are in run's record
        # (per call site), and branchy itself was never called.
        self.assertGreater(sum(fn["run"]["counts"]), 0)
        self.assertEqual(sum(fn["branchy"]["counts"]), 0)

        explain = self.c.call("cache.explain", {"program": prog})
        reasons = [r["reason"] for r in explain["records"]]
        self.assertIn("new_program", reasons)
        self.assertIn("profile_rewritten", reasons)

        # Operator actions: pin blocks feedback; reset goes back to instrumented.
        pk = s0["profile_key"]
        self.assertTrue(self.c.call("profile.pin", {"profile_key": pk})["pinned"])
        st = self.c.call("execute", {"program": prog, "entry": "run"})["stage"]
        self.assertIn("pinned", st["policy"])
        self.assertFalse(self.c.call("profile.unpin", {"profile_key": pk})["pinned"])
        self.assertEqual(self.c.call("profile.reset", {"profile_key": pk})["version"], 0)
        st = self.c.call("execute", {"program": prog, "entry": "run"})["stage"]
        self.assertEqual(st["mode"], "instrumented")
        self.assertEqual(st["profile_version"], 0)

        for m in ("health", "capabilities", "cache.stats", "metrics", "profile.list"):
            self.c.call(m, {})
        metrics = self.c.call("metrics", {})["text"]
        self.assertIn("fdo_profile_rewrites_total 1", metrics)
        exported = self.c.call("profile.export", {"profile_keys": [pk], "format": "json"})
        self.assertEqual(exported["format"], "json")

    def test_buffers_round_trip(self):
        prog = self.c.call("program.register", {"ir": ir("branchy.ll")})["program"]
        r = self.c.call("execute", {"program": prog, "entry": "scale",
                                    "args": [{"buffer": 0}, 3, 2.5],
                                    "buffers": [{"type": "f64", "data": [1.0, 2.0, 4.0]}],
                                    "return_buffers": True})
        self.assertIsNone(r["value"])
        self.assertEqual(r["buffers"][0]["data"], [2.5, 5.0, 10.0])
        raw = struct.pack("<3d", 1.0, -1.0, 0.5)
        r = self.c.call("execute", {"program": prog, "entry": "scale",
                                    "args": [{"buffer": 0}, 3, -2.0],
                                    "buffers": [{"type": "f64", "base64": base64.b64encode(raw).decode()}],
                                    "return_buffers": True, "buffer_encoding": "base64"})
        self.assertEqual(struct.unpack("<3d", base64.b64decode(r["buffers"][0]["base64"])),
                         (-2.0, 2.0, -1.0))
        # Inline IR with an argument.
        r = self.c.call("execute", {"ir": ir("branchy.ll"), "entry": "branchy", "args": [10]})
        self.assertEqual(r["value"], ((1 * 7) + 27))


def many_functions(n):
    """IR of n functions, each a loop around an 8-way switch, and run()
    calling them all: big enough that its compile is still running when a
    client's next call arrives (a few hundred ms)."""
    out = []
    for i in range(n):
        out.append(f"""define internal i64 @f{i}(i64 %x) noinline {{
entry:
  br label %loop
loop:
  %k = phi i64 [ 0, %entry ], [ %k1, %next ]
  %a = phi i64 [ %x, %entry ], [ %a1, %next ]
  %sel = and i64 %a, 7
  switch i64 %sel, label %d [ i64 0, label %c0 i64 1, label %c1 i64 2, label %c2 ]
c0:
  %v0 = mul i64 %a, {i + 3}
  br label %next
c1:
  %v1 = xor i64 %a, {i * 7 + 1}
  br label %next
c2:
  %v2 = lshr i64 %a, 3
  br label %next
d:
  %vd = add i64 %a, {i + 11}
  br label %next
next:
  %a1 = phi i64 [ %v0, %c0 ], [ %v1, %c1 ], [ %v2, %c2 ], [ %vd, %d ]
  %k1 = add i64 %k, 1
  %more = icmp ult i64 %k1, 64
  br i1 %more, label %loop, label %done
done:
  ret i64 %a1
}}""")
    calls = ["define i64 @run() {", "entry:"]
    acc = "0"
    for i in range(n):
        calls += [f"  %r{i} = call i64 @f{i}(i64 {i + 1})", f"  %s{i} = add i64 {acc}, %r{i}"]
        acc = f"%s{i}"
    calls += [f"  ret i64 {acc}", "}"]
    return "\n".join(out + calls) + "\n"


class AsyncTierUp(unittest.TestCase):
    def test_previous_output_serves_while_recompiling(self):
        d = Daemon({"tier_up": "async"}).start()
        try:
            c = d.client()
            prog = c.call("program.register", {"ir": many_functions(60)})["program"]
            stages = []
            # Back to back: the rewrite queues the optimized build as it
            # replies (docs/cache.md, "Tier-up"), so the next call arrives
            # while it compiles and is served the instrumented output.
            for _ in range(400):
                stages.append(c.call("execute", {"program": prog, "entry": "run"})["stage"])
                if stages[-1]["mode"] == "optimized" and not stages[-1]["recompiled"]:
                    break
                if stages[-1]["cache"]["outcome"] == "tier_up_pending":
                    time.sleep(0.05)
            outcomes = [s["cache"]["outcome"] for s in stages]
            self.assertIn("tier_up_pending", outcomes, outcomes)
            pending = stages[outcomes.index("tier_up_pending")]
            self.assertEqual(pending["mode"], "instrumented", "served the earlier output")
            self.assertEqual(stages[-1]["mode"], "optimized", outcomes)
            self.assertEqual(stages[-1]["cache"]["outcome"], "memory_hit")
        finally:
            d.cleanup()


class Restart(unittest.TestCase):
    def test_restart_serves_from_disk_without_compiling(self):
        d = Daemon().start()
        try:
            c = d.client()
            prog = c.call("program.register", {"ir": ir("branchy.ll")})["program"]
            stages = [c.call("execute", {"program": prog, "entry": "run"})["stage"] for _ in range(4)]
            self.assertEqual(stages[-1]["mode"], "optimized")
            c.close()
            self.assertEqual(d.stop(), 0, "SIGTERM drains and exits 0\n" + d.log_text())
            d.start()
            c = d.client()
            st = c.call("execute", {"program": prog, "entry": "run"})["stage"]
            self.assertEqual(st["cache"]["outcome"], "disk_hit", st)
            self.assertFalse(st["recompiled"])
            self.assertEqual(st["profile_version"], stages[-1]["profile_version"])
            st = c.call("execute", {"program": prog, "entry": "run"})["stage"]
            self.assertEqual(st["cache"]["outcome"], "memory_hit")
            c.close()
        finally:
            d.cleanup()


class CacheTiers(unittest.TestCase):
    """memory_cache_bytes / disk_cache_bytes = 0 turn a tier off, as documented."""

    def test_memory_tier_off_serves_every_later_stage_from_disk(self):
        d = Daemon({"memory_cache_bytes": 0, "policy.min_stages": 1000}).start()
        try:
            c = d.client()
            prog = c.call("program.register", {"ir": ir("branchy.ll")})["program"]
            outcomes = [c.call("execute", {"program": prog, "entry": "run"})["stage"]["cache"]
                        ["outcome"] for _ in range(3)]
            self.assertEqual(outcomes, ["compiled", "disk_hit", "disk_hit"])
            c.close()
        finally:
            d.cleanup()

    def test_disk_tier_off_keeps_nothing_across_a_restart(self):
        d = Daemon({"disk_cache_bytes": 0, "policy.min_stages": 1000}).start()
        try:
            c = d.client()
            prog = c.call("program.register", {"ir": ir("branchy.ll")})["program"]
            first = [c.call("execute", {"program": prog, "entry": "run"})["stage"]["cache"]
                     ["outcome"] for _ in range(2)]
            self.assertEqual(first, ["compiled", "memory_hit"])
            c.close()
            self.assertEqual(d.stop(), 0, d.log_text())
            d.start()
            c = d.client()
            st = c.call("execute", {"program": prog, "entry": "run"})["stage"]
            self.assertEqual(st["cache"]["outcome"], "compiled", st)
            c.close()
        finally:
            d.cleanup()


STATEFUL_IR = """@calls = global i64 0
define i64 @bump(i64 %by) {
  %v = load i64, ptr @calls
  %w = add i64 %v, %by
  store i64 %w, ptr @calls
  ret i64 %w
}
"""


class StageIsolation(unittest.TestCase):
    """Every stage starts from the program's initial state, whichever exec
    worker runs it and whatever ran before."""

    def test_writable_globals_start_fresh_at_every_stage(self):
        d = Daemon({"exec_workers": 2, "policy.min_stages": 2, "policy.min_counts": 1}).start()
        try:
            clients = [d.client() for _ in range(3)]
            prog = clients[0].call("program.register", {"ir": STATEFUL_IR})["program"]
            values, modes = [], set()
            lock = threading.Lock()

            def run(c):
                for _ in range(6):
                    r = c.call("execute", {"program": prog, "entry": "bump", "args": [5]})
                    with lock:
                        values.append(r["value"])
                        modes.add(r["stage"]["mode"])
            threads = [threading.Thread(target=run, args=(c,)) for c in clients]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(values, [5] * 18)
            self.assertEqual(modes, {"instrumented", "optimized"})
            for c in clients:
                c.close()
        finally:
            d.cleanup()


class Allocator(unittest.TestCase):
    """fdod runs on the allocator `fdod --version` names (jemalloc unless built
    with FDO_MALLOC=system or a sanitizer); its exec workers, which run client
    code, keep glibc's malloc (docs/fdod.md, "Memory")."""

    def test_fdod_maps_the_allocator_it_names_and_exec_workers_keep_glibc(self):
        version = subprocess.run([str(BUILD / "fdod"), "--version"], capture_output=True,
                                 text=True, check=True).stdout
        named = [line for line in version.splitlines() if line.startswith("allocator: ")]
        self.assertEqual(len(named), 1, version)
        jemalloc = named[0].startswith("allocator: jemalloc ")
        cache = BUILD / "CMakeCache.txt"
        if cache.exists():
            text = cache.read_text()
            configured = re.search(r"^FDO_MALLOC:STRING=(.*)$", text, re.M)
            sanitize = re.search(r"^FDO_SANITIZE:STRING=(.*)$", text, re.M)
            if configured and not (sanitize and sanitize.group(1)):
                self.assertEqual(jemalloc, configured.group(1) == "jemalloc",
                                 f"FDO_MALLOC={configured.group(1)}, fdod --version: {named[0]}")
        d = Daemon().start()
        try:
            c = d.client()
            pid = c.call("health")["pid"]
            prog = c.call("program.register", {"ir": STATEFUL_IR})["program"]
            self.assertEqual(c.call("execute", {"program": prog, "entry": "bump",
                                                "args": [5]})["value"], 5)
            try:
                maps = pathlib.Path(f"/proc/{pid}/maps").read_text()
            except PermissionError:
                self.skipTest("fdod's memory map is not readable by this user (fdod makes "
                              "itself not dumpable; run as root)")
            self.assertEqual("/libjemalloc.so" in maps, jemalloc, named[0])
            try:
                workers = worker_children(pid)
            except PermissionError:
                self.skipTest("fdod's workers are not readable by this user "
                              "(a sandboxed worker is not dumpable; run as root)")
            checked = []
            for k, argv in workers:
                if b"exec" not in argv:
                    continue
                try:
                    wmaps = pathlib.Path(f"/proc/{k}/maps").read_text()
                except PermissionError:
                    self.skipTest(f"exec worker {k} is not readable by this user "
                                  "(a sandboxed worker is not dumpable; run as root)")
                except (FileNotFoundError, ProcessLookupError):
                    continue  # it ended meanwhile
                if not wmaps:
                    continue  # exiting: nothing mapped any more
                self.assertTrue("/libc.so.6" in wmaps, f"exec worker {k} maps no libc")
                self.assertFalse("jemalloc" in wmaps, f"exec worker {k} maps jemalloc")
                checked.append(k)
            self.assertTrue(checked, "no live exec worker among fdod's workers "
                                     f"{[k for k, _ in workers]}")
            c.close()
        finally:
            d.cleanup()


class Containment(unittest.TestCase):
    """Crashing, looping and memory-hungry programs: clear errors, daemon unaffected."""

    def test_bad_programs_get_errors_and_others_carry_on(self):
        # The wall limit leaves a loaded 2-core CI host time for hog to reach its
        # memory limit (256 MiB of memset) before spin is cut off.
        d = Daemon({"exec_timeout_ms": 4000, "exec_memory_mb": 256}).start()
        try:
            c = d.client()
            pid = c.call("health")["pid"]
            bad = c.call("program.register", {"ir": ir("crash.ll")})["program"]
            good = c.call("program.register", {"ir": ir("branchy.ll")})["program"]
            stop = threading.Event()
            good_results, good_errors = [], []

            def well_behaved():
                g = d.client()
                while not stop.is_set():
                    try:
                        good_results.append(g.call("execute", {"program": good, "entry": "run"})["value"])
                    except Exception as e:  # noqa: BLE001
                        good_errors.append(repr(e))
                g.close()

            t = threading.Thread(target=well_behaved)
            t.start()
            expect = {
                "segv": ("crashed", "SIGSEGV"),
                "aborts": ("crashed", "SIGABRT"),
                "spin": ("timeout", "wall-time limit"),
                "hog": ("resource_exhausted", "memory"),
            }
            if os.environ.get("FDO_SANITIZE"):
                # A sanitizer runtime reserves terabytes of shadow address space and its
                # allocator aborts rather than failing: RLIMIT_AS cannot bound it there.
                print("sanitizer build: the memory-limit case (hog) is not checked", file=sys.stderr)
                del expect["hog"]
            try:
                for entry, (errc, text) in expect.items():
                    with self.assertRaises(RpcError, msg=entry) as cm:
                        c.call("execute", {"program": bad, "entry": entry})
                    self.assertEqual(cm.exception.errc, errc, f"{entry}: {cm.exception.message}")
                    self.assertIn(text, cm.exception.message, entry)
                    self.assertEqual(c.call("health")["pid"], pid)
            finally:
                # Also when a check fails: a looping client would keep the test alive.
                stop.set()
                t.join()
            self.assertEqual(good_errors, [])
            self.assertGreater(len(good_results), 0)
            self.assertEqual(len(set(good_results)), 1)
            unresolved = c.call("program.register", {"ir": ir("unresolved.ll")})["program"]
            with self.assertRaises(RpcError) as cm:
                c.call("execute", {"program": unresolved, "entry": "calls_missing"})
            self.assertEqual(cm.exception.errc, "link")
            self.assertIn("fdo_no_such_function", cm.exception.message)
            self.assertEqual(c.call("health")["pid"], pid)
        finally:
            d.cleanup()


    def test_worker_cgroups_cap_tasks_on_this_host(self):
        # Where fdod can give each worker a cgroup (cgroup v2, or the v1 memory and pids
        # hierarchies of a legacy or hybrid host such as CI's), a program that starts threads
        # past job_max_tasks is refused them while other programs carry on. The memory side
        # (page cache past the limit, killed by the kernel) is in worker_pool_test.
        if os.geteuid() != 0:
            self.skipTest("worker cgroups on this host need root")
        d = Daemon({"job_max_tasks": 12, "exec_memory_mb": 1024}).start()
        try:
            c = d.client()
            sandbox = c.call("capabilities")["sandbox"]
            cg = sandbox.get("cgroup")
            if cg is None or not cg["pids"]:
                self.skipTest("no pids limit for workers here: " +
                              (sandbox.get("cgroup_unavailable") or str(cg)))
            self.assertIn(cg["pids_version"], ("v1", "v2"))
            self.assertEqual(cg["pids_limit"], "pids.max")
            if cg["memory"]:
                self.assertIn(cg["memory_version"], ("v1", "v2"))
            pid = c.call("health")["pid"]
            threads = c.call("program.register", {"ir": ir("threads.ll")})["program"]
            good = c.call("program.register", {"ir": ir("branchy.ll")})["program"]
            expected = c.call("execute", {"program": good, "entry": "run"})["value"]
            for _ in range(3):
                started = c.call("execute", {"program": threads, "entry": "spawn",
                                             "args": [40]})["value"]
                self.assertGreater(started, 0)
                self.assertLess(started, 12)
                self.assertEqual(c.call("execute", {"program": good, "entry": "run"})["value"],
                                 expected)
            # Below the cap nothing is refused.
            self.assertEqual(c.call("execute", {"program": threads, "entry": "spawn",
                                                "args": [2]})["value"], 2)
            self.assertEqual(c.call("health")["pid"], pid)
        finally:
            d.cleanup()
        # The cap is the cgroup's: without worker cgroups the same call starts all 40.
        d = Daemon({"job_max_tasks": 12, "exec_memory_mb": 1024, "sandbox_cgroup": "off"}).start()
        try:
            c = d.client()
            threads = c.call("program.register", {"ir": ir("threads.ll")})["program"]
            self.assertEqual(c.call("execute", {"program": threads, "entry": "spawn",
                                                "args": [40]})["value"], 40)
        finally:
            d.cleanup()


class ConfigReload(unittest.TestCase):
    """SIGHUP re-reads --config: every key the table marks runtime takes effect, restart-only
    keys keep their running values, and each class of key is seen working."""

    # A new value for every key (socket and state_dir come from the command line, which is
    # re-applied on reload, so the file cannot move them).
    NEW = {
        "log_level": "debug", "max_request_bytes": 524288, "request_timeout_ms": 60000,
        "handler_threads": 7, "drain_timeout_ms": 20000, "compile_workers": 2, "compile_threads": 3,
        "compile_parts": 6, "compile_nice": 5,
        "exec_workers": 3,
        "gpu": "off", "gpu_driver": "/opt/nvidia/lib/libcuda.so.1", "gpu_workers": 2,
        "gpu_kernel_timeout_ms": 5000,
        "compile_timeout_ms": 50000, "exec_timeout_ms": 700, "compile_memory_mb": 1500,
        "exec_memory_mb": 400, "max_output_bytes": 33554432, "max_program_bytes": 16777216,
        "max_programs_per_uid": 500, "gc_max_age_days": 7,
        "memory_cache_bytes": 1048576, "disk_cache_bytes": 2097152, "tier_up": "async",
        "object_cache_remote": "redis://127.0.0.1:6390", "object_cache_remote_timeout_ms": 50,
        "object_cache_remote_max_entry_bytes": 1048576,
        "share_profiles_across_tenants": "true", "profile_retention": 7,
        "feedback_flush_ms": 250, "perf_events": "instructions,cycles",
        "policy.min_stages": 5, "policy.min_counts": 200, "policy.drift_threshold": 0.25,
        "policy.max_recompiles_per_hour": 3, "policy.branch_miss_unpredictable_rate": 0.3,
        "policy.icache_mpki_size_threshold": 25, "policy.time_share_drift_threshold": 0.4,
        "policy.time_share_window_stages": 4, "policy.time_share_min_samples": 80,
        "policy.branch_miss_min_samples": 33,
        "policy.icache_layout_min_samples": 44, "policy.icache_hot_share": 0.35,
        "sampling.events": "cpu-clock", "sampling.frequency_hz": 500, "sampling.max_samples": 900,
        "sandbox_filesystem": "mount_namespace",
        "sandbox_uid_base": 1879048193, "sandbox_uid_count": 65537, "job_output_bytes": 32768,
        "sandbox_cgroup": "off", "job_max_tasks": 128,
        "worker_retire_growth_mb": 32, "max_queued_jobs_per_uid": 16, "control_threads": 3,
        "max_connections_per_uid": 32, "max_inflight_per_uid": 8, "read_timeout_ms": 20000,
        "idle_timeout_ms": 300000, "write_timeout_ms": 20000, "max_unsent_bytes": 2097152,
        "metrics_listen": "127.0.0.1:9464",
        "guard": "off", "guard.min_stages": 30, "guard.tune_min_stages": 300,
        "guard.tune_max_variants": 2, "guard.min_pairs": 8, "guard.max_pairs": 30,
        "guard.keep_alpha": 0.02, "guard.reject_alpha": 0.1, "guard.min_effect": 0.02,
        "exec_object_cache_entries": 4,
        "guard.checkpoint_pairs": 2,
        "policy.cs_pgo_stages": 7,
        "guard.clock": "wall",
        "profile_store": "postgresql://fdo:pw@127.0.0.1:1/fdo", "host_name": "host-b",
        "profile_store_spool_max_bytes": 2097152,
        "max_running_compiles_per_uid": 1, "max_buffered_bytes_per_uid": 67108864,
        "compile_background_max_stopped_ms": 5000,
    }

    def test_sighup_applies_runtime_keys_and_keeps_restart_keys(self):
        d = Daemon({"exec_timeout_ms": 5000, "max_request_bytes": 1048576}).start()
        try:
            c = d.client()
            pid = c.call("health")["pid"]
            before = {k["name"]: k for k in c.call("config")["keys"]}
            self.assertEqual(set(before) - {"socket", "state_dir"}, set(self.NEW),
                             "every key needs a new value in this test")
            with open(d.config, "w") as f:
                for k, v in self.NEW.items():
                    f.write(f"{k} = {v}\n")
            os.kill(d.proc.pid, signal.SIGHUP)
            deadline = time.time() + 15
            after = before
            while time.time() < deadline:
                after = {k["name"]: k for k in c.call("config")["keys"]}
                if after["exec_timeout_ms"]["value"] == "700":
                    break
                time.sleep(0.05)
            for name, new in self.NEW.items():
                if before[name]["reload"] == "runtime":
                    if isinstance(new, float):
                        self.assertAlmostEqual(float(after[name]["value"]), new, msg=name)
                    else:
                        self.assertEqual(after[name]["value"], str(new), name)
                    self.assertNotEqual(after[name]["value"], before[name]["value"], name)
                else:
                    self.assertEqual(after[name]["value"], before[name]["value"], name)
            self.assertEqual(after["exec_timeout_ms"]["value"], "700")
            self.assertEqual(after["policy.min_stages"]["value"], "5")
            self.assertEqual(after["perf_events"]["value"], "instructions,cycles")

            # server limits: a line over the new max_request_bytes is refused.
            c.send_raw(b'{"jsonrpc":"2.0","id":2,"method":"health","params":"' + b"x" * 600000 + b'"}\n')
            resp = c.read_line()
            self.assertEqual(resp["error"]["code"], -32600, resp)
            # job limits: a looping program is stopped at the new exec timeout.
            bad = c.call("program.register", {"ir": ir("crash.ll")})["program"]
            t0 = time.time()
            with self.assertRaises(RpcError) as cm:
                c.call("execute", {"program": bad, "entry": "spin"})
            self.assertEqual(cm.exception.errc, "timeout")
            self.assertIn("700 ms", cm.exception.message)
            self.assertLess(time.time() - t0, 4.0)
            # service keys: what capabilities reports follows the reload.
            caps = c.call("capabilities")
            self.assertEqual(caps["tier_up"], "async")
            self.assertTrue(caps["share_profiles_across_tenants"])
            # feedback policy: min_stages 5 now, so four stages do not rewrite.
            prog = c.call("program.register", {"ir": ir("branchy.ll")})["program"]
            stages = [c.call("execute", {"program": prog, "entry": "run"})["stage"] for _ in range(4)]
            self.assertTrue(all(s["profile_rewritten"] is None for s in stages), stages)
            self.assertIn("(4 of 5)", stages[-1]["policy"])
            # restart-only keys: worker counts unchanged (the timed-out worker's replacement may
            # still be starting), and the log says why.
            deadline = time.time() + 10
            while time.time() < deadline and c.call("health")["workers"]["exec"] < 2:
                time.sleep(0.05)
            self.assertEqual(c.call("health")["workers"], {"compile": 1, "exec": 2})
            log = pathlib.Path(d.log_path).read_text(errors="replace")
            self.assertIn("exec_workers: 2 -> 3 ignored; 'exec_workers' only changes on restart", log)
            self.assertIn("config reload: exec_timeout_ms: 5000 -> 700", log)
            # log_level debug: connection lines now appear.
            c2 = d.client()
            c2.call("health")
            c2.close()
            deadline = time.time() + 5
            while time.time() < deadline and "closed:" not in pathlib.Path(d.log_path).read_text(errors="replace"):
                time.sleep(0.05)
            self.assertIn("closed:", pathlib.Path(d.log_path).read_text(errors="replace"))
            self.assertEqual(c.call("health")["pid"], pid)
            c.close()
        finally:
            d.cleanup()

    def test_a_broken_config_on_reload_changes_nothing(self):
        d = Daemon({"exec_timeout_ms": 5000}).start()
        try:
            c = d.client()
            with open(d.config, "a") as f:
                f.write("exec_timeout_ms = soon\n")
            os.kill(d.proc.pid, signal.SIGHUP)
            deadline = time.time() + 10
            while time.time() < deadline and "reload failed" not in d.log_text():
                time.sleep(0.05)
            self.assertIn("reload failed", d.log_text())
            keys = {k["name"]: k["value"] for k in c.call("config")["keys"]}
            self.assertEqual(keys["exec_timeout_ms"], "5000")
            c.close()
        finally:
            d.cleanup()


class BadInput(unittest.TestCase):
    def test_each_bad_input_gets_an_error_and_the_connection_survives(self):
        d = Daemon({"max_request_bytes": 65536}).start()
        try:
            c = d.client()

            def expect_error(raw, code):
                c.send_raw(raw)
                resp = c.read_line()
                self.assertIn("error", resp, resp)
                self.assertEqual(resp["error"]["code"], code, resp)
                self.assertEqual(c.call("health")["status"], "ok")
                return resp["error"]

            expect_error(b'{"jsonrpc":"2.0","id":1,"method":\n', -32700)
            expect_error(b'{"jsonrpc":"2.0","id":2,"method":"health","params":"' + b"x" * 70000 + b'"}\n', -32600)
            e = expect_error(b'{"jsonrpc":"2.0","id":3,"method":"no.such.method"}\n', -32601)
            self.assertIn("no.such.method", e["message"])
            e = expect_error(b'{"jsonrpc":"2.0","id":4,"method":"execute","params":{"entry":5}}\n', -32602)
            self.assertIn("entry", e["message"])
            for bad_ir, what in ((b"define i32 @f( {", "line"), (b"", "empty"),
                                 (b"define i32 @f() {\n  ret i64 0\n}\n", "")):
                req = {"jsonrpc": "2.0", "id": 9, "method": "program.register",
                       "params": {"ir": bad_ir.decode()}}
                c.send_raw(json.dumps(req).encode() + b"\n")
                resp = c.read_line()
                self.assertIn("error", resp, resp)
                self.assertIn(resp["error"]["data"]["code"], ("parse", "verify", "invalid_argument"))
                if what:
                    self.assertIn(what, resp["error"]["message"])
                self.assertEqual(c.call("health")["status"], "ok")
            with self.assertRaises(RpcError) as cm:
                c.call("execute", {"program": "0" * 64, "entry": "run"})
            self.assertEqual(cm.exception.errc, "not_found")
        finally:
            d.cleanup()


@unittest.skipUnless(os.geteuid() == 0, "needs root to run a client under a second uid")
class Tenancy(unittest.TestCase):
    def test_second_uid_cannot_read_or_rewrite_first_uids_profiles(self):
        d = Daemon().start()
        try:
            c = d.client()
            prog = c.call("program.register", {"ir": ir("branchy.ll")})["program"]
            stages = [c.call("execute", {"program": prog, "entry": "run"})["stage"] for _ in range(3)]
            pk = stages[0]["profile_key"]
            os.chown(d.socket, 0, 65534)
            os.chmod(d.tmp, 0o755)
            # The second tenant's client is self-contained: uid 65534 may not
            # read this checkout or the interpreter under /root.
            script = f"""
import json, socket
s = socket.socket(socket.AF_UNIX); s.connect({d.socket!r}); f = s.makefile("rwb")
def call(m, p, n=[0]):
    n[0] += 1
    f.write(json.dumps({{"jsonrpc": "2.0", "id": n[0], "method": m, "params": p}}).encode() + b"\\n"); f.flush()
    r = json.loads(f.readline())
    return r.get("result"), (r.get("error") or {{}}).get("data", {{}}).get("code")
out = {{}}
res, err = call("profile.list", {{}})
out["list"] = [p["profile_key"] for p in res["profiles"]]
for m, p in (("profile.get", {{"profile_key": {pk!r}}}), ("profile.pin", {{"profile_key": {pk!r}}}),
             ("profile.reset", {{"profile_key": {pk!r}}}), ("execute", {{"program": {prog!r}, "entry": "run"}}),
             ("cache.explain", {{"program": {prog!r}}})):
    res, err = call(m, p)
    out[m] = err or "allowed"
own, err = call("program.register", {{"ir": {ir("branchy.ll")!r}}})
out["own_program"] = own["program"]
out["own_pk"] = own["profile_key"]
print(json.dumps(out))
"""
            res = subprocess.run(["/usr/bin/python3", "-c", script], capture_output=True, text=True,
                                 user=65534, group=65534, extra_groups=[], timeout=60, cwd="/")
            self.assertEqual(res.returncode, 0, res.stderr)
            out = json.loads(res.stdout)
            self.assertEqual(out["list"], [])
            for m in ("profile.get", "profile.pin", "profile.reset", "execute", "cache.explain"):
                self.assertEqual(out[m], "not_found", m)
            self.assertNotEqual(out["own_program"], prog, "same IR, different tenant: different IK")
            self.assertNotEqual(out["own_pk"], pk)
            hist = c.call("profile.history", {"profile_key": pk})
            self.assertFalse(hist["pinned"])
            self.assertEqual(hist["current_version"], 1)
        finally:
            d.cleanup()


class KillDuringStream(unittest.TestCase):
    def test_sigkill_loses_no_reported_profile_version(self):
        d = Daemon({"policy.min_stages": 1, "policy.drift_threshold": 0.0}).start()
        try:
            reported = []
            c = d.client()
            progs = []
            for k in range(3):
                text = ir("branchy.ll").replace("200000", str(1000 + k))
                progs.append(c.call("program.register", {"ir": text})["program"])
            # Streams until the kill armed at the 12th stage ends the connection; the
            # deadline only bounds a daemon that never dies (a loaded host can take
            # seconds for 12 stages, and the kill must still land mid-stream).
            deadline = time.time() + 120
            i = 0
            try:
                while time.time() < deadline:
                    st = c.call("execute", {"program": progs[i % 3], "entry": "run"})["stage"]
                    if st["profile_rewritten"]:
                        reported.append((st["profile_key"], st["profile_rewritten"]["to"]))
                    i += 1
                    if i == 12:
                        threading.Timer(0.3, lambda: d.proc.send_signal(signal.SIGKILL)).start()
            except (ConnectionError, OSError, json.JSONDecodeError):
                pass
            d.proc.wait(10)
            self.assertEqual(d.proc.returncode, -signal.SIGKILL)
            self.assertGreater(len(reported), 0)
            db = sqlite3.connect(os.path.join(d.state_dir, "profiles.db"))
            self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
            db.close()
            d.start()
            c = d.client()
            for pk, version in reported:
                got = c.call("profile.get", {"profile_key": pk, "version": version})
                self.assertEqual(got["version"], version)
            c.close()
        finally:
            d.cleanup()


@unittest.skipUnless(shutil.which("systemd-socket-activate"), "systemd-socket-activate not installed")
class SocketActivation(unittest.TestCase):
    def test_fdod_serves_a_socket_passed_by_systemd(self):
        d = Daemon()
        proc = subprocess.Popen(
            ["systemd-socket-activate", "-l", d.socket, str(BUILD / "fdod"),
             "--state-dir", d.state_dir, "--config", d.config],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            # The socket file appears at bind(), a moment before listen():
            # a connection in between is refused. Retry until it listens.
            deadline = time.time() + 20
            while True:
                try:
                    # The first connection starts fdod, which adopts the listening socket.
                    c = Client(d.socket, timeout=60)
                    break
                except (FileNotFoundError, ConnectionRefusedError):
                    if time.time() > deadline:
                        raise
                    time.sleep(0.05)
            self.assertEqual(c.call("health")["status"], "ok")
            prog = c.call("program.register", {"ir": ir("branchy.ll")})["program"]
            self.assertIn("stage", c.call("execute", {"program": prog, "entry": "run"}))
            c.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            d.cleanup()
        self.assertEqual(proc.returncode, 0, proc.stderr.read().decode(errors="replace")[-2000:])


if __name__ == "__main__":
    # A missing prerequisite reads as skipped (tests/support/fdo_unittest.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fdo_unittest  # noqa: E402

    fdo_unittest.main("e2e")
