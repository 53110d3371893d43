#!/usr/bin/env python3
"""Golden logits from Hugging Face transformers running the dequantized GGUF
in float32 (an implementation independent of headroom's), for the model
tests: tests/data/logits/<model>.json holds, per prompt, the token ids (from
transformers' tokenizer) and the top-5 logits at every position.

Run with the reference environment (tools/ref-env.sh):
  .ref/venv/bin/python scripts/make-golden-logits.py
"""
import json
import pathlib
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

root = pathlib.Path(__file__).resolve().parent.parent
models = root / "models"
out_dir = root / "tests" / "data" / "logits"
out_dir.mkdir(parents=True, exist_ok=True)
torch.set_num_threads(2)

LONG = " ".join(f"Item {i}: the {['red', 'green', 'blue', 'gold'][i % 4]} box holds {i * 7 % 13} stones."
                for i in range(70))
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Once upon a time, in a small village by the sea, there lived",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "Photosynthesis converts light energy into",
    "1, 1, 2, 3, 5, 8, 13,",
    "Le chat est sur la table. The cat is",
    LONG + " Which box holds the most stones? The",
]

for name, file in [("smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf"),
                   ("gemma3-270m", "gemma-3-270m-q4_k_m.gguf")]:
    tok = AutoTokenizer.from_pretrained(models, gguf_file=file)
    model = AutoModelForCausalLM.from_pretrained(models, gguf_file=file, dtype=torch.float32)
    model.eval()
    cases = []
    for prompt in PROMPTS:
        ids = tok(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            logits = model(ids).logits[0]
        top = logits.topk(5, dim=-1)
        cases.append({
            "prompt": prompt,
            "tokens": ids[0].tolist(),
            "top_ids": top.indices.tolist(),
            "top_logits": [[round(v, 5) for v in row] for row in top.values.tolist()],
        })
        print(f"{name}: {len(cases[-1]['tokens'])} tokens", file=sys.stderr)
    (out_dir / f"{name}.json").write_text(json.dumps({"model": name, "reference": "transformers float32",
                                                       "cases": cases}))
print(f"wrote {out_dir}", file=sys.stderr)
