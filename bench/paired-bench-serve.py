#!/usr/bin/env python3
"""Two headroom binaries under the same load, paired: is one slower?

Runs `headroom bench serve --json` with each binary in turn, alternating
which goes first in each pair (so a drift of the machine falls on both),
and prints each pair's total tokens per second and the ratio new / base,
then the median ratio over the pairs. A refactoring that changes no kernel
should land within a few percent of 1.00.

  bench/paired-bench-serve.py --base OLD/headroom [--new build/release/headroom]
      [--pairs 5] [-- bench serve flags...]

Default load: SmolLM2-135M, 32 requests, 8 at once, 128-token prompts, 64
generated tokens each, on 2 threads.
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_LOAD = ["-m", "smollm2-135m", "--requests", "32", "--concurrency", "8",
                "--prompt-len", "128", "--gen-len", "64", "-t", "2"]


def run(binary, flags):
    p = subprocess.run([binary, "bench", "serve", "--json", *flags], capture_output=True, text=True,
                       cwd=root)
    if p.returncode != 0:
        sys.exit(f"{binary} bench serve: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    out = json.loads(p.stdout)
    if out["failed"]:
        sys.exit(f"{binary}: {out['failed']} requests failed")
    return out["total_tokens_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the binary to compare against")
    ap.add_argument("--new", default=str(root / "build" / "release" / "headroom"))
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("flags", nargs="*", help="bench serve flags (after --)")
    a = ap.parse_args()
    flags = a.flags or DEFAULT_LOAD
    print(f"bench serve {' '.join(flags)}")
    print(f"{'pair':>4} {'base tok/s':>11} {'new tok/s':>11} {'new/base':>9}")
    ratios = []
    for i in range(a.pairs):
        if i % 2 == 0:
            base, new = run(a.base, flags), run(a.new, flags)
        else:
            new, base = run(a.new, flags), run(a.base, flags)
        ratios.append(new / base)
        print(f"{i + 1:>4} {base:>11.1f} {new:>11.1f} {ratios[-1]:>9.3f}")
    print(f"median new/base over {a.pairs} pairs: {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
