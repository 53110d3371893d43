#!/usr/bin/env python3
"""headroom's logits on the real models against transformers' (float32, the
dequantized GGUF; tests/data/logits/ made by scripts/make-golden-logits.py):
the same top-1 token at every position of every prompt, and the largest
absolute difference over the reference's top-5 logits, reported per model.

  test_logits_vs_transformers.py MODEL [KV_DTYPE]"""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, model_path, fail_if, scratch_dir  # noqa: E402

name = sys.argv[1]
kv_dtype = sys.argv[2] if len(sys.argv) > 2 else "f32"
data = json.load(open(os.path.join(os.environ.get("HEADROOM_TEST_DATA", "tests/data"), "logits", f"{name}.json")))
path = model_path(name)
tmp = scratch_dir("headroom-logits-")
worst = 0.0
n_positions = 0
n_top1_mismatch = 0
for case in data["cases"]:
    out = os.path.join(tmp, "logits.f32")
    subprocess.run([headroom_bin(), "eval", "-m", path, "--tokens", ",".join(map(str, case["tokens"])),
                    "--logits-out", out, "--kv-dtype", kv_dtype], check=True, capture_output=True)
    ours = np.fromfile(out, dtype=np.float32).reshape(len(case["tokens"]), -1)
    ref_ids = np.array(case["top_ids"])
    ref_vals = np.array(case["top_logits"])
    got = np.take_along_axis(ours, ref_ids, axis=1)
    diff = np.abs(got - ref_vals).max()
    worst = max(worst, diff)
    # Top-1 must agree unless the reference's top two are a near tie.
    ours_top = ours.argmax(axis=1)
    near_tie = (ref_vals[:, 0] - ref_vals[:, 1]) < 2 * diff + 1e-3
    mismatch = (ours_top != ref_ids[:, 0]) & ~near_tie
    n_top1_mismatch += int(mismatch.sum())
    n_positions += len(case["tokens"])
    print(f"{len(case['tokens']):4d} tokens: max |diff| {diff:.2e}, top-1 mismatches {int(mismatch.sum())}")
print(f"{name} (kv {kv_dtype}): {n_positions} positions, max |logit diff| {worst:.3e}, "
      f"top-1 mismatches {n_top1_mismatch}")
fail_if(n_top1_mismatch > 0, "top-1 differs from the reference")
fail_if(worst > (0.02 if kv_dtype == "f32" else 0.25), f"logit difference {worst:.3g} too large")
