#!/usr/bin/env python3
"""`headroom doctor` end to end: a log file and standard input, text and
--json, a GGUF or a built-in model given with -m, and errors."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, fail_if, scratch_dir  # noqa: E402

tmp = scratch_dir("headroom-doctor-")
log_path = os.path.join(tmp, "oom.log")
# From https://github.com/kerrj/lerf/issues/73 and https://github.com/QwenLM/Qwen3/issues/295
LOG = (
    "step 1500\n"
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a "
    "total capacty of 23.65 GiB of which 1.66 GiB is free. Including non-PyTorch memory, this "
    "process has 20.81 GiB memory in use. Of the allocated memory 12.09 GiB is allocated by "
    "PyTorch, and 4.84 GiB is reserved by PyTorch but unallocated.\r\n"
    "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
    "that can be stored in KV cache (7344). Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine.\n"
)
with open(log_path, "w", newline="") as f:
    f.write(LOG)


def run(args, stdin=None):
    p = subprocess.run([headroom_bin(), "doctor", *args], input=stdin, capture_output=True,
                       text=True, timeout=60)
    fail_if(p.returncode < 0, f"{args}: killed by signal {-p.returncode}")
    return p


# Text: the cause comes first, then the numbers, then the fixes.
p = run([log_path])
fail_if(p.returncode != 0, f"text: exit {p.returncode}: {p.stderr}")
out = p.stdout
fail_if(not out.startswith("[1] Fragmentation: 3.00 GiB could not be allocated"), out[:200])
fail_if(out.find("numbers") > out.find("fixes"), "numbers must come before fixes")
fail_if("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" not in out, out)
fail_if("--max-model-len 7344" not in out, out)

# JSON from a file and from standard input are the same.
p_file = run([log_path, "--json"])
p_stdin = run(["-", "--json"], stdin=LOG)
fail_if(p_file.returncode != 0 or p_stdin.returncode != 0, p_file.stderr + p_stdin.stderr)
doc = json.loads(p_file.stdout)
fail_if(doc != json.loads(p_stdin.stdout), "file and stdin differ")
fs = doc["findings"]
fail_if(len(fs) != 2, f"{len(fs)} findings")
keys = ["framework", "class", "line", "requested_bytes", "total_bytes", "free_bytes",
        "this_process_bytes", "other_processes_bytes", "reserved_unallocated_bytes",
        "deficit_bytes", "fixes"]
for f in fs:
    for k in keys:
        fail_if(k not in f, f"missing key {k}")
fail_if(fs[0]["class"] != "fragmentation" or fs[0]["line"] != 2, fs[0])
fail_if(fs[0]["requested_bytes"] != 3 * 2**30, fs[0]["requested_bytes"])
fail_if(fs[1]["class"] != "kv_cache_too_large" or fs[1]["requested_bytes"] is not None, fs[1])
fail_if(fs[1]["kv_cache_tokens"] != 7344, fs[1])
fail_if(not all(set(x) == {"action", "command", "effect"} for x in fs[0]["fixes"]), fs[0]["fixes"])

# A log without out-of-memory errors.
p = run(["-", "--json"], stdin="INFO memory usage 2.1 GiB\nKV cache size = 512 MiB\n")
fail_if(p.returncode != 0 or json.loads(p.stdout)["findings"] != [], p.stdout)
p = run(["-"], stdin="INFO memory usage 2.1 GiB\n")
fail_if("No out-of-memory message in 1 lines." not in p.stdout, p.stdout)

# --device-memory fills in the total a llama.cpp log does not state.
ggml = ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4480.00 MiB on device 3: "
        "cudaMalloc failed: out of memory\nllama_kv_cache_init: failed to allocate buffer for kv cache\n")
p = run(["-", "--json", "--device-memory", "24GiB"], stdin=ggml)
f = json.loads(p.stdout)["findings"][0]
fail_if(f["total_bytes"] != 24 * 2**30 or f["class"] != "kv_cache_too_large", f)

# -m with a GGUF: the advice uses the model's real sizes.
gguf = os.path.join(tmp, "tiny.gguf")
subprocess.run([headroom_bin(), "synth", "tiny", gguf, "--type", "f16", "-q"], check=True)
# The tiny model's 151,872 parameters take 297.25 KiB (304,384 bytes, mostly
# F16). On a 256 KiB device, Q8_0 (the planner's estimate, tensor by tensor
# with the norms kept F32: 162,304 bytes = 158.50 KiB) is the largest type
# that leaves a quarter of it free.
ggml_load = ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 0.29 MiB on device 0: "
             "cudaMalloc failed: out of memory\n"
             "alloc_tensor_range: failed to allocate CUDA0 buffer of size 304384\n"
             "llama_model_load: error loading model: unable to allocate CUDA0 buffer\n")
p = run(["-", "-m", gguf, "--device-memory", "256KiB"], stdin=ggml_load)
fail_if(p.returncode != 0, p.stderr)
fail_if("weights_too_large" not in p.stdout, p.stdout)
fail_if("in F16 needs 297.25 KiB of weights; this GPU has 256.00 KiB: use Q8_0, 158.50 KiB"
        not in p.stdout, p.stdout)
fail_if("llama-quantize model.gguf model-Q8_0.gguf Q8_0" not in p.stdout, p.stdout)


# Errors: one line on stderr, exit status 1.
def check_error(args, expect, stdin=""):
    p = run(args, stdin=stdin)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    fail_if(p.returncode != 1, f"{args}: exit {p.returncode}")
    fail_if(len(lines) != 1 or expect not in lines[0], f"{args}: {p.stderr}")


check_error([os.path.join(tmp, "missing.log")], "cannot read")
check_error(["-", "--hf-config", os.path.join(tmp, "missing-config.json")], "missing-config.json")
check_error(["-", "-m", "no-such-model"], "built-in models for planning")

# -m with a built-in model: Qwen2.5-14B in bf16 has 14.77e9 parameters (its
# model card), 2 bytes each: 27.5 GiB of weights, which an 11.75 GiB GPU
# cannot hold; the advice names that number.
torch_oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 136.00 MiB. GPU 0 has a total "
             "capacity of 11.75 GiB of which 50.56 MiB is free. Including non-PyTorch memory, this process "
             "has 11.69 GiB memory in use. Of the allocated memory 11.52 GiB is allocated by PyTorch, and "
             "32.97 MiB is reserved by PyTorch but unallocated.\n")
p = run(["-", "-m", "qwen2.5-14b"], stdin=torch_oom)
fail_if(p.returncode != 0, p.stderr)
fail_if("weights_too_large" not in p.stdout, p.stdout)
fail_if("needs 27.5" not in p.stdout, p.stdout)
check_error(["-", "--device-memory", "lots"], "--device-memory")
# One accounting (a consistency check between two commands): every weight
# size the doctor quotes for a quantization is `plan --compare-quant`'s for
# that type, for PyTorch (bitsandbytes), llama.cpp (GGUF) and vLLM advice.
import json
import re

plan = subprocess.run([headroom_bin(), "plan", "-m", "qwen2.5-14b", "--device-memory", "24GiB",
                       "--compare-quant", "--json"], capture_output=True, text=True)
fail_if(plan.returncode != 0, plan.stderr)
planned = {r["weight_type"]: r["weights_bytes"] for r in json.loads(plan.stdout)["compare_quant"]
           if r.get("weight_type")}
TYPE = {"Q8_0": "q8_0", "Q6_K": "q6_k", "Q5_K_M": "q5_k_m", "Q4_K_M": "q4_k_m", "Q4_0": "q4_0",
        "FP8": "fp8", "AWQ 4-bit": "awq", "8-bit (bitsandbytes)": "fp8",
        "4-bit NF4 (bitsandbytes)": "nf4"}


def two_decimals(n):
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    v, u = float(n), 0
    while v >= 1024 and u < 4:
        v, u = v / 1024, u + 1
    return f"{v:.2f} {units[u]}"


ggml_oom = ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 28172.00 MiB on device 0: "
            "cudaMalloc failed: out of memory\n"
            "llama_model_load: error loading model: unable to allocate CUDA0 buffer\n")
vllm_oom = ("ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine.\n")
quoted = 0
for log, memory in [(torch_oom, "11.75GiB"), (ggml_oom, "24GiB"), (vllm_oom, "24GiB"),
                    (ggml_oom, "12GiB")]:
    p = run(["-", "-m", "qwen2.5-14b", "--device-memory", memory, "--json"], stdin=log)
    fail_if(p.returncode != 0, p.stderr)
    for f in json.loads(p.stdout)["findings"]:
        for fix in f["fixes"]:
            for name, size in re.findall(r"(?:use|even) ([^,(]+?)(?:,| \() ?\(?(\d+\.\d\d [KMGT]?i?B)",
                                         fix["effect"]):
                fail_if(name not in TYPE, f"unknown type {name!r} in {fix['effect']!r}")
                want = two_decimals(planned[TYPE[name]])
                fail_if(size != want, f"doctor says {name} takes {size}, plan says {want}")
                quoted += 1
fail_if(quoted < 3, f"only {quoted} quantized sizes quoted")
print(f"doctor cli: {quoted} quantized weight sizes equal plan --compare-quant's")

# -m with a latent-attention GGUF (DeepSeek-V3's attention in two small
# layers): a token's cache is the compressed latent, kv_lora_rank 512 plus
# the 64 RoPE dimensions, in F16: 2 layers x 576 x 2 B = 2304 bytes, not
# the 2 x 4 heads x (192 + 128) x 2 B = 5120 of separate keys and values.
# The doctor's numbers for vLLM's "max seq len ... KV cache" refusal are
# that per-token size, as `plan` counts it.
import numpy as np  # noqa: E402
import gguf as gguf_py  # noqa: E402

mla = os.path.join(tmp, "mla.gguf")
w = gguf_py.GGUFWriter(mla, "deepseek2")
for key, value in [("block_count", 2), ("embedding_length", 64), ("attention.head_count", 4),
                   ("attention.head_count_kv", 4), ("context_length", 4096), ("feed_forward_length", 128),
                   ("attention.key_length", 192), ("attention.value_length", 128),
                   ("attention.kv_lora_rank", 512), ("rope.dimension_count", 64)]:
    w.add_uint32(f"deepseek2.{key}", value)
w.add_tensor("token_embd.weight", np.zeros((32, 64), dtype=np.float32))
w.add_tensor("blk.1.attn_norm.weight", np.ones(64, dtype=np.float32))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
plan = subprocess.run([headroom_bin(), "plan", "-m", mla, "--device", "cpu", "--max-model-len", "4096",
                       "--json"], capture_output=True, text=True)
fail_if(plan.returncode != 0, plan.stderr)
planned_kv = json.loads(plan.stdout)["terms"]["kv_cache"]["bytes_per_token"]
fail_if(planned_kv != 2304, f"plan counts {planned_kv} KV bytes a token of the latent model, not 2304")
max_len_log = ("ValueError: The model's max seq len (32768) is larger than the maximum number of "
               "tokens that can be stored in KV cache (7344). Try increasing "
               "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n")
p = run(["-", "-m", mla, "--json"], stdin=max_len_log)
fail_if(p.returncode != 0, p.stderr)
found = [f for f in json.loads(p.stdout)["findings"] if f.get("requested_bytes")]
fail_if(not found, f"no finding with the KV bytes: {p.stdout}")
fail_if(found[0]["requested_bytes"] != 32768 * 2304 or found[0]["free_bytes"] != 7344 * 2304,
        f"doctor: requested {found[0]['requested_bytes']}, free {found[0]['free_bytes']}; the planner's "
        f"KV a token gives {32768 * 2304} and {7344 * 2304}")
print("doctor cli: a latent-attention model's KV quoted as the planner counts it (2304 bytes a token)")
print("doctor cli: ok")
