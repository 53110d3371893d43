#!/usr/bin/env bash
# The Vulkan backend on a machine with a real GPU, in one prepared run.
#
#   bench/gpu-check.sh pack           here (Debian 12, where headroom builds): build, then
#                                     gather into .gpu/ the headroom binary, the Vulkan ops
#                                     test, the shared libraries they load beyond glibc and
#                                     libstdc++, and the Vulkan loader's package
#   bench/gpu-check.sh run OUT [--small]
#         there (the tree with .gpu/ beside it, no network): list the Vulkan devices, run the
#         ops test on the one --device vulkan means, then bench random-weight models made there
#         by headroom synth (TinyLlama-1.1B Q4_0 and Q4_K, Llama-2-7B Q4_0): pp512, tg128, and
#         tg128 after 512 and 4096 tokens of context, then one run of each model with
#         HEADROOM_VULKAN_PROFILE=1 (device time per shader); and the KV pool past one
#         allocation (8 sequences of 4096 tokens of Llama-2-7B: 16 GiB in pieces of at most the
#         driver's limit). Every result goes to OUT: summary.txt (one line a test: tokens/s,
#         the fraction of the GPU's memory bandwidth where GPU_BANDWIDTH_GBS or nvidia-smi
#         names the card, dispatches and barriers a step), the JSON of each bench, the
#         profiles and the logs.
#         --small: a SmolLM2-135M-shaped model, pp64, tg16 and tg16 after 128 tokens: a dry run
#         of the script on lavapipe.
#
# Where .gpu/llama/ holds a llama-bench built with -DGGML_VULKAN=ON (and its libraries), each
# bench runs it too on the same file, interleaved, and the summary gives headroom / llama.cpp.
# The whole run is sized for under 8 minutes on an H100.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mode="${1:-}"

pack() {
  cmake --preset release >/dev/null
  cmake --build --preset release -j "$(nproc)" --target headroom vulkan_ops_test
  rm -rf .gpu/bin .gpu/lib .gpu/debs .gpu/llama
  mkdir -p .gpu/bin .gpu/lib .gpu/debs
  cp build/release/headroom build/release/tests/vulkan_ops_test .gpu/bin/
  strip --strip-unneeded .gpu/bin/*
  # Libraries beyond the C runtime and those every distribution has (OpenSSL, zlib, brotli):
  # the other machine may lack them.
  ldd build/release/headroom build/release/tests/vulkan_ops_test | awk '$3 ~ /^\// {print $3}' |
    sort -u | grep -Ev '/(libc|libm|libgcc_s|libstdc\+\+|ld-linux[^/]*|libssl|libcrypto|libz|libbrotli[a-z]*)\.so' |
    while read -r lib; do cp -L "$lib" .gpu/lib/; done
  (cd .gpu/debs && apt-get download libvulkan1 >/dev/null)
  # The peer, where bench/compare-llama-cpp --device vulkan built it (its CPU code for AVX2).
  local peer=.ref/llama-vulkan/build/bin
  if [ -x "$peer/llama-bench" ]; then
    mkdir -p .gpu/llama
    cp -L "$peer/llama-bench" .gpu/llama/
    for f in "$peer"/*.so*; do cp -P "$f" .gpu/llama/; done
    strip --strip-unneeded .gpu/llama/llama-bench .gpu/llama/*.so.*.* 2>/dev/null || true
  fi
  du -sh .gpu
  # A copy of the tree to another machine may be limited in size (64 MiB is common): say so here.
  local mib=$(($(du -sb .gpu | cut -f1) / 1048576))
  [ "$mib" -le 56 ] || echo "warning: .gpu/ is $mib MiB; leave out .gpu/llama if the copy is refused" >&2
  echo "now, on the GPU machine with this tree and .gpu/: bench/gpu-check.sh run OUT"
}

# bench_one LABEL MODEL ARGS...: headroom bench --json to OUT/LABEL.json, its stderr to
# OUT/LABEL.log, a summary line.
bench_one() {
  local label=$1 model=$2
  shift 2
  if ! "$bin" bench -m "$model" --device vulkan --n-gpu-layers all --json "$@" \
    >"$out/$label.json" 2>"$out/$label.log"; then
    echo "$label: FAILED (see $label.log)" | tee -a "$out/summary.txt"
    return 0
  fi
  python3 - "$out/$label.json" "$label" "$bandwidth" "${peer_tps:-}" <<'EOF' | tee -a "$out/summary.txt"
import json, sys
j = json.load(open(sys.argv[1]))
label, bw, peer = sys.argv[2], float(sys.argv[3] or 0), sys.argv[4]
s = j["decode_step"]
parts = [label]
if j["pp"]["n_tokens"]:
    parts.append(f"pp{j['pp']['n_tokens']} {j['pp']['tokens_per_s']:.1f} t/s")
if j["tg"]["n_tokens"]:
    tg = j["tg"]["tokens_per_s"]
    parts.append(f"tg{j['tg']['n_tokens']} {tg:.1f} t/s")
    gbs = j["tg_effective_gbps"]
    parts.append(f"{gbs:.1f} GB/s read" + (f" ({100 * gbs / bw:.0f}% of {bw:.0f})" if bw else ""))
parts.append(f"step: {s['dispatches']} dispatches, {s['barriers']} barriers, "
             f"recorded {s['recorded']}")
if peer:
    parts.append(f"llama.cpp {peer}")
print("  ".join(parts))
EOF
}

# llama-bench on the same file where a Vulkan build is carried: prints "pp t/s" or "tg t/s".
peer() {
  local model=$1
  shift
  [ -x "$root/.gpu/llama/llama-bench" ] || return 0
  LD_LIBRARY_PATH="$root/.gpu/llama:$LD_LIBRARY_PATH" "$root/.gpu/llama/llama-bench" -m "$model" \
    -ngl 99 -o json "$@" 2>>"$out/llama-bench.log" |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print(" ".join(f"{x[\"avg_ts\"]:.1f}" for x in r))' ||
    true
}

run() {
  out="${2:?usage: bench/gpu-check.sh run OUT [--small]}"
  local small=0
  [ "${3:-}" = --small ] && small=1
  mkdir -p "$out"
  : >"$out/summary.txt"
  local start=$SECONDS
  # The carried loader and libraries, unpacked beside the tree, not over the system's.
  if [ -d .gpu/debs ] && ! ldconfig -p | grep -q libvulkan.so.1; then
    mkdir -p /tmp/gpu-check-root
    for f in .gpu/debs/*.deb; do dpkg -x "$f" /tmp/gpu-check-root; done
    export LD_LIBRARY_PATH="/tmp/gpu-check-root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  fi
  [ -d .gpu/lib ] && export LD_LIBRARY_PATH="$root/.gpu/lib:${LD_LIBRARY_PATH:-}"
  bin="$root/.gpu/bin/headroom"
  local ops="$root/.gpu/bin/vulkan_ops_test"
  [ -x "$bin" ] || bin="$root/build/release/headroom"
  [ -x "$ops" ] || ops="$root/build/release/tests/vulkan_ops_test"
  if ! "$bin" devices --json | python3 -c 'import json,sys; sys.exit(0 if "vulkan" in json.load(sys.stdin) else 1)'; then
    for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json; do
      [ -f "$icd" ] && export VK_DRIVER_FILES="$icd" && break
    done
  fi
  export XDG_CACHE_HOME="$out/cache"
  "$bin" devices | tee "$out/devices.txt"
  "$bin" devices --json >"$out/devices.json"
  command -v nvidia-smi >/dev/null && nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
  bandwidth="${GPU_BANDWIDTH_GBS:-}"
  if [ -z "$bandwidth" ] && grep -q "H100" "$out/nvidia-smi.txt" 2>/dev/null; then bandwidth=3350; fi
  if [ -z "$bandwidth" ] && grep -q "H200" "$out/nvidia-smi.txt" 2>/dev/null; then bandwidth=4800; fi
  echo "== ops test" | tee -a "$out/summary.txt"
  timeout 300 "$ops" --gtest_brief=1 --gtest_shuffle >"$out/ops-test.log" 2>&1 &&
    tail -1 "$out/ops-test.log" | tee -a "$out/summary.txt" ||
    { echo "ops test FAILED: see ops-test.log" | tee -a "$out/summary.txt"; }

  local models=/tmp/gpu-check-models pp=512 tg=128 depths="512 4096"
  local shapes="tinyllama-1.1b:q4_0 tinyllama-1.1b:q4_k llama-2-7b:q4_0"
  if [ $small = 1 ]; then
    pp=64 tg=16 depths=128 shapes="smollm2-135m:q4_0"
  fi
  mkdir -p "$models"
  for st in $shapes; do
    local shape=${st%%:*} type=${st##*:}
    local model="$models/$shape-$type.gguf" label="$shape-$type"
    [ -f "$model" ] || "$bin" synth "$shape" "$model" --type "$type" -q -t "$(nproc)"
    echo "== $label ($((SECONDS - start)) s)" | tee -a "$out/summary.txt"
    peer_tps=$(peer "$model" -p "$pp" -n 0) bench_one "$label-pp$pp" "$model" -p "$pp" -n 0 -r 2
    peer_tps=$(peer "$model" -p 0 -n "$tg") bench_one "$label-tg$tg" "$model" -p 0 -n "$tg" -r 2
    for d in $depths; do
      peer_tps=$(peer "$model" -p 0 -n "$tg" -d "$d") \
        bench_one "$label-tg$tg-d$d" "$model" -p "$d" -n "$tg" -r 1
    done
    # Where a step's time goes: every dispatch timed alone (barriers between all of them, so
    # slower than the runs above), device time per shader.
    HEADROOM_VULKAN_PROFILE=1 "$bin" bench -m "$model" --device vulkan --n-gpu-layers all \
      -p "$pp" -n "$tg" -r 1 >"$out/$label.profile" 2>&1 || true
  done
  if [ $small = 0 ]; then
    # 8 sequences of 4096 tokens of Llama-2-7B: 16 GiB of KV, past every driver's one-allocation
    # limit; plan and the run's ledger, with the largest allocation.
    local model="$models/llama-2-7b-q4_0.gguf"
    echo "== KV pool past one allocation" | tee -a "$out/summary.txt"
    "$bin" plan "$model" --device vulkan --max-num-seqs 8 --max-model-len 4096 --json \
      >"$out/kv-split-plan.json" 2>>"$out/kv-split.log" || true
    "$bin" run -m "$model" --device vulkan -p "The capital of France is" -n 16 --temp 0 \
      --max-num-seqs 8 --max-model-len 4096 --memory-report-json "$out/kv-split-report.json" \
      >"$out/kv-split.txt" 2>>"$out/kv-split.log" || echo "run FAILED: see kv-split.log" |
      tee -a "$out/summary.txt"
    python3 - "$out" <<'EOF' | tee -a "$out/summary.txt" || true
import json, sys
out = sys.argv[1]
plan = json.load(open(f"{out}/kv-split-plan.json"))
rep = json.load(open(f"{out}/kv-split-report.json"))
gpu = next(d for d in plan["devices"] if d["device"] != "host")
led = rep["devices"][gpu["device"]]
same = all(gpu[f"{t}_bytes"] == led["terms"][t]["reserved_bytes"]
           for t in ("weights", "kv_cache", "activations", "runtime"))
print(f"KV {gpu['kv_cache_bytes'] / 2**30:.2f} GiB in {plan['terms']['kv_cache']['allocations']} "
      f"allocations; the run: {led['allocations']} allocations, the largest "
      f"{led['largest_allocation_bytes'] / 2**30:.2f} GiB (limit {led.get('max_allocation_bytes', 0) / 2**30:.2f} GiB); "
      f"plan == ledger: {same}")
EOF
  fi
  echo "done in $((SECONDS - start)) s" | tee -a "$out/summary.txt"
}

case "$mode" in
  pack) pack ;;
  run) run "$@" ;;
  *)
    sed -n '2,25p' "$0" >&2
    exit 2
    ;;
esac
