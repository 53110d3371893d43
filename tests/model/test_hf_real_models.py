#!/usr/bin/env python3
"""The test models as Hugging Face folders: transformers reads each GGUF
(dequantizing its weights to bf16) and writes the folder, as a user's
download would be. headroom runs the folders as they are:

- every golden prompt (tests/data/greedy/*.json) and a few harder texts
  tokenize to the ids the `tokenizers` library gives for the folder's
  tokenizer.json: SmolLM2's byte-level BPE and Gemma 3's SentencePiece-style
  BPE (byte fallback, 262k tokens, 515k merges);
- SmolLM2's
- greedy output equals that of the same bf16 weights run from a GGUF,
  which this test writes with the gguf package as llama.cpp's converter
  would (q/k rows permuted for llama.cpp's pairwise RoPE, the original
  GGUF's tokenizer metadata), so the two runs share nothing but the
  weights' values.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import fail_if, headroom_bin, model_path, scratch_dir, source_dir  # noqa: E402

try:
    import gguf
    import numpy as np
    import torch
    import transformers
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
except ImportError as e:
    print(f"transformers, torch and gguf are needed (scripts/requirements-test.txt): {e}",
          file=sys.stderr)
    sys.exit(1)

N_PREDICT = 32


def write_folder(gguf_path, out):
    d, f = os.path.dirname(gguf_path), os.path.basename(gguf_path)
    tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f,
                                                              dtype=torch.bfloat16)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    plain.load_state_dict(model.state_dict())
    plain.save_pretrained(out)
    tok.save_pretrained(out)


def permute(w, n_head):
    """llama.cpp's converter's q/k permutation: rows of each head reordered
    from halves (i, i + d/2) to pairs (2i, 2i + 1)."""
    rows = w.shape[0]
    return (w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_gguf(folder, original, out):
    """The folder's bf16 weights in a GGUF, llama.cpp's names and layout."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    weights = load_file(os.path.join(folder, "model.safetensors"))
    reader = gguf.GGUFReader(original)
    writer = gguf.GGUFWriter(out, "llama")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture",
                                                            "general.file_type"):
            continue
        vtype = field.types[0]
        value = field.contents()
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(field.name, value, vtype, sub_type=field.types[-1])
        else:
            writer.add_key_value(field.name, value, vtype)
    names = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight"}
    parts = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for name, t in weights.items():
        # bf16 bits as uint16 (numpy has no bfloat16), 1-D tensors as f32.
        w = t.float().numpy() if t.ndim == 1 else t.view(torch.int16).numpy().view(np.uint16)
        if name in names:
            gname = names[name]
        else:
            _, _, il, *rest = name.split(".")
            gname = f"blk.{il}.{parts['.'.join(rest[:-1])]}.weight"
        if name.endswith("q_proj.weight"):
            w = permute(w, n_head)
        elif name.endswith("k_proj.weight"):
            w = permute(w, n_kv)
        if w.ndim == 1:
            writer.add_tensor(gname, w.astype(np.float32))
        else:
            writer.add_tensor(gname, w, raw_shape=w.shape,
                              raw_dtype=gguf.GGMLQuantizationType.BF16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def run(model, prompt):
    r = subprocess.run([headroom_bin(), "run", "-m", model, "-p", prompt, "-n", str(N_PREDICT),
                        "--temp", "0", "--max-model-len", "2048"],
                       capture_output=True, text=True, timeout=300)
    fail_if(r.returncode != 0, f"headroom run -m {model} failed:\n{r.stderr}")
    return r.stdout


def headroom_tokens(model, prompt, scratch):
    text = os.path.join(scratch, "prompt.txt")
    ids = os.path.join(scratch, "ids.i32")
    with open(text, "w") as f:
        f.write(prompt)
    r = subprocess.run([headroom_bin(), "eval", "-m", model, "-f", text, "--tokens-out", ids,
                        "--max-model-len", "2048"], capture_output=True, text=True, timeout=300)
    fail_if(r.returncode != 0, f"headroom eval -m {model} -f failed:\n{r.stderr}")
    return np.fromfile(ids, dtype=np.int32).tolist()


HARD_TEXTS = ["  two  spaces", "日本語のテキスト", "emoji 🎉 ok", "x\n\n\ty", "1234567 + 89",
              "don't stop"]


def check_tokens(name, folder, scratch):
    with open(os.path.join(source_dir(), f"tests/data/greedy/{name}.json")) as f:
        prompts = [c["prompt"] for c in json.load(f)["cases"]] + HARD_TEXTS
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    for prompt in prompts:
        want = tok.encode(prompt).ids
        got = headroom_tokens(folder, prompt, scratch)
        fail_if(got != want, f"{name} {prompt!r}: headroom tokenizes to {got}, tokenizers to "
                f"{want}")
    print(f"{name}: {len(prompts)} prompts tokenize as tokenizers does")


def main():
    scratch = scratch_dir("hf-real-")
    gemma = os.path.join(scratch, "gemma-3-270m-it")
    write_folder(model_path("gemma3-270m"), gemma)
    check_tokens("gemma3-270m", gemma, scratch)
    shutil.rmtree(gemma)

    folder = os.path.join(scratch, "SmolLM2-135M-Instruct")
    original = model_path("smollm2-135m")
    write_folder(original, folder)
    converted = os.path.join(scratch, "smollm2-bf16.gguf")
    write_gguf(folder, original, converted)
    check_tokens("smollm2-135m", folder, scratch)

    with open(os.path.join(source_dir(), "tests/data/greedy/smollm2-135m.json")) as f:
        prompts = [c["prompt"] for c in json.load(f)["cases"]]
    same = 0
    for prompt in prompts:
        a, b = run(folder, prompt), run(converted, prompt)
        fail_if(a != b, f"{prompt!r}: the folder gives {a!r}, the GGUF of its weights {b!r}")
        same += 1
    print(f"PASS: greedy output of {same} prompts ({N_PREDICT} tokens each) equals the GGUF's")


if __name__ == "__main__":
    main()
