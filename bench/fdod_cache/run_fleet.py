#!/usr/bin/env python3
"""fdod fleet bench: what a host gains from a neighbour's profile and compiled code.

Two real fdod daemons ("host A", "host B": own state dirs and host names) share
one PostgreSQL profile store and one Redis object tier (docs/fleet.md), both
real servers started in temp dirs (tests/e2e/servers.py). For each program
(a module with a unique unused global appended: its own program id and
profile key), interleaved in time:

  host A   runs stages of the program until one runs optimized code: the
           instrumented stages, the profile rewrite, then a compile with the
           profile (the first optimized stage);
  host B   then meets the same program: its stages until one runs optimized
           code. With the fleet, its first stage already does: the profile is
           A's (PostgreSQL) and the object is the one A compiled (Redis).

Figures, medians over programs, per module:
  stages to optimized         A vs B (and the ratio A / B)
  time to optimized           the sum of the round trips of those stages
  first stage rt              each host's first stage of the program: on A a
                              compile (instrumented), on B a remote hit of
                              A's optimized build; both pay a program's
                              first use on a host (its analysis, the key
                              mappings), so the ratio is the compile saved
  A optimized compile_ms      the LLVM compile with the profile that B did
                              not do (stage.compile_ms of A's first
                              optimized stage)
bench/cache/remote_bench measures the remote hit against the compile inside
the cache, without fdod around it (docs/fleet.md, "Sizing").

Both hosts run fdod's defaults except: guard = off (the guard's trials would
interleave the plain build with the profiled one), policy.cs_pgo_stages as
given (default 0), tier_up = sync, 1 compile and 2 exec workers.

Python standard library plus tests/e2e/harness.py and servers.py.
Exit status: 0 ok; 1 a measurement was wrong (B's first stage not a remote hit
of optimized code, or a value differing between the hosts; listed at the end);
2 setup problem (missing build artefact or server binary).
"""
import argparse
import json
import pathlib
import subprocess
import sys
import time
from typing import Dict, List

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(HERE))
import harness  # noqa: E402
import servers  # noqa: E402
from benchhost import host_info, loadavg  # noqa: E402
from run_cache import SMALL_RUN_1000, Module, median  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def stage(client, prog: str, module: Module) -> Dict[str, object]:
    t0 = time.perf_counter()
    r = client.call("execute", {"program": prog, "entry": module.entry, "args": module.args})
    rt_ms = (time.perf_counter() - t0) * 1e3
    st = r["stage"]
    return {"rt_ms": rt_ms, "compile_ms": st.get("compile_ms", 0.0), "mode": st["mode"],
            "version": st["profile_version"], "outcome": st["cache"]["outcome"],
            "storage_key": st["storage_key"], "value": r.get("value")}


def until_optimized(client, prog: str, module: Module, limit: int) -> List[Dict[str, object]]:
    out = []
    while len(out) < limit:
        out.append(stage(client, prog, module))
        if out[-1]["mode"] == "optimized":
            break
    return out


def wait_for(pred, timeout: float = 30.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--programs", type=int, default=6, help="programs per module (default 6)")
    ap.add_argument("--large-functions", type=int, default=48)
    ap.add_argument("--cs-pgo-stages", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="2 programs per module, small module only")
    ap.add_argument("--json", help="write every stage and the summary here")
    args = ap.parse_args()
    build = pathlib.Path(args.build_dir).resolve()
    gen_module = build / "bench" / "jit" / "fdo_gen_module"
    missing = [str(p) for p in (build / "fdod", build / "fdo-worker") if not p.exists()]
    if not args.quick and not gen_module.exists():
        missing.append(str(gen_module))
    if missing:
        print("run_fleet.py: missing " + ", ".join(missing) +
              f"\n  build them: ninja -C {build} fdod fdo-worker fdo_gen_module", file=sys.stderr)
        return 2
    why = servers.postgres_unavailable_reason() or servers.redis_unavailable_reason()
    if why:
        print("run_fleet.py: " + why, file=sys.stderr)
        return 2

    modules = [Module("small", (REPO / "tests" / "jit" / "fixtures" / "loop_branch.ll").read_text(),
                      "tests/jit/fixtures/loop_branch.ll", "run", [1000], SMALL_RUN_1000)]
    if not args.quick:
        gen = subprocess.run([str(gen_module), str(args.large_functions)], capture_output=True,
                             text=True)
        if gen.returncode != 0 or not gen.stdout:
            print(f"run_fleet.py: fdo_gen_module failed: {gen.stderr}", file=sys.stderr)
            return 2
        modules.append(Module("large", gen.stdout, f"fdo_gen_module {args.large_functions}",
                              "bench_run", [1000], None))
    programs = 2 if args.quick else args.programs

    pg = servers.PostgresServer().start()
    redis = servers.RedisServer().start()
    config = {"profile_store": pg.url, "object_cache_remote": redis.url,
              "object_cache_remote_timeout_ms": 2000, "guard": "off",
              "policy.cs_pgo_stages": args.cs_pgo_stages, "tier_up": "sync",
              "policy.min_stages": 3, "policy.min_counts": 1000, "log_level": "warning"}
    hosts = {}
    problems: List[str] = []
    samples: List[Dict[str, object]] = []
    load_start, t_start = loadavg(), time.time()
    try:
        for name in ["host-a", "host-b"]:
            hosts[name] = harness.Daemon(dict(config, host_name=name), build_dir=build,
                                         prefix="fdo-fleet-bench-").start()
        a, b = hosts["host-a"].client(), hosts["host-b"].client()
        run_tag = str(int(time.time()))
        limit = 20 + args.cs_pgo_stages
        for i in range(programs):
            for module in modules:
                text = module.variant(run_tag, i)
                prog = a.call("program.register", {"ir": text})["program"]
                sa = until_optimized(a, prog, module, limit)
                key = "fdo:obj:" + str(sa[-1]["storage_key"])
                if sa[-1]["mode"] != "optimized":
                    problems.append(f"{module.name} #{i}: host A never optimized in {limit} stages")
                    continue
                if not wait_for(lambda: redis.command("EXISTS", key) == 1):
                    problems.append(f"{module.name} #{i}: A's optimized object never reached Redis")
                b.call("program.register", {"ir": text})
                sb = until_optimized(b, prog, module, limit)
                first = sb[0]
                if first["mode"] != "optimized" or first["outcome"] != "remote_hit":
                    problems.append(f"{module.name} #{i}: B's first stage was {first['mode']} "
                                    f"({first['outcome']}), not optimized from Redis")
                if first["value"] != sa[-1]["value"]:
                    problems.append(f"{module.name} #{i}: values differ: A {sa[-1]['value']}, "
                                    f"B {first['value']}")
                samples.append({"module": module.name, "program": i, "a": sa, "b": sb})
                log(f"{module.name} #{i}: A {len(sa)} stages, B {len(sb)}")
        a.close()
        b.close()
    finally:
        for d in hosts.values():
            d.cleanup()
        redis.cleanup()
        pg.cleanup()

    summary = {}
    print("\nfdod fleet bench: host B meets programs host A has profiled and optimized "
          "(one PostgreSQL store, one Redis tier)")
    print(f"{programs} programs per module, medians; guard off, policy.min_stages 3, "
          f"policy.cs_pgo_stages {args.cs_pgo_stages}\n")
    print(f"{'module':<7} {'stages to optimized A / B':>26} {'time to optimized A / B (ms)':>30}"
          f" {'first stage rt A / B (ms)':>27} {'A optimized compile_ms':>23}")
    for module in modules:
        rows = [s for s in samples if s["module"] == module.name]
        if not rows:
            continue
        n_a = median([len(s["a"]) for s in rows])
        n_b = median([len(s["b"]) for s in rows])
        t_a = median([sum(x["rt_ms"] for x in s["a"]) for s in rows])
        t_b = median([sum(x["rt_ms"] for x in s["b"]) for s in rows])
        first_a = median([s["a"][0]["rt_ms"] for s in rows])
        first_b = median([s["b"][0]["rt_ms"] for s in rows])
        opt_compile = median([s["a"][-1]["compile_ms"] for s in rows])
        summary[module.name] = {
            "stages_to_optimized_a": n_a, "stages_to_optimized_b": n_b,
            "stages_ratio": n_a / n_b, "time_to_optimized_a_ms": t_a,
            "time_to_optimized_b_ms": t_b, "time_ratio": t_a / t_b,
            "first_stage_a_ms": first_a, "first_stage_b_ms": first_b,
            "first_stage_ratio": first_a / first_b, "a_optimized_compile_ms": opt_compile}
        print(f"{module.name:<7} {f'{n_a:g} / {n_b:g} ({n_a / n_b:.1f}x)':>26} "
              f"{f'{t_a:.1f} / {t_b:.1f} ({t_a / t_b:.1f}x)':>30} "
              f"{f'{first_a:.1f} / {first_b:.1f} ({first_a / first_b:.1f}x)':>27} "
              f"{f'{opt_compile:.1f}':>23}")
    load_end = loadavg()
    print(f"\nload average {load_start} -> {load_end}; {time.time() - t_start:.0f} s")
    for p in problems:
        print("PROBLEM: " + p)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"host": host_info(), "config": config, "summary": summary,
                       "samples": samples, "problems": problems,
                       "load": [load_start, load_end]}, f, indent=1)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
