"""Start a real fdod on a temporary socket and talk JSON-RPC to it; every
successful response is checked against its schema in schemas/methods/."""
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "schemas"))
import validate  # noqa: E402

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
BUILD = pathlib.Path(os.environ.get("FDO_BUILD_DIR", ROOT / "build")).resolve()


class RpcError(Exception):
    def __init__(self, error):
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.error = error
        self.code = error.get("code")
        self.message = error.get("message", "")
        self.errc = (error.get("data") or {}).get("code")


class Client:
    """One connection; one request at a time; NDJSON framing."""

    def __init__(self, path, timeout=120):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.next_id = 1
        self.schema_errors = []

    def close(self):
        self.sock.close()

    def send_raw(self, data: bytes):
        self.sock.sendall(data)

    def read_line(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("fdod closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def call(self, method, params=None, check_schema=True):
        rid = self.next_id
        self.next_id += 1
        req = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            req["params"] = params
        self.send_raw(json.dumps(req).encode() + b"\n")
        resp = self.read_line()
        assert resp.get("jsonrpc") == "2.0", resp
        assert resp.get("id") == rid, resp
        if "error" in resp:
            raise RpcError(resp["error"])
        if check_schema:
            errs = validate.errors(method, "result", resp["result"])
            if params is not None:
                errs += validate.errors(method, "params", params)
            if errs:
                raise AssertionError("schema violations:\n" + "\n".join(errs))
        return resp["result"]


class Daemon:
    """fdod on a temp socket and state dir with a test configuration."""

    def __init__(self, config=None, state_dir=None, build_dir=None, prefix="fdo-e2e-",
                 command_prefix=None):
        self.fdod = str(pathlib.Path(build_dir or BUILD).resolve() / "fdod")
        # A tool fdod runs under (valgrind ...): its pid is then the tool's.
        self.command_prefix = list(command_prefix or [])
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.state_dir = state_dir or os.path.join(self.tmp, "state")
        self.socket = os.path.join(self.tmp, "fdod.sock")
        settings = {
            "compile_workers": 1,
            "exec_workers": 2,
            "exec_timeout_ms": 3000,
            "exec_memory_mb": 512,
            "feedback_flush_ms": 100,
            "policy.min_stages": 2,
            "policy.min_counts": 100,
            # The tests count stages and versions of the first round alone
            # (instrumented v0 -> optimized v1); the context-sensitive round,
            # on by default, has tests of its own that set it.
            "policy.cs_pgo_stages": 0,
            "tier_up": "sync",
            "log_level": "info",
        }
        settings.update(config or {})
        self.config = os.path.join(self.tmp, "fdod.conf")
        with open(self.config, "w") as f:
            for k, v in settings.items():
                f.write(f"{k} = {v}\n")
        self.log_path = os.path.join(self.tmp, "fdod.log")
        self.proc = None

    def start(self, timeout=30):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.command_prefix + [self.fdod, "--socket", self.socket, "--state-dir",
                                   self.state_dir, "--config", self.config],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fdod exited with {self.proc.returncode}:\n{self.log_text()}")
            try:
                c = Client(self.socket, timeout=5)
                c.call("health")
                c.close()
                return self
            except (FileNotFoundError, ConnectionRefusedError, ConnectionError, socket.timeout):
                time.sleep(0.05)
        raise RuntimeError("fdod did not become ready:\n" + self.log_text())

    def client(self, timeout=120):
        return Client(self.socket, timeout=timeout)

    def log_text(self):
        try:
            return pathlib.Path(self.log_path).read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode if self.proc else None
        if self.proc:
            self.log.close()
        return code

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def worker_children(fdod_pid):
    """[(pid, argv)] of fdod's live fdo-worker children, past their exec
    (before it, a spawned child still shows fdod's image). PermissionError
    where a sandboxed worker is not readable by this user (run as root)."""
    children = set()
    for task in pathlib.Path(f"/proc/{fdod_pid}/task").iterdir():
        try:
            children.update((task / "children").read_text().split())
        except FileNotFoundError:  # a thread that just ended
            pass
    out = []
    for k in sorted(children, key=int):
        try:
            if not os.readlink(f"/proc/{k}/exe").endswith("/fdo-worker"):
                continue
            argv = pathlib.Path(f"/proc/{k}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            continue  # it ended meanwhile
        out.append((int(k), argv))
    return out


def ir(name):
    return (FIXTURES / name).read_text()


def wait_for(pred, what, timeout=30, interval=0.05):
    """pred()'s first true value within timeout seconds, else AssertionError."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError("timed out waiting for " + what)
