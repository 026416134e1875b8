#!/usr/bin/env python3
"""The profile store as fdod sees it (docs/fleet.md, "When the profile store is
down"; docs/fdod-config.md, "Profile store keys"): a malformed profile_store is
refused at start with a clear error that never shows a password; health and
capabilities report the store; every feedback row and history entry carries
this host's name (host_name). A server that answers but refuses the
credentials or the database stops fdod at start, naming the problem."""
import os
import pathlib
import subprocess
import sys
import time
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from harness import Daemon, RpcError, ir  # noqa: E402
from servers import PG_BIN, PostgresServer, postgres_unavailable_reason  # noqa: E402


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


def wait_for(pred, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


class PostgresDaemon(unittest.TestCase):
    """One fdod (host-a) on a PostgreSQL server of its own (no tests here)."""

    START_SERVER = True
    CONFIG = {}

    def setUp(self):
        self.pg = PostgresServer()
        if self.START_SERVER:
            self.pg.start()
        self.d = Daemon(dict({"profile_store": self.pg.url, "host_name": "host-a",
                              "policy.min_stages": 2, "feedback_flush_ms": 100},
                             **self.CONFIG)).start()
        self.c = self.d.client()

    def tearDown(self):
        self.c.close()
        self.d.cleanup()
        self.pg.cleanup()

    def store(self):
        return self.c.call("health")["profile_store"]


@unittest.skipIf(postgres_unavailable_reason(), postgres_unavailable_reason())
class PostgresOutage(PostgresDaemon):
    """fdod on a real PostgreSQL store: the server stopped mid-stream, stages
    keep succeeding, and after its restart the spooled rows and versions
    arrive, none lost or duplicated."""

    def stages_in_store(self, pk, version):
        out = self.pg.psql(f"SELECT coalesce(sum(stages), 0) FROM feedback "
                           f"WHERE pk = '{pk}' AND version = {version} AND host = 'host-a'")
        return int(out.strip() or 0)

    def test_stages_keep_succeeding_and_the_spool_is_replayed_once(self):
        ps = self.store()
        self.assertEqual(ps["kind"], "postgresql")
        prog = self.c.call("program.register", {"ir": ir("branchy.ll")})["program"]
        run = lambda: self.c.call("execute", {"program": prog, "entry": "run"})  # noqa: E731
        first = [run() for _ in range(3)]
        pk = first[0]["stage"]["profile_key"]
        self.assertEqual(sum(1 for r in first if r["stage"]["profile_rewritten"]), 1)
        wait_for(lambda: self.stages_in_store(pk, 1) == 1, "v1's stage rows in PostgreSQL")
        self.assertEqual(self.store()["state"], "up")

        self.pg.stop()
        during = [run() for _ in range(4)]
        self.assertEqual({r["value"] for r in during}, {first[0]["value"]})
        wait_for(lambda: self.store()["state"] == "down", "state down")
        wait_for(lambda: self.store()["spooled_batches"] >= 1, "feedback spooled")

        self.pg.start()
        wait_for(lambda: self.store()["state"] == "up", "state up after the restart", 90)
        ps = self.store()
        self.assertEqual(ps["spooled_batches"] + ps["spooled_writes"] + ps["spooled_other"], 0)
        # Every stage run at v1 is in the store exactly once: 1 before, 4 during.
        try:
            wait_for(lambda: self.stages_in_store(pk, 1) >= 5, "the spooled rows", 20)
        except AssertionError:  # say where the rows went
            print("TABLE", self.pg.psql("SELECT pk, version, host, stages FROM feedback"), "METRICS", [l for l in self.c.call("metrics")["text"].splitlines() if "profile_store" in l and not l.startswith("#")])
            raise
        time.sleep(0.5)
        self.assertEqual(self.stages_in_store(pk, 1), 5, self.d.log_text())
        metrics = self.c.call("metrics")["text"]
        self.assertIn("fdo_profile_store_up 1", metrics)


@unittest.skipIf(postgres_unavailable_reason(), postgres_unavailable_reason())
class PostgresDownAtStart(PostgresDaemon):
    """fdod started while its PostgreSQL server is down: it starts and serves
    (health says the store is down), spools what it writes, and when the
    server comes up it migrates the schema and replays the spool once. Admin
    writes, which go to the store itself, fail meanwhile with an unavailable
    error that says what to do."""

    START_SERVER = False  # initialised, not started
    CONFIG = {"guard": "off"}  # stage by stage: no trials of the plain build

    def test_starts_serves_spools_and_replays_once_when_the_server_comes_up(self):
        self.assertEqual(self.store()["kind"], "postgresql")
        prog = self.c.call("program.register", {"ir": ir("branchy.ll")})["program"]
        stages = [self.c.call("execute", {"program": prog, "entry": "run"})["stage"]
                  for _ in range(5)]
        pk = stages[0]["profile_key"]
        # The host profiles and optimizes on its own, through the spool.
        self.assertEqual([s["profile_version"] for s in stages], [0, 0, 1, 1, 1])
        self.assertEqual(stages[1]["profile_rewritten"]["to"], 1)
        self.assertEqual(stages[2]["mode"], "optimized")
        wait_for(lambda: self.store()["spooled_batches"] >= 1, "feedback spooled")
        ps = self.store()
        self.assertEqual(ps["state"], "down", ps)
        self.assertIn("unreachable", ps["last_error"])
        self.assertGreaterEqual(ps["spooled_writes"], 1, ps)
        self.assertIn("fdo_profile_store_up 0", self.c.call("metrics")["text"])

        # An admin write goes to the store itself: refused, saying what to do.
        with self.assertRaises(RpcError) as cm:
            self.c.call("profile.pin", {"profile_key": pk})
        self.assertEqual(cm.exception.errc, "unavailable", cm.exception.error)
        self.assertIn("profile.pin needs the shared profile store", cm.exception.message)
        self.assertIn("fdoctl health", cm.exception.message)

        self.pg.start()
        wait_for(lambda: self.store()["state"] == "up", "state up once the server answers", 90)
        ps = self.store()
        self.assertEqual(ps["spooled_batches"] + ps["spooled_writes"] + ps["spooled_other"], 0)
        # The schema was created on the first connection, then the spool arrived, once.
        self.assertNotEqual(self.pg.psql("SELECT version FROM fdo_schema").strip(), "")
        self.assertEqual(self.pg.psql(f"SELECT version, host FROM profile_versions "
                                      f"WHERE pk = '{pk}'").split(), ["1|host-a"])
        self.assertEqual(self.pg.psql(f"SELECT count(*) FROM profile_keys WHERE pk = '{pk}'").strip(),
                         "1")
        rows = f"SELECT coalesce(sum(stages), 0) FROM feedback WHERE pk = '{pk}' AND version = 1"
        wait_for(lambda: int(self.pg.psql(rows).strip()) >= 3, "the spooled rows", 20)
        time.sleep(0.5)
        self.assertEqual(int(self.pg.psql(rows).strip()), 3, self.d.log_text())
        # Admin writes work again.
        self.assertTrue(self.c.call("profile.pin", {"profile_key": pk})["pinned"])


@unittest.skipIf(postgres_unavailable_reason(), postgres_unavailable_reason())
class PostgresRefusesCredentials(unittest.TestCase):
    """A wrong password or a missing database is a configuration error, not an
    outage: fdod does not start and spool for ever, it exits saying what is
    wrong (docs/fleet.md, "When the profile store is down"), without the
    password."""

    ROLE = "fdo_e2e_pw"

    def setUp(self):
        self.pg = PostgresServer().start()
        self.pg.psql(f"CREATE ROLE {self.ROLE} LOGIN PASSWORD 'right-pw'")
        self.pg.psql(f"CREATE DATABASE fdo_e2e OWNER {self.ROLE}")
        # Password authentication for the role, ahead of the cluster's trust rule.
        hba = os.path.join(self.pg.data, "pg_hba.conf")
        with open(hba) as f:
            rules = f.read()
        with open(hba, "w") as f:
            f.write(f"local all {self.ROLE} scram-sha-256\n" + rules)
        self.pg.psql("SELECT pg_reload_conf()")
        wait_for(lambda: not self.connects("wrong-pw"), "the server to ask for the password", 20)
        self.assertTrue(self.connects("right-pw"))

    def tearDown(self):
        self.pg.cleanup()

    def connects(self, password):
        r = subprocess.run(self.pg.as_user + [os.path.join(PG_BIN, "psql"), "-h", self.pg.dir,
                                              "-U", self.ROLE, "-d", "fdo_e2e", "-Atc", "SELECT 1"],
                           env=dict(os.environ, PGPASSWORD=password),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return r.returncode == 0

    def url(self, password, db="fdo_e2e"):
        from urllib.parse import quote
        return f"postgresql://{self.ROLE}:{password}@{quote(self.pg.dir, safe='')}/{db}"

    def refused(self, url, *expected):
        d = Daemon({"profile_store": url, "host_name": "host-a"})
        try:
            with self.assertRaises(RuntimeError, msg=url) as cm:
                d.start()
            text = str(cm.exception)
            for e in expected:
                self.assertIn(e, text)
            self.assertIn(self.pg.dir, text, "the message names the server")
            self.assertNotIn("wrong-pw", text)
            self.assertNotIn("right-pw", text)
            self.assertNotIn("wrong-pw", d.log_text())
        finally:
            d.cleanup()

    def test_wrong_password_and_missing_database_stop_fdod_at_start(self):
        self.refused(self.url("wrong-pw"), "refused the credentials", "SQLSTATE 28P01",
                     "password authentication failed")
        self.refused(self.url("right-pw", "fdo_no_such_db"), "database does not exist",
                     "SQLSTATE 3D000")
        # The right ones: fdod starts on the store and creates its schema.
        d = Daemon({"profile_store": self.url("right-pw"), "host_name": "host-a"}).start()
        c = d.client()
        try:
            prog = c.call("program.register", {"ir": ir("branchy.ll")})["program"]
            c.call("execute", {"program": prog, "entry": "run"})
            ps = c.call("health")["profile_store"]
            self.assertEqual(ps["state"], "up", ps)
            self.assertEqual(ps["last_error"], "", ps)
        finally:
            c.close()
            d.cleanup()


if __name__ == "__main__":
    # A missing prerequisite reads as skipped (tests/support/fdo_unittest.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fdo_unittest  # noqa: E402

    fdo_unittest.main("fleet store")
