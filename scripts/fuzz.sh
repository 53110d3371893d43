#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and fuzzes each for SECONDS
# (default 60), starting from the seed corpora in fuzz/corpus/. Targets:
# gguf, doctor, chat-template, openai-request, tokenizer, safetensors (default: all). For
# a longer run: scripts/fuzz.sh 3600 gguf. Crashes are written to
# build/fuzz/artifacts/ and make the script fail.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(gguf doctor chat-template openai-request tokenizer safetensors)
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)" --target "${targets[@]/%/-fuzz}" >/dev/null
mkdir -p build/fuzz/artifacts
for name in "${targets[@]}"; do
  target="build/fuzz/fuzz/$name-fuzz"
  [ -x "$target" ] || { echo "fuzz: no target '$name'" >&2; exit 2; }
  corpus="build/fuzz/corpus-$name"
  mkdir -p "$corpus"
  cp -n fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
  echo "fuzzing $name for ${seconds}s" >&2
  "$target" "$corpus" -max_total_time="$seconds" -max_len=131072 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix=build/fuzz/artifacts/ -print_final_stats=1 2>&1 | tail -n 12
done
