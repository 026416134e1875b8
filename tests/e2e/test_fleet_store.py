#!/usr/bin/env python3
"""The profile store as fdod sees it (docs/fleet.md, "When the profile store is
down"; docs/fdod-config.md, "Profile store keys"): a malformed profile_store is
refused at start with a clear error that never shows a password; health and
capabilities report the store; every feedback row and history entry carries
this host's name (host_name)."""
import pathlib
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from harness import Daemon, ir  # noqa: E402
from servers import PostgresServer, postgres_unavailable_reason  # noqa: E402


class ProfileStoreSelection(unittest.TestCase):
    def test_malformed_profile_store_is_refused_at_start_without_the_password(self):
        for bad in ["mysql://fdo:hunter2@db/fdo", "postgresql://fdo:hunter2@db/f do",
                    "/var/lib/fdod/other.db"]:
            d = Daemon({"profile_store": bad})
            try:
                with self.assertRaises(RuntimeError, msg=bad) as cm:
                    d.start()
                text = str(cm.exception)
                self.assertIn("profile_store", text)
                self.assertIn("postgresql://", text, "the error says what is accepted")
                self.assertNotIn("hunter2", text)
                self.assertNotIn("hunter2", d.log_text())
            finally:
                d.cleanup()

    def test_default_store_and_host_name_in_health_rows_and_history(self):
        d = Daemon({"host_name": "host-x", "policy.min_stages": 2}).start()
        c = d.client()
        try:
            health = c.call("health")
            self.assertEqual(health["host"], "host-x")
            ps = health["profile_store"]
            self.assertEqual(ps["kind"], "sqlite")
            self.assertEqual(ps["state"], "up")
            self.assertTrue(ps["location"].endswith("/profiles.db"), ps)
            self.assertEqual(ps["spooled_batches"] + ps["spooled_writes"], 0)
            caps = c.call("capabilities")
            self.assertEqual(caps["profile_store"]["kind"], "sqlite")
            self.assertEqual(caps["host"], "host-x")
            metrics = c.call("metrics")["text"]
            self.assertIn("fdo_profile_store_up 1", metrics)

            prog = c.call("program.register", {"ir": ir("branchy.ll")})["program"]
            stages = [c.call("execute", {"program": prog, "entry": "run"})["stage"]
                      for _ in range(3)]
            rw = [s for s in stages if s["profile_rewritten"]]
            self.assertEqual(len(rw), 1, [s["policy"] for s in stages])
            hist = c.call("profile.history", {"profile_key": stages[0]["profile_key"]})
            v1 = hist["versions"][-1]
            self.assertEqual(v1["host"], "host-x")
            self.assertIn("evidence from host host-x (2 stages)", v1["reason"])
        finally:
            c.close()
            d.cleanup()


@unittest.skipIf(postgres_unavailable_reason(), postgres_unavailable_reason())
class PostgresFixture(unittest.TestCase):
    """servers.PostgresServer, which the fleet tests over a real PostgreSQL use."""

    def test_starts_answers_and_keeps_its_data_across_a_restart(self):
        pg = PostgresServer().start()
        try:
            self.assertTrue(pg.url.startswith("postgresql://postgres@%2F"), pg.url)
            pg.psql("CREATE TABLE t (v int); INSERT INTO t VALUES (42)")
            pg.stop()
            with self.assertRaises(RuntimeError):
                pg.psql("SELECT 1")
            pg.start()
            self.assertEqual(pg.psql("SELECT v FROM t").strip(), "42")
        finally:
            pg.cleanup()


if __name__ == "__main__":
    unittest.main()
