#!/usr/bin/env python3
"""`headroom bench --json` on SmolLM2. Independent: the bytes one decode step
reads, counted by hand from the gguf PyPI package's view of the file (every
layer matrix and the output once, one embedding row, and the sequence's f16 K
and V). Consistency checks (the program against its own numbers): the fields
tools read, the means of the runs and each repetition's bandwidth fraction
recomputed from its own output. And the refusals of nothing to measure and
of a decode prefetch distance that is no whole number of cache lines.
HEADROOM_CPU_PROFILE's table against the same hand count: the weight bytes
its matmul rows read, and the calls of the per-layer ops, for the number of
forward steps the bench runs (a warm-up of min(p, 32) + min(n, 4) tokens,
then each repetition's p + n, one step per prompt and one per token)."""
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

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

# The profile: one prompt step and one step per generated token, warm-up included.
P_PROF, N_PROF = 16, 8
n_forward = (1 + min(N_PROF, 4)) + (1 + N_PROF)
t0 = time.monotonic()
r = subprocess.run([headroom_bin(), "bench", "-m", path, "-p", str(P_PROF), "-n", str(N_PROF), "-r", "1",
                    "--json"], check=True, capture_output=True, text=True,
                   env={**os.environ, "HEADROOM_CPU_PROFILE": "1"})
wall_ms = (time.monotonic() - t0) * 1e3
head = re.search(r"^cpu profile: ([0-9.]+) ms in (\d+) op calls$", r.stderr, re.M)
fail_if(not head, f"no profile header in stderr: {r.stderr!r}")
row_re = re.compile(r"^\s+([0-9.]+) ms\s+([0-9.]+)% +(\d+) calls  ([^:\n]+?)(?:: ([0-9.]+) MB of weights read, "
                    r"([0-9.]+) GB/s)?$", re.M)
rows = {m.group(4): m for m in row_re.finditer(r.stderr)}
fail_if(not rows, f"no profile rows: {r.stderr!r}")
calls = {name: int(m.group(3)) for name, m in rows.items()}
fail_if(sum(calls.values()) != int(head.group(2)), "the rows' calls do not add up to the header's")
fail_if(not math.isclose(sum(float(m.group(1)) for m in rows.values()), float(head.group(1)),
                         abs_tol=0.05 * len(rows) + 0.05), "the rows' times do not add up to the header's")
fail_if(float(head.group(1)) > wall_ms, f"ops took {head.group(1)} ms in a {wall_ms:.0f} ms process")
for name, want in (("attention", n_layer * n_forward), ("rmsnorm", (2 * n_layer + 1) * n_forward),
                   ("embedding rows", n_forward), ("store K/V", n_layer * n_forward)):
    fail_if(calls.get(name) != want, f"profile: {name} {calls.get(name)} calls, {want} by hand")
matmul_rows = {name: m for name, m in rows.items() if name.startswith("matmul ")}
file_types = {t.tensor_type.name for t in ref.tensors}
# (type, rows, cols) of each 2-D tensor; gguf lists a shape innermost first.
file_shapes = {(t.tensor_type.name, int(t.shape[1]), int(t.shape[0])) for t in ref.tensors
               if len(t.shape) == 2}
for name, m in matmul_rows.items():
    kind = re.fullmatch(r"matmul (\w+), (1 token|batch), (\d+(?:\+\d+)*) x (\d+)", name)
    fail_if(not kind or kind.group(1) not in file_types, f"profile row {name!r}: not a type of the file")
    for n_rows in kind.group(3).split("+"):
        fail_if((kind.group(1), int(n_rows), int(kind.group(4))) not in file_shapes,
                f"profile row {name!r}: {n_rows} x {kind.group(4)} is no {kind.group(1)} matrix of the file")
    fail_if(m.group(5) is None, f"profile row {name!r} without its weight bytes")
read_mb = sum(float(m.group(5)) for m in matmul_rows.values())
# Every layer matrix and the output once a step (the embedding row is no matmul's).
want_mb = n_forward * (weights - int(embd.n_bytes) // n_vocab) / 1e6
fail_if(abs(read_mb - want_mb) > 0.05 * len(matmul_rows) + 1e-6,
        f"profile: the matmuls read {read_mb} MB, {want_mb:.2f} MB by hand")
for env in ({}, {"HEADROOM_CPU_PROFILE": "0"}):
    r = subprocess.run([headroom_bin(), "bench", "-m", path, "-p", "4", "-n", "2", "-r", "1",
                        "--json"], check=True, capture_output=True, text=True,
                       env={**{k: v for k, v in os.environ.items() if k != "HEADROOM_CPU_PROFILE"}, **env})
    fail_if("cpu profile" in r.stderr, f"a profile without HEADROOM_CPU_PROFILE=1 ({env})")

# The decode prefetch distance it ran with, as HEADROOM_DECODE_PREFETCH sets
# it; a distance that is no whole number of cache lines is refused by name.
fail_if(not isinstance(j.get("decode_prefetch_bytes"), int), "no decode_prefetch_bytes in the JSON")
for value, want in (("1024", 1024), ("0", 0)):
    r = subprocess.run([headroom_bin(), "bench", "-m", path, "-p", "0", "-n", "2", "-r", "1", "--json"],
                       check=True, capture_output=True, text=True,
                       env={**os.environ, "HEADROOM_DECODE_PREFETCH": value})
    got = json.loads(r.stdout)["decode_prefetch_bytes"]
    fail_if(got != want, f"HEADROOM_DECODE_PREFETCH={value}: ran with {got}")
r = subprocess.run([headroom_bin(), "bench", "-m", path, "-p", "0", "-n", "2", "-r", "1"],
                   capture_output=True, text=True, env={**os.environ, "HEADROOM_DECODE_PREFETCH": "100"})
fail_if(r.returncode == 0 or "HEADROOM_DECODE_PREFETCH=100" not in r.stderr or "Traceback" in r.stderr
        or r.returncode < 0, f"HEADROOM_DECODE_PREFETCH=100: exit {r.returncode}, stderr {r.stderr!r}")

# Nothing to measure is refused with the reason.
r = subprocess.run([headroom_bin(), "bench", "-m", path, "-p", "0", "-n", "0"], capture_output=True,
                   text=True)
fail_if(r.returncode == 0 or "nothing to measure" not in r.stderr,
        f"-p 0 -n 0: exit {r.returncode}, stderr {r.stderr!r}")
r = subprocess.run([headroom_bin(), "bench", "-m", path, "-r", "0"], capture_output=True, text=True)
fail_if(r.returncode == 0 or "at least 1" not in r.stderr, f"-r 0: exit {r.returncode}, stderr {r.stderr!r}")
print(f"bench: {j['tg']['tokens_per_s']:.1f} t/s decode, {step_bytes:.0f} B per step as counted by hand, "
      f"{100 * j['tg_fraction_of_bandwidth']:.0f}% of {j['bandwidth_gbps']:.1f} GB/s")
