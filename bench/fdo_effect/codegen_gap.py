#!/usr/bin/env python3
"""Is `fdo -O2` behind `clang -O2` because of the code, or because of the clock?

For every selected kernel of bench/fdo_effect (built by its CMakeLists.txt):

1. **The code.** fdo's plain build (`fdo_effect_jit --emit-object`: the kernel's
   IR through fdo's canonicalisation, -O2 pipeline and code generator for the
   host CPU, no profile) is disassembled next to the `o2/<k>` binary
   (`clang-16 -O2 -march=native`), function by function, with addresses,
   relocation targets and alignment padding taken out. Each function of fdo's
   object (entry thunks aside) is reported `identical` when some function of
   the clang binary has the same instruction sequence, else `DIFFERS` (with
   its instruction count and the closest clang function's).
2. **The time.** `o2/<k>` and `fdo_effect_jit` (a fresh process each, the
   compile untimed) run interleaved, the order rotating every round, each with
   `--clock thread-cpu` (CPU time of the calling thread: on a loaded host the
   time other processes take is left out) and `--clock monotonic` (wall time,
   what run_fdo_effect.py reports). Printed: medians (±half the IQR) and
   `fdo -O2 / clang -O2` for both clocks, of the medians and of the minima
   (the fastest call: what is left when nothing else ran on the core).
3. With `--pgo`, the same for the profile: fdo's optimized build made from
   clang's own training profile (`fdo_effect_jit --profdata`, seeded as
   `fdoctl profile import` seeds) against `pgo/<k>` (clang -fprofile-use of
   that profile), code and CPU time. Same profile, so any difference is the
   pipeline; what fdod's own profile changes is run_fdo_effect.py's business.
4. With `--pgo --text-offsets 16,32,48`, that optimized build also loaded with
   its code at each of those offsets past a 64-byte boundary (`fdo_effect_jit
   --text-offset N`: the profile knob `text_offset`, the guard's `text+N`
   variants, docs/jit.md "Text offset"), each a column in the same rounds,
   and per kernel the offset whose median was lowest. That best-of is chosen
   on the very samples it is judged by, so it is an upper bound of what
   picking the offset can buy; fdod's guard picks on its own trials.

    python3 bench/fdo_effect/codegen_gap.py --build-dir build [--kernels knn,ifchain]
            [--rounds 7] [--runs 5] [--warmup 1] [--pgo [--text-offsets 16,32,48]]
            [--code-only] [--json FILE]

(`--code-only`: the machine-code comparison alone, no timing.)

Exit status: 0 when everything was measured (whatever the verdicts), 1 when a
run failed or the checksums disagree, 2 when nothing could be measured.
Python standard library plus run_native.py and objdump (binutils).
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run_native as rn  # noqa: E402
from run_native import BenchError, Variant  # noqa: E402

CLOCKS = [("thread-cpu", "cpu"), ("monotonic", "wall")]

# objdump -d line: "  4011a6:\tmov    %rdi,%rax  # comment"
_INSN = re.compile(r"^\s*[0-9a-f]+:\s*(.*)$")
_FUNC = re.compile(r"^[0-9a-f]+ <([^>]+)>:$")
# Padding between and inside functions (alignment of blocks and loops).
_PADDING = re.compile(r"^(nop|xchg\s+%ax,%ax|data16|cs nopw|int3)")


def normalize(insn: str) -> str:
    """An instruction without what depends on where the code was linked."""
    insn = insn.split("#")[0].strip()
    insn = re.sub(r"\b[0-9a-f]+ <[^>]*>", "TARGET", insn)  # branch/call targets
    insn = re.sub(r"-?0x[0-9a-f]+\(%rip\)", "RIP", insn)  # rip-relative data
    return re.sub(r"\s+", " ", insn)


def disassemble(path: str) -> Dict[str, List[str]]:
    """Function name -> normalized instructions (padding dropped)."""
    try:
        proc = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True,
                              text=True, check=False, timeout=120)
    except OSError as e:
        raise BenchError(f"cannot run objdump: {e}") from None
    if proc.returncode != 0:
        raise BenchError(f"objdump {path} failed: {proc.stderr.strip()}")
    funcs: Dict[str, List[str]] = {}
    current: Optional[List[str]] = None
    for line in proc.stdout.splitlines():
        m = _FUNC.match(line)
        if m:
            current = funcs.setdefault(m.group(1), [])
            continue
        m = _INSN.match(line)
        if m and current is not None:
            insn = normalize(m.group(1))
            if insn and not _PADDING.match(insn):
                current.append(insn)
    return funcs


def compare_code(fdo: Dict[str, List[str]], clang: Dict[str, List[str]]) -> List[dict]:
    """One verdict per function of fdo's object (thunks aside)."""
    verdicts = []
    for name, insns in fdo.items():
        if name.startswith("__fdo_"):
            continue
        same = [c for c, ci in clang.items() if ci == insns]
        if same:
            # Prefer the clang function of the same name (external symbols).
            match = name if name in same else same[0]
            verdicts.append({"function": name, "identical": True, "clang_function": match,
                             "instructions": len(insns)})
            continue
        closest = clang.get(name)
        verdicts.append({"function": name, "identical": False,
                         "clang_function": name if closest is not None else None,
                         "instructions": len(insns),
                         "clang_instructions": len(closest) if closest is not None else None})
    return verdicts


def run_with_clock(cmd: Sequence[str], clock: str, runs: int, warmup: int) -> dict:
    full = list(cmd) + ["--runs", str(runs), "--warmup", str(warmup), "--clock", clock]
    try:
        proc = subprocess.run(full, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchError(f"{' '.join(full)}: {e}") from None
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(full)} exited with {proc.returncode}: {proc.stderr.strip()}")
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        return {"checksum": int(out["checksum"]), "ns": [int(x) for x in out["ns"]]}
    except (IndexError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise BenchError(f"{full[0]} printed unexpected output ({e}): {proc.stdout[:200]!r}")


def variants(manifest: dict, runs: int, warmup: int, pgo: bool,
             offsets: Sequence[int] = ()) -> List[Variant]:
    jit = manifest["jit_driver"]
    out = []
    for clock, tag in CLOCKS:
        out.append(Variant(f"o2_{tag}", f"clang -O2 {tag}",
                           lambda k, c=clock: run_with_clock([k["o2"]], c, runs, warmup)))
        out.append(Variant(f"fdo_{tag}", f"fdo -O2 {tag}",
                           lambda k, c=clock: run_with_clock([jit, "--ir", k["ir"]], c, runs,
                                                             warmup)))
    if pgo:
        out.append(Variant("pgo_cpu", "clang PGO cpu",
                           lambda k: run_with_clock([k["pgo"]], "thread-cpu", runs, warmup)))
        out.append(Variant("fdopgo_cpu", "fdo on clang's profile cpu",
                           lambda k: run_with_clock([jit, "--ir", k["ir"], "--profdata",
                                                     k["profdata"]], "thread-cpu", runs, warmup)))
        for o in offsets:
            out.append(Variant(f"fdopgo_cpu_t{o}", f"fdo on clang's profile cpu +{o}",
                               lambda k, o=o: run_with_clock(
                                   [jit, "--ir", k["ir"], "--profdata", k["profdata"],
                                    "--text-offset", str(o)], "thread-cpu", runs, warmup)))
    return out


def parse_offsets(text: Optional[str]) -> List[int]:
    """`--text-offsets`: distinct offsets from 16, 32, 48 (0 is the plain column)."""
    if not text:
        return []
    out: List[int] = []
    for part in text.split(","):
        try:
            o = int(part)
        except ValueError:
            o = -1
        if o not in (16, 32, 48):
            raise BenchError(f"--text-offsets: {part!r} is not 16, 32 or 48")
        if o not in out:
            out.append(o)
    return out


def best_offsets(results: Dict[str, dict], offsets: Sequence[int]) -> dict:
    """Per kernel, the offset (0 = the plain fdopgo column) with the lowest
    median, its median / clang PGO's, and the geomean of those ratios."""
    per: Dict[str, dict] = {}
    for kname, res in results.items():
        cols = [(0, "fdopgo_cpu")] + [(o, f"fdopgo_cpu_t{o}") for o in offsets]
        meds = [(res[c].get("median_ns"), o) for o, c in cols if res[c].get("median_ns")]
        pgo = res["pgo_cpu"].get("median_ns")
        if not meds or not pgo:
            continue
        best_ns, best_o = min(meds)
        per[kname] = {"offset": best_o, "ratio": best_ns / pgo}
    return {"kernels": per, "geomean": rn.geomean([v["ratio"] for v in per.values()])}


def code_verdicts(manifest: dict, kernels: Sequence[dict],
                  pgo: bool = False) -> Dict[str, List[dict]]:
    """fdo's plain build against o2/<k>; with `pgo`, fdo's build on clang's
    profile against pgo/<k>."""
    if not shutil.which("objdump"):
        raise BenchError("objdump (binutils) is not installed")
    out: Dict[str, List[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="codegen_gap.") as tmp:
        for k in kernels:
            obj = os.path.join(tmp, k["name"] + ".o")
            cmd = [manifest["jit_driver"], "--ir", k["ir"], "--runs", "1", "--warmup", "0",
                   "--emit-object", obj]
            if pgo:
                cmd += ["--profdata", k["profdata"]]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
            if proc.returncode != 0:
                raise BenchError(f"{' '.join(cmd)} exited with {proc.returncode}: "
                                 f"{proc.stderr.strip()}")
            out[k["name"]] = compare_code(disassemble(obj), disassemble(k["pgo" if pgo else "o2"]))
    return out


def format_code(verdicts: Dict[str, List[dict]], other: str = "clang's",
                verdict_title: str = "verdict") -> str:
    """One row per function of compare_code's verdicts; `other` names the
    build the functions were compared with."""
    rows = [["kernel", "function (fdo)", "instructions", verdict_title]]
    for kname, vs in verdicts.items():
        for v in vs:
            if v["identical"]:
                verdict = f"identical to {other} {v['clang_function']}"
            elif v["clang_instructions"] is not None:
                verdict = f"DIFFERS ({other} {v['clang_function']}: {v['clang_instructions']})"
            else:
                verdict = f"DIFFERS (no function of {other} with this code)"
            rows.append([kname, v["function"], str(v["instructions"]), verdict])
    return rn.align(rows)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=rn.default_build_dir())
    ap.add_argument("--kernels", help="comma-separated kernel names (default: all)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--pgo", action="store_true",
                    help="also fdo's build on clang's training profile against clang PGO")
    ap.add_argument("--text-offsets", help="with --pgo: also time fdo's build on clang's "
                    "profile with its code at these offsets (from 16,32,48)")
    ap.add_argument("--code-only", action="store_true", help="compare the code, time nothing")
    ap.add_argument("--json", help="write code verdicts and every sample here")
    args = ap.parse_args(argv)
    try:
        manifest = rn.load_manifest(args.build_dir)
        if "jit_driver" not in manifest:
            raise BenchError("the manifest names no jit_driver: reconfigure the build directory")
        kernels = rn.select_kernels(manifest, args.kernels.split(",") if args.kernels else None)
        offsets = parse_offsets(args.text_offsets)
        if offsets and not args.pgo:
            raise BenchError("--text-offsets times fdo's build on clang's profile: add --pgo")
        if args.pgo and not manifest["pgo_available"]:
            raise BenchError("--pgo: this build has no clang PGO binaries "
                             f"({manifest.get('pgo_unavailable_reason', '')})")
        load_before = os.getloadavg()
        code = code_verdicts(manifest, kernels)
        print("Machine code of fdo's plain build against clang -O2 -march=native "
              "(addresses, relocations and padding aside):")
        print(format_code(code))
        code_pgo = {}
        if args.pgo:
            code_pgo = code_verdicts(manifest, kernels, pgo=True)
            print("\nMachine code of fdo's optimized build on clang's training profile against "
                  "clang PGO:")
            print(format_code(code_pgo))
        if args.code_only:
            if args.json:
                with open(args.json, "w", encoding="utf-8") as f:
                    json.dump({"code": code, "code_pgo": code_pgo}, f, indent=1)
            return 0
        vs = variants(manifest, args.runs, args.warmup, args.pgo, offsets)
        results = rn.measure_interleaved(
            kernels, vs, args.rounds, progress=lambda m: print(m, file=sys.stderr, flush=True))
        load_after = os.getloadavg()
    except BenchError as e:
        print(f"codegen_gap: {e}", file=sys.stderr)
        return 2
    columns = rn.columns_of(vs)
    pairs = [(f"fdo_{tag}", f"o2_{tag}") for _, tag in CLOCKS]
    if args.pgo:
        pairs.append(("fdopgo_cpu", "pgo_cpu"))
    pairs += [(f"fdopgo_cpu_t{o}", "pgo_cpu") for o in offsets]
    summary = rn.summarize(results, [], baseline="o2_cpu", pair_ratios=pairs)
    # The same ratios of the fastest calls, as "<pair> min".
    for kname, res in results.items():
        for num, den in pairs:
            a, b = res[num].get("min_ns"), res[den].get("min_ns")
            summary["ratios"][kname][f"{num}/{den} min"] = (a / b) if a and b else None
    for num, den in pairs:
        summary["geomean"][f"{num}/{den} min"] = rn.geomean(
            [summary["ratios"][k][f"{num}/{den} min"] for k in results])
    print(f"\nInterleaved, {args.rounds} rounds x {args.runs} calls, load "
          f"{load_before[0]:.1f} -> {load_after[0]:.1f}; cpu = CLOCK_THREAD_CPUTIME_ID, "
          f"wall = CLOCK_MONOTONIC:")
    print(rn.format_ms_table(results, columns))
    print()
    shown = [("fdo_cpu/o2_cpu", "fdo -O2 / clang -O2 cpu"),
             ("fdo_cpu/o2_cpu min", "(min)"),
             ("fdo_wall/o2_wall", "fdo -O2 / clang -O2 wall"),
             ("fdo_wall/o2_wall min", "(min)")]
    if args.pgo:
        shown += [("fdopgo_cpu/pgo_cpu", "fdo on clang's profile / clang PGO cpu"),
                  ("fdopgo_cpu/pgo_cpu min", "(min)")]
    shown += [(f"fdopgo_cpu_t{o}/pgo_cpu", f"+{o} / clang PGO cpu") for o in offsets]
    print(rn.format_ratio_table(results, summary, dict(columns), pairs=shown))
    best = None
    if offsets:
        best = best_offsets(results, offsets)
        print("\nBest text offset per kernel (lowest median of fdo on clang's profile; chosen on "
              "the samples it is judged by, so an upper bound of what choosing buys):")
        rows = [["kernel", "offset", "best / clang PGO cpu"]]
        for kname, b in best["kernels"].items():
            rows.append([kname, f"+{b['offset']}", f"{b['ratio']:.3f}"])
        if best["geomean"] is not None:
            rows.append(["geomean", "", f"{best['geomean']:.3f}"])
        print(rn.align(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"code": code, "code_pgo": code_pgo, "results": results, "summary": summary,
                       "best_offsets": best,
                       "load": [load_before[0], load_after[0]], "rounds": args.rounds,
                       "runs": args.runs, "warmup": args.warmup}, f, indent=1)
    failed = any(res["_errors"] for res in results.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
