#!/usr/bin/env bash
# Fails if any C++ file differs from what .clang-format would make of it.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.cpp' '*.h' 2>/dev/null || find src tests bench fuzz -name '*.cpp' -o -name '*.h')
bad=0
for f in $files; do
  [ -f "$f" ] || continue
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "needs clang-format: $f" >&2
    bad=1
  fi
done
[ $bad -eq 0 ] && echo "formatting ok" >&2
exit $bad
