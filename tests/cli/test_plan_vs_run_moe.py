#!/usr/bin/env python3
"""`headroom plan` against the ledger of `headroom run` on mixture-of-experts
models made by `headroom synth` (Qwen3-MoE with K-quant experts, Qwen2-MoE
with a shared expert, a Mixtral-style llama), for a batch of one token and
of many: every term, and the activations' routing buffers among them, must
be predicted to the byte. (These models are too small for the RSS check of
test_plan_vs_run.py: the process's own pages dominate their growth.)"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, fail_if, scratch_dir  # noqa: E402

TERMS = ("weights", "kv_cache", "activations", "runtime")
MODELS = [("tiny-qwen3moe-256", "q4_k"), ("tiny-qwen2moe", "q8_0"), ("tiny-mixtral", "q4_0")]
CONFIGS = [["--max-num-batched-tokens", "1"], ["--max-num-batched-tokens", "96", "--max-num-seqs", "3"]]

tmp = scratch_dir("headroom-plan-moe-")
failures = 0
for shape, wtype in MODELS:
    model = os.path.join(tmp, f"{shape}-{wtype}.gguf")
    subprocess.run([headroom_bin(), "synth", shape, model, "--type", wtype, "-q"], check=True)
    for extra in CONFIGS:
        flags = ["--max-model-len", "256", "--kv-cache-memory", "1MiB", "-t", "2"] + extra
        plan = json.loads(subprocess.run(
            [headroom_bin(), "plan", model, "--device", "cpu", "--json"] + flags,
            check=True, capture_output=True, text=True).stdout)
        report_path = os.path.join(tmp, "report.json")
        subprocess.run([headroom_bin(), "run", "-m", model, "-p", "hello world", "-n", "4",
                        "--temp", "0", "-q", "--memory-report-json", report_path] + flags,
                       check=True, capture_output=True)
        with open(report_path) as f:
            report = json.load(f)
        label = f"{shape} {wtype} {' '.join(extra)}"
        for term in TERMS:
            predicted = plan["terms"][term]["bytes"]
            reserved = report["terms"][term]["reserved_bytes"]
            if predicted != reserved:
                print(f"FAIL {label}: {term} planned {predicted}, the engine reserved {reserved}",
                      file=sys.stderr)
                failures += 1
        print(f"{label:<60} " + " ".join(f"{t} {plan['terms'][t]['bytes']}" for t in TERMS))
fail_if(failures > 0, f"{failures} mismatches")
print(f"ok: {len(MODELS) * len(CONFIGS)} MoE configurations, plan == ledger per term")
