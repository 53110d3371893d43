#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine. Idempotent: rerunning skips
# what is already installed, built or fetched.
#
#   scripts/setup.sh run    install, build, fetch the default model, run it
#   scripts/setup.sh test   install, build, run the whole test suite
#
# Environment: HEADROOM_TEST_ARGS adds ctest arguments (e.g. "-L slow" or
# "-LE model"); HEADROOM_FUZZ_SECONDS sets the fuzzing time (default 60).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mode="${1:-}"
case "$mode" in run | test) ;; *)
  echo "usage: scripts/setup.sh run|test" >&2
  exit 2
  ;;
esac

step() { printf '\n==> %s\n' "$*" >&2; }

# ---- system packages -------------------------------------------------------
# The Vulkan backend builds with libvulkan-dev and glslc; its tests run on
# lavapipe (mesa-vulkan-drivers), a software Vulkan device, where there is no GPU.
apt_packages=(build-essential cmake pkg-config clang clang-format libclang-rt-14-dev
  libcli11-dev nlohmann-json3-dev libcpp-httplib-dev libfmt-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev python3 python3-venv python3-pip curl
  libvulkan-dev glslc mesa-vulkan-drivers vulkan-tools)
# The tests drive the live page of `serve` in a real headless browser.
[ "$mode" = test ] && apt_packages+=(chromium chromium-driver)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "installing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# ---- Python tools for tests (never a runtime dependency) -------------------
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  step "creating $venv"
  python3 -m venv "$venv"
fi
if ! cmp -s scripts/requirements-test.txt "$venv/.requirements" 2>/dev/null; then
  step "installing Python test tools"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r scripts/requirements-test.txt
  cp scripts/requirements-test.txt "$venv/.requirements"
fi

# ---- build -----------------------------------------------------------------
step "fetching xgrammar (constrained decoding)"
scripts/fetch-xgrammar.sh
step "building (release)"
cmake --preset release -DHEADROOM_PYTHON="$venv/bin/python" >/dev/null
cmake --build --preset release -j "$(nproc)"

# ---- models ----------------------------------------------------------------
step "fetching models"
PYTHON="$venv/bin/python" scripts/fetch-model.sh smollm2-135m
if [ "$mode" = test ]; then
  PYTHON="$venv/bin/python" scripts/fetch-model.sh gemma3-270m
  PYTHON="$venv/bin/python" scripts/fetch-reference-data.sh
fi

if [ "$mode" = run ]; then
  step "running the default model"
  exec scripts/main-job.sh
fi

# ---- tests -----------------------------------------------------------------
step "checking formatting"
scripts/check-format.sh

step "running tests (ctest, slow tests excluded; HEADROOM_TEST_ARGS='${HEADROOM_TEST_ARGS:-}')"
# shellcheck disable=SC2086
ctest --preset release -j "$(nproc)" -LE slow ${HEADROOM_TEST_ARGS:-}

step "unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (clang, preset fuzz)"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)"
ctest --preset fuzz -j "$(nproc)" -L unit -LE slow

step "fuzzing: the GGUF reader for ${HEADROOM_FUZZ_SECONDS:-60}s, the other parsers and the tokenizers for 20s each"
scripts/fuzz.sh "${HEADROOM_FUZZ_SECONDS:-60}" gguf
scripts/fuzz.sh 20 doctor chat-template openai-request tokenizer safetensors
step "all tests passed"
