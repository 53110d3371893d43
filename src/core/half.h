// IEEE half (f16) and bfloat16 conversions, bit-exact with ggml's reference
// (round to nearest even; bf16 keeps NaNs quiet).
#pragma once

#include <cstdint>
#include <cstring>

namespace headroom {

inline float bits_to_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline uint32_t f32_to_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1F;
    const uint32_t mant = h & 0x3FF;
    if (exp == 0) {
        // Zero or subnormal: mant * 2^-24.
        const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return bits_to_f32(sign | 0x7F800000 | (mant << 13));
    return bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t f32_to_f16(float f) {
    const uint32_t x = f32_to_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000;
    const uint32_t abs = x & 0x7FFFFFFF;
    if (abs > 0x7F800000) return static_cast<uint16_t>(sign | 0x7E00);   // NaN
    if (abs >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // rounds to inf
    if (abs < 0x38800000) {
        // Subnormal half (or zero): round abs * 2^24 to an integer, ties to even.
        const float v = bits_to_f32(abs) * 16777216.0f;
        uint32_t m = static_cast<uint32_t>(v);
        const float rem = v - static_cast<float>(m);
        if (rem > 0.5f || (rem == 0.5f && (m & 1))) ++m;
        return static_cast<uint16_t>(sign | m);
    }
    // Normal: rebias the exponent, round the 13 dropped mantissa bits to even.
    uint32_t h = ((abs - 0x38000000) >> 13);
    const uint32_t dropped = abs & 0x1FFF;
    if (dropped > 0x1000 || (dropped == 0x1000 && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
}

inline float bf16_to_f32(uint16_t b) {
    return bits_to_f32(static_cast<uint32_t>(b) << 16);
}

inline uint16_t f32_to_bf16(float f) {
    const uint32_t u = f32_to_bits(f);
    if ((u & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((u >> 16) | 64);  // quiet NaN
    return static_cast<uint16_t>((u + (0x7FFF + ((u >> 16) & 1))) >> 16);
}

}  // namespace headroom
