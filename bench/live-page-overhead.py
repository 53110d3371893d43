#!/usr/bin/env python3
"""What the live page costs the engine: serving throughput with the page's
polling against without, in paired runs on one server.

Starts one `headroom serve` and runs the same load PAIRS x 2 times: BATCHES
batches of CONCURRENCY requests at once, MAX_TOKENS generated each
(ignore_eos), prompts that share nothing. Each pair runs once with nobody
polling and once with a poller doing what an open page does (GET /v1/memory
every second, /v1/memory/blocks twice a second, with ?detail= on a running
request, /v1/memory/history every two seconds), in alternating order (ABBA),
so drift in the machine's speed falls on both. The poller only reads the
bytes: parsing and drawing is the browser's work, on the viewer's machine.
Prints generated tokens/s of each run and the ratio of the medians.

  .venv/bin/python bench/live-page-overhead.py [--model PATH] [--pairs 4]
      [--concurrency 8] [--batches 4] [--max-tokens 256] [--kv-cache-memory SIZE]
"""
import argparse
import http.client
import json
import pathlib
import re
import statistics
import subprocess
import sys
import threading
import time

root = pathlib.Path(__file__).resolve().parent.parent
BIN = root / "build" / "release" / "headroom"

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
ap.add_argument("--model", default=str(root / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
ap.add_argument("--pairs", type=int, default=4)
ap.add_argument("--concurrency", type=int, default=8)
ap.add_argument("--batches", type=int, default=4)
ap.add_argument("--max-tokens", type=int, default=256)
ap.add_argument("--kv-cache-memory", default="",
                help="the pool's size (default: serve's own, the budget's rest); the block map "
                     "the page reads grows with it")
args = ap.parse_args()


def log(*a):
    print(*a, file=sys.stderr, flush=True)


pool = ["--kv-cache-memory", args.kv_cache_memory] if args.kv_cache_memory else []
proc = subprocess.Popen([str(BIN), "serve", "-m", args.model, "--port", "0", "-q", *pool,
                         "--max-num-seqs", str(args.concurrency), "--drain-grace", "0"],
                        stderr=subprocess.PIPE, text=True)
port = None
for line in proc.stderr:
    m = re.search(r"listening on http://[^:]+:(\d+)", line)
    if m:
        port = int(m.group(1))
        break
if port is None:
    sys.exit("serve did not start")
threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()


def get(path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


deadline = time.time() + 300
while time.time() < deadline:
    try:
        if get("/health")[0] == 200:
            break
    except OSError:
        pass
    time.sleep(0.1)


def complete(i, out):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"prompt": f"Request {i}: write about the number {i * 7919 % 1000}.",
                       "max_tokens": args.max_tokens, "ignore_eos": True, "temperature": 0})
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = json.loads(c.getresponse().read())
    c.close()
    out.append(r["usage"]["completion_tokens"])


def load():
    tokens = []
    t0 = time.perf_counter()
    for b in range(args.batches):
        ts = [threading.Thread(target=complete, args=(b * args.concurrency + i, tokens))
              for i in range(args.concurrency)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    return sum(tokens) / (time.perf_counter() - t0)


class Poller:
    """The page's requests on the page's schedule."""

    def __init__(self):
        self.stop = threading.Event()
        self.n = 0
        self.bytes = 0
        self.thread = threading.Thread(target=self.run)

    def run(self):
        t0 = time.perf_counter()
        tick = 0
        detail = 0
        while not self.stop.is_set():
            paths = [f"/v1/memory/blocks?detail={detail}" if detail else "/v1/memory/blocks"]
            if tick % 2 == 0:
                paths.append("/v1/memory")
            if tick % 4 == 0:
                paths.append("/v1/memory/history")
            for p in paths:
                status, raw = get(p)
                self.n += 1
                self.bytes += len(raw)
                if p.startswith("/v1/memory/blocks") and status == 200:
                    # Select a running request, as a person clicking a cell would.
                    m = re.search(rb'"id":(\d+),"output_tokens"', raw)
                    detail = int(m.group(1)) if m else 0
            tick += 1
            time.sleep(max(0.0, t0 + tick * 0.5 - time.perf_counter()))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


try:
    log("warm-up")
    load()
    plain, polled = [], []
    n_polls = 0
    for pair in range(args.pairs):
        order = ["plain", "polled"] if pair % 2 == 0 else ["polled", "plain"]
        for kind in order:
            if kind == "plain":
                plain.append(load())
            else:
                with Poller() as p:
                    polled.append(load())
                n_polls += p.n
                poll_bytes = p.bytes / max(1, p.n)
            log(f"pair {pair + 1} {kind:6}: {(plain if kind == 'plain' else polled)[-1]:.1f} "
                f"tokens/s")
    a, b = statistics.median(plain), statistics.median(polled)
    print(f"{args.concurrency} requests at once x {args.batches} batches x {args.max_tokens} "
          f"tokens, {args.pairs} pairs; pool {args.kv_cache_memory or 'serve default'}")
    print(f"without the page: {', '.join(f'{x:.1f}' for x in plain)} tokens/s (median {a:.1f})")
    print(f"with the page polling: {', '.join(f'{x:.1f}' for x in polled)} tokens/s "
          f"(median {b:.1f}; {n_polls} reads, {poll_bytes / 1024:.0f} KiB each on average)")
    print(f"ratio with / without: {b / a:.3f}")
finally:
    proc.terminate()
    proc.wait(30)
