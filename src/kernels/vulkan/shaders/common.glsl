// Shared by every shader: pointers into device memory, the conversions of
// the storage types, and exact helpers where GLSL's built-ins are not.
//
// Buffers are reached by device address (VK_KHR_buffer_device_address): a
// shader gets 64-bit addresses in its push constants and reads through the
// pointer types below, so no buffer is limited by maxStorageBufferRange and
// no descriptor set is bound. Every element access uses a 32-bit index
// from a pointer made at a row's (or block's) start, so tensors past 4 GiB
// are fine as long as a row is not.
//
// Arithmetic is f32. Where a result must equal the CPU reference's bit for
// bit (weights dequantized, f16 / bf16 rounding, Q8_0 rounding) the
// expression is written as the reference writes it and declared `precise`,
// so no compiler contracts it into a fused multiply-add.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_buffer_reference2 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Words { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer Halves { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer Bytes { uint8_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Addresses { uint64_t v[]; };

// IEEE half (binary16) bits to f32: exact.
float half_to_float(uint h) {
    return unpackHalf2x16(h).x;
}

// bfloat16 bits to f32: exact.
float bf16_to_float(uint h) {
    return uintBitsToFloat(h << 16);
}

// f32 to IEEE half bits, round to nearest even: core/half.h's f32_to_f16,
// step for step (packHalf2x16's rounding is not specified).
uint float_to_half(float f) {
    const uint x = floatBitsToUint(f);
    const uint sign = (x >> 16) & 0x8000u;
    const uint a = x & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00u;   // NaN
    if (a >= 0x477FF000u) return sign | 0x7C00u;  // rounds to inf
    if (a < 0x38800000u) {
        // Subnormal half (or zero): round a * 2^24 to an integer, ties to even.
        precise float v = uintBitsToFloat(a) * 16777216.0;
        uint m = uint(v);
        precise float rem = v - float(m);
        if (rem > 0.5 || (rem == 0.5 && (m & 1u) != 0u)) ++m;
        return sign | m;
    }
    uint h = (a - 0x38000000u) >> 13;
    const uint dropped = a & 0x1FFFu;
    if (dropped > 0x1000u || (dropped == 0x1000u && (h & 1u) != 0u)) ++h;
    return sign | h;
}

// f32 to bfloat16 bits, round to nearest even (NaN stays NaN).
uint float_to_bf16(float f) {
    const uint x = floatBitsToUint(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (x >> 16) | 0x40u;
    return (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
}

// a / b correctly rounded in practice: the device's quotient (2.5 ulp at
// worst) corrected by one Newton step on its exact remainder.
float div_rn(float a, float b) {
    precise float q = a / b;
    precise float r = fma(-q, b, a);
    return fma(r, 1.0 / b, q);
}

// std::round: half away from zero.
float round_away(float v) {
    const float t = trunc(v);
    return abs(v - t) >= 0.5 ? t + sign(v) : t;
}

// The element of a shared-memory tree: partial sums at [base, base + n)
// added pairwise, stride n/2, n/4, ... 1; n is a power of two. Every
// invocation of the workgroup calls it (it has barriers); the sum lands at
// [base]. The order depends only on n: the same on every device.
#define TREE_SUM(buf, base, n, lane)                                   \
    for (uint stride_ = (n) / 2u; stride_ > 0u; stride_ >>= 1u) {      \
        if ((lane) < stride_) buf[(base) + (lane)] += buf[(base) + (lane) + stride_]; \
        barrier();                                                     \
    }
