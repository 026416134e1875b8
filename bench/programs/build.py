#!/usr/bin/env python3
"""Build the real programs of bench/programs to one LLVM IR module each, and natively.

For each program (PROGRAMS below: its upstream sources, flags and the wrapper
`<name>_run.c` that defines the entry `long run(long n)`):

- `<out>/<name>/program.bc`: every translation unit compiled by the front end
  as clang -O2 would (`-O2 -Xclang -disable-llvm-passes -emit-llvm`: TBAA and
  lifetime markers, no LLVM passes), linked into one module with llvm-link,
  every global but `run` internalized and the unreferenced ones dropped (as a
  runtime handing fdod one program would: fdod makes every external function
  an entry);
- `<out>/<name>/native`: the same sources built by clang -O2 with a main()
  that prints run(argv[1]), to check fdo's values against.

Both are cached: a rebuild happens only when a source, a flag or this script
changes (a stamp of their hashes). `timed_native_build` (used by the bench)
builds from source again with the wall time measured.

Usage: build.py [--out DIR] [--only NAME]
"""
import argparse
import concurrent.futures
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
CLANG = "clang-16"
LLVM_LINK = "llvm-link-16"
OPT = "opt-16"


class Program:
    def __init__(self, name, root, sources, flags, libs):
        self.name = name
        self.root = HERE / root
        self.sources = sources
        self.flags = flags
        self.libs = libs

    def all_sources(self):
        return [self.root / s for s in self.sources] + [HERE / f"{self.name}_run.c"]


def _lua_sources():
    skip = {"lua.c", "ltests.c", "onelua.c"}
    return sorted(p.name for p in (HERE / "lua").glob("l*.c") if p.name not in skip)


def _brotli_sources():
    root = HERE / "brotli"
    return sorted(str(p.relative_to(root)) for d in ("c/common", "c/dec", "c/enc")
                  for p in (root / d).glob("*.c"))


PROGRAMS = {
    "lua": Program("lua", "lua", _lua_sources(), ["-std=gnu99", "-DLUA_USE_POSIX", "-Ilua"],
                   ["-lm"]),
    "brotli": Program("brotli", "brotli", _brotli_sources(), ["-std=gnu99", "-Ibrotli/c/include"],
                      ["-lm"]),
}


def tool_check():
    missing = [t for t in (CLANG, LLVM_LINK, OPT) if shutil.which(t) is None]
    if missing:
        raise RuntimeError("missing " + ", ".join(missing) + " (tools/setup.sh installs them)")


def _stamp(program):
    h = hashlib.sha256()
    h.update(pathlib.Path(__file__).read_bytes())
    for src in program.all_sources() + sorted(program.root.rglob("*.h")) + [HERE / "bench_main.h"]:
        h.update(str(src).encode())
        h.update(src.read_bytes())
    return h.hexdigest()


def _run(cmd, cwd=HERE):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{r.stderr[-4000:]}")


def _compile_all(cmds, jobs):
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for f in [pool.submit(_run, c) for c in cmds]:
            f.result()


def build_ir(program, out, jobs):
    """program.bc as the module docstring says; returns its path."""
    d = out / program.name
    tus = d / "tu"
    tus.mkdir(parents=True, exist_ok=True)
    cmds, bcs = [], []
    for i, src in enumerate(program.all_sources()):
        bc = tus / f"{i:03d}_{src.stem}.bc"
        bcs.append(bc)
        cmds.append([CLANG, "-O2", "-Xclang", "-disable-llvm-passes", "-emit-llvm", "-c",
                     *program.flags, str(src), "-o", str(bc)])
    _compile_all(cmds, jobs)
    linked = d / "linked.bc"
    _run([LLVM_LINK, *map(str, bcs), "-o", str(linked)])
    final = d / "program.bc"
    _run([OPT, "-passes=internalize,globaldce", "-internalize-public-api-list=run",
          str(linked), "-o", str(final)])
    return final


def native_build_commands(program, objdir, exe):
    """One clang -O2 -c per translation unit, then the link: what building
    the sources natively costs."""
    objs, cmds = [], []
    for i, src in enumerate(program.all_sources()):
        obj = objdir / f"{i:03d}_{src.stem}.o"
        objs.append(obj)
        extra = ["-DFDO_BENCH_MAIN"] if src.name.endswith("_run.c") else []
        cmds.append([CLANG, "-O2", "-c", *program.flags, *extra, str(src), "-o", str(obj)])
    link = [CLANG, "-O2", *map(str, objs), "-o", str(exe), *program.libs]
    return cmds, link


def timed_native_build(program, out, jobs):
    """Builds the native binary from source with `jobs` compiles at once;
    returns the wall seconds."""
    objdir = out / program.name / f"native_obj_j{jobs}"
    shutil.rmtree(objdir, ignore_errors=True)
    objdir.mkdir(parents=True)
    cmds, link = native_build_commands(program, objdir, objdir / "native")
    start = time.monotonic()
    _compile_all(cmds, jobs)
    _run(link)
    return time.monotonic() - start


def build(program, out, jobs=os.cpu_count() or 1):
    """program.bc and native, rebuilt only when their inputs changed.
    Returns (ir_path, native_path)."""
    tool_check()
    d = out / program.name
    stamp_file = d / "stamp"
    stamp = _stamp(program)
    ir, native = d / "program.bc", d / "native"
    if stamp_file.exists() and stamp_file.read_text() == stamp and ir.exists() and native.exists():
        return ir, native
    d.mkdir(parents=True, exist_ok=True)
    build_ir(program, out, jobs)
    objdir = d / "native_obj"
    objdir.mkdir(exist_ok=True)
    cmds, link = native_build_commands(program, objdir, native)
    _compile_all(cmds, jobs)
    _run(link)
    stamp_file.write_text(stamp)
    return ir, native


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(HERE.parents[1] / "build" / "bench" / "programs"))
    ap.add_argument("--only", choices=sorted(PROGRAMS))
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    for name, program in PROGRAMS.items():
        if args.only and name != args.only:
            continue
        try:
            ir, native = build(program, out)
        except RuntimeError as e:
            print(f"build.py: {name}: {e}", file=sys.stderr)
            return 2
        print(f"{name}: {ir} ({ir.stat().st_size} bytes), {native}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
