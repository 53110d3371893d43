#!/usr/bin/env python3
"""Batched decoding throughput against llama.cpp, interleaved in one run.

32 concurrent sequences, 128-token prompts, 64 generated tokens each, on a
TinyLlama-1.1B-shaped Q4_0 model with random weights (`headroom synth`):
  llama.cpp: llama-batched-bench -npp 128 -ntg 64 -npl 32 (its batched path)
  headroom:  headroom bench serve --requests 32 --concurrency 32
             --prompt-len 128 --gen-len 64 --max-num-seqs 32
Both report total tokens (prompt + generated) per second over the whole run;
the ratio is headroom / llama.cpp. Also prints how many concurrent
2048-token sequences each engine holds in the same KV memory.

  bench/throughput-vs-llama-cpp.py [--reps 3] [--threads N]
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent
headroom = root / "build" / "release" / "headroom"
llama_bin = root / ".ref" / "llama-bin"
models = pathlib.Path(os.environ.get("HEADROOM_BENCH_MODELS", root / "build" / "bench-models"))


def ensure_model():
    models.mkdir(parents=True, exist_ok=True)
    path = models / "tinyllama-1.1b-q4_0.gguf"
    if not path.exists():
        subprocess.run([str(headroom), "synth", "tinyllama-1.1b", str(path), "--type", "q4_0"], check=True)
    return path


def llama_cpp(path, threads):
    out = subprocess.run([str(llama_bin / "llama-batched-bench"), "-m", str(path), "-c", "8192", "-b", "2048",
                          "-ub", "512", "-npp", "128", "-ntg", "64", "-npl", "32", "-t", str(threads)],
                         capture_output=True, text=True, check=True).stdout
    # Table row: |  PP |  TG |  B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 10 and cells[0] == "128" and cells[2] == "32":
            return {"total_tokens_per_s": float(cells[9]), "gen_tokens_per_s": float(cells[7]),
                    "prompt_tokens_per_s": float(cells[5])}
    raise RuntimeError(f"cannot read llama-batched-bench output:\n{out}")


def ours(path, threads):
    out = subprocess.run([str(headroom), "bench", "serve", "-m", str(path), "--requests", "32", "--concurrency",
                          "32", "--prompt-len", "128", "--gen-len", "64", "--max-num-seqs", "32",
                          "--max-model-len", "256", "-t", str(threads), "--json"],
                         capture_output=True, text=True, check=True).stdout
    j = json.loads(out)
    return {"total_tokens_per_s": j["total_tokens_per_s"], "gen_tokens_per_s": j["output_tokens_per_s"],
            "completed": j["completed"], "preemptions": j["preemptions"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    path = ensure_model()
    runs = {"llama.cpp": [], "headroom": []}
    for rep in range(args.reps):
        runs["llama.cpp"].append(llama_cpp(path, args.threads))
        runs["headroom"].append(ours(path, args.threads))
        print(f"rep {rep + 1}: llama.cpp {runs['llama.cpp'][-1]['total_tokens_per_s']:.1f} t/s, "
              f"headroom {runs['headroom'][-1]['total_tokens_per_s']:.1f} t/s", file=sys.stderr)
    med = {k: statistics.median(r["total_tokens_per_s"] for r in v) for k, v in runs.items()}
    print("\n32 sequences × (128 prompt + 64 generated), tinyllama-1.1b Q4_0, "
          f"{args.threads} threads, median of {args.reps}")
    print(f"{'engine':12} {'total t/s':>10}")
    for k, v in med.items():
        print(f"{k:12} {v:10.1f}")
    print(f"ratio headroom / llama.cpp: {med['headroom'] / med['llama.cpp']:.2f}")

    # Concurrent 2048-token sequences in the same KV memory (1 GiB, f16).
    plan = json.loads(subprocess.run([str(headroom), "plan", str(path), "--device", "cpu", "--device-memory", "64GiB",
                                      "--kv-cache-memory", "1GiB", "--max-model-len", "2048", "--max-num-seqs", "64",
                                      "--json"], capture_output=True, text=True, check=True).stdout)
    per_token = plan["terms"]["kv_cache"]["bytes_per_token"]
    llama_slots = (1 << 30) // per_token // 2048  # -c (1 GiB / bytes per token), -np as many 2048 slots as fit
    print(f"\nKV memory 1 GiB f16 ({per_token} B per token): headroom holds "
          f"{plan['max_num_seqs_at_max_model_len']} concurrent 2048-token sequences; llama.cpp with "
          f"-c {(1 << 30) // per_token} holds {llama_slots} (-np {llama_slots}, each slot reserved for 2048 tokens "
          "whether used or not)")


if __name__ == "__main__":
    main()
