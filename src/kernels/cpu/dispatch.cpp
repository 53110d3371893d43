// The choice of table and the scratch sizes every table agrees to. This file is
// compiled for the baseline ISA: it checks the CPU before it touches an
// ISA-specific table.
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "kernels/cpu/act-format.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/x86/tables.h"

namespace headroom::kernels {

namespace {

#if defined(__x86_64__)
// CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports has no "f16c").
bool cpu_has_f16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}
#endif

bool cpu_is_amd() {
#if defined(__x86_64__)
    return __builtin_cpu_is("amd");
#else
    return false;
#endif
}

bool cpu_has_avx2() {
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c() &&
           __builtin_cpu_supports("bmi2");
#else
    return false;
#endif
}

// AVX-VNNI: the VEX-encoded vpdpbusd on 256-bit vectors. CPUID leaf 7,
// subleaf 1, EAX bit 4, where leaf 7 has that subleaf (subleaf 0's EAX is
// the last one); clang 14's __builtin_cpu_supports has no "avxvnni". Its
// registers are AVX2's, whose state cpu_has_avx2 covers.
bool cpu_has_avxvnni() {
#if defined(__x86_64__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!cpu_has_avx2() || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || eax < 1)
        return false;
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 4)) != 0;
#else
    return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__)
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

const Ops& choose() {
    const char* env = std::getenv("HEADROOM_ISA");
    const std::string_view want = env ? env : "";
    if (want == "ref") return ref_ops();
    if (want == "avx2") {
        if (const Ops* o = avx2_ops()) return *o;
        fail("HEADROOM_ISA=avx2: this CPU or build has no AVX2 kernels");
    }
    if (want == "avxvnni") {
        if (const Ops* o = avxvnni_ops()) return *o;
        fail("HEADROOM_ISA=avxvnni: this CPU or build has no AVX-VNNI kernels");
    }
    if (want == "avx512") {
        if (const Ops* o = avx512_ops()) return *o;
        fail("HEADROOM_ISA=avx512: this CPU or build has no AVX-512 kernels");
    }
    if (!want.empty()) fail("HEADROOM_ISA={}: expected ref, avx2, avxvnni or avx512", want);
    if (const Ops* o = avx512_ops()) return *o;
    if (const Ops* o = avxvnni_ops()) return *o;
    if (const Ops* o = avx2_ops()) return *o;
    return ref_ops();
}

ActPrecision initial_act_precision() {
    const char* env = std::getenv("HEADROOM_ACT_PRECISION");
    if (!env || !*env) return ActPrecision::Int8;
    if (const auto p = act_precision_from_name(env)) return *p;
    fail("HEADROOM_ACT_PRECISION={}: expected int8, int16 or f32", env);
}

// A decode step streams each thread's weights from memory, and the read
// rate of one stream is the lines in flight over the memory's latency.
// Where the hardware prefetchers keep too few in flight, the kernels ask for
// the repacked weights some bytes ahead themselves (gemm.h, micro_direct).
// As measured on several CPUs (docs/cpu-kernels.md#decode-prefetch-distance),
// Intel cores ask 2.5 KiB ahead, AMD's AVX2 4 KiB, and AMD's AVX-512 (whose
// prefetchers keep up) nothing.
uint64_t default_decode_prefetch_bytes(const Ops& ops) {
    if (&ops == &ref_ops()) return 0;
    if (cpu_is_amd()) return &ops == avx512_ops() ? 0 : 4096;
    return 2560;
}

}  // namespace

uint64_t decode_prefetch_bytes(const Ops& ops) {
    const char* env = std::getenv("HEADROOM_DECODE_PREFETCH");
    if (!env || !*env) return default_decode_prefetch_bytes(ops);
    uint64_t bytes = 0;
    const std::string_view s = env;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), bytes);
    if (ec != std::errc() || end != s.data() + s.size() || bytes > 65536 || bytes % 64 != 0)
        fail("HEADROOM_DECODE_PREFETCH={}: expected bytes, 0 to 65536, a multiple of 64", s);
    return bytes;
}

const Ops* avx2_ops() {
    return cpu_has_avx2() ? &x86::avx2_table() : nullptr;
}

const Ops* avxvnni_ops() {
    return cpu_has_avxvnni() ? &x86::avxvnni_table() : nullptr;
}

const Ops* avx512_ops() {
    return cpu_has_avx512() ? &x86::avx512_table() : nullptr;
}

const Ops& ops() {
    static const Ops& chosen = choose();
    return chosen;
}

ActPrecision default_act_precision() {
    static const ActPrecision p = initial_act_precision();
    return p;
}

std::optional<ActPrecision> act_precision_from_name(std::string_view n) {
    if (n == "int8") return ActPrecision::Int8;
    if (n == "int16") return ActPrecision::Int16;
    if (n == "f32") return ActPrecision::F32;
    return std::nullopt;
}

std::string_view name(ActPrecision p) {
    switch (p) {
        case ActPrecision::Int8:
            return "int8";
        case ActPrecision::Int16:
            return "int16";
        case ActPrecision::F32:
            return "f32";
    }
    return "?";
}

uint64_t thread_scratch_bytes(uint64_t max_in, uint64_t max_head, uint64_t group, uint64_t n_head) {
    // Reference: a dequantized weight row; K, V and the accumulator of one query.
    const uint64_t ref = std::max(max_in, 3 * max_head) * 4;
    // x86 matmul: one packed chunk of a row group (16 blocks of at most
    // 40 x 16 bytes, or 2 superblocks of at most 360 x 16 bytes, Q2_K), and for
    // F32 precision that chunk dequantized (256 columns x 16 rows of f32).
    const uint64_t panel = 32 * 1024;
    // x86 attention (kLanes <= 16): a chunk's K (transposed or not) and V
    // rows (at most kChunkFloats each, or one tile of 16 keys of wider heads),
    // per query of a window m, l and the accumulator for the current segment
    // of keys and for the ones before, aligned to 64 bytes; then
    // kSplitStatesPerThread segment states of every query head of a token
    // for decode steps split over keys.
    const uint64_t chunk = std::max<uint64_t>(x86::kChunkFloats, 16 * max_head);
    const uint64_t attn = (2 * chunk + 2 * x86::kQueryWindow * group * (max_head + 2)) * 4 + 64 +
                          x86::kSplitStatesPerThread * n_head * (max_head + 2) * 4;
    return (std::max({ref, panel, attn}) + 63) / 64 * 64;
}

uint64_t acts_row_bytes(uint64_t n) {
    // Row sizes grow with n, so the widest rows of each layout that fit in n
    // bound every narrower input too.
    const auto n32 = static_cast<int64_t>(n / 32 * 32), n256 = static_cast<int64_t>(n / 256 * 256);
    return std::max(act_layout(n32, TensorType::Q4_0, ActPrecision::Int16).row_bytes,
                    act_layout(n256, TensorType::Q4_K, ActPrecision::Int16).row_bytes);
}

}  // namespace headroom::kernels
