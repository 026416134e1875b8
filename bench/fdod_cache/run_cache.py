#!/usr/bin/env python3
"""fdod cache bench: what a stage costs by where its compiled output comes from.

Through real fdod daemons, for a small module (tests/jit/fixtures/loop_branch.ll,
entry run(1000)) and a large one (bench::generate_module(48) printed by
fdo_gen_module, about 2,000 lines, entry bench_run(1000)), it times

  execute          one stage: cache lookup (or compile), the exec worker links
                   the object and runs the entry, feedback is folded in; the
                   round trip at the client, and the daemon's own
                   stage.compile_ms and stage.exec_ns
  program.compile  the same cache lookup (or compile) without executing

when the compiled output comes from
  (a) cold       a compile: a program fdod has never seen (outcome compiled)
  (b) memory     the memory tier (memory_hit)
  (c) disk       the disk tier: a second fdod with memory_cache_bytes = 0
                 (memory tier off: an output stays in memory only while a
                 stage uses it), so every later lookup reads the disk tier
                 (disk_hit)
  (d) restart    the first stage of a program after fdod was stopped with
                 SIGTERM and started again on the same state dir (disk_hit,
                 and cache.stats shows zero compiles)
  (d') the same, but the client called program.register again first (timed
                 on its own): after a restart fdod re-reads a program's IR and
                 analyzes it in a compile worker on its first use, which (d)
                 pays inside the stage and (d') does not

"Never seen" means each program is the module's IR with one unused global
appended (@fdo_bench_variant_<run>_<module>_<i> = constant i64 <i>): that
changes the program id (IK) and the profile key, so its first stage has to
compile; being constant, it does not by itself give the program state.
Every program is compiled once on each daemon (A: normal memory tier, B: memory
tier off); which daemon gets the cold execute and which the cold
program.compile alternates from program to program.

The profile never changes during the run (policy.min_stages = 1000000): every
stage runs profile version 0 in instrumented mode, so all cases compile or look
up the same thing; the script checks mode and version of every response.

Both modules define writable globals (loop_branch's @hot_count/@cold_count,
the generated module's @buf), so the exec worker links their object afresh for
every execution and unloads it after: every stage of every case includes the
link and starts from the program's initial state. The script checks the value
of every stage: run(1000) must return 900 (it counts into @hot_count, so a
stage that saw an earlier stage's state would return 1800 or more), and
bench_run(1000) the value of the module's first stage.

Medians over all programs; cases are interleaved in time (small and large
alternate; each program's hits come a few programs after its cold compile;
the order of daemons and paths alternates). Ratios use round-trip medians.

Python standard library plus tests/e2e/harness.py (starts and stops fdod).
Exit status: 0 ok; 1 a measurement failed or a result was wrong (listed at the
end); 2 setup problem (missing build artefact, fdod would not start).
"""
import argparse
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "bench"))
import harness  # noqa: E402
from benchhost import host_info, loadavg  # noqa: E402

CASES = [
    ("cold", "(a) cold compile", "compiled"),
    ("memory", "(b) memory hit", "memory_hit"),
    ("disk", "(c) disk hit", "disk_hit"),
    ("restart", "(d) after restart", "disk_hit"),
    ("restart_registered", "(d') restart, re-registered", "disk_hit"),
]
CASE_LABEL = {c: label for c, label, _ in CASES}
CASE_OUTCOME = {c: outcome for c, _, outcome in CASES}
PATHS = ("execute", "compile")
# loop_branch.ll's run(1000) from its initial state: 900 calls of on_hot.
SMALL_RUN_1000 = 900


class SetupError(Exception):
    pass


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def percentile(values: List[float], q: float) -> float:
    v = sorted(values)
    if not v:
        return float("nan")
    pos = (len(v) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def median(values: List[float]) -> float:
    return percentile(values, 0.5)


class Module:
    def __init__(self, name: str, text: str, source: str, entry: str, args: List[int],
                 expected_value: Optional[int]):
        self.name = name
        self.text = text if text.endswith("\n") else text + "\n"
        self.source = source
        self.entry = entry
        self.args = args
        # What every stage must return: the value from the program's initial
        # state. None: taken from the module's first stage (a fresh link).
        self.reference_value: Optional[int] = expected_value

    def sizes(self) -> Dict[str, int]:
        return {"lines": self.text.count("\n"), "bytes": len(self.text.encode()),
                "functions": sum(1 for line in self.text.splitlines()
                                 if line.startswith("define "))}

    def variant(self, run_tag: str, i: int) -> str:
        return (self.text + f"\n; fdo cache bench: a unique unused global makes a new program\n"
                f"@fdo_bench_variant_{run_tag}_{self.name}_{i} = constant i64 {i}\n")


class Side:
    """One fdod, its client and its restarts."""

    def __init__(self, name: str, config: Dict[str, object], build_dir: pathlib.Path,
                 run_tag: str, problems: List[str]):
        self.name = name
        self.config = config
        self.daemon = harness.Daemon(config=config, build_dir=str(build_dir),
                                     prefix=f"fdo-cachebench-{name}-")
        self.client: Optional[harness.Client] = None
        self.run_tag = run_tag
        self.problems = problems
        self.restarts: List[Dict[str, float]] = []

    def start(self) -> None:
        try:
            self.daemon.start()
        except RuntimeError as e:
            raise SetupError(f"fdod {self.name} would not start: {e}") from e
        self.client = self.daemon.client()
        self.warm_up()

    def restart(self) -> Dict[str, float]:
        if self.client:
            self.client.close()
            self.client = None
        t0 = time.perf_counter()
        code = self.daemon.stop(signal.SIGTERM)
        t1 = time.perf_counter()
        if code != 0:
            self.problems.append(f"fdod {self.name} exited with {code} on SIGTERM")
        self.daemon.start()  # RuntimeError here is a failed measurement, not setup
        t2 = time.perf_counter()
        self.client = self.daemon.client()
        r = {"stop_ms": (t1 - t0) * 1e3, "start_to_health_ms": (t2 - t1) * 1e3, "exit_code": code}
        self.restarts.append(r)
        return r

    def warm_up(self) -> None:
        """One tiny program through execute and program.compile, so the first
        measured stage does not pay for the workers' first job."""
        for n, method in enumerate(("execute", "program.compile")):
            ir = (f"define i64 @warm() {{\n  ret i64 {n + 7}\n}}\n"
                  f"@fdo_bench_warmup_{self.run_tag}_{n} = constant i64 0\n")
            pid = self.call("program.register", {"ir": ir})["program"]
            if method == "execute":
                res = self.call("execute", {"program": pid, "entry": "warm", "args": []})
                if res.get("value") != n + 7:
                    self.problems.append(f"{self.name}: warm-up returned {res.get('value')}")
            else:
                self.call("program.compile", {"program": pid})

    def call(self, method: str, params=None):
        return self.client.call(method, params, check_schema=False)


class Bench:
    def __init__(self, args, build_dir: pathlib.Path, modules: List[Module]):
        self.args = args
        self.build_dir = build_dir
        self.modules = modules
        self.run_tag = f"{os.getpid()}_{int(time.time())}"
        self.problems: List[str] = []
        self.samples: List[Dict[str, object]] = []
        self.validated = set()
        self.restart_checks: List[Dict[str, object]] = []
        self.reregister: List[Dict[str, object]] = []
        base = {
            "compile_workers": 1,
            "exec_workers": 1,  # the client is sequential: one is enough on 2 cores
            "handler_threads": 4,
            "exec_timeout_ms": 10000,
            "exec_memory_mb": 1024,
            "feedback_flush_ms": 1000,
            "policy.min_stages": 1000000,  # never rewrite: every stage is v0 instrumented
            "policy.min_counts": 1000000000000,
            "tier_up": "sync",
            "perf_events": "",  # no PMU here; empty = no counter group per exec
            "log_level": "warning",
        }
        self.config_a = dict(base)
        # Memory tier off: an output stays in memory only while a stage uses
        # it, so every lookup after the compile reads the disk tier.
        self.config_b = dict(base, memory_cache_bytes=0)
        self.a = Side("A", self.config_a, build_dir, self.run_tag, self.problems)
        self.b = Side("B", self.config_b, build_dir, self.run_tag, self.problems)
        # Programs in the order they are used: small and large alternate.
        self.programs: List[Dict[str, object]] = []
        for i in range(args.programs):
            order = modules if i % 2 == 0 else list(reversed(modules))
            for m in order:
                self.programs.append({"module": m, "index": i, "text": m.variant(self.run_tag, i),
                                      "id": None, "broken": False})

    # ------------------------------------------------------------------ one sample
    def measure(self, side: Side, prog: Dict[str, object], case: str, path: str,
                extra: Optional[Dict[str, object]] = None) -> Optional[Dict[str, object]]:
        m: Module = prog["module"]
        pid = prog["id"]
        rec: Dict[str, object] = {"module": m.name, "program_index": prog["index"],
                                  "program": pid, "case": case, "path": path,
                                  "daemon": side.name}
        rec.update(extra or {})
        method = "execute" if path == "execute" else "program.compile"
        params = ({"program": pid, "entry": m.entry, "args": m.args} if path == "execute"
                  else {"program": pid})
        where = f"{m.name} #{prog['index']} {CASE_LABEL[case]} via {method} on fdod {side.name}"
        t0 = time.perf_counter_ns()
        try:
            res = side.call(method, params)
        except (harness.RpcError, ConnectionError, OSError, socket.timeout) as e:
            self.problems.append(f"{where}: {e}")
            prog["broken"] = True
            return None
        rt_ms = (time.perf_counter_ns() - t0) / 1e6
        if (method, case) not in self.validated:
            # Once per method and case, outside the timing.
            self.validated.add((method, case))
            errs = harness.validate.errors(method, "result", res)
            if errs:
                self.problems.append(f"{where}: schema violations: {'; '.join(errs)}")
        st = res["stage"] if path == "execute" else res
        cache = st.get("cache", {})
        rec.update({"rt_ms": rt_ms, "compile_ms": float(st.get("compile_ms", 0.0)),
                    "outcome": cache.get("outcome"), "reason": cache.get("reason"),
                    "mode": st.get("mode"), "profile_version": st.get("profile_version")})
        if path == "execute":
            rec["exec_ms"] = st.get("exec_ns", 0) / 1e6
            rec["value"] = res.get("value")
            rec["stage_number"] = st.get("number")
            if st.get("profile_rewritten"):
                self.problems.append(f"{where}: the profile was rewritten "
                                     f"({st['profile_rewritten']}); the run must stay on v0")
        if rec["outcome"] != CASE_OUTCOME[case]:
            self.problems.append(f"{where}: outcome {rec['outcome']} ({rec['reason']}: "
                                 f"{cache.get('detail')}), expected {CASE_OUTCOME[case]}")
        if rec["mode"] != "instrumented" or rec["profile_version"] != 0:
            self.problems.append(f"{where}: mode {rec['mode']} profile v{rec['profile_version']},"
                                 f" expected instrumented v0")
        if path == "execute":
            # Every stage starts from the program's initial state, so every
            # stage returns the same value; anything else means one stage saw
            # another's globals (or ran the wrong code).
            if m.reference_value is None:
                m.reference_value = rec["value"]
            elif rec["value"] != m.reference_value:
                self.problems.append(f"{where}: returned {rec['value']}, expected "
                                     f"{m.reference_value} (the value from the initial state)")
        self.samples.append(rec)
        return rec

    # ------------------------------------------------------------------ phases
    def cold(self, prog: Dict[str, object], step: int) -> None:
        """Registers the program on both daemons and compiles it on each: one
        cold execute, one cold program.compile (which daemon gets which alternates)."""
        try:
            ida = self.a.call("program.register", {"ir": prog["text"]})["program"]
            idb = self.b.call("program.register", {"ir": prog["text"]})["program"]
        except (harness.RpcError, ConnectionError, OSError) as e:
            self.problems.append(f"register {prog['module'].name} #{prog['index']}: {e}")
            prog["broken"] = True
            return
        if ida != idb:
            self.problems.append(f"{prog['module'].name} #{prog['index']}: program ids differ "
                                 f"between the daemons ({ida} vs {idb})")
        prog["id"] = ida
        i = prog["index"]
        a_path, b_path = ("execute", "compile") if i % 2 == 0 else ("compile", "execute")
        order = [(self.a, a_path), (self.b, b_path)]
        if step % 2:
            order.reverse()
        for side, path in order:
            self.measure(side, prog, "cold", path)

    def hits(self, prog: Dict[str, object], step: int) -> None:
        if prog["broken"]:
            return

        def memory_side():
            def execute():
                self.measure(self.a, prog, "memory", "execute")

            def compile_():
                self.measure(self.a, prog, "memory", "compile")
            for f in ((execute, compile_) if step % 2 == 0 else (compile_, execute)):
                f()

        def disk_side():
            def execute():
                self.measure(self.b, prog, "disk", "execute")

            def compile_():
                self.measure(self.b, prog, "disk", "compile")
            for f in ((execute, compile_) if (step // 2) % 2 == 0 else (compile_, execute)):
                f()
        for f in ((memory_side, disk_side) if step % 2 == 0 else (disk_side, memory_side)):
            f()

    def restart_round(self, r: int) -> None:
        log(f"  restart {r + 1}/{self.args.restarts}: SIGTERM fdod A, start it on the same "
            "state dir")
        try:
            times = self.a.restart()
        except RuntimeError as e:
            self.problems.append(f"restart {r + 1}: fdod A did not come back: {e}")
            raise
        live = [p for p in self.programs if not p["broken"]]
        if not live:
            return
        shift = (r * len(live)) // max(1, self.args.restarts)
        order = live[shift:] + live[:shift]
        if r % 2:
            order.reverse()
        counts = {"execute": 0, "compile": 0}
        # Each program once per restart (its second lookup would be a memory
        # hit); the four combinations rotate over a module's programs.
        combos = [("execute", False), ("compile", False), ("execute", True), ("compile", True)]
        for n, prog in enumerate(order):
            path, registered = combos[(prog["index"] + r) % len(combos)]
            extra = {"restart": r + 1, "first_after_restart": n == 0}
            if registered:
                t0 = time.perf_counter_ns()
                try:
                    got = self.a.call("program.register", {"ir": prog["text"]})["program"]
                except (harness.RpcError, ConnectionError, OSError) as e:
                    self.problems.append(f"re-register {prog['module'].name} "
                                         f"#{prog['index']} after restart {r + 1}: {e}")
                    continue
                self.reregister.append({"module": prog["module"].name, "restart": r + 1,
                                        "rt_ms": (time.perf_counter_ns() - t0) / 1e6,
                                        "first_after_restart": n == 0})
                if got != prog["id"]:
                    self.problems.append(f"{prog['module'].name} #{prog['index']}: program id "
                                         f"changed across the restart ({prog['id']} -> {got})")
                extra["first_after_restart"] = False
            rec = self.measure(self.a, prog, "restart_registered" if registered else "restart",
                               path, extra)
            if rec:
                counts[path] += 1
        stats = self.a.call("cache.stats")
        check = {"restart": r + 1, **times, "stages": counts["execute"],
                 "program_compiles": counts["compile"], "compiles": stats.get("compiles"),
                 "disk_hits": stats.get("disk", {}).get("hits"),
                 "memory_hits": stats.get("memory", {}).get("hits"),
                 "prepares": stats.get("prepares")}
        self.restart_checks.append(check)
        total = counts["execute"] + counts["compile"]
        if check["compiles"] != 0:
            self.problems.append(f"restart {r + 1}: cache.stats counts {check['compiles']} "
                                 "compiles after the restart, expected 0")
        if check["disk_hits"] != total or check["memory_hits"] != 0:
            self.problems.append(f"restart {r + 1}: cache.stats disk hits {check['disk_hits']}"
                                 f", memory hits {check['memory_hits']} after {total} first "
                                 f"lookups, expected {total} and 0")

    def run(self) -> None:
        self.a.start()
        self.b.start()
        n = len(self.programs)
        window = self.args.window
        log(f"fdod_cache: {n} programs ({self.args.programs} per module), hits {window} "
            "programs behind their cold compile")
        for t in range(n + window):
            if t < n:
                prog = self.programs[t]
                log(f"  [{t + 1}/{n}] cold {prog['module'].name} #{prog['index']}")
                self.cold(prog, t)
            if t >= window:
                self.hits(self.programs[t - window], t - window)
        for r in range(self.args.restarts):
            self.restart_round(r)
        stats_b = self.b.call("cache.stats")
        self.stats_b = stats_b
        if stats_b.get("memory", {}).get("hits", 0) != 0:
            self.problems.append(f"fdod B (memory tier off) reports "
                                 f"{stats_b['memory']['hits']} memory hits, expected 0")

    def stop(self) -> None:
        for side in (self.a, self.b):
            try:
                if side.client:
                    side.client.close()
            except OSError:
                pass
            side.daemon.cleanup()


# ---------------------------------------------------------------------- report
def summarize(samples: List[Dict[str, object]], module: str, case: str, path: str):
    s = [x for x in samples if x["module"] == module and x["case"] == case and x["path"] == path]
    if not s:
        return None
    rt = [x["rt_ms"] for x in s]
    out = {"n": len(s), "rt_median": median(rt), "rt_p10": percentile(rt, 0.1),
           "rt_p90": percentile(rt, 0.9), "compile_median": median([x["compile_ms"] for x in s])}
    if path == "execute":
        out["exec_median"] = median([x["exec_ms"] for x in s])
        out["other_median"] = median([x["rt_ms"] - x["compile_ms"] - x["exec_ms"] for x in s])
    return out


def fmt(v: Optional[float], width: int = 8, digits: int = 2) -> str:
    if v is None or v != v:
        return "-".rjust(width)
    return f"{v:{width}.{digits}f}"


def report(bench: Bench, elapsed: float, load_start, load_end) -> Dict[str, object]:
    args = bench.args
    print("fdod cache bench: the cost of one stage by where its compiled output comes from")
    print("  rt       round trip at the client (send request .. parse response), ms")
    print("  compile  the daemon's stage.compile_ms (0 on a hit), ms")
    print("  exec     the daemon's stage.exec_ns: the entry call in the exec worker, ms")
    print("  other    rt - compile - exec per sample: lookup, IPC, link, feedback, JSON, ms")
    print("  medians; p10/p90 of rt; every stage runs profile v0, mode instrumented")
    print("  (a) a program fdod never saw: module + one unique unused global "
          "(@fdo_bench_variant_*)")
    print("  (b) memory tier   (c) disk tier: fdod with memory_cache_bytes = 0 (memory tier off)")
    print("  (d) first lookup of a program after SIGTERM + start on the same state dir; "
          "(d') the same after program.register")
    print("  every stage links the object afresh (both modules have writable globals)")
    print(f"  {args.programs} programs per module, {args.restarts} restart(s); "
          f"exec_workers 1, compile_workers 1, tier_up sync, policy.min_stages 1000000")
    print()
    print(f"{'module':7} {'source':44} {'entry':16} {'lines':>6} {'bytes':>7} {'funcs':>5}")
    for m in bench.modules:
        s = m.sizes()
        print(f"{m.name:7} {m.source:44} {m.entry + str(tuple(m.args)).replace(',)', ')'):16} "
              f"{s['lines']:6} {s['bytes']:7} {s['functions']:5}")
    m0 = bench.modules[0]
    extra = m0.variant(bench.run_tag, 0)
    print(f"  (each program: these plus {extra.count(chr(10)) - m0.text.count(chr(10))} lines / "
          f"{len(extra.encode()) - len(m0.text.encode())} bytes: the variant global)")
    print()
    summary = {}
    for path in PATHS:
        if path == "execute":
            print("execute: one stage (lookup or compile, link, run, feedback)")
            print(f"  {'module':7} {'case':28} {'n':>3} {'rt':>8} {'p10':>8} {'p90':>8} "
                  f"{'compile':>8} {'exec':>8} {'other':>8}")
        else:
            print("program.compile: the cache path alone (lookup or compile, no execution)")
            print(f"  {'module':7} {'case':28} {'n':>3} {'rt':>8} {'p10':>8} {'p90':>8} "
                  f"{'compile':>8}")
        for m in bench.modules:
            for case, label, _ in CASES:
                s = summarize(bench.samples, m.name, case, path)
                summary[f"{m.name}/{path}/{case}"] = s
                if not s:
                    continue
                line = (f"  {m.name:7} {label:28} {s['n']:3} {fmt(s['rt_median'])} "
                        f"{fmt(s['rt_p10'])} {fmt(s['rt_p90'])} {fmt(s['compile_median'])}")
                if path == "execute":
                    line += f" {fmt(s['exec_median'], 8, 3)} {fmt(s['other_median'])}"
                print(line)
        print()
    print("ratios of rt medians (below 1: cheaper)")
    ratio_defs = [("memory/cold", "memory", "cold"), ("disk/cold", "disk", "cold"),
                  ("restart/cold", "restart", "cold"), ("disk/memory", "disk", "memory"),
                  ("restart/disk", "restart", "disk"), ("rereg/disk", "restart_registered", "disk")]
    print(f"  {'module':7} {'path':16} " + " ".join(f"{n:>13}" for n, _, _ in ratio_defs))
    ratios = {}
    for m in bench.modules:
        for path in PATHS:
            row = {}
            cells = []
            for name, num, den in ratio_defs:
                a = summary.get(f"{m.name}/{path}/{num}")
                b = summary.get(f"{m.name}/{path}/{den}")
                r = a["rt_median"] / b["rt_median"] if a and b and b["rt_median"] > 0 else None
                row[name] = r
                cells.append(fmt(r, 13, 4) if r is not None and r < 0.1 else fmt(r, 13, 3))
            ratios[f"{m.name}/{path}"] = row
            label = "execute" if path == "execute" else "program.compile"
            print(f"  {m.name:7} {label:16} " + " ".join(cells))
    print()
    if bench.reregister:
        print("program.register after a restart (IR re-read and analyzed), rt median ms: " +
              ", ".join(f"{m.name} {median([x['rt_ms'] for x in bench.reregister if x['module'] == m.name]):.2f}"
                        for m in bench.modules
                        if any(x["module"] == m.name for x in bench.reregister)))
    firsts = [x for x in bench.samples if x.get("first_after_restart")]
    if firsts:
        print("very first request after each restart (fresh daemon and workers), rt ms: " +
              ", ".join(f"restart {x.get('restart', '?')}: {x['module']} "
                        f"{'execute' if x['path'] == 'execute' else 'program.compile'} "
                        f"{x['rt_ms']:.2f}" for x in firsts))
    for c in bench.restart_checks:
        print(f"restart {c['restart']}: stop {c['stop_ms']:.0f} ms, start to health "
              f"{c['start_to_health_ms']:.0f} ms; then {c['stages']} stages + "
              f"{c['program_compiles']} program.compile: cache.stats compiles {c['compiles']}, "
              f"disk hits {c['disk_hits']}, memory hits {c['memory_hits']}")
    cells = []
    for m in bench.modules:
        got = [x["value"] for x in bench.samples
               if x["module"] == m.name and x["path"] == "execute"]
        same = sum(1 for v in got if v == m.reference_value)
        cells.append(f"{m.name} {m.reference_value} in {same}/{len(got)} stages")
    print("value from the initial state, checked on every stage: " + ", ".join(cells))
    print(f"wall {elapsed:.1f} s, load average {load_start} -> {load_end}")
    return {"summary": summary, "ratios": ratios}


def on_sigterm(signum, frame):
    # ctest's timeout sends SIGTERM: unwind like Ctrl-C so the daemons are stopped.
    raise KeyboardInterrupt()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.environ.get("FDO_BUILD_DIR", str(REPO / "build")))
    ap.add_argument("--json", help="write every sample, host info and parameters here")
    ap.add_argument("--quick", action="store_true", help="a few programs: CI smoke run")
    ap.add_argument("--programs", type=int, help="programs per module (default 24, quick 4)")
    ap.add_argument("--restarts", type=int, help="restarts of fdod A (default 3, quick 1)")
    ap.add_argument("--window", type=int, default=11,
                    help="hits of a program come this many programs after its cold compile")
    ap.add_argument("--large-functions", type=int, default=48,
                    help="functions in the generated large module (default 48)")
    ap.add_argument("--gen-module", help="the fdo_gen_module program "
                    "(default <build-dir>/bench/jit/fdo_gen_module)")
    args = ap.parse_args()
    if args.programs is None:
        args.programs = 4 if args.quick else 24
    if args.restarts is None:
        args.restarts = 1 if args.quick else 3
    if args.programs < 1 or args.restarts < 1 or args.window < 0:
        print("run_cache.py: --programs and --restarts must be >= 1, --window >= 0",
              file=sys.stderr)
        return 2

    signal.signal(signal.SIGTERM, on_sigterm)

    build = pathlib.Path(args.build_dir).resolve()
    gen_module = pathlib.Path(args.gen_module or build / "bench" / "jit" / "fdo_gen_module")
    missing = [str(p) for p in (build / "fdod", build / "fdo-worker", gen_module)
               if not p.exists()]
    if missing:
        print("run_cache.py: missing build artefacts: " + ", ".join(missing) +
              f"\n  build them: ninja -C {build} fdod fdo-worker fdo_gen_module", file=sys.stderr)
        return 2
    small_path = REPO / "tests" / "jit" / "fixtures" / "loop_branch.ll"
    gen = subprocess.run([str(gen_module), str(args.large_functions)], capture_output=True,
                         text=True)
    if gen.returncode != 0 or not gen.stdout:
        print(f"run_cache.py: fdo_gen_module failed ({gen.returncode}): {gen.stderr}",
              file=sys.stderr)
        return 2
    modules = [
        Module("small", small_path.read_text(), "tests/jit/fixtures/loop_branch.ll", "run",
               [1000], expected_value=SMALL_RUN_1000),
        Module("large", gen.stdout, f"fdo_gen_module {args.large_functions}", "bench_run",
               [1000], expected_value=None),
    ]

    load_start = loadavg()
    t0 = time.time()
    bench = Bench(args, build, modules)
    rc = 0
    try:
        bench.run()
    except SetupError as e:
        print(f"run_cache.py: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("run_cache.py: interrupted; stopping the daemons", file=sys.stderr)
        return 1
    except RuntimeError as e:
        print(f"run_cache.py: {e}", file=sys.stderr)
        rc = 1
    finally:
        logs = {s.name: s.daemon.log_text() for s in (bench.a, bench.b)}
        bench.stop()
    elapsed = time.time() - t0
    load_end = loadavg()
    result = report(bench, elapsed, load_start, load_end)
    if bench.problems:
        rc = 1
        print(f"\n{len(bench.problems)} problem(s):")
        for p in bench.problems:
            print(f"  {p}")
        for name, text in logs.items():
            if text.strip():
                print(f"--- fdod {name} log tail ---\n{text[-1500:]}")
    if args.json:
        doc = {
            "bench": "fdod_cache",
            "host": {**host_info(), "loadavg_start": load_start, "loadavg_end": load_end},
            "parameters": {"programs_per_module": args.programs, "restarts": args.restarts,
                           "window": args.window, "quick": args.quick,
                           "large_functions": args.large_functions,
                           "build_dir": str(build), "run_tag": bench.run_tag},
            "fdod_config": {"A": bench.config_a, "B": bench.config_b},
            "modules": {m.name: {**m.sizes(), "source": m.source, "entry": m.entry,
                                 "args": m.args, "value": m.reference_value}
                        for m in modules},
            "elapsed_s": elapsed,
            "summary": result["summary"],
            "ratios": result["ratios"],
            "restart_checks": bench.restart_checks,
            "reregister_after_restart": bench.reregister,
            "cache_stats_b": getattr(bench, "stats_b", None),
            "problems": bench.problems,
            "samples": bench.samples,
        }
        pathlib.Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
