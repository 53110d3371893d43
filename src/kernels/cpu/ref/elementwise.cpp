// Elementwise kernels shared by every table: O(n) work the compiler
// vectorizes well enough next to the matmuls.
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/ref/quant.h"

namespace headroom::kernels {

// out = x * (1 / sqrt(mean(x^2) + eps)) * (w + weight_offset), per row.
void rmsnorm(const float* x, const float* w, float weight_offset, float eps, int64_t n_tokens,
             int64_t n, float* out) {
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xr = x + t * n;
        float* o = out + t * n;
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i]) * xr[i];
        const float scale =
            1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(n)) + eps);
        for (int64_t i = 0; i < n; ++i) o[i] = xr[i] * scale * (w[i] + weight_offset);
    }
}

namespace {

// YaRN's pair index at which a frequency turns n_turns times over orig_ctx
// positions: n_rot ln(orig_ctx / (n_turns 2 pi)) / (2 ln base).
double yarn_corr_dim(const RopeArgs& a, double n_turns) {
    constexpr double kPi = 3.14159265358979323846;
    return a.n_rot * std::log(a.yarn_orig_ctx / (n_turns * 2 * kPi)) /
           (2 * std::log(static_cast<double>(a.base)));
}

}  // namespace

// theta_i = pos * scale * base^(-2i / n_rot) / factor_i, then YaRN's blend
// (RopeArgs): r_i = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1) with
// lo = max(0, floor(corr_dim(beta_fast))), hi = min(n_rot - 1,
// ceil(corr_dim(beta_slow))), without floor and ceil if !yarn_truncate.
double rope_theta(uint32_t position, uint32_t i, const RopeArgs& a) {
    const double pos = static_cast<double>(position) * a.position_scale;
    double theta = pos * std::pow(static_cast<double>(a.base), -2.0 * i / a.n_rot);
    if (a.freq_factors) theta /= a.freq_factors[i];
    if (a.yarn_factor > 0) {
        double lo = yarn_corr_dim(a, a.yarn_beta_fast), hi = yarn_corr_dim(a, a.yarn_beta_slow);
        if (a.yarn_truncate) lo = std::floor(lo), hi = std::ceil(hi);
        lo = std::max(0.0, lo);
        hi = std::min(a.n_rot - 1.0, hi);
        const double y = (i - lo) / std::max(0.001, hi - lo);
        const double ramp = 1 - std::min(1.0, std::max(0.0, y));
        theta = theta / a.yarn_factor * (1 - ramp) + theta * ramp;
    }
    return theta;
}

float rope_yarn_mscale(const RopeArgs& a) {
    return a.yarn_factor > 0 ? 1.0f + 0.1f * std::log(a.yarn_factor) : 1.0f;
}

// Pair (a, b) rotated by rope_theta (and scaled by rope_yarn_mscale): Normal pairs dims (2i, 2i+1);
// NeoX pairs (i, i + n_rot / 2).
void rope(float* x, int64_t n_tokens, const uint32_t* positions, const RopeArgs& a) {
    const uint32_t half = a.n_rot / 2;
    const float mscale = rope_yarn_mscale(a);
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (uint32_t i = 0; i < half; ++i) {
            const double theta = rope_theta(positions[t], i, a);
            const auto c = static_cast<float>(std::cos(theta)) * mscale;
            const auto s = static_cast<float>(std::sin(theta)) * mscale;
            for (uint32_t h = 0; h < a.n_head; ++h) {
                float* v = x + (t * a.n_head + h) * a.head_dim;
                const uint32_t i0 = a.mode == RopeMode::Normal ? 2 * i : i;
                const uint32_t i1 = a.mode == RopeMode::Normal ? 2 * i + 1 : i + half;
                const float x0 = v[i0], x1 = v[i1];
                v[i0] = x0 * c - x1 * s;
                v[i1] = x0 * s + x1 * c;
            }
        }
    }
}

// silu(g) = g / (1 + e^-g)
void silu_mul(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))
void gelu_mul(float* gate, const float* up, int64_t n) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
    }
}

void add(float* x, const float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void store_row(const float* x, int64_t n, KvDtype dtype, uint8_t* dst) {
    ref::quantize_row(tensor_type(dtype), x, dst, n);
}

}  // namespace headroom::kernels
