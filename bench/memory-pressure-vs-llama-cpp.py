#!/usr/bin/env python3
"""Under memory pressure, llama.cpp's server against headroom's, in one run.

Both get the same KV budget: 2048 tokens of SmolLM2's KV. llama.cpp runs
`llama-server -c 2048 -np 4 --kv-unified` (four slots sharing one 2048-token
cache); headroom runs `headroom serve --kv-cache-memory <2048 tokens of KV>
--max-num-seqs 4`. Each gets 12 concurrent /v1/completions requests of about
1,900 prompt tokens and 32 generated tokens: each fits alone, four at once do
not. The table says how many complete on each.

  bench/memory-pressure-vs-llama-cpp.py     (needs tools/ref-env.sh and a release build)
"""
import concurrent.futures
import json
import os
import random
import pathlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

root = pathlib.Path(__file__).resolve().parent.parent
model = root / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
headroom = root / "build" / "release" / "headroom"
llama_server = root / ".ref" / "llama-bin" / "llama-server"
KV_BYTES_PER_TOKEN = 2 * 30 * 3 * 64 * 2  # SmolLM2, f16: 23040 B
N_REQUESTS, PROMPT_TOKENS, MAX_TOKENS = 12, 1900, 32


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port, proc, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError("server did not become healthy")


COMMON_WORDS = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
                "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they"]


def prompt_text(i):
    # About PROMPT_TOKENS SmolLM2 tokens of distinct text per request: each
    # common word with its leading space is one token.
    rng = random.Random(i)
    return f"Request {i}:" + "".join(" " + rng.choice(COMMON_WORDS) for _ in range(PROMPT_TOKENS - 8))


def complete(port, i):
    body = json.dumps({"model": "m", "prompt": prompt_text(i), "max_tokens": MAX_TOKENS, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    try:
        with urllib.request.urlopen(req, timeout=1800) as r:
            out = json.load(r)
            return {"ok": True, "status": r.status, "s": time.time() - t0,
                    "prompt_tokens": out.get("usage", {}).get("prompt_tokens")}
    except urllib.error.HTTPError as e:
        return {"ok": False, "status": e.code, "s": time.time() - t0, "error": e.read().decode()[:200]}
    except Exception as e:  # connection reset, timeout
        return {"ok": False, "status": None, "s": time.time() - t0, "error": str(e)[:200]}


def run_load(port):
    with concurrent.futures.ThreadPoolExecutor(N_REQUESTS) as pool:
        return list(pool.map(lambda i: complete(port, i), range(N_REQUESTS)))


def serve(cmd, port):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_healthy(port, proc)
        t0 = time.time()
        results = run_load(port)
        return results, time.time() - t0
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    threads = str(os.cpu_count() or 2)
    rows = []
    port = free_port()
    llama, llama_s = serve([str(llama_server), "-m", str(model), "--port", str(port), "-c", "2048", "-np", "4",
                            "--kv-unified", "-t", threads, "--no-warmup"], port)
    rows.append(("llama.cpp -c 2048 -np 4 --kv-unified", llama, llama_s))
    port = free_port()
    kv = 2048 * KV_BYTES_PER_TOKEN
    ours, ours_s = serve([str(headroom), "serve", "-m", str(model), "--port", str(port), "--kv-cache-memory", str(kv),
                          "--max-num-seqs", "4", "--max-model-len", "2048", "--served-model-name", "m", "-t", threads],
                         port)
    rows.append((f"headroom --kv-cache-memory {kv} (2048 tokens)", ours, ours_s))
    print(f"\n{N_REQUESTS} concurrent requests of ~{PROMPT_TOKENS} prompt + {MAX_TOKENS} generated tokens, "
          f"KV budget 2048 tokens ({2048 * KV_BYTES_PER_TOKEN / 2**20:.1f} MiB)\n")
    print(f"{'engine':52} {'completed':>9} {'failed':>6} {'wall s':>7}  statuses")
    for name, res, secs in rows:
        ok = sum(r["ok"] for r in res)
        statuses = sorted({str(r["status"]) for r in res})
        print(f"{name:52} {ok:9d} {len(res) - ok:6d} {secs:7.1f}  {','.join(statuses)}")
        for r in res:
            if not r["ok"]:
                print(f"    e.g. {r['status']}: {r.get('error', '')[:120]}")
                break
    json.dump({name: res for name, res, _ in rows}, open(root / "build" / "memory-pressure.json", "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
