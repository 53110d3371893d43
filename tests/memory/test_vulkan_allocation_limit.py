#!/usr/bin/env python3
"""The Vulkan backend under a limit on one allocation, as drivers set one
(maxMemoryAllocationSize: 2 GiB on AMD's and Intel's, about 4 GiB on
NVIDIA's), lowered to 64 MiB with HEADROOM_VULKAN_MAX_ALLOCATION so that
lavapipe shows the split on the default model with a KV pool of 400 MiB:

1. no allocation of the run is larger than 64 MiB (the memory report's
   largest_allocation_bytes), where the same run without the limit holds the
   pool in one 400 MiB allocation;
2. `plan` with the same limit predicts every term of each device to the byte
   of what the run reserves, and the number of allocations the KV pool takes:
   ceil(blocks / floor(64 MiB / block bytes)), computed here from the plan's
   blocks;
3. the greedy output of a prompt is the same with and without the limit;
4. a limit below the model's largest weight tensor is refused by `plan` and
   `run` alike, naming the tensor's size (its slot on the device, computed
   here from the GGUF's tensor table) and the limit.

Skipped (exit code 77) where this machine has no Vulkan device."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import (headroom_bin, model_path, fail_if, skip_without_vulkan,  # noqa: E402
                     device_term_mismatches)

LIMIT = 64 * 2**20

skip_without_vulkan()
model = model_path("smollm2-135m")
flags = ["--device", "vulkan", "--kv-cache-memory", "400MiB", "--max-model-len", "2048",
         "--max-num-seqs", "8"]


def env_with(limit):
    env = dict(os.environ)
    env.pop("HEADROOM_VULKAN_MAX_ALLOCATION", None)
    if limit:
        env["HEADROOM_VULKAN_MAX_ALLOCATION"] = str(limit)
    return env


def run(limit):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "report.json")
        out = subprocess.run([headroom_bin(), "run", "-m", model, "-p", "The capital of France is",
                              "-n", "16", "--temp", "0", "-q", "--memory-report-json", path] + flags,
                             check=True, capture_output=True, text=True, env=env_with(limit))
        with open(path) as f:
            return out.stdout, json.load(f)


text_whole, whole = run(0)
text_split, split = run(LIMIT)
gpu_whole, gpu_split = whole["devices"]["gpu0"], split["devices"]["gpu0"]
print(f"no limit: {gpu_whole['allocations']} allocations, the largest {gpu_whole['largest_allocation_bytes']} B")
print(f"64 MiB:   {gpu_split['allocations']} allocations, the largest {gpu_split['largest_allocation_bytes']} B")
fail_if(gpu_whole["largest_allocation_bytes"] < 390 * 2**20,
        "without a limit the 400 MiB pool is not one allocation: the test shows nothing")
fail_if(gpu_split["largest_allocation_bytes"] > LIMIT,
        f"an allocation of {gpu_split['largest_allocation_bytes']} B is past the 64 MiB limit")
fail_if(gpu_split["max_allocation_bytes"] != LIMIT, "the report does not state the limit")

plan = json.loads(subprocess.run([headroom_bin(), "plan", model, "--json"] + flags, check=True,
                                 capture_output=True, text=True, env=env_with(LIMIT)).stdout)
failures = device_term_mismatches("64 MiB limit", plan, split)
fail_if(failures > 0, f"{failures} terms differ between plan and ledger under the limit")
kv = plan["terms"]["kv_cache"]
want = 0
for g in kv["groups"]:
    per_piece = LIMIT // g["block_bytes"]
    want += -(-g["blocks"] // per_piece)
print(f"KV pool: {kv['allocations']} allocations planned, {want} by hand")
fail_if(kv["allocations"] != want, f"the plan says {kv['allocations']} KV allocations, not {want}")
fail_if(want < 7, f"a 400 MiB pool in {want} pieces of at most 64 MiB")

print(f"greedy text: {text_whole!r}")
fail_if(text_whole != text_split, f"the output differs under the limit: {text_split!r}")

# Under the 64 MiB the weights' upload staging takes: staging too stays within the limit, and
# the largest tensor (the 28.7 MiB Q8_0 embedding) still fits one allocation.
text_32, split_32 = run(32 * 2**20)
gpu_32 = split_32["devices"]["gpu0"]
print(f"32 MiB:   {gpu_32['allocations']} allocations, the largest {gpu_32['largest_allocation_bytes']} B")
fail_if(gpu_32["largest_allocation_bytes"] > 32 * 2**20, "an allocation past the 32 MiB limit")
fail_if(text_32 != text_whole, f"the output differs under a 32 MiB limit: {text_32!r}")

# The largest tensor's slot on a GPU: its bytes as stored (a vector as f32),
# plus 16, rounded up to 256 (kernels::device_weight_slot).
import gguf  # noqa: E402

reader = gguf.GGUFReader(model)
largest = max(((int(t.n_elements) * 4 if len(t.shape) == 1 else int(t.n_bytes)) + 16 + 255) // 256 * 256
              for t in reader.tensors)


def mib(n):
    return f"{n / 2**20:.1f} MiB"


small = 2 * 2**20  # below the largest tensor (the embedding, 28.7 MiB in Q4_1)
fail_if(largest <= small, f"the largest tensor takes {largest} B, not more than the limit")
r = subprocess.run([headroom_bin(), "plan", model, "--device", "vulkan", "--n-gpu-layers", "all"],
                   capture_output=True, text=True, env=env_with(small))
said = r.stdout + r.stderr
print(f"plan with a 2 MiB limit: exit {r.returncode}")
fail_if(f"largest weight tensor takes {mib(largest)}" not in said or "2.00 MiB" not in said,
        f"plan does not name the {mib(largest)} tensor past a 2 MiB limit: {said}")
r = subprocess.run([headroom_bin(), "run", "-m", model, "-p", "hi", "-n", "1", "-q", "--device",
                    "vulkan", "--n-gpu-layers", "all"], capture_output=True, text=True,
                   env=env_with(small))
print(f"run with a 2 MiB limit: exit {r.returncode}: {r.stderr.strip().splitlines()[-1]}")
fail_if(r.returncode != 1, f"run exit code {r.returncode}, expected 1")
fail_if(f"largest weight tensor takes {mib(largest)}" not in r.stderr or "2.00 MiB" not in r.stderr,
        f"run does not name the tensor past the limit: {r.stderr}")
print("PASS")
