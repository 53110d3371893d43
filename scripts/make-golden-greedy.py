#!/usr/bin/env python3
"""Greedy 64-token continuations from llama.cpp (llama-server and
llama-completion, built by tools/ref-env.sh) for the greedy model tests:
tests/data/greedy/<model>.json.
Prompts are raw text (BOS as the model's metadata says, no chat template).
The reference is llama-server (text and token ids); llama-completion's text
is kept beside it, as llama.cpp's two front ends do not always agree.

  .ref/venv/bin/python scripts/make-golden-greedy.py [model ...]
"""
import json
import pathlib
import subprocess
import sys
import time
import urllib.request

root = pathlib.Path(__file__).resolve().parent.parent
llama = root / ".ref" / "llama-bin" / "llama-completion"
out_dir = root / "tests" / "data" / "greedy"
out_dir.mkdir(parents=True, exist_ok=True)
MODELS = {"smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3-270m": "gemma-3-270m-q4_k_m.gguf"}

# A passage long enough (about 700 tokens) to exceed Gemma 3's 512-token window.
LONG = ("The lighthouse keeper kept a log of every ship that passed. " +
        " ".join(f"On day {d} the {['north', 'south', 'east', 'west'][d % 4]} wind carried "
                 f"{d % 5 + 2} ships past the rocks, and the keeper wrote down their flags." for d in range(1, 40)) +
        " At the end of the season the keeper counted the pages of the log and found")
PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little robot who",
    "def is_prime(n):\n",
    "The three primary colors are",
    "Water boils at a temperature of",
    "In 1969, the first humans to walk on the Moon were",
    "To make a cup of tea, first",
    "The most important thing about memory in computers is",
    "Q: What is the largest planet in the solar system?\nA:",
    LONG,
]


def continuation(model_file, prompt):
    p = subprocess.run([str(llama), "-m", str(root / "models" / model_file), "-p", prompt, "-n", "64",
                        "--temp", "0", "--no-display-prompt", "-no-cnv", "-t", "2", "-c", "2048", "--seed", "1"],
                       capture_output=True, check=True)
    text = p.stdout.decode("utf-8", errors="replace")
    # llama-completion prints "\n\n" after the generated text; it is not part of it.
    assert text.endswith("\n\n"), text
    return text[:-2]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))


def server_tokens(model_file, prompts):
    """(prompt ids, continuation ids, continuation text) per prompt, from llama-server."""
    port = 8097
    server = subprocess.Popen([str(llama.parent / "llama-server"), "-m", str(root / "models" / model_file),
                               "-t", "2", "-c", "2048", "-np", "1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health")
                break
            except Exception:
                time.sleep(0.1)
        out = []
        for prompt in prompts:
            ids = post(f"http://127.0.0.1:{port}/tokenize", {"content": prompt, "add_special": True})["tokens"]
            r = post(f"http://127.0.0.1:{port}/completion",
                     {"prompt": prompt, "n_predict": 64, "temperature": 0, "cache_prompt": False,
                      "return_tokens": True})
            out.append((ids, r["tokens"], r["content"]))
        return out
    finally:
        server.terminate()
        server.wait()


for name in sys.argv[1:] or MODELS:
    cases = []
    for prompt, (prompt_ids, ids, server_text) in zip(PROMPTS, server_tokens(MODELS[name], PROMPTS)):
        text = continuation(MODELS[name], prompt)
        cases.append({"prompt": prompt, "llama_cpp": server_text, "prompt_tokens": prompt_ids,
                      "llama_cpp_tokens": ids, "llama_completion": text})
        print(f"{name}: {server_text[:60]!r}" + ("" if text == server_text else " (llama-completion differs)"),
              file=sys.stderr)
    (out_dir / f"{name}.json").write_text(json.dumps({"model": name, "reference": "llama.cpp llama-server, temperature 0",
                                                       "n_predict": 64, "cases": cases}, indent=1))
