#!/usr/bin/env python3
"""Greedy 64-token continuations from `headroom run --temp 0` against
llama.cpp's (tests/data/greedy/, made by scripts/make-golden-greedy.py): at
least 9 of 10 prompts must give the same text.

  test_greedy_vs_llama_cpp.py MODEL"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, model_path, fail_if  # noqa: E402

name = sys.argv[1]
data = json.load(open(os.path.join(os.environ.get("HEADROOM_TEST_DATA", "tests/data"), "greedy", f"{name}.json")))
path = model_path(name)
n_equal = 0
for case in data["cases"]:
    p = subprocess.run([headroom_bin(), "run", "-m", path, "-p", case["prompt"], "-n", str(data["n_predict"]),
                        "--temp", "0", "-q", "--max-model-len", "2048"], capture_output=True, check=True)
    ours = p.stdout.decode("utf-8", errors="replace")
    same = ours == case["llama_cpp"]
    n_equal += same
    # Where they differ, show where.
    at = next((i for i, (a, b) in enumerate(zip(ours, case["llama_cpp"])) if a != b), min(len(ours), len(case["llama_cpp"])))
    print(f"{'same' if same else 'DIFF'} {case['prompt'][:40]!r:44} "
          + ("" if same else f"from char {at}: ours {ours[at:at + 30]!r} llama.cpp {case['llama_cpp'][at:at + 30]!r}"))
print(f"{name}: {n_equal} of {len(data['cases'])} greedy continuations equal llama.cpp's")
fail_if(n_equal < 9, "fewer than 9 of 10 equal")
