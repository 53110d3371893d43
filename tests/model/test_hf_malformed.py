#!/usr/bin/env python3
"""Malformed Hugging Face folders: each is refused by `headroom eval` and
`headroom plan` with one line that names the file, the tensor or key, and
what was expected, exit status 1, and no crash.

The folders are written here byte by byte (the safetensors layout: 8-byte
length, JSON header, data), starting from a valid tiny llama that must load
and run, so each case breaks exactly one thing."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import fail_if, headroom_bin, scratch_dir  # noqa: E402

import hf_folder_lib as lib  # noqa: E402
import numpy as np  # noqa: E402

E, FF, V, L, H, KV = 32, 48, 260, 2, 4, 2
CONFIG = lib.llama_config(E, FF, V, L, H, KV)
safetensors_bytes = lib.safetensors_bytes


def write_folder(path, config=None, weights=None, shards=None):
    return lib.write_folder(path, config if config is not None else CONFIG, weights, shards)


def run(args):
    return subprocess.run([headroom_bin()] + args, capture_output=True, text=True, timeout=120)


def expect_refused(path, name, *needles):
    for cmd in (["eval", "-m", path, "--tokens", "1,2,3"], ["plan", "-m", path]):
        r = run(cmd)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        fail_if(r.returncode != 1, f"{name}: {cmd[0]} exited {r.returncode}, expected 1:\n"
                f"{r.stderr}")
        fail_if(len(lines) != 1, f"{name}: {cmd[0]} printed {len(lines)} lines, expected one:\n"
                f"{r.stderr}")
        for n in needles:
            fail_if(n not in lines[0], f"{name}: '{n}' is not in the message: {lines[0]}")
    print(f"refused {name}: {lines[0]}")


def main():
    root = scratch_dir("hf-malformed-")
    w = lib.llama_tensors(E, FF, V, L, H, KV)
    good = write_folder(os.path.join(root, "good"), weights=w)
    r = run(["eval", "-m", good, "--tokens", "1,2,3,4,5"])
    fail_if(r.returncode != 0, f"the valid folder does not run:\n{r.stderr}")
    names = list(w)
    sharded = write_folder(os.path.join(root, "sharded"), weights=w,
                           shards={"a.safetensors": names[:9], "b.safetensors": names[9:]})
    r = run(["eval", "-m", sharded, "--tokens", "1,2,3,4,5"])
    fail_if(r.returncode != 0, f"the valid sharded folder does not run:\n{r.stderr}")

    full = safetensors_bytes(w)
    expect_refused(write_folder(os.path.join(root, "truncated"), weights=full[:len(full) // 2]),
                   "a truncated shard", "model.safetensors", "lie outside")

    def lie(h):
        h["model.norm.weight"]["data_offsets"][1] += 4
    expect_refused(write_folder(os.path.join(root, "lying-offsets"),
                                weights=safetensors_bytes(w, header_patch=lie)),
                   "offsets that lie", "model.norm.weight", "needs 128 bytes")

    def bad_shape(h):
        h["lm_head.weight"]["shape"] = [E, V]
    expect_refused(write_folder(os.path.join(root, "transposed"),
                                weights=safetensors_bytes(w, header_patch=bad_shape)),
                   "a shape the config contradicts", "lm_head.weight", "the config implies")

    missing = dict(w)
    del missing["model.layers.1.mlp.up_proj.weight"]
    expect_refused(write_folder(os.path.join(root, "missing"), weights=missing),
                   "a missing tensor", "model.layers.1.mlp.up_proj.weight", "lack")

    ints = {k: (v.view(np.int32) if k == "model.layers.0.self_attn.q_proj.weight" else v)
            for k, v in w.items()}

    def as_int(h):
        h["model.layers.0.self_attn.q_proj.weight"]["dtype"] = "I32"
    expect_refused(write_folder(os.path.join(root, "int-weights"),
                                weights=safetensors_bytes(ints, header_patch=as_int)),
                   "a dtype that is not a weight's", "model.layers.0.self_attn.q_proj.weight",
                   "expected F32, F16 or BF16")

    expect_refused(write_folder(os.path.join(root, "unknown-arch"),
                                config=dict(CONFIG, model_type="mamba"), weights=w),
                   "an unknown architecture", "config.json", "mamba")

    awq = dict(CONFIG, quantization_config={"quant_method": "exl3", "bits": 4})
    expect_refused(write_folder(os.path.join(root, "quant-method"), config=awq, weights=w),
                   "an unknown quantization method", "config.json", "exl3")

    gone = write_folder(os.path.join(root, "missing-shard"), weights=w,
                        shards={"a.safetensors": names[:9], "b.safetensors": names[9:]})
    os.remove(os.path.join(gone, "b.safetensors"))
    expect_refused(gone, "a shard the index names that is absent", "b.safetensors")

    index = write_folder(os.path.join(root, "index-lies"), weights=w,
                         shards={"a.safetensors": names[:9], "b.safetensors": names[9:]})
    with open(os.path.join(index, "model.safetensors.index.json")) as f:
        j = json.load(f)
    j["weight_map"]["model.extra.weight"] = "a.safetensors"
    with open(os.path.join(index, "model.safetensors.index.json"), "w") as f:
        json.dump(j, f)
    expect_refused(index, "an index that lists a tensor its shard lacks", "model.extra.weight",
                   "a.safetensors")

    no_tok = write_folder(os.path.join(root, "no-tokenizer"), weights=w)
    os.remove(os.path.join(no_tok, "tokenizer.json"))
    expect_refused(no_tok, "a folder without tokenizer.json", "tokenizer.json is missing")

    bad_config = write_folder(os.path.join(root, "bad-config"), weights=w)
    with open(os.path.join(bad_config, "config.json"), "w") as f:
        f.write('{"model_type": "llama", "hidden_size": ')
    expect_refused(bad_config, "a config.json that is not JSON", "config.json", "not valid JSON")

    huge = write_folder(os.path.join(root, "huge-vocab"),
                        config=dict(CONFIG, vocab_size=4_000_000_000), weights=w)
    expect_refused(huge, "a vocabulary size no model has", "4000000000")

    typed = write_folder(os.path.join(root, "bad-type"),
                         config=dict(CONFIG, rope_scaling={"rope_type": "linear", "factor": "x"}),
                         weights=w)
    expect_refused(typed, "a config field of the wrong type", "config.json", "factor")
    shutil.rmtree(root, ignore_errors=True)
    print("PASS: every malformed folder refused with one line, exit 1")


if __name__ == "__main__":
    main()
