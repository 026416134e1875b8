"""execute's memfd buffers against a real fdod (docs/fdod-protocol.md, "Buffers
as memfds"): buffers sent as sealed memfds with the request (SCM_RIGHTS) instead
of JSON arrays, and every way a hostile client can get them wrong — wrong size,
unsealed or still writable, not a memfd, too many, unused, sent to a method
that takes none — answered with a clear error, with nothing left open in fdod."""
import fcntl
import json
import os
import socket
import struct
import sys
import time
import unittest

import ctypes

from harness import BUILD, Client, Daemon, RpcError

# sum(p, n): the sum of n doubles at p, also stored in p[0] (so returned
# buffers show the program saw and changed the memfd's bytes).
SUM_IR = """\
define double @sum(ptr %p, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %body ]
  %acc = phi double [ 0.0, %entry ], [ %acc1, %body ]
  %done = icmp eq i64 %i, %n
  br i1 %done, label %exit, label %body
body:
  %q = getelementptr double, ptr %p, i64 %i
  %v = load double, ptr %q
  %acc1 = fadd double %acc, %v
  %i1 = add i64 %i, 1
  br label %loop
exit:
  store double %acc, ptr %p
  ret double %acc
}
"""

# mix(key, src, dst, n): dst[i] = src[i] ^ key[0], then src[i] += 1; returns
# the sum of src's bytes as they came. Both memfd buffers are written by the
# program, so the returned bytes show what it saw and did.
MIX_IR = """\
define i64 @mix(ptr %key, ptr %src, ptr %dst, i64 %n) {
entry:
  %k = load i8, ptr %key
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %body ]
  %acc = phi i64 [ 0, %entry ], [ %acc1, %body ]
  %done = icmp eq i64 %i, %n
  br i1 %done, label %exit, label %body
body:
  %ps = getelementptr i8, ptr %src, i64 %i
  %s = load i8, ptr %ps
  %pd = getelementptr i8, ptr %dst, i64 %i
  %x = xor i8 %s, %k
  store i8 %x, ptr %pd
  %s1 = add i8 %s, 1
  store i8 %s1, ptr %ps
  %sz = zext i8 %s to i64
  %acc1 = add i64 %acc, %sz
  %i1 = add i64 %i, 1
  br label %loop
exit:
  ret i64 %acc
}
"""

SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK


def memfd(data: bytes, seals=SEALS):
    fd = os.memfd_create("e2e-buffer", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def doubles(values):
    return struct.pack(f"<{len(values)}d", *values)


class MemfdClient(Client):
    """A Client that sends descriptors on a request's first byte."""

    def call_with_fds(self, method, params, fds):
        rid = self.next_id
        self.next_id += 1
        line = (json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                            "params": params}) + "\n").encode()
        if fds:
            socket.send_fds(self.sock, [line[:1]], fds)
            self.sock.sendall(line[1:])
        else:
            self.sock.sendall(line)
        resp = self.read_line()
        assert resp.get("id") == rid, resp
        if "error" in resp:
            raise RpcError(resp["error"])
        return resp["result"]


class MemfdBuffers(unittest.TestCase):
    def setUp(self):
        # Buffers of one request: at most max_output_bytes / 2 = 1 MiB.
        self.d = Daemon(config={"max_output_bytes": 2 << 20}).start()
        self.c = MemfdClient(self.d.socket)
        caps = self.c.call("hello", {"client": "e2e", "protocol": {"major": 1, "minor": 0}})
        self.assertIn("buffers.memfd", caps["capabilities"])
        self.program = self.c.call("program.register", {"ir": SUM_IR, "name": "sum"})["program"]
        # Workers start in the background (each holds a few of fdod's fds):
        # count once every pool is full, or a worker started later reads as
        # a leaked descriptor.
        def pools_full():
            workers = self.c.call("cache.stats", {}).get("workers")
            if not workers:  # a tenant's view has no pool figures: nothing to wait for
                return True
            return all(p.get("live") == p.get("size") for p in workers.values())
        deadline = time.monotonic() + 30
        while not pools_full() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.fdod_fds = self.open_in_fdod()

    def tearDown(self):
        self.c.close()
        self.d.cleanup()

    def open_in_fdod(self):
        return len(os.listdir(f"/proc/{self.d.proc.pid}/fd"))

    def assert_nothing_left_open(self):
        # fdod closes a request's descriptors once its handler is done, which
        # may be a moment after the reply left.
        for _ in range(200):
            if self.open_in_fdod() <= self.fdod_fds:
                return
            time.sleep(0.01)
        self.assertLessEqual(self.open_in_fdod(), self.fdod_fds)

    def execute(self, buffers, fds, n, **extra):
        params = {"program": self.program, "entry": "sum",
                  "args": [{"buffer": 0}, n], "buffers": buffers, **extra}
        try:
            return self.c.call_with_fds("execute", params, fds)
        finally:
            for fd in fds:
                os.close(fd)

    def assert_refused(self, buffers, fds, n, errc, *words):
        with self.assertRaises(RpcError) as cm:
            self.execute(buffers, fds, n)
        self.assertEqual(cm.exception.errc, errc, cm.exception.message)
        for w in words:
            self.assertIn(w, cm.exception.message)
        self.assert_nothing_left_open()
        return cm.exception

    def test_round_trip(self):
        values = [float(i) for i in range(100_000)]  # 800 KB: far past a JSON array's comfort
        fd = memfd(doubles(values))
        r = self.execute([{"type": "f64", "memfd": 0, "length": len(values)}], [fd], len(values),
                         return_buffers=True, buffer_encoding="base64")
        self.assertEqual(r["value"], sum(values))
        import base64
        back = base64.b64decode(r["buffers"][0]["base64"])
        self.assertEqual(len(back), len(values) * 8)
        self.assertEqual(struct.unpack_from("<d", back)[0], sum(values))
        # Mixed with inline buffers, and twice in a row on one connection.
        for _ in range(2):
            fd = memfd(doubles([1.5, 2.5]))
            r = self.execute([{"type": "f64", "memfd": 0}], [fd], 2)
            self.assertEqual(r["value"], 4.0)
        self.assert_nothing_left_open()

    def test_large_buffers_contents_in_and_out(self):
        # Two large memfd buffers beside an inline one (the inline one first,
        # so its bytes and the descriptors must not be confused), written by
        # the program: the reply shows every byte it saw and wrote, and the
        # client's sealed memfds are unchanged afterwards.
        import base64
        program = self.c.call("program.register", {"ir": MIX_IR, "name": "mix"})["program"]
        n = 400_000  # two of these: 800 KB of the 1 MiB budget
        src = bytes((i * 7 + i // 251) & 0xff for i in range(n))
        key = 0x5A
        for stage in range(3):  # compiled instrumented, optimized, then a cache hit
            src_fd, dst_fd = memfd(src), memfd(b"\0" * n)
            try:
                r = self.c.call_with_fds(
                    "execute",
                    {"program": program, "entry": "mix",
                     "args": [{"buffer": 0}, {"buffer": 1}, {"buffer": 2}, n],
                     "buffers": [{"type": "u8", "data": [key]},
                                 {"type": "u8", "memfd": 0, "length": n},
                                 {"type": "u8", "memfd": 1}],
                     "return_buffers": True, "buffer_encoding": "base64"},
                    [src_fd, dst_fd])
                self.assertEqual(os.pread(src_fd, n + 1, 0), src, f"stage {stage}")
                self.assertEqual(os.pread(dst_fd, n + 1, 0), b"\0" * n, f"stage {stage}")
            finally:
                os.close(src_fd)
                os.close(dst_fd)
            self.assertEqual(r["value"], sum(src), f"stage {stage}")
            back = [base64.b64decode(b["base64"]) for b in r["buffers"]]
            self.assertEqual(back[0], bytes([key]))
            self.assertEqual(back[1], bytes((b + 1) & 0xFF for b in src), f"stage {stage}")
            self.assertEqual(back[2], bytes(b ^ key for b in src), f"stage {stage}")
        self.assert_nothing_left_open()

    def test_wrong_size(self):
        self.assert_refused([{"type": "f64", "memfd": 0, "length": 3}], [memfd(doubles([1, 2]))],
                            2, "invalid_argument", "length 3", "holds 2")
        self.assert_refused([{"type": "f64", "memfd": 0}], [memfd(b"\0" * 12)], 1,
                            "invalid_argument", "not a whole number")
        # Over the request's buffer budget (max_output_bytes / 2: 1 MiB here).
        big = memfd(b"\0" * (2 << 20))
        self.assert_refused([{"type": "u8", "memfd": 0}], [big], 1, "resource_exhausted",
                            "exceed")

    def test_unsealed_or_writable(self):
        self.assert_refused([{"type": "f64", "memfd": 0}], [memfd(doubles([1]), seals=0)], 1,
                            "invalid_argument", "F_SEAL_WRITE")
        # Sealed against size changes only: still writable after sending.
        self.assert_refused([{"type": "f64", "memfd": 0}],
                            [memfd(doubles([1]), seals=fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK)],
                            1, "invalid_argument", "F_SEAL_WRITE", "could still change")

    def test_not_a_memfd(self):
        r, w = os.pipe()
        os.close(w)
        self.assert_refused([{"type": "f64", "memfd": 0}], [r], 1, "invalid_argument",
                            "not a memfd")

    def test_index_and_unused(self):
        self.assert_refused([{"type": "f64", "memfd": 1}], [memfd(doubles([1]))], 1,
                            "invalid_argument", "out of range")
        self.assert_refused([{"type": "f64", "data": [1.0]}], [memfd(doubles([1]))], 1,
                            "invalid_argument", "named by no buffer")

    def test_too_many(self):
        fds = [memfd(doubles([1])) for _ in range(20)]
        e = self.assert_refused([{"type": "f64", "memfd": 0}], fds, 1, "invalid_argument",
                                "more than 16")
        self.assertEqual(e.error["data"]["fds_max"], 16)

    def test_fds_to_a_method_that_takes_none(self):
        fd = memfd(doubles([1]))
        try:
            with self.assertRaises(RpcError) as cm:
                self.c.call_with_fds("health", {}, [fd])
        finally:
            os.close(fd)
        self.assertEqual(cm.exception.code, -32602)
        self.assertIn("takes no file descriptors", cm.exception.message)
        self.assert_nothing_left_open()
        # The connection goes on.
        self.assertEqual(self.c.call("health")["status"], "ok")

    def test_fds_with_no_request(self):
        fd = memfd(doubles([1]))
        socket.send_fds(self.c.sock, [b"\n"], [fd])
        os.close(fd)
        resp = self.c.read_line()
        self.assertIsNone(resp["id"])
        self.assertIn("came with no request", resp["error"]["message"])
        self.assert_nothing_left_open()
        self.assertEqual(self.c.call("health")["status"], "ok")


class FdoValue(ctypes.Structure):
    class _As(ctypes.Union):
        _fields_ = [("i32", ctypes.c_int32), ("i64", ctypes.c_int64), ("f32", ctypes.c_float),
                    ("f64", ctypes.c_double), ("buffer", ctypes.c_size_t)]
    _fields_ = [("type", ctypes.c_int), ("as_", _As)]


class FdoBuffer(ctypes.Structure):
    _fields_ = [("elem", ctypes.c_int), ("data", ctypes.c_void_p), ("count", ctypes.c_size_t)]


class FdoCall(ctypes.Structure):
    _fields_ = [("entry", ctypes.c_char_p), ("args", ctypes.POINTER(FdoValue)),
                ("nargs", ctypes.c_size_t), ("buffers", ctypes.POINTER(FdoBuffer)),
                ("nbuffers", ctypes.c_size_t), ("flags", ctypes.c_uint)]


FDO_I64, FDO_F64, FDO_BUFFER, FDO_ELEM_F64 = 2, 4, 5, 9
FDO_CALL_COPY_BACK, FDO_CALL_MEMFD = 1, 2


class LibfdoMemfd(unittest.TestCase):
    """fdo_execute sends large buffers (and all with FDO_CALL_MEMFD) as memfds."""

    def setUp(self):
        # Request lines of at most 256 KiB: the large buffer below fits only as a memfd.
        self.d = Daemon(config={"max_output_bytes": 8 << 20,
                                "max_request_bytes": 256 << 10}).start()
        lib = ctypes.CDLL(str(BUILD / "libfdo" / "libfdo.so.1"))
        p = ctypes.c_void_p
        lib.fdo_connect.argtypes = [ctypes.c_char_p, ctypes.POINTER(p), ctypes.POINTER(p)]
        lib.fdo_error_message.argtypes = [p]
        lib.fdo_error_message.restype = ctypes.c_char_p
        lib.fdo_program_register.argtypes = [p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t,
                                             ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
                                             ctypes.POINTER(p)]
        lib.fdo_execute.argtypes = [p, ctypes.c_char_p, ctypes.POINTER(FdoCall),
                                    ctypes.POINTER(FdoValue), ctypes.POINTER(ctypes.c_char_p),
                                    ctypes.POINTER(p)]
        lib.fdo_close.argtypes = [p]
        self.lib = lib
        self.conn, self.err = ctypes.c_void_p(), ctypes.c_void_p()
        self.ok(lib.fdo_connect(self.d.socket.encode(), ctypes.byref(self.conn),
                                ctypes.byref(self.err)))
        ir_bytes = SUM_IR.encode()
        self.program = ctypes.create_string_buffer(65)
        self.ok(lib.fdo_program_register(self.conn, b"sum", ir_bytes, len(ir_bytes), 0,
                                         self.program, None, ctypes.byref(self.err)))

    def tearDown(self):
        self.lib.fdo_close(self.conn)
        self.d.cleanup()

    def ok(self, rc):
        if rc != 0:
            self.fail(self.lib.fdo_error_message(self.err).decode())

    def run_sum(self, values, flags):
        data = (ctypes.c_double * len(values))(*values)
        buf = FdoBuffer(FDO_ELEM_F64, ctypes.cast(data, ctypes.c_void_p), len(values))
        args = (FdoValue * 2)()
        args[0].type, args[0].as_.buffer = FDO_BUFFER, 0
        args[1].type, args[1].as_.i64 = FDO_I64, len(values)
        call = FdoCall(b"sum", args, 2, ctypes.pointer(buf), 1, flags)
        ret = FdoValue()
        self.ok(self.lib.fdo_execute(self.conn, self.program.value, ctypes.byref(call),
                                     ctypes.byref(ret), None, ctypes.byref(self.err)))
        self.assertEqual(ret.type, FDO_F64)
        return ret.as_.f64, data

    def test_small_forced_and_large_automatic(self):
        fdod_fds = len(os.listdir(f"/proc/{self.d.proc.pid}/fd"))
        value, data = self.run_sum([1.0, 2.0, 3.5], FDO_CALL_MEMFD | FDO_CALL_COPY_BACK)
        self.assertEqual(value, 6.5)
        self.assertEqual(data[0], 6.5)  # copied back: the program stored the sum in p[0]
        values = [float(i % 1000) for i in range(200_000)]  # 1.6 MB: past FDO_MEMFD_MIN_BYTES
        value, _ = self.run_sum(values, 0)
        self.assertEqual(value, sum(values))
        for _ in range(200):
            if len(os.listdir(f"/proc/{self.d.proc.pid}/fd")) <= fdod_fds:
                break
            time.sleep(0.01)
        self.assertLessEqual(len(os.listdir(f"/proc/{self.d.proc.pid}/fd")), fdod_fds)


if __name__ == "__main__":
    # A missing prerequisite reads as skipped (tests/support/fdo_unittest.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fdo_unittest  # noqa: E402

    fdo_unittest.main("memfd buffers")
