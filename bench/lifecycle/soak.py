#!/usr/bin/env python3
"""Lifecycle soak (docs/lifecycle.md): every program of the project's corpus run through a
real fdod stage after stage with every mechanism on at its default -- the guard, the
context-sensitive round, sampling and drift -- and `tier_up = sync`, so that a stage that
runs an earlier build is a fault, not a compile in flight.

The corpus: examples/*.c (their no-argument entry), the fdo_effect kernels (kernel_run),
and the e2e fixtures branchy.ll, pgo_loses.ll, exits.ll (a program that ends with
exit(0)) and two_phase.ll, the phase-change program: phase A until its lifecycle is
settled (steady) or half the stages are gone, then phase B. With --third-party DIR, every
*.ll file there too (entry `run`, or `main` with argc 1 and no argv: an i32 and a pointer
argument of 0).

For each program it prints one row: stages to optimized (the first stage that ran neither
instrumented nor context-sensitive-instrumented code), re-profiles (lifecycle transitions
caused by drift) and those that found an earlier profile again, the stages that ran
instrumented code after the first optimized one, the stages on an earlier build (cache
outcome tier_up_pending) and the longest run of them, trials the guard ran, and the final
mode, phase and served variant. Then it checks the properties the lifecycle promises:

  steady programs are optimized by stage 10 and never return to instrumented code;
  the guard's trials cause no re-profile (no steady program is re-profiled at all);
  no program runs more than 3 consecutive stages on an earlier build;
  the phase-change program is re-profiled after the switch, and its new profile is B's.

With --timing (the bench; never in a test) the phase-change program's new code is timed
against its old code on phase B, interleaved: a twin of the program (the same IR with one
unused global more, so its own profile key) is run on phase A until optimized and pinned,
then the two run phase B one after the other for --rounds rounds; the ratio of medians
(new / old, process CPU time of the call) says whether the re-profiled code is at least as
fast. Quote the host load with it: it is a timing.

In-process rows (prefix "inproc:"): the fdo_effect kernels and pgo_loses run in this
process through libfdo (docs/runtimes.md, "Guarded leases"), one call and one flush per
stage, every lease planned by the lifecycle and the guard as execute's stages are. The
same properties are checked on them, with the stage's variant as libfdo reports it, plus:
every build returns the same value, and no more objects are linked than the program's
builds (at most 3 + 2 per trial).

Runs under CTest as e2e:LifecycleSoak (tests/e2e/test_lifecycle.py) with fewer stages.
Python standard library plus tests/e2e/harness.py."""
import argparse
import json
import os
import pathlib
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "tests" / "e2e"))
import harness  # noqa: E402

INSTRUMENTED = ("instrumented", "cs_instrumented")
TWO_PHASE_ITERATIONS = 60_000_000  # about 100 ms a stage: enough samples at 250 Hz


class Program:
    """One program of the soak: its IR, entry, and the arguments of stage i (phase_at: the
    stage phase B starts at, for the phase-change program; decided while it runs)."""

    def __init__(self, name, ir_text, entry, args=None, phase_change=False, buffers=None):
        self.name = name
        self.ir = ir_text
        self.entry = entry
        self.args = args or (lambda phase: [])
        self.phase_change = phase_change
        self.buffers = buffers  # execute's buffers, when the entry takes pointers

    def params(self, pid, phase):
        p = {"program": pid, "entry": self.entry, "args": self.args(phase)}
        if self.buffers is not None:
            p["buffers"] = self.buffers
        return p


def corpus(build, third_party=None):
    build = pathlib.Path(build)
    out = []
    manifest = json.loads((REPO / "examples" / "examples.json").read_text())
    for p in manifest["programs"]:
        ll = build / "examples" / p["ir"]
        if ll.exists():
            out.append(Program(p["name"], ll.read_text(), p["noarg_entry"]))
    for ll in sorted((build / "bench" / "fdo_effect" / "ir").glob("*.ll")):
        out.append(Program("kernel:" + ll.stem, ll.read_text(), "kernel_run"))
    fixtures = REPO / "tests" / "e2e" / "fixtures"
    out.append(Program("branchy", (fixtures / "branchy.ll").read_text(), "run"))
    out.append(Program("pgo_loses", (fixtures / "pgo_loses.ll").read_text(), "run",
                       lambda phase: [1]))
    out.append(Program("exits", (fixtures / "exits.ll").read_text(), "run",
                       lambda phase: [3_000_000, 0]))
    out.append(Program("two_phase", (fixtures / "two_phase.ll").read_text(), "run",
                       lambda phase: [phase, TWO_PHASE_ITERATIONS], phase_change=True))
    if third_party:
        for ll in sorted(pathlib.Path(third_party).glob("*.ll")):
            text = ll.read_text()
            if "define i32 @main(i32" in text or "define dso_local i32 @main(i32" in text:
                # argc 1, argv {program name: NULL, NULL}: no argument read.
                out.append(Program("3p:" + ll.stem, text, "main", lambda phase: [1, {"buffer": 0}],
                                   buffers=[{"type": "u64", "data": [0, 0]}]))
            else:
                out.append(Program("3p:" + ll.stem, text, "run"))
    return out


def soak_program(client, prog, stages, on_stage=None):
    """Runs `stages` stages of one program; returns its per-stage records and facts."""
    pid = client.call("program.register", {"ir": prog.ir, "name": prog.name})["program"]
    records = []
    phase = 0
    switched_at = None
    for i in range(stages):
        if prog.phase_change and phase == 0:
            settled = records and records[-1]["phase"] == "steady"
            if settled or i >= stages // 2:
                phase, switched_at = 1, i
        r = client.call("execute", prog.params(pid, phase))
        st = r["stage"]
        lc = st.get("lifecycle") or {}
        counters = st.get("counters") or {}
        rec = {
            "stage": i,
            "mode": st["mode"],
            "version": st["profile_version"],
            "cache": st["cache"]["outcome"],
            "role": st["variant"]["role"],
            "variant": st["variant"]["name"],
            "policy": st["policy"],
            "phase": lc.get("phase"),
            "transitions": [(t["from"], t["to"], t["cause"]) for t in lc.get("transitions", [])],
            "cpu_ns": counters.get("process_cpu_ns") or counters.get("thread_cpu_ns") or 0,
            "exit_status": r.get("exit_status"),
            "workload": phase,
        }
        records.append(rec)
        if on_stage:
            on_stage(prog, rec)
    return {"program": pid, "records": records, "switched_at": switched_at}


def inprocess_corpus(build):
    """The programs of the corpus a runtime can call in its own process: no-argument or
    scalar entries that neither exit nor need their data reset between calls."""
    build = pathlib.Path(build)
    # One unused constant more: a program (and profile key) of its own, so its lifecycle
    # starts here rather than where the execute rows left the same IR.
    own = "\n@fdo_soak_inprocess = constant i8 1\n"
    out = [Program("inproc:" + ll.stem, ll.read_text() + own, "kernel_run")
           for ll in sorted((build / "bench" / "fdo_effect" / "ir").glob("*.ll"))]
    fixtures = REPO / "tests" / "e2e" / "fixtures"
    out.append(Program("inproc:pgo_loses", (fixtures / "pgo_loses.ll").read_text() + own, "run",
                       lambda phase: [1]))
    return out


def soak_inprocess(client, lib, socket_path, prog, stages):
    """Runs `stages` stages of one program in this process through libfdo: one call and
    one flush each. Returns records shaped as soak_program's (with the returned value and
    the generation linked), and the facts summarize needs."""
    import ctypes
    import test_inprocess as tip  # tests/e2e: libfdo's ctypes bindings

    reg = client.call("program.register", {"ir": prog.ir, "name": prog.name})
    conn, err, h = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()

    def check(rc):
        if rc != 0:
            raise RuntimeError(lib.fdo_error_message(err).decode())
    check(lib.fdo_connect(socket_path.encode(), ctypes.byref(conn), ctypes.byref(err)))
    records = []
    try:
        entries = (ctypes.c_char_p * 1)(prog.entry.encode())
        opts = tip.InprocOptions(1, 0, 1)  # manual flushes, every call timed
        check(lib.fdo_inproc_open(conn, reg["program"].encode(), entries, 1, ctypes.byref(opts),
                                  ctypes.byref(h), ctypes.byref(err)))
        args = prog.args(0)
        slots = (ctypes.c_uint64 * max(1, len(args)))(*args)
        ret = ctypes.c_uint64()
        modes = {0: "plain", 1: "instrumented", 2: "optimized"}
        for i in range(stages):
            v = tip.variant_of(lib, h)
            mode = modes.get(lib.fdo_inproc_mode(h), "?")
            generation = lib.fdo_inproc_generation(h)
            if lib.fdo_inproc_call(h, 0, slots, ctypes.byref(ret)) != 0:
                raise RuntimeError(f"{prog.name}: fdo_inproc_call refused entry 0")
            flushed = tip.InFlushResult()
            check(lib.fdo_inproc_flush(h, ctypes.byref(flushed), ctypes.byref(err)))
            records.append({
                "stage": i, "mode": mode, "version": lib.fdo_inproc_profile_version(h),
                "cache": "memory_hit", "role": v.get("role"), "variant": v.get("name"),
                "policy": "", "phase": None, "transitions": [], "cpu_ns": 0,
                "exit_status": None, "workload": 0, "value": ret.value,
                "generation": generation,
            })
    finally:
        lib.fdo_inproc_close(h)
        lib.fdo_close(conn)
    # The lifecycle's own record of the key (cache.explain), for re-profiles and trials.
    explain = client.call("cache.explain", {"program": reg["program"]})
    history = (explain.get("lifecycle") or {}).get("history") or []
    if records:
        records[-1]["phase"] = (explain.get("lifecycle") or {}).get("phase")
        records[-1]["transitions"] = [(t["from"], t["to"], t["cause"]) for t in history]
    return {"program": reg["program"], "records": records, "switched_at": None}


def inprocess_violations(summary, run):
    """The in-process rows' own promises: one value from every build, and objects linked
    only for builds the program had (instrumented, optimized, and both arms per trial)."""
    out = []
    recs = run["records"]
    values = {r["value"] for r in recs}
    if len(values) > 1:
        out.append(f"{summary['name']}: builds returned different values {sorted(values)[:4]}")
    linked = max((r["generation"] for r in recs), default=0)
    if linked > 3 + 2 * summary["trials"]:
        out.append(f"{summary['name']}: {linked} objects linked for {summary['trials']} trial(s)")
    return out


def summarize(prog, run):
    recs = run["records"]
    first_opt = next((r["stage"] for r in recs if r["mode"] not in INSTRUMENTED), None)
    back = [r["stage"] for r in recs
            if first_opt is not None and r["stage"] > first_opt and r["mode"] in INSTRUMENTED]
    longest = cur = stale = 0
    for r in recs:
        cur = cur + 1 if r["cache"] == "tier_up_pending" else 0
        stale += r["cache"] == "tier_up_pending"
        longest = max(longest, cur)
    transitions = [(r["stage"], t) for r in recs for t in r["transitions"]]
    reprofiles = [s for s, t in transitions if t[2] == "drift"]
    trial_reprofiles = [s for s, t in transitions if t[2] == "drift" and t[0] == "trial"]
    return {
        "name": prog.name,
        "stages": len(recs),
        "to_optimized": first_opt,
        "reprofiles": len(reprofiles),
        "reprofile_stages": reprofiles,
        "trial_reprofiles": len(trial_reprofiles),
        "instrumented_after_optimized": len(back),
        "stale_stages": stale,
        "longest_stale_run": longest,
        "trials": sum(1 for _, t in transitions if t[2] == "trial_started"),
        "unchanged_reprofiles": sum(1 for _, t in transitions if t[2] == "reprofile_unchanged"),
        "final_mode": recs[-1]["mode"] if recs else None,
        "final_phase": recs[-1]["phase"] if recs else None,
        "final_variant": recs[-1]["variant"] if recs else None,
        "phase_change": prog.phase_change,
        "switched_at": run["switched_at"],
        "exit_statuses": sorted({r["exit_status"] for r in recs if r["exit_status"] is not None}),
    }


def violations(summary, optimized_by=10, max_stale=3):
    """What the lifecycle promises, checked for one program's summary; [] when all hold."""
    s = summary
    out = []
    if s["to_optimized"] is None or s["to_optimized"] > optimized_by:
        out.append(f"{s['name']}: optimized at stage {s['to_optimized']} (by {optimized_by} wanted)")
    if s["longest_stale_run"] > max_stale:
        out.append(f"{s['name']}: {s['longest_stale_run']} consecutive stages on an earlier build")
    if s["trial_reprofiles"]:
        out.append(f"{s['name']}: re-profiled from a trial ({s['trial_reprofiles']})")
    if not s["phase_change"]:
        if s["instrumented_after_optimized"]:
            out.append(f"{s['name']}: {s['instrumented_after_optimized']} instrumented stage(s) "
                       "after it was optimized")
        if s["reprofiles"]:
            out.append(f"{s['name']}: a steady program was re-profiled at stage(s) "
                       f"{s['reprofile_stages']}")
        if s["final_mode"] in INSTRUMENTED:
            out.append(f"{s['name']}: ended on {s['final_mode']} code")
    else:
        after = [x for x in s["reprofile_stages"]
                 if s["switched_at"] is not None and x >= s["switched_at"]]
        if s["switched_at"] is None:
            out.append(f"{s['name']}: never switched phase")
        elif not after:
            out.append(f"{s['name']}: not re-profiled after its phase change at stage "
                       f"{s['switched_at']}")
        if s["final_mode"] in INSTRUMENTED:
            out.append(f"{s['name']}: ended on {s['final_mode']} code")
    return out


def table(summaries):
    cols = [("program", "name"), ("to opt", "to_optimized"), ("re-profiles", "reprofiles"),
            ("same again", "unchanged_reprofiles"), ("instr after opt", "instrumented_after_optimized"),
            ("stale", "stale_stages"), ("stale run", "longest_stale_run"), ("trials", "trials"),
            ("final mode", "final_mode"),
            ("final phase", "final_phase"), ("serving", "final_variant")]
    rows = [[str(s[k]) if s[k] is not None else "-" for _, k in cols] for s in summaries]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, (h, _) in enumerate(cols)]
    lines = ["  ".join(h.ljust(w) for (h, _), w in zip(cols, widths)).rstrip()]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def phase_b_profile_share(client, pk):
    """phase_b's share of the profile's counts (PGO names end in the source name)."""
    doc = client.call("profile.get", {"profile_key": pk})["profile"]
    sums = {}
    for name, f in doc["functions"].items():
        src = f.get("source_name") or name
        sums[src] = sum(f.get("counts", []))
    total = sum(sums.values()) or 1
    return sum(v for k, v in sums.items() if k.endswith("phase_b")) / total


def time_phase_change(client, prog, run, rounds):
    """New (re-profiled) code against old (phase A's profile, pinned on a twin) on phase B,
    interleaved: {new_median_ns, old_median_ns, ratio}."""
    twin_ir = prog.ir + "\n@fdo_soak_twin = global i64 0\n"
    twin = client.call("program.register", {"ir": twin_ir, "name": prog.name + "-twin"})["program"]
    pk = None
    for _ in range(60):
        r = client.call("execute", prog.params(twin, 0))
        pk = r["stage"]["profile_key"]
        if r["stage"]["mode"] == "optimized" and (r["stage"].get("lifecycle") or {}).get("phase") in (
                "steady", "optimized", "trial"):
            break
    client.call("profile.pin", {"profile_key": pk})
    new, old = [], []
    for i in range(rounds):
        order = [(run["program"], new), (twin, old)]
        if i % 2:
            order.reverse()
        for pid, into in order:
            r = client.call("execute", prog.params(pid, 1))
            c = r["stage"]["counters"]
            into.append(c.get("process_cpu_ns") or c.get("thread_cpu_ns") or r["stage"]["exec_ns"])
    n, o = statistics.median(new), statistics.median(old)
    return {"new_median_ns": n, "old_median_ns": o, "ratio": n / o if o else None,
            "rounds": rounds}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("FDO_BUILD_DIR", str(REPO / "build")))
    ap.add_argument("--stages", type=int, default=200)
    ap.add_argument("--only", action="append", default=[], help="program names to run")
    ap.add_argument("--third-party", help="a directory of *.ll programs to add")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an fdod setting over the defaults (repeatable)")
    ap.add_argument("--timing", action="store_true",
                    help="time the phase-change program's new code against its old (a benchmark)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", help="write the summaries (and timing) here")
    ap.add_argument("--no-inprocess", action="store_true",
                    help="leave out the in-process rows (libfdo in this process)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    settings = soak_settings()
    for kv in args.set:
        k, _, v = kv.partition("=")
        settings[k] = v
    progs = [p for p in corpus(args.build, args.third_party)
             if not args.only or p.name in args.only]
    d = harness.Daemon(settings, build_dir=args.build, prefix="fdo-soak-").start()
    started = time.time()
    try:
        c = d.client()
        summaries, timing = [], None
        for prog in progs:
            run = soak_program(c, prog, args.stages)
            s = summarize(prog, run)
            summaries.append(s)
            if not args.quiet:
                print(f"[soak] {s['name']}: optimized at {s['to_optimized']}, "
                      f"{s['reprofiles']} re-profile(s), final {s['final_mode']} / "
                      f"{s['final_phase']}", flush=True)
            if prog.phase_change:
                pk = c.call("execute", prog.params(run["program"], 1))["stage"]["profile_key"]
                s["phase_b_share"] = round(phase_b_profile_share(c, pk), 3)
                if args.timing:
                    timing = time_phase_change(c, prog, run, args.rounds)
        extra = []
        if not args.no_inprocess:
            sys.path.insert(0, str(REPO / "tests" / "e2e"))
            os.environ.setdefault("FDO_BUILD_DIR", args.build)
            import test_inprocess as tip
            lib = tip.load_libfdo()
            for prog in inprocess_corpus(args.build):
                if args.only and prog.name not in args.only:
                    continue
                run = soak_inprocess(c, lib, d.socket, prog, args.stages)
                s = summarize(prog, run)
                summaries.append(s)
                extra += inprocess_violations(s, run)
                if not args.quiet:
                    print(f"[soak] {s['name']}: optimized at {s['to_optimized']}, final "
                          f"{s['final_mode']} / {s['final_variant']}", flush=True)
        print(f"\nfdod settings: {json.dumps(settings, sort_keys=True)}")
        print(f"{len(summaries)} programs x {args.stages} stages in {time.time() - started:.0f} s, "
              f"load average {os.getloadavg()[0]:.2f}\n")
        print(table(summaries))
        for s in summaries:
            if "phase_b_share" in s:
                print(f"\n{s['name']}: switched to phase B at stage {s['switched_at']}, "
                      f"re-profiled at {s['reprofile_stages']}, phase_b's share of the current "
                      f"profile's counts {s['phase_b_share']}")
        if timing:
            print(f"phase B, new code / old code (median process CPU time, {timing['rounds']} "
                  f"interleaved rounds): {timing['ratio']:.3f} "
                  f"({timing['new_median_ns'] / 1e6:.2f} ms / {timing['old_median_ns'] / 1e6:.2f} ms)")
        bad = [v for s in summaries for v in violations(s)] + extra
        print("\n" + ("all properties hold" if not bad else "VIOLATIONS:\n  " + "\n  ".join(bad)))
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(
                {"settings": settings, "summaries": summaries, "timing": timing}, indent=1))
        c.close()
        return 1 if bad else 0
    finally:
        d.cleanup()


def soak_settings():
    """fdod's defaults for every mechanism, tier_up sync; the harness's test settings undone."""
    return {
        "policy.min_stages": 3,
        "policy.min_counts": 1000,
        "policy.cs_pgo_stages": 2,
        "tier_up": "sync",
        "exec_timeout_ms": 20000,
        "compile_workers": 2,
    }


if __name__ == "__main__":
    sys.exit(main())
