#!/usr/bin/env python3
"""A real model on the Vulkan backend against the CPU backend's f32 path
(--act-precision f32: weights dequantized and multiplied in f32, as the
shaders do):

1. logits over the golden logits prompts (tests/data/logits/), with f32 KV
   (with f16 KV a difference of a few ulp upstream becomes an f16 ulp of a
   key, which is how the CPU's own kernels differ from its reference): the
   same top-1
   at every position; the largest |difference| is printed. Prompts longer
   than --max-tokens (default 64) are left to the slow run (--max-tokens 0:
   all of them), as lavapipe computes on this machine's CPU;
2. greedy continuations (--n-predict tokens, default 48) of the greedy
   prompts (tests/data/greedy/; --max-greedy-prompts of them, default all
   ten), all in one batch on each server: identical on all but one; where
   one differs, the CPU's top-2 logprobs at the first differing token say by
   how much (a near-tie: below 0.05).

Skipped (exit code 77, which ctest reports as skipped) where this machine has
no Vulkan device.

The default test run checks fewer prompts and shorter continuations than the
slow run (ctest -L slow), which checks them all.

  test_vulkan_model.py MODEL [--max-tokens N] [--max-greedy-prompts N] [--n-predict N]"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, model_path, fail_if, scratch_dir, skip_without_vulkan  # noqa: E402
from server.serverlib import Server  # noqa: E402

MAX_TIE_GAP = 0.05


args = argparse.ArgumentParser()
args.add_argument("model")
args.add_argument("--max-tokens", type=int, default=64)
args.add_argument("--max-greedy-prompts", type=int, default=0)
args.add_argument("--n-predict", type=int, default=48)
args = args.parse_args()
skip_without_vulkan()
name = args.model
N_PREDICT = args.n_predict
path = model_path(name)
data_dir = os.environ.get("HEADROOM_TEST_DATA", "tests/data")
tmp = scratch_dir("vulkan-model-")

# 1. Logits.
cases = json.load(open(os.path.join(data_dir, "logits", f"{name}.json")))["cases"]
worst, n_pos, n_mismatch, n_skipped = 0.0, 0, 0, 0
for i, case in enumerate(cases):
    if args.max_tokens and len(case["tokens"]) > args.max_tokens:
        n_skipped += 1
        continue
    logits = {}
    for device in ["cpu", "vulkan"]:
        out = os.path.join(tmp, f"{device}.f32")
        subprocess.run([headroom_bin(), "eval", "-m", path, "--tokens", ",".join(map(str, case["tokens"])),
                        "--logits-out", out, "--device", device, "--act-precision", "f32",
                        "--kv-dtype", "f32"],
                       check=True, capture_output=True)
        logits[device] = np.fromfile(out, dtype=np.float32).reshape(len(case["tokens"]), -1)
    cpu, gpu = logits["cpu"], logits["vulkan"]
    worst = max(worst, float(np.abs(cpu - gpu).max()))
    mismatch = cpu.argmax(axis=1) != gpu.argmax(axis=1)
    for p in np.nonzero(mismatch)[0]:
        top2 = np.sort(cpu[p])[-2:]
        print(f"case {i} position {p}: top-1 {cpu[p].argmax()} (cpu) vs {gpu[p].argmax()} (vulkan), "
              f"cpu's top two {top2[1]:.5f} and {top2[0]:.5f}")
    n_mismatch += int(mismatch.sum())
    n_pos += len(case["tokens"])
print(f"{name} logits, vulkan vs cpu f32: max |diff| {worst:.3e} over {n_pos} positions, "
      f"top-1 differs at {n_mismatch}" + (f" ({n_skipped} long prompts left to the slow run)" if n_skipped else ""))
fail_if(n_mismatch > 0, "the Vulkan backend's top-1 differs from the CPU's")

# 2. Greedy continuations, all prompts at once on each backend.
greedy = json.load(open(os.path.join(data_dir, "greedy", f"{name}.json")))["cases"]
prompts = [c["prompt"] for c in greedy
           if not args.max_tokens or len(c["prompt_tokens"]) <= args.max_tokens]
if args.max_greedy_prompts:
    prompts = prompts[:args.max_greedy_prompts]


def complete(server, prompt):
    status, body = server.request("POST", "/v1/completions", {
        "prompt": prompt, "max_tokens": N_PREDICT, "temperature": 0, "logprobs": 2}, timeout=1800)
    fail_if(status != 200, f"completion: {status} {body}")
    choice = body["choices"][0]
    return choice["logprobs"]["tokens"], choice["logprobs"]["top_logprobs"]


results = {}
for device in ["cpu", "vulkan"]:
    with Server(["-m", path, "--device", device, "--act-precision", "f32", "--max-num-seqs", "10",
                 "--max-model-len", "1024"]) as server:
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            results[device] = list(pool.map(lambda p: complete(server, p), prompts))
n_same = 0
for i, ((cpu_tokens, cpu_top), (gpu_tokens, _)) in enumerate(zip(results["cpu"], results["vulkan"])):
    if cpu_tokens == gpu_tokens:
        n_same += 1
        continue
    at = next(k for k in range(min(len(cpu_tokens), len(gpu_tokens))) if cpu_tokens[k] != gpu_tokens[k])
    top = cpu_top[at]
    gap = top.get(cpu_tokens[at], 0) - top.get(gpu_tokens[at], float("-inf"))
    print(f"prompt {i} ({prompts[i][:30]!r}): differs at token {at}: cpu {cpu_tokens[at]!r}, vulkan "
          f"{gpu_tokens[at]!r}; the cpu's logprobs there {top} (gap {gap:.4f})")
    fail_if(not gap < MAX_TIE_GAP, f"prompt {i}: not a near-tie (gap {gap:.4f} >= {MAX_TIE_GAP})")
print(f"{name} greedy {N_PREDICT}-token continuations: {n_same} of {len(prompts)} identical on vulkan and cpu f32"
      + (f" ({len(greedy) - len(prompts)} prompts left to the slow run)" if len(prompts) < len(greedy) else ""))
fail_if(n_same < len(prompts) - 1, f"only {n_same} of {len(prompts)} continuations are identical")
