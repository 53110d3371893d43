#!/usr/bin/env python3
"""One accounting for plan and quantize: for every file type both take,
`headroom plan -m smollm2-135m --weight-type T` predicts exactly the tensor
bytes `headroom quantize smollm2-135m out.gguf T` writes, the bytes counted by
the gguf package from the written file (n_bytes of every tensor)."""
import json
import os
import subprocess
import sys
from collections import Counter

from gguf import GGUFReader

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, model_path, fail_if, scratch_dir  # noqa: E402

# llama.cpp's file types by name, and the two unmixed K types quantize takes.
TYPES = ["f32", "f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q5_k_s", "q5_1", "q5_0", "q5_k",
         "q4_k_m", "q4_k_s", "q4_k", "q4_1", "q4_0", "iq4_xs", "iq4_nl", "mxfp4", "q3_k_l",
         "q3_k_m", "q3_k_s", "q2_k"]

src = model_path("smollm2-135m")
tmp = scratch_dir("headroom-plan-vs-quantize-")
for t in TYPES:
    out = os.path.join(tmp, f"{t}.gguf")
    q = subprocess.run([headroom_bin(), "quantize", "-q", src, out, t], capture_output=True, text=True)
    fail_if(q.returncode != 0, f"quantize {t}: {q.stderr}")
    written = GGUFReader(out)
    file_bytes = sum(int(x.n_bytes) for x in written.tensors)
    by_type = Counter()
    for x in written.tensors:
        by_type[x.tensor_type.name] += int(x.n_bytes)
    p = subprocess.run([headroom_bin(), "plan", "-m", src, "--weight-type", t, "--json"],
                       capture_output=True, text=True)
    fail_if(p.returncode != 0, f"plan {t}: {p.stderr}")
    plan = json.loads(p.stdout)
    predicted = plan["devices"][0]["weights_bytes"]
    fail_if(predicted != file_bytes,
            f"{t}: plan predicts {predicted:,} bytes of weights, quantize wrote {file_bytes:,}")
    print(f"{t:7s} {file_bytes:>12,} bytes  {dict(sorted(by_type.items()))}")
# A type plan knows but quantize cannot write is refused with the list.
q = subprocess.run([headroom_bin(), "quantize", src, os.path.join(tmp, "x.gguf"), "nf4"],
                   capture_output=True, text=True)
fail_if(q.returncode != 1 or "q4_k_m" not in q.stderr, q.stderr)
print("ok")
