#!/usr/bin/env python3
"""`headroom quantize` on SmolLM2 (Q4_1) to q8_0, q4_0, q4_0 --pure and q4_k,
read back by the gguf package: 1-D tensors are F32, matrices have the
requested type (or the documented fallback for rows that 256-element blocks
do not divide), except that llama.cpp's Q4_0 file type gives the tied token
embeddings the output's type (Q6_K, which SmolLM2's 576-element rows turn
into Q8_0), metadata is carried over, and every tensor dequantizes close to
the source (relative RMS error within the target type's bound)."""
import os
import subprocess
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, model_path, fail_if, scratch_dir  # noqa: E402

src_path = model_path("smollm2-135m")
src = GGUFReader(src_path)
src_tensors = {t.name: t for t in src.tensors}
tmp = scratch_dir("headroom-quantize-")
# Relative RMS error bounds against the source's values: the target type's
# own error (q8_0 ~0.4%, q4_0 ~8%, q4_k ~7% on Gaussian data) with margin.
# (arguments, matrix type, its fallback, token_embd's type, error bound)
CASES = [(["q8_0"], "Q8_0", None, "Q8_0", 0.02), (["q4_0"], "Q4_0", None, "Q8_0", 0.15),
         (["q4_0", "--pure"], "Q4_0", None, "Q4_0", 0.15), (["Q4_K"], "Q4_K", "Q5_0", "Q5_0", 0.15)]
for args, want, fallback, embd, bound in CASES:
    arg = "-".join(args)
    out = os.path.join(tmp, f"{arg}.gguf")
    p = subprocess.run([headroom_bin(), "quantize", src_path, out] + args, capture_output=True, text=True)
    fail_if(p.returncode != 0, p.stderr)
    fail_if("quantize" not in p.stderr, "no progress on stderr")
    q = GGUFReader(out)
    fail_if(len(q.tensors) != len(src.tensors), "tensor count changed")
    worst = 0.0
    for t in q.tensors:
        s = src_tensors[t.name]
        fail_if(list(t.shape) != list(s.shape), f"{t.name}: shape changed")
        if len(t.shape) == 1:
            fail_if(t.tensor_type.name != "F32", f"{t.name}: 1-D tensor is {t.tensor_type.name}")
            continue
        allowed = {want} if int(t.shape[0]) % 256 == 0 or want not in ("Q4_K",) else {fallback}
        if t.name == "token_embd.weight":
            allowed = {embd}
        fail_if(t.tensor_type.name not in allowed, f"{t.name}: {t.tensor_type.name}, expected {allowed}")
        a = dequantize(s.data, s.tensor_type).astype(np.float64).ravel()
        b = dequantize(t.data, t.tensor_type).astype(np.float64).ravel()
        err = np.sqrt(np.mean((a - b) ** 2) / np.mean(a ** 2))
        worst = max(worst, err)
        fail_if(err > bound, f"{arg} {t.name}: relative RMS error {err:.4f} > {bound}")
    for key, field in src.fields.items():
        if key.startswith("GGUF.") or key in ("general.file_type",):
            continue
        fail_if(key not in q.fields, f"metadata {key} dropped")
        fail_if(q.fields[key].contents() != field.contents(), f"metadata {key} changed")
    print(f"{arg}: {os.path.getsize(out) / 2**20:.1f} MiB, worst relative RMS error {worst:.4f}")
p = subprocess.run([headroom_bin(), "quantize", src_path, os.path.join(tmp, "x.gguf"), "q3_xl"],
                   capture_output=True, text=True)
fail_if(p.returncode != 1 or "unknown file type" not in p.stderr or "q4_k_m" not in p.stderr, p.stderr)
print("ok")
