#!/usr/bin/env python3
"""FDO-effect bench, native side: clang-16 -O2 vs clang-16 IR PGO per kernel.

Runs the executables that bench/fdo_effect/CMakeLists.txt built (o2/<k> and
pgo/<k>, each a kernel linked with driver.c), interleaved: for every round and
every kernel, each variant runs once, the order rotating from round to round
(A B, B A, A B, ...) so that slow drifts of a shared, noisy machine hit both
variants alike. Each process calls kernel_run() --warmup times untimed, then
--runs times timed around the call only (process start is never timed), with
the clock --clock picks: thread-cpu (the default, CLOCK_THREAD_CPUTIME_ID: CPU
time of the calling thread, what other processes of a shared host take is left
out) or monotonic (CLOCK_MONOTONIC: wall time). Figures are medians over all
timed calls of all rounds; ratios are time(variant) / time(native -O2): below
1.0 is faster than -O2.

Python standard library only. Meant to be extended with fdod columns:

    import run_native as rn
    manifest = rn.load_manifest(build_dir)
    kernels = rn.select_kernels(manifest, None)
    variants = rn.native_variants(manifest, runs=5, warmup=1)
    variants.append(rn.Variant("fdo_final", "fdo final", my_fdod_runner))
    results = rn.measure_interleaved(kernels, variants, rounds=7)
    summary = rn.summarize(results, [c for c, _ in rn.columns_of(variants)], baseline="o2",
                           pair_ratios=[("fdo_final", "pgo")])
    print(rn.format_table(results, summary, variants))

A runner is any callable taking a kernel entry of manifest.json and returning
{"checksum": int, "ns": [int, ...]}; raise BenchError to report a failure. A
runner that measures several things in one go (fdod's stages) declares
`columns=[(name, label), ...]` and returns {"checksum": int, "columns": {name:
[ns, ...]}, "details": {...}} instead; `details` (optional) is kept per round.
run_fdo_effect.py is the full bench built this way.
"""
import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from dataclasses import field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import benchhost  # noqa: E402

DEFAULT_ROUNDS = 7
DEFAULT_RUNS = 5
DEFAULT_WARMUP = 1

# What every figure measures (--clock): the CPU time of the thread running the
# kernel, or wall time. The drivers' --clock values; fdod's stages carry both
# (stage_ns).
CLOCK_THREAD_CPU = "thread-cpu"
CLOCK_MONOTONIC = "monotonic"
CLOCKS = (CLOCK_THREAD_CPU, CLOCK_MONOTONIC)
DEFAULT_CLOCK = CLOCK_THREAD_CPU
CLOCK_MEANING = {
    CLOCK_THREAD_CPU: "CPU time of the running thread (CLOCK_THREAD_CPUTIME_ID; fdod: "
                      "stage.counters.thread_cpu_ns)",
    CLOCK_MONOTONIC: "wall time (CLOCK_MONOTONIC; fdod: stage.exec_ns)",
}


class BenchError(Exception):
    """A measurement could not be taken (missing build, crash, bad output)."""


@dataclass
class Variant:
    name: str  # key in results and JSON ("o2", "pgo", "fdod", ...)
    label: str  # column header
    run: Callable[[dict], dict]  # kernel entry -> {"checksum": int, "ns": [int]}
    # Several measured columns from one run (name, label); empty: one column
    # named like the variant.
    columns: List[Tuple[str, str]] = field(default_factory=list)

    def cols(self) -> List[Tuple[str, str]]:
        return list(self.columns) if self.columns else [(self.name, self.label)]


def columns_of(variants: Sequence[Variant]) -> List[Tuple[str, str]]:
    """Every measured column (name, label) of the variants, in order."""
    return [c for v in variants for c in v.cols()]


def default_build_dir() -> str:
    return os.environ.get("FDO_BUILD_DIR", os.path.join(REPO, "build"))


def load_manifest(build_dir: str) -> dict:
    path = os.path.join(build_dir, "bench", "fdo_effect", "manifest.json")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise BenchError(f"{path} not found: configure the project first "
                         f"(cmake -S {REPO} -B {build_dir} -G Ninja)") from None
    except json.JSONDecodeError as e:
        raise BenchError(f"{path} is not valid JSON: {e}") from None
    for key in ("kernels", "pgo_available", "native_flags", "ir_flags"):
        if key not in manifest:
            raise BenchError(f"{path} lacks '{key}': reconfigure the build directory")
    return manifest


def select_kernels(manifest: dict, names: Optional[Sequence[str]]) -> List[dict]:
    kernels = manifest["kernels"]
    if not names:
        return list(kernels)
    by_name = {k["name"]: k for k in kernels}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise BenchError(f"unknown kernel(s) {', '.join(unknown)}; known: {', '.join(by_name)}")
    return [by_name[n] for n in names]


def check_clock(clock: str) -> str:
    if clock not in CLOCKS:
        raise BenchError(f"unknown clock '{clock}': expected one of {', '.join(CLOCKS)}")
    return clock


def stage_ns(stage: dict, clock: str, where: str) -> int:
    """The time of one fdod stage reply (`stage` of an execute reply) on
    `clock`: exec_ns (wall, CLOCK_MONOTONIC in the exec worker around the thunk
    call) or counters.thread_cpu_ns (CLOCK_THREAD_CPUTIME_ID around the same
    call). A reply without the CPU figure, or with 0 where the stage took wall
    time (a stage whose program exited, say), is an error naming `where`:
    never a silent fallback to wall time."""
    if check_clock(clock) == CLOCK_MONOTONIC:
        return int(stage["exec_ns"])
    cpu = (stage.get("counters") or {}).get("thread_cpu_ns")
    if cpu is None:
        raise BenchError(f"{where}: the stage reply has no counters.thread_cpu_ns "
                         f"(--clock thread-cpu needs it; --clock monotonic does not)")
    if int(cpu) <= 0 and int(stage.get("exec_ns") or 0) > 0:
        raise BenchError(f"{where}: counters.thread_cpu_ns is {cpu} but exec_ns is "
                         f"{stage['exec_ns']}: no CPU time for this stage")
    return int(cpu)


def run_driver(exe: str, runs: int, warmup: int, timeout_s: float = 120.0,
               env: Optional[Dict[str, str]] = None, clock: str = CLOCK_MONOTONIC) -> dict:
    """Runs one native driver process (timing with `clock`) and returns its
    parsed JSON line."""
    if not os.path.exists(exe):
        raise BenchError(f"{exe} does not exist: build it with ninja fdo_effect_native")
    cmd = [exe, "--runs", str(runs), "--warmup", str(warmup)]
    if check_clock(clock) != CLOCK_MONOTONIC:  # the drivers' default: the command as before
        cmd += ["--clock", clock]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False,
                              env=env)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{' '.join(cmd)} ran longer than {timeout_s:.0f}s") from None
    except OSError as e:
        raise BenchError(f"cannot run {exe}: {e}") from None
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(cmd)} exited with {proc.returncode}: {proc.stderr.strip()}")
    try:
        out = json.loads(proc.stdout)
        return {"checksum": int(out["checksum"]), "ns": [int(x) for x in out["ns"]]}
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise BenchError(f"{exe} printed unexpected output ({e}): {proc.stdout[:200]!r}") from None


def native_variants(manifest: dict, runs: int = DEFAULT_RUNS, warmup: int = DEFAULT_WARMUP,
                    clock: str = CLOCK_MONOTONIC) -> List[Variant]:
    """The native columns: -O2 always, PGO when the build could make it."""
    variants = [Variant("o2", "clang -O2",
                        lambda k: run_driver(k["o2"], runs, warmup, clock=clock))]
    if manifest["pgo_available"]:
        variants.append(Variant("pgo", "clang PGO",
                                lambda k: run_driver(k["pgo"], runs, warmup, clock=clock)))
    return variants


def _spread(samples: Sequence[float]) -> float:
    """Interquartile range relative to the median (a noise figure)."""
    if len(samples) < 4:
        return float("nan")
    q = statistics.quantiles(samples, n=4)
    med = statistics.median(samples)
    return (q[2] - q[0]) / med if med else float("nan")


def measure_interleaved(kernels: Sequence[dict], variants: Sequence[Variant], rounds: int,
                        progress: Optional[Callable[[str], None]] = None) -> Dict[str, dict]:
    """Round-robin measurement. Returns results[kernel][variant] with
    samples_ns, median_ns, spread, checksum, and results[kernel]["_errors"]
    (checksum disagreements and failed runs; a failed variant has no median)."""
    if rounds < 1:
        raise BenchError("rounds must be at least 1")
    columns = columns_of(variants)
    results: Dict[str, dict] = {}
    for k in kernels:
        results[k["name"]] = {c: {"samples_ns": [], "round_medians_ns": [], "checksum": None}
                              for c, _ in columns}
        results[k["name"]]["_errors"] = []
        results[k["name"]]["_details"] = {v.name: [] for v in variants}
    for rnd in range(rounds):
        shift = rnd % len(variants)
        order = list(variants[shift:]) + list(variants[:shift])
        for k in kernels:
            res = results[k["name"]]
            for v in order:
                names = [c for c, _ in v.cols()]
                if any(res[c].get("failed") for c in names):
                    continue
                try:
                    out = v.run(k)
                    per_column = out["columns"] if "columns" in out else {v.name: out["ns"]}
                    missing = [c for c in names if not per_column.get(c)]
                    if missing:
                        raise BenchError(f"no samples for {', '.join(missing)}")
                except BenchError as e:
                    for c in names:
                        res[c]["failed"] = str(e)
                    res["_errors"].append(f"{v.name}: {e}")
                    continue
                if "details" in out:
                    res["_details"][v.name].append(out["details"])
                for c in names:
                    slot = res[c]
                    if slot["checksum"] is None:
                        slot["checksum"] = out["checksum"]
                    elif slot["checksum"] != out["checksum"]:
                        res["_errors"].append(f"{c}: checksum changed between rounds "
                                              f"({slot['checksum']} then {out['checksum']})")
                    slot["samples_ns"].extend(per_column[c])
                    slot["round_medians_ns"].append(statistics.median(per_column[c]))
        if progress:
            progress(f"round {rnd + 1}/{rounds} done")
    for k in kernels:
        res = results[k["name"]]
        sums = {c: res[c]["checksum"] for c, _ in columns if res[c]["checksum"] is not None}
        if len(set(sums.values())) > 1:
            res["_errors"].append("variants disagree on the checksum: " +
                                  ", ".join(f"{n}={c}" for n, c in sums.items()))
        for c, _ in columns:
            slot = res[c]
            s = slot["samples_ns"]
            slot["median_ns"] = statistics.median(s) if s else None
            slot["min_ns"] = min(s) if s else None
            slot["spread"] = _spread(s) if s else None
    return results


def geomean(values: Sequence[float]) -> Optional[float]:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def summarize(results: Dict[str, dict], columns: Sequence[str], baseline: str = "o2",
              pair_ratios: Sequence[Tuple[str, str]] = ()) -> dict:
    """Ratios to the baseline per kernel and their geometric means, plus any
    extra (numerator, denominator) pairs, e.g. ("fdo_final", "pgo")."""
    ratios: Dict[str, Dict[str, Optional[float]]] = {}
    pairs = [(c, baseline) for c in columns if c != baseline] + list(pair_ratios)
    for kname, res in results.items():
        ratios[kname] = {}
        for num, den in pairs:
            a = res.get(num, {}).get("median_ns")
            b = res.get(den, {}).get("median_ns")
            ratios[kname][f"{num}/{den}"] = (a / b) if a and b else None
    gm = {f"{num}/{den}": geomean([ratios[k][f"{num}/{den}"] for k in ratios]) for num, den in pairs}
    return {"ratios": ratios, "geomean": gm, "pairs": [f"{n}/{d}" for n, d in pairs]}


def _fmt_ratio(r: Optional[float]) -> str:
    return f"{r:.3f}" if r is not None else "n/a"


def align(rows: Sequence[Sequence[str]], rules: Sequence[int] = (1,)) -> str:
    """Left-aligned first column, right-aligned others; a rule under each
    row index in `rules` (default: under the header)."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]

    def line(r):
        return "  ".join(str(c).ljust(widths[0]) if i == 0 else str(c).rjust(widths[i])
                         for i, c in enumerate(r)).rstrip()
    out = []
    for i, r in enumerate(rows):
        if i in rules:
            out.append(line(["-" * w for w in widths]))
        out.append(line(r))
    return "\n".join(out)


def ms_cell(slot: dict) -> str:
    """Median ms with ±half the interquartile range, or 'failed'."""
    if slot.get("median_ns") is None:
        return "failed"
    spread = slot.get("spread")
    noise = f" ±{spread * 50:.0f}%" if spread is not None and math.isfinite(spread) else ""
    return f"{slot['median_ns'] / 1e6:.2f}{noise}"


def format_ms_table(results: Dict[str, dict], columns: Sequence[Tuple[str, str]]) -> str:
    """Median ms (±noise) per kernel and column."""
    rows = [["kernel"] + [f"{label} ms" for _, label in columns]]
    for kname, res in results.items():
        rows.append([kname] + [ms_cell(res[c]) for c, _ in columns])
    return align(rows)


def format_ratio_table(results: Dict[str, dict], summary: dict, labels: Dict[str, str],
                       pairs: Optional[Sequence] = None) -> str:
    """One column per ratio pair ("num/den", or ("num/den", header)), geometric
    means last, then errors."""
    pairs = list(pairs) if pairs is not None else summary["pairs"]

    def head(p):
        if isinstance(p, tuple):  # (pair, header)
            return p[1]
        num, den = p.split("/")
        return f"{labels.get(num, num)} / {labels.get(den, den)}"
    heads = [head(p) for p in pairs]
    pairs = [p[0] if isinstance(p, tuple) else p for p in pairs]
    rows = [["kernel"] + heads + ["check"]]
    for kname, res in results.items():
        rows.append([kname] + [_fmt_ratio(summary["ratios"][kname][p]) for p in pairs] +
                    ["ok" if not res["_errors"] else "ERROR"])
    rows.append(["geomean"] + [_fmt_ratio(summary["geomean"][p]) for p in pairs] + [""])
    out = align(rows, rules=(1, len(rows) - 1))
    errors = [(k, e) for k, res in results.items() for e in res["_errors"]]
    if errors:
        out += "\n\n" + "\n".join(f"ERROR {k}: {e}" for k, e in errors)
    return out


def format_table(results: Dict[str, dict], summary: dict, variants: Sequence[Variant],
                 baseline: str = "o2") -> str:
    """The native bench's table: median ms (and noise) per column, then every
    ratio of the summary, geometric means last."""
    columns = columns_of(variants)
    labels = dict(columns)
    rows = [["kernel"] + [f"{label} ms" for _, label in columns]]
    for p in summary["pairs"]:
        num, den = p.split("/")
        rows[0].append(f"{labels.get(num, num)} / {labels.get(den, den)}")
    rows[0].append("check")
    for kname, res in results.items():
        rows.append([kname] + [ms_cell(res[c]) for c, _ in columns] +
                    [_fmt_ratio(summary["ratios"][kname][p]) for p in summary["pairs"]] +
                    ["ok" if not res["_errors"] else "ERROR"])
    rows.append(["geomean"] + [""] * len(columns) +
                [_fmt_ratio(summary["geomean"][p]) for p in summary["pairs"]] + [""])
    out = align(rows, rules=(1, len(rows) - 1))
    errors = [(k, e) for k, res in results.items() for e in res["_errors"]]
    if errors:
        out += "\n\n" + "\n".join(f"ERROR {k}: {e}" for k, e in errors)
    return out


def host_info() -> dict:
    info = benchhost.host_info()
    info["loadavg_at_start"] = benchhost.loadavg()
    return info


def to_json(results: Dict[str, dict], summary: dict, manifest: dict, params: dict,
            host: dict, variants: Sequence[Variant]) -> dict:
    kernels = {}
    for kname, res in results.items():
        kernels[kname] = {
            "variants": {c: {"label": label,
                             "median_ns": res[c]["median_ns"],
                             "min_ns": res[c]["min_ns"],
                             "spread_iqr_over_median": res[c]["spread"],
                             "checksum": res[c]["checksum"],
                             "samples_ns": res[c]["samples_ns"],
                             "round_medians_ns": res[c]["round_medians_ns"],
                             "failed": res[c].get("failed")}
                         for c, label in columns_of(variants)},
            "details": {v: d for v, d in res["_details"].items() if d},
            "ratios": summary["ratios"][kname],
            "errors": res["_errors"],
        }
    return {
        "bench": "fdo_effect",
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": host,
        "params": params,
        "native_flags": manifest["native_flags"],
        "ir_flags": manifest["ir_flags"],
        "pgo_available": manifest["pgo_available"],
        "pgo_unavailable_reason": manifest.get("pgo_unavailable_reason", ""),
        "ratio_meaning": "median time of the numerator / median time of the denominator; < 1 is faster",
        "kernels": kernels,
        "geomean": summary["geomean"],
    }


def measure_native(kernels: Sequence[dict], rounds: int, manifest: dict, runs: int = DEFAULT_RUNS,
                   warmup: int = DEFAULT_WARMUP,
                   progress: Optional[Callable[[str], None]] = None,
                   clock: str = CLOCK_MONOTONIC) -> Dict[str, dict]:
    """Native -O2 and (when built) PGO for the given kernels, interleaved."""
    return measure_interleaved(kernels, native_variants(manifest, runs, warmup, clock), rounds,
                               progress)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=default_build_dir(),
                    help="CMake build directory (default: $FDO_BUILD_DIR or <repo>/build)")
    ap.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                    help=f"interleaved rounds (default {DEFAULT_ROUNDS})")
    ap.add_argument("--runs", type=int, default=DEFAULT_RUNS,
                    help=f"timed kernel_run calls per process (default {DEFAULT_RUNS})")
    ap.add_argument("--warmup", type=int, default=DEFAULT_WARMUP,
                    help=f"untimed calls per process before timing (default {DEFAULT_WARMUP})")
    ap.add_argument("--kernels", help="comma-separated subset of kernels")
    ap.add_argument("--clock", choices=CLOCKS, default=DEFAULT_CLOCK,
                    help="what every figure measures: thread-cpu (CPU time of the thread calling "
                         "kernel_run) or monotonic (wall time) (default %(default)s)")
    ap.add_argument("--json", metavar="FILE", help="also write the full results as JSON")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.runs < 1 or args.warmup < 0:
        ap.error("--rounds and --runs must be >= 1, --warmup >= 0")

    try:
        manifest = load_manifest(args.build_dir)
        kernels = select_kernels(manifest, args.kernels.split(",") if args.kernels else None)
        variants = native_variants(manifest, args.runs, args.warmup, args.clock)
        host = host_info()
        if not manifest["pgo_available"]:
            print(f"note: no clang PGO column: {manifest.get('pgo_unavailable_reason', '')}",
                  file=sys.stderr)
        t0 = time.monotonic()

        def progress(msg: str) -> None:
            if not args.quiet:
                print(f"[fdo_effect] {msg} ({time.monotonic() - t0:.0f}s)", file=sys.stderr)
        results = measure_interleaved(kernels, variants, args.rounds, progress)
    except BenchError as e:
        print(f"run_native: {e}", file=sys.stderr)
        return 2
    host["loadavg_at_end"] = benchhost.loadavg()
    summary = summarize(results, [c for c, _ in columns_of(variants)], baseline="o2")
    params = {"rounds": args.rounds, "runs_per_process": args.runs, "warmup_per_process": args.warmup,
              "clock": args.clock,
              "order": "round-robin per kernel, variant order rotated every round"}

    print(f"FDO effect, native: {len(kernels)} kernels, {args.rounds} rounds x {args.runs} timed "
          f"calls per variant (+{args.warmup} warm-up), medians; ratio = time / time(clang -O2), "
          f"< 1 is faster; ±x% = half the interquartile range")
    print(f"clock: {args.clock}: {CLOCK_MEANING[args.clock]}")
    load = host.get("loadavg_at_start")
    print(f"flags: {manifest['native_flags']} (PGO: + -fprofile-use, profile from one run of the "
          f"same kernel_run); host: {host['cpu_model']}, {host['cpus']} CPUs, load "
          f"{f'{load[0]:.2f}' if load else 'unknown'}")
    if not manifest["pgo_available"]:
        print(f"no clang PGO column: {manifest.get('pgo_unavailable_reason', '')}")
    print(format_table(results, summary, variants, baseline="o2"))
    if args.json:
        doc = to_json(results, summary, manifest, params, host, variants)
        doc["clock"] = args.clock
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"\nJSON written to {args.json}")
    return 1 if any(res["_errors"] for res in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
