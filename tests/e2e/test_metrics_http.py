#!/usr/bin/env python3
"""The Prometheus endpoint (metrics_listen): a real fdod serving
http://127.0.0.1:PORT/metrics, scraped with a plain HTTP client (urllib) and
parsed as Prometheus text exposition; its figures are the `metrics` method's.
Also: a bad metrics_listen exits 2, a port in use exits 1.

Run through CTest (tests/e2e/CMakeLists.txt) or directly:
  FDO_BUILD_DIR=build python3 tests/e2e/test_metrics_http.py [-v]"""
import sys
import json
import math
import os
import pathlib
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("FDO_BUILD_DIR", ROOT / "build")).resolve()
FDOD, FDOCTL = BUILD / "fdod", BUILD / "fdoctl"
INTERP = BUILD / "examples" / "interp.ll"

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text):
    """{(name, ((label, value), ...)): float}, and {family: type}; raises on
    any line that is not valid text exposition."""
    samples, types = {}, {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            if kind not in ("counter", "gauge", "histogram", "summary", "untyped"):
                raise ValueError(f"line {n}: bad type {kind!r}")
            types[name] = kind
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise ValueError(f"line {n}: not a sample: {line!r}")
        name, labels, value = m.group(1), m.group(3) or "", m.group(4)
        pairs = tuple(sorted(LABEL.findall(labels)))
        if labels and LABEL.sub("", labels).replace(",", "").strip():
            raise ValueError(f"line {n}: bad labels {labels!r}")
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in types else name
        if family not in types and name not in types:
            raise ValueError(f"line {n}: {name} has no # TYPE")
        samples[(name, pairs)] = float(value.replace("+Inf", "inf"))
    return samples, types


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MetricsHttp(unittest.TestCase):
    def setUp(self):
        for f in (FDOD, FDOCTL, INTERP):
            if not f.exists():
                self.skipTest(f"{f} is not built")
        self.tmp = tempfile.mkdtemp(prefix="fdo-metrics-http-")
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, listen, name="a"):
        sock = os.path.join(self.tmp, f"{name}.sock")
        conf = os.path.join(self.tmp, f"{name}.conf")
        with open(conf, "w") as f:
            f.write("compile_workers = 1\nexec_workers = 1\ntier_up = sync\n"
                    "policy.min_stages = 2\npolicy.min_counts = 100\n"
                    f"metrics_listen = {listen}\n")
        with open(os.path.join(self.tmp, f"{name}.log"), "wb") as log:
            p = subprocess.Popen([str(FDOD), "--config", conf, "--socket", sock,
                                  "--state-dir", os.path.join(self.tmp, f"{name}-state")],
                                 stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p, sock, os.path.join(self.tmp, f"{name}.log")

    def wait_socket(self, p, sock, log):
        deadline = time.time() + 60
        while time.time() < deadline:
            if p.poll() is not None:
                self.fail(f"fdod exited {p.returncode}: {pathlib.Path(log).read_text()[-3000:]}")
            if os.path.exists(sock):
                return
            time.sleep(0.05)
        self.fail("fdod did not start")

    def scrape(self, port):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            self.assertEqual(r.status, 200)
            self.assertIn("text/plain", r.headers.get("Content-Type", ""))
            return r.read().decode()

    def test_scrape_parse_and_agree_with_the_rpc(self):
        port = free_port()
        p, sock, log = self.start(str(port))
        self.wait_socket(p, sock, log)
        before, types = parse_prometheus(self.scrape(port))
        self.assertEqual(types["fdo_stage_duration_seconds"], "histogram")
        self.assertEqual(types["fdo_stages_total"], "counter")
        build = [v for (n, _), v in before.items() if n == "fdo_build_info"]
        self.assertEqual(build, [1.0])
        self.assertEqual(before[("fdo_stages_total", ())], 0)

        r = subprocess.run([str(FDOCTL), "--socket", sock, "run", str(INTERP), "--entry",
                            "interp_run", "--stages", "3"], capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        text = self.scrape(port)
        after, _ = parse_prometheus(text)
        self.assertEqual(after[("fdo_stages_total", ())], 3)
        self.assertEqual(after[("fdo_stage_duration_seconds_count", ())], 3)
        self.assertEqual(after[("fdo_exec_duration_seconds_count", ())], 3)
        self.assertGreaterEqual(after[("fdo_compile_duration_seconds_count", ())], 1)
        self.assertGreater(after[("fdo_stage_duration_seconds_sum", ())], 0)
        buckets = sorted(((float(dict(l)["le"].replace("+Inf", "inf")), v)
                          for (n, l), v in after.items()
                          if n == "fdo_stage_duration_seconds_bucket"))
        self.assertTrue(math.isinf(buckets[-1][0]))
        self.assertEqual(buckets[-1][1], 3)
        self.assertEqual([v for _, v in buckets], sorted(v for _, v in buckets),
                         "histogram buckets are cumulative")
        outcomes = {dict(l)["outcome"]: v for (n, l), v in after.items()
                    if n == "fdo_stage_cache_outcomes_total"}
        self.assertEqual(sum(outcomes.values()), 3, outcomes)
        self.assertGreaterEqual(outcomes["compiled"], 1)
        decisions = {dict(l)["decision"]: v for (n, l), v in after.items()
                     if n == "fdo_policy_decisions_total"}
        self.assertEqual(sum(decisions.values()), 3)
        self.assertIn(("fdo_tier_ups_total", (("result", "installed"),)), after)
        # One source of truth: the RPC's text has the same figures. fdod keeps
        # compiling in the background after the last stage (the plain build
        # ahead of a guard trial), so the counters may move between two reads:
        # compare an RPC read taken between two scrapes that agree with each
        # other. The counters only grow, so the RPC must then equal both.
        keys = (("fdo_stages_total", ()), ("fdo_cache_compiles_total", ()),
                ("fdo_stage_duration_seconds_count", ()))
        deadline = time.time() + 60
        while True:
            m = subprocess.run([str(FDOCTL), "--socket", sock, "--json", "metrics"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(m.returncode, 0, m.stderr)
            rpc, _ = parse_prometheus(json.loads(m.stdout)["text"])
            later, _ = parse_prometheus(self.scrape(port))
            if all(after[k] == later[k] for k in keys) or time.time() > deadline:
                break
            after = later
        for key in keys:
            self.assertEqual(rpc[key], after[key], key)
            self.assertEqual(later[key], after[key], key)

    def test_bad_listen_value_exits_2_and_busy_port_exits_1(self):
        p, _, log = self.start("localhost:http", "bad")
        self.assertEqual(p.wait(60), 2)
        self.assertIn("metrics_listen", pathlib.Path(log).read_text())
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen(1)
            p, _, log = self.start(f"127.0.0.1:{busy.getsockname()[1]}", "busy")
            self.assertEqual(p.wait(60), 1)
            self.assertIn("cannot serve metrics", pathlib.Path(log).read_text())


if __name__ == "__main__":
    # A missing prerequisite reads as skipped (tests/support/fdo_unittest.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fdo_unittest  # noqa: E402

    fdo_unittest.main("metrics http")
