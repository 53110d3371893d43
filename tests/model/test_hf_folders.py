#!/usr/bin/env python3
"""Hugging Face folders run as they are: tiny random models of every
architecture headroom runs from folders (Llama, Mistral, Mixtral, Qwen2,
Qwen2-MoE, Qwen3, Qwen3-MoE, Gemma 3), made by transformers (from_config,
random weights, save_pretrained to safetensors), give transformers' own
logits.

For each model, `headroom eval -m FOLDER --tokens ...` (f32 activations and
KV cache) is compared with transformers' forward over the same tokens:
every logit within 1e-4 and the same top-1 at every position. The folders
cover f32, bf16 and f16 checkpoints (transformers reads the 16-bit ones
into f32, so both sides multiply the same weights), sharded checkpoints
with an index, tied and untied embeddings, Llama 3.1's "llama3" RoPE
scaling, linear RoPE scaling, Gemma 3's sliding-window layers and its
per-kind RoPE bases, experts stored one matrix per expert (stacked as the
folder is written out before loading) with Qwen2-MoE's gated shared expert,
and a tokenizer.json that headroom must read.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import fail_if, headroom_bin, scratch_dir  # noqa: E402

try:
    import numpy as np
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
except ImportError as e:
    print(f"transformers and torch are needed (scripts/requirements-test.txt): {e}",
          file=sys.stderr)
    sys.exit(1)

TOKENS = [1, 5, 77, 200, 13, 9, 250, 31, 64, 3, 100, 101, 7, 19, 260, 2, 44]
COMMON = dict(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
TOLERANCE = 1e-4


def configs():
    t = transformers
    return {
        "llama": t.LlamaConfig(**COMMON, rms_norm_eps=1e-5),
        "llama-tied": t.LlamaConfig(**COMMON, tie_word_embeddings=True),
        "llama31-rope": t.LlamaConfig(**COMMON, rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32}),
        "llama-linear-rope": t.LlamaConfig(**COMMON, rope_parameters={
            "rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}),
        "mistral": t.MistralConfig(**COMMON, head_dim=16, sliding_window=None),
        "qwen2": t.Qwen2Config(**COMMON),
        "qwen3": t.Qwen3Config(**COMMON, head_dim=32),
        "mixtral": t.MixtralConfig(**COMMON, num_local_experts=4, num_experts_per_tok=2),
        "qwen2moe": t.Qwen2MoeConfig(**COMMON, moe_intermediate_size=32,
                                     shared_expert_intermediate_size=48, num_experts=4,
                                     num_experts_per_tok=2),
        "qwen3moe": t.Qwen3MoeConfig(**COMMON, moe_intermediate_size=32, num_experts=4,
                                     num_experts_per_tok=2, head_dim=16, norm_topk_prob=True),
        "gemma3": t.Gemma3TextConfig(
            **COMMON, head_dim=16, sliding_window=6, query_pre_attn_scalar=16,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"]),
    }


def byte_level_tokenizer(path):
    """A byte-level BPE of the 256 byte symbols and no merges."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {s: i for i, s in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(os.path.join(path, "tokenizer.json"))


def make_folder(name, config, dtype, root, shard=None):
    torch.manual_seed(sum(map(ord, name)))
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    model = model.to(dtype)
    path = os.path.join(root, f"{name}-{str(dtype).split('.')[-1]}")
    if shard:
        model.save_pretrained(path, max_shard_size=shard)
    else:
        model.save_pretrained(path)
    byte_level_tokenizer(path)
    return path


def reference_logits(path):
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor([TOKENS])).logits[0].numpy()


def headroom_logits(path, scratch):
    out = os.path.join(scratch, "logits.f32")
    r = subprocess.run([headroom_bin(), "eval", "-m", path, "--kv-dtype", "f32",
                        "--tokens", ",".join(map(str, TOKENS)), "--logits-out", out],
                       capture_output=True, text=True)
    fail_if(r.returncode != 0, f"headroom eval -m {path} failed:\n{r.stderr}")
    return np.fromfile(out, dtype=np.float32).reshape(len(TOKENS), -1)


def main():
    root = scratch_dir("hf-folders-")
    cases = []
    for name, config in configs().items():
        cases.append((name, config, torch.float32, None))
    # 16-bit checkpoints, and shards with an index.
    cfg = configs()
    cases += [("llama", cfg["llama"], torch.bfloat16, None),
              ("qwen3", cfg["qwen3"], torch.bfloat16, "40KB"),
              ("gemma3", cfg["gemma3"], torch.bfloat16, None),
              ("qwen2", cfg["qwen2"], torch.float16, "60KB"),
              ("qwen2moe", cfg["qwen2moe"], torch.bfloat16, "50KB")]
    failures = []
    for name, config, dtype, shard in cases:
        path = make_folder(name, config, dtype, root, shard)
        if shard:
            fail_if(not os.path.exists(os.path.join(path, "model.safetensors.index.json")),
                    f"{path}: expected a sharded checkpoint")
        ref = reference_logits(path)
        got = headroom_logits(path, root)
        diff = float(np.abs(ref - got).max())
        top1 = bool((ref.argmax(1) == got.argmax(1)).all())
        print(f"{os.path.basename(path):28s} {'sharded' if shard else '':8s} "
              f"max |logit diff| {diff:.2e} (logits up to {np.abs(ref).max():.2f}), "
              f"top-1 {'same' if top1 else 'DIFFERENT'}")
        if diff > TOLERANCE or not top1:
            failures.append(os.path.basename(path))
    fail_if(failures, f"logits differ from transformers for {', '.join(failures)}")
    print(f"PASS: {len(cases)} folders give transformers' logits within {TOLERANCE}")


if __name__ == "__main__":
    main()
