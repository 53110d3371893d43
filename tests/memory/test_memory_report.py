#!/usr/bin/env python3
"""`headroom run --memory-report-json` on SmolLM2: for several configurations
the predicted terms equal the ledger's reserved bytes exactly, and the
ledger's total is within 3% of the process's measured RSS growth, plus one
2 MiB page: with transparent huge pages the kernel maps anonymous memory in
2 MiB pages, so RSS moves in steps that size whatever was allocated. Also:
q8_0 KV takes 68/128 of f16's bytes per token (two 34-byte blocks per
64-element row instead of 128 bytes), so the KV term halves within block
rounding."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, model_path, fail_if, scratch_dir  # noqa: E402

path = model_path("smollm2-135m")
tmp = scratch_dir("headroom-memreport-")
CONFIGS = [
    ["--max-model-len", "2048", "--kv-dtype", "f16"],
    ["--max-model-len", "2048", "--kv-dtype", "q8_0"],
    ["--max-model-len", "8192", "--max-num-seqs", "4", "--kv-dtype", "f16"],
    ["--max-model-len", "4096", "--kv-cache-memory", "300MiB", "--kv-dtype", "bf16"],
]
reports = []
for i, flags in enumerate(CONFIGS):
    out = os.path.join(tmp, f"r{i}.json")
    subprocess.run([headroom_bin(), "run", "-m", path, "-p", "Hello", "-n", "2", "--temp", "0", "-q",
                    "--memory-report-json", out] + flags, check=True, capture_output=True)
    r = json.load(open(out))
    reports.append(r)
    reserved = sum(t["reserved_bytes"] for t in r["terms"].values())
    for term, pred in r["predicted"].items():
        fail_if(pred != r["terms"][term]["reserved_bytes"],
                f"{flags}: {term} predicted {pred} != reserved {r['terms'][term]['reserved_bytes']}")
    growth = r["rss_growth_bytes"]
    err = (growth - reserved) / reserved
    slack = 0.03 + 2 * 2**20 / reserved
    print(f"{' '.join(flags):55s} ledger {reserved / 2**20:8.1f} MiB  RSS growth {growth / 2**20:8.1f} MiB  "
          f"({err * 100:+.2f}%)")
    fail_if(abs(err) > slack,
            f"{flags}: RSS growth {growth} is {err * 100:.1f}% off the ledger's {reserved} "
            f"(allowed: {slack * 100:.1f}%)")

f16, q8 = reports[0], reports[1]
ratio = q8["kv_bytes_per_token"] / f16["kv_bytes_per_token"]
fail_if(ratio != 68 / 128, f"q8_0/f16 KV per token {ratio}")
kv_ratio = q8["terms"]["kv_cache"]["reserved_bytes"] / f16["terms"]["kv_cache"]["reserved_bytes"]
print(f"q8_0 / f16 KV term: {kv_ratio:.4f} (68/128 = {68 / 128:.4f})")
fail_if(abs(kv_ratio - 68 / 128) > 0.01, "q8_0 KV term is not 68/128 of f16's")
print("ok")
