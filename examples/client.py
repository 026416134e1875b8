#!/usr/bin/env python3
"""A minimal fdod client using only the Python standard library (socket + json).

Proof that any runtime can talk to fdod: it registers a program, executes an
entry that takes buffers, and prints what each stage did (cache outcome,
profile version, compile mode, timings) and what came back.

    python3 examples/client.py build/examples/sort.ll
    python3 examples/client.py build/examples/interp.ll --stages 5 --socket /tmp/fdod.sock

With no --entry the call is the program's worked buffer example from
examples/examples.json (matched by the IR file's name), and the returned value
and buffers are checked against the expected ones there (exit 1 on mismatch).
With --entry NAME the entry is called with no arguments.

Protocol (docs/fdod-protocol.md): JSON-RPC 2.0 over a Unix stream socket, one
JSON object per line. Exit status: 0 ok, 1 fdod returned an error or a wrong
result, 2 usage, 3 cannot connect.
"""
import argparse
import base64
import json
import os
import pathlib
import socket
import sys

HERE = pathlib.Path(__file__).resolve().parent


class RpcError(Exception):
    def __init__(self, method, error):
        data = error.get("data") or {}
        super().__init__(f"{method}: {error.get('message')} ({data.get('code', error.get('code'))})")
        self.error = error


class Fdod:
    """One connection to fdod; one request at a time."""

    def __init__(self, path, timeout=300):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.next_id = 1

    def close(self):
        self.sock.close()

    def call(self, method, params=None):
        rid = self.next_id
        self.next_id += 1
        request = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}
        self.sock.sendall(json.dumps(request).encode() + b"\n")
        while b"\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"fdod closed the connection before answering {method}")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        reply = json.loads(line)
        if reply.get("id") not in (rid, None):
            raise ConnectionError(f"reply to {method} carries id {reply.get('id')}, expected {rid}")
        if "error" in reply:
            raise RpcError(method, reply["error"])
        return reply["result"]


def buffer_call(example):
    """examples.json's buffer_example -> execute's args and buffers params."""
    args, buffers = [], []
    for a in example["args"]:
        if isinstance(a, dict):
            if "text" in a:
                raw = a["text"].encode("utf-8")
                buffers.append({"type": a["buffer"], "base64": base64.b64encode(raw).decode()})
            else:
                buffers.append({"type": a["buffer"], "data": a["data"]})
            args.append({"buffer": len(buffers) - 1})
        else:
            args.append(a)
    return args, buffers


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
    ap.add_argument("--socket", default=os.environ.get("FDO_SOCKET") or "/run/fdod/fdod.sock",
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
        entry, args, buffers, expect = opts.entry, [], [], None
    else:
        manifest = json.loads(pathlib.Path(opts.manifest).read_text())
        prog = find_example(opts.ir, manifest)
        if prog is None:
            print(f"client.py: {opts.ir} is not one of the programs in {opts.manifest}; "
                  "pass --entry NAME to call a no-argument entry", file=sys.stderr)
            return 2
        example = prog["buffer_example"]
        entry = example["entry"]
        args, buffers = buffer_call(example)
        expect = example

    try:
        fdod = Fdod(opts.socket)
    except OSError as e:
        print(f"client.py: cannot connect to {opts.socket}: {e.strerror or e}; is fdod running? "
              "try `systemctl status fdod`, or pass --socket", file=sys.stderr)
        return 3

    try:
        reg = fdod.call("program.register", {
            "ir_base64": base64.b64encode(ir).decode(),
            "name": pathlib.Path(opts.ir).stem,
        })
        print(f"registered {reg['name']}: program {reg['program'][:16]}..., "
              f"profile key {reg['profile_key'][:16]}..., {reg['size']} bytes")
        for e in reg["entries"]:
            print(f"  entry {e['returns']} {e['name']}({', '.join(e['params'])})")
        print(f"calling {entry}({json.dumps(args)}) with {len(buffers)} buffer(s)\n")
        print(f"{'stage':>5}  {'cache':<15}  {'reason':<18}  {'profile':>7}  {'mode':<12}  "
              f"{'compile':>9}  {'exec':>10}  note")
        result = None
        for _ in range(opts.stages):
            result = fdod.call("execute", {
                "program": reg["program"], "entry": entry, "args": args,
                "buffers": buffers, "return_buffers": True,
            })
            st = result["stage"]
            note = ""
            if st["profile_rewritten"]:
                rw = st["profile_rewritten"]
                note = f"profile rewritten v{rw['from']} -> v{rw['to']}"
            compile_ms = f"{st['compile_ms']:.1f} ms" if st["recompiled"] else "-"
            line = (f"{st['number']:>5}  {st['cache']['outcome']:<15}  {st['cache']['reason']:<18}  "
                    f"{'v' + str(st['profile_version']):>7}  {st['mode']:<12}  {compile_ms:>9}  "
                    f"{fmt_ns(st['exec_ns']):>10}  {note}")
            print(line.rstrip())
    except (RpcError, ConnectionError, OSError) as e:
        print(f"client.py: {e}", file=sys.stderr)
        return 1
    finally:
        fdod.close()

    print(f"\nreturned {result['value']}")
    for i, b in enumerate(result.get("buffers", [])):
        print(f"  buffer {i} ({b['type']}): {b.get('data', b.get('base64'))}")
    if expect is None:
        return 0
    ok = result["value"] == expect["expected_return"]
    for index, want in expect["expected_buffers"].items():
        param = args[int(index)]
        got = result["buffers"][param["buffer"]].get("data") or []
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
