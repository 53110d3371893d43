#!/usr/bin/env python3
"""headroom's forward pass against an independent numpy forward written here
from the architectures' definitions, on tiny random models made by
`headroom synth`: llama (GQA 2:1, normal RoPE), llama with tied embeddings
and one KV head (MQA), qwen2 (NeoX RoPE, q/k/v biases) and gemma3 (an
8-token sliding window on 2 of 3 layers, so the 37-token prompt crosses it;
q/k norms, post norms, GELU), each with f32 and quantized weights
(dequantized by the gguf package), and a llama whose widths are multiples of
256 in every K type and IQ4_XS; and the mixtures of experts: a llama with
8 experts, 2 per token (Mixtral), qwen3moe (3 of 8, q/k norms, a head size
that is not n_embd / n_head) and qwen2moe (a shared expert behind a sigmoid
gate, weights not renormalized), routed here by their definitions: softmax
over the router's logits, the k largest, renormalized except for qwen2moe;
and gpt-oss, written from OpenAI's reference implementation: biases on q, k,
v, o, the router and every expert; attention sinks; an 8-token window on
even layers; YaRN RoPE with the reference's unrounded ramp (llama.cpp rounds
it out to whole pairs); softmax over the k largest router logits; the
clamped SwiGLU; its experts in MXFP4 among the types."""
import os
import subprocess
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, fail_if, scratch_dir  # noqa: E402


def load(path):
    r = GGUFReader(path)
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    tensors = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        tensors[t.name] = a.reshape([int(d) for d in reversed(t.shape)])
    return meta, tensors


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, positions, base, neox):
    # x: (T, n_head, d). Frequencies base^(-2i/d) for i < d/2.
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2) / d)
    ang = positions[:, None] * inv[None, :]  # (T, d/2)
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = x.copy()
    if neox:
        a, b = x[..., : d // 2], x[..., d // 2:]
        out[..., : d // 2], out[..., d // 2:] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., 0::2], x[..., 1::2]
        out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    return out


def gelu_tanh(g):
    return 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))


def silu(g):
    return g / (1 + np.exp(-g))


def moe(meta, W, p, h):
    """A mixture-of-experts feed-forward of normed rows h (T, n_embd)."""
    arch = meta["general.architecture"]
    k = meta[f"{arch}.expert_used_count"]
    logits = h @ W[p + "ffn_gate_inp.weight"].T  # (T, n_expert)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    gate, up, down = W[p + "ffn_gate_exps.weight"], W[p + "ffn_up_exps.weight"], W[p + "ffn_down_exps.weight"]
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        chosen = np.argsort(-probs[t], kind="stable")[:k]
        w = probs[t, chosen]
        if arch != "qwen2moe":
            w = w / w.sum()
        for e, we in zip(chosen, w):
            out[t] += we * ((silu(gate[e] @ h[t]) * (up[e] @ h[t])) @ down[e].T)
    if p + "ffn_gate_shexp.weight" in W:
        s = silu(h @ W[p + "ffn_gate_shexp.weight"].T) * (h @ W[p + "ffn_up_shexp.weight"].T)
        s = s @ W[p + "ffn_down_shexp.weight"].T
        g = h @ W[p + "ffn_gate_inp_shexp.weight"]
        out += s / (1 + np.exp(-g))[:, None]
    return out


def forward(meta, W, tokens):
    arch = meta["general.architecture"]
    if arch == "gemma3":
        return forward_gemma3(meta, W, tokens)
    if arch == "gpt-oss":
        return forward_gpt_oss(meta, W, tokens)
    n_layer = meta[f"{arch}.block_count"]
    n_head = meta[f"{arch}.attention.head_count"]
    n_kv = meta[f"{arch}.attention.head_count_kv"]
    eps = meta[f"{arch}.attention.layer_norm_rms_epsilon"]
    base = meta[f"{arch}.rope.freq_base"]
    neox = arch != "llama"
    T = len(tokens)
    x = W["token_embd.weight"][tokens]  # (T, n_embd)
    d = meta.get(f"{arch}.attention.key_length", x.shape[1] // n_head)
    pos = np.arange(T, dtype=np.float64)
    causal = np.triu(np.full((T, T), -np.inf), 1)
    for il in range(n_layer):
        p = f"blk.{il}."
        h = rms_norm(x, W[p + "attn_norm.weight"], eps)
        q, k, v = h @ W[p + "attn_q.weight"].T, h @ W[p + "attn_k.weight"].T, h @ W[p + "attn_v.weight"].T
        if p + "attn_q.bias" in W:
            q, k, v = q + W[p + "attn_q.bias"], k + W[p + "attn_k.bias"], v + W[p + "attn_v.bias"]
        q, k = q.reshape(T, n_head, d), k.reshape(T, n_kv, d)
        if p + "attn_q_norm.weight" in W:
            q, k = rms_norm(q, W[p + "attn_q_norm.weight"], eps), rms_norm(k, W[p + "attn_k_norm.weight"], eps)
        q, k = rope(q, pos, base, neox), rope(k, pos, base, neox)
        v = v.reshape(T, n_kv, d)
        out = np.zeros((T, n_head, d))
        for hh in range(n_head):
            kv = hh // (n_head // n_kv)
            s = q[:, hh, :] @ k[:, kv, :].T / np.sqrt(d) + causal
            s = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, hh, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, kv, :]
        x = x + out.reshape(T, -1) @ W[p + "attn_output.weight"].T
        h = rms_norm(x, W[p + "ffn_norm.weight"], eps)
        if p + "ffn_gate_inp.weight" in W:
            x = x + moe(meta, W, p, h)
            continue
        g, u = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
        x = x + (silu(g) * u) @ W[p + "ffn_down.weight"].T
    x = rms_norm(x, W["output_norm.weight"], eps)
    out_w = W.get("output.weight", W["token_embd.weight"])
    return x @ out_w.T


def forward_gemma3(meta, W, tokens):
    """Gemma 3: embeddings × sqrt(n_embd); RMSNorm (the file's weights already
    include Gemma's +1) before and after attention and FFN; per-head q/k norm;
    NeoX RoPE with base 10000 on local layers; local layers see the last
    `window` keys; GELU-tanh gate; tied output."""
    n_layer = meta["gemma3.block_count"]
    n_head = meta["gemma3.attention.head_count"]
    n_kv = meta["gemma3.attention.head_count_kv"]
    eps = meta["gemma3.attention.layer_norm_rms_epsilon"]
    window = meta["gemma3.attention.sliding_window"]
    pattern = meta["gemma3.attention.sliding_window_pattern"]
    T = len(tokens)
    x = W["token_embd.weight"][tokens] * np.sqrt(W["token_embd.weight"].shape[1])
    d = W["blk.0.attn_q.weight"].shape[0] // n_head
    pos = np.arange(T, dtype=np.float64)
    i, j = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    for il in range(n_layer):
        p = f"blk.{il}."
        local = (il + 1) % pattern != 0
        base = meta["gemma3.rope.freq_base_swa"] if local else meta["gemma3.rope.freq_base"]
        allowed = (j <= i) & ((j > i - window) if local else True)
        mask = np.where(allowed, 0.0, -np.inf)
        h = rms_norm(x, W[p + "attn_norm.weight"], eps)
        q = rms_norm((h @ W[p + "attn_q.weight"].T).reshape(T, n_head, d), W[p + "attn_q_norm.weight"], eps)
        k = rms_norm((h @ W[p + "attn_k.weight"].T).reshape(T, n_kv, d), W[p + "attn_k_norm.weight"], eps)
        v = (h @ W[p + "attn_v.weight"].T).reshape(T, n_kv, d)
        q, k = rope(q, pos, base, True), rope(k, pos, base, True)
        out = np.zeros((T, n_head, d))
        for hh in range(n_head):
            kv = hh // (n_head // n_kv)
            s = q[:, hh, :] @ k[:, kv, :].T / np.sqrt(d) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, hh, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, kv, :]
        a = out.reshape(T, -1) @ W[p + "attn_output.weight"].T
        x = x + rms_norm(a, W[p + "post_attention_norm.weight"], eps)
        h = rms_norm(x, W[p + "ffn_norm.weight"], eps)
        f = (gelu_tanh(h @ W[p + "ffn_gate.weight"].T) * (h @ W[p + "ffn_up.weight"].T)) @ W[p + "ffn_down.weight"].T
        x = x + rms_norm(f, W[p + "post_ffw_norm.weight"], eps)
    x = rms_norm(x, W["output_norm.weight"], eps)
    return x @ W["token_embd.weight"].T


def yarn_rope(x, positions, base, factor, orig_ctx, beta_fast=32.0, beta_slow=1.0):
    """gpt-oss's RoPE (NeoX halves): frequencies blended between base^(-2i/d)
    and that / factor by a ramp between the pairs that turn beta_fast and
    beta_slow times over orig_ctx positions; cos and sin scaled by the
    concentration 0.1 ln(factor) + 1."""
    d = x.shape[-1]
    half = d // 2
    freq = base ** (np.arange(0, d, 2) / d)
    low = half * np.log(orig_ctx / (beta_fast * 2 * np.pi)) / np.log(base)
    high = half * np.log(orig_ctx / (beta_slow * 2 * np.pi)) / np.log(base)
    low, high = max(low, 0.0), min(high, d - 1.0)
    mask = 1 - np.clip((np.arange(half) - low) / (high - low), 0, 1)
    inv = (1.0 / (factor * freq)) * (1 - mask) + (1.0 / freq) * mask
    conc = 0.1 * np.log(factor) + 1.0
    ang = positions[:, None] * inv[None, :]
    c, s = (np.cos(ang) * conc)[:, None, :], (np.sin(ang) * conc)[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def forward_gpt_oss(meta, W, tokens):
    n_layer = meta["gpt-oss.block_count"]
    n_head = meta["gpt-oss.attention.head_count"]
    n_kv = meta["gpt-oss.attention.head_count_kv"]
    eps = meta["gpt-oss.attention.layer_norm_rms_epsilon"]
    window = meta["gpt-oss.attention.sliding_window"]
    base = meta["gpt-oss.rope.freq_base"]
    factor = meta["gpt-oss.rope.scaling.factor"]
    orig_ctx = meta["gpt-oss.rope.scaling.original_context_length"]
    k_used = meta["gpt-oss.expert_used_count"]
    d = meta["gpt-oss.attention.key_length"]
    T = len(tokens)
    x = W["token_embd.weight"][tokens]
    pos = np.arange(T, dtype=np.float64)
    i, j = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    for il in range(n_layer):
        p = f"blk.{il}."
        allowed = (j <= i) & ((j > i - window) if il % 2 == 0 else True)
        mask = np.where(allowed, 0.0, -np.inf)
        h = rms_norm(x, W[p + "attn_norm.weight"], eps)
        q = (h @ W[p + "attn_q.weight"].T + W[p + "attn_q.bias"]).reshape(T, n_head, d)
        k = (h @ W[p + "attn_k.weight"].T + W[p + "attn_k.bias"]).reshape(T, n_kv, d)
        v = (h @ W[p + "attn_v.weight"].T + W[p + "attn_v.bias"]).reshape(T, n_kv, d)
        q, k = yarn_rope(q, pos, base, factor, orig_ctx), yarn_rope(k, pos, base, factor, orig_ctx)
        out = np.zeros((T, n_head, d))
        sinks = W[p + "attn_sinks.weight"]
        for hh in range(n_head):
            kv = hh // (n_head // n_kv)
            s = q[:, hh, :] @ k[:, kv, :].T / np.sqrt(d) + mask
            s = np.concatenate([s, np.full((T, 1), sinks[hh])], axis=1)  # the sink's column
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            out[:, hh, :] = s[:, :-1] @ v[:, kv, :]
        x = x + out.reshape(T, -1) @ W[p + "attn_output.weight"].T + W[p + "attn_output.bias"]
        h = rms_norm(x, W[p + "post_attention_norm.weight"], eps)
        g = h @ W[p + "ffn_gate_inp.weight"].T + W[p + "ffn_gate_inp.bias"]
        f = np.zeros_like(h)
        for t in range(T):
            chosen = np.argsort(-g[t], kind="stable")[:k_used]
            wts = np.exp(g[t, chosen] - g[t, chosen].max())
            wts /= wts.sum()
            for e, we in zip(chosen, wts):
                a = W[p + "ffn_gate_exps.weight"][e] @ h[t] + W[p + "ffn_gate_exps.bias"][e]
                b = W[p + "ffn_up_exps.weight"][e] @ h[t] + W[p + "ffn_up_exps.bias"][e]
                a, b = np.minimum(a, 7.0), np.clip(b, -7.0, 7.0)
                y = (a / (1 + np.exp(-1.702 * a)) * (b + 1)) @ W[p + "ffn_down_exps.weight"][e].T
                f[t] += we * (y + W[p + "ffn_down_exps.bias"][e])
        x = x + f
    x = rms_norm(x, W["output_norm.weight"], eps)
    return x @ W["output.weight"].T


tmp = scratch_dir("headroom-forward-")
rng = np.random.default_rng(5)
n_checked = 0
# The tiny shapes' widths (64, 160) are not multiples of 256, so there the K
# types fall back to 32-element ones; tiny-256 holds them.
CASES = [(shape, wtype) for shape in ["tiny", "tiny-tied", "tiny-qwen2", "tiny-gemma3"]
         for wtype in ["f32", "q8_0", "q4_0", "q4_k", "f16", "iq4_nl", "mxfp4"]]
CASES += [("tiny-256", wtype) for wtype in ["q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_xs"]]
CASES += [(shape, wtype) for shape in ["tiny-mixtral", "tiny-qwen3moe", "tiny-qwen2moe"]
          for wtype in ["f32", "q8_0", "q4_0", "iq4_nl", "mxfp4"]]
CASES += [("tiny-qwen3moe-256", wtype) for wtype in ["q4_k", "q5_k", "q6_k", "q3_k", "iq4_xs"]]
CASES += [("tiny-gpt-oss", wtype) for wtype in ["f32", "mxfp4", "q8_0", "iq4_nl"]]
for shape, wtype in CASES:
    path = os.path.join(tmp, f"{shape}-{wtype}.gguf")
    subprocess.run([headroom_bin(), "synth", shape, path, "--type", wtype, "-q", "--seed", "3"], check=True)
    meta, W = load(path)
    held = {t.tensor_type.name for t in GGUFReader(path).tensors}
    fail_if(shape.endswith("-256") and wtype.upper() not in held, f"{shape} {wtype}: the file holds {held}")
    tokens = rng.integers(3, 512, size=37).tolist()
    out = os.path.join(tmp, "logits.f32")
    # f32 KV so that only the arithmetic order differs; small steps so
    # the KV cache and several forward calls are exercised.
    subprocess.run([headroom_bin(), "eval", "-m", path, "--tokens", ",".join(map(str, tokens)),
                    "--logits-out", out, "--kv-dtype", "f32", "--max-num-batched-tokens", "8",
                    "--block-size", "4", "-t", "2"], check=True, capture_output=True)
    ours = np.fromfile(out, dtype=np.float32).reshape(len(tokens), -1)
    ref = forward(meta, W, tokens)
    err = np.abs(ours - ref).max()
    scale = np.abs(ref).max()
    fail_if(err > 1e-4 * max(1.0, scale), f"{shape} {wtype}: max |diff| {err:.3g} (logit scale {scale:.3g})")
    fail_if(not (ours.argmax(1) == ref.argmax(1)).all(), f"{shape} {wtype}: top-1 differs")
    print(f"{shape:17s} {wtype:5s} max |logit diff| {err:.2e} (scale {scale:.2f})")
    n_checked += 1
print(f"ok: {n_checked} models match the numpy forward")
