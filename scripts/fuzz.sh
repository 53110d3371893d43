#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and fuzzes each for SECONDS
# (default 60), starting from the seed corpora in fuzz/corpus/. For a longer
# run: scripts/fuzz.sh 3600. Crashes are written to build/fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)" >/dev/null
mkdir -p build/fuzz/artifacts
for target in build/fuzz/fuzz/*-fuzz; do
  name=$(basename "$target" -fuzz)
  corpus="build/fuzz/corpus-$name"
  mkdir -p "$corpus"
  cp -n fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
  echo "fuzzing $name for ${seconds}s" >&2
  "$target" "$corpus" -max_total_time="$seconds" -max_len=131072 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix=build/fuzz/artifacts/ -print_final_stats=1 2>&1 | tail -n 12
done
