#!/usr/bin/env python3
"""Two fdod processes ("hosts") with their own state dirs sharing one real
redis-server as the remote object tier (object_cache_remote, docs/fleet.md):
the second host's first stage is served from what the first compiled; a
stopped Redis leaves stages working from the local tiers and compiles; a
corrupted Redis entry is a miss, recompiled and reported."""
import os
import pathlib
import sys
import time
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from harness import Daemon, ir  # noqa: E402
from servers import RedisServer, redis_unavailable_reason  # noqa: E402


def host(redis, **extra):
    config = {"object_cache_remote": redis.url, "object_cache_remote_timeout_ms": 200,
              "policy.min_stages": 1000}
    config.update(extra)
    return Daemon(config).start()


def variant(tag):
    """branchy.ll with a comment: other bytes (another IK), the same code."""
    return ir("branchy.ll") + f"\n; {tag}\n"


def execute(client, prog):
    return client.call("execute", {"program": prog, "entry": "run"})["stage"]["cache"]


def wait_for(pred, what, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


@unittest.skipIf(redis_unavailable_reason(), redis_unavailable_reason())
class RedisFleet(unittest.TestCase):
    def setUp(self):
        self.redis = RedisServer().start()
        self.daemons = []
        self.clients = []

    def tearDown(self):
        for c in self.clients:
            c.close()
        for d in self.daemons:
            d.cleanup()
        self.redis.cleanup()

    def hosts(self, n=2):
        for _ in range(n):
            self.daemons.append(host(self.redis))
        self.clients = [d.client() for d in self.daemons]
        return self.clients

    def test_second_host_first_stage_is_served_from_redis_without_compiling(self):
        a, b = self.hosts()
        prog = a.call("program.register", {"ir": ir("branchy.ll")})["program"]
        self.assertEqual(execute(a, prog)["outcome"], "compiled")
        wait_for(lambda: self.redis.keys(), "host A's write to Redis")

        self.assertEqual(b.call("program.register", {"ir": ir("branchy.ll")})["program"], prog)
        first = execute(b, prog)
        self.assertEqual(first["outcome"], "remote_hit", first)
        self.assertEqual(first["reason"], "virtual_first_stage")
        self.assertIn("remote tier", first["detail"])
        self.assertEqual(execute(b, prog)["outcome"], "memory_hit")

        stats = b.call("cache.stats")
        self.assertEqual(stats["compiles"], 0, stats)
        self.assertEqual(stats["remote"]["hits"], 1, stats)
        self.assertEqual(stats["remote"]["state"], "up")
        records = b.call("cache.explain", {"program": prog})["records"]
        self.assertEqual([r["outcome"] for r in records], ["remote_hit", "memory_hit"])
        health = b.call("health")
        self.assertEqual(health["object_cache_remote"]["state"], "up")
        self.assertEqual(health["object_cache_remote"]["endpoint"], self.redis.url)
        caps = b.call("capabilities")
        self.assertEqual(caps["object_cache_remote"]["timeout_ms"], 200)
        metrics = b.call("metrics")["text"]
        self.assertIn('fdo_cache_remote_lookups_total{result="hit"} 1', metrics)
        self.assertIn("fdo_cache_remote_up 1", metrics)
        self.assertIn('fdo_stage_cache_outcomes_total{outcome="remote_hit"} 1', metrics)

    def test_redis_stopped_mid_run_stages_keep_succeeding(self):
        a, b = self.hosts()
        prog = a.call("program.register", {"ir": ir("branchy.ll")})["program"]
        self.assertEqual(execute(a, prog)["outcome"], "compiled")
        wait_for(lambda: self.redis.keys(), "host A's write to Redis")
        self.redis.stop()

        # A keeps serving from its own tiers; B compiles and says why.
        self.assertEqual(execute(a, prog)["outcome"], "memory_hit")
        b.call("program.register", {"ir": ir("branchy.ll")})
        t0 = time.monotonic()
        st = execute(b, prog)
        self.assertEqual(st["outcome"], "compiled", st)
        self.assertIn("remote tier unavailable", st["detail"])
        self.assertEqual(execute(b, prog)["outcome"], "memory_hit")
        health = b.call("health")["object_cache_remote"]
        self.assertEqual(health["state"], "down", health)
        self.assertNotEqual(health["last_error"], "")
        self.assertIn("fdo_cache_remote_up 0", b.call("metrics")["text"])
        other = a.call("program.register", {"ir": variant("second")})["program"]
        self.assertEqual(execute(a, other)["outcome"], "compiled")
        self.assertLess(time.monotonic() - t0, 60)

        # Back: after the backoff the tier answers again and new compiles land in it.
        self.redis.start()  # empty: no persistence
        tries = iter(range(1000))

        def recovered():
            # Only a lookup that misses the local tiers asks Redis: a new program.
            fresh = a.call("program.register", {"ir": variant(f"third-{next(tries)}")})["program"]
            self.assertEqual(execute(a, fresh)["outcome"], "compiled")
            return a.call("health")["object_cache_remote"]["state"] == "up"
        wait_for(recovered, "host A to reconnect to Redis", timeout=30)
        fourth = a.call("program.register", {"ir": variant("fourth")})["program"]
        self.assertEqual(execute(a, fourth)["outcome"], "compiled")
        wait_for(lambda: self.redis.keys(), "a write after Redis came back")

    def test_corrupted_redis_entry_is_a_miss_recompiled_and_reported(self):
        a, b = self.hosts()
        prog = a.call("program.register", {"ir": ir("branchy.ll")})["program"]
        execute(a, prog)
        [key] = wait_for(lambda: self.redis.keys(), "host A's write to Redis")
        good = self.redis.command("GET", key)
        damaged = bytearray(good)
        damaged[-10] ^= 0x01
        self.redis.command("SET", key, bytes(damaged))

        b.call("program.register", {"ir": ir("branchy.ll")})
        st = execute(b, prog)
        self.assertEqual(st["outcome"], "compiled", st)
        self.assertEqual(st["reason"], "corrupt_in_remote", st)
        self.assertIn("was not used", st["detail"])
        stats = b.call("cache.stats")
        self.assertEqual(stats["remote"]["corrupt"], 1, stats)
        self.assertEqual(stats["compiles"], 1)
        self.assertIn('fdo_cache_remote_lookups_total{result="corrupt"} 1', b.call("metrics")["text"])
        # B's compile overwrote the damaged entry for every host.
        wait_for(lambda: self.redis.command("GET", key) != bytes(damaged), "B's rewrite")


if __name__ == "__main__":
    # A missing prerequisite reads as skipped (tests/support/fdo_unittest.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fdo_unittest  # noqa: E402

    fdo_unittest.main("fleet redis")
