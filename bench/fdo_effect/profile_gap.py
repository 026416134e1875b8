#!/usr/bin/env python3
"""Is fdod's own profile what makes `fdo final` slower than clang PGO?

For every selected kernel of bench/fdo_effect (default dispatch, memops,
interp; a build with clang PGO, see CMakeLists.txt):

1. **The profile.** The kernel's IR runs through a fresh fdod as in
   run_fdo_effect.py (the same daemon settings: --min-stages instrumented
   stages, then one optimized stage), and its profile is exported twice
   (`profile.export`): as the profile document fdod compiles with (JSON) and
   as an indexed .profdata (what `fdoctl profile export --format profdata`
   writes). `llvm-profdata-16 overlap` of clang's training profile
   (profiles/<k>.pgo.profdata, one kernel_run) against fdod's prints the edge,
   indirect-call and memop overlap and count sums (fdod's are --min-stages
   times clang's when the stages ran the same input).
2. **The code.** fdo's optimized build on fdod's profile document
   (`fdo_effect_jit --profile`, the compile fdod's optimized stage runs) and on
   clang's profile (`fdo_effect_jit --profdata`, seeded as `fdoctl profile
   import` seeds) are disassembled function by function (addresses,
   relocations and padding aside, as codegen_gap.py does), both without value
   specialization (clang's profile has no argument values). `identical` means
   fdod's profile leads to clang's profile's machine code: whatever separates
   `fdo final` from clang PGO is then not in the profile.
3. With `--rounds N` (N > 0), the CPU time (CLOCK_THREAD_CPUTIME_ID) of that
   same code in four places, interleaved with a rotating order: `pgo/<k>`
   (clang PGO, native), fdo_effect_jit on clang's profile, fdo_effect_jit on
   fdod's profile document (each --runs calls after --warmup in one process),
   and --runs optimized stages of fdod (stage.counters.thread_cpu_ns: one call
   per stage in the exec worker). Ratios are to clang PGO.

    python3 bench/fdo_effect/profile_gap.py --build-dir build
            [--kernels dispatch,memops,interp] [--min-stages 3]
            [--rounds 0] [--runs 5] [--warmup 1] [--json FILE]

Exit status: 0 when fdod's profile gives clang's profile's code for every
kernel, 1 when some function differs, 2 when something could not be run (77
when this build has no clang PGO: the ctest skips).
Python standard library, tests/e2e/harness.py, objdump and llvm-profdata-16.
"""
import argparse
import base64
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "e2e"))
import codegen_gap as cg  # noqa: E402
import harness  # noqa: E402
import run_fdo_effect as rfe  # noqa: E402
import run_native as rn  # noqa: E402
from run_native import BenchError  # noqa: E402

DEFAULT_KERNELS = "dispatch,memops,interp"
SKIP = 77


def run(cmd: Sequence[str], timeout: float = 600) -> str:
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchError(f"{' '.join(cmd)}: {e}") from None
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(cmd)} exited with {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


class FdodProfile:
    """One kernel through fdod: its program id and exported profile."""

    def __init__(self, client, kernel: dict, entry: str, min_stages: int, tmp: str):
        self.client = client
        self.entry = entry
        text = pathlib.Path(kernel["ir"]).read_text()
        reg = client.call("program.register", {"ir": text, "name": kernel["name"]},
                          check_schema=False)
        self.program = reg["program"]
        modes = [self.execute()["stage"]["mode"] for _ in range(min_stages + 1)]
        if modes[-1] != "optimized":
            raise BenchError(f"{kernel['name']}: stage {min_stages} ran {modes[-1]} code, not "
                             f"optimized (modes {modes})")
        key = [reg["profile_key"]]
        doc = client.call("profile.export", {"profile_keys": key, "format": "json"},
                          check_schema=False)
        self.doc_path = os.path.join(tmp, kernel["name"] + ".profile.json")
        profile = doc["bundle"]["profiles"][0]["current"]["profile"]
        # The question is the counts: clang's profile cannot carry argument
        # values, so value specialization (docs/jit.md) is left out of both.
        profile["knobs"]["spec_min_share"] = 0
        with open(self.doc_path, "w", encoding="utf-8") as f:
            json.dump(profile, f)
        pd = client.call("profile.export", {"profile_keys": key, "format": "profdata"},
                         check_schema=False)
        self.profdata_path = os.path.join(tmp, kernel["name"] + ".fdo.profdata")
        with open(self.profdata_path, "wb") as f:
            f.write(base64.b64decode(pd["profdata_base64"]))

    def execute(self) -> dict:
        try:
            return self.client.call("execute", {"program": self.program, "entry": self.entry},
                                    check_schema=False)
        except harness.RpcError as e:
            raise BenchError(f"execute: {e}") from None

    def stages(self, n: int) -> dict:
        """n optimized stages: {"checksum", "ns": [thread CPU ns of each]}."""
        values, ns = set(), []
        for _ in range(n):
            r = self.execute()
            st = r["stage"]
            if st["mode"] != "optimized":
                raise BenchError(f"stage {st['number']} ran {st['mode']} code, not optimized")
            cpu = (st.get("counters") or {}).get("thread_cpu_ns")
            if not cpu:
                raise BenchError(f"stage {st['number']} reports no counters.thread_cpu_ns")
            values.add(int(r["value"]) & rfe.U64)
            ns.append(int(cpu))
        if len(values) != 1:
            raise BenchError(f"stages returned different values: {sorted(values)}")
        return {"checksum": values.pop(), "ns": ns}


def overlap(llvm_profdata: str, base: str, test: str) -> List[str]:
    """The program-level lines of `llvm-profdata overlap`."""
    out = run([llvm_profdata, "overlap", base, test])
    lines = [ln.strip() for ln in out.splitlines()]
    start = next((i for i, ln in enumerate(lines) if ln.startswith("Program level")), None)
    return [ln for ln in lines[start + 1:] if ln] if start is not None else lines


def text_records(text: str):
    """(header lines, [(name, record text)]) of `llvm-profdata merge --text` output."""
    lines = text.splitlines()
    i = 0
    while i < len(lines) and (lines[i].startswith("#") or lines[i].startswith(":")):
        i += 1
    header, records, cur = lines[:i], [], []
    for ln in lines[i:] + [""]:
        if ln.strip():
            cur.append(ln)
        elif cur:
            name = next((c for c in cur if not c.startswith("#")), "")
            records.append((name, "\n".join(cur)))
            cur = []
    return header, records


def program_only(llvm_profdata: str, clang_pd: str, fdod_pd: str, out: str) -> List[str]:
    """clang's profile with only the records fdod's profile has (the program's
    functions): what fdod could ever see. clang's training profile also holds
    driver.c's `main`, which fdod is never given and which, kept by an import,
    changes the profile summary (README, "Why `bst` differed"). Returns the
    names dropped."""
    keep = {n for n, _ in text_records(run([llvm_profdata, "merge", "--text", fdod_pd,
                                            "-o", "-"]))[1]}
    header, records = text_records(run([llvm_profdata, "merge", "--text", clang_pd, "-o", "-"]))
    dropped = [n for n, _ in records if n not in keep]
    txt = out + ".txt"
    with open(txt, "w", encoding="utf-8") as f:
        f.write("\n".join(header) + "\n")
        f.write("\n\n".join(r for n, r in records if n in keep) + "\n")
    run([llvm_profdata, "merge", txt, "-o", out])
    return dropped


def code(jit: str, kernel: dict, profile_args: Sequence[str], tmp: str, tag: str):
    obj = os.path.join(tmp, f"{kernel['name']}.{tag}.o")
    run([jit, "--ir", kernel["ir"], "--runs", "1", "--warmup", "0", "--emit-object", obj] +
        list(profile_args))
    return cg.disassemble(obj)


def jit_variant(jit: str, profile_flag: str, path_of, runs: int, warmup: int):
    return lambda k: cg.run_with_clock([jit, "--ir", k["ir"], profile_flag, path_of(k)],
                                       "thread-cpu", runs, warmup)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=rn.default_build_dir())
    ap.add_argument("--kernels", default=DEFAULT_KERNELS,
                    help=f"comma-separated kernel names (default {DEFAULT_KERNELS})")
    ap.add_argument("--min-stages", type=int, default=3,
                    help="fdod's policy.min_stages, as run_fdo_effect.py (default 3)")
    ap.add_argument("--rounds", type=int, default=0, help="timing rounds (default 0: none)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json", help="write overlaps, code verdicts and samples here")
    args = ap.parse_args(argv)
    try:
        manifest = rn.load_manifest(args.build_dir)
        if not manifest.get("pgo_available"):
            print("profile_gap: this build has no clang PGO "
                  f"({manifest.get('pgo_unavailable_reason', '')}): skipped", file=sys.stderr)
            return SKIP
        jit = manifest["jit_driver"]
        kernels = rn.select_kernels(manifest, args.kernels.split(","))
        entry = manifest.get("entry", "kernel_run")
    except BenchError as e:
        print(f"profile_gap: {e}", file=sys.stderr)
        return 2
    report: Dict[str, dict] = {}
    differs = False
    daemon = harness.Daemon(config=rfe.fdod_settings(args.min_stages),
                            build_dir=args.build_dir, prefix="fdo-bench-profile-gap-")
    client = None
    try:
        with tempfile.TemporaryDirectory(prefix="profile_gap.") as tmp:
            daemon.start()
            client = harness.Client(daemon.socket, timeout=300)
            fdod: Dict[str, FdodProfile] = {}
            for k in kernels:
                fp = FdodProfile(client, k, entry, args.min_stages, tmp)
                fdod[k["name"]] = fp
                lines = overlap(manifest["llvm_profdata"], k["profdata"], fp.profdata_path)
                clang_pd = os.path.join(tmp, k["name"] + ".clang-program.profdata")
                dropped = program_only(manifest["llvm_profdata"], k["profdata"],
                                       fp.profdata_path, clang_pd)
                verdicts = cg.compare_code(code(jit, k, ["--profile", fp.doc_path], tmp, "fdod"),
                                           code(jit, k, ["--profdata", clang_pd], tmp, "clang"))
                differs = differs or not all(v["identical"] for v in verdicts)
                report[k["name"]] = {"overlap": lines, "code": verdicts,
                                     "clang_records_outside_program": dropped}
                print(f"{k['name']}: llvm-profdata overlap clang's profile / fdod's:")
                for ln in lines:
                    print(f"  {ln}")
                print(f"  clang's records outside the program, left out of the code comparison: "
                      f"{', '.join(d.rsplit('/', 1)[-1] for d in dropped) or 'none'}")
            print("\nMachine code of fdo's optimized build on fdod's profile against the same "
                  "build on clang's profile:")
            print(cg.format_code({n: r["code"] for n, r in report.items()},
                                 other="the clang-profile build's",
                                 verdict_title="on clang's profile"))
            if args.rounds > 0:
                vs = [
                    rn.Variant("pgo", "clang PGO", lambda k: cg.run_with_clock(
                        [k["pgo"]], "thread-cpu", args.runs, args.warmup)),
                    rn.Variant("jit_clang", "jit, clang profile",
                               jit_variant(jit, "--profdata", lambda k: k["profdata"],
                                           args.runs, args.warmup)),
                    rn.Variant("jit_fdod", "jit, fdod profile",
                               jit_variant(jit, "--profile",
                                           lambda k: fdod[k["name"]].doc_path,
                                           args.runs, args.warmup)),
                    rn.Variant("fdod", "fdod stage",
                               lambda k: fdod[k["name"]].stages(args.runs)),
                ]
                load_before = os.getloadavg()
                results = rn.measure_interleaved(
                    kernels, vs, args.rounds,
                    progress=lambda m: print(m, file=sys.stderr, flush=True))
                load_after = os.getloadavg()
                print(f"\nCPU time (CLOCK_THREAD_CPUTIME_ID), {args.rounds} rounds x {args.runs} "
                      f"calls, load {load_before[0]:.1f} -> {load_after[0]:.1f}:")
                print(rn.format_ms_table(results, rn.columns_of(vs)))
                rows = [["kernel"] + [v.label + " / clang PGO" for v in vs[1:]]]
                for name, res in results.items():
                    base = res["pgo"].get("median_ns")
                    rows.append([name] + [
                        f"{res[v.name]['median_ns'] / base:.3f}"
                        if base and res[v.name].get("median_ns") else "-" for v in vs[1:]])
                print(rn.align(rows))
                for name, res in results.items():
                    report[name]["time"] = {v.name: res[v.name] for v in vs}
                    report[name]["time"]["load"] = [load_before[0], load_after[0]]
    except (BenchError, harness.RpcError, RuntimeError, OSError) as e:
        print(f"profile_gap: {e}", file=sys.stderr)
        return 2
    finally:
        if client is not None:
            client.close()
        if daemon.proc is not None:
            daemon.stop()
        daemon.cleanup()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
