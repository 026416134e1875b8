#!/usr/bin/env python3
"""Service-overhead bench: what fdod adds around a trivial program.

Starts one fdod (temp state dir; feedback policy that rewrites the profile
after one stage, synchronous tier-up; everything else, exec_workers and
handler_threads included, at the daemon's defaults), registers

    define i64 @add(i64 %a, i64 %b) { %s = add i64 %a, %b ; ret i64 %s }

and executes it until the stage is steady: mode optimized, cache outcome
memory_hit. Then, with the C++ client bench/service/fdod_load (so the client
adds microseconds, not Python's milliseconds):

1. Latency. Rounds alternate (order rotating each round) between
   - `fdod_load latency`: one connection, one `execute` at a time, the client's
     steady_clock around each request; every reply's value is checked and
     every timed call must be mode optimized / memory_hit. The server's own
     figures from each reply (stage.exec_ns, stage.counters.wall_ns) are kept
     beside the round trip, so the round trip splits into execution and
     service overhead (round trip - exec_ns). Then `health` on the same
     connection the same way: the JSON-RPC transport floor.
   - `fdod_load native`: the same IR compiled in-process by fdo_jit and called
     through its thunk, timed per call the same way; a direct call of a
     noinline C++ function as the floor; the cost of the clock pair itself;
     and a batched mean (one clock pair around 10^6 calls).
   - `fdod_load floor --hops 1` and `--hops 2`: no fdod at all, forked
     processes that only pass the same number of bytes on (hop 1 a listening
     Unix socket served by one epoll thread, like fdod's I/O thread; hop 2
     through a socketpair, like fdod's exec worker; the last echoes): the
     transport floor of this host, client<->fdod and client<->fdod<->worker.
   Percentiles pool the samples of all rounds.
2. Throughput. `fdod_load throughput` with 1, 2, 8, 32 clients (one connection
   and thread each, closed loop: send, wait for the reply, repeat) for a fixed
   time after a short warm-up, in passes 1 2 8 32, 32 8 2 1, ...; requests/s is
   the median over passes, latency percentiles pool the passes. Beside each
   run, `fdod_load floor --hops 2` with the same client count (the pair's
   order alternating by pass): the 2-hop floor's requests/s.

Exit status: 0 ok; 1 a measurement failed or a result was wrong; 2 setup
problem (missing build artefact, fdod would not start).
"""
import argparse
import datetime
import json
import math
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "bench"))
import harness  # noqa: E402
from benchhost import host_info, loadavg  # noqa: E402

PROGRAM_IR = """\
define i64 @add(i64 %a, i64 %b) {
  %s = add i64 %a, %b
  ret i64 %s
}
"""
ENTRY = "add"

# Only what the bench needs differs from fdod's defaults: a profile rewritten
# after one stage with one count, and a synchronous tier-up, so the steady
# state (optimized, memory_hit) is reached in three stages. All clients run as
# one uid, so the per-uid in-flight cap (16 by default) is raised above the
# 32 clients of the last level. The live A/B guard is off: it would trial the
# profile against the plain build mid-measurement (a compile, and stages of
# another variant), and this bench measures the service path to one fixed
# output (docs/guard.md has the guard's own figures). exec_workers,
# handler_threads, perf_events, caches: the daemon's defaults.
FDOD_SETTINGS = {
    "policy.min_stages": 1,
    "policy.min_counts": 1,
    "tier_up": "sync",
    "guard": "off",
    "max_inflight_per_uid": 64,
    "log_level": "info",  # the "N handler threads" line is logged at info
}

DEFAULTS = {"rounds": 5, "samples": 2000, "native_samples": 10000, "levels": "1,2,8,32",
            "passes": 2, "duration": 3.0, "warmup_time": 0.5}
QUICK = {"rounds": 2, "samples": 150, "native_samples": 2000, "levels": "1,2,8,32",
         "passes": 2, "duration": 0.3, "warmup_time": 0.1}


class SetupError(Exception):
    """The bench could not start (exit 2)."""


class MeasureError(Exception):
    """A measurement failed or returned a wrong result (exit 1)."""


def progress(msg):
    print(f"[service] {msg}", file=sys.stderr, flush=True)


def pct(sorted_values, q):
    """Nearest-rank percentile (the same definition fdod_load uses)."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), math.ceil(q * len(sorted_values) - 1e-9)))
    return float(sorted_values[rank - 1])


def summarize(values):
    v = sorted(values)
    if not v:
        return {"n": 0}
    return {"n": len(v), "mean": statistics.fmean(v), "min": v[0], "p50": pct(v, 0.50),
            "p90": pct(v, 0.90), "p99": pct(v, 0.99), "max": v[-1]}


def run_load(exe, args, timeout):
    """Runs fdod_load; returns (parsed JSON or None, problem text or None)."""
    cmd = [str(exe)] + [str(a) for a in args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, f"{' '.join(cmd)} ran longer than {timeout:.0f} s"
    if proc.returncode == 2:
        raise SetupError(f"fdod_load refused its arguments:\n{proc.stderr.strip()}")
    out = None
    try:
        out = json.loads(proc.stdout) if proc.stdout.strip() else None
    except json.JSONDecodeError as e:
        return None, f"fdod_load printed unreadable JSON ({e}); stderr: {proc.stderr.strip()}"
    if proc.returncode != 0:
        why = proc.stderr.strip()
        first = ((out or {}).get("warmup_checks", {}).get("first_problem")
                 or (out or {}).get("checks", {}).get("first_problem"))
        if first:
            why = (why + "; " if why else "") + first
        return out, f"fdod_load {args[0]} exited {proc.returncode}: {why}"
    if out is None:
        return None, f"fdod_load {args[0]} printed nothing"
    return out, None


def warm_up(client, program, max_stages=20):
    """Executes until the stage is optimized and a memory hit; returns the stages seen."""
    seen = []
    for i in range(max_stages):
        a, b = 1000 + i, -7 * i
        r = client.call("execute", {"program": program, "entry": ENTRY, "args": [a, b]})
        if r["value"] != a + b:
            raise MeasureError(f"warm-up stage {i}: value {r['value']}, expected {a + b}")
        st = r["stage"]
        seen.append({"number": st["number"], "mode": st["mode"],
                     "profile_version": st["profile_version"],
                     "outcome": st["cache"]["outcome"], "compile_ms": st["compile_ms"],
                     "profile_rewritten": st.get("profile_rewritten")})
        if st["mode"] == "optimized" and st["cache"]["outcome"] == "memory_hit":
            return seen
    raise MeasureError(f"no optimized memory_hit stage after {max_stages} stages: {seen}")


def process_tree_cpu_s(pid):
    """CPU seconds (user + system) used so far by pid and its live child processes
    (fdod and its compile/exec workers). Clock-tick resolution (usually 10 ms)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, pending, seen = 0.0, [pid], set()
    while pending:
        p = pending.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            stat = pathlib.Path(f"/proc/{p}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            for task in pathlib.Path(f"/proc/{p}/task").iterdir():
                kids = (task / "children").read_text().split()
                pending += [int(k) for k in kids]
        except (OSError, ValueError, IndexError):
            continue  # a worker that went away between the reads
    return total


def describe_exit(code):
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


def handler_threads_from_log(text):
    m = re.findall(r"with (\d+) handler threads", text)
    return int(m[-1]) if m else None


def fmt_us(ns):
    return f"{ns / 1000.0:.3f}"


def table(headers, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(str(h).ljust(w) if i == 0 else str(h).rjust(w)
                       for i, (h, w) in enumerate(zip(headers, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.environ.get("FDO_BUILD_DIR", str(REPO / "build")))
    ap.add_argument("--json", help="write full results (raw samples included) here")
    ap.add_argument("--quick", action="store_true", help="tiny sample counts (CI smoke test)")
    ap.add_argument("--rounds", type=int, help=f"latency/native rounds (default {DEFAULTS['rounds']})")
    ap.add_argument("--samples", type=int,
                    help=f"timed executes per round (default {DEFAULTS['samples']})")
    ap.add_argument("--native-samples", type=int,
                    help=f"timed native calls per variant per round (default {DEFAULTS['native_samples']})")
    ap.add_argument("--levels", help=f"client counts (default {DEFAULTS['levels']})")
    ap.add_argument("--passes", type=int,
                    help=f"throughput passes, alternately up and down (default {DEFAULTS['passes']})")
    ap.add_argument("--duration", type=float,
                    help=f"measured seconds per throughput run (default {DEFAULTS['duration']})")
    ap.add_argument("--warmup-time", type=float,
                    help=f"unmeasured seconds before each throughput run (default {DEFAULTS['warmup_time']})")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra fdod config setting (repeatable), e.g. --set exec_workers=4 "
                         "or --set perf_events= ; the default run uses fdod's defaults")
    args = ap.parse_args()
    extra = {}
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            ap.error(f"--set: '{item}' is not KEY=VALUE")
        extra[key.strip()] = value.strip()
    base = QUICK if args.quick else DEFAULTS
    p = {k: (getattr(args, k) if getattr(args, k) is not None else v) for k, v in base.items()}
    try:
        levels = [int(x) for x in str(p["levels"]).split(",") if x.strip()]
    except ValueError:
        ap.error(f"--levels: '{p['levels']}' is not a comma-separated list of client counts")
    if not levels or any(n < 1 or n > 1024 for n in levels):
        ap.error("--levels: client counts must be 1..1024")
    for k in ("rounds", "samples", "native_samples", "passes"):
        if p[k] < 1:
            ap.error(f"--{k.replace('_', '-')} must be at least 1")
    if p["duration"] <= 0 or p["warmup_time"] < 0:
        ap.error("--duration must be > 0 and --warmup-time >= 0")
    p["levels"] = levels
    p["fdod_settings"] = {**FDOD_SETTINGS, **extra}

    build = pathlib.Path(args.build_dir).resolve()
    try:
        return run(build, p, args)
    except SetupError as e:
        print(f"run_service: setup problem: {e}", file=sys.stderr)
        return 2


def run(build, p, args):
    load_exe = build / "bench" / "service" / "fdod_load"
    for exe, target in ((build / "fdod", "fdod"), (build / "fdo-worker", "fdo-worker"),
                        (load_exe, "fdod_load")):
        if not os.access(exe, os.X_OK):
            raise SetupError(f"{exe} is missing: build it with "
                             f"`ninja -C {build} fdod fdo-worker fdod_load`")

    started = time.time()
    results = {"bench": "service", "started_at": datetime.datetime.now().astimezone().isoformat(),
               "host": host_info(), "loadavg_start": loadavg(), "parameters": dict(p),
               "program_ir": PROGRAM_IR, "entry": ENTRY, "problems": [], "failed_runs": []}
    problems = results["problems"]

    daemon = harness.Daemon(build_dir=build, prefix="fdo-bench-service-")
    # The harness writes its test defaults (exec_workers 2, min_counts 100,
    # ...); the bench wants fdod's own defaults except FDOD_SETTINGS.
    with open(daemon.config, "w") as f:
        for k, v in p["fdod_settings"].items():
            f.write(f"{k} = {v}\n")
    ir_path = os.path.join(daemon.tmp, "add.ll")
    pathlib.Path(ir_path).write_text(PROGRAM_IR)
    try:
        progress(f"starting fdod from {build}")
        try:
            daemon.start()
        except RuntimeError as e:
            # The harness's message ends with the fdod log tail.
            raise SetupError(f"fdod would not start: {e}") from None
        client = daemon.client()
        health = client.call("health")
        # The pools' configured sizes (cache.stats); health's counts are the
        # live workers, one short while the start-up probe's worker is replaced.
        pools = client.call("cache.stats")["workers"]
        handler_threads = handler_threads_from_log(daemon.log_text())
        results["fdod_config"] = {
            "settings_written": dict(p["fdod_settings"]),
            "exec_workers": pools["exec"]["size"],
            "compile_workers": pools["compile"]["size"],
            "live_workers_at_start": dict(health["workers"]),
            "handler_threads": handler_threads,
            "note": "every other key at fdod's default (docs/fdod-config.md)",
        }
        reg = client.call("program.register", {"ir": PROGRAM_IR, "name": "bench-service-add"})
        program = reg["program"]
        warm = warm_up(client, program)
        results["warm_up_stages"] = warm
        # The worker that ran fdod's start-up probe is replaced after it; under load that
        # replacement can arrive after the warm-up. Measure only once every exec worker is
        # up, so a restart counted below is one that happened during the measurement.
        deadline = time.time() + 60
        while True:
            stats_before = client.call("cache.stats", check_schema=False)
            ex = stats_before["workers"]["exec"]
            if ex["live"] >= ex["size"] or time.time() > deadline:
                break
            time.sleep(0.05)
        progress("steady: " + ", ".join(f"stage {s['number']} {s['mode']}/{s['outcome']}"
                                        for s in warm))

        def measure(load_args, timeout, what):
            """One fdod_load run: its JSON, or None after recording the problem.
            Stops the bench (MeasureError) once fdod itself is gone."""
            out, problem = run_load(load_exe, load_args, timeout)
            if problem is None:
                return out
            problems.append(f"{what}: {problem}")
            if out is not None:
                results["failed_runs"].append(out)
            if daemon.proc.poll() is not None:
                raise MeasureError(f"fdod exited ({describe_exit(daemon.proc.returncode)}) "
                                   f"during {what}; measurements stopped")
            return None

        common = ["--socket", daemon.socket, "--program", program, "--entry", ENTRY]
        lat_runs, verbose_runs, nat_runs = [], [], []
        floor_runs = {1: [], 2: []}
        results["latency_runs"] = lat_runs
        results["latency_verbose_runs"] = verbose_runs
        results["native_runs"] = nat_runs
        results["floor_runs"] = {"1": floor_runs[1], "2": floor_runs[2]}
        floor_payload = {"source": "fdod_load's built-in default (no latency run succeeded)",
                         "request_bytes": None, "reply_bytes": None}
        results["floor_payload"] = floor_payload

        def payload_args():
            """The floor's message sizes: those of the latest compact latency run
            (a real execute request and fdod's reply), else fdod_load's default."""
            codec = lat_runs[-1]["client_codec_ns"] if lat_runs else {}
            if codec.get("request_bytes") and codec.get("reply_bytes"):
                floor_payload.update({"source": "compact execute request/reply of this run",
                                      "request_bytes": codec["request_bytes"],
                                      "reply_bytes": codec["reply_bytes"]})
                return ["--payload", f"{codec['request_bytes']}/{codec['reply_bytes']}"]
            return []

        for r in range(p["rounds"]):
            order = (("latency", "verbose", "native", "floor1", "floor2") if r % 2 == 0 else
                     ("floor2", "floor1", "native", "verbose", "latency"))
            for what in order:
                progress(f"round {r + 1}/{p['rounds']}: {what}")
                if what.startswith("floor"):
                    hops = int(what[-1])
                    out = measure(["floor", "--hops", hops, "--samples", p["samples"],
                                   "--warmup", 20, *payload_args()],
                                  300, f"round {r + 1} floor {hops} hop(s)")
                    if out is not None:
                        floor_runs[hops].append(out)
                elif what in ("latency", "verbose"):
                    out = measure(["latency", *common, "--samples", p["samples"], "--warmup", 20,
                                   "--verbose", int(what == "verbose")],
                                  300, f"round {r + 1} {what}")
                    if out is not None:
                        (lat_runs if what == "latency" else verbose_runs).append(out)
                else:
                    out = measure(["native", "--ir", ir_path, "--entry", ENTRY, "--samples",
                                   p["native_samples"], "--blocks", 10], 300,
                                  f"round {r + 1} native")
                    if out is not None:
                        nat_runs.append(out)

        order = []
        for i in range(p["passes"]):
            order += p["levels"] if i % 2 == 0 else list(reversed(p["levels"]))
        tp_runs, floor_tp_runs = [], []
        results["throughput_order"] = order
        results["throughput_runs"] = tp_runs
        results["floor_throughput_runs"] = floor_tp_runs
        n_levels = len(p["levels"])

        def floor_throughput(i, n):
            progress(f"throughput {i + 1}/{len(order)}: 2-hop floor, {n} client(s)")
            out = measure(["floor", "--hops", 2, "--clients", n,
                           "--duration-ms", int(p["duration"] * 1000),
                           "--warmup-ms", int(p["warmup_time"] * 1000), *payload_args()],
                          60 + 3 * p["duration"], f"floor throughput {n} clients (run {i + 1})")
            if out is not None and out["requests"] == 0:
                problems.append(f"floor throughput {n} clients (run {i + 1}): no request "
                                f"completed inside the {p['duration']:g} s window")
                results["failed_runs"].append(out)
            elif out is not None:
                floor_tp_runs.append(out)

        for i, n in enumerate(order):
            # The floor run beside each fdod run: after it in even passes, before it in odd ones.
            floor_first = (i // n_levels) % 2 == 1
            if floor_first:
                floor_throughput(i, n)
            progress(f"throughput {i + 1}/{len(order)}: {n} client(s)")
            fdod_cpu0 = process_tree_cpu_s(daemon.proc.pid)
            out = measure(["throughput", *common, "--clients", n,
                           "--duration-ms", int(p["duration"] * 1000),
                           "--warmup-ms", int(p["warmup_time"] * 1000)],
                          60 + 3 * p["duration"], f"throughput {n} clients (run {i + 1})")
            fdod_cpu1 = process_tree_cpu_s(daemon.proc.pid)
            if out is not None and out["requests"] == 0:
                problems.append(f"throughput {n} clients (run {i + 1}): no request completed "
                                f"inside the {p['duration']:g} s window")
                results["failed_runs"].append(out)
            elif out is not None:
                # Whole fdod_load run (warm-up and tail included) against every
                # request it completed.
                out["fdod_cpu_us_per_request"] = ((fdod_cpu1 - fdod_cpu0) * 1e6
                                                  / max(out["completed_total"], 1))
                tp_runs.append(out)
            if not floor_first:
                floor_throughput(i, n)

        stats_after = client.call("cache.stats", check_schema=False)
        results["cache_stats_before"] = stats_before
        results["cache_stats_after"] = stats_after
        delta = {
            "compiles": stats_after["compiles"] - stats_before["compiles"],
            "memory_hits": stats_after["memory"]["hits"] - stats_before["memory"]["hits"],
            "exec_jobs": (stats_after["workers"]["exec"]["jobs"]
                          - stats_before["workers"]["exec"]["jobs"]),
            "exec_worker_restarts": (stats_after["workers"]["exec"]["restarts"]
                                     - stats_before["workers"]["exec"]["restarts"]),
        }
        results["cache_stats_delta"] = delta
        if delta["compiles"] != 0:
            problems.append(f"fdod compiled {delta['compiles']} time(s) during the measurements")
        if delta["exec_worker_restarts"] != 0:
            problems.append(f"exec workers restarted {delta['exec_worker_restarts']} time(s) "
                            "during the measurements")
        client.close()
    except (harness.RpcError, ConnectionError, OSError, KeyError) as e:
        problems.append(f"talking to fdod: {type(e).__name__}: {e}")
        results["fdod_log_tail"] = daemon.log_text()
    except MeasureError as e:
        problems.append(str(e))
        results["fdod_log_tail"] = daemon.log_text()
    finally:
        code = daemon.stop()
        results["fdod_exit_code"] = code
        log_tail = daemon.log_text()
        shutil.rmtree(daemon.tmp, ignore_errors=True)
    if code not in (0, None):
        problems.append(f"fdod did not stop cleanly: {describe_exit(code)}")
        results["fdod_log_tail"] = log_tail

    results["loadavg_end"] = loadavg()
    results["wall_s"] = time.time() - started
    report(results, p)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
        progress(f"wrote {args.json}")
    if problems:
        print("\nFAILED measurements / wrong results:")
        for pr in problems:
            print(f"  - {pr}")
        if "fdod_log_tail" in results:
            print("--- fdod log tail ---\n" + results["fdod_log_tail"])
        return 1
    return 0


def pooled(runs, key):
    out = []
    for r in runs:
        out += r["raw"][key]
    return out


def report(results, p):
    lat, nat, tp = (results.get("latency_runs", []), results.get("native_runs", []),
                    results.get("throughput_runs", []))
    cfg = results.get("fdod_config", {})
    host = results["host"]
    print("fdod service overhead: a warm `execute` of i64 add(i64, i64) vs the same call in-process")
    print(f"host: {host['cpu_model']}, {host['cpus']} cpus, loadavg at start "
          f"{results['loadavg_start']}, at end {results['loadavg_end']}")
    if cfg:
        print(f"fdod: exec_workers {cfg['exec_workers']}, handler_threads "
              f"{cfg['handler_threads']}, compile_workers {cfg['compile_workers']}; set in its config "
              f"(all else default): "
              + ", ".join(f"{k} = {v}" for k, v in cfg["settings_written"].items()))
    if results.get("warm_up_stages"):
        print("warm-up: " + "; ".join(
            f"stage {s['number']} {s['mode']} v{s['profile_version']} {s['outcome']}"
            for s in results["warm_up_stages"]))
    print("""
Figures (microseconds; percentiles pool all rounds):
  execute round trip  client steady_clock around RpcClient::call (send, fdod, reply, parse)
  stage.exec_ns       fdod's figure: the exec worker's CLOCK_MONOTONIC around the thunk call
  counters.wall_ns    the same measurement as reported in stage.counters
  round trip - exec   per request: what the service adds (client I/O, framing, JSON-RPC,
                      cache lookup, profile read, IPC to the exec worker, feedback)
  health round trip   `health` on the same connection: JSON-RPC transport + dispatch, no work
  client JSON codec   fdod_load encoding a request + parsing a reply of fdod's size, no I/O
  native thunk        fdo_jit-compiled add in-process, called through its thunk, clock pair around it
  native direct       noinline C++ add, clock pair around it (the floor)
  clock pair alone    two steady_clock::now() with nothing between (the timer's own cost)
  floor, 1 hop        no fdod: fdod_load to a forked process listening on a Unix socket (one
                      epoll thread), which answers: the host's client<->fdod transport floor
  floor, 2 hops       the same, the first process passing each message on through a socketpair
                      to a second one that answers: client<->fdod<->worker, nothing else""")
    fp = results.get("floor_payload")
    if fp and fp.get("request_bytes"):
        print(f"  floor messages: request {fp['request_bytes']} bytes, reply {fp['reply_bytes']} "
              f"bytes ({fp['source']})")
    elif fp:
        print(f"  floor messages: {fp['source']}")

    rows, summ = [], {}
    if lat:
        for key, label in (("rtt_ns", "execute round trip"), ("exec_ns", "stage.exec_ns"),
                           ("wall_ns", "counters.wall_ns")):
            summ[key] = summarize(pooled(lat, key))
        summ["overhead"] = summarize([a - b for a, b in zip(pooled(lat, "rtt_ns"),
                                                             pooled(lat, "exec_ns"))])
        summ["health_rtt_ns"] = summarize(pooled(lat, "health_rtt_ns"))
        codec = [r["client_codec_ns"]["p50"] for r in lat]
        for key, label in (("rtt_ns", "execute round trip"), ("exec_ns", "stage.exec_ns"),
                           ("wall_ns", "counters.wall_ns"), ("overhead", "round trip - exec"),
                           ("health_rtt_ns", "health round trip")):
            s = summ[key]
            rows.append([label, fmt_us(s["p50"]), fmt_us(s["p90"]), fmt_us(s["p99"]),
                         fmt_us(s["mean"]), s["n"]])
        rows.append(["client JSON codec", fmt_us(statistics.median(codec)), "", "", "",
                     f"{len(codec)} runs"])
    verbose = results.get("latency_verbose_runs", [])
    if verbose:
        # The same executes asking for verbose replies: the reply shape before
        # compact replies, measured beside the compact one in the same rounds.
        summ["verbose_rtt_ns"] = summarize(pooled(verbose, "rtt_ns"))
        summ["verbose_overhead"] = summarize([a - b for a, b in zip(
            pooled(verbose, "rtt_ns"), pooled(verbose, "exec_ns"))])
        for key, label in (("verbose_rtt_ns", "execute, verbose"),
                           ("verbose_overhead", "  - exec, verbose")):
            s = summ[key]
            rows.append([label, fmt_us(s["p50"]), fmt_us(s["p90"]), fmt_us(s["p99"]),
                         fmt_us(s["mean"]), s["n"]])
        compact_bytes = [r["client_codec_ns"].get("reply_bytes") for r in lat]
        verbose_bytes = [r["client_codec_ns"].get("reply_bytes") for r in verbose]
        summ["reply_bytes"] = {"compact": compact_bytes[-1] if compact_bytes else None,
                               "verbose": verbose_bytes[-1] if verbose_bytes else None}
    floor = results.get("floor_runs", {})
    for hops, label in (("1", "floor, 1 hop (client<->fdod)"),
                        ("2", "floor, 2 hops (client<->fdod<->worker)")):
        if floor.get(hops):
            s = summarize(pooled(floor[hops], "rtt_ns"))
            summ[f"floor_{hops}hop_rtt_ns"] = s
            rows.append([label, fmt_us(s["p50"]), fmt_us(s["p90"]), fmt_us(s["p99"]),
                         fmt_us(s["mean"]), s["n"]])
    if nat:
        for key, label in (("thunk_ns", "native thunk"), ("direct_ns", "native direct"),
                           ("timer_ns", "clock pair alone")):
            s = summarize(pooled(nat, key))
            summ[key] = s
            rows.append([label, fmt_us(s["p50"]), fmt_us(s["p90"]), fmt_us(s["p99"]),
                         fmt_us(s["mean"]), s["n"]])
    results["summary"] = {"latency": summ}
    if rows:
        print()
        print(table(["per call (us)", "p50", "p90", "p99", "mean", "n"], rows))
    if lat:
        outcomes, modes = {}, {}
        for r in lat:
            for k, v in r["checks"]["outcomes"].items():
                outcomes[k] = outcomes.get(k, 0) + v
            for k, v in r["checks"]["modes"].items():
                modes[k] = modes.get(k, 0) + v
        failed = sum(r["checks"]["failed_checks"] for r in lat)
        print(f"\ntimed executes: mode {modes}, cache outcome {outcomes}, "
              f"failed checks {failed}")
        print("execute round-trip p50 per round (us): "
              + " ".join(fmt_us(r["summary"]["rtt_ns"]["p50"]) for r in lat))
    for hops in ("1", "2"):
        if floor.get(hops):
            print(f"floor {hops} hop(s) p50 per round (us): "
                  + " ".join(fmt_us(r["summary"]["rtt_ns"]["p50"]) for r in floor[hops]))
        results["summary"]["timed_calls"] = {"modes": modes, "outcomes": outcomes,
                                             "failed_checks": failed}
    if nat:
        bt = statistics.median(r["batched_mean_ns"]["thunk"] for r in nat)
        bd = statistics.median(r["batched_mean_ns"]["direct"] for r in nat)
        summ["batched_thunk_ns"], summ["batched_direct_ns"] = bt, bd
        print(f"batched mean per call (10^6 calls, one clock pair, median of runs): thunk "
              f"{bt:.2f} ns, direct {bd:.2f} ns")
        if summ["thunk_ns"]["p50"] <= 1.5 * summ["timer_ns"]["p50"]:
            print("note: the per-call native figures are at the clock pair's own cost; the "
                  "batched means are the calls' real cost")

    if lat and nat:
        rtt = summ["rtt_ns"]["p50"]
        ratios = {
            "execute_p50_over_thunk_p50": rtt / max(summ["thunk_ns"]["p50"], 1),
            "execute_p50_over_direct_p50": rtt / max(summ["direct_ns"]["p50"], 1),
            "execute_p50_over_thunk_batched": rtt / max(summ["batched_thunk_ns"], 1e-3),
            "execute_p99_over_thunk_p99": summ["rtt_ns"]["p99"] / max(summ["thunk_ns"]["p99"], 1),
            "exec_ns_share_of_round_trip_p50": summ["exec_ns"]["p50"] / rtt,
            "overhead_p50_us": summ["overhead"]["p50"] / 1000.0,
            "health_p50_over_execute_p50": summ["health_rtt_ns"]["p50"] / rtt,
            "client_codec_share_of_round_trip_p50":
                statistics.median(r["client_codec_ns"]["p50"] for r in lat) / rtt,
        }
        results["summary"]["ratios"] = ratios
        print("\nratios:")
        print(f"  execute p50 / native thunk p50 (per-call timed)   {ratios['execute_p50_over_thunk_p50']:10.0f}x")
        print(f"  execute p50 / native direct p50 (per-call timed)  {ratios['execute_p50_over_direct_p50']:10.0f}x")
        print(f"  execute p50 / native thunk batched mean           {ratios['execute_p50_over_thunk_batched']:10.0f}x")
        print(f"  execute p99 / native thunk p99                    {ratios['execute_p99_over_thunk_p99']:10.0f}x")
        print(f"  stage.exec_ns p50 / execute p50                   {ratios['exec_ns_share_of_round_trip_p50']:10.4f}")
        print(f"  health round trip p50 / execute p50               {ratios['health_p50_over_execute_p50']:10.4f}")
        print(f"  client JSON codec p50 / execute p50               {ratios['client_codec_share_of_round_trip_p50']:10.4f}")
        print(f"  service overhead p50 (round trip - exec_ns)       {ratios['overhead_p50_us']:10.1f} us")
        if "verbose_rtt_ns" in summ:
            ratios["verbose_p50_over_compact_p50"] = summ["verbose_rtt_ns"]["p50"] / rtt
            rb = summ["reply_bytes"]
            print(f"  execute p50 verbose / compact replies             "
                  f"{ratios['verbose_p50_over_compact_p50']:10.3f}   "
                  f"(reply {rb['verbose']} vs {rb['compact']} bytes)")
    floor_ratios = {}
    if lat and "floor_2hop_rtt_ns" in summ:
        floor_ratios["execute_p50_over_2hop_floor_p50"] = (
            summ["rtt_ns"]["p50"] / max(summ["floor_2hop_rtt_ns"]["p50"], 1))
    if lat and "floor_1hop_rtt_ns" in summ:
        floor_ratios["health_p50_over_1hop_floor_p50"] = (
            summ["health_rtt_ns"]["p50"] / max(summ["floor_1hop_rtt_ns"]["p50"], 1))
    if floor_ratios:
        results["summary"].setdefault("ratios", {}).update(floor_ratios)
        print("\nagainst the transport floor of this host (no fdod, same message sizes):")
        if "execute_p50_over_2hop_floor_p50" in floor_ratios:
            print(f"  execute p50 / 2-hop floor p50                     "
                  f"{floor_ratios['execute_p50_over_2hop_floor_p50']:10.2f}x")
        if "health_p50_over_1hop_floor_p50" in floor_ratios:
            print(f"  health p50 / 1-hop floor p50                      "
                  f"{floor_ratios['health_p50_over_1hop_floor_p50']:10.2f}x")

    floor_tp = {}
    for r in results.get("floor_throughput_runs", []):
        floor_tp.setdefault(r["clients"], []).append(r)
    if tp:
        by_level = {}
        for r in tp:
            by_level.setdefault(r["clients"], []).append(r)
        rows, tsum = [], {}
        base_rps = None
        for n in sorted(by_level):
            runs = by_level[n]
            rps = [r["requests_per_s"] for r in runs]
            lat_all = sorted(pooled(runs, "latency_ns"))
            med = statistics.median(rps)
            if n == min(by_level):
                base_rps = med
            fdod_cpu = statistics.median(r["fdod_cpu_us_per_request"] for r in runs)
            client_cpu = statistics.median(r["client_cpu_us_per_request"] for r in runs)
            tsum[n] = {"requests_per_s_median": med, "requests_per_s_runs": rps,
                       "latency": summarize(lat_all), "fdod_cpu_us_per_request": fdod_cpu,
                       "client_cpu_us_per_request": client_cpu}
            floor_cols = ["", "", "", ""]
            if floor_tp.get(n):
                fruns = floor_tp[n]
                frps = [r["requests_per_s"] for r in fruns]
                fmed = statistics.median(frps)
                flat = sorted(pooled(fruns, "latency_ns"))
                fcpu = statistics.median(r["server_cpu_us_per_request"] for r in fruns)
                tsum[n]["floor_2hop"] = {"requests_per_s_median": fmed,
                                         "requests_per_s_runs": frps,
                                         "latency": summarize(flat),
                                         "server_cpu_us_per_request": fcpu,
                                         "fdod_over_floor_requests_per_s": med / max(fmed, 1e-9)}
                floor_cols = [f"{fmed:.0f}", fmt_us(pct(flat, 0.5)), f"{fcpu:.0f}",
                              f"{med / max(fmed, 1e-9):.3f}"]
            rows.append([n, f"{med:.0f}", " ".join(f"{x:.0f}" for x in rps),
                         fmt_us(pct(lat_all, 0.5)), fmt_us(pct(lat_all, 0.99)),
                         f"{med / base_rps:.2f}" if base_rps else "",
                         f"{fdod_cpu:.0f}", f"{client_cpu:.0f}", len(lat_all), *floor_cols])
        results["summary"]["throughput"] = tsum
        print(f"\nthroughput: closed loop, each client its own connection; "
              f"{p['duration']:g} s measured after {p['warmup_time']:g} s warm-up per run; "
              f"order {' '.join(map(str, results.get('throughput_order', [])))}")
        print("fdod cpu/req: CPU time of fdod and its workers (/proc, all threads) over the run "
              "divided by the requests\ncompleted; client cpu/req: fdod_load's own CPU (getrusage, "
              "after start-up) per request; medians over passes")
        if floor_tp:
            print("floor: `fdod_load floor --hops 2` with the same clients and times beside each "
                  "run (no fdod; req/s median\nover passes, p50 pooled; cpu/req: the two hop "
                  "processes' CPU per request; fdod/floor: req/s ratio)")
        print(table(["clients", "req/s (median)", "req/s per pass", "p50 us", "p99 us",
                     f"x vs {min(by_level)}", "fdod cpu/req us", "client cpu/req us",
                     "requests", "floor req/s", "floor p50 us", "floor cpu/req us",
                     "fdod/floor"], rows))
        if 8 in tsum and "floor_2hop" in tsum[8]:
            ratio = tsum[8]["floor_2hop"]["fdod_over_floor_requests_per_s"]
            results["summary"].setdefault("ratios", {})[
                "clients8_requests_per_s_over_2hop_floor"] = ratio
            print(f"8-client req/s / 2-hop floor 8-client req/s: {ratio:.3f}")
        bad = sum(r["checks"]["failed_checks"] for r in tp)
        outcomes = {}
        for r in tp:
            for k, v in r["checks"]["outcomes"].items():
                outcomes[k] = outcomes.get(k, 0) + v
        print(f"all throughput replies: cache outcome {outcomes}, failed checks {bad}")
    if "cache_stats_delta" in results:
        d = results["cache_stats_delta"]
        print(f"fdod's own counters over the measurements: compiles +{d['compiles']}, memory hits "
              f"+{d['memory_hits']}, exec jobs +{d['exec_jobs']}, exec worker restarts "
              f"+{d['exec_worker_restarts']}")
    print(f"\nrun time {results['wall_s']:.1f} s")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("run_service: interrupted", file=sys.stderr)
        sys.exit(1)
