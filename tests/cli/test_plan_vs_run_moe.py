#!/usr/bin/env python3
"""`headroom plan` against the ledger of `headroom run` on mixture-of-experts
models made by `headroom synth` (Qwen3-MoE with K-quant experts, Qwen2-MoE
with a shared expert, a Mixtral-style llama, gpt-oss with MXFP4 experts and
biases), for a batch of one token and of many: every term, and the
activations' routing buffers among them, must be predicted to the byte. (These models are too small for the RSS check of
test_plan_vs_run.py: the process's own pages dominate their growth.)"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import (PLAN_TERMS as TERMS, fail_if, headroom_bin, plan_and_ledger,  # noqa: E402
                     scratch_dir, term_mismatches)

MODELS = [("tiny-qwen3moe-256", "q4_k"), ("tiny-qwen2moe", "q8_0"), ("tiny-mixtral", "q4_0"),
          ("tiny-gpt-oss", "mxfp4")]
CONFIGS = [["--max-num-batched-tokens", "1"], ["--max-num-batched-tokens", "96", "--max-num-seqs", "3"]]

tmp = scratch_dir("headroom-plan-moe-")
failures = 0
for shape, wtype in MODELS:
    model = os.path.join(tmp, f"{shape}-{wtype}.gguf")
    subprocess.run([headroom_bin(), "synth", shape, model, "--type", wtype, "-q"], check=True)
    for extra in CONFIGS:
        flags = ["--max-model-len", "256", "--kv-cache-memory", "1MiB", "-t", "2"] + extra
        plan, report = plan_and_ledger(model, flags, tmp)
        label = f"{shape} {wtype} {' '.join(extra)}"
        failures += term_mismatches(label, plan, report)
        print(f"{label:<60} " + " ".join(f"{t} {plan['terms'][t]['bytes']}" for t in TERMS))
fail_if(failures > 0, f"{failures} mismatches")
print(f"ok: {len(MODELS) * len(CONFIGS)} MoE configurations, plan == ledger per term")
