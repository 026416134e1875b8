#!/usr/bin/env python3
"""FDO-effect bench: native clang -O2, native clang PGO and fdod's stages, interleaved.

For every kernel of bench/fdo_effect (built by its CMakeLists.txt) and every
round, one after the other in a rotating order:

  clang -O2     o2/<k>: clang-16 -O2 -march=native, native process (driver.c)
  clang PGO     pgo/<k>: the same with -fprofile-use (profile of one kernel_run)
  clang PGO np  pgo-np/<k>: clang PGO with -mllvm -disable-preinline -mllvm
                -disable-vp, i.e. without the two things fdo's PGO lacked
                before pipeline version 3 (a pre-inliner before
                instrumentation, value profiling) -- what they are worth
  clang instr   pgo-gen/<k>: clang's -fprofile-generate build (instrumentation cost)
  fdo -O2       fdo_effect_jit: the kernel's IR through fdo's JIT in-process
                with no profile (plain mode) -- fdo's code generation alone
  fdod          the kernel's IR through a real fdod: a program fdod has never
                seen (each round appends a unique unused global, so its program
                id and profile key are new), executed stage after stage:
                  stage 0        the first stage: instrumented code, cold
                  instrumented   every stage served by the instrumented output
                  first opt      the first stage whose mode is optimized (the
                                 profile was rewritten, the program recompiled)
                  final          the last --final-stages stages, all served by
                                 the last profile version (steady state)
  fdod CS       with --cs-stages N: the same on a second fdod with
                policy.cs_pgo_stages = N (context-sensitive PGO, docs/jit.md):
                  CS instr       the N stages of the CS round (the optimized
                                 build with CS instrumentation after inlining)
                  +CS final      the last --final-stages stages (counts + CS counts)

Every figure is time inside the process around the kernel call only, never
process start, compile or the request's round trip, on the clock --clock picks:

  thread-cpu    (the default) CPU time of the thread running the kernel: the
                drivers and fdo_effect_jit with --clock thread-cpu
                (CLOCK_THREAD_CPUTIME_ID around kernel_run), and for fdod each
                stage's counters.thread_cpu_ns (CLOCK_THREAD_CPUTIME_ID in the
                exec worker around the thunk call); a stage reply without it is
                an error. On a shared host this leaves out the time other
                processes take, which wall time counts.
  monotonic     wall time: the drivers' CLOCK_MONOTONIC around kernel_run, and
                for fdod the stage's exec_ns (CLOCK_MONOTONIC in the exec
                worker around the thunk call).
 Each native process makes --warmup untimed
calls then --runs timed ones; columns are medians over all rounds. Ratios are
time(column) / time(clang -O2): below 1.0 is faster.

Python standard library plus tests/e2e/harness.py (starts and stops fdod).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "e2e"))
import guarded  # noqa: E402
import harness  # noqa: E402
import run_native as rn  # noqa: E402
from run_native import BenchError, Variant  # noqa: E402

U64 = (1 << 64) - 1

# Columns the fdod runner yields, in table order.
FDOD_COLUMNS = [("fdo_stage0", "fdo stage 0"), ("fdo_instr", "fdo instrumented"),
                ("fdo_first_opt", "fdo first opt"), ("fdo_final", "fdo final")]
# ... and the one with the context-sensitive round (--cs-stages).
FDOD_CS_COLUMNS = [("fdocs_cs_instr", "fdo CS instr"), ("fdocs_final", "fdo +CS final")]


def fdod_settings(min_stages: int, cs_stages: int = 0) -> Dict[str, object]:
    """The daemon configuration of this bench (printed and kept in the JSON)."""
    return {
        "policy.min_stages": min_stages,  # instrumented stages before the rewrite
        "policy.cs_pgo_stages": cs_stages,  # 0: no context-sensitive round
        "policy.min_counts": 1000,  # the default; every kernel run gives millions
        "tier_up": "sync",  # the stage after the rewrite runs the optimized code
        "guard": "off",  # these columns are fdo without the live A/B guard (docs/guard.md)
        "compile_workers": 1,
        "exec_workers": 1,  # one request at a time: one worker is enough
        "exec_timeout_ms": 60000,
        "exec_memory_mb": 2048,
        "feedback_flush_ms": 200,
        "log_level": "notice",
    }


class FdodRunner:
    """Runs one kernel through a fresh program's stages on one fdod."""

    def __init__(self, client, entry: str, min_stages: int, final_stages: int,
                 cs_stages: int = 0, clock: str = rn.CLOCK_MONOTONIC):
        self.client = client
        self.clock = rn.check_clock(clock)
        self.cs_stages = cs_stages
        self.entry = entry
        self.min_stages = min_stages
        self.final_stages = final_stages
        self.texts: Dict[str, str] = {}
        self.round: Dict[str, int] = {}

    def _ir(self, kernel: dict) -> str:
        if kernel["name"] not in self.texts:
            try:
                self.texts[kernel["name"]] = pathlib.Path(kernel["ir"]).read_text()
            except OSError as e:
                raise BenchError(f"cannot read {kernel['ir']}: {e} (build fdo_effect_ir)") from None
        return self.texts[kernel["name"]]

    def __call__(self, kernel: dict) -> dict:
        name = kernel["name"]
        rnd = self.round.get(name, 0)
        self.round[name] = rnd + 1
        # A never-seen program each round: an unused global changes the
        # canonical IR, hence the program id and the profile key, and the
        # optimiser drops nothing that runs.
        text = self._ir(kernel) + (f"\n; fdo_effect bench, round {rnd}\n"
                                   f"@fdo_effect_round_{rnd} = constant i64 {rnd}\n")
        try:
            reg = self.client.call("program.register", {"ir": text, "name": f"{name}#{rnd}"},
                                   check_schema=False)
        except harness.RpcError as e:
            raise BenchError(f"program.register: {e}") from None
        stages: List[dict] = []
        first_opt: Optional[int] = None
        limit = self.min_stages + self.cs_stages + self.final_stages + 12
        while len(stages) < limit:
            try:
                r = self.client.call("execute", {"program": reg["program"], "entry": self.entry},
                                     check_schema=False)
            except harness.RpcError as e:
                raise BenchError(f"execute (stage {len(stages)}): {e}") from None
            st = r["stage"]
            # "ns": the stage's time on the bench's clock (what the columns
            # take); exec_ns and cpu_ns are kept as replied for the JSON.
            ns = rn.stage_ns(st, self.clock, f"{kernel['name']} round {rnd} stage {len(stages)} "
                                             f"({st['mode']})")
            stages.append({"number": st["number"], "mode": st["mode"],
                           "version": st["profile_version"], "outcome": st["cache"]["outcome"],
                           "compile_ms": st["compile_ms"], "exec_ns": st["exec_ns"],
                           "cpu_ns": (st.get("counters") or {}).get("thread_cpu_ns"), "ns": ns,
                           "value": int(r["value"]) & U64, "policy": st.get("policy", "")})
            if first_opt is None and st["mode"] == "optimized":
                first_opt = len(stages) - 1
            if first_opt is not None:
                tail = stages[first_opt + 1:][-self.final_stages:]
                if (len(tail) == self.final_stages and
                        len({(s["version"], s["mode"]) for s in tail}) == 1):
                    break
            elif len(stages) > self.min_stages + self.cs_stages + 3:
                raise BenchError(f"no optimized stage after {len(stages)} stages "
                                 f"(policy: {stages[-1]['policy']})")
        else:
            raise BenchError(f"the profile did not settle within {limit} stages: versions "
                             f"{[s['version'] for s in stages]}")
        values = {s["value"] for s in stages}
        if len(values) != 1:
            raise BenchError(f"stages returned different values: {sorted(values)}")
        final = stages[-self.final_stages:]
        instr = [s["ns"] for s in stages if s["mode"] == "instrumented"]
        if not instr:
            raise BenchError("no instrumented stage (stage 0 was not instrumented)")
        details = {"program": reg["program"], "profile_key": reg["profile_key"],
                   "first_optimized_stage": first_opt, "final_version": final[-1]["version"],
                   "stages": stages}
        if self.cs_stages > 0:
            cs = [s["ns"] for s in stages if s["mode"] == "cs_instrumented"]
            if not cs:
                raise BenchError("policy.cs_pgo_stages is set but no stage was cs_instrumented")
            return {"checksum": stages[0]["value"],
                    "columns": {"fdocs_cs_instr": cs, "fdocs_final": [s["ns"] for s in final]},
                    "details": details}
        return {
            "checksum": stages[0]["value"],
            "columns": {"fdo_stage0": [stages[0]["ns"]], "fdo_instr": instr,
                        "fdo_first_opt": [stages[first_opt]["ns"]],
                        "fdo_final": [s["ns"] for s in final]},
            "details": {"program": reg["program"], "profile_key": reg["profile_key"],
                        "first_optimized_stage": first_opt, "final_version": final[-1]["version"],
                        "stages": stages},
        }


class JitPlainRunner:
    """fdo's JIT with no profile: one fdo_effect_jit --serve process per kernel
    (compiled once), asked for one batch per round."""

    def __init__(self, exe: str, runs: int, warmup: int, clock: str = rn.CLOCK_MONOTONIC):
        self.exe = exe
        self.clock = rn.check_clock(clock)
        self.runs = runs
        self.warmup = warmup
        self.procs: Dict[str, subprocess.Popen] = {}
        self.compile_ms: Dict[str, float] = {}

    def _proc(self, kernel: dict) -> subprocess.Popen:
        p = self.procs.get(kernel["name"])
        if p is None:
            if not os.path.exists(self.exe):
                raise BenchError(f"{self.exe} does not exist: build it with ninja fdo_effect_jit")
            cmd = [self.exe, "--ir", kernel["ir"], "--serve"]
            if self.clock != rn.CLOCK_MONOTONIC:  # its default: the command as before
                cmd += ["--clock", self.clock]
            p = subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.procs[kernel["name"]] = p
        return p

    def __call__(self, kernel: dict) -> dict:
        p = self._proc(kernel)
        try:
            p.stdin.write(f"run {self.runs} {self.warmup}\n")
            p.stdin.flush()
            line = p.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            p.wait(timeout=10)
            raise BenchError(f"fdo_effect_jit exited with {p.returncode}: "
                             f"{p.stderr.read().strip()}")
        out = json.loads(line)
        self.compile_ms[kernel["name"]] = out["compile_ms"]
        return {"checksum": int(out["checksum"]), "ns": [int(x) for x in out["ns"]]}

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    p.stdin.write("quit\n")
                    p.stdin.flush()
                    p.wait(timeout=5)
                except (BrokenPipeError, subprocess.TimeoutExpired):
                    p.kill()
                    p.wait()
            for f in (p.stdin, p.stdout, p.stderr):
                try:
                    f.close()
                except BrokenPipeError:
                    pass


def clang_instr_variant(manifest: dict, runs: int, warmup: int, profile_dir: str,
                        clock: str = rn.CLOCK_MONOTONIC) -> Variant:
    """clang's instrumented build; its .profraw goes to a scratch dir (removed)."""
    env = dict(os.environ, LLVM_PROFILE_FILE=os.path.join(profile_dir, "%p.profraw"))

    def run(k: dict) -> dict:
        out = rn.run_driver(k["pgo_gen"], runs, warmup, env=env, clock=clock)
        for f in os.listdir(profile_dir):
            os.unlink(os.path.join(profile_dir, f))
        return out
    return Variant("clang_instr", "clang instr", run)


def stage_facts(results: Dict[str, dict]) -> str:
    """Per kernel: what fdod did across rounds (compile times, when the
    optimized stage came, the final profile version)."""
    rows = [["kernel", "rounds", "instr compile ms", "opt compile ms", "first opt stage",
             "final version", "final outcome"]]
    for kname, res in results.items():
        runs = res["_details"].get("fdod", [])
        if not runs:
            rows.append([kname, "0", "-", "-", "-", "-", "-"])
            continue
        ic = [s["compile_ms"] for d in runs for s in d["stages"]
              if s["mode"] == "instrumented" and s["outcome"] == "compiled"]
        oc = [s["compile_ms"] for d in runs for s in d["stages"]
              if s["mode"] == "optimized" and s["outcome"] == "compiled"]
        firsts = sorted({d["first_optimized_stage"] for d in runs})
        versions = sorted({d["final_version"] for d in runs})
        outcomes = sorted({s["outcome"] for d in runs for s in d["stages"][-1:]})
        rows.append([kname, str(len(runs)), f"{statistics.median(ic):.0f}" if ic else "-",
                     f"{statistics.median(oc):.0f}" if oc else "-",
                     ",".join(map(str, firsts)), ",".join(f"v{v}" for v in versions),
                     ",".join(outcomes)])
    return rn.align(rows)


# Issue 16's targets against clang PGO, on ratios of medians (the printed ones).
PGO_GEOMEAN_TARGET = 0.95
PGO_PER_KERNEL_LIMIT = 1.05
PGO_KERNEL_TARGETS = {"http_fsm": 1.0}


def pgo_targets(summary: dict, column: str) -> Tuple[List[str], bool]:
    """Issue 16's targets for `column` / clang PGO: geomean <= 0.95, no kernel
    above 1.05, http_fsm <= 1.0. Returns the report lines and whether all hold
    (a kernel without a ratio fails the per-kernel target)."""
    pair = f"{column}/pgo"
    ratios = {k: r.get(pair) for k, r in summary["ratios"].items()}
    gm = summary["geomean"].get(pair)
    lines = []
    met_gm = gm is not None and gm <= PGO_GEOMEAN_TARGET
    lines.append(f"  geomean {column} / clang PGO = {'n/a' if gm is None else f'{gm:.3f}'} "
                 f"(<= {PGO_GEOMEAN_TARGET}): {'met' if met_gm else 'NOT met'}")
    above = [(k, r) for k, r in ratios.items() if r is None or r > PGO_PER_KERNEL_LIMIT]
    lines.append(f"  kernels above {PGO_PER_KERNEL_LIMIT} x clang PGO: " +
                 (", ".join(f"{k} {'n/a' if r is None else f'{r:.3f}'}" for k, r in above)
                  if above else "none") + f": {'NOT met' if above else 'met'}")
    met_k = True
    for k, limit in PGO_KERNEL_TARGETS.items():
        if k not in ratios:
            continue  # not measured in this run (--kernels)
        r = ratios[k]
        ok = r is not None and r <= limit
        met_k &= ok
        lines.append(f"  {k} {column} / clang PGO = {'n/a' if r is None else f'{r:.3f}'} "
                     f"(<= {limit}): {'met' if ok else 'NOT met'}")
    return lines, met_gm and not above and met_k


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=rn.default_build_dir(),
                    help="CMake build directory (default: $FDO_BUILD_DIR or <repo>/build)")
    ap.add_argument("--rounds", type=int, default=rn.DEFAULT_ROUNDS,
                    help=f"interleaved rounds (default {rn.DEFAULT_ROUNDS})")
    ap.add_argument("--runs", type=int, default=rn.DEFAULT_RUNS,
                    help=f"timed calls per native process / JIT batch (default {rn.DEFAULT_RUNS})")
    ap.add_argument("--warmup", type=int, default=rn.DEFAULT_WARMUP,
                    help=f"untimed calls before timing (default {rn.DEFAULT_WARMUP})")
    ap.add_argument("--min-stages", type=int, default=3,
                    help="fdod's policy.min_stages: instrumented stages before the rewrite (default 3)")
    ap.add_argument("--final-stages", type=int, default=4,
                    help="stages on the final profile version timed per round (default 4)")
    ap.add_argument("--cs-stages", type=int, default=0,
                    help="also run a second fdod with policy.cs_pgo_stages = N (context-sensitive "
                         "PGO) side by side (default 0: not run)")
    ap.add_argument("--kernels", help="comma-separated subset of kernels")
    ap.add_argument("--clock", choices=rn.CLOCKS, default=rn.DEFAULT_CLOCK,
                    help="what every column measures: thread-cpu (CPU time of the thread running "
                         "the kernel: drivers with --clock thread-cpu, fdod's "
                         "stage.counters.thread_cpu_ns) or monotonic (wall time: the drivers' "
                         "CLOCK_MONOTONIC, fdod's stage.exec_ns) (default %(default)s)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 2 rounds, 2 calls, 2 final stages, min-stages 2")
    ap.add_argument("--json", metavar="FILE", help="also write the full results as JSON")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    ap.add_argument("--no-guard", action="store_true",
                    help="leave out the fdo guard column (a second fdod, guard and tuning on)")
    ap.add_argument("--guard-b", action="append", default=[], metavar="guard.KEY=VALUE",
                    help="also guard B: a third fdod with the guard column's settings but these "
                         "guard.* or policy.* settings (repeatable; e.g. policy.cs_pgo_stages=2: "
                         "the context-sensitive round, judged by the guard), its own column side "
                         "by side (fdo guard B final)")
    ap.add_argument("--guard-wall", action="store_true",
                    help="shorthand for --guard-b guard.clock=wall: a guard deciding on wall "
                         "time beside the one on CPU time (fdod's default)")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.runs, args.final_stages, args.min_stages = 2, 2, 2, 2
    if (args.rounds < 1 or args.runs < 1 or args.warmup < 0 or args.min_stages < 1 or
            args.final_stages < 1 or args.cs_stages < 0):
        ap.error("--rounds, --runs, --min-stages and --final-stages must be >= 1, --warmup >= 0")

    t0 = time.monotonic()

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"[fdo_effect] {msg} ({time.monotonic() - t0:.0f}s)", file=sys.stderr)

    try:
        manifest = rn.load_manifest(args.build_dir)
        kernels = rn.select_kernels(manifest, args.kernels.split(",") if args.kernels else None)
        if not os.path.exists(os.path.join(args.build_dir, "fdod")):
            raise BenchError(f"{args.build_dir}/fdod does not exist: build the project first")
    except BenchError as e:
        print(f"run_fdo_effect: {e}", file=sys.stderr)
        return 2

    settings = fdod_settings(args.min_stages)
    daemon = harness.Daemon(config=settings, build_dir=args.build_dir, prefix="fdo-bench-effect-")
    cs_settings = fdod_settings(args.min_stages, args.cs_stages)
    cs_daemon = (harness.Daemon(config=cs_settings, build_dir=args.build_dir,
                                prefix="fdo-bench-effect-cs-") if args.cs_stages > 0 else None)
    cs_client = None
    jit_runner = JitPlainRunner(manifest.get("jit_driver") or
                                os.path.join(args.build_dir, "bench", "fdo_effect", "fdo_effect_jit"),
                                args.runs, args.warmup, args.clock)
    scratch = tempfile.mkdtemp(prefix="fdo-bench-profraw-")
    guard_settings = guarded.settings(args.min_stages, args.quick)
    guard_daemon = None if args.no_guard else harness.Daemon(
        config=guard_settings, build_dir=args.build_dir, prefix="fdo-bench-guard-")
    guard_clients: List[harness.Client] = []
    b_overrides = args.guard_b + (["guard.clock=wall"] if args.guard_wall else [])
    b_daemon, b_settings, b_changes = None, None, ""
    if b_overrides and not args.no_guard:
        try:
            b_settings, b_changes = guarded.b_settings(guard_settings, b_overrides)
        except BenchError as e:
            print(f"run_fdo_effect: {e}", file=sys.stderr)
            return 2
        b_daemon = harness.Daemon(config=b_settings, build_dir=args.build_dir,
                                  prefix="fdo-bench-guard-b-")
    host = rn.host_info()
    try:
        for what, d in (("fdod", daemon), ("fdod (CS)", cs_daemon)):
            try:
                if d is not None:
                    d.start()
            except RuntimeError as e:
                print(f"run_fdo_effect: {what} did not start: {e}", file=sys.stderr)
                return 2
        client = harness.Client(daemon.socket, timeout=300)
        if cs_daemon is not None:
            cs_client = harness.Client(cs_daemon.socket, timeout=300)
        variants = rn.native_variants(manifest, args.runs, args.warmup, args.clock)
        if manifest["pgo_available"]:
            variants.append(Variant("pgo_np", "clang PGO np", lambda k: rn.run_driver(
                k["pgo_np"], args.runs, args.warmup, clock=args.clock)))
            variants.append(clang_instr_variant(manifest, args.runs, args.warmup, scratch,
                                                args.clock))
        variants.append(Variant("fdo_plain", "fdo -O2", jit_runner))
        variants.append(Variant("fdod", "fdod", FdodRunner(client, manifest.get("entry", "kernel_run"),
                                                           args.min_stages, args.final_stages,
                                                           clock=args.clock),
                                columns=FDOD_COLUMNS))
        text_of = variants[-1].run._ir
        for d, cfg, name, label, columns, what in (
                (guard_daemon, guard_settings, "fdod_guard", "fdod guarded", guarded.COLUMNS,
                 "the guarded fdod"),
                (b_daemon, b_settings, "fdod_guard_b", "fdod guard B", guarded.B_COLUMNS,
                 "guard B's fdod")):
            if d is None:
                continue
            try:
                d.start()
            except RuntimeError as e:
                print(f"run_fdo_effect: {what} did not start: {e}", file=sys.stderr)
                return 2
            guard_clients.append(harness.Client(d.socket, timeout=300))
            variants.append(Variant(name, label, guarded.GuardedRunner(
                guard_clients[-1], manifest.get("entry", "kernel_run"), cfg, args.final_stages,
                text_of, clock=args.clock, column=columns[0][0]), columns=columns))
        if cs_client is not None:
            variants.append(Variant("fdod_cs", "fdod CS", FdodRunner(
                cs_client, manifest.get("entry", "kernel_run"), args.min_stages, args.final_stages,
                args.cs_stages, clock=args.clock), columns=FDOD_CS_COLUMNS))
        progress(f"fdod up (state dir {daemon.state_dir}); {len(kernels)} kernels x "
                 f"{args.rounds} rounds")
        results = rn.measure_interleaved(kernels, variants, args.rounds, progress)
        client.close()
        for c in guard_clients:
            c.close()
        if cs_client is not None:
            cs_client.close()
    finally:
        jit_runner.close()
        daemon.cleanup()
        if guard_daemon is not None:
            guard_daemon.cleanup()
        if b_daemon is not None:
            b_daemon.cleanup()
        if cs_daemon is not None:
            cs_daemon.cleanup()
        for f in os.listdir(scratch):
            os.unlink(os.path.join(scratch, f))
        os.rmdir(scratch)
    host["loadavg_at_end"] = rn.benchhost.loadavg()

    columns = rn.columns_of(variants)
    labels = dict(columns)
    names = [c for c, _ in columns]
    pairs = [("fdo_final", "pgo"), ("fdo_final", "pgo_np"), ("fdo_final", "fdo_plain"), ("fdo_instr", "fdo_final"),
             ("fdo_instr", "fdo_plain"), ("clang_instr", "pgo"), ("clang_instr", "o2"),
             ("fdocs_final", "pgo"), ("fdocs_final", "fdo_final"), ("fdocs_cs_instr", "fdocs_final")]
    pairs += [("fdo_guard_final", "pgo"), ("fdo_guard_final", "fdo_final"),
              ("fdo_guard_b_final", "pgo"), ("fdo_guard_final", "fdo_guard_b_final")]
    pairs = [(a, b) for a, b in pairs if a in names and b in names]
    summary = rn.summarize(results, names, baseline="o2", pair_ratios=pairs)

    load = host.get("loadavg_at_start")
    print(f"FDO effect: {len(kernels)} kernels, {args.rounds} interleaved rounds; native: "
          f"{args.runs} timed calls per process (+{args.warmup} warm-up); fdod: a new program per "
          f"round, policy.min_stages {args.min_stages}, tier_up sync, final = last "
          f"{args.final_stages} stages" +
          (f"; fdod CS: policy.cs_pgo_stages {args.cs_stages}" if args.cs_stages else ""))
    print(f"flags: {manifest['native_flags']}; fdod and fdo -O2 get the IR of "
          f"{manifest['ir_flags']} and compile for the host CPU; host: {host['cpu_model']}, "
          f"{host['cpus']} CPUs, load {f'{load[0]:.2f}' if load else 'unknown'} -> "
          f"{(host.get('loadavg_at_end') or [float('nan')])[0]:.2f}")
    print(f"clock: {args.clock}: every column is {rn.CLOCK_MEANING[args.clock]}")
    if not manifest["pgo_available"]:
        print(f"no clang PGO column: {manifest.get('pgo_unavailable_reason', '')}")
    print(f"\nMedian {'CPU' if args.clock == rn.CLOCK_THREAD_CPU else 'wall'} time per kernel "
          f"call, ms (±half the interquartile range):")
    print(rn.format_ms_table(results, columns))
    print("\nFDO effect: time / time(clang -O2), < 1 is faster (column meanings: bench/README.md):")
    effect_heads = {"pgo/o2": "clang PGO", "pgo_np/o2": "clang PGO np", "fdo_plain/o2": "fdo -O2",
                    "fdo_stage0/o2": "fdo stage 0", "fdo_first_opt/o2": "fdo first opt",
                    "fdo_final/o2": "fdo final", "fdo_final/pgo": "fdo final / clang PGO",
                    "fdo_final/pgo_np": "fdo final / PGO np",
                    "fdo_final/fdo_plain": "fdo final / fdo -O2",
                    "fdo_guard_final/o2": "fdo guard final",
                    "fdo_guard_final/pgo": "guard final / clang PGO",
                    "fdo_guard_final/fdo_final": "guard final / fdo final",
                    "fdo_guard_b_final/pgo": "guard B final / clang PGO",
                    "fdo_guard_final/fdo_guard_b_final": "guard / guard B",
                    "fdocs_final/pgo": "fdo +CS final / clang PGO",
                    "fdocs_final/fdo_final": "fdo +CS final / fdo final"}
    print(rn.format_ratio_table(results, summary, labels,
                                [(p, effect_heads[p]) for p in effect_heads
                                 if p in summary["pairs"]]))
    print("\nInstrumentation cost: instrumented code / optimized code of the same compiler, "
          "< 1 is faster:")
    cost_heads = {"fdo_instr/fdo_final": "fdo instr / fdo final",
                  "fdo_instr/fdo_plain": "fdo instr / fdo -O2",
                  "clang_instr/pgo": "clang instr / clang PGO",
                  "clang_instr/o2": "clang instr / clang -O2",
                  "fdocs_cs_instr/fdocs_final": "fdo CS instr / fdo +CS final"}
    print(rn.format_ratio_table(results, summary, labels,
                                [(p, cost_heads[p]) for p in cost_heads if p in summary["pairs"]]))
    for column, label in (("fdo_final", "fdo final"), ("fdo_guard_final", "fdo guard final"),
                          ("fdo_guard_b_final", "fdo guard B final")):
        if f"{column}/pgo" in summary["pairs"]:
            lines, met = pgo_targets(summary, column)
            print(f"\nissue 16 targets for {label} / clang PGO ({args.clock} time): "
                  f"{'all met' if met else 'NOT all met'}")
            print("\n".join(lines))
    print("\nWhat fdod did (over all rounds):")
    print(stage_facts(results))
    if jit_runner.compile_ms:
        print("fdo -O2 in-process compile ms: " +
              ", ".join(f"{k} {v:.0f}" for k, v in jit_runner.compile_ms.items()))
    if guard_daemon is not None:
        print(f"\nfdo guard: a second fdod with the live A/B guard and knob tuning on "
              f"(guard.max_pairs {guard_settings['guard.max_pairs']}, "
              f"guard.tune_max_variants {guard_settings['guard.tune_max_variants']}), run until "
              f"every trial is decided; losing = stages under the profile that ran the variant "
              f"its trial found slower; trial compiles = compiler runs beyond the two of an "
              f"unguarded run (three with a context-sensitive round):")
        print(guarded.cost_table(results))
        guard_columns = [("fdo_guard_final", "fdo guard final"), ("fdo_final", "fdo final")]
        if b_daemon is not None:
            print(f"\nguard B: the same guard with {b_changes}:")
            print(guarded.cost_table(results, "fdod_guard_b"))
            guard_columns.insert(1, ("fdo_guard_b_final", "fdo guard B final"))
        for column, label in guard_columns:
            lines, met = guarded.targets(results, summary, column)
            print(f"\ntargets for {label} (<= min(clang -O2, clang PGO) within the noise on "
                  f"every kernel; geomean / clang PGO <= 0.95): "
                  f"{'all met' if met else 'NOT all met'}")
            print("\n".join(lines))

    if args.json:
        params = {"rounds": args.rounds, "runs_per_process": args.runs,
                  "warmup_per_process": args.warmup, "min_stages": args.min_stages,
                  "final_stages": args.final_stages, "fdod_config": settings,
                  "fdod_guard_config": None if args.no_guard else guard_settings,
                  "fdod_guard_b_config": b_settings if b_daemon is not None else None,
                  "fdod_guard_b_changes": b_changes or None,
                  "cs_stages": args.cs_stages, "clock": args.clock,
                  "order": "round-robin per kernel, variant order rotated every round"}
        doc = rn.to_json(results, summary, manifest, params, host, variants)
        doc["bench"] = "fdo_effect+fdod"
        doc["clock"] = args.clock
        doc["clock_meaning"] = rn.CLOCK_MEANING[args.clock]
        doc["columns"] = {c: label for c, label in columns}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"\nJSON written to {args.json}")
    failed = any(res["_errors"] for res in results.values())
    if failed:
        print("\nsome measurements failed or disagreed: see the ERROR lines above", file=sys.stderr)
    progress("done")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
