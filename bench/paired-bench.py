#!/usr/bin/env python3
"""Two headroom binaries on the same benchmark, paired: is one slower?

Runs `headroom <bench command> --json` with each binary in turn, alternating
which goes first in each pair (so a drift of the machine falls on both), and
prints each pair's numbers and the ratio new / base, then the median ratio
over the pairs. A change that touches no kernel, or rearranges one without
changing what it computes, should land within a few percent of 1.00.

  bench/paired-bench.py --base OLD/headroom [--new build/release/headroom] [--pairs 5]
      [--metric KEY[,KEY...]] [-- COMMAND ARGS...]

Default: `bench serve` on SmolLM2-135M (32 requests, 8 at once, 128-token
prompts, 64 generated tokens each, 2 threads), metric total_tokens_per_s.
For `bench`, e.g. --metric pp.tokens_per_s,tg.tokens_per_s -- bench -m X.gguf -p 128 -n 64.
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent
DEFAULT = ["bench", "serve", "-m", "smollm2-135m", "--requests", "32", "--concurrency", "8",
           "--prompt-len", "128", "--gen-len", "64", "-t", "2"]


def run(binary, command, metrics):
    p = subprocess.run([binary, *command, "--json"], capture_output=True, text=True, cwd=root)
    if p.returncode != 0:
        sys.exit(f"{binary} {' '.join(command)}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    out = json.loads(p.stdout)
    if out.get("failed"):
        sys.exit(f"{binary}: {out['failed']} requests failed")
    values = []
    for key in metrics:
        v = out
        for part in key.split("."):
            v = v[part]
        values.append(float(v))
    return values


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the binary to compare against")
    ap.add_argument("--new", default=str(root / "build" / "release" / "headroom"))
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--metric", default="total_tokens_per_s", help="JSON keys, dotted, comma-separated")
    ap.add_argument("command", nargs="*", help="the benchmark command and its flags (after --)")
    a = ap.parse_args()
    command = a.command or DEFAULT
    metrics = a.metric.split(",")
    print(f"headroom {' '.join(command)}")
    ratios = {m: [] for m in metrics}
    for i in range(a.pairs):
        if i % 2 == 0:
            base, new = run(a.base, command, metrics), run(a.new, command, metrics)
        else:
            new, base = run(a.new, command, metrics), run(a.base, command, metrics)
        cells = []
        for m, b, n in zip(metrics, base, new):
            ratios[m].append(n / b)
            cells.append(f"{m} {b:.1f} -> {n:.1f} ({n / b:.3f})")
        print(f"pair {i + 1}: " + "; ".join(cells))
    for m in metrics:
        r = ratios[m]
        print(f"{m}: median new/base over {a.pairs} pairs {statistics.median(r):.3f} "
              f"(range {min(r):.3f}-{max(r):.3f})")


if __name__ == "__main__":
    main()
