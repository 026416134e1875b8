"""Real servers for end-to-end tests, in temp dirs, stopped afterwards (the
Python side of tests/support/redis_server.h and postgres_server.h).

RedisServer: redis-server on a Unix socket, no persistence; stop() and
start() again on the same socket; command() speaks RESP to it directly (no
client library needed), for tests that read or damage what fdod stored."""
import os
import shutil
import socket
import subprocess
import tempfile
import time

REDIS_SERVER = "/usr/bin/redis-server"


def redis_unavailable_reason():
    """Empty when a redis-server can be started here, else why not."""
    if not os.access(REDIS_SERVER, os.X_OK):
        return f"{REDIS_SERVER} is not installed (tools/setup.sh installs redis-server)"
    return ""


class RedisServer:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="fdo-redis-")
        self.socket = os.path.join(self.dir, "redis.sock")
        self.proc = None

    @property
    def url(self):
        return "unix:" + self.socket

    def start(self):
        if self.proc is not None:
            return self
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", "0", "--unixsocket", self.socket,
             "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--logfile", os.path.join(self.dir, "redis.log"),
             "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            try:
                self.command("PING")
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not listen within 10 s")

    def stop(self):
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.cleanup()

    # --- a minimal RESP client: one connection per command

    def command(self, *args):
        """Sends one command; returns bytes, int, None (nil), a list, or raises
        RuntimeError for an error reply."""
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(self.socket)
            s.sendall(b"".join(parts))
            reader = s.makefile("rb")
            return self._reply(reader)

    def _reply(self, r):
        line = r.readline()
        if not line:
            raise OSError("redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = r.read(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply(r) for _ in range(n)]
        raise RuntimeError(f"bad RESP reply {line!r}")

    def keys(self, pattern="fdo:obj:*"):
        return sorted(k.decode() for k in self.command("KEYS", pattern))


# --- PostgreSQL (the Python side of tests/support/postgres_server.h)

PG_BIN = "/usr/lib/postgresql/15/bin"


def postgres_unavailable_reason():
    """Empty when a PostgreSQL server can be started here, else why not."""
    if not os.access(os.path.join(PG_BIN, "pg_ctl"), os.X_OK):
        return f"{PG_BIN}/pg_ctl is not installed (tools/setup.sh installs postgresql)"
    if os.geteuid() == 0:
        import pwd
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run the server as"
        if not os.access("/usr/sbin/runuser", os.X_OK):
            return "running as root and /usr/sbin/runuser is missing"
    return ""


class PostgresServer:
    """A fresh cluster (initdb, trust authentication, fsync off) in a temp dir,
    listening only on a Unix socket there; run as the postgres user when the
    tests run as root (PostgreSQL refuses root). stop() and start() again keep
    the data (for outage tests)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="fdo-pg-")
        os.chmod(self.dir, 0o755)
        self.data = os.path.join(self.dir, "data")
        self.running = False
        self.as_user = []
        if os.geteuid() == 0:
            import pwd
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self.as_user = ["/usr/sbin/runuser", "-u", "postgres", "--"]
        self._run([os.path.join(PG_BIN, "initdb"), "-D", self.data, "-A", "trust", "-U",
                   "postgres", "-E", "UTF8", "--no-sync", "--no-instructions"], "initdb")

    @property
    def url(self):
        """A libpq URI for fdod's profile_store (the socket dir as the host)."""
        from urllib.parse import quote
        return f"postgresql://postgres@{quote(self.dir, safe='')}/postgres"

    def _run(self, argv, what):
        r = subprocess.run(self.as_user + argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            raise RuntimeError(f"{what} failed: {r.stdout.decode(errors='replace')[-2000:]}")

    def start(self):
        if self.running:
            return self
        self._run([os.path.join(PG_BIN, "pg_ctl"), "-D", self.data, "-l",
                   os.path.join(self.dir, "server.log"), "-w", "-t", "30", "-o",
                   f"-k {self.dir} -c listen_addresses= -c fsync=off -c full_page_writes=off",
                   "start"], "pg_ctl start")
        self.running = True
        return self

    def stop(self):
        if not self.running:
            return
        self.running = False
        subprocess.run(self.as_user + [os.path.join(PG_BIN, "pg_ctl"), "-D", self.data, "-m",
                                       "fast", "-w", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def psql(self, sql):
        """Runs SQL as postgres; returns stdout (unaligned, tuples only)."""
        r = subprocess.run(self.as_user + [os.path.join(PG_BIN, "psql"), "-h", self.dir, "-U",
                                           "postgres", "-d", "postgres", "-At", "-c", sql],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.decode(errors="replace"))
        return r.stdout.decode()

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.cleanup()
