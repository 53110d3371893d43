#!/usr/bin/env python3
"""What constrained decoding costs: generated tokens/s of CONCURRENCY
json_schema requests at once against the same load unconstrained, in paired
runs on one server, and the time to compute one sequence's token mask.

Starts one `headroom serve` and runs PAIRS pairs of loads in alternating
order (ABBA), so drift in the machine's speed falls on both: REQUESTS chat
requests, CONCURRENCY in flight, MAX_TOKENS at most each, sampled (seeded).
The constrained load asks for a JSON list of films under a schema (an array
of objects with bounded strings), so the grammar is in force for the whole
answer; the unconstrained load asks the same with ignore_eos, so both make
about MAX_TOKENS tokens per request. Prints each run's generated tokens/s,
the ratio of the medians (the target is >= 0.9), and the mask time's p50 and
p99 from the server's headroom_grammar_mask_seconds histogram (interpolated
within its buckets, which are named).

  .venv/bin/python bench/structured-output-bench.py [--model PATH] [--pairs 2]
      [--concurrency 16] [--requests 32] [--max-tokens 128]
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
ap.add_argument("--pairs", type=int, default=2)
ap.add_argument("--concurrency", type=int, default=16)
ap.add_argument("--requests", type=int, default=32)
ap.add_argument("--max-tokens", type=int, default=128)
args = ap.parse_args()

SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["films"],
    "properties": {"films": {"type": "array", "maxItems": 40, "items": {
        "type": "object", "additionalProperties": False, "required": ["title", "year", "genre"],
        "properties": {"title": {"type": "string", "maxLength": 40},
                       "year": {"type": "integer"},
                       "genre": {"enum": ["drama", "comedy", "horror", "documentary"]}}}}},
}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


proc = subprocess.Popen([str(BIN), "serve", "-m", args.model, "--port", "0", "-q",
                         "--max-num-seqs", str(args.concurrency), "--max-model-len", "2048",
                         "--drain-grace", "0"], stderr=subprocess.PIPE, text=True)
port = None
for line in proc.stderr:
    m = re.search(r"listening on http://[^:]+:(\d+)", line)
    if m:
        port = int(m.group(1))
        break
if port is None:
    sys.exit("serve did not start")
threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()


def call(method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


deadline = time.time() + 300
while time.time() < deadline:
    try:
        if call("GET", "/health")[0] == 200:
            break
    except OSError:
        pass
    time.sleep(0.1)


def one(i, constrained, out):
    body = {"messages": [{"role": "user", "content": f"List films of {1950 + i} as JSON."}],
            "max_tokens": args.max_tokens, "temperature": 0.8, "seed": i}
    if constrained:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "films", "schema": SCHEMA}}
    else:
        body["ignore_eos"] = True
    status, raw = call("POST", "/v1/chat/completions", body)
    if status != 200:
        sys.exit(f"request failed: {status} {raw[:300]}")
    r = json.loads(raw)
    out.append(r["usage"]["completion_tokens"])


def load(constrained):
    tokens, nxt = [], [0]
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= args.requests:
                return
            one(i, constrained, tokens)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=client) for _ in range(args.concurrency)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    return sum(tokens) / dt, sum(tokens)


def mask_histogram():
    _, raw = call("GET", "/metrics")
    buckets = []
    for m in re.finditer(rb'headroom_grammar_mask_seconds_bucket\{le="([^"]+)"\} (\d+)', raw):
        buckets.append((float(m.group(1)), int(m.group(2))))
    return buckets


def quantile(before, after, q):
    """q-quantile from cumulative bucket counts (the difference of two scrapes)."""
    counts = [(le, a - b) for (le, a), (_, b) in zip(after, before)]
    total = counts[-1][1]
    if total == 0:
        return None, None, None
    target = q * total
    lo_le, lo_count = 0.0, 0
    for le, c in counts:
        if c >= target:
            if le == float("inf"):
                return lo_le, lo_le, float("inf")
            frac = (target - lo_count) / max(c - lo_count, 1)
            return lo_le + frac * (le - lo_le), lo_le, le
        lo_le, lo_count = le, c
    return None, None, None


# Warm up once each (the schema's compile is cached from here on).
load(False)
load(True)
h0 = mask_histogram()
rates = {False: [], True: []}
for p in range(args.pairs):
    for constrained in ((False, True) if p % 2 == 0 else (True, False)):
        rate, n = load(constrained)
        rates[constrained].append(rate)
        log(f"pair {p + 1}: {'json_schema  ' if constrained else 'unconstrained'} "
            f"{rate:7.1f} tokens/s ({n} tokens)")
h1 = mask_histogram()
proc.terminate()
proc.wait(timeout=60)

free, schema = statistics.median(rates[False]), statistics.median(rates[True])
print(f"generated tokens/s, median of {args.pairs}: unconstrained {free:.1f}, "
      f"json_schema {schema:.1f}; ratio {schema / free:.3f} (target >= 0.9)")
for q in (0.5, 0.99):
    v, lo, hi = quantile(h0, h1, q)
    if v is None:
        print(f"mask time p{int(q * 100)}: no constrained steps recorded")
    else:
        print(f"mask time p{int(q * 100)}: {v * 1e6:.0f} us (bucket {lo * 1e6:.0f}-{hi * 1e6:.0f} us)")
n_masks = h1[-1][1] - h0[-1][1] if h1 else 0
print(f"masks computed: {n_masks}")
