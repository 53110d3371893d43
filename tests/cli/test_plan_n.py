#!/usr/bin/env python3
"""`headroom plan --n` against what `headroom run --n` holds, on SmolLM2: one
request of 8 samples of 64 tokens after a prompt of about a thousand tokens
takes, at its peak, the KV blocks the plan predicts, and one sample alone
takes an eighth of what the plan says 8 separate requests would (read from
`run --memory-report`, which counts the blocks the request's tables hold).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, fail_if, model_path  # noqa: E402

path = model_path("smollm2-135m")
words = ["river", "stone", "light", "north", "garden", "paper", "window", "silver"]
with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
    f.write(" ".join(words[(i * 7) % len(words)] + str(i % 13) for i in range(450)))
FLAGS = ["--max-model-len", "2048", "--kv-cache-memory", "160MiB"]


def run(n):
    p = subprocess.run([headroom_bin(), "run", "-m", path, *FLAGS, "-f", f.name, "-n", "64",
                        "--n", str(n), "--seed", "5", "--ignore-eos", "--memory-report"],
                       capture_output=True, text=True)
    fail_if(p.returncode != 0, p.stderr)
    prompt = int(re.search(r"prompt: (\d+) tokens", p.stderr).group(1))
    blocks = int(re.search(r"request KV at its peak: (\d+) blocks", p.stderr).group(1))
    return prompt, blocks


n_prompt, eight = run(8)
_, one = run(1)
plan = subprocess.run([headroom_bin(), "plan", "-m", path, *FLAGS, "--n", "8", "--prompt-tokens",
                       str(n_prompt), "--max-tokens", "64", "--json"],
                      capture_output=True, text=True, check=True)
req = json.loads(plan.stdout)["request"]
print(f"prompt {n_prompt} tokens: run --n 8 held {eight} blocks, plan {req['kv_blocks']}; "
      f"one sample {one} blocks x 8 = {8 * one}, plan {req['separate_kv_blocks']}")
fail_if(eight != req["kv_blocks"], "the plan's blocks for n=8")
fail_if(8 * one != req["separate_kv_blocks"], "the plan's blocks for 8 separate requests")
fail_if(8 * one < 5 * eight, "sharing saves at least 5x here")
print("ok")
