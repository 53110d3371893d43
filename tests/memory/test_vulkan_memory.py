#!/usr/bin/env python3
"""The Vulkan backend's memory on the default model:

1. for four configurations (context × sequences × KV dtype, an explicit pool
   or what --device-memory leaves) `headroom plan --device vulkan` predicts
   each device's terms (the GPU's and the host's) to the byte of what
   `headroom run --device vulkan` reserves in that device's ledger;
2. the KV pool is in device memory: the process's RSS does not grow with
   --kv-cache-memory (on lavapipe, whose device memory is host memory, the
   pool's pages stay untouched until blocks are used);
3. a device budget too small for the weights, with every layer asked on it
   (--n-gpu-layers all), is refused at start-up, in one line with the numbers
   and the fixes.

Skipped (exit code 77) where this machine has no Vulkan device."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import (headroom_bin, model_path, fail_if, skip_without_vulkan,  # noqa: E402
                     device_term_mismatches)

TERMS = ("weights", "kv_cache", "activations", "runtime")


skip_without_vulkan()
model = model_path("smollm2-135m")


def run_report(flags):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "report.json")
        subprocess.run([headroom_bin(), "run", "-m", model, "-p", "hi", "-n", "2", "--temp", "0", "-q",
                        "--device", "vulkan", "--memory-report-json", path] + flags,
                       check=True, capture_output=True)
        with open(path) as f:
            return json.load(f)


# (max_model_len, max_num_seqs, kv_dtype, pool flags)
CONFIGS = [
    (2048, 1, "f16", ["--kv-cache-memory", "64MiB"]),
    (4096, 2, "q8_0", ["--kv-cache-memory", "128MiB"]),
    (1024, 8, "bf16", ["--kv-cache-memory", "96MiB"]),
    (2048, 4, "f32", ["--device-memory", "400MiB"]),  # the pool is what the budget leaves
]
failures = 0
print(f"{'config':<36} {'device':<6} {'plan':>12} {'ledger':>12}")
for max_len, seqs, kv, pool in CONFIGS:
    flags = ["--max-model-len", str(max_len), "--max-num-seqs", str(seqs), "--kv-dtype", kv] + pool
    plan = json.loads(subprocess.run([headroom_bin(), "plan", model, "--device", "vulkan", "--json"] + flags,
                                     check=True, capture_output=True, text=True).stdout)
    report = run_report(flags)
    label = f"{max_len} × {seqs} {kv} {' '.join(pool)}"
    fail_if(len(plan["devices"]) != 2, f"{label}: the plan spans {len(plan['devices'])} devices, not 2")
    failures += device_term_mismatches(label, plan, report)
    for d in plan["devices"]:
        ledger = report["devices"][d["device"]]["terms"]
        total = sum(ledger[t]["reserved_bytes"] for t in TERMS)
        print(f"{label:<36} {d['device']:<6} {d['total_bytes']:>12} {total:>12}")
fail_if(failures > 0, f"{failures} terms differ between plan and ledger")

small = run_report(["--kv-cache-memory", "32MiB", "--max-model-len", "1024"])
large = run_report(["--kv-cache-memory", "1GiB", "--max-model-len", "1024", "--max-num-seqs", "40"])
gpu_kv = large["devices"]["gpu0"]["terms"]["kv_cache"]["reserved_bytes"]
growth = large["rss_bytes"] - small["rss_bytes"]
print(f"KV pool 32 MiB -> {gpu_kv / 2**20:.0f} MiB on gpu0: host RSS {small['rss_bytes'] / 2**20:.1f} -> "
      f"{large['rss_bytes'] / 2**20:.1f} MiB")
fail_if(large["devices"]["host"]["terms"]["kv_cache"]["reserved_bytes"] != 0, "KV counted on the host")
fail_if(growth > 32 * 2**20, f"host RSS grew {growth / 2**20:.1f} MiB with a pool {gpu_kv / 2**20:.0f} MiB larger")

r = subprocess.run([headroom_bin(), "run", "-m", model, "-p", "hi", "-n", "1", "-q", "--device", "vulkan",
                    "--device-memory", "64MiB", "--n-gpu-layers", "all"], capture_output=True, text=True)
lines = [line for line in r.stderr.splitlines() if line.strip()]
print(f"a 64 MiB device, every layer on it: exit {r.returncode}: {lines[-1] if lines else ''}")
fail_if(r.returncode != 1, f"exit code {r.returncode}, expected 1")
fail_if(len(lines) != 1, f"expected one line on stderr, got {len(lines)}: {r.stderr}")
for needed in ("weights (92.2 MiB)", "57.6 MiB", "--n-gpu-layers auto"):
    fail_if(needed not in lines[0], f"the refusal does not say {needed!r}: {lines[0]}")
