#!/usr/bin/env bash
# The main job on the default model: what is in it and how much memory it takes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/build/release/headroom"
"$bin" inspect smollm2-135m --no-tensors
