#!/usr/bin/env python3
"""Two `headroom serve` replicas (a tiny random model) behind the real
vllm-router from PyPI, cache_aware:
  - generation, model discovery and the worker endpoints routers call
    (/server_info, /get_model_info, /get_load, /tokenize) work through it;
  - turns of one conversation stay on one replica (prefix hits there), as the
    router's cache-aware policy asks /tokenize of each replica;
  - vLLM's metric names parse with prometheus_client and equal headroom's
    own counters for the same load (a consistency check), and the prompt
    tokens equal what the responses' usage says;
  - SIGTERM on the replica serving a long stream: its /health says draining
    at once, requests sent through the router meanwhile all succeed, the
    stream finishes every token, and the replica exits 0.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Server, fail_if, synth_tiny, scratch_dir  # noqa: E402

import openai  # noqa: E402

router_bin = shutil.which("vllm-router", path=os.path.dirname(sys.executable))
if not router_bin:
    print("SKIPPED: vllm-router is not installed next to this Python (scripts/setup.sh test)")
    sys.exit(77)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


model = synth_tiny(scratch_dir("headroom-cluster-"))
FLAGS = ["-m", model, "--served-model-name", "tiny", "--max-model-len", "1024", "--threads", "1",
         "--kv-cache-memory", "16MiB", "-q", "--drain-grace", "3"]
replicas = [Server(FLAGS), Server(FLAGS)]
port = free_port()
log_path = os.path.join(scratch_dir("headroom-router-log-"), "router.log")
log = open(log_path, "wb")
router = subprocess.Popen(
    [router_bin, "--host", "127.0.0.1", "--port", str(port), "--worker-urls",
     *[r.base for r in replicas], "--policy", "cache_aware", "--prometheus-port", str(free_port()),
     "--worker-startup-check-interval", "1", "--health-check-interval-secs", "1",
     "--health-failure-threshold", "1"], stdout=log, stderr=log)
try:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
    deadline = time.time() + 60
    while True:
        try:
            models = client.models.list()
            break
        except openai.APIConnectionError:
            fail_if(time.time() > deadline or router.poll() is not None,
                    "the router did not start:\n" + open(log_path, errors="replace").read()[-3000:])
            time.sleep(0.5)
    fail_if([m.id for m in models.data] != ["tiny"], f"models through the router: {models}")
    for r in replicas:
        status, info = r.request("GET", "/server_info")
        fail_if(status != 200 or info["served_model_name"] != "tiny", f"/server_info: {info}")
        status, info = r.request("GET", "/get_model_info")
        fail_if(status != 200 or info["model_type"] != "llama", f"/get_model_info: {info}")
        status, load = r.request("GET", "/get_load")
        fail_if(status != 200 or load["load"] != 0, f"/get_load: {load}")

    # One conversation, turn after turn: cache_aware keeps it on one replica.
    system = "You answer questions about the tiny model. " * 6
    messages = [{"role": "system", "content": system}]
    prompt_tokens = 0
    for turn in range(4):
        messages.append({"role": "user", "content": f"question {turn}"})
        reply = client.chat.completions.create(model="tiny", messages=messages, max_tokens=6,
                                               temperature=0)
        prompt_tokens += reply.usage.prompt_tokens
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    seen = [r.metrics()[0] for r in replicas]
    label = '{model_name="tiny"}'
    per_replica = [s["vllm:prompt_tokens_total" + label] for s in seen]
    print("prompt tokens per replica:", per_replica)
    fail_if(sorted(per_replica)[0] != 0, f"the conversation moved between replicas: {per_replica}")
    fail_if(sum(per_replica) != prompt_tokens,
            f"prompt tokens {per_replica} != the usage the responses reported ({prompt_tokens})")
    fail_if(sum(s["vllm:prefix_cache_hits_total" + label] for s in seen) == 0,
            "later turns must hit the prefix cache of the replica that served the first")

    # vLLM's names carry headroom's numbers (consistency with its own counters).
    pairs = {"vllm:prompt_tokens_total": "headroom_prompt_tokens_total",
             "vllm:generation_tokens_total": "headroom_generation_tokens_total",
             "vllm:prefix_cache_queries_total": "headroom_prefix_cache_queries_total",
             "vllm:prefix_cache_hits_total": "headroom_prefix_cache_hits_total",
             "vllm:num_requests_running": "headroom_num_requests_running",
             "vllm:num_requests_waiting": "headroom_num_requests_waiting",
             "vllm:kv_cache_usage_perc": "headroom_kv_cache_usage_ratio",
             "vllm:gpu_cache_usage_perc": "headroom_kv_cache_usage_ratio",
             "vllm:num_preemptions_total": "headroom_preemptions_total",
             "vllm:time_to_first_token_seconds_count": "headroom_time_to_first_token_seconds_count",
             "vllm:time_to_first_token_seconds_sum": "headroom_time_to_first_token_seconds_sum",
             "vllm:e2e_request_latency_seconds_count": "headroom_e2e_request_latency_seconds_count",
             "vllm:e2e_request_latency_seconds_sum": "headroom_e2e_request_latency_seconds_sum"}
    for r in replicas:
        samples, families = r.metrics()
        for v, h in pairs.items():
            fail_if(v + label not in samples, f"{v} is missing")
            fail_if(samples[v + label] != samples[h], f"{v} {samples[v + label]} != {h} {samples[h]}")
        fail_if(families["vllm:time_to_first_token_seconds"].type != "histogram", "a histogram")

    # Draining: SIGTERM a replica while it serves a long stream (sent to it
    # directly, so that it is known to be busy).
    busy = replicas[0]
    direct = openai.OpenAI(base_url=busy.base + "/v1", api_key="none", max_retries=0)
    result = {}
    started = threading.Event()

    def long_stream():
        n = 0
        for chunk in direct.completions.create(model="tiny", prompt="a long story", stream=True,
                                               max_tokens=900, extra_body={"ignore_eos": True},
                                               stream_options={"include_usage": True}):
            started.set()
            if chunk.usage:
                n = chunk.usage.completion_tokens
        result["tokens"] = n
    t = threading.Thread(target=long_stream)
    t.start()
    fail_if(not started.wait(30), "the long stream did not start")
    busy.proc.send_signal(signal.SIGTERM)
    t_signal = time.time()
    status, health = busy.request("GET", "/health")
    while status == 200 and time.time() < t_signal + 2:
        status, health = busy.request("GET", "/health")
    in_flight = t.is_alive()
    fail_if((status, health) != (503, {"status": "draining"}), f"/health: {status} {health}")
    failures = 0
    for i in range(8):
        try:
            client.chat.completions.create(model="tiny", max_tokens=4,
                                           messages=[{"role": "user", "content": f"hi {i}"}])
        except openai.APIError as e:
            failures += 1
            print("failed while draining:", e)
    t.join(120)
    fail_if(failures, f"{failures} of 8 requests failed while a replica drained")
    fail_if(result.get("tokens") != 900, f"the draining replica's stream: {result}")
    code = busy.wait_exit(60)
    fail_if(code != 0, f"the drained replica exited {code}")
    print(f"the stream was {'still' if in_flight else 'no longer'} in flight when /health said "
          f"draining, {time.time() - t_signal:.2f}s after the signal")
    print("ok: drained replica exit 0, its stream finished 900 tokens, 8 of 8 requests served")
finally:
    router.terminate()
    router.wait(10)
    for r in replicas:
        r.kill()
