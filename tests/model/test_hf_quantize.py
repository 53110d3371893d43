#!/usr/bin/env python3
"""Load-time quantization of a Hugging Face folder (a bf16 llama written
byte by byte, hf_folder_lib):

- `--quantization auto` on a budget the bf16 weights do not fit picks the
  first GGUF type, best first, that `plan --compare-quant` says fits the same
  budget and context, says so in one line, and then holds exactly the weight
  bytes plan printed for that type;
- `--quantization q8_0 --quantized-cache DIR` writes the quantized model
  once and maps it on the next start ("from the cache"), with the same
  output; the cached file is byte for byte what `headroom convert --type
  q8_0` writes;
- the quantized weights are checked against the folder's: the logits of
  the q8_0 model stay within 0.15 of the bf16 folder's on a fixed sequence
  (Q8_0's rounding; the largest seen is 0.05) and far from a model of other weights.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import fail_if, headroom_bin, scratch_dir  # noqa: E402

import hf_folder_lib as lib  # noqa: E402
import numpy as np  # noqa: E402

DIMS = dict(E=256, FF=512, V=512, L=2, H=4, KV=2)
CTX = 128
TOKENS = "1,5,77,200,13,9,250,31,64,3,100,101"


def run(args, check=True):
    r = subprocess.run([headroom_bin()] + args, capture_output=True, text=True, timeout=300)
    fail_if(check and r.returncode != 0, f"headroom {' '.join(args)} failed:\n{r.stderr}")
    return r


def logits(model, scratch, extra=()):
    out = os.path.join(scratch, "logits.f32")
    run(["eval", "-m", model, "--tokens", TOKENS, "--kv-dtype", "f32", "--logits-out", out,
         *extra])
    return np.fromfile(out, dtype=np.float32)


def weights_line(stderr):
    m = re.search(r"memory: weights ([0-9.]+ [KMG]iB)", stderr)
    fail_if(not m, f"no memory line in:\n{stderr}")
    return m.group(1)


def main():
    scratch = scratch_dir("hf-quantize-")
    config = lib.llama_config(**DIMS)
    config["max_position_embeddings"] = CTX
    folder = lib.write_folder(os.path.join(scratch, "tiny-bf16"), config,
                              lib.llama_tensors(**DIMS), dtype="BF16")

    # The budget: between what bf16 and Q8_0 need, from plan's own table.
    def table(memory):
        r = run(["plan", folder, "--compare-quant", "--device", "cpu", "--device-memory", memory,
                 "--max-model-len", str(CTX), "--json"])
        return json.loads(r.stdout)["compare_quant"]
    rows = table("1GiB")
    need = {row["label"]: row["total_needed_bytes"] for row in rows}
    print("needed by type:", {k: v for k, v in need.items()})
    budget_total = (need["BF16"] + need["Q8_0"]) / 2 / 0.9
    memory = f"{int(budget_total) // 1024}KiB"
    rows = table(memory)
    fits = [row for row in rows if row["fits"]]
    fail_if(any(row["label"].startswith("BF16") for row in fits), "bf16 fits the chosen budget")
    gguf_types = ["Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_1", "Q4_0"]
    want = next(row for row in fits if row["label"] in gguf_types)
    r = run(["run", "-m", folder, "--quantization", "auto", "--device-memory", memory,
             "--max-model-len", str(CTX), "-p", "hello", "-n", "4", "--temp", "0"])
    line = next((ln for ln in r.stderr.splitlines() if ln.startswith("quantization auto:")), "")
    fail_if(not line.startswith(f"quantization auto: {want['label']} "),
            f"auto picked '{line}', plan --compare-quant says {want['label']} fits first")
    print(line)
    held = weights_line(r.stderr)
    value, unit = held.split()
    held_bytes = float(value) * {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
    print(f"weights held after quantizing: {held} (plan: {want['weights_bytes']} bytes)")
    # The memory line prints three digits: equal to that precision.
    fail_if(abs(held_bytes - want["weights_bytes"]) > 0.005 * want["weights_bytes"],
            f"the engine holds {held} of weights, plan said {want['weights_bytes']} bytes")

    # A cache: written once, mapped the second time, the same answer.
    cache = os.path.join(scratch, "cache")
    a = run(["run", "-m", folder, "--quantization", "q8_0", "--quantized-cache", cache,
             "-p", "hello", "-n", "8", "--temp", "0"])
    files = [f for f in os.listdir(cache) if f.endswith(".gguf")]
    fail_if(len(files) != 1, f"the cache holds {files}, expected one quantized model")
    b = run(["run", "-m", folder, "--quantization", "q8_0", "--quantized-cache", cache,
             "-p", "hello", "-n", "8", "--temp", "0"])
    fail_if("from the cache" not in b.stderr, f"the second start quantized again:\n{b.stderr}")
    fail_if(a.stdout != b.stdout, f"cached model answers {b.stdout!r}, first {a.stdout!r}")
    converted = os.path.join(scratch, "tiny-q8_0.gguf")
    run(["convert", folder, converted, "--type", "q8_0", "-q"])
    with open(converted, "rb") as x, open(os.path.join(cache, files[0]), "rb") as y:
        fail_if(x.read() != y.read(), "the cached model differs from `convert --type q8_0`'s")

    # The quantized weights are the folder's.
    ref = logits(folder, scratch)
    q8 = logits(folder, scratch, ["--quantization", "q8_0"])
    other = lib.write_folder(os.path.join(scratch, "other"), config,
                             lib.llama_tensors(**DIMS, seed=2), dtype="BF16")
    far = logits(other, scratch)
    d_q8, d_far = float(np.abs(ref - q8).max()), float(np.abs(ref - far).max())
    print(f"max |logit diff|: q8_0 vs bf16 {d_q8:.4f}, other weights vs bf16 {d_far:.4f}")
    fail_if(d_q8 > 0.15 or d_far < 1.0, "the q8_0 logits are not the bf16 folder's")
    print("PASS: auto picks plan's type; the cache maps; quantized weights are the folder's")


if __name__ == "__main__":
    main()
