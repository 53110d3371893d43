"""Hugging Face checkpoint folders written byte by byte for tests: config.json,
safetensors (8-byte length, JSON header, data) in f32, f16 or bf16, and a
byte-level BPE tokenizer.json, with no library that would hide a mistake of
the format. The tiny llama's dimensions are parameters."""
import json
import os
import struct

import numpy as np


def llama_config(E, FF, V, L, H, KV):
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": E,
            "intermediate_size": FF, "num_hidden_layers": L, "num_attention_heads": H,
            "num_key_value_heads": KV, "vocab_size": V, "max_position_embeddings": 128,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}


def llama_tensors(E, FF, V, L, H, KV, seed=1):
    """Random f32 weights of the config's shapes, under the names transformers writes."""
    HD = E // H
    rng = np.random.default_rng(seed)
    out = {"model.embed_tokens.weight": (V, E), "model.norm.weight": (E,),
           "lm_head.weight": (V, E)}
    for i in range(L):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": (E,),
                    p + "post_attention_layernorm.weight": (E,),
                    p + "self_attn.q_proj.weight": (H * HD, E),
                    p + "self_attn.k_proj.weight": (KV * HD, E),
                    p + "self_attn.v_proj.weight": (KV * HD, E),
                    p + "self_attn.o_proj.weight": (E, H * HD),
                    p + "mlp.gate_proj.weight": (FF, E),
                    p + "mlp.up_proj.weight": (FF, E),
                    p + "mlp.down_proj.weight": (E, FF)})
    return {k: rng.normal(0, 0.2, s).astype(np.float32) for k, s in out.items()}


def encode(a, dtype):
    """The bytes of f32 array `a` as safetensors stores `dtype`: bf16 keeps
    the high 16 bits of each f32 (rounded to nearest even)."""
    if dtype == "F32":
        return a.astype("<f4").tobytes()
    if dtype == "F16":
        return a.astype("<f2").tobytes()
    bits = a.astype("<f4").view("<u4").astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def safetensors_bytes(arrays, dtype="F32", header_patch=None):
    header, blobs, at = {}, [], 0
    for name, a in arrays.items():
        raw = a.tobytes() if a.dtype != np.float32 else encode(a, dtype)
        kind = dtype if a.dtype == np.float32 else "I32"
        header[name] = {"dtype": kind, "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    if header_patch:
        header_patch(header)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def tokenizer():
    """Byte-level BPE over the 256 byte symbols (GPT-2's byte-to-unicode map), no merges."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): i for i, c in enumerate(cs)}
    return {"version": "1.0", "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": True, "use_regex": True},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": []}}


def write_folder(path, config, weights=None, shards=None, dtype="F32"):
    """config.json, tokenizer.json and the weights: one model.safetensors
    (arrays, or bytes as they are) or `shards` {file: [names]} with an index."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        json.dump(tokenizer(), f)
    if shards:
        index = {"metadata": {}, "weight_map": {}}
        for file, names in shards.items():
            part = {n: weights[n] for n in names}
            with open(os.path.join(path, file), "wb") as f:
                f.write(safetensors_bytes(part, dtype))
            index["weight_map"].update({n: file for n in names})
        with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f)
    elif weights is not None:
        with open(os.path.join(path, "model.safetensors"), "wb") as f:
            f.write(weights if isinstance(weights, bytes) else safetensors_bytes(weights, dtype))
    return path
