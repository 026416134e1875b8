"""The fdo_effect bench's column for fdod with the live A/B guard and knob
tuning on (docs/guard.md): a second daemon, the same kernels, a new program
per round, run until the guard has decided the profile trial and spent its
tuning budget, then timed on the variant it serves.

Also what the guard cost (stages served by a variant its trial found slower,
compiles spent on trials) and the issue's targets, checked against the other
columns. Used by run_fdo_effect.py; standard library only.
"""
import re
import statistics
from typing import Dict, List, Sequence, Tuple

import harness
import run_native as rn
from run_native import BenchError

U64 = (1 << 64) - 1
COLUMNS = [("fdo_guard_final", "fdo guard final")]
# Guard B: the same guard with some guard.* (or policy.*) settings changed
# (run_fdo_effect.py --guard-b KEY=VALUE, --guard-wall), timed side by side with it.
B_COLUMNS = [("fdo_guard_b_final", "fdo guard B final")]
# The summary a verdict's stage reports: "<candidate> accepted: ...".
VERDICT = re.compile(r" (accepted|rejected|not taken \(no difference\)|"
                     r"kept \(no difference, faster median\)): ")
COMPILES = re.compile(r"^fdo_cache_compiles_total (\d+)$", re.M)


def settings(min_stages: int, quick: bool) -> Dict[str, object]:
    """The guarded daemon: the bench's fdod settings with the guard on, the
    first trial as soon as the profile exists and tuning after a few stages
    (a bench program runs many stages by construction)."""
    s = {
        "policy.min_stages": min_stages,
        "policy.min_counts": 1000,
        "tier_up": "sync",
        "guard": "on",
        "guard.min_stages": 0,
        "guard.tune_min_stages": 4,
        "guard.tune_max_variants": 1 if quick else 4,
        # A large effect is kept after six blocks of four stages (12 pairs:
        # docs/guard.md, "The test"), no sooner; --quick leaves room for two
        # blocks more, a full run keeps the daemon's default budget (64).
        "guard.max_pairs": 16 if quick else 64,
        "guard.clock": "cpu",
        # fdod's default: the context-sensitive round, judged by the guard
        # (its -cs knob step); named here so the runner counts its stages.
        "policy.cs_pgo_stages": 2,
        "compile_workers": 1,
        "exec_workers": 1,
        "exec_timeout_ms": 60000,
        "exec_memory_mb": 2048,
        "feedback_flush_ms": 200,
        "log_level": "notice",
    }
    return s


def b_settings(base: Dict[str, object], overrides: Sequence[str]) -> \
        Tuple[Dict[str, object], str]:
    """Guard B's settings: `base` with each "guard.KEY=VALUE" (or
    "policy.KEY=VALUE", e.g. policy.cs_pgo_stages=2: the context-sensitive
    round, which the guard then judges) applied (a number where VALUE reads
    as one), and the changes as people read them. Only guard.* and policy.*
    keys: B compares how the guarded daemon decides, nothing else."""
    out = dict(base)
    changed = []
    for item in overrides:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key.startswith(("guard.", "policy.")) or not value:
            raise BenchError(f"guard B setting '{item}': expected guard.KEY=VALUE or "
                             f"policy.KEY=VALUE")
        parsed: object = value
        for conv in (int, float):
            try:
                parsed = conv(value)
                break
            except ValueError:
                pass
        out[key] = parsed
        changed.append(f"{key} {value}")
    if not changed:
        raise BenchError("guard B needs at least one guard.KEY=VALUE")
    return out, ", ".join(changed)


def compiles(client) -> int:
    m = COMPILES.search(client.call("metrics", {}, check_schema=False)["text"])
    if not m:
        raise BenchError("fdod's metrics have no fdo_cache_compiles_total")
    return int(m.group(1))


def losing_stages(stages: Sequence[dict]) -> Tuple[int, int, List[str]]:
    """(stages that ran a variant its trial then found slower, stages under a
    profile, verdict summaries). Before the first verdict the profile is served
    as it is: those stages ran the profiled build, the first trial's candidate."""
    losing, under_profile, verdicts = 0, 0, []
    segment: List[dict] = []
    for s in stages:
        if s["mode"] in ("instrumented", "cs_instrumented"):
            continue
        under_profile += 1
        segment.append(s)
        m = VERDICT.search(s["trial"] or "")
        if not m:
            continue
        verdicts.append(s["trial"])
        loser = {"accepted": "incumbent", "rejected": "candidate"}.get(m.group(1))
        if loser:
            first = len(verdicts) == 1
            losing += sum(1 for x in segment if x["role"] == loser or
                          (first and loser == "candidate" and x["role"] == "current"))
        segment = []
    return losing, under_profile, verdicts


def settled(stages: Sequence[dict], tail: int) -> bool:
    """The last `tail` stages (0: not yet) all ran the same incumbent and
    none was counted in a trial."""
    last = stages[-tail:] if tail > 0 else []
    return len(last) == tail > 0 and all(
        s["role"] == "incumbent" and not s["counted"] and s["name"] == last[0]["name"]
        for s in last)


class GuardedRunner:
    """Runs one kernel through a fresh program on the guarded fdod until the
    guard settles (the profile trial and every knob trial decided), then
    --final-stages more stages on the variant it serves."""

    def __init__(self, client, entry: str, config: Dict[str, object], final_stages: int,
                 ir_text, clock: str = rn.CLOCK_MONOTONIC, column: str = COLUMNS[0][0]):
        self.client = client
        self.column = column
        self.clock = rn.check_clock(clock)
        self.entry = entry
        self.final_stages = final_stages
        self.trials = 1 + int(config["guard.tune_max_variants"])
        pairs = int(config["guard.max_pairs"])
        cs_stages = int(config.get("policy.cs_pgo_stages", 2))  # absent: fdod's default
        # Instrumented stages (and the context-sensitive round's), every
        # trial at its budget (plus stages of the arm still compiling), the
        # final stages and some slack.
        self.limit = int(config["policy.min_stages"]) + cs_stages + 4 + \
            self.trials * (2 * pairs + 6) + int(config["guard.tune_min_stages"]) + final_stages
        # What an unguarded run compiles: instrumented, (cs_instrumented,)
        # optimized; the rest are the guard's.
        self.base_compiles = 3 if cs_stages > 0 else 2
        # A budget larger than the knob steps that apply to a program is
        # never spent (steps that do not apply are not counted): then the
        # guard has settled once, after the profile trial and a knob trial,
        # this many stages in a row ran the incumbent outside any trial (a
        # knob trial follows the last one at once, its build compiled ahead;
        # only the first waits guard.tune_min_stages).
        self.quiet = int(config["guard.tune_min_stages"]) + 2 * final_stages
        self.ir_text = ir_text
        self.round: Dict[str, int] = {}

    def __call__(self, kernel: dict) -> dict:
        name = kernel["name"]
        rnd = self.round.get(name, 0)
        self.round[name] = rnd + 1
        text = self.ir_text(kernel) + (f"\n; fdo_effect bench, guarded round {rnd}\n"
                                       f"@fdo_effect_guarded_{rnd} = constant i64 {rnd}\n")
        try:
            before = compiles(self.client)
            reg = self.client.call("program.register", {"ir": text, "name": f"{name}@g{rnd}"},
                                   check_schema=False)
        except harness.RpcError as e:
            raise BenchError(f"guarded fdod: {e}") from None
        stages: List[dict] = []
        decided = 0
        while len(stages) < self.limit:
            try:
                r = self.client.call("execute", {"program": reg["program"], "entry": self.entry},
                                     check_schema=False)
            except harness.RpcError as e:
                raise BenchError(f"guarded execute (stage {len(stages)}): {e}") from None
            st = r["stage"]
            v = st["variant"]
            # "ns": the stage's time on the bench's clock (the column takes
            # it); the guard itself compares its own (guard.clock: the
            # worker's process CPU time by default), whatever the bench's.
            ns = rn.stage_ns(st, self.clock, f"{name} guarded round {rnd} stage {len(stages)} "
                                             f"({st['mode']})")
            stages.append({"mode": st["mode"], "role": v["role"], "name": v["name"],
                           "counted": v["counted"], "trial": v["trial"],
                           "recompiled": st["recompiled"], "compile_ms": st["compile_ms"],
                           "exec_ns": st["exec_ns"],
                           "cpu_ns": (st.get("counters") or {}).get("thread_cpu_ns"), "ns": ns,
                           "value": int(r["value"]) & U64})
            if VERDICT.search(v["trial"] or ""):
                decided += 1
            # Settled: every trial decided, and the last stages all ran the
            # incumbent outside any trial (a profile rewrite meanwhile starts
            # another trial, which is waited for too).
            if settled(stages, self.final_stages if decided >= self.trials else
                       self.quiet if decided >= 2 else 0):
                break
        else:
            raise BenchError(f"the guard did not settle within {self.limit} stages "
                             f"({decided} of {self.trials} trials decided)")
        values = {s["value"] for s in stages}
        if len(values) != 1:
            raise BenchError(f"guarded stages returned different values: {sorted(values)}")
        final = stages[-self.final_stages:]
        try:
            spent = compiles(self.client) - before
        except harness.RpcError as e:
            raise BenchError(f"guarded fdod metrics: {e}") from None
        losing, under_profile, verdicts = losing_stages(stages)
        return {
            "checksum": stages[0]["value"],
            "columns": {self.column: [s["ns"] for s in final]},
            "details": {"program": reg["program"], "served": final[-1]["name"],
                        "verdicts": verdicts, "stages": stages,
                        "stages_under_profile": under_profile, "losing_stages": losing,
                        "compiles": spent,
                        "trial_compiles": max(0, spent - self.base_compiles)},
        }


def cost_table(results: Dict[str, dict], variant: str = "fdod_guard") -> str:
    """Per kernel over all rounds: what the guard (the runner of `variant`)
    served in the end and what it cost."""
    rows = [["kernel", "rounds", "served at the end", "stages", "losing", "losing share",
             "trial compiles"]]
    for kname, res in results.items():
        runs = res["_details"].get(variant, [])
        if not runs:
            rows.append([kname, "0", "-", "-", "-", "-", "-"])
            continue
        served = sorted({d["served"] for d in runs})
        n = sum(d["stages_under_profile"] for d in runs)
        lose = sum(d["losing_stages"] for d in runs)
        rows.append([kname, str(len(runs)), ", ".join(served), str(n), str(lose),
                     f"{lose / n:.1%}" if n else "-",
                     f"{statistics.mean(d['trial_compiles'] for d in runs):.1f}"])
    return rn.align(rows)


def targets(results: Dict[str, dict], summary: dict, column: str = "fdo_guard_final") -> \
        Tuple[List[str], bool]:
    """The issue's targets for `column`: on every kernel its median <= the
    faster of clang -O2 and clang PGO within the noise (the larger of the two
    columns' half interquartile ranges, as printed), and the geometric mean of
    column / clang PGO <= 0.95. Returns the report lines and whether all hold."""
    lines: List[str] = []
    all_met = True
    for kname, res in results.items():
        mine = res.get(column, {})
        best = min((res[c] for c in ("o2", "pgo") if res.get(c, {}).get("median_ns")),
                   key=lambda s: s["median_ns"], default=None)
        if not mine.get("median_ns") or best is None:
            lines.append(f"  {kname}: not measured")
            all_met = False
            continue
        noise = max((s.get("spread") or 0.0) / 2 * s["median_ns"] for s in (mine, best))
        excess = mine["median_ns"] - best["median_ns"]
        met = excess <= noise
        all_met &= met
        lines.append(f"  {kname}: {mine['median_ns'] / 1e6:.2f} ms vs best native "
                     f"{best['median_ns'] / 1e6:.2f} ms (noise ±{noise / 1e6:.2f}): "
                     f"{'met' if met else 'NOT met'}")
    gm = summary["geomean"].get(f"{column}/pgo")
    met = gm is not None and gm <= 0.95
    all_met &= met
    lines.append(f"  geomean {column} / clang PGO = "
                 f"{'n/a' if gm is None else f'{gm:.3f}'} (target <= 0.95): "
                 f"{'met' if met else 'NOT met'}")
    return lines, all_met
