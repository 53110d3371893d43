#!/usr/bin/env bash
# The main job on the default model: generate text, then show where the memory went.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/build/release/headroom"
"$bin" run -m smollm2-135m --temp 0 -n 64 --memory-report \
  -p "<|im_start|>user
Explain in two sentences why the KV cache grows with context length.<|im_end|>
<|im_start|>assistant
"
