#!/usr/bin/env python3
"""Well-formed GGUF files whose hyperparameters are wrong: a small valid model
made by `headroom synth`, rewritten by the gguf package with one metadata
value changed. `run` and `plan` must never die of a signal or hang, and must
refuse what the forward pass cannot use (NaN or negative RoPE base and RMS
epsilon, a layer count past the file's tensors, a head size the RoPE does not
fit, expert counts the router cannot use, YaRN parameters that are not
finite or positive) with one `error:` line that names the key. A Hugging Face config with an absurd layer count is refused by
`plan` the same way."""
import json
import math
import os
import subprocess
import sys

from gguf import GGUFReader, GGUFValueType as T

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, fail_if, rewrite_gguf, scratch_dir  # noqa: E402

tmp = scratch_dir("headroom-hparams-")
valid = os.path.join(tmp, "tiny.gguf")
subprocess.run([headroom_bin(), "synth", "tiny", valid, "--type", "q8_0", "-q"], check=True)
reader = GGUFReader(valid)


def rewrite(dst, changes):
    rewrite_gguf(reader, dst, changes)


def headroom(args):
    try:
        p = subprocess.run([headroom_bin()] + args, capture_output=True, text=True,
                           errors="replace", timeout=30)
    except subprocess.TimeoutExpired:
        fail_if(True, f"{args}: still running after 30 s")
    fail_if(p.returncode < 0, f"{args}: killed by signal {-p.returncode}")
    return p.returncode, [l for l in p.stderr.splitlines() if l.strip()]


def check(name, changes, refused_naming=None, must_run=False):
    """refused_naming: run and plan must both exit 1 with one error line
    containing this text. must_run: both must exit 0. Otherwise each may run
    (0) or refuse (1), never crash."""
    path = os.path.join(tmp, name + ".gguf")
    rewrite(path, changes)
    for cmd in (["run", "-m", path, "-p", "hello world", "-n", "3", "--temp", "0"],
                ["plan", "-m", path, "--device", "cpu", "--device-memory", "4GiB"]):
        rc, lines = headroom(cmd)
        what = f"{name}: {cmd[0]}"
        fail_if(rc not in (0, 1), f"{what}: exit {rc}")
        fail_if(must_run and rc != 0, f"{what}: exit {rc}: {lines}")
        if rc == 1:
            errors = [l for l in lines if l.startswith("error: ")]
            fail_if(len(errors) != 1, f"{what}: expected one error line: {lines}")
        if refused_naming is not None:
            fail_if(rc != 1, f"{what}: exit {rc}, expected a refusal naming {refused_naming}")
            fail_if(refused_naming not in errors[0],
                    f"{what}: '{refused_naming}' not in {errors[0]}")
        if os.environ.get("VERBOSE"):
            print(f"{what}: rc {rc} {lines[-1:]}")
    os.remove(path)


U32, F32, STR = T.UINT32, T.FLOAT32, T.STRING
cases = 0
# The valid file itself runs and plans.
check("valid", {}, must_run=True)
cases += 1
# Floats the forward pass divides by or takes powers of: each refused by name.
for value in (0.0, -1.0, math.nan, math.inf, 1e-40):
    check(f"freq-base-{value}", {"llama.rope.freq_base": (value, F32)}, "llama.rope.freq_base")
    cases += 1
for value in (-1.0, math.nan, math.inf, 1e-40):
    check(f"scaling-{value}",
          {"llama.rope.scaling.type": ("linear", STR), "llama.rope.scaling.factor": (value, F32)},
          "llama.rope.scaling.factor")
    cases += 1
# A linear scaling factor of 0 means no scaling (as llama.cpp reads it).
check("scaling-0", {"llama.rope.scaling.type": ("linear", STR),
                    "llama.rope.scaling.factor": (0.0, F32)}, must_run=True)
cases += 1
for value in (-1.0, math.nan, -math.inf, math.inf, 1e-40):
    check(f"eps-{value}", {"llama.attention.layer_norm_rms_epsilon": (value, F32)},
          "llama.attention.layer_norm_rms_epsilon")
    cases += 1
# Layer counts past the file's tensors: refused at once, not after sizing
# per-layer tables (2^30 layers took plan over a minute).
for value in (3, 4096, 1 << 30, (1 << 32) - 1):
    check(f"layers-{value}", {"llama.block_count": (value, U32)}, "block_count")
    cases += 1
# One part of a split model: refused as such, not as a damaged file.
check("split", {"split.count": (3, T.UINT16), "split.no": (0, T.UINT16)}, "split into 3 files")
cases += 1
# Head geometry the RoPE cannot use.
for value in (1, 3, 18, 4096):
    check(f"rot-{value}", {"llama.rope.dimension_count": (value, U32)}, "rope.dimension_count")
    cases += 1
# Everything else: a clean run or one clear refusal.
sweep = {
    "llama.attention.head_count": (0, 1, 3, 8, 1 << 20, (1 << 32) - 1),
    "llama.attention.head_count_kv": (0, 1, 3, 4, (1 << 32) - 1),
    "llama.attention.key_length": (0, 1, 17, 4096, (1 << 32) - 1),
    "llama.attention.value_length": (0, 1, 17, 4096),
    "llama.context_length": (0, 1, 7, (1 << 32) - 1),
    "llama.embedding_length": (0, 1, 63, 65, (1 << 32) - 1),
    "llama.feed_forward_length": (0, 1, 161),
    "llama.vocab_size": (0, 511, 513),
    "tokenizer.ggml.bos_token_id": (512, (1 << 32) - 1),
    "tokenizer.ggml.eos_token_id": (512,),
}
for key, values in sweep.items():
    for value in values:
        check(f"{key}-{value}", {key: (value, U32)})
        cases += 1
# Text fields far longer than any name: the refusal quotes the start and the
# length, not 100 kB of the file.
bpe = {"tokenizer.ggml.model": ("gpt2", STR), "tokenizer.ggml.merges": (["a b"], T.ARRAY, STR)}
for key, others in (("tokenizer.ggml.model", {}), ("tokenizer.ggml.pre", bpe)):
    path = os.path.join(tmp, "long.gguf")
    rewrite(path, {**others, key: ("z" * 100000, STR)})
    rc, lines = headroom(["run", "-m", path, "-p", "hi", "-n", "1"])
    fail_if(rc != 1 or len(lines) != 1, f"long {key}: exit {rc}, {len(lines)} lines")
    fail_if(key not in lines[0] or "(100000 bytes)" not in lines[0] or len(lines[0]) > 2000,
            f"long {key}: {lines[0][:500]}")
    cases += 1
# A mixture of experts (a llama with 8 experts, 2 per token): counts the
# router cannot use are refused by name; counts and widths the tensors do not
# match run or are refused cleanly.
valid = os.path.join(tmp, "tiny-mixtral.gguf")
subprocess.run([headroom_bin(), "synth", "tiny-mixtral", valid, "--type", "q8_0", "-q"], check=True)
reader = GGUFReader(valid)
check("moe-valid", {}, must_run=True)
cases += 1
for value in (0, 9, 65, (1 << 32) - 1):
    check(f"experts-used-{value}", {"llama.expert_used_count": (value, U32)}, "expert_used_count")
    cases += 1
for value in (1, 4096, (1 << 32) - 1):
    check(f"experts-{value}", {"llama.expert_count": (value, U32)}, "expert_count")
    cases += 1
check("expert-width-0", {"llama.expert_feed_forward_length": (0, U32)},
      "expert_feed_forward_length")
cases += 1
for key, values in {"llama.expert_count": (2, 7, 9),
                    "llama.expert_feed_forward_length": (1, 95, 97),
                    "llama.expert_shared_feed_forward_length": (1, 96)}.items():
    for value in values:
        check(f"{key}-{value}", {key: (value, U32)})
        cases += 1
# gpt-oss: YaRN RoPE scaling and windows; parameters the rotation cannot
# use are refused by name, odd but usable ones run or are refused cleanly.
valid = os.path.join(tmp, "tiny-gpt-oss.gguf")
subprocess.run([headroom_bin(), "synth", "tiny-gpt-oss", valid, "--type", "mxfp4", "-q"], check=True)
reader = GGUFReader(valid)
F32 = T.FLOAT32
check("gpt-oss-valid", {}, must_run=True)
cases += 1
for key, value in (("rope.scaling.factor", math.nan), ("rope.scaling.factor", -2.0),
                   ("rope.scaling.factor", math.inf), ("rope.scaling.yarn_beta_fast", 0.0),
                   ("rope.scaling.yarn_beta_slow", math.nan)):
    check(f"gpt-oss-{key}-{value}", {f"gpt-oss.{key}": (value, F32)}, key)
    cases += 1
check("gpt-oss-orig-ctx-0", {"gpt-oss.rope.scaling.original_context_length": (0, U32)},
      "original_context_length")
cases += 1
for key, value in (("rope.scaling.original_context_length", (1 << 32) - 1),
                   ("attention.sliding_window", (1 << 32) - 1), ("attention.sliding_window", 1),
                   ("attention.sliding_window_pattern", 0), ("attention.sliding_window_pattern", 1),
                   ("expert_count", 4), ("expert_used_count", 8)):
    check(f"gpt-oss-{key}-{value}", {f"gpt-oss.{key}": (value, U32)})
    cases += 1
for value in (0.5, 1e30):
    check(f"gpt-oss-factor-{value}", {"gpt-oss.rope.scaling.factor": (value, F32)}, must_run=True)
    cases += 1
# The planner's Hugging Face path: an absurd layer count is refused quickly.
config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
          "num_hidden_layers": 1 << 30, "num_attention_heads": 32, "num_key_value_heads": 4,
          "intermediate_size": 5632, "vocab_size": 32000, "max_position_embeddings": 2048,
          "torch_dtype": "bfloat16"}
config_path = os.path.join(tmp, "config.json")
with open(config_path, "w") as f:
    json.dump(config, f)
rc, lines = headroom(["plan", "--hf-config", config_path, "--device", "cpu"])
fail_if(rc != 1 or "num_hidden_layers" not in lines[-1], f"hf config, 2^30 layers: {rc} {lines}")
cases += 1
print(f"ok: {cases} files with wrong hyperparameters, each a clean run or one clear refusal")
