#include "shape/quant-mix.h"

#include <algorithm>
#include <string>

namespace headroom {

namespace {

bool contains(const std::string& s, std::string_view part) {
    return s.find(part) != std::string::npos;
}

enum class Category {
    TokenEmbd,
    Output,
    AttnV,
    AttnKvB,
    AttnK,
    AttnQkv,
    AttnOutput,
    FfnDown,
    Other
};

Category category_of(const std::string& name) {
    if (name == "output.weight") return Category::Output;
    if (name == "token_embd.weight") return Category::TokenEmbd;
    if (contains(name, "attn_qkv.weight")) return Category::AttnQkv;
    if (contains(name, "attn_v.weight")) return Category::AttnV;
    if (contains(name, "attn_kv_b.weight")) return Category::AttnKvB;  // counted, not bumped
    if (contains(name, "attn_k.weight")) return Category::AttnK;
    if (contains(name, "attn_output.weight")) return Category::AttnOutput;
    if (contains(name, "ffn_down")) return Category::FfnDown;
    return Category::Other;
}

bool use_more_bits(int64_t i_layer, int64_t n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 ||
           (i_layer - n_layers / 8) % 3 == 2;
}

// The per-tensor choice, with llama.cpp's counters (they depend on the order
// tensors are visited: by layer, then by name).
struct Mix {
    const QuantRecipe& r;
    const HParams& hp;
    bool tied = true;
    int64_t n_attention_wv = 0;
    int64_t i_attention_wv = 0;
    int64_t i_ffn_down = 0;

    bool k_m() const { return r.mix == TensorMix::Q4_K_M || r.mix == TensorMix::Q5_K_M; }

    TensorType pick(const WeightTensor& t) {
        const Category cat = category_of(t.name);
        // llama.cpp's LLM_TYPE_70B: 80 layers with grouped KV heads (Llama 2/3 70B, Qwen2 72B).
        const bool is_70b = hp.n_layer == 80 && hp.n_head_kv < hp.n_head && hp.n_expert == 0;
        TensorType type = r.base;
        if (cat == Category::Output || (tied && cat == Category::TokenEmbd)) {
            if (r.mix == TensorMix::Mxfp4 || t.n_cols % traits(r.base).block_size != 0)
                type = TensorType::Q8_0;
            else if (type != TensorType::Q8_0)
                type = TensorType::Q6_K;
        } else if (r.mix == TensorMix::Mxfp4) {
            type = t.n_expert > 1 ? TensorType::MXFP4 : TensorType::Q8_0;
        } else if (cat == Category::AttnQkv) {
            if (r.mix == TensorMix::Q3_K_M || r.mix == TensorMix::Q3_K_L) type = TensorType::Q4_K;
            if (r.mix == TensorMix::Q4_K_M) type = TensorType::Q5_K;
            if (r.mix == TensorMix::Q5_K_M) type = TensorType::Q6_K;
        } else if (cat == Category::AttnV) {
            const bool gqa4 = hp.n_head_kv > 0 && hp.n_head / hp.n_head_kv >= 4;
            if (r.mix == TensorMix::Q2_K)
                type = gqa4 ? TensorType::Q4_K : TensorType::Q3_K;
            else if (r.mix == TensorMix::Q3_K_M)
                type = i_attention_wv < 2 ? TensorType::Q5_K : TensorType::Q4_K;
            else if (r.mix == TensorMix::Q3_K_L)
                type = TensorType::Q5_K;
            else if (r.mix == TensorMix::Iq4 && gqa4)
                type = TensorType::Q5_K;
            else if (k_m() && use_more_bits(i_attention_wv, n_attention_wv))
                type = TensorType::Q6_K;
            else if (r.mix == TensorMix::Q4_K_S && i_attention_wv < 4)
                type = TensorType::Q5_K;
            // 8 query heads share each attn_v in the 70B models: more bits cost little.
            if (is_70b && (type == TensorType::Q3_K || type == TensorType::Q4_K))
                type = TensorType::Q5_K;
            if (hp.n_expert == 8) type = TensorType::Q8_0;
            ++i_attention_wv;
        } else if (cat == Category::AttnK) {
            if (hp.n_expert == 8) type = TensorType::Q8_0;
        } else if (cat == Category::FfnDown) {
            // Mixture-of-experts files name the layer; dense ones count.
            const int64_t i_layer = hp.n_expert > 1 ? t.layer : i_ffn_down;
            const auto n_layer = static_cast<int64_t>(hp.n_layer);
            if (r.mix == TensorMix::Q2_K)
                type = TensorType::Q3_K;
            else if (r.mix == TensorMix::Q3_K_M)
                type = i_layer < n_layer / 16 ? TensorType::Q5_K : TensorType::Q4_K;
            else if (r.mix == TensorMix::Q3_K_L)
                type = TensorType::Q5_K;
            else if (k_m() && use_more_bits(i_layer, n_layer))
                type = TensorType::Q6_K;
            else if (r.mix == TensorMix::Iq4 && i_layer < n_layer / 8)
                type = TensorType::Q5_K;
            else if (r.mix == TensorMix::Q4_K_S && i_layer < n_layer / 8)
                type = TensorType::Q5_K;
            ++i_ffn_down;
        } else if (cat == Category::AttnOutput) {
            if (hp.n_expert == 8) {
                if (r.mix == TensorMix::Q2_K || r.mix == TensorMix::Q3_K_S ||
                    r.mix == TensorMix::Q3_K_M || r.mix == TensorMix::Iq4 ||
                    r.mix == TensorMix::Q4_K_M || r.mix == TensorMix::Q4_K_S)
                    type = TensorType::Q5_K;
            } else if (r.mix == TensorMix::Q2_K) {
                type = TensorType::Q3_K;
            } else if (r.mix == TensorMix::Q3_K_M) {
                type = TensorType::Q4_K;
            } else if (r.mix == TensorMix::Q3_K_L) {
                type = TensorType::Q5_K;
            }
        }
        return fit_type_to_row(type, t.n_cols);
    }
};

}  // namespace

bool is_quantizable(const WeightTensor& t) {
    if (!t.is_matrix()) return false;
    if (!t.name.ends_with("weight")) return false;
    if (contains(t.name, "_norm.weight")) return false;
    if (contains(t.name, "ffn_gate_inp.weight")) return false;
    return true;
}

TensorType fit_type_to_row(TensorType want, uint64_t row_length) {
    if (row_length % traits(want).block_size == 0) return want;
    TensorType f = TensorType::F16;
    switch (want) {
        case TensorType::Q4_K:
            f = TensorType::Q5_0;
            break;
        case TensorType::Q5_K:
            f = TensorType::Q5_1;
            break;
        case TensorType::Q6_K:
        case TensorType::Q8_K:
            f = TensorType::Q8_0;
            break;
        case TensorType::Q2_K:
        case TensorType::Q3_K:
            f = TensorType::Q4_0;
            break;
        case TensorType::IQ4_XS:
            f = TensorType::IQ4_NL;
            break;
        default:
            break;
    }
    return row_length % traits(f).block_size == 0 ? f : TensorType::F16;
}

std::vector<TensorType> choose_tensor_types(const std::vector<WeightTensor>& tensors,
                                            const HParams& hp, const QuantRecipe& recipe) {
    std::vector<size_t> order(tensors.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const WeightTensor &x = tensors[a], &y = tensors[b];
        return x.layer != y.layer ? x.layer < y.layer : x.name < y.name;
    });
    Mix mix{recipe, hp};
    for (const auto& t : tensors) {
        const Category cat = category_of(t.name);
        if (cat == Category::Output) mix.tied = false;
        if (cat == Category::AttnV || cat == Category::AttnQkv || cat == Category::AttnKvB)
            ++mix.n_attention_wv;
    }
    // llama.cpp applies its rules to quantized targets only (F16 stays F16).
    const bool mixed = recipe.mix != TensorMix::Pure && recipe.base != TensorType::F32 &&
                       recipe.base != TensorType::F16 && recipe.base != TensorType::BF16;
    std::vector<TensorType> types(tensors.size(), TensorType::F32);
    for (size_t i : order) {
        const WeightTensor& t = tensors[i];
        TensorType tt = TensorType::F32;
        if (is_quantizable(t)) tt = mixed ? mix.pick(t) : fit_type_to_row(recipe.base, t.n_cols);
        if (t.n_elements() % traits(tt).block_size != 0) tt = TensorType::F32;
        types[i] = tt;
    }
    return types;
}

}  // namespace headroom
