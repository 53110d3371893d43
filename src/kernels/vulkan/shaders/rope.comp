#version 450
// Rotary position embedding, in place on x (n_tokens, n_head, head_dim):
// pair i of the first n_rot dims, (2i, 2i+1) (normal) or (i, i + n_rot/2)
// (NeoX), is rotated by theta_i = pos × freq_i, where freq_i = scale ×
// base^(-2i / n_rot) / factor_i.
//
// The angle is reduced exactly, in turns: the host stores, per pair, the
// fraction of freq_i / 2π as a 64-bit fixed-point number (from double), so
// pos × that fraction, wrapping mod 2^64, is the angle mod 2π with 64 bits
// of fraction, whatever the position. Its nearest quarter turn gives the
// quadrant and the rest (|r| <= π/4) one rounding to f32; sin and cos of r
// come from minimax polynomials accurate to about 1 ulp. (GLSL's sin and cos
// need only be within 2^-11, and an f32 angle at position 8192 is already
// 5e-4 off: neither would do for long contexts.)
//
// Work split: one invocation per (pair, head, token): x = pair, y = head,
// z = token. Heads n_head .. n_head + n_head2 - 1 are those of a second
// tensor x2 of the same tokens (k beside q: one dispatch for both).
#include "common.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform Args {
    uint64_t x;
    uint64_t positions;  // (n_tokens) u32
    uint64_t freqs;      // (n_rot / 2) × {fraction bits 63..32, 31..0}
    uint64_t x2;         // (n_tokens, n_head2, head_dim), or none
    uint n_tokens;
    uint n_head;
    uint head_dim;
    uint n_rot;
    uint neox;
    uint n_head2;
} a;

void main() {
    const uint i = gl_GlobalInvocationID.x, h = gl_WorkGroupID.y, t = gl_WorkGroupID.z;
    const uint half_rot = a.n_rot / 2u;
    if (i >= half_rot) return;
    const uint pos = Words(a.positions).v[t];
    Words f = Words(a.freqs);
    const uint64_t turn = (uint64_t(f.v[2u * i]) << 32) | uint64_t(f.v[2u * i + 1u]);
    const uint64_t phase = uint64_t(pos) * turn;  // the angle in 2^-64 turns, mod one turn
    const uint q = uint((phase + (1ul << 61)) >> 62);  // nearest quarter turn
    const int64_t rest = int64_t(phase - (uint64_t(q) << 62));  // in [-2^61, 2^61)
    const float r = float(rest) * 3.4061215800865545e-19;  // (π/2) / 2^62
    // sin r = r + r z P(z), cos r = 1 - z / 2 + z^2 Q(z), z = r^2 (Cephes' sinf / cosf).
    const float z = r * r;
    const float sp = fma(fma(-1.9515295891e-4, z, 8.3321608736e-3), z, -1.6666654611e-1);
    const float cq = fma(fma(2.443315711809948e-5, z, -1.388731625493765e-3), z,
                         4.166664568298827e-2);
    const float sin_r = fma(r * z, sp, r);
    const float cos_r = fma(z * z, cq, fma(-0.5, z, 1.0));
    const float s = q == 0u ? sin_r : q == 1u ? cos_r : q == 2u ? -sin_r : -cos_r;
    const float c = q == 0u ? cos_r : q == 1u ? -sin_r : q == 2u ? -cos_r : sin_r;

    Floats v = h < a.n_head
                   ? Floats(a.x + 4ul * (uint64_t(t) * a.n_head + h) * a.head_dim)
                   : Floats(a.x2 + 4ul * (uint64_t(t) * a.n_head2 + h - a.n_head) * a.head_dim);
    const uint i0 = a.neox != 0u ? i : 2u * i;
    const uint i1 = a.neox != 0u ? i + half_rot : 2u * i + 1u;
    const float x0 = v.v[i0], x1 = v.v[i1];
    precise float y0 = x0 * c - x1 * s;
    precise float y1 = x0 * s + x1 * c;
    v.v[i0] = y0;
    v.v[i1] = y1;
}
