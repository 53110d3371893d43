#include "kernels/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"

namespace headroom::kernels {

void route_experts(const float* logits, const RouteArgs& r, ExpertGating gating, bool normalize) {
    const uint32_t E = r.n_expert, k = r.n_used;
    HR_CHECK(E <= kMaxExperts && k >= 1 && k <= E && k <= kMaxExpertsUsed);
    int32_t* expert = r.expert();
    float* weight = r.weight();
    float p[kMaxExperts];  // (E) what the top k is chosen by
    bool taken[kMaxExperts];
    for (int64_t t = 0; t < r.n_tokens; ++t) {
        const float* l = logits + t * E;
        if (gating == ExpertGating::Softmax) {
            const float m = *std::max_element(l, l + E);
            float sum = 0;
            for (uint32_t e = 0; e < E; ++e) sum += p[e] = std::exp(l[e] - m);
            for (uint32_t e = 0; e < E; ++e) p[e] /= sum;
        } else {
            std::copy(l, l + E, p);
        }
        std::fill(taken, taken + E, false);
        int32_t* ex = expert + t * k;
        float* w = weight + t * k;
        for (uint32_t j = 0; j < k; ++j) {
            uint32_t best = 0;
            while (taken[best]) ++best;
            // A NaN (a damaged model's logit) loses to any number.
            for (uint32_t e = best + 1; e < E; ++e)
                if (!taken[e] && (p[e] > p[best] || (std::isnan(p[best]) && !std::isnan(p[e]))))
                    best = e;
            taken[best] = true;
            ex[j] = static_cast<int32_t>(best);
            w[j] = p[best];
        }
        if (gating == ExpertGating::SoftmaxOfTopK) {
            // Chosen by falling logit: w[0] is the largest.
            float sum = 0;
            for (uint32_t j = 0; j < k; ++j) sum += w[j] = std::exp(w[j] - p[ex[0]]);
            for (uint32_t j = 0; j < k; ++j) w[j] /= sum;
        } else if (normalize) {
            float sum = 0;
            for (uint32_t j = 0; j < k; ++j) sum += w[j];
            for (uint32_t j = 0; j < k; ++j) w[j] /= sum;
        }
    }
    // The expert-sorted order: a counting sort, tokens ascending within an expert.
    int32_t* start = r.start();
    std::fill(start, start + E + 1, 0);
    const int64_t n_rows = r.n_tokens * k;
    for (int64_t i = 0; i < n_rows; ++i) ++start[expert[i] + 1];
    for (uint32_t e = 0; e < E; ++e) start[e + 1] += start[e];
    int32_t next[kMaxExperts];
    std::copy(start, start + E, next);
    int32_t* row = r.row();
    int32_t* token = r.token();
    for (int64_t i = 0; i < n_rows; ++i) {
        const int32_t at = next[expert[i]]++;
        row[i] = at;
        token[at] = static_cast<int32_t>(i / k);
    }
}

void gather_routed(const float* x, int64_t n_cols, const RouteArgs& r, float* out) {
    const int32_t* token = r.token();
    const int64_t n_rows = r.n_tokens * r.n_used;
    for (int64_t i = 0; i < n_rows; ++i)
        std::memcpy(out + i * n_cols, x + int64_t{token[i]} * n_cols, n_cols * sizeof(float));
}

void combine_routed(const float* ys, int64_t n_cols, const RouteArgs& r, float* out) {
    const uint32_t k = r.n_used;
    const int32_t* row = r.row();
    const float* weight = r.weight();
    for (int64_t t = 0; t < r.n_tokens; ++t) {
        float* o = out + t * n_cols;
        std::fill(o, o + n_cols, 0.0f);
        for (uint32_t j = 0; j < k; ++j) {
            const float w = weight[t * k + j];
            const float* y = ys + int64_t{row[t * k + j]} * n_cols;
            for (int64_t c = 0; c < n_cols; ++c) o[c] += w * y[c];
        }
    }
}

void add_expert_bias(float* y, const float* bias, int64_t n_cols, const RouteArgs& r) {
    const int32_t* start = r.start();
    for (uint32_t e = 0; e < r.n_expert; ++e) {
        const float* b = bias + int64_t{e} * n_cols;
        for (int32_t i = start[e]; i < start[e + 1]; ++i) {
            float* yi = y + int64_t{i} * n_cols;
            for (int64_t c = 0; c < n_cols; ++c) yi[c] += b[c];
        }
    }
}

void swiglu_oai(float* gate, const float* up, int64_t n, float alpha, float limit) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = std::min(gate[i], limit);
        const float u = std::clamp(up[i], -limit, limit);
        gate[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
    }
}

}  // namespace headroom::kernels
