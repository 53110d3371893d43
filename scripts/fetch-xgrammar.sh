#!/usr/bin/env bash
# Fetches xgrammar's source distribution from PyPI (the constrained-decoding
# library: JSON schemas, regexes, EBNF grammars and structural tags turned
# into per-token masks) and unpacks its C++ core for the build. Idempotent.
#
#   scripts/fetch-xgrammar.sh   ->  third_party/xgrammar-<version>/{cpp,include,3rdparty}
#
# cmake/xgrammar.cmake compiles cpp/ into a static library of its own; the
# Python bindings (cpp/tvm_ffi) are not built.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=0.2.8
sha=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
url="https://files.pythonhosted.org/packages/03/0f/29f521535729be740779c2c98b630ef6607cf28be9b669895dd2b821ff63/xgrammar-$version.tar.gz"
dest="$root/third_party/xgrammar-$version"

if [ -f "$dest/.complete" ]; then
  echo "xgrammar: $dest (cached)" >&2
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "xgrammar: downloading $version (source) from PyPI" >&2
curl --fail --silent --show-error --location --retry 3 -o "$tmp/xgrammar.tar.gz" "$url"
if ! echo "$sha  $tmp/xgrammar.tar.gz" | sha256sum --check --status; then
  echo "xgrammar: sha256 mismatch for $url, expected $sha" >&2
  exit 1
fi
tar -xzf "$tmp/xgrammar.tar.gz" -C "$tmp"
rm -rf "$dest"
mkdir -p "$dest/3rdparty"
src="$tmp/xgrammar-$version"
cp -r "$src/cpp" "$src/include" "$src/LICENSE" "$src/NOTICE" "$dest/"
cp -r "$src/3rdparty/picojson" "$src/3rdparty/dlpack" "$dest/3rdparty/"
touch "$dest/.complete"
echo "xgrammar: $dest" >&2
