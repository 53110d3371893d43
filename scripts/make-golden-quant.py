#!/usr/bin/env python3
"""Writes golden vectors for the tensor-type tests from the `gguf` PyPI
package's reference (de)quantization (an implementation independent of
headroom's):

  tests/data/quant/<TYPE>.blocks       raw blocks
  tests/data/quant/<TYPE>.dequant.f32  gguf's dequantization of them
  tests/data/quant/<TYPE>.input.f32    floats given to gguf's quantizer
  tests/data/quant/<TYPE>.quant        gguf's quantization of them

Run with a Python that has gguf==0.19.0 and numpy (tools/ref-env.sh makes one).
"""
import pathlib
import sys

import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

out = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "quant"
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(20261129)

N_BLOCKS = 8
# Offsets of f16 scale fields within a block, so random blocks get finite,
# realistic scales instead of random bits (which may be NaN or huge).
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208], T.Q2_K: [80, 82], T.Q3_K: [108],
}
F32_FIELDS = {T.Q8_K: [0]}
QUANTIZABLE = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
DEQUANT_ONLY = [T.Q4_K, T.Q5_K, T.Q6_K, T.Q2_K, T.Q3_K]


def random_blocks(qtype):
    block_size, block_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(N_BLOCKS, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS.get(qtype, []):
        scale = (rng.standard_normal(N_BLOCKS) * 0.01).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(N_BLOCKS, 2)
    for off in F32_FIELDS.get(qtype, []):
        scale = (rng.standard_normal(N_BLOCKS) * 0.01).astype(np.float32)
        raw[:, off:off + 4] = scale.view(np.uint8).reshape(N_BLOCKS, 4)
    return raw


def write(name, arr):
    (out / name).write_bytes(np.ascontiguousarray(arr).tobytes())


for qtype in QUANTIZABLE:
    block_size, _ = GGML_QUANT_SIZES[qtype]
    n = max(block_size, 32) * N_BLOCKS
    x = (rng.standard_normal(n) * rng.uniform(0.01, 2.0)).astype(np.float32)
    x[:block_size] = 0.0  # an all-zero block exercises the d == 0 path
    x[block_size] = 1.0
    q = quants.quantize(x.reshape(1, n), qtype)
    write(f"{qtype.name}.input.f32", x)
    write(f"{qtype.name}.quant", q)
    write(f"{qtype.name}.blocks", q)
    write(f"{qtype.name}.dequant.f32", quants.dequantize(q, qtype).astype(np.float32))

for qtype in DEQUANT_ONLY:
    raw = random_blocks(qtype)
    write(f"{qtype.name}.blocks", raw)
    write(f"{qtype.name}.dequant.f32", quants.dequantize(raw.reshape(1, -1), qtype).astype(np.float32))

# Added later, after the others so that their files stay as they were.
F16_FIELDS.update({T.IQ4_NL: [0], T.IQ4_XS: [0]})
for qtype in [T.MXFP4]:
    block_size, _ = GGML_QUANT_SIZES[qtype]
    n = block_size * N_BLOCKS
    x = (rng.standard_normal(n) * rng.uniform(0.01, 2.0)).astype(np.float32)
    x[:block_size] = 0.0
    x[block_size] = 1.0
    q = quants.quantize(x.reshape(1, n), qtype)
    write(f"{qtype.name}.input.f32", x)
    write(f"{qtype.name}.quant", q)
    # Random blocks for the dequantizer, with exponents of realistic weights
    # (2^-20 .. 2^4) rather than up to 2^127.
    raw = random_blocks(qtype)
    raw[:, 0] = rng.integers(108, 132, size=N_BLOCKS, dtype=np.uint8)
    raw[0, 0] = 0  # the smallest exponent: a subnormal scale
    write(f"{qtype.name}.blocks", raw)
    write(f"{qtype.name}.dequant.f32", quants.dequantize(raw.reshape(1, -1), qtype).astype(np.float32))
for qtype in [T.IQ4_NL, T.IQ4_XS]:
    raw = random_blocks(qtype)
    write(f"{qtype.name}.blocks", raw)
    write(f"{qtype.name}.dequant.f32", quants.dequantize(raw.reshape(1, -1), qtype).astype(np.float32))

# Q8_K is not in gguf's dequantizers; its equation (x = d * q) is checked by hand in the test.
print(f"wrote golden vectors to {out}", file=sys.stderr)
