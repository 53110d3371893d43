#!/usr/bin/env python3
"""A context that was not pinned fits by itself; a pinned one is refused.

SmolLM2-135M's KV takes 2 (K, V) x 30 layers x 3 heads x 64 dims x 2 bytes =
23,040 bytes per token: its trained context of 8192 tokens needs 180 MiB. With
--kv-cache-memory 64MiB the pool has 64 MiB / (16 x 23,040) = 182 blocks of
16 tokens, so the longest context that fits is 182 x 16 = 2912 tokens. Without
--max-model-len, `run`, `serve` and `plan` use 2912 and say so in one line;
with --max-model-len 8192 they refuse, as before, with the numbers and fixes."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, model_path, fail_if  # noqa: E402
from server.serverlib import Server  # noqa: E402

FIT = 182 * 16
NOTE = f"the trained context of 8192 tokens needs 180 MiB of KV and the budget leaves room for {FIT} tokens"
REFUSAL = ("KV for 8192 tokens needs 180 MiB, the budget leaves 64.0 MiB: use --max-model-len 2912, or "
           "--kv-dtype q8_0 (95.6 MiB), or --kv-cache-memory 180 MiB")
model = model_path("smollm2-135m")
pool = ["--kv-cache-memory", "64MiB"]

r = subprocess.run([headroom_bin(), "run", "-m", model, *pool, "-p", "Hi", "-n", "2", "--temp", "0"],
                   capture_output=True, text=True)
fail_if(r.returncode != 0, f"run without --max-model-len failed: {r.stderr}")
notes = [line for line in r.stderr.splitlines() if line.startswith("note:")]
fail_if(len(notes) != 1 or NOTE not in notes[0], f"run's note: {notes}")

r = subprocess.run([headroom_bin(), "run", "-m", model, *pool, "--max-model-len", "8192", "-p", "Hi", "-n", "2"],
                   capture_output=True, text=True)
fail_if(r.returncode != 1 or REFUSAL not in r.stderr, f"run with a pinned 8192: {r.returncode} {r.stderr}")

plan = json.loads(subprocess.run([headroom_bin(), "plan", model, *pool, "--json"], check=True,
                                 capture_output=True, text=True).stdout)
fail_if(plan["config"]["max_model_len"] != FIT or not plan["fits"], f"plan: {plan['config']}")
fail_if(NOTE not in (plan["context_note"] or ""), f"plan's note: {plan['context_note']}")
pinned = json.loads(subprocess.run([headroom_bin(), "plan", model, *pool, "--max-model-len", "8192", "--json"],
                                   check=True, capture_output=True, text=True).stdout)
fail_if(pinned["fits"] or REFUSAL not in pinned["refusal"], f"pinned plan: {pinned['refusal']}")

with Server(["-m", model, *pool, "-q"]) as server:
    status, models = server.request("GET", "/v1/models")
    fail_if(status != 200 or models["data"][0]["max_model_len"] != FIT, f"serve: {models}")
    fail_if(NOTE not in server.log_text(), "serve did not say why its context is shorter")
print(f"ok: run, serve and plan fit the unpinned context to {FIT} tokens and refuse a pinned 8192")
