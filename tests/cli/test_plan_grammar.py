#!/usr/bin/env python3
"""`headroom plan --grammar-cache` counts constrained decoding in the runtime
term: the cache's bytes plus, per sequence, a token mask (one bit per token
of the vocabulary, in 32-bit words) and the matcher's 16 KiB, and nothing
else changes in the runtime term. The vocabulary size is read from the file
with the gguf package.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, fail_if, scratch_dir  # noqa: E402

import gguf  # noqa: E402

tmp = scratch_dir("headroom-plan-grammar-")
model = os.path.join(tmp, "tiny.gguf")
subprocess.run([headroom_bin(), "synth", "tiny", model, "-q"], check=True)
n_vocab = len(gguf.GGUFReader(model).fields["tokenizer.ggml.tokens"].data)


def plan(*extra):
    p = subprocess.run([headroom_bin(), "plan", model, "--max-num-seqs", "8", "--max-model-len",
                        "512", "--mem-fraction", "0.05", "--json", *extra],
                       capture_output=True, text=True)
    fail_if(p.returncode != 0, p.stderr)
    return json.loads(p.stdout)


without = plan()
with_cache = plan("--grammar-cache", "16MiB")
want = 16 * 2**20 + 8 * (((n_vocab + 31) // 32) * 4 + 16 * 1024)
got = with_cache["terms"]["runtime"]["grammar_bytes"]
fail_if(got != want, f"grammar bytes {got}, expected {want} for {n_vocab} tokens and 8 sequences")
fail_if(without["terms"]["runtime"]["grammar_bytes"] != 0, "grammar bytes without a cache")
d_runtime = with_cache["terms"]["runtime"]["bytes"] - without["terms"]["runtime"]["bytes"]
fail_if(d_runtime != want, f"runtime grew by {d_runtime}, expected {want}")
fail_if("compiled grammars" not in with_cache["terms"]["runtime"]["formula"],
        with_cache["terms"]["runtime"]["formula"])
print(f"plan --grammar-cache: {want} bytes for {n_vocab} tokens x 8 sequences: ok")
