#!/usr/bin/env python3
"""A minimal fdod client on the standard-library-only Python package `fdo`.

Proof that any runtime can talk to fdod: it registers a program, executes an
entry that takes buffers, and prints what each stage did (cache outcome,
profile version, compile mode, timings) and what came back.

    python3 examples/client.py build/examples/sort.ll
    python3 examples/client.py build/examples/interp.ll --stages 5 --socket /tmp/fdod.sock

With no --entry the call is the program's worked buffer example from
examples/examples.json (matched by the IR file's name), and the returned value
and buffers are checked against the expected ones there (exit 1 on mismatch).
With --entry NAME the entry is called with no arguments.

It talks to fdod through the `fdo` package (python/, standard library only;
docs/runtimes.md), installed or from this source tree. Exit status: 0 ok, 1 fdod returned an error or a wrong
result, 2 usage, 3 cannot connect.
"""
import argparse
import array
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
try:
    import fdo
except ImportError:  # not installed: use the package from the source tree
    sys.path.insert(0, str(HERE.parent / "python"))
    import fdo


def buffer_call(example):
    """examples.json's buffer_example -> execute's args (buffers as arrays)."""
    args = []
    for a in example["args"]:
        if isinstance(a, dict):
            typecode = fdo.buffers.ELEM_TYPES[a["buffer"]][1]
            if "text" in a:
                raw = a["text"].encode("utf-8")
                args.append(array.array(typecode, raw) if typecode in "bB" else raw)
            else:
                args.append(array.array(typecode, a["data"]))
        else:
            args.append(a)
    return args


def find_example(ir_path, manifest):
    stem = pathlib.Path(ir_path).stem
    for prog in manifest["programs"]:
        if pathlib.Path(prog["ir"]).stem == stem:
            return prog
    return None


def fmt_ns(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.2f} {unit}"
    return f"{ns} ns"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ir", help="LLVM IR (.ll) or bitcode (.bc), e.g. build/examples/sort.ll")
    ap.add_argument("--socket", default=fdo.default_socket_path(),
                    help="fdod's socket (default: $FDO_SOCKET, else /run/fdod/fdod.sock)")
    ap.add_argument("--entry", help="call this no-argument entry instead of the buffer example")
    ap.add_argument("--stages", type=int, default=3, help="stages to execute (default 3)")
    ap.add_argument("--manifest", default=str(HERE / "examples.json"))
    opts = ap.parse_args()
    if opts.stages < 1:
        ap.error("--stages must be at least 1")

    try:
        ir = pathlib.Path(opts.ir).read_bytes()
    except OSError as e:
        print(f"client.py: cannot read {opts.ir}: {e.strerror}", file=sys.stderr)
        return 2
    example = None
    if opts.entry:
        entry, args, expect = opts.entry, [], None
    else:
        manifest = json.loads(pathlib.Path(opts.manifest).read_text())
        prog = find_example(opts.ir, manifest)
        if prog is None:
            print(f"client.py: {opts.ir} is not one of the programs in {opts.manifest}; "
                  "pass --entry NAME to call a no-argument entry", file=sys.stderr)
            return 2
        example = prog["buffer_example"]
        entry = example["entry"]
        args = buffer_call(example)
        expect = example

    try:
        fdod = fdo.connect(opts.socket, client_name="examples/client.py")
    except fdo.TransportError as e:
        print(f"client.py: {e}", file=sys.stderr)
        return 3
    except fdo.FdoError as e:
        print(f"client.py: {e}", file=sys.stderr)
        return 1

    try:
        reg = fdod.register(ir, name=pathlib.Path(opts.ir).stem)
        print(f"registered {reg.name}: program {reg.id[:16]}..., "
              f"profile key {reg.profile_key[:16]}..., {len(ir)} bytes")
        for e in reg.entries:
            print(f"  entry {e['returns']} {e['name']}({', '.join(e['params'])})")
        shown = [a if isinstance(a, (int, float)) else f"<{len(a)}-element buffer>" for a in args]
        nbuf = sum(1 for a in args if not isinstance(a, (int, float)))
        print(f"calling {entry}({', '.join(map(str, shown))}) with {nbuf} buffer(s)\n")
        print(f"{'stage':>5}  {'cache':<15}  {'reason':<18}  {'profile':>7}  {'mode':<12}  "
              f"{'compile':>9}  {'exec':>10}  note")
        result = None
        for _ in range(opts.stages):
            result = fdod.execute(reg, entry, args, return_buffers=True)
            st = result.stage
            note = ""
            if st["profile_rewritten"]:
                rw = st["profile_rewritten"]
                note = f"profile rewritten v{rw['from']} -> v{rw['to']}"
            compile_ms = f"{st['compile_ms']:.1f} ms" if st["recompiled"] else "-"
            line = (f"{st['number']:>5}  {st['cache']['outcome']:<15}  {st['cache']['reason']:<18}  "
                    f"{'v' + str(st['profile_version']):>7}  {st['mode']:<12}  {compile_ms:>9}  "
                    f"{fmt_ns(st['exec_ns']):>10}  {note}")
            print(line.rstrip())
    except fdo.FdoError as e:
        print(f"client.py: {e}", file=sys.stderr)
        return 1
    finally:
        fdod.close()

    print(f"\nreturned {result.value}")
    for i, b in enumerate(result.buffers):
        print(f"  buffer {i}: {list(b)}")
    if expect is None:
        return 0
    ok = result.value == expect["expected_return"]
    # Returned buffers are in argument order, one per buffer argument.
    buffer_index = {}
    for i, a in enumerate(args):
        if not isinstance(a, (int, float)):
            buffer_index[i] = len(buffer_index)
    for index, want in expect["expected_buffers"].items():
        got = list(result.buffers[buffer_index[int(index)]])
        floats = any(isinstance(w, float) for w in want)
        if floats:  # doubles: allow the last-bit differences of another code path
            ok = ok and len(got) == len(want) and all(
                abs(g - w) <= 1e-12 * max(1.0, abs(w)) for g, w in zip(got, want))
        else:
            ok = ok and got == want
    print("matches examples.json" if ok else "DOES NOT match examples.json "
          f"(expected {expect['expected_return']}, buffers {expect['expected_buffers']})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
