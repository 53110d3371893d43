#!/usr/bin/env python3
"""Gemma 3 270M at a 32k context: the KV term with windowed KV (15 of 18
layers hold only their 512-token window) against the same model with every
layer caching the whole context (--swa-full), as the engine's ledger measures
it and as the planner predicts it: equal, and the ratio as derived by hand.

By hand (GGUF metadata: 18 layers, 1 KV head of 256, f16, window 512, every
6th layer global, block 16, 512 tokens per step):
  global: 3 layers × 2 × 256 × 2 B = 3 KiB per token × 32768 = 96 MiB
  local: 15 layers × 2 × 256 × 2 B = 15 KiB per token, at most
         ceil((512 - 1 + 512) / 16) + 1 = 65 blocks of 16 tokens = 15.23 MiB
  every layer global: 18 KiB × 32768 = 576 MiB"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, model_path, fail_if, scratch_dir  # noqa: E402

path = model_path("gemma3-270m")
tmp = scratch_dir("headroom-gemma3-kv-")
KIB = 1024
expected = {"": 3 * KIB * 32768 + 65 * 16 * 15 * KIB, "--swa-full": 18 * KIB * 32768}
measured = {}
for flag, want in expected.items():
    extra = [flag] if flag else []
    out = os.path.join(tmp, "r.json")
    subprocess.run([headroom_bin(), "run", "-m", path, "-p", "Hi", "-n", "1", "--temp", "0", "-q",
                    "--max-model-len", "32768", "--memory-report-json", out] + extra, check=True, capture_output=True)
    ledger = json.load(open(out))["terms"]["kv_cache"]["reserved_bytes"]
    p = subprocess.run([headroom_bin(), "plan", path, "--max-model-len", "32768", "--device", "cpu",
                        "--device-memory", "16GiB", "--json"] + extra, check=True, capture_output=True, text=True)
    planned = json.loads(p.stdout)["terms"]["kv_cache"]["bytes"]
    print(f"{flag or 'windowed':12s} ledger {ledger:>11,} B  plan {planned:>11,} B  by hand {want:>11,} B")
    fail_if(ledger != planned, f"{flag}: ledger {ledger} != plan {planned}")
    fail_if(ledger != want, f"{flag}: {ledger} != hand-derived {want}")
    measured[flag] = ledger
ratio = measured[""] / measured["--swa-full"]
print(f"windowed / every layer global = {ratio:.4f} ({measured[''] / 2**20:.1f} MiB vs {measured['--swa-full'] / 2**20:.0f} MiB)")
