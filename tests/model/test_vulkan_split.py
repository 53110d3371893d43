#!/usr/bin/env python3
"""A real model split between the CPU and a Vulkan device, for device budgets
(--device-memory) from "one layer fits" to "every layer fits":

1. `plan --device vulkan --json` says how many layers --n-gpu-layers auto
   puts on the GPU; `run` places the same number, and each device's ledger
   reserves what the plan predicts for it, byte for byte;
2. the split's logits (f32 activations and KV) against the all-CPU f32 path
   on a golden logits prompt: within LOGIT_TOL, the same top-1 at every
   position, and greedy continuations identical;
3. a budget too small for one layer and its KV runs every layer on the CPU,
   saying so in one line, with the CPU's output; an explicit --n-gpu-layers
   that does not fit is refused in one line with the numbers.

Skipped (exit code 77) where this machine has no Vulkan device.

  test_vulkan_split.py MODEL [--greedy-prompts N]   (default 2; the default
                                                   test run checks 1)"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, model_path, fail_if, scratch_dir, skip_without_vulkan  # noqa: E402

TERMS = ("weights", "kv_cache", "activations", "runtime")
# Device budgets (MiB) from one or two layers on the GPU to all of them.
BUDGETS = {"smollm2-135m": [48, 64, 96, 128, 160], "gemma3-270m": [220, 240, 270, 320]}
CONTEXT = ["--max-model-len", "1024"]
EXACT = ["--act-precision", "f32", "--kv-dtype", "f32"]
N_PREDICT = 24
# Both sides compute in f32, in other orders of summation: whole-model Vulkan
# runs differ from the CPU's f32 path by at most 2.2e-4 (SmolLM2, 1013
# positions). A layer run twice, skipped or given the wrong KV moves logits
# by whole units; the bound is ten times the whole-model difference.
LOGIT_TOL = 2.2e-3


args = argparse.ArgumentParser()
args.add_argument("model")
args.add_argument("--greedy-prompts", type=int, default=2)
args = args.parse_args()
name = args.model
skip_without_vulkan()
path = model_path(name)
tmp = scratch_dir("vulkan-split-")
data_dir = os.environ.get("HEADROOM_TEST_DATA", "tests/data")
case = next(c for c in json.load(open(os.path.join(data_dir, "logits", f"{name}.json")))["cases"]
            if len(c["tokens"]) <= 64)
greedy_cases = json.load(open(os.path.join(data_dir, "greedy", f"{name}.json")))["cases"]
prompts = [c["prompt"] for c in greedy_cases[:args.greedy_prompts]]


def headroom(*cmd, check=True):
    r = subprocess.run([headroom_bin(), *cmd], capture_output=True, text=True)
    fail_if(check and r.returncode != 0, f"headroom {' '.join(cmd)}: exit {r.returncode}: {r.stderr}")
    return r


def logits(device_flags):
    out = os.path.join(tmp, "logits.f32")
    r = headroom("eval", "-m", path, "--tokens", ",".join(map(str, case["tokens"])), "--logits-out", out,
                 *EXACT, *device_flags)
    return np.fromfile(out, dtype=np.float32).reshape(len(case["tokens"]), -1), r.stderr


def greedy(device_flags, extra=EXACT):
    return [headroom("run", "-m", path, "-p", p, "-n", str(N_PREDICT), "--temp", "0", "-q", *CONTEXT, *extra,
                     *device_flags).stdout for p in prompts]


cpu_logits, _ = logits(["--device", "cpu"])
cpu_text = greedy(["--device", "cpu"])
n_layer = None
placed = []
print(f"{'budget':>8} {'gpu layers':>10} {'device':<6} {'plan':>12} {'ledger':>12}  max |logit diff|")
for mib in BUDGETS[name]:
    gpu = ["--device", "vulkan", "--device-memory", f"{mib}MiB"]
    plan = json.loads(headroom("plan", path, *gpu, *CONTEXT, "--json").stdout)
    auto = plan["gpu_layers_auto"]
    n_layer = auto["n_layer"]
    k = auto["n_gpu_layers"]
    placed.append(k)
    report_path = os.path.join(tmp, "report.json")
    headroom("run", "-m", path, "-p", "hi", "-n", "2", "--temp", "0", "-q", *gpu, *CONTEXT,
             "--memory-report-json", report_path)
    report = json.load(open(report_path))
    fail_if(report["config"]["n_cpu_layers"] != n_layer - k,
            f"{mib} MiB: run put {n_layer - report['config']['n_cpu_layers']} layers on the GPU, the plan {k}")
    got, note = logits(gpu)
    diff = float(np.abs(got - cpu_logits).max())
    for d in plan["devices"]:
        ledger = report["devices"][d["device"]]["terms"]
        for term in TERMS:
            fail_if(d[f"{term}_bytes"] != ledger[term]["reserved_bytes"],
                    f"{mib} MiB: {d['device']} {term} planned {d[term + '_bytes']}, the ledger reserved "
                    f"{ledger[term]['reserved_bytes']}")
        total = sum(ledger[t]["reserved_bytes"] for t in TERMS)
        print(f"{mib:>5} MiB {k:>5} of {n_layer:<2} {d['device']:<6} {d['total_bytes']:>12} {total:>12}  {diff:.3e}")
    fail_if(diff > LOGIT_TOL, f"{mib} MiB: logits differ from the CPU's by {diff:.3e} (bound {LOGIT_TOL})")
    mismatch = np.nonzero(got.argmax(axis=1) != cpu_logits.argmax(axis=1))[0]
    fail_if(len(mismatch) > 0, f"{mib} MiB: top-1 differs from the CPU's at positions {list(mismatch)}")
    fail_if(greedy(gpu) != cpu_text, f"{mib} MiB: the greedy continuations differ from the CPU's")
fail_if(placed[-1] != n_layer, f"the largest budget put {placed[-1]} of {n_layer} layers on the GPU, not all")
fail_if(not 0 < placed[0] < n_layer // 4, f"the smallest budget put {placed[0]} layers on the GPU, not a few")
fail_if(placed != sorted(placed), f"more memory put fewer layers on the GPU: {placed}")
print(f"{name}: layers on the GPU by budget {placed}; logits and {len(prompts)} greedy continuations as the "
      f"CPU's f32 path at every budget")

if name != "smollm2-135m":
    sys.exit(0)
# 3. Too small for one layer: every layer on the CPU, said once; explicit counts refused.
tiny = ["--device", "vulkan", "--device-memory", "32MiB"]
r = headroom("run", "-m", path, "-p", prompts[0], "-n", str(N_PREDICT), "--temp", "0", *CONTEXT, *tiny)
# (Where the only Vulkan device is a CPU such as lavapipe, a note says so first.)
notes = [line for line in r.stderr.splitlines()
         if line.startswith("note:") and "no Vulkan GPU here" not in line]
print(f"32 MiB, auto: {notes[0] if notes else r.stderr}")
fail_if(len(notes) != 1 or "running every layer on the CPU" not in notes[0], f"no fallback note: {r.stderr}")
fail_if(r.stdout != headroom("run", "-m", path, "-p", prompts[0], "-n", str(N_PREDICT), "--temp", "0", "-q",
                             *CONTEXT).stdout, "the fallback's output is not the CPU's")
for layers, needed in (("5", "5 of the 30 layers on gpu0"), ("all", "30 of the 30 layers on gpu0")):
    r = headroom("run", "-m", path, "-p", "hi", "-n", "1", "-q", *CONTEXT, *tiny, "--n-gpu-layers", layers,
                 check=False)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    print(f"32 MiB, --n-gpu-layers {layers}: exit {r.returncode}: {lines[-1] if lines else ''}")
    fail_if(r.returncode != 1 or len(lines) != 1, f"expected one line and exit 1: {r.returncode} {r.stderr}")
    for s in (needed, "MiB", "--n-gpu-layers auto"):
        fail_if(s not in lines[0], f"the refusal does not say {s!r}: {lines[0]}")
