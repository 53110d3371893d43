"""Starting and stopping `headroom serve` for the server tests.

A server runs on a port the kernel picks (--port 0); its stderr goes to a log
file, where the test reads the address it printed. The server is killed when
the test ends, also when it fails (atexit and the context manager).
"""
import atexit
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, fail_if, scratch_dir  # noqa: E402,F401

_running = []


def _kill_all():
    for s in list(_running):
        s.kill()


atexit.register(_kill_all)


def synth_tiny(directory):
    """A tiny random llama with a working tokenizer and ChatML template."""
    path = os.path.join(directory, "tiny.gguf")
    if not os.path.exists(path):
        subprocess.run([headroom_bin(), "synth", "tiny", path, "-q"], check=True)
    return path


class Server:
    def __init__(self, args, env=None, ready_timeout_s=300):
        # No router watches these servers: SIGTERM need not wait for one.
        if "--drain-grace" not in args:
            args = list(args) + ["--drain-grace", "0"]
        self.log_path = os.path.join(scratch_dir("headroom-serve-log-"), "server.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([headroom_bin(), "serve", "--port", "0"] + list(args),
                                     stdout=subprocess.DEVNULL, stderr=self.log,
                                     env=dict(os.environ, **(env or {})))
        _running.append(self)
        self.health_seen = []  # (status, body) of each /health answer before ready
        try:
            self.port = self._wait_for_port(60)
            self.base = f"http://127.0.0.1:{self.port}"
            self._wait_ready(ready_timeout_s)
        except BaseException:
            self.kill()
            raise

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def _wait_for_port(self, timeout_s):
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            m = re.search(r"listening on http://[^:]+:(\d+)", self.log_text())
            if m:
                return int(m.group(1))
            fail_if(self.proc.poll() is not None,
                    f"server exited with {self.proc.returncode}:\n{self.log_text()}")
            time.sleep(0.01)
        fail_if(True, f"server did not print its address:\n{self.log_text()}")

    def _wait_ready(self, timeout_s):
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            fail_if(self.proc.poll() is not None,
                    f"server exited with {self.proc.returncode}:\n{self.log_text()}")
            try:
                status, body = self.request("GET", "/health", timeout=5)
                self.health_seen.append((status, body))
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.02)
        fail_if(True, f"server not ready after {timeout_s}s:\n{self.log_text()}")

    def request(self, method, path, body=None, headers=None, timeout=120):
        """One HTTP request on a fresh connection: (status, parsed JSON or text)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            h = {"Content-Type": "application/json"} if data is not None else {}
            h.update(headers or {})
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            raw = r.read()
            self.last_headers = dict(r.getheaders())
            try:
                return r.status, json.loads(raw)
            except ValueError:
                return r.status, raw.decode("utf-8", "replace")
        finally:
            conn.close()

    def connect(self):
        return socket.create_connection(("127.0.0.1", self.port), timeout=30)

    def metrics(self):
        """/metrics parsed by prometheus_client: {sample name + labels: value}."""
        from prometheus_client.parser import text_string_to_metric_families
        status, text = self.request("GET", "/metrics")
        fail_if(status != 200, f"/metrics: {status}")
        samples = {}
        families = {}
        for family in text_string_to_metric_families(text):
            families[family.name] = family
            for s in family.samples:
                key = s.name + (("{" + ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                                 + "}") if s.labels else "")
                samples[key] = s.value
        return samples, families

    def stop(self, sig=signal.SIGTERM, timeout_s=60):
        """Signals the server and waits; returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                fail_if(True, f"server did not exit within {timeout_s}s:\n{self.log_text()}")
        if self in _running:
            _running.remove(self)
        return self.proc.returncode

    def wait_exit(self, timeout_s=60):
        """Waits for the server to exit on its own; returns its exit code."""
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            fail_if(True, f"server did not exit within {timeout_s}s:\n{self.log_text()}")
        if self in _running:
            _running.remove(self)
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self in _running:
            _running.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        if exc[0] is not None:
            sys.stderr.write(f"--- server log ---\n{self.log_text()[-5000:]}\n")
        return False


def sse_events(raw):
    """The data payloads of an SSE byte stream, parsed (and "[DONE]" as is)."""
    out = []
    for block in raw.decode("utf-8", "replace").split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                payload = line[len("data: "):]
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out
