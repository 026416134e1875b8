#!/usr/bin/env python3
"""fdod's compile workers run below fdod and its exec workers: SCHED_BATCH at
nice `compile_nice` (default 10), every thread of theirs; `compile_nice = 0`
leaves them at fdod's own priority (docs/workers.md, "CPU priority"). In fdod
itself only the tier-up threads ("fdo-tier-up") run under SCHED_BATCH, at
fdod's nice; every other thread under SCHED_OTHER.

Run through CTest (tests/e2e/CMakeLists.txt) or directly:
  FDO_BUILD_DIR=build python3 tests/e2e/test_worker_priority.py"""
import os
import pathlib
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, ir, worker_children  # noqa: E402

SCHED_OTHER, SCHED_BATCH = 0, 3


def thread_priorities(pid, with_names=False):
    """(nice, policy) of each thread of `pid`, from /proc/PID/task/TID/stat
    (fields 19 and 41; readable even for a worker that is not dumpable);
    with_names: (name, nice, policy), the name from field 2."""
    out = []
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that just ended
        fields = stat[stat.rindex(")") + 2:].split()  # fields from 3 on
        prio = (int(fields[16]), int(fields[38]))
        out.append((stat[stat.index("(") + 1:stat.rindex(")")],) + prio if with_names else prio)
    return out


def workers_by_role(fdod_pid):
    """{role: [pid, ...]} of fdod's live fdo-worker children."""
    try:
        workers = worker_children(fdod_pid)
    except PermissionError:
        raise unittest.SkipTest("fdod's workers are not readable by this user "
                                "(a sandboxed worker is not dumpable; run as root)")
    roles = {}
    for k, argv in workers:
        roles.setdefault(argv[argv.index(b"--role") + 1].decode(), []).append(k)
    return roles


class WorkerPriority(unittest.TestCase):
    def check(self, settings, compile_expected):
        d = Daemon(settings).start()
        try:
            c = d.client()
            pid = c.call("health")["pid"]
            prog = c.call("program.register", {"ir": ir("branchy.ll")})["program"]
            # A compile ran (its worker bound a tenant and started its threads).
            st = c.call("execute", {"program": prog, "entry": "run"})["stage"]
            self.assertTrue(st["recompiled"], st)
            fdod = thread_priorities(pid, with_names=True)
            self.assertTrue(fdod)
            own_nice = next(n for name, n, _ in fdod if name == "fdod")
            roles = workers_by_role(pid)
            self.assertTrue(roles.get("compile"), roles)
            self.assertTrue(roles.get("exec"), roles)
            # Raising a priority (nice below fdod's own) needs root: as
            # another user a worker stays at fdod's.
            nice, policy = compile_expected
            if nice is None:
                nice = own_nice
            elif nice < own_nice and os.geteuid() != 0:
                nice = own_nice
            for w in roles["compile"]:
                prios = thread_priorities(w)
                self.assertTrue(prios)
                self.assertEqual(set(prios), {(nice, policy)}, f"compile worker {w}")
            for w in roles["exec"]:
                self.assertEqual(set(thread_priorities(w)), {(own_nice, SCHED_OTHER)},
                                 f"exec worker {w}")
            # The tier-up threads queue builds no stage waits for: they do
            # not preempt the request threads (docs/cache.md, "Tier-up").
            tier_up = [t for t in fdod if t[0] == "fdo-tier-up"]
            self.assertTrue(tier_up, fdod)
            for name, n, policy in fdod:
                expected = SCHED_BATCH if name == "fdo-tier-up" else SCHED_OTHER
                self.assertEqual((n, policy), (own_nice, expected), f"fdod thread {name}")
            c.close()
        finally:
            d.cleanup()

    def test_compile_workers_run_below_fdod_by_default(self):
        self.check({}, (10, SCHED_BATCH))

    def test_compile_nice_names_the_value(self):
        self.check({"compile_nice": 15}, (15, SCHED_BATCH))

    def test_compile_nice_0_keeps_fdods_priority(self):
        self.check({"compile_nice": 0}, (None, SCHED_OTHER))


if __name__ == "__main__":
    unittest.main()
