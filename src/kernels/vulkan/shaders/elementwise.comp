#version 450
// Elementwise ops on f32 (-D<OP>), one invocation per element of x:
//   ADD       x[i] += y[i]                         (n elements)
//   ADD_BIAS  x[r, c] += b[c]                      (n = n_rows × n_cols)
//   SILU_MUL  x[i] = silu(x[i]) × y[i]             silu(g) = g / (1 + e^-g)
//   GELU_MUL  x[i] = gelu_tanh(x[i]) × y[i]        0.5 g (1 + tanh(√(2/π) (g + 0.044715 g³)))
// The grid is 2-D when n needs more than 65535 workgroups: i = x + y × width.
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform Args {
    uint64_t x;
    uint64_t y;
    uint n;
    uint n_cols;  // ADD_BIAS: the bias length
} a;

void main() {
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
    if (i >= a.n) return;
    Floats x = Floats(a.x);
    Floats y = Floats(a.y);
#if defined(ADD)
    x.v[i] = x.v[i] + y.v[i];
#elif defined(ADD_BIAS)
    x.v[i] = x.v[i] + y.v[i % a.n_cols];
#elif defined(SILU_MUL)
    const float g = x.v[i];
    precise float s = g / (1.0 + exp(-g));
    x.v[i] = s * y.v[i];
#elif defined(GELU_MUL)
    const float g = x.v[i];
    const float z = 0.7978845608028654 * (g + 0.044715 * g * g * g);
    // tanh(z) = 1 - 2 / (e^(2z) + 1), through e^(2|z|) so it cannot overflow.
    const float e = exp(2.0 * abs(z));
    const float t = sign(z) * (1.0 - 2.0 / (e + 1.0));
    precise float h = 0.5 * g * (1.0 + t);
    x.v[i] = h * y.v[i];
#else
#error "compile with -D<OP>"
#endif
}
