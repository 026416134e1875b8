#!/usr/bin/env python3
"""Three fdod processes ("hosts" host-a, host-b, host-c: own state dirs, sockets
and host names) sharing one real PostgreSQL profile store and one real Redis
object tier (docs/fleet.md; issue 19's three-host test):

- host A profiles and optimizes a program;
- host B's first stage of it runs A's optimized build, served from Redis
  without compiling;
- a rewrite after version 1 counts every host's feedback rows: the policy's
  path from v1 to v2 is the context-sensitive round (policy.cs_pgo_stages,
  docs/perf.md): v1 is the round's build, whose stages produce rows on every
  host that runs it, and v2 is made from the fleet's rows of that round;
- three hosts rewriting one profile at once leave a linear history (versions
  1..N, each written by exactly one stage's rewrite, none lost).

Version-0 (instrumented) stages write no rows, so the first profile is always
the counts of one host: the fleet's rows first meet at version 1.

The guard is off: its plain build ahead would compile in the background and
blur "no compile on host B" (the guard is tested in test_guard.py)."""
import os
import json
import pathlib
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from harness import BUILD, Daemon, ir, wait_for  # noqa: E402
from servers import (PostgresServer, RedisServer, postgres_unavailable_reason,  # noqa: E402
                     redis_unavailable_reason)

CS_STAGES = 3  # policy.cs_pgo_stages: stages of version 1 before version 2


def unavailable_reason():
    return postgres_unavailable_reason() or redis_unavailable_reason()


def program(n):
    """branchy.ll with another trip count: its own profile key (canonical IR)."""
    return ir("branchy.ll").replace("i64 200000", f"i64 {200000 + n}")


@unittest.skipIf(unavailable_reason(), unavailable_reason())
class ThreeHosts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pg = PostgresServer().start()
        cls.redis = RedisServer().start()
        cls.daemons = {}
        try:
            for name in ["host-a", "host-b", "host-c"]:
                cls.daemons[name] = Daemon({
                    "profile_store": cls.pg.url, "object_cache_remote": cls.redis.url,
                    "object_cache_remote_timeout_ms": 2000, "host_name": name,
                    "policy.min_stages": 2, "policy.cs_pgo_stages": CS_STAGES,
                    "guard": "off", "feedback_flush_ms": 200}).start()
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for d in cls.daemons.values():
            d.cleanup()
        cls.redis.cleanup()
        cls.pg.cleanup()

    def setUp(self):
        self.clients = {name: d.client() for name, d in self.daemons.items()}
        self.a, self.b, self.c = (self.clients[n] for n in ["host-a", "host-b", "host-c"])

    def tearDown(self):
        for c in self.clients.values():
            c.close()

    # --- helpers

    @staticmethod
    def run_stage(client, prog):
        return client.call("execute", {"program": prog, "entry": "run"})["stage"]

    @staticmethod
    def settled_stats(client):
        """cache.stats once two reads 0.3 s apart agree (no compile in flight)."""
        last = None
        for _ in range(100):
            s = client.call("cache.stats")
            if last is not None and s["compiles"] == last["compiles"] and \
                    s["remote"] == last["remote"]:
                return s
            last = s
            time.sleep(0.3)
        raise AssertionError("cache.stats never settled")

    def feedback_rows(self, pk, version):
        """{host: stages} of the store's feedback rows for (pk, version)."""
        out = self.pg.psql(f"SELECT host, sum(stages) FROM feedback WHERE pk = '{pk}' "
                           f"AND version = {version} GROUP BY host ORDER BY host")
        return {line.split("|")[0]: int(line.split("|")[1]) for line in out.split()}

    def store_history(self, pk):
        """`fdoctl --store URL --offline --json profile history PK`: the store's own view."""
        r = subprocess.run([str(BUILD / "fdoctl"), "--store", self.pg.url, "--offline",
                            "--json", "profile", "history", pk],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        return json.loads(r.stdout)

    def flushed(self, client):
        """Waits until this host's feedback reached the store (health shows nothing spooled)."""
        wait_for(lambda: client.call("health")["profile_store"]["state"] == "up", "store up")

    # --- the tests

    def test_host_b_first_stage_runs_host_a_optimized_build_from_redis(self):
        prog = self.a.call("program.register", {"ir": program(1)})["program"]
        modes = []
        for _ in range(4 + CS_STAGES):
            st = self.run_stage(self.a, prog)
            modes.append((st["mode"], st["profile_version"]))
            if st["mode"] == "optimized":
                break
        # Instrumented stages, v1 (the context-sensitive round), then optimized at v2.
        self.assertEqual(modes, [("instrumented", 0)] * 2 + [("cs_instrumented", 1)] * CS_STAGES +
                         [("optimized", 2)], modes)
        optimized = st
        key = "fdo:obj:" + optimized["storage_key"]
        wait_for(lambda: self.redis.command("EXISTS", key) == 1, "A's optimized build in Redis")

        before = self.settled_stats(self.b)
        self.assertEqual(self.b.call("program.register", {"ir": program(1)})["program"], prog)
        first = self.run_stage(self.b, prog)
        self.assertEqual(first["mode"], "optimized", first)
        self.assertEqual(first["profile_version"], 2)
        self.assertEqual(first["profile_key"], optimized["profile_key"])
        self.assertEqual(first["storage_key"], optimized["storage_key"])
        self.assertEqual(first["cache"]["outcome"], "remote_hit", first["cache"])
        after = self.settled_stats(self.b)
        self.assertEqual(after["compiles"] - before["compiles"], 0, (before, after))
        self.assertEqual(after["remote"]["hits"] - before["remote"]["hits"], 1, after)
        records = self.b.call("cache.explain", {"program": prog})["records"]
        self.assertEqual([r["outcome"] for r in records], ["remote_hit"])
        # The same code answers the same value on both hosts.
        va = self.a.call("execute", {"program": prog, "entry": "run"})["value"]
        vb = self.b.call("execute", {"program": prog, "entry": "run"})["value"]
        self.assertEqual(va, vb)

    def test_the_rewrite_after_version_1_counts_every_hosts_rows(self):
        prog = self.a.call("program.register", {"ir": program(2)})["program"]
        stages = [self.run_stage(self.a, prog) for _ in range(2)]
        self.assertEqual(stages[1]["profile_rewritten"]["to"], 1, stages[1])
        pk = stages[0]["profile_key"]
        self.assertEqual(self.feedback_rows(pk, 0), {}, "version-0 stages write no rows")

        # One stage of version 1 on host A, then on host B, each flushed to the store.
        for name in ["host-a", "host-b"]:
            client = self.clients[name]
            client.call("program.register", {"ir": program(2)})
            st = self.run_stage(client, prog)
            self.assertEqual((st["mode"], st["profile_version"]), ("cs_instrumented", 1), st)
            self.assertIsNone(st["profile_rewritten"], (name, st["policy"], self.feedback_rows(pk, 1)))
            self.assertIn("waiting for context-sensitive stages", st["policy"])
            wait_for(lambda: name in self.feedback_rows(pk, 1), f"{name}'s row in PostgreSQL")

        # Host C's first stage of the program completes the round on the fleet's rows.
        self.c.call("program.register", {"ir": program(2)})
        st = self.run_stage(self.c, prog)
        self.assertEqual(st["profile_version"], 1, st)
        rw = st["profile_rewritten"]
        self.assertIsNotNone(rw, st["policy"])
        self.assertEqual((rw["from"], rw["to"]), (1, 2), rw)
        self.assertIn(f"context-sensitive counts from {CS_STAGES} stages", rw["reason"])
        hist = self.c.call("profile.history", {"profile_key": pk})
        v2 = hist["versions"][-1]
        self.assertEqual((v2["version"], v2["host"]), (2, "host-c"), v2)
        self.assertIn("evidence from hosts host-a (1 stage), host-b (1 stage), "
                      "host-c (1 stage)", v2["reason"])
        self.assertIn("evidence from host host-a (2 stages)", hist["versions"][-2]["reason"])
        wait_for(lambda: "host-c" in self.feedback_rows(pk, 1), "host C's row in PostgreSQL")
        self.assertEqual(self.feedback_rows(pk, 1), {"host-a": 1, "host-b": 1, "host-c": 1})
        # Host A learns of C's rewrite without asking: its next stage compiles v2.
        wait_for(lambda: self.run_stage(self.a, prog)["profile_version"] == 2,
                 "host A to run version 2", 20)

    def test_concurrent_rewrites_leave_a_linear_history(self):
        prog = self.a.call("program.register", {"ir": program(3)})["program"]
        for name in ["host-b", "host-c"]:
            self.clients[name].call("program.register", {"ir": program(3)})
        results = {name: [] for name in self.clients}
        errors = []
        go = threading.Barrier(len(self.clients))

        def drive(name):
            try:
                go.wait()
                for _ in range(3 + CS_STAGES):
                    results[name].append(self.run_stage(self.clients[name], prog))
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(f"{name}: {e!r}")

        threads = [threading.Thread(target=drive, args=(n,)) for n in self.clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        pk = results["host-a"][0]["profile_key"]
        written = {}  # version -> host whose stage wrote it
        for name, stages in results.items():
            for st in stages:
                self.assertEqual(st["profile_key"], pk)
                rw = st["profile_rewritten"]
                if rw:
                    self.assertNotIn(rw["to"], written, f"version {rw['to']} written twice")
                    self.assertEqual(rw["to"], rw["from"] + 1, rw)
                    written[rw["to"]] = name
        for name in self.clients:
            self.flushed(self.clients[name])

        hist = self.store_history(pk)
        versions = [v["version"] for v in hist["versions"]]
        self.assertGreaterEqual(len(versions), 1)
        self.assertEqual(versions, list(range(1, len(versions) + 1)), "a linear history")
        self.assertEqual(hist["current_version"], versions[-1])
        # Every acknowledged rewrite is in the history, by the host that made it,
        # and the history holds nothing no stage reported: no lost update.
        self.assertEqual(sorted(written), versions, (written, hist["versions"]))
        for v in hist["versions"]:
            self.assertEqual(v["host"], written[v["version"]], v)
        print(f"\nconcurrent rewrites: versions {versions} by "
              f"{[written[v] for v in versions]}", file=sys.stderr)


if __name__ == "__main__":
    # A missing prerequisite reads as skipped (tests/support/fdo_unittest.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fdo_unittest  # noqa: E402

    fdo_unittest.main("fleet three hosts")
