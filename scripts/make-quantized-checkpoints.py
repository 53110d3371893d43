#!/usr/bin/env python3
"""Writes the pre-quantized test checkpoints of tests/data/hf-quantized/:
a tiny random llama (2 layers, hidden 128, bf16) quantized by llm-compressor,
an independent quantizer, in the compressed-tensors formats people download:

  w4a16        int4, symmetric, groups of 128 (round to nearest)
  w4a16-asym   int4, asymmetric (zero points), groups of 128
  w8a16        int8, symmetric, groups of 128
  gptq         GPTQ int4 on calibration tokens, static activation order
  fp8          FP8 e4m3 weights, one scale per output channel (FP8_DYNAMIC)
  fp8-block    FP8 e4m3 weights, 128 x 128 block scales (FP8_BLOCK)

Groups in activation order (a weight_g_idx) are not among the orders this
llm-compressor writes; tests/model/test_hf_prequantized.py makes one from the
w4a16 checkpoint by the format's specification. Run in the reference environment with llmcompressor installed
(`pip install llmcompressor`); the tests only read the results.
"""
import json
import os
import shutil
import sys

import torch
import transformers
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "data", "hf-quantized")
sys.path.insert(0, os.path.join(ROOT, "tests", "model"))
import hf_folder_lib  # noqa: E402

SCHEMES = {"w4a16": "W4A16", "w4a16-asym": "W4A16_ASYM", "w8a16": "W8A16",
           "gptq": "W4A16", "fp8": "FP8_DYNAMIC",
           "fp8-block": "FP8_BLOCK"}


def base_model(path):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=320, hidden_size=128, intermediate_size=256,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=256)
    m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.05)
    m.save_pretrained(path)
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        json.dump(hf_folder_lib.tokenizer(), f)
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast"}, f)


def main():
    base = os.path.join(OUT, "_base")
    shutil.rmtree(base, ignore_errors=True)
    base_model(base)
    for name, scheme in SCHEMES.items():
        m = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)
        tok = transformers.AutoTokenizer.from_pretrained(base)
        if name.startswith("gptq"):
            from datasets import Dataset
            g = torch.Generator().manual_seed(1)
            ids = torch.randint(0, 320, (8, 64), generator=g)
            ds = Dataset.from_dict({"input_ids": ids.tolist(),
                                    "attention_mask": torch.ones_like(ids).tolist()})
            recipe = GPTQModifier(targets="Linear", scheme=scheme, ignore=["lm_head"],
                                  actorder="static")
            oneshot(model=m, processor=tok, dataset=ds, recipe=recipe, num_calibration_samples=8,
                    max_seq_length=64)
        else:
            oneshot(model=m, processor=tok,
                    recipe=QuantizationModifier(targets="Linear", scheme=scheme,
                                                ignore=["lm_head"]))
        out = os.path.join(OUT, name)
        shutil.rmtree(out, ignore_errors=True)
        m.save_pretrained(out, save_compressed=True)
        tok.save_pretrained(out)
        for extra in ("recipe.yaml",):
            if os.path.exists(os.path.join(out, extra)):
                os.remove(os.path.join(out, extra))
        print(f"wrote {out}", file=sys.stderr)
    shutil.rmtree(base)


if __name__ == "__main__":
    main()
