#!/usr/bin/env python3
"""Peak host memory while a bf16 Hugging Face folder is quantized at load.

Writes a synthetic bf16 llama folder (Llama 3.2 3B's shape by default:
3.2 billion parameters, 6.4 GB in 5 shards; random weights), then measures
with /usr/bin/time's maximum resident set size:

  1. `headroom quantize FOLDER OUT.gguf q4_k_m`  (the file written, no model held)
  2. `headroom run -m FOLDER --quantization q4_k_m -n 4`  (quantized, loaded, run)

and prints each peak beside the bf16 checkpoint's size and the quantized
size: the peak must stay near the quantized size plus a few tensors, never
the whole 16-bit checkpoint.

  bench/hf-quantize-rss.py [--dir /tmp/hf-3b] [--keep]
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np

SHAPE = dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
             num_attention_heads=24, num_key_value_heads=8, vocab_size=128256)


def tensors(c):
    E, FF, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    HD = E // c["num_attention_heads"]
    out = [("model.embed_tokens.weight", (V, E)), ("model.norm.weight", (E,)),
           ("lm_head.weight", (V, E))]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (E,)), (p + "post_attention_layernorm.weight", (E,)),
                (p + "self_attn.q_proj.weight", (E, E)),
                (p + "self_attn.k_proj.weight", (c["num_key_value_heads"] * HD, E)),
                (p + "self_attn.v_proj.weight", (c["num_key_value_heads"] * HD, E)),
                (p + "self_attn.o_proj.weight", (E, E)),
                (p + "mlp.gate_proj.weight", (FF, E)), (p + "mlp.up_proj.weight", (FF, E)),
                (p + "mlp.down_proj.weight", (E, FF))]
    return out


def bf16_block(rng, n):
    """n bf16 values, roughly N(0, 0.02): sign, exponent 2^-7..2^-5, random mantissa."""
    sign = rng.integers(0, 2, n, dtype=np.uint16) << 15
    exp = rng.integers(120, 123, n, dtype=np.uint16) << 7
    mant = rng.integers(0, 128, n, dtype=np.uint16)
    return (sign | exp | mant).astype("<u2")


def write_folder(path, n_shards=5):
    os.makedirs(path, exist_ok=True)
    config = dict(SHAPE, model_type="llama", architectures=["LlamaForCausalLM"],
                  max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=500000.0,
                  tie_word_embeddings=False, torch_dtype="bfloat16")
    json.dump(config, open(os.path.join(path, "config.json"), "w"))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "model"))
    import hf_folder_lib
    json.dump(hf_folder_lib.tokenizer(), open(os.path.join(path, "tokenizer.json"), "w"))
    ts = tensors(SHAPE)
    total = sum(int(np.prod(s)) * 2 for _, s in ts)
    per_shard = total / n_shards
    shards, cur, size = [], [], 0
    for t in ts:
        cur.append(t)
        size += int(np.prod(t[1])) * 2
        if size >= per_shard and len(shards) < n_shards - 1:
            shards.append(cur)
            cur, size = [], 0
    shards.append(cur)
    rng = np.random.default_rng(0)
    index = {"metadata": {"total_size": total}, "weight_map": {}}
    for k, part in enumerate(shards):
        name = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        header, at = {}, 0
        for n, s in part:
            nbytes = int(np.prod(s)) * 2
            header[n] = {"dtype": "BF16", "shape": list(s), "data_offsets": [at, at + nbytes]}
            at += nbytes
            index["weight_map"][n] = name
        text = json.dumps(header).encode()
        with open(os.path.join(path, name), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            for n, s in part:
                left = int(np.prod(s))
                while left:
                    m = min(left, 1 << 25)
                    f.write(bf16_block(rng, m).tobytes())
                    left -= m
        print(f"wrote {name} ({at / 2**30:.2f} GiB)", file=sys.stderr)
    json.dump(index, open(os.path.join(path, "model.safetensors.index.json"), "w"))
    return total, sum(int(np.prod(s)) for _, s in ts)


def peak_rss(cmd):
    r = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time.*: (.*)", r.stderr).group(1)
    return kb * 1024, wall, r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/headroom-hf-3b")
    ap.add_argument("--keep", action="store_true", help="keep the folder for another run")
    ap.add_argument("--headroom", default=os.environ.get("HEADROOM_BIN", "build/release/headroom"))
    a = ap.parse_args()
    folder = os.path.join(a.dir, "llama-3b-bf16")
    if not os.path.exists(os.path.join(folder, "model.safetensors.index.json")):
        bf16_bytes, n_params = write_folder(folder)
    else:
        ts = tensors(SHAPE)
        n_params = sum(int(np.prod(s)) for _, s in ts)
        bf16_bytes = 2 * n_params
    out = os.path.join(a.dir, "llama-3b-q4_k_m.gguf")
    rss_q, wall_q, _ = peak_rss([a.headroom, "quantize", folder, out, "q4_k_m", "-q"])
    q_bytes = os.path.getsize(out)
    os.remove(out)
    rss_r, wall_r, r = peak_rss([a.headroom, "run", "-m", folder, "--quantization", "q4_k_m",
                                 "--max-model-len", "512", "-p", "Hello", "-n", "4", "--temp", "0"])
    gib = 2**30
    print(f"model: {n_params / 1e9:.2f}B parameters, bf16 checkpoint {bf16_bytes / gib:.2f} GiB, "
          f"q4_k_m {q_bytes / gib:.2f} GiB")
    print(f"quantize to a file: peak RSS {rss_q / gib:.2f} GiB "
          f"({rss_q / bf16_bytes:.3f} x the bf16 checkpoint, {rss_q / q_bytes:.3f} x q4_k_m), "
          f"wall {wall_q}")
    print(f"run --quantization q4_k_m: peak RSS {rss_r / gib:.2f} GiB "
          f"({rss_r / bf16_bytes:.3f} x the bf16 checkpoint, {rss_r / q_bytes:.3f} x q4_k_m), "
          f"wall {wall_r}")
    mem = [ln for ln in r.stderr.splitlines() if ln.startswith("memory:")]
    if mem:
        print(f"run's own account: {mem[0]}")
    if not a.keep:
        shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
