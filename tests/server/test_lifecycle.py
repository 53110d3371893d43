#!/usr/bin/env python3
"""Shutting `headroom serve` down (a tiny random model):
  - SIGTERM drains: /health answers 503 "draining" at once (routers stop
    sending), a request that arrives meanwhile is still served, the streams in
    flight finish every token they asked for, then new connections are
    refused and the server exits 0;
  - past --shutdown-timeout the rest are aborted (finish_reason "abort",
    the stream still ends with [DONE]), and a second signal aborts at once;
    both exit 0;
  - binding beyond loopback without --api-key warns; a taken port is an error."""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Server, fail_if, headroom_bin, synth_tiny, scratch_dir  # noqa: E402

tmp = scratch_dir("headroom-serve-")
model = synth_tiny(tmp)
COMMON = ["-m", model, "--max-model-len", "65536", "--kv-cache-memory", "16MiB", "-t", "1"]


class Stream(threading.Thread):
    """One streaming completion read line by line on its own connection."""

    def __init__(self, server, max_tokens):
        super().__init__(daemon=True)
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        body = {"prompt": "a long story", "max_tokens": max_tokens, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        self.conn.request("POST", "/v1/completions", body=json.dumps(body),
                          headers={"Content-Type": "application/json"})
        self.response = self.conn.getresponse()
        self.events, self.started, self.error = [], threading.Event(), None
        self.start()

    def run(self):
        try:
            while True:
                line = self.response.readline()
                if not line:
                    break
                if line.startswith(b"data: "):
                    payload = line[6:].strip()
                    self.events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
                    if len(self.events) >= 2:
                        self.started.set()
        except Exception as e:  # reported by the checks below
            self.error = e
        self.started.set()

    def finish_reason(self):
        reasons = [e["choices"][0]["finish_reason"] for e in self.events
                   if e != "[DONE]" and e["choices"] and e["choices"][0]["finish_reason"]]
        return reasons[-1] if reasons else None

    def usage(self):
        return next((e["usage"] for e in self.events if e != "[DONE]" and e.get("usage")), None)


def refused(port):
    """The server no longer takes connections: refused, or reset when the
    listening socket closes while the connection waits in its backlog."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except (ConnectionRefusedError, ConnectionResetError):
        return True


# ---- SIGTERM: draining, in-flight streams finish, then connections are refused ---
def health(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", "/health")
    r = conn.getresponse()
    return r.status, json.loads(r.read())


server = Server(COMMON + ["-q"])
streams = [Stream(server, 400) for _ in range(3)]
for s in streams:
    fail_if(not s.started.wait(60), "streams did not start")
t_signal = time.time()
server.proc.send_signal(signal.SIGTERM)
deadline = time.time() + 2
status = (200, {})
while status[0] == 200 and time.time() < deadline:
    status = health(server.port)
    time.sleep(0.02)
t_draining = time.time() - t_signal
fail_if(status != (503, {"status": "draining"}), f"/health while draining: {status}")
late = Stream(server, 8)  # sent by a router that has not seen /health fail yet
for s in streams + [late]:
    s.join(60)
    fail_if(s.is_alive() or s.error, f"stream did not end cleanly: {s.error}")
fail_if(late.finish_reason() != "length", f"a request sent while draining: {late.events[-3:]}")
for s in streams:
    fail_if(s.events[-1] != "[DONE]" or s.finish_reason() != "length" or
            s.usage()["completion_tokens"] != 400,
            f"in-flight stream cut short: {s.finish_reason()} {s.usage()} {s.events[-1]}")
deadline = time.time() + 5
while not refused(server.port) and time.time() < deadline:
    time.sleep(0.02)
fail_if(not refused(server.port), "new connections still accepted 5s after the streams ended")
code = server.wait_exit()
fail_if(code != 0, f"exit code {code} after SIGTERM")
fail_if("aborted" in server.log_text(), f"requests aborted: {server.log_text()}")
print(f"ok: SIGTERM: /health said draining after {t_draining:.2f}s, a request sent while "
      f"draining and 3 in-flight streams finished (400 tokens each), then refused, exit 0")

# ---- Past --shutdown-timeout, what is left is aborted -----------------------------
server = Server(COMMON + ["-q", "--shutdown-timeout", "1"])
s = Stream(server, 60000)
fail_if(not s.started.wait(60), "stream did not start")
t_signal = time.time()
server.proc.send_signal(signal.SIGTERM)
s.join(30)
took = time.time() - t_signal
code = server.wait_exit()
fail_if(s.is_alive() or s.events[-1] != "[DONE]" or s.finish_reason() != "abort",
        f"stream past the timeout: {s.finish_reason()} {s.events[-2:]}")
fail_if(not 0.9 < took < 10, f"aborted after {took:.2f}s, the timeout is 1s")
fail_if(code != 0 or "1 requests aborted" not in server.log_text(),
        f"exit {code}: {server.log_text()}")
print(f"ok: --shutdown-timeout 1 aborted the stream after {took:.2f}s, exit 0")

# ---- A second signal aborts at once ------------------------------------------------
server = Server(COMMON + ["-q", "--shutdown-timeout", "600"])
s = Stream(server, 60000)
fail_if(not s.started.wait(60), "stream did not start")
server.proc.send_signal(signal.SIGINT)
time.sleep(0.5)
fail_if(not s.is_alive(), "the stream ended before the second signal")
t_signal = time.time()
server.proc.send_signal(signal.SIGINT)
s.join(30)
took = time.time() - t_signal
code = server.wait_exit()
fail_if(s.is_alive() or s.finish_reason() != "abort" or took > 5,
        f"second signal: {s.finish_reason()} after {took:.2f}s")
fail_if(code != 0, f"exit code {code} after two signals")
print(f"ok: a second SIGINT aborted the stream after {took:.2f}s, exit 0")

# ---- Beyond loopback without a key: a warning ---------------------------------------
with Server(COMMON + ["--host", "0.0.0.0"]) as server:
    fail_if("warning: serving on 0.0.0.0 without --api-key" not in server.log_text(),
            f"no warning: {server.log_text()}")
    fail_if(server.stop() != 0, "exit code")
with Server(COMMON + ["--host", "0.0.0.0", "--api-key", "k"]) as server:
    fail_if("without --api-key" in server.log_text(), f"warning with a key: {server.log_text()}")
    # A second server on a taken port says so instead of sharing it.
    p = subprocess.run([headroom_bin(), "serve", *COMMON, "--port", str(server.port)],
                       capture_output=True, text=True, timeout=60)
    fail_if(p.returncode != 1 or "cannot listen" not in p.stderr or "in use" not in p.stderr,
            f"second server on port {server.port}: exit {p.returncode}: {p.stderr}")
    fail_if(server.stop() != 0, "exit code")
print("ok: serving beyond loopback without --api-key warns; a taken port is an error")

# ---- Thread counts a typo could blow up are refused before anything starts ---------
for flag, value, expect in (("--max-queued", "4294967295", "--max-queued 4294967295: expected 1 to 16352"),
                            ("--http-threads", "1000000", "--http-threads 1000000: expected 1 to 16384")):
    p = subprocess.run([headroom_bin(), "serve", *COMMON, "--port", "0", flag, value],
                       capture_output=True, text=True, timeout=60)
    fail_if(p.returncode != 1 or expect not in p.stderr, f"{flag} {value}: exit {p.returncode}: {p.stderr}")
print("ok: --max-queued and --http-threads past 16384 threads are refused")
