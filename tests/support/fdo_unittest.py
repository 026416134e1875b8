"""The runner of every Python test suite: a test whose prerequisite this host
lacks reads as skipped, never as passed (as tests/support/skip.h does for the
Catch2 binaries).

main() runs unittest, prints each skip with its reason, appends it to
$FDO_SKIP_LOG (tools/test.sh lists that file at the end), and exits 1 on a
failure, else $FDO_SKIP_RETURN_CODE (77 under CTest: SKIP_RETURN_CODE) if
anything was skipped, else 0. Run by hand, without the variable, a run with
skips exits 0 and says so."""

import os
import sys
import unittest


def report_skip(name, reason):
    """Prints a skip and records it in $FDO_SKIP_LOG, where tools/test.sh sets one."""
    line = f"{name}: {reason}"
    print(f"SKIPPED: {line}", file=sys.stderr, flush=True)
    log = os.environ.get("FDO_SKIP_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(line.replace("\n", " ") + "\n")


def exit_status(failed, skipped):
    if failed:
        return 1
    if skipped:
        return int(os.environ.get("FDO_SKIP_RETURN_CODE", "0") or 0)
    return 0


def main(label=None, argv=None, verbosity=2):
    """unittest.main with the exit status above. `label` names the suite in the summary."""
    prog = unittest.main(argv=argv, exit=False, verbosity=verbosity)
    r = prog.result
    failed = len(r.failures) + len(r.errors) + len(getattr(r, "unexpectedSuccesses", []))
    for test, reason in r.skipped:
        report_skip(test.id(), reason)
    name = label or os.path.basename(sys.argv[0])
    print(f"{name}: {r.testsRun - failed - len(r.skipped)} passed, {failed} failed, "
          f"{len(r.skipped)} skipped", flush=True)
    if r.testsRun == 0:
        print(f"{name}: no test ran", file=sys.stderr)
        sys.exit(1)
    sys.exit(exit_status(failed, r.skipped))
