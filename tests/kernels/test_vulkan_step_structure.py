#!/usr/bin/env python3
"""The structure of a Vulkan decode step, from `headroom bench --json` on
random-weight llama models of 2 and 30 layers (`headroom synth tiny` and
`smollm2-135m`), against counts derived by hand from the op order of a llama
layer (model/llama.cpp), the fusions the backend makes (matrices of one type
that read the same input in one dispatch; rope of k with rope of q; a
residual add with the norm after it) and the barrier rule (a barrier only
where a dispatch reads or writes what a dispatch since the last barrier
wrote, or writes what one read):

  dispatch                 reads      writes       barrier before it?
  q, k, v (one)            xb         q, k, v      yes (xb: the norm)
  rope q and k (one)       q, k       q, k         yes
  store_kv                 k, v       KV           yes (k)
  attention                q, KV      attn         yes (KV)
  o                        attn       xb           yes
  add + norm (one)         x, xb      x, xb        yes (xb: o)
  gate, up (one)           xb         gate, up     yes
  silu_mul                 gate, up   gate         yes
  down                     gate       xb           yes
  add + next norm (one)    x, xb      x, xb        yes (xb: down)

so 10 dispatches and 10 barriers a layer (16 and 16 before the fusions and
the barrier rule). Outside the layers a step has the embedding lookup, the
first layer's norm (no add before it), the gather of the logit rows, the
output norm and matmul: 5 dispatches; and 5 barriers: at the step's start
(what earlier submissions wrote), before the first norm, the gather, the
output norm and the output matmul. And a decode step of the same batch
shape as the one before submits the recorded command buffer again: it
records nothing.

Skipped (exit code 77) where this machine has no Vulkan device."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, fail_if, skip_without_vulkan  # noqa: E402

skip_without_vulkan()


def decode_step(shape, tmp):
    path = os.path.join(tmp, f"{shape}.gguf")
    subprocess.run([headroom_bin(), "synth", shape, path, "-q"], check=True)
    out = subprocess.run([headroom_bin(), "bench", "-m", path, "--device", "vulkan", "--n-gpu-layers",
                          "all", "-p", "16", "-n", "4", "-r", "1", "--json"],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["decode_step"]


with tempfile.TemporaryDirectory() as tmp:
    for shape, n_layer in (("tiny", 2), ("smollm2-135m", 30)):
        s = decode_step(shape, tmp)
        want = {"dispatches": 10 * n_layer + 5, "barriers": 10 * n_layer + 5, "recorded": 0,
                "submits": 1, "waits": 1}
        print(f"{shape} ({n_layer} layers): {s}")
        for key, value in want.items():
            fail_if(s[key] != value, f"{shape}: {key} {s[key]}, expected {value}")
print("PASS")
