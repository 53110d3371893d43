#!/usr/bin/env python3
"""Pre-quantized Hugging Face checkpoints, read and run as they are.

The checkpoints in tests/data/hf-quantized/ were written by llm-compressor,
an independent quantizer (scripts/make-quantized-checkpoints.py): int4
symmetric and asymmetric, int8, GPTQ int4, FP8 per channel and FP8 in
128 x 128 blocks, in the compressed-tensors format. One more is made here by
the formats' specifications: the int4 checkpoint with its down projections'
groups in activation order (a weight_g_idx that interleaves the groups), and
the FP8 block checkpoint in the layout Qwen3-FP8 and DeepSeek-V3 ship
(quant_method "fp8", weight_scale_inv), and the int4 checkpoints' integers
and scales in AutoGPTQ's layout (v1, with and without desc_act groups) and
AutoAWQ's GEMM layout (neither package installs here without CUDA).

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
            "fp8": "BF16", "fp8-block": "BF16", "w4a16-actorder": "BF16", "fp8-native": "BF16",
            "autogptq": "Q4_0", "autogptq-desc-act": "BF16", "autoawq": "Q4_1"}
MADE_HERE = ("w4a16-actorder", "fp8-native", "autogptq", "autogptq-desc-act", "autoawq")
# The source checkpoint each one made here repacks (its weights, its reference).
SOURCE = {"w4a16-actorder": "w4a16", "fp8-native": "fp8-block", "autogptq": "w4a16",
          "autogptq-desc-act": "w4a16", "autoawq": "w4a16-asym"}
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # the output of each nibble of an AutoAWQ word


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


def nibbles(words, axis):
    """The 8 unsigned 4-bit values of each int32 word, nibble k at bits 4k,
    laid out along `axis` (8 per word)."""
    w = words.numpy().view(np.uint32).astype(np.int64)
    v = np.stack([(w >> (4 * k)) & 15 for k in range(8)], axis=axis + 1)
    shape = list(w.shape)
    shape[axis] *= 8
    return v.reshape(shape)


def words(values, axis):
    """Packs unsigned 4-bit values 8 to an int32 along `axis` (nibble k at bits 4k)."""
    v = np.moveaxis(values.astype(np.int64), axis, -1)
    v = v.reshape(*v.shape[:-1], -1, 8)
    w = sum(v[..., k] << (4 * k) for k in range(8))
    return torch.tensor(np.ascontiguousarray(np.moveaxis(w, -1, axis)).astype(np.uint32)
                        .view(np.int32)).contiguous()


def exact_gptq_awq(st, hf, cfg):
    """AutoGPTQ: qweight [in/8, out] packed down the inputs, qzeros [groups,
    out/8] (stored less 1 in checkpoint_format "gptq"), scales [groups, out],
    g_idx [in]. AutoAWQ GEMM: qweight [in, out/8] and qzeros [groups, out/8]
    packed across the outputs in AWQ_ORDER. w[o, i] = s[g, o] (q[i, o] - z[g, o])."""
    scales = st[hf + ".scales"].double().numpy()
    if cfg["quant_method"] == "gptq":
        q = nibbles(st[hf + ".qweight"], 0)
        z = nibbles(st[hf + ".qzeros"], 1) + (1 if cfg.get("checkpoint_format") == "gptq" else 0)
        g = st[hf + ".g_idx"].numpy()
    else:
        inverse = np.argsort(AWQ_ORDER)
        qn = nibbles(st[hf + ".qweight"], 1)
        q = qn.reshape(qn.shape[0], -1, 8)[:, :, inverse].reshape(qn.shape)
        zn = nibbles(st[hf + ".qzeros"], 1)
        z = zn.reshape(zn.shape[0], -1, 8)[:, :, inverse].reshape(zn.shape)
        g = np.arange(q.shape[0]) // (q.shape[0] // scales.shape[0])
    return ((q - z[g, :]) * scales[g, :]).T


def as_gptq_awq(src, dst, method, desc_act=False):
    """The int4 checkpoint `src` (compressed-tensors) in AutoGPTQ's (v1,
    zeros less 1) or AutoAWQ's GEMM layout, built from the same integers and
    scales by the formats' specifications. desc_act: the down projections'
    groups interleaved by g_idx (input i in group i % 2)."""
    shutil.copytree(src, dst)
    st = load_file(os.path.join(dst, "model.safetensors"))
    cfg = json.load(open(os.path.join(dst, "config.json")))
    out = {}
    for name, t in st.items():
        if not name.endswith(".weight_packed"):
            if not any(name.endswith(x) for x in (".weight_scale", ".weight_zero_point",
                                                   ".weight_shape")):
                out[name] = t
            continue
        hf = name[:-len(".weight_packed")]
        rows, cols = (int(x) for x in st[hf + ".weight_shape"])
        q = nibbles(st[name], 1)[:, :cols]                    # [out, in], unsigned
        scale = st[hf + ".weight_scale"].float()              # [out, groups]
        groups = scale.shape[1]
        if hf + ".weight_zero_point" in st:
            z = nibbles(st[hf + ".weight_zero_point"], 0)[:rows]  # [out, groups], unsigned
        else:
            z = np.full((rows, groups), 8)
        g_idx = np.arange(cols) // (cols // groups)
        if desc_act and hf.endswith("down_proj"):
            g_idx = np.arange(cols) % groups
        out[hf + ".scales"] = scale.T.contiguous().half()
        if method == "gptq":
            out[hf + ".qweight"] = words(q.T, 0)              # [in/8, out]
            out[hf + ".qzeros"] = words(z.T - 1, 1)           # [groups, out/8], less 1
            out[hf + ".g_idx"] = torch.tensor(g_idx, dtype=torch.int32)
        else:
            order = np.array(AWQ_ORDER)
            qt = q.T.reshape(cols, -1, 8)[:, :, order].reshape(cols, rows)
            zt = z.T.reshape(groups, -1, 8)[:, :, order].reshape(groups, rows)
            out[hf + ".qweight"] = words(qt, 1)               # [in, out/8]
            out[hf + ".qzeros"] = words(zt, 1)                # [groups, out/8]
    save_file(out, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    if method == "gptq":
        cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128,
                                      "desc_act": desc_act, "sym": True,
                                      "checkpoint_format": "gptq"}
    else:
        cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128,
                                      "zero_point": True, "version": "gemm"}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return dst


def as_native_fp8(src, dst):
    """The FP8 block checkpoint in the layout Qwen3-FP8 and DeepSeek-V3 ship:
    quant_method "fp8", weight_block_size [128, 128], f32 scales named
    weight_scale_inv (w = fp8 x scale_inv)."""
    shutil.copytree(src, dst)
    tensors = load_file(os.path.join(dst, "model.safetensors"))
    for name in list(tensors):
        if name.endswith(".weight_scale"):
            tensors[name + "_inv"] = tensors.pop(name).float().contiguous()
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    config = json.load(open(os.path.join(dst, "config.json")))
    config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                     "fmt": "e4m3", "weight_block_size": [128, 128]}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return dst


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
    if cfg["quant_method"] in ("gptq", "awq"):
        return exact_gptq_awq(st, hf, cfg)
    if cfg["quant_method"] == "fp8":
        s = st[hf + ".weight_scale_inv"].double().numpy()
        fp8 = st[hf + ".weight"].double().numpy()
        bs = cfg["weight_block_size"]
        return fp8 * np.kron(s, np.ones(bs))[:fp8.shape[0], :fp8.shape[1]]
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
    reordered = name in ("w4a16-actorder", "autogptq-desc-act")
    kind = EXPECTED[name] if not (reordered and "down_proj" not in hf) else "Q4_0"
    if kind in ("Q4_0", "Q8_0"):
        return np.zeros_like(exact)
    if kind == "Q4_1":
        st = load_file(os.path.join(path, "model.safetensors"))
        scale = (st[hf + ".weight_scale"].double() if hf + ".weight_scale" in st
                 else st[hf + ".scales"].double().T)
        # |m| = |scale| |z| <= 16 |scale|, rounded to f16: half an ulp, 2^-11 |m|.
        return (16 * scale.abs() * 2.0 ** -11).repeat_interleave(128, dim=1).numpy()
    return 2.0 ** -8 * np.abs(exact)  # BF16: half an ulp


def main():
    data = os.path.join(source_dir(), "tests", "data", "hf-quantized")
    scratch = scratch_dir("hf-prequantized-")
    folders = [(n, os.path.join(data, n)) for n in EXPECTED if n not in MADE_HERE]
    folders.append(("w4a16-actorder",
                    with_actorder(os.path.join(data, "w4a16"),
                                  os.path.join(scratch, "w4a16-actorder"))))
    folders.append(("fp8-native", as_native_fp8(os.path.join(data, "fp8-block"),
                                                 os.path.join(scratch, "fp8-native"))))
    for name, method, desc_act in (("autogptq", "gptq", False),
                                   ("autogptq-desc-act", "gptq", True),
                                   ("autoawq", "awq", False)):
        folders.append((name, as_gptq_awq(os.path.join(data, SOURCE[name]),
                                          os.path.join(scratch, name), method, desc_act)))
    failures = []
    for name, path in folders:
        if name in MADE_HERE:
            # The source checkpoint's weights, decompressed by transformers;
            # where groups are reordered, the down projections dequantized by
            # the specification (compressed-tensors no longer reads them).
            state = decompressed(os.path.join(data, SOURCE[name]))
            if name in ("w4a16-actorder", "autogptq-desc-act"):
                for il in range(2):
                    hf = f"model.layers.{il}.mlp.down_proj"
                    state[hf + ".weight"] = torch.tensor(exact_weights(path, hf),
                                                         dtype=torch.float32)
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
                if name in ("w4a16-actorder", "autogptq-desc-act") and g_part != "ffn_down":
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
        planned = plan["terms"]["weights"]["bytes"]
        held = sum(int(t.n_bytes) for t in tensors.values())
        print(f"{name:15s} {EXPECTED[name]:5s} weights: max |diff| {worst:.2e}; logits: max |diff| "
              f"{d:.2e} (up to {np.abs(ref_logits).max():.2f}), top-1 "
              f"{'same' if top1 else 'DIFFERENT'}; plan {planned} bytes, file {held}")
        fail_if(planned != held, f"{name}: plan counts {planned} bytes of weights, the repacked "
                f"model holds {held}")
        if d > 2e-4 or not top1:
            failures.append(name)
    fail_if(failures, f"logits differ from the decompressed reference: {', '.join(failures)}")
    print(f"PASS: {len(folders)} pre-quantized checkpoints read, repacked and run")


if __name__ == "__main__":
    main()
