#!/usr/bin/env python3
"""`headroom bench --json` on SmolLM2. Independent: the bytes one decode step
reads, counted by hand from the gguf PyPI package's view of the file (every
layer matrix and the output once, one embedding row, and the sequence's f16 K
and V). Consistency checks (the program against its own numbers): the fields
tools read, the means of the runs and each repetition's bandwidth fraction
recomputed from its own output. And the refusals of nothing to measure."""
import json
import math
import os
import statistics
import subprocess
import sys

from gguf import GGUFReader

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, model_path, fail_if  # noqa: E402

N_PROMPT, N_GEN, REPS = 16, 8, 2

path = model_path("smollm2-135m")
out = subprocess.run([headroom_bin(), "bench", "-m", path, "-p", str(N_PROMPT), "-n", str(N_GEN),
                      "-r", str(REPS), "--json"], check=True, capture_output=True, text=True).stdout
j = json.loads(out)

for key in ("pp", "tg"):
    fail_if(len(j[key]["runs"]) != REPS, f"{key}: {len(j[key]['runs'])} runs, not {REPS}")
    fail_if(not all(r > 0 for r in j[key]["runs"]), f"{key}: a run without speed")
    fail_if(not math.isclose(j[key]["tokens_per_s"], statistics.mean(j[key]["runs"]), rel_tol=1e-9),
            f"{key}: tokens_per_s is not the mean of its runs")

# Bytes of one decode step, by hand.
ref = GGUFReader(path)
tensors = {t.name: t for t in ref.tensors}
field = ref.fields
arch = bytes(field["general.architecture"].parts[-1]).decode()


def meta(key):
    return int(field[f"{arch}.{key}"].parts[-1][0])


n_layer, n_embd = meta("block_count"), meta("embedding_length")
n_head, n_head_kv = meta("attention.head_count"), meta("attention.head_count_kv")
head_dim = n_embd // n_head
weights = 0
for i in range(n_layer):
    for m in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
        weights += int(tensors[f"blk.{i}.{m}.weight"].n_bytes)
embd = tensors["token_embd.weight"]
output = tensors.get("output.weight", embd)  # tied embeddings: the output reads the table
n_vocab = int(embd.shape[1])
weights += int(output.n_bytes) + int(embd.n_bytes) // n_vocab
kv_per_token = 2 * n_layer * n_head_kv * head_dim * 2  # K and V, f16
step_bytes = weights + kv_per_token * (N_PROMPT + N_GEN / 2)
fail_if(not math.isclose(j["bytes_per_decode_step"], step_bytes, rel_tol=1e-12),
        f"bytes_per_decode_step {j['bytes_per_decode_step']} != hand count {step_bytes}")

# Each repetition's fraction is its decode speed times those bytes over the
# mean of the bandwidth measured just before and just after it.
fail_if(len(j["bandwidth_runs"]) != REPS or not all(b > 0 for b in j["bandwidth_runs"]),
        "a repetition without a bandwidth measurement")
fail_if(len(j["bandwidth_before_after_runs"]) != REPS, "a repetition without its two probes")
for bw, (before, after) in zip(j["bandwidth_runs"], j["bandwidth_before_after_runs"]):
    fail_if(not (before > 0 and after > 0 and math.isclose(bw, (before + after) / 2, rel_tol=1e-9)),
            f"run bandwidth {bw} is not the mean of its probes {before}, {after}")
for tg, bw, frac in zip(j["tg"]["runs"], j["bandwidth_runs"], j["tg_fraction_runs"]):
    fail_if(not math.isclose(frac, tg * step_bytes / 1e9 / bw, rel_tol=1e-9),
            f"fraction {frac} != {tg} t/s x {step_bytes} B / {bw} GB/s")
fail_if(not math.isclose(j["tg_fraction_of_bandwidth"], statistics.mean(j["tg_fraction_runs"]),
                         rel_tol=1e-9), "tg_fraction_of_bandwidth is not the mean of its runs")
fail_if(not math.isclose(j["bandwidth_gbps"], statistics.mean(j["bandwidth_runs"]), rel_tol=1e-9),
        "bandwidth_gbps is not the mean of its runs")

# Nothing to measure is refused with the reason.
r = subprocess.run([headroom_bin(), "bench", "-m", path, "-p", "0", "-n", "0"], capture_output=True,
                   text=True)
fail_if(r.returncode == 0 or "nothing to measure" not in r.stderr,
        f"-p 0 -n 0: exit {r.returncode}, stderr {r.stderr!r}")
r = subprocess.run([headroom_bin(), "bench", "-m", path, "-r", "0"], capture_output=True, text=True)
fail_if(r.returncode == 0 or "at least 1" not in r.stderr, f"-r 0: exit {r.returncode}, stderr {r.stderr!r}")
print(f"bench: {j['tg']['tokens_per_s']:.1f} t/s decode, {step_bytes:.0f} B per step as counted by hand, "
      f"{100 * j['tg_fraction_of_bandwidth']:.0f}% of {j['bandwidth_gbps']:.1f} GB/s")
