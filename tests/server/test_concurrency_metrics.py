#!/usr/bin/env python3
"""64 concurrent streaming clients (the openai package, one thread each) against
a tiny random model: every stream completes with the tokens it asked for, and
/metrics, parsed by prometheus_client, moved by exactly what the clients
received. The chat phase is a consistency check: its prompt-token and
prefix-hit deltas are the server's own usage fields summed. The completion
phase is independent: its prompts are token ids whose count the test knows,
so prompt_tokens and /metrics must both equal what was sent. /v1/memory
agrees with /metrics."""
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Server, fail_if, synth_tiny, scratch_dir  # noqa: E402

import openai  # noqa: E402

N_CLIENTS = 64
N_TOKENS = 16
KV_BYTES = 16 * 1024 * 1024

tmp = scratch_dir("headroom-serve-")
model = synth_tiny(tmp)

with Server(["-m", model, "--kv-cache-memory", "16MiB", "--max-num-seqs", "64", "-t", "1",
             "-q"]) as server:
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0,
                           timeout=300)
    before, _ = server.metrics()

    def one(i):
        # Every fourth client shares a prompt with the others of its group:
        # later ones can find its blocks in the prefix cache.
        system = "You are client number %d of a very long and detailed test run." % (i % 4)
        stream = client.chat.completions.create(
            model="tiny", max_tokens=N_TOKENS, temperature=0.8, seed=i, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
            messages=[{"role": "system", "content": system},
                      {"role": "user", "content": f"hello from {i}"}])
        text, finish, usage, roles = [], None, None, []
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for c in chunk.choices:
                roles.append(c.delta.role) if c.delta.role else None
                text.append(c.delta.content or "")
                finish = c.finish_reason or finish
        return "".join(text), finish, usage, roles

    t0 = time.time()
    with ThreadPoolExecutor(N_CLIENTS) as pool:
        results = list(pool.map(one, range(N_CLIENTS)))
    elapsed = time.time() - t0

    for i, (text, finish, usage, roles) in enumerate(results):
        fail_if(finish != "length", f"client {i}: finish {finish}")
        fail_if(usage is None or usage.completion_tokens != N_TOKENS, f"client {i}: {usage}")
        fail_if(roles != ["assistant"], f"client {i}: roles {roles}")
    n_prompt = sum(u.prompt_tokens for _, _, u, _ in results)
    n_cached = sum(u.prompt_tokens_details.cached_tokens for _, _, u, _ in results)

    after, families = server.metrics()

    def delta(key):
        return after.get(key, 0) - before.get(key, 0)

    expect = {
        'headroom_requests_finished_total{finish_reason="length"}': N_CLIENTS,
        'headroom_requests_finished_total{finish_reason="abort"}': 0,
        "headroom_generation_tokens_total": N_CLIENTS * N_TOKENS,
        "headroom_prompt_tokens_total": n_prompt,
        "headroom_preemptions_total": 0,
        # Without preemption each prompt is looked up once, at admission.
        "headroom_prefix_cache_queries_total": n_prompt,
        "headroom_prefix_cache_hits_total": n_cached,
        "headroom_prompt_tokens_computed_total": n_prompt - n_cached,
        "headroom_time_to_first_token_seconds_count": N_CLIENTS,
        "headroom_inter_token_latency_seconds_count": N_CLIENTS * (N_TOKENS - 1),
        "headroom_e2e_request_latency_seconds_count": N_CLIENTS,
        # The 64 streams and the first scrape (the second is counted after its own text).
        'headroom_http_responses_total{code="200"}': N_CLIENTS + 1,
        "headroom_client_disconnects_total": 0,
    }
    for key, value in expect.items():
        fail_if(delta(key) != value, f"{key} moved by {delta(key)}, expected {value}")
    fail_if(n_cached == 0, "no prefix cache hits among clients sharing a system prompt")

    gauges = {
        "headroom_num_requests_running": 0,
        "headroom_num_requests_waiting": 0,
        "headroom_kv_blocks_used": 0,
        "headroom_kv_cache_usage_ratio": 0,
        'headroom_memory_reserved_bytes{device="host",term="kv_cache"}': KV_BYTES,
        'headroom_memory_allocated_bytes{device="host",term="kv_cache"}': 0,
    }
    for key, value in gauges.items():
        fail_if(after.get(key) != value, f"{key} is {after.get(key)}, expected {value}")
    fail_if(after["headroom_memory_peak_bytes{device=\"host\",term=\"kv_cache\"}"] <= 0, "kv peak is 0")

    types = {"headroom_num_requests_running": "gauge", "headroom_generation_tokens": "counter",
             "headroom_time_to_first_token_seconds": "histogram",
             "headroom_requests_finished": "counter", "headroom_memory_reserved_bytes": "gauge"}
    for name, kind in types.items():
        fail_if(families[name].type != kind, f"{name} is a {families[name].type}, not {kind}")
    for name in ("headroom_time_to_first_token_seconds", "headroom_inter_token_latency_seconds"):
        buckets = [(s.labels["le"], s.value) for s in families[name].samples
                   if s.name.endswith("_bucket")]
        values = [v for _, v in buckets]
        fail_if(values != sorted(values), f"{name}: buckets not cumulative {buckets}")
        fail_if(buckets[-1][0] != "+Inf" or buckets[-1][1] != after[name + "_count"],
                f"{name}: +Inf bucket {buckets[-1]} != count {after[name + '_count']}")

    # Independent of the server's accounting: prompts of known token ids.
    lengths = [10 + i for i in range(8)]
    before_ids, _ = server.metrics()

    def by_ids(i):
        r = client.completions.create(model="tiny", prompt=[200 + 7 * i + k for k in range(lengths[i])],
                                      max_tokens=4, temperature=0, extra_body={"ignore_eos": True})
        return r.usage

    with ThreadPoolExecutor(8) as pool:
        usages = list(pool.map(by_ids, range(8)))
    for i, u in enumerate(usages):
        fail_if(u.prompt_tokens != lengths[i] or u.completion_tokens != 4,
                f"prompt of {lengths[i]} ids: usage {u}")
    after_ids, _ = server.metrics()
    sent = after_ids["headroom_prompt_tokens_total"] - before_ids.get("headroom_prompt_tokens_total", 0)
    made = after_ids["headroom_generation_tokens_total"] - before_ids.get("headroom_generation_tokens_total", 0)
    fail_if(sent != sum(lengths), f"prompt tokens moved by {sent}, {sum(lengths)} were sent")
    fail_if(made != 8 * 4, f"generation tokens moved by {made}, expected {8 * 4}")
    after = after_ids

    status, memory = server.request("GET", "/v1/memory")
    fail_if(status != 200, f"/v1/memory {status}")
    fail_if(memory["kv_blocks_used"] != after["headroom_kv_blocks_used"] or
            memory["kv_blocks_total"] != after["headroom_kv_blocks_total"] or
            memory["terms"]["kv_cache"]["reserved_bytes"] != KV_BYTES or
            sum(g["blocks_total"] for g in memory["kv_groups"]) != memory["kv_blocks_total"],
            f"/v1/memory disagrees with /metrics: {memory}")
    fail_if(memory["prefix_cache"]["hit_tokens"] != after["headroom_prefix_cache_hits_total"],
            f"prefix cache: {memory['prefix_cache']}")
    code = server.stop()
    fail_if(code != 0, f"exit code {code}")

print(f"ok: {N_CLIENTS} concurrent streams of {N_TOKENS} tokens completed in {elapsed:.2f}s; "
      f"metrics agree ({n_prompt} prompt tokens, {n_cached} from the prefix cache)")
