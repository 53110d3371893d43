#!/usr/bin/env python3
"""What the Vulkan backend has no kernels for is refused at load, by name,
with the way out (--device cpu), and the same file runs on the CPU: a
mixture of experts (gpt-oss) and a dense llama whose metadata asks for YaRN
RoPE scaling. Skipped (exit code 77) where this machine has no Vulkan
device."""
import os
import subprocess
import sys

from gguf import GGUFReader, GGUFValueType as T

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, fail_if, rewrite_gguf, scratch_dir, skip_without_vulkan  # noqa: E402

skip_without_vulkan()

tmp = scratch_dir("headroom-vulkan-refuses-")
moe = os.path.join(tmp, "tiny-gpt-oss.gguf")
subprocess.run([headroom_bin(), "synth", "tiny-gpt-oss", moe, "--type", "mxfp4", "-q"], check=True)
dense = os.path.join(tmp, "tiny.gguf")
subprocess.run([headroom_bin(), "synth", "tiny", dense, "--type", "q8_0", "-q"], check=True)
yarn = os.path.join(tmp, "tiny-yarn.gguf")
rewrite_gguf(GGUFReader(dense), yarn, {"llama.rope.scaling.type": ("yarn", T.STRING),
                                        "llama.rope.scaling.factor": (4.0, T.FLOAT32),
                                        "llama.rope.scaling.original_context_length": (64, T.UINT32)})

for path, words in ((moe, "mixture-of-experts"), (yarn, "YaRN")):
    name = os.path.basename(path)
    for device in ("vulkan", "cpu"):
        p = subprocess.run([headroom_bin(), "run", "-m", path, "-p", "hello", "-n", "4", "--device", device],
                           capture_output=True, text=True, timeout=120)
        lines = [l for l in p.stderr.splitlines() if l.startswith("error:")]
        if device == "cpu":
            fail_if(p.returncode != 0, f"{name} on the CPU: exit {p.returncode}: {p.stderr[-500:]}")
            continue
        fail_if(p.returncode != 1 or len(lines) != 1, f"{name} on vulkan: exit {p.returncode}, {lines}")
        fail_if(words not in lines[0] or "--device cpu" not in lines[0], f"{name} on vulkan: {lines[0]}")
        print(f"{name} on vulkan: {lines[0]}")
print("ok: refused on vulkan by name, run on the CPU")
