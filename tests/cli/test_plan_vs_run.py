#!/usr/bin/env python3
"""`headroom plan` against what `headroom run` reserves and what the process
really takes, on the default model, for five configurations (context ×
concurrency × KV dtype). The plan must predict every term of the engine's
ledger to the byte (the same function sizes both), and plan and ledger must
both be within 3% of the run's RSS growth."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import (PLAN_TERMS as TERMS, fail_if, model_path, plan_and_ledger,  # noqa: E402
                     term_mismatches)

TOLERANCE = 0.03

# (max_model_len, max_num_seqs, kv_dtype, kv_cache_memory or None for --mem-fraction)
CONFIGS = [
    (2048, 1, "f16", "64MiB"),
    (4096, 2, "q8_0", "128MiB"),
    (8192, 4, "f16", "512MiB"),
    (1024, 8, "bf16", "96MiB"),
    # No explicit pool: the budget is 90% of this machine's memory and the pool
    # is what 2 sequences of 2048 tokens can use.
    (2048, 2, "f32", None),
]

model = model_path("smollm2-135m")
failures = 0
print(f"{'config':<34} {'plan':>12} {'ledger':>12} {'rss growth':>12} {'plan/rss':>9}")
for max_len, seqs, kv, pool in CONFIGS:
    flags = ["--max-model-len", str(max_len), "--max-num-seqs", str(seqs), "--kv-dtype", kv,
             "-t", "2"]
    if pool:
        flags += ["--kv-cache-memory", pool]
    with tempfile.TemporaryDirectory() as tmp:
        plan, report = plan_and_ledger(model, flags, tmp)

    label = f"{max_len} × {seqs} {kv} {pool or 'mem-fraction'}"
    failures += term_mismatches(label, plan, report)
    ledger = sum(report["terms"][t]["reserved_bytes"] for t in TERMS)
    if plan["total_bytes"] != ledger:
        print(f"FAIL {label}: plan total {plan['total_bytes']} != ledger {ledger}", file=sys.stderr)
        failures += 1
    rss = report["rss_growth_bytes"]
    for name, value in (("plan", plan["total_bytes"]), ("ledger", ledger)):
        if abs(value - rss) > TOLERANCE * rss:
            print(f"FAIL {label}: {name} {value} is {100 * (value - rss) / rss:+.1f}% of the RSS "
                  f"growth {rss}", file=sys.stderr)
            failures += 1
    print(f"{label:<34} {plan['total_bytes']:>12} {ledger:>12} {rss:>12} "
          f"{100 * (plan['total_bytes'] - rss) / rss:>+8.2f}%")

fail_if(failures > 0, f"{failures} mismatches")
print(f"ok: {len(CONFIGS)} configurations, plan == ledger per term, within "
      f"{100 * TOLERANCE:.0f}% of RSS")
