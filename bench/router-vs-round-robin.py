#!/usr/bin/env python3
"""headroom replicas behind vllm-router: cache_aware against round_robin, and
a replica killed under load.

Starts REPLICAS `headroom serve` replicas of one model on loopback ports and
vllm-router (from PyPI, in .cluster-venv as scripts/cluster.sh installs it)
in front of them, then drives multi-turn chats with the openai client:
CONVERSATIONS conversations of TURNS turns, CONCURRENCY at once, sharing
six system prompts; each turn sends the whole history (the replies,
--max-tokens each with ignore_eos, are most of it by the last turns). For each policy
it reports the prefix-cache hit rate summed over the replicas (from their
/metrics), generated tokens per second, and TTFT p50/p95 (first streamed
content). Then, under cache_aware, it kills one replica in the middle of the
load, with SIGKILL and then (replicas restarted) with SIGTERM, and counts
the requests that failed, hung (no answer within --timeout) or succeeded.

  .venv/bin/python bench/router-vs-round-robin.py [--model smollm2-135m]
      [--replicas 3] [--conversations 24] [--turns 6] [--concurrency 8]
      [--max-tokens 64] [--threads T]
"""
import argparse
import concurrent.futures as cf
import os
import pathlib
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import openai
from prometheus_client.parser import text_string_to_metric_families

root = pathlib.Path(__file__).resolve().parent.parent
BIN = root / "build" / "release" / "headroom"
VENV = root / ".cluster-venv"

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
ap.add_argument("--model", default="smollm2-135m")
ap.add_argument("--replicas", type=int, default=3)
ap.add_argument("--conversations", type=int, default=24)
ap.add_argument("--turns", type=int, default=6)
ap.add_argument("--concurrency", type=int, default=8)
ap.add_argument("--max-tokens", type=int, default=64)
ap.add_argument("--threads", type=int, default=0, help="threads per replica (0: cores / replicas)")
ap.add_argument("--timeout", type=float, default=120, help="seconds before a request counts as hung")
ap.add_argument("--base-port", type=int, default=19300)
ap.add_argument("--skip-kill", action="store_true", help="only compare the policies")
ap.add_argument("--skip-compare", action="store_true", help="only kill a replica under load")
args = ap.parse_args()
threads = args.threads or max(1, (os.cpu_count() or 2) // args.replicas)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def ensure_router():
    exe = VENV / "bin" / "vllm-router"
    if not exe.exists():
        log(f"installing vllm-router into {VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "--quiet", "vllm-router==0.1.17"],
                       check=True)
    return exe


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_ok(url, seconds, proc=None):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{url}: the process exited ({proc.returncode})")
        try:
            if get(url, timeout=2)[0] == 200:
                return
        except Exception:
            pass
        time.sleep(0.3)
    raise SystemExit(f"{url}: not ready after {seconds}s")


class Replica:
    def __init__(self, port):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.start()

    def start(self):
        self.log = open(f"/tmp/headroom-replica-{self.port}.log", "wb")
        self.proc = subprocess.Popen(
            [str(BIN), "serve", "-m", args.model, "--port", str(self.port), "--threads",
             str(threads), "--max-model-len", "2048", "--kv-cache-memory", "256MiB",
             "--shutdown-timeout", "60", "-q"],
            stdout=subprocess.DEVNULL, stderr=self.log)

    def metrics(self):
        try:
            text = get(self.url + "/metrics")[1]
        except Exception:
            return {}
        out = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name in ("headroom_prefix_cache_queries_total",
                              "headroom_prefix_cache_hits_total",
                              "headroom_generation_tokens_total"):
                    out[s.name] = s.value
        return out


class Router:
    def __init__(self, exe, port, policy, workers, tag=""):
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = f"/tmp/headroom-router-{policy}{tag}.log"
        log_file = open(self.log_path, "wb")
        self.metrics_url = f"http://127.0.0.1:{port + 1000}/metrics"
        self.proc = subprocess.Popen(
            [str(exe), "--host", "127.0.0.1", "--port", str(port), "--worker-urls",
             *[w.url for w in workers], "--policy", policy, "--prometheus-port", str(port + 1000),
             "--worker-startup-check-interval", "1", "--health-check-interval-secs", "1",
             "--health-failure-threshold", "1", "--retry-max-retries", "3"],
            stdout=log_file, stderr=log_file)
        wait_ok(self.url + "/health", 60, self.proc)

    def retries(self):
        """Retries the router counted (its series with "retr" in the name), summed."""
        try:
            text = get(self.metrics_url)[1]
        except Exception:
            return None
        n = 0.0
        for fam in text_string_to_metric_families(text):
            for smp in fam.samples:
                if "retr" in smp.name and not smp.name.endswith(("_bucket", "_sum", "_created")):
                    n += smp.value
        return int(n)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


# Conversations: a few long system prompts shared by many, each turn adding
# the assistant's reply and a new question.
SYSTEMS = [
    "You are the help desk of a municipal water utility: answer questions about billing, leaks, "
    "meters and outages politely, cite the tariff page, and never promise a repair date.",
    "You are a patient tutor of elementary geometry for adult learners: explain angles, "
    "triangles, circles and areas with one example each and one question back.",
    "You are the assistant of a small bakery: the rye loaf is baked on Mondays, the seed bread "
    "on Thursdays, cakes on request, and every order must be placed a day before.",
    "You are a travel agent for rail journeys in Europe: suggest routes, name the changes of "
    "train, and say which tickets need a reservation.",
    "You are a gardening adviser for small balconies: recommend plants for the light the user "
    "describes, how often to water them, and when to repot.",
    "You are a support agent for a note-taking app: explain sync, sharing and export, and ask "
    "for the app version before suggesting a fix.",
]
QUESTIONS = ["What should I do first?", "Can you say that more simply?", "Why is that?",
             "Give me an example.", "What else should I know?", "Summarize in one sentence."]


def conversation_plan(n):
    rng = random.Random(7)
    return [(SYSTEMS[i % len(SYSTEMS)], rng.sample(QUESTIONS, k=len(QUESTIONS))) for i in range(n)]


def chat_turns(client, system, questions, turns, results, stop_flag):
    messages = [{"role": "system", "content": system}]
    for t in range(turns):
        if stop_flag.is_set():
            return
        messages.append({"role": "user", "content": questions[t % len(questions)]})
        t0 = time.time()
        ttft = None
        text = ""
        try:
            stream = client.chat.completions.create(
                model=args.model, messages=messages, max_tokens=args.max_tokens, temperature=0,
                stream=True, timeout=args.timeout, extra_body={"ignore_eos": True})
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    if ttft is None:
                        ttft = time.time() - t0
                    text += chunk.choices[0].delta.content
            results.append(("ok", ttft if ttft is not None else time.time() - t0))
        except openai.APITimeoutError:
            results.append(("hung", None))
            return
        except Exception as e:  # noqa: BLE001 - every failure is counted
            results.append(("failed", repr(e)[:200]))
            return
        messages.append({"role": "assistant", "content": text})


def drive(router_url, on_half=None):
    client = openai.OpenAI(base_url=router_url + "/v1", api_key="none", max_retries=0)
    plan = conversation_plan(args.conversations)
    results, stop_flag = [], threading.Event()
    t0 = time.time()
    fired = False
    with cf.ThreadPoolExecutor(args.concurrency) as pool:
        futures = [pool.submit(chat_turns, client, s, q, args.turns, results, stop_flag)
                   for s, q in plan]
        total = args.conversations * args.turns
        while not all(f.done() for f in futures):
            if on_half and not fired and len(results) >= total // 2:
                fired = True
                on_half()
            time.sleep(0.05)
    return results, time.time() - t0


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def main():
    exe = ensure_router()
    replicas = [Replica(args.base_port + 1 + i) for i in range(args.replicas)]
    try:
        for r in replicas:
            wait_ok(r.url + "/health", 300, r.proc)
        log(f"{args.replicas} replicas of {args.model}, {threads} threads each; "
            f"{args.conversations} conversations x {args.turns} turns, {args.concurrency} at once")
        rows = {}
        for i, policy in enumerate([] if args.skip_compare else ["round_robin", "cache_aware"]):
            # Fresh replicas per policy: no prefix cache carried over.
            for r in replicas:
                r.proc.send_signal(signal.SIGTERM)
                r.proc.wait(60)
                r.start()
            for r in replicas:
                wait_ok(r.url + "/health", 300, r.proc)
            router = Router(exe, args.base_port + 100 + i, policy, replicas)
            before = [r.metrics() for r in replicas]
            results, wall = drive(router.url)
            after = [r.metrics() for r in replicas]
            router.stop()

            def delta(key):
                return sum(a.get(key, 0) - b.get(key, 0) for a, b in zip(after, before))
            q, h = delta("headroom_prefix_cache_queries_total"), delta(
                "headroom_prefix_cache_hits_total")
            gen = delta("headroom_generation_tokens_total")
            ttfts = [x for s, x in results if s == "ok"]
            per = [a.get("headroom_prefix_cache_queries_total", 0) -
                   b.get("headroom_prefix_cache_queries_total", 0) for a, b in zip(after, before)]
            rows[policy] = dict(hit=h / q if q else 0, tps=gen / wall,
                                p50=percentile(ttfts, 50), p95=percentile(ttfts, 95),
                                ok=len(ttfts), failed=sum(s != "ok" for s, _ in results),
                                per=per, wall=wall)
            r_ = rows[policy]
            print(f"{policy:12} prefix-cache hit rate {r_['hit']:.3f} ({int(h)} of {int(q)} prompt "
                  f"tokens; queries per replica {[int(x) for x in per]}), {r_['tps']:.1f} "
                  f"generated tokens/s, TTFT p50 {r_['p50'] * 1000:.0f} ms p95 "
                  f"{r_['p95'] * 1000:.0f} ms, {r_['ok']} ok, {r_['failed']} failed, "
                  f"{r_['wall']:.1f} s", flush=True)
        ca, rr = rows.get("cache_aware"), rows.get("round_robin")
        if ca and rr:
            print(f"cache_aware / round_robin: hit rate {ca['hit'] / rr['hit'] if rr['hit'] else float('inf'):.2f}x, "
                  f"TTFT p50 {ca['p50'] / rr['p50']:.2f}x, tokens/s {ca['tps'] / rr['tps']:.2f}x",
                  flush=True)

        if args.skip_kill:
            return
        for i, sig in enumerate([signal.SIGKILL, signal.SIGTERM]):
            for r in replicas:
                if r.proc.poll() is None:
                    r.proc.send_signal(signal.SIGTERM)
                    r.proc.wait(60)
                r.start()
            for r in replicas:
                wait_ok(r.url + "/health", 300, r.proc)
            router = Router(exe, args.base_port + 200 + i, "cache_aware", replicas,
                            "-" + signal.Signals(sig).name)
            victim = replicas[0]
            t_kill = {}

            def kill():
                t_kill["t"] = time.time()
                victim.proc.send_signal(sig)
            results, wall = drive(router.url, on_half=kill)
            code = victim.proc.wait(120)
            retried = router.retries()
            router.stop()
            n_ok = sum(s == "ok" for s, _ in results)
            n_failed = sum(s == "failed" for s, _ in results)
            n_hung = sum(s == "hung" for s, _ in results)
            print(f"{signal.Signals(sig).name} one of {args.replicas} replicas mid-load: "
                  f"{n_ok} ok, {n_failed} failed, {n_hung} hung, {retried} retried by the router, "
                  f"{args.conversations * args.turns - len(results)} not sent (their "
                  f"conversation had failed); the replica exited {code}", flush=True)
            for s, x in results:
                if s == "failed":
                    log("  failed:", x)
    finally:
        for r in replicas:
            if r.proc.poll() is None:
                r.proc.kill()


if __name__ == "__main__":
    main()
