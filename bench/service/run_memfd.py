#!/usr/bin/env python3
"""Large-buffer bench: a warm `execute` whose buffer travels as a sealed memfd
(docs/fdod-protocol.md, "Buffers as memfds"), side by side for two or more
builds of fdod in one run.

For every build given with --build-dir, one fdod is started (temp socket and
state dir, the service bench's policy settings: profile rewritten after one
stage, synchronous tier-up, guard off; max_output_bytes large enough for the
biggest buffer), and

    define i64 @sum(ptr %p, i64 %n)   ; the sum of n i64 at p

is registered. Rounds then alternate between the daemons (order rotating each
round: A B, B A, ...); in each round every size gets --calls executes through
the Python package's Client.execute (which sends buffers of 64 KiB or more as
memfds), each timed with time.perf_counter around the whole call (making and
sealing the memfd, the request, fdod, the exec worker, the reply). Every
reply's value is checked against the sum. Before the timed calls each daemon
runs every size until a stage is optimized / memory_hit.

Prints per build and size: round trip p50 and p90 (ms), the exec worker's
stage.exec_ns p50 (ms), and the ratio of each build's p50 to the first
build's. --return-buffers asks for the buffer back (base64 in the reply).

Exit status: 0 ok, 1 a wrong value or a failed call, 2 setup problem.
"""
import argparse
import array
import os
import pathlib
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "bench"))
import harness  # noqa: E402
import fdo  # noqa: E402
from benchhost import loadavg  # noqa: E402

SUM_IR = """\
define i64 @sum(ptr %p, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %body ]
  %acc = phi i64 [ 0, %entry ], [ %acc1, %body ]
  %done = icmp eq i64 %i, %n
  br i1 %done, label %exit, label %body
body:
  %q = getelementptr i64, ptr %p, i64 %i
  %v = load i64, ptr %q
  %acc1 = add i64 %acc, %v
  %i1 = add i64 %i, 1
  br label %loop
exit:
  ret i64 %acc
}
"""


def parse_size(text):
    text = text.strip().upper()
    for suffix, mult in (("KIB", 1 << 10), ("MIB", 1 << 20), ("K", 1 << 10), ("M", 1 << 20)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * mult
    return int(text)


def pct(values, p):
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))]


class Target:
    def __init__(self, build, max_bytes):
        self.build = build
        self.daemon = harness.Daemon(
            build_dir=build, prefix="fdo-bench-memfd-",
            config={"policy.min_stages": 1, "policy.min_counts": 1, "tier_up": "sync",
                    "guard": "off", "max_output_bytes": 2 * max_bytes + (1 << 20)})
        self.daemon.start()
        self.client = fdo.connect(self.daemon.socket, client_name="bench-memfd")
        if "buffers.memfd" not in self.client.capabilities:
            raise SystemExit(f"{build}: fdod does not offer buffers.memfd")
        self.program = self.client.register(SUM_IR, name="sum")

    def call(self, buf, expect, return_buffers):
        t0 = time.perf_counter()
        r = self.client.execute(self.program, "sum", [buf, len(buf)],
                                return_buffers=return_buffers)
        dt = time.perf_counter() - t0
        if r.value != expect:
            raise RuntimeError(f"{self.build}: sum {r.value}, expected {expect}")
        if return_buffers and bytes(r.buffers[0]) != bytes(buf):
            raise RuntimeError(f"{self.build}: returned buffer differs")
        return dt, r.stage

    def warm(self, buf, expect, return_buffers):
        for _ in range(10):
            _, stage = self.call(buf, expect, return_buffers)
            if stage.get("mode") == "optimized" and stage.get("cache", {}).get(
                    "outcome") == "memory_hit":
                return
        raise RuntimeError(f"{self.build}: no optimized / memory_hit stage after 10 calls")

    def close(self):
        self.client.close()
        self.daemon.cleanup()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", action="append", required=True,
                    help="a build directory with fdod and fdo-worker (repeat: compared)")
    ap.add_argument("--sizes", default="64K,1M,8M", help="buffer sizes (K, M suffixes)")
    ap.add_argument("--calls", type=int, default=15, help="timed calls per size per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--return-buffers", action="store_true")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    bufs = []
    for size in sizes:
        a = array.array("q", ((i * 2654435761) % 1000003 for i in range(size // 8)))
        bufs.append((a, sum(a)))
    print(f"loadavg at start: {loadavg()}")
    targets = []
    try:
        for b in args.build_dir:
            path = pathlib.Path(b).resolve()
            for exe in ("fdod", "fdo-worker"):
                if not (path / exe).exists():
                    print(f"missing {path / exe}", file=sys.stderr)
                    return 2
            targets.append(Target(str(path), max(sizes)))
        for t in targets:
            for buf, expect in bufs:
                t.warm(buf, expect, args.return_buffers)
        times = {(ti, si): [] for ti in range(len(targets)) for si in range(len(sizes))}
        execs = {(ti, si): [] for ti in range(len(targets)) for si in range(len(sizes))}
        for rnd in range(args.rounds):
            order = list(range(len(targets)))
            if rnd % 2:
                order.reverse()
            for ti in order:
                for si, (buf, expect) in enumerate(bufs):
                    for _ in range(args.calls):
                        dt, stage = targets[ti].call(buf, expect, args.return_buffers)
                        if stage.get("cache", {}).get("outcome") != "memory_hit":
                            raise RuntimeError(f"stage not a memory_hit: {stage.get('cache')}")
                        times[(ti, si)].append(dt)
                        execs[(ti, si)].append(stage.get("exec_ns", 0) / 1e6)
        print(f"loadavg at end: {loadavg()}")
        print(f"{args.rounds} rounds x {args.calls} calls per size and build"
              f"{', return_buffers' if args.return_buffers else ''}; ms")
        print(f"{'build':<40} {'size':>8} {'p50':>9} {'p90':>9} {'exec p50':>9} {'p50/first':>9}")
        for si, size in enumerate(sizes):
            first = statistics.median(times[(0, si)])
            for ti, t in enumerate(targets):
                v = times[(ti, si)]
                p50 = statistics.median(v)
                print(f"{t.build[-40:]:<40} {size:>8} {p50 * 1e3:9.3f} {pct(v, 90) * 1e3:9.3f} "
                      f"{statistics.median(execs[(ti, si)]):9.3f} {p50 / first:9.3f}")
        return 0
    except (RuntimeError, fdo.FdoError) as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        for t in targets:
            t.close()


if __name__ == "__main__":
    sys.exit(main())
