#version 450
// out (n_rows, n) [r] = x[r] / sqrt(mean(x[r]^2) + eps) * (w + weight_offset)
// (RMSNorm; Gemma's norms store 1 + w already). out may be x. With a
// residual y, first x[r] += y[r] (the add before a norm, in the same
// dispatch: each invocation adds the elements it then reads; out may be y).
//
// Work split: one workgroup of 128 invocations per row; invocation i sums
// the squares of elements i, i + 128, ... in order, and the 128 partial sums
// are added by a fixed tree (TREE_SUM). The scale and the products are the
// reference's: (x * scale) * (w + offset).
#include "common.glsl"

layout(local_size_x = 128) in;

layout(push_constant) uniform Args {
    uint64_t x;
    uint64_t w;
    uint64_t out_;
    uint64_t y;  // the residual, or none
    uint n_rows;
    uint n;
    float eps;
    float weight_offset;
} a;

shared float part[128];

void main() {
    const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (row >= a.n_rows) return;  // uniform in the workgroup
    const uint i = gl_LocalInvocationID.x;
    Floats x = Floats(a.x + 4ul * uint64_t(row) * a.n);
    Floats o = Floats(a.out_ + 4ul * uint64_t(row) * a.n);
    Floats w = Floats(a.w);
    float sum = 0.0;
    if (a.y != 0ul) {
        Floats y = Floats(a.y + 4ul * uint64_t(row) * a.n);
        for (uint k = i; k < a.n; k += 128u) {
            const float v = x.v[k] + y.v[k];
            x.v[k] = v;
            sum = fma(v, v, sum);
        }
    } else {
        for (uint k = i; k < a.n; k += 128u) sum = fma(x.v[k], x.v[k], sum);
    }
    part[i] = sum;
    barrier();
    TREE_SUM(part, 0u, 128u, i)
    precise float mean = part[0] / float(a.n);
    const float scale = 1.0 / sqrt(mean + a.eps);
    for (uint k = i; k < a.n; k += 128u) {
        precise float v = x.v[k] * scale;
        precise float g = w.v[k] + a.weight_offset;
        o.v[k] = v * g;
    }
}
