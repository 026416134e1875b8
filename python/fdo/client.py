"""A connection to fdod: JSON-RPC 2.0 over its Unix socket, one JSON object
per line (docs/fdod-protocol.md), starting with the `hello` handshake.

Threading: a Client may be shared between threads; calls are serialised by a
lock (fdod answers one request at a time per connection). Open one Client per
thread to run stages in parallel.
"""
import base64
import json
import os
import socket
import threading
from dataclasses import dataclass, field

from . import buffers as _buffers

PROTOCOL_MAJOR = 1
PROTOCOL_MINOR = 0
SYSTEM_SOCKET = "/run/fdod/fdod.sock"


def default_socket_path():
    """$FDO_SOCKET, else the path fdod.socket binds under systemd."""
    return os.environ.get("FDO_SOCKET") or SYSTEM_SOCKET


class FdoError(Exception):
    """Any failure. `errc` is the project's error name ("not_found",
    "unavailable", ...)."""

    def __init__(self, message, errc="internal"):
        super().__init__(message)
        self.message = message
        self.errc = errc


class TransportError(FdoError):
    """The connection failed (cannot connect, closed, timed out, a malformed
    reply). After one, the Client is closed."""


class RpcError(FdoError):
    """fdod answered with a JSON-RPC error: `code` (e.g. -32602), `message`,
    `data` (a dict; data["code"] is `errc`)."""

    def __init__(self, method, error):
        data = error.get("data") if isinstance(error.get("data"), dict) else {}
        self.method = method
        self.code = error.get("code")
        self.data = data
        super().__init__(str(error.get("message", "(no message)")),
                         data.get("code") or _ERRC_OF_RPC.get(self.code, "internal"))

    def __str__(self):
        return f"{self.method}: {self.message} ({self.errc}, JSON-RPC {self.code})"


_ERRC_OF_RPC = {-32602: "invalid_argument", -32601: "unsupported", -32700: "parse",
                -32600: "parse"}


@dataclass
class Program:
    id: str
    profile_key: str
    name: str = ""
    entries: list = field(default_factory=list)


@dataclass
class ExecResult:
    value: object
    buffers: list
    stage: dict
    raw: dict


class Client:
    """One connection to fdod, opened with the protocol handshake."""

    def __init__(self, socket_path=None, client_name="fdo-python", timeout=300.0):
        self.socket_path = socket_path or default_socket_path()
        self._lock = threading.Lock()
        self._buf = b""
        self._next_id = 1
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(self.socket_path)
        except OSError as e:
            self._sock.close()
            self._sock = None
            raise TransportError(
                f"cannot connect to {self.socket_path}: {e.strerror or e}; is fdod running? try "
                "`systemctl status fdod`, or pass the socket path / set FDO_SOCKET",
                "unavailable") from None
        try:
            self._handshake(client_name)
        except BaseException:
            self.close()
            raise

    # -- transport -----------------------------------------------------------

    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _fail(self, message, errc="io"):
        # A reply read late would pass for the next request's: drop the connection.
        self.close()
        raise TransportError(message, errc)

    def _read_line(self, method):
        while b"\n" not in self._buf:
            try:
                chunk = self._sock.recv(1 << 20)
            except socket.timeout:
                self._fail(f"no reply from fdod to {method} within the timeout", "timeout")
            except OSError as e:
                self._fail(f"read reply to {method}: {e}")
            if not chunk:
                self._fail(f"fdod closed the connection before answering {method}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def call(self, method, params=None, fds=()):
        """Any method by name; returns its result or raises RpcError. fds go
        with the request (SCM_RIGHTS on its first byte; execute's memfd
        buffers); the caller keeps and closes its copies."""
        with self._lock:
            if self._sock is None:
                raise TransportError(f"the connection to fdod at {self.socket_path} is closed; "
                                     f"not sending {method}")
            rid = self._next_id
            self._next_id += 1
            request = {"jsonrpc": "2.0", "id": rid, "method": method,
                       "params": {} if params is None else params}
            try:
                line = json.dumps(request).encode() + b"\n"
                if fds:
                    socket.send_fds(self._sock, [line[:1]], list(fds))
                    line = line[1:]
                self._sock.sendall(line)
            except OSError as e:
                self._fail(f"send {method} to fdod: {e}")
            line = self._read_line(method)
        try:
            reply = json.loads(line)
        except ValueError:
            self._fail(f"reply to {method} is not JSON", "corrupt")
        if not isinstance(reply, dict) or reply.get("jsonrpc") != "2.0":
            self._fail(f"reply to {method} is not a JSON-RPC 2.0 object", "corrupt")
        if "error" in reply:
            if reply.get("id") not in (rid, None):
                self._fail(f"reply to {method} carries id {reply.get('id')}, expected {rid}",
                           "corrupt")
            raise RpcError(method, reply["error"] if isinstance(reply["error"], dict) else {})
        if reply.get("id") != rid or "result" not in reply:
            self._fail(f"reply to {method} carries id {reply.get('id')}, expected {rid}",
                       "corrupt")
        return reply["result"]

    def _handshake(self, client_name):
        try:
            r = self.call("hello", {"client": f"{client_name} (fdo-python)",
                                    "protocol": {"major": PROTOCOL_MAJOR,
                                                 "minor": PROTOCOL_MINOR}})
        except RpcError as e:
            if e.code == -32601:
                raise FdoError(f"fdod at {self.socket_path} does not know the handshake "
                               f"(method hello): it predates protocol {PROTOCOL_MAJOR}."
                               f"{PROTOCOL_MINOR}; upgrade fdod", "unsupported") from None
            raise
        proto = r.get("protocol") or {}
        if proto.get("major") != PROTOCOL_MAJOR:
            raise FdoError(f"protocol version mismatch: fdod {r.get('server_version')} speaks "
                           f"protocol {proto.get('major')}.{proto.get('minor')}, this client "
                           f"speaks {PROTOCOL_MAJOR}.{PROTOCOL_MINOR}", "unsupported")
        self.server_version = r.get("server_version", "")
        self.protocol_minor = proto.get("minor", 0)
        self.capabilities = frozenset(r.get("capabilities") or ())

    # -- daemon mode ---------------------------------------------------------

    def register(self, ir, name=None):
        """Registers a program: IR text (str) or IR text/bitcode (bytes)."""
        if not isinstance(ir, (str, bytes, bytearray, memoryview)):
            raise TypeError("ir must be str (IR text) or bytes (IR text or bitcode)")
        if len(ir) == 0:
            raise ValueError("the IR is empty")
        if isinstance(ir, str):
            params = {"ir": ir}
        else:
            params = {"ir_base64": base64.b64encode(bytes(ir)).decode("ascii")}
        if name is not None:
            params["name"] = name
        r = self.call("program.register", params)
        return Program(r["program"], r["profile_key"], r.get("name", ""), r.get("entries", []))

    def _run(self, params, args, return_buffers, buffer_types, memfd_ok):
        """execute with `args` encoded into params: numbers as they are,
        buffers inline (base64) or, when memfd_ok and large, as sealed memfds."""
        wire_args, wire_buffers, originals, fds = [], [], [], []
        try:
            for i, a in enumerate(args):
                if _buffers.is_buffer(a):
                    raw, found = _buffers.raw_bytes(a, (buffer_types or {}).get(i))
                    if memfd_ok and len(raw) >= _buffers.MEMFD_MIN_BYTES:
                        fds.append(_buffers.sealed_memfd(raw))
                        wire = {"type": found, "memfd": len(fds) - 1}
                    else:
                        wire, _ = _buffers.encode(raw, found)
                    wire_buffers.append(wire)
                    originals.append(a)
                    wire_args.append({"buffer": len(wire_buffers) - 1})
                elif isinstance(a, bool) or not isinstance(a, (int, float)):
                    raise TypeError(f"args[{i}]: expected a number or a buffer, got "
                                    f"{type(a).__name__}")
                else:
                    wire_args.append(a)
            params["args"] = wire_args
            if wire_buffers:
                params["buffers"] = wire_buffers
            if return_buffers:
                params["return_buffers"] = True
                params["buffer_encoding"] = "base64"
            r = self.call("execute", params, fds)
        finally:
            for fd in fds:
                os.close(fd)
        out = []
        if return_buffers:
            out = [_buffers.decode(w, like) for w, like in zip(r.get("buffers", []), originals)]
        return ExecResult(r.get("value"), out, r.get("stage", {}), r)

    def execute(self, program, entry, args=(), return_buffers=False, buffer_types=None):
        """One stage in the daemon. args: numbers for scalar parameters,
        buffers (array.array, memoryview, bytes, numpy arrays) for pointer
        parameters. buffer_types: optional {arg index: element type} for
        bytes-like buffers that are not u8. With return_buffers the buffers
        come back as the program left them (result.buffers, in argument order)."""
        program_id = program.id if isinstance(program, Program) else program
        # Large buffers go as sealed memfds where fdod takes them
        # (docs/fdod-protocol.md, "Buffers as memfds"): no base64 either way in.
        return self._run({"program": program_id, "entry": entry}, args, return_buffers,
                         buffer_types, "buffers.memfd" in self.capabilities)

    def execute_gpu(self, program, kernel, args=(), grid=None, block=None, tune_items=None,
                    shared_bytes=0, repeats=1, return_buffers=False, buffer_types=None):
        """One stage of an NVPTX program on the host's GPU (docs/gpu.md): the
        kernel launched with grid and block (a number or up to three
        dimensions), or tuned over tune_items elements (a grid-stride kernel;
        the tuning is kept in the program's profile). args as for execute:
        numbers for scalars, buffers for device buffers (copied in and, with
        return_buffers, back). Buffers travel inline: fdod takes no memfds for
        GPU kernels. result.stage["gpu"] has the kernel's times."""
        program_id = program.id if isinstance(program, Program) else program
        if (tune_items is None) == (grid is None or block is None):
            raise ValueError("give grid and block, or tune_items")
        params = {"program": program_id, "entry": kernel, "repeats": repeats}
        if tune_items is not None:
            params["tune"] = {"items": tune_items}
        else:
            params["grid"] = list(grid) if isinstance(grid, (list, tuple)) else grid
            params["block"] = list(block) if isinstance(block, (list, tuple)) else block
        if shared_bytes:
            params["shared_bytes"] = shared_bytes
        return self._run(params, args, return_buffers, buffer_types, memfd_ok=False)

    def profile(self, profile_key, version=None):
        params = {"profile_key": profile_key}
        if version is not None:
            params["version"] = version
        return self.call("profile.get", params)

    def profile_history(self, profile_key):
        return self.call("profile.history", {"profile_key": profile_key})


def connect(socket_path=None, client_name="fdo-python", timeout=300.0):
    """A Client connected to fdod (socket_path None: $FDO_SOCKET, else
    /run/fdod/fdod.sock), handshake done."""
    return Client(socket_path, client_name, timeout)
