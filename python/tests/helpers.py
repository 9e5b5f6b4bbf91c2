"""Test helpers: the repository's paths, the shared vectors, and real `narwhal sim` processes."""

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))  # the tests run from the source tree, installed or not


def read_repo_file(rel: str, strip: bool = True) -> bytes:
    b = (ROOT / rel).read_bytes()
    return b.strip() if strip else b


def contract(name: str) -> dict:
    return json.loads(read_repo_file("testdata/contract/" + name))


def wait_until(cond, timeout: float = 5.0, what: str = "condition"):
    """Poll cond until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


_binary = None
_tmp = None


def narwhal_binary() -> str:
    """$NARWHAL_BIN, or the binary built once per test run from the repository root."""
    global _binary, _tmp
    if _binary:
        return _binary
    if os.environ.get("NARWHAL_BIN"):
        _binary = os.environ["NARWHAL_BIN"]
        return _binary
    go = shutil.which("go")
    if go is None:
        raise unittest_skip("go is not installed: cannot build narwhal")
    _tmp = tempfile.mkdtemp(prefix="narwhal-pytest-")
    out = os.path.join(_tmp, "narwhal")
    subprocess.run([go, "build", "-o", out, "."], cwd=ROOT, check=True)
    _binary = out
    return out


def unittest_skip(msg):
    return unittest.SkipTest(msg)


class Sim:
    """One `narwhal sim` engine process on a free loopback port."""

    def __init__(self, name: str, role: str, *args: str, engine_id: str = ""):
        cmd = [narwhal_binary(), "sim", "--listen", "127.0.0.1:0", "--name", name, "--role", role, *args]
        if engine_id:
            cmd += ["--engine-id", engine_id]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            line = self._first_line(10.0)
            info = json.loads(line)
        except BaseException:
            self.close()
            raise
        self.name = name
        self.url = info["url"]
        self.engine_id = info["engine_id"]
        self.kv_endpoint = info["kv_endpoint"]
        self.kv_port = int(self.kv_endpoint.rsplit(":", 1)[1])  # a free port, outside vLLM's 5600-5663
        wait_until(self._healthy, 10.0, f"{name} /health")

    def _first_line(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        buf = b""
        fd = self.proc.stdout.fileno()
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("narwhal sim did not report its address in time")
            r, _, _ = select.select([fd], [], [], left)
            if r:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise AssertionError("narwhal sim exited: " + self.proc.stderr.read().decode(errors="replace"))
                buf += chunk
        return buf.split(b"\n", 1)[0]

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def admin(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            raw = r.read()
        return json.loads(raw) if raw.strip() else None

    def stats(self) -> dict:
        return self.admin("GET", "/sim/stats")

    def requests(self) -> list:
        return self.admin("GET", "/sim/requests")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()


class SimPairTest(unittest.TestCase):
    """Tests against two `narwhal sim` processes started once per class: p0 (prefill) and d0
    (decode), with the extra arguments the subclass names."""

    PRODUCER_ARGS: tuple = ("--itl", "5ms")
    CONSUMER_ARGS: tuple = ("--itl", "10ms")

    @classmethod
    def setUpClass(cls):
        cls.p0 = Sim("p0", "prefill", *cls.PRODUCER_ARGS, engine_id="p0-id")
        try:
            cls.d0 = Sim("d0", "decode", *cls.CONSUMER_ARGS, engine_id="d0-id")
        except BaseException:
            cls.p0.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.p0.close()
        cls.d0.close()
