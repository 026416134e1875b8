#!/usr/bin/env python3
"""libfdo as a runtime gets it: `cmake --install` into a temporary prefix, then
- the example runtime (examples/runtime/calc.c) built with plain cc and
  `pkg-config --cflags --libs fdo` from that prefix (only -I, -L and -lfdo:
  libfdo's own dependencies, LLVM included, do not leak to consumers; the
  binary's libraries all resolve), run against a temporary fdod in both modes:
  every batch matches its interpreter, the profile is rewritten from its own
  calls and later batches run the new code (daemon mode: `execute` stages;
  in-process mode: the kernel linked into the example, whose counts rewrite
  the profile and which swaps in the newer generation);
- a consumer project built with CMake's find_package(fdo) (fdo::fdo, fdo.hpp).
Exit 77 = skipped (a tool is missing)."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "tests" / "support"))
import fdo_unittest  # noqa: E402
import harness  # noqa: E402


def run(cmd, env=None, check=True):
    p = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(map(str, cmd))} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def check_inproc(calc, daemon, env):
    """--mode inproc: the kernel runs in the example's own process; its counts
    rewrite the profile (2 batches under the test policy) and the newer code is
    swapped in between batches, all results matching the interpreter. Its own
    expression, so that its program starts with no profile."""
    p = run([calc, "--socket", daemon.socket, "--mode", "inproc", "--batches", "6",
             "--batch-size", "2000", "(x + 7) * (x - 2) > 100"], env=env)
    print(p.stdout)
    out = p.stdout
    assert "all batches match the interpreter" in out, out
    batches = re.findall(r"^batch (\d+): sum -?\d+ \(generation (\d+)\) ok "
                         r"\| flush: profile version (\d+)(?:, swapped in generation (\d+))?$",
                         out, re.M)
    assert [int(b[0]) for b in batches] == list(range(6)), out
    generations = [int(b[1]) for b in batches]
    assert generations[0] == 1, generations
    assert generations == sorted(generations), generations
    assert generations[-1] >= 2, f"the new code never ran in-process: {out}\n{daemon.log_text()}"
    swaps = [int(b[3]) for b in batches if b[3]]
    assert swaps and swaps[0] == 2, out
    # The batch after a swap runs the generation swapped in.
    for i, b in enumerate(batches[:-1]):
        if b[3]:
            assert int(batches[i + 1][1]) == int(b[3]), out
    assert max(int(b[2]) for b in batches) >= 1, out
    end = int(re.search(r"^in-process: generation (\d+) at the end$", out, re.M).group(1))
    assert end == generations[-1], out
    # The code running at the end is the rewritten profile's.
    running = re.search(r"^in-process: (\w+) code, compiled with profile version (\d+)$", out,
                        re.M)
    assert running and running.group(1) == "optimized" and int(running.group(2)) >= 1, out
    # The example's one thread passed a quiescent point after the last swap:
    # nothing older stays linked.
    assert "in-process: 0 thread(s) behind, 0 older generation(s) linked" in out, out
    # fdod's guard planned each lease; the example says which variant runs and why.
    variant = json.loads(re.search(r"^in-process: variant (.*)$", out, re.M).group(1))
    assert variant["guarded"] is True and variant["reason"], variant
    assert variant["role"] in ("current", "incumbent", "candidate"), variant
    sampling = json.loads(re.search(r"^in-process: sampling (.*)$", out, re.M).group(1))
    assert isinstance(sampling["available"], bool) and sampling["reason"], sampling

    # fdod's side: the profile was rewritten (version >= 1) from feedback the
    # example sent, and its leases were released when it exited.
    prefix = re.search(r"^program \w+… profile (\w+)…$", out, re.M).group(1)
    fdoctl = pathlib.Path(harness.BUILD) / "fdoctl"
    hist = json.loads(run([fdoctl, "--socket", daemon.socket, "--json", "profile", "history",
                           prefix]).stdout)
    assert hist["current_version"] >= 1, hist
    assert int(re.search(r"^profile current_version (\d+)$", out, re.M).group(1)) >= 1, out
    c = daemon.client()
    try:
        deadline = time.time() + 20
        while True:
            inproc = c.call("health")["inprocess"]
            if inproc["leases"] == 0 or time.time() > deadline:
                break
            time.sleep(0.05)
    finally:
        c.close()
    assert inproc["leases_granted"] >= 2 and inproc["batches"] >= 6, inproc
    assert inproc["leases"] == 0, inproc


def main():
    for tool in ("cc", "pkg-config", "cmake"):
        if shutil.which(tool) is None:
            fdo_unittest.report_skip("libfdo install", f"{tool} is not installed")
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
        # One version everywhere: the shared object's, fdo.pc's and the CMake package's.
        real = (pathlib.Path(libdir) / "libfdo.so.1").resolve().name
        assert real.startswith("libfdo.so.1."), real
        so_version = real[len("libfdo.so."):]
        pc_version = run(["pkg-config", "--modversion", "fdo"], env=env).stdout.strip()
        assert pc_version == so_version, (pc_version, so_version)
        cmake_version = list(prefix.rglob("cmake/fdo/fdoConfigVersion.cmake"))
        assert len(cmake_version) == 1, cmake_version
        assert f'set(PACKAGE_VERSION "{so_version}")' in cmake_version[0].read_text()
        headers = prefix / "include" / "fdo"
        assert (headers / "fdo.h").exists() and (headers / "fdo.hpp").exists()
        assert not (headers / "client").exists(), "internal C++ headers were installed"

        # Consumers get libfdo alone; what libfdo.so.1 needs (libLLVM-16, the
        # C++ runtime) it names itself (NEEDED) and the loader finds.
        assert sorted(f for f in flags if not f.startswith(("-I", "-L"))) == ["-lfdo"], flags
        needed = run(["readelf", "-d", pathlib.Path(libdir) / "libfdo.so.1"]).stdout \
            if shutil.which("readelf") else ""
        if needed:
            assert re.search(r"NEEDED.*\[libLLVM-16\.so", needed), needed
        for f in prefix.rglob("cmake/fdo/*.cmake"):
            text = f.read_text()
            assert not re.search(r"LLVM|fdo_(client_core|inprocess|jit|util)", text), f

        calc = tmp / "fdo-calc"
        run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", ROOT / "examples/runtime/calc.c",
             *flags, "-o", calc])
        print(f"built the example with cc {' '.join(flags)}")

        daemon = harness.Daemon().start()  # policy: 2 stages, 100 counts
        run_env = dict(os.environ, LD_LIBRARY_PATH=libdir)
        ldd = run(["ldd", calc], env=run_env).stdout
        assert "not found" not in ldd, ldd
        assert re.search(r"libfdo\.so\.1 => " + re.escape(libdir), ldd), ldd
        assert "libLLVM-16.so" in ldd, ldd
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

        check_inproc(calc, daemon, run_env)

        # Bad input: a clear error, nothing sent.
        bad = run([calc, "--socket", daemon.socket, "x * (3 +"], env=run_env, check=False)
        assert bad.returncode == 2 and "column" in bad.stderr, (bad.returncode, bad.stderr)
        # No daemon: a clear error naming the socket.
        gone = run([calc, "--socket", tmp / "none.sock", "x"], env=run_env, check=False)
        assert gone.returncode == 1 and "cannot connect to" in gone.stderr, gone.stderr
        mode = run([calc, "--socket", daemon.socket, "--mode", "jit", "x"], env=run_env,
                   check=False)
        assert mode.returncode == 2 and "'daemon' or 'inproc'" in mode.stderr, mode.stderr

        # find_package(fdo) from a consumer's own CMake project.
        build = tmp / "consumer"
        run(["cmake", "-S", ROOT / "tests/libfdo/consumer", "-B", build,
             f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"])
        run(["cmake", "--build", build])
        c = run([build / "consumer", daemon.socket], env=run_env)
        print(c.stdout)
        assert c.stdout.startswith("consumer ok 42 "), c.stdout
        # fdo.hpp's native entries: 1000 calls of 3i + 2 and one typed call.
        assert "inproc ok 1500500 42 batches 1" in c.stdout, c.stdout
        assert "error not_found" in c.stdout or "error invalid_argument" in c.stdout, c.stdout
        print("ok: installed libfdo works through pkg-config and find_package")
        return 0
    finally:
        if daemon:
            daemon.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
