#!/usr/bin/env python3
"""`fdoctl web` end to end: a real fdod that has run the examples, `fdoctl web`
serving it on a free loopback port, and each view opened in headless Chromium
(Debian's `chromium`). The DOM after the page's scripts ran must hold the
names and numbers the daemon reports for the same objects; a screenshot of
each view is kept under <build>/test-artifacts/fdoctl-web/.

Also checked without a browser: a non-loopback --listen is refused unless
--allow-remote is given; bad requests (unknown path, bad profile key, path
traversal, a write method, a foreign Host) get clean 4xx answers; the view
reads the store offline.

Without chromium the HTTP checks still run and the test exits 77 (skipped)
saying why. Run through CTest or directly:
  FDO_BUILD_DIR=build python3 tests/tools/fdoctl_web_e2e.py"""
import http.client
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("FDO_BUILD_DIR", ROOT / "build")).resolve()
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "tests" / "support"))
os.environ.setdefault("FDO_BUILD_DIR", str(BUILD))
import fdo_unittest  # noqa: E402
import harness  # noqa: E402
from fdoctl_e2e import lcg_values  # noqa: E402  (the data fdoctl_e2e makes a second version with)

FDOCTL = BUILD / "fdoctl"
EXAMPLES = BUILD / "examples"
ARTIFACTS = BUILD / "test-artifacts" / "fdoctl-web"
SKIP = 77


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def fdoctl(daemon, *args, expect=0, timeout=300):
    cmd = [str(FDOCTL), "--socket", daemon.socket] + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    check(expect is None or r.returncode == expect,
          f"{' '.join(cmd[:10])} exited {r.returncode}, wanted {expect}\n"
          f"stdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}\nfdod: {daemon.log_text()[-1500:]}")
    return r


def json_of(daemon, *args):
    return json.loads(fdoctl(daemon, "--json", *args).stdout)


class Web:
    """`fdoctl web` as a child process; the URL comes from its first line."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([str(FDOCTL), "web", *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"(http://[^ ]+/)\?token=([0-9a-f]{32}) ", line)
        if not m:
            self.proc.kill()
            raise AssertionError(f"fdoctl web printed no URL: {line!r} {self.proc.stderr.read()}")
        self.url = m.group(1) + "?token=" + m.group(2)
        self.token = m.group(2)
        self.host, port = re.match(r"http://([^/]+):(\d+)/", m.group(1)).groups()
        self.port = int(port)

    def request(self, method, path, host=None, token=True):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.putrequest(method, path, skip_host=True)
        c.putheader("Host", host or f"127.0.0.1:{self.port}")
        if token:
            c.putheader("X-Fdo-Token", self.token)
        c.endheaders()
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, r.getheader("Content-Type"), body

    def api(self, path):
        status, _, body = self.request("GET", path)
        check(status == 200, f"GET {path}: {status} {body[:300]!r}")
        return json.loads(body)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(self, exe, tmp):
        self.exe = exe
        self.profile = os.path.join(tmp, "chromium-profile")

    def _run(self, *args):
        cmd = [self.exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--no-first-run", "--disable-extensions", "--hide-scrollbars",
               f"--user-data-dir={self.profile}", "--virtual-time-budget=8000", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    def dom(self, url):
        r = self._run("--dump-dom", url)
        check(r.returncode == 0 and "<html" in r.stdout,
              f"chromium --dump-dom {url} exited {r.returncode}: {r.stderr[-1500:]}")
        return r.stdout

    def screenshot(self, url, path, height=900):
        r = self._run(f"--screenshot={path}", f"--window-size=1280,{height}", url)
        check(r.returncode == 0 and os.path.getsize(path) > 1000,
              f"chromium --screenshot {url} exited {r.returncode}: {r.stderr[-1500:]}")


def fmt_int(n):
    return f"{n:,}"


def main():
    for f in (FDOCTL, BUILD / "fdod", EXAMPLES / "sort.ll", EXAMPLES / "interp.ll"):
        if not f.exists():
            fdo_unittest.report_skip("fdoctl web", f"{f} is not built")
            return SKIP
    daemon = harness.Daemon(config={"exec_timeout_ms": 20000, "sampling.frequency_hz": 20000}, prefix="fdoctl-web-e2e-").start()
    webs = []
    try:
        # --- the examples -------------------------------------------------
        fdoctl(daemon, "run", EXAMPLES / "interp.ll", "--entry", "interp_run", "--stages", 4)
        fdoctl(daemon, "run", EXAMPLES / "sort.ll", "--entry", "sort_run", "--stages", 4)
        programs = {p["name"]: p for p in json_of(daemon, "programs")["programs"]}
        check({"interp", "sort"} <= set(programs), programs)
        sort_ik, sort_pk = programs["sort"]["program"], programs["sort"]["profile_key"]
        # A second version: reset, then random data makes other paths hot.
        fdoctl(daemon, "profile", "reset", sort_pk)
        values = lcg_values(3000)
        fdoctl(daemon, "run", EXAMPLES / "sort.ll", "--entry", "sort_i64", "--buffer",
               "i64:" + ",".join(map(str, values)), "--arg", "@0", "--arg", len(values),
               "--stages", 2)
        history = json_of(daemon, "profile", "history", sort_pk)
        check([v["version"] for v in history["versions"]][:2] == [1, 2], history)
        profile = json_of(daemon, "profile", "show", sort_pk)
        # A rewrite queues its build in the background (docs/cache.md, "Tier-up"): its explain
        # record lands when it is installed, so the pages and this read must come after it.
        deadline = time.monotonic() + 120
        while (json_of(daemon, "cache", "stats").get("tier_up", {}).get("queued", 0) > 0
               and time.monotonic() < deadline):
            time.sleep(0.1)
        explain = json_of(daemon, "explain", sort_ik, "--limit", 0)
        check(all(isinstance(r.get("exec_ns"), int) and r["exec_ns"] > 0
                  for r in explain["records"]
                  if r["outcome"] not in ("failed", "background_compiled")),
              f"cache.explain reports each executed stage's exec_ns: {explain['records']}")

        # --- --listen: loopback only unless asked -------------------------
        for addr in ("0.0.0.0:0", "192.0.2.1:8080", "[::]:0"):
            r = fdoctl(daemon, "web", "--listen", addr, expect=2, timeout=30)
            check("--allow-remote" in r.stderr and "loopback" in r.stderr, r.stderr)
        remote = Web("--socket", daemon.socket, "--listen", "0.0.0.0:0", "--allow-remote")
        webs.append(remote)
        check(remote.host == "0.0.0.0", remote.url)
        check(remote.request("GET", "/api/overview", host="anything.example")[0] == 200,
              "--allow-remote serves any Host")
        remote.stop()

        # --- the server, its API and its error answers --------------------
        web = Web("--socket", daemon.socket, "--listen", "127.0.0.1:0")
        webs.append(web)
        check(web.url.startswith("http://127.0.0.1:"), web.url)
        overview = web.api("/api/overview")
        check({p["name"] for p in overview["programs"]} >= {"interp", "sort"}, overview)
        for path, want in [("/nope", 404), ("/api/nope", 404), ("/assets/nope.js", 404),
                           ("/api/profile/not-a-key", 400), ("/api/profile/" + "Z" * 64, 400),
                           ("/api/program/1234", 400), ("/api/profile/" + "0" * 64, 404),
                           (f"/api/profile/{sort_pk}?version=99", 404),
                           (f"/api/profile/{sort_pk}/diff?v1=1", 400),
                           ("/assets/../../etc/passwd", 400), ("/../../etc/passwd", 400),
                           ("/assets/%2e%2e/%2e%2e/etc/passwd", 400)]:
            status, ctype, body = web.request("GET", path)
            check(status == want, f"GET {path}: {status}, wanted {want}: {body[:200]!r}")
            check(b"root:" not in body, f"GET {path} leaked a file")
            if status >= 400 and path.startswith("/api"):
                check(ctype == "application/json" and "error" in json.loads(body), (path, body))
        check(web.request("POST", "/api/overview")[0] == 405, "POST is refused")
        check(web.request("GET", "/api/overview", token=False)[0] == 401, "no token, no data")
        check(web.request("GET", "/")[0] == 200, "the page needs no token")
        check(web.request("GET", "/api/overview", host="rebind.example:80")[0] == 421,
              "a foreign Host is refused")
        status, ctype, body = web.request("GET", "/assets/chart.js")
        check(status == 200 and b"Chart" in body, f"Chart.js from libjs-chart.js: {status}")
        # Nothing the server did wrote anything: the profile is as it was.
        check(json_of(daemon, "profile", "history", sort_pk) == history, "no write happened")

        # --- offline: the store under --state-dir --------------------------
        offline = Web("--offline", "--state-dir", daemon.state_dir)
        webs.append(offline)
        doc = offline.api("/api/overview")
        check(doc["backend"] == "store" and doc["programs"] is None, doc)
        check(sort_pk in {p["profile_key"] for p in doc["profiles"]}, doc)
        check(offline.api(f"/api/profile/{sort_pk}")["version"] == profile["version"], "offline profile")
        check(offline.request("GET", f"/api/program/{sort_ik}")[0] == 501, "explain needs the daemon")
        offline.stop()

        # --- the views in a browser ----------------------------------------
        exe = find_chromium()
        if exe is None:
            fdo_unittest.report_skip("fdoctl web", "the browser views: no chromium on PATH (apt-get "
                                     "install chromium, as tools/setup.sh does); the HTTP "
                                     "checks passed")
            return SKIP
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser = Browser(exe, daemon.tmp)
        functions = profile["profile"]["functions"]
        totals = {name: sum(f["counts"]) for name, f in functions.items()}
        hottest = max(totals, key=totals.get)
        hottest_name = functions[hottest].get("source_name") or hottest
        diff = json_of(daemon, "profile", "diff", sort_pk, 1, 2)
        changed = [f.get("source_name") or f["name"] for f in diff["functions"]
                   if f["change"] == "changed"]
        check(changed, diff)
        # The hottest function's IR as `profile annotate` gives it: the block
        # counts the function view must show.
        annotated = json_of(daemon, "profile", "annotate", sort_pk, "--function", hottest)
        check(len(annotated["functions"]) == 1, annotated)
        hot_fn = annotated["functions"][0]
        block_counts = [b["count"] for b in hot_fn["blocks"] if b["count"] is not None]
        check(hot_fn["entry_count"] and block_counts, hot_fn)
        # The variants the stages ran, as the timeline must name them.
        variants = sorted({f"v{r['profile_version']} {r['variant']['role']}"
                           + (f": {r['variant']['name']}" if r["variant"]["name"] else "")
                           for r in explain["records"] if r.get("variant")})
        check(variants, f"cache.explain names the variant of each executed stage: {explain['records']}")
        views = {
            "overview": ("#/", ["sort", "interp", sort_pk[:16], sort_ik[:16]], 900),
            "profile": (f"#/profile/{sort_pk}",
                        [f"version {profile['version']}", hottest_name, fmt_int(totals[hottest]),
                         "Functions by count"], 1100),
            "history": (f"#/profile/{sort_pk}/history",
                        [v["reason"] for v in history["versions"]] + ["v1", "v2", "diff from v1"], 700),
            "diff": (f"#/profile/{sort_pk}/diff/1/2", ["v1 → v2", "changed"] + changed[:3], 1000),
            "program": (f"#/program/{sort_ik}",
                        ["Stage timeline", "Cache key lineage", "IK (program", "VK (first stage",
                         "CK profile v1 optimized", "instrumented", "new_program",
                         "profile_rewritten", 'id="timeline-legend"', "▲",
                         # the lifecycle (docs/lifecycle.md): its phase and transitions
                         "Lifecycle", 'id="lifecycle"', 'id="lifecycle-phase"', "counts_ready"]
                        + variants, 1200),
            "function": (f"#/profile/{sort_pk}/function/{hottest}",
                         [f"Function {hot_fn['source_name']}", fmt_int(hot_fn["entry_count"]),
                          'id="annotated-ir"', hot_fn["signature"].split("(")[0].split("@")[-1] + "("]
                         + [f'data-count="{c}"' for c in block_counts]
                         + [f"count {fmt_int(c)}" for c in block_counts], 1400),
        }
        for name, (route, expected, height) in views.items():
            url = web.url + route
            dom = browser.dom(url)
            (ARTIFACTS / f"{name}.html").write_text(dom)
            check('data-ready="1"' in dom, f"{name}: the page did not finish: {dom[-1500:]}")
            check('id="error"' not in dom, f"{name}: the page shows an error: "
                  f"{re.search(r'id=.error.[^<]*', dom)}")
            check(f'data-view="{name}"' in dom, f"{name}: wrong view")
            for junk in ("[object ", "undefined", "NaN", ">null<"):
                check(junk not in dom, f"{name}: the page shows '{junk}'")
            for text in expected:
                check(text in dom.replace("&gt;", ">"), f"{name}: '{text}' is not in the page")
            if name in ("profile", "diff", "program"):
                check("<canvas" in dom, f"{name}: no chart drawn")
            browser.screenshot(url, str(ARTIFACTS / f"{name}.png"), height)
        # The timeline shows each stage's execution time.
        dom = (ARTIFACTS / "program.html").read_text()
        stages_table = re.search(r'<table id="stages">.*?</table>', dom, re.S)
        check(stages_table, "the program page has its stages table")
        rows = re.findall(r"<tr><td class=\"num\">(\d+)</td>", stages_table.group(0))
        check(len(rows) == len(explain["records"]), (rows, len(explain["records"])))
        # The lifecycle table: one row per transition cache.explain reports.
        lifecycle_table = re.search(r'<table id="lifecycle">.*?</table>', dom, re.S)
        check(lifecycle_table, "the program page has its lifecycle table")
        check(lifecycle_table.group(0).count("<tr><td") == len(explain["lifecycle"]["history"]),
              (lifecycle_table.group(0)[:600], explain["lifecycle"]))
        check("execution time per stage" in dom, "the timeline is of execution times")
        # The functions chart and table link to each function's annotated IR.
        dom = (ARTIFACTS / "profile.html").read_text()
        check(f'href="#/profile/{sort_pk}/function/' in dom, "the profile links its functions' IR")
        # One shaded block per block of the function, in order.
        dom = (ARTIFACTS / "function.html").read_text()
        shown = [int(c) for c in re.findall(r'class="block" data-label="[^"]*" data-count="(\d+)"', dom)]
        check(shown == block_counts, (shown, block_counts))
        # Sampled stages: the second shading, one per block, with the shares
        # `profile annotate` gives.
        if annotated.get("sampling"):
            shares = re.findall(r'class="block" data-label="[^"]*" data-count="\d*" '
                                r'data-sample-share="([^"]*)"', dom)
            check([float(x) if x else None for x in shares] == [b["sample_share"] for b in hot_fn["blocks"]],
                  (shares, [b["sample_share"] for b in hot_fn["blocks"]]))
            if any(b["samples"].get(annotated["sampling"]["event"]) for b in hot_fn["blocks"]):
                check("% of samples" in dom, "the sampled blocks show their share")
        else:
            print("note: the profile holds no per-block samples; the sample shading is not checked")
        print(f"ok: 6 views checked; screenshots in {ARTIFACTS}")
        return 0
    finally:
        for w in webs:
            w.stop()
        daemon.cleanup()


if __name__ == "__main__":
    sys.exit(main())
