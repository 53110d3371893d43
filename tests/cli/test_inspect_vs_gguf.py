#!/usr/bin/env python3
"""`headroom inspect --json` on SmolLM2 against the gguf PyPI package's view
of the same file: tensor count, names, types, shapes, byte sizes and totals,
and every metadata value (arrays in full)."""
import json
import math
import os
import subprocess
import sys

from gguf import GGUFReader, GGUFValueType

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, model_path, fail_if  # noqa: E402

path = model_path("smollm2-135m")
out = subprocess.run([headroom_bin(), "inspect", path, "--json", "--full-arrays"],
                     check=True, capture_output=True, text=True).stdout
mine = json.loads(out)
ref = GGUFReader(path)

fail_if(len(mine["tensors"]) != len(ref.tensors), "tensor count differs")
total = 0
for ours, theirs in zip(mine["tensors"], ref.tensors):
    fail_if(ours["name"] != theirs.name, f"name {ours['name']} != {theirs.name}")
    fail_if(ours["type"] != theirs.tensor_type.name, f"{theirs.name}: type differs")
    fail_if(ours["shape"] != [int(d) for d in theirs.shape], f"{theirs.name}: shape differs")
    fail_if(ours["bytes"] != int(theirs.n_bytes), f"{theirs.name}: bytes differ")
    fail_if(ours["n_elements"] != int(theirs.n_elements), f"{theirs.name}: n_elements differ")
    fail_if(mine["data_offset"] + ours["offset"] != int(theirs.data_offset),
            f"{theirs.name}: data offset differs")
    total += int(theirs.n_bytes)
fail_if(mine["tensor_bytes_total"] != total, "byte total differs")
by_type = {}
for t in ref.tensors:
    by_type[t.tensor_type.name] = by_type.get(t.tensor_type.name, 0) + int(t.n_bytes)
fail_if({k: v["bytes"] for k, v in mine["bytes_by_type"].items()} != by_type, "bytes by type differ")

n_checked = 0
for key, field in ref.fields.items():
    if key.startswith("GGUF."):
        continue
    fail_if(key not in mine["metadata"], f"metadata {key} missing")
    value = field.contents()
    ours = mine["metadata"][key]
    if field.types[0] == GGUFValueType.FLOAT32:
        fail_if(not math.isclose(ours, value, rel_tol=1e-7), f"{key}: {ours} != {value}")
    else:
        fail_if(ours != value, f"{key}: values differ")
    n_checked += 1
fail_if(n_checked != len(mine["metadata"]), "headroom lists metadata keys gguf does not")
print(f"ok: {len(ref.tensors)} tensors and {n_checked} metadata keys agree with gguf")
