#!/usr/bin/env python3
"""`headroom plan` on the two test GGUF files against the gguf PyPI package's
view of them: planned weights are the sum of the tensor sizes; a plan from
the model's published config.json (tests/data/hf) with the file's weight type
estimates that sum within 2%; KV bytes per token from the file's metadata
match the numbers derived by hand from the published configs; and the JSON
carries the fields tools rely on."""
import json
import os
import subprocess
import sys

from gguf import GGUFReader

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, model_path, fail_if  # noqa: E402

DATA = os.environ.get("HEADROOM_TEST_DATA",
                      os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                   "data"))

# name, its config.json, the file's llama.cpp type, KV per token (f16) by hand:
#   SmolLM2-135M: 2 × 30 layers × 3 KV heads × 64 × 2 B = 23040 B, all layers full.
#   Gemma 3 270M: 2 × 18 layers × 1 KV head × 256 × 2 B = 18432 B; 3 global
#   layers (3072 B), 15 local ones with a 512-token window (15360 B).
MODELS = [
    ("smollm2-135m", "smollm2-135m-instruct.json", "q4_1", 23040, [("full", 30, 23040)]),
    ("gemma3-270m", "gemma-3-270m-it.json", "q4_k_m", 18432,
     [("full", 3, 3072), ("sliding_window", 15, 15360)]),
]


def plan(args):
    out = subprocess.run([headroom_bin(), "plan", "--device", "cpu", "--json"] + args,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


for name, config, wtype, kv_per_token, groups in MODELS:
    path = model_path(name)
    tensor_bytes = sum(int(t.n_bytes) for t in GGUFReader(path).tensors)

    exact = plan([path, "--max-model-len", "4096"])
    for key in ("fits", "budget_bytes", "terms", "total_bytes", "max_num_seqs_at_max_model_len",
                "max_model_len_at_max_num_seqs", "suggestions"):
        fail_if(key not in exact, f"{name}: JSON has no '{key}'")
    for term, fields in (("weights", ["bytes"]), ("kv_cache", ["bytes", "bytes_per_token"]),
                         ("activations", ["bytes"]), ("runtime", ["bytes"])):
        for field in fields:
            fail_if(field not in exact["terms"][term], f"{name}: terms.{term} has no '{field}'")
    fail_if(exact["terms"]["weights"]["bytes"] != tensor_bytes,
            f"{name}: planned weights {exact['terms']['weights']['bytes']} != tensor bytes "
            f"{tensor_bytes}")
    fail_if(exact["terms"]["kv_cache"]["bytes_per_token"] != kv_per_token,
            f"{name}: KV per token {exact['terms']['kv_cache']['bytes_per_token']} != "
            f"{kv_per_token}")
    got = [(g["kind"], g["n_layers"], g["bytes_per_token"])
           for g in exact["terms"]["kv_cache"]["groups"]]
    fail_if(got != groups, f"{name}: KV groups {got} != {groups}")

    estimate = plan(["--hf-config", os.path.join(DATA, "hf", config), "--weight-type", wtype,
                     "--max-model-len", "4096"])
    est = estimate["terms"]["weights"]["bytes"]
    diff = (est - tensor_bytes) / tensor_bytes
    print(f"{name}: config.json as {wtype}: {est} B, file {tensor_bytes} B ({100 * diff:+.3f}%)")
    fail_if(abs(diff) > 0.02, f"{name}: estimate off by {100 * diff:.2f}%")
    fail_if(estimate["terms"]["kv_cache"]["bytes_per_token"] != kv_per_token,
            f"{name}: KV per token from config.json differs from the file's")

print("ok: GGUF weights exact, config.json estimates within 2%, KV per token as derived")
