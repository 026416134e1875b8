#!/usr/bin/env python3
"""libfdo as a runtime gets it: `cmake --install` into a temporary prefix, then
- the example runtime (examples/runtime/calc.c) built with plain cc and
  `pkg-config --cflags --libs fdo` from that prefix, run against a temporary
  fdod: every batch matches its interpreter, the profile is rewritten from its
  own calls and later batches run the optimized code;
- a consumer project built with CMake's find_package(fdo) (fdo::fdo, fdo.hpp).
Exit 77 = skipped (a tool is missing)."""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import harness  # noqa: E402


def run(cmd, env=None, check=True):
    p = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(map(str, cmd))} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def main():
    for tool in ("cc", "pkg-config", "cmake"):
        if shutil.which(tool) is None:
            print(f"skipped: {tool} is not installed")
            return 77
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="fdo-libfdo-install-"))
    daemon = None
    try:
        prefix = tmp / "prefix"
        run(["cmake", "--install", harness.BUILD, "--prefix", prefix])
        pcs = sorted(prefix.rglob("pkgconfig/fdo.pc"))
        assert len(pcs) == 1, f"expected one installed fdo.pc, found {pcs}"
        env = dict(os.environ, PKG_CONFIG_PATH=str(pcs[0].parent))
        flags = run(["pkg-config", "--cflags", "--libs", "fdo"], env=env).stdout.split()
        libdir = run(["pkg-config", "--variable=libdir", "fdo"], env=env).stdout.strip()
        assert pathlib.Path(libdir).resolve() == pcs[0].parent.parent.resolve(), libdir
        assert (pathlib.Path(libdir) / "libfdo.so.1").exists(), "libfdo.so.1 not installed"
        headers = prefix / "include" / "fdo"
        assert (headers / "fdo.h").exists() and (headers / "fdo.hpp").exists()
        assert not (headers / "client").exists(), "internal C++ headers were installed"

        calc = tmp / "fdo-calc"
        run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", ROOT / "examples/runtime/calc.c",
             *flags, "-o", calc])
        print(f"built the example with cc {' '.join(flags)}")

        daemon = harness.Daemon().start()
        run_env = dict(os.environ, LD_LIBRARY_PATH=libdir)
        p = run([calc, "--socket", daemon.socket, "--batches", "6", "--batch-size", "2000",
                 "x*x - 3*x > 10"], env=run_env)
        print(p.stdout)
        out = p.stdout
        assert "all batches match the interpreter" in out, out
        modes = re.findall(r"^batch \d+: sum -?\d+ \((\w+) code\) ok$", out, re.M)
        assert len(modes) == 6, out
        assert modes[0] == "instrumented", modes
        assert modes[-1] == "optimized", f"the rewritten profile's code never ran: {modes}"
        version = int(re.search(r"profile current_version (\d+)", out).group(1))
        assert version >= 1, out

        # Bad input: a clear error, nothing sent.
        bad = run([calc, "--socket", daemon.socket, "x * (3 +"], env=run_env, check=False)
        assert bad.returncode == 2 and "column" in bad.stderr, (bad.returncode, bad.stderr)
        # No daemon: a clear error naming the socket.
        gone = run([calc, "--socket", tmp / "none.sock", "x"], env=run_env, check=False)
        assert gone.returncode == 1 and "cannot connect to" in gone.stderr, gone.stderr

        # find_package(fdo) from a consumer's own CMake project.
        build = tmp / "consumer"
        run(["cmake", "-S", ROOT / "tests/libfdo/consumer", "-B", build,
             f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"])
        run(["cmake", "--build", build])
        c = run([build / "consumer", daemon.socket], env=run_env)
        print(c.stdout)
        assert c.stdout.startswith("consumer ok 42 "), c.stdout
        assert "error not_found" in c.stdout or "error invalid_argument" in c.stdout, c.stdout
        print("ok: installed libfdo works through pkg-config and find_package")
        return 0
    finally:
        if daemon:
            daemon.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
