#include "shape/hparams.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "core/strings.h"
#include "format/gguf-reader.h"
#include "kernels/moe.h"

namespace headroom {

uint32_t HParams::n_swa_layers() const {
    uint32_t n = 0;
    for (bool b : layer_is_swa) n += b;
    return n;
}

bool is_supported_arch(const std::string& arch) {
    return arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "gemma3" ||
           arch == "qwen2moe" || arch == "qwen3moe" || arch == "gpt-oss";
}

namespace {

uint32_t to_u32(const gguf::GgufFile& f, const std::string& key, uint64_t v) {
    if (v > 0xFFFFFFFFu) fail("{}: metadata '{}' is {}, expected a 32-bit count", f.path(), key, v);
    return static_cast<uint32_t>(v);
}

// A float the forward pass divides by, takes powers of or adds under a square
// root: NaN, infinities, negatives, and values a float cannot hold (they
// would round to 0 or infinity) are refused here, by name, instead of
// turning every logit into NaN.
float checked_float(const gguf::GgufFile& f, const std::string& key, double v, bool zero_ok) {
    const auto x = static_cast<float>(v);
    if (std::isnan(v) || v < 0 || (x == 0 ? v != 0 || !zero_ok : !std::isnormal(x)))
        fail("{}: metadata '{}' is {}, expected a finite, normal float {} 0", f.path(), key, v,
             zero_ok ? ">=" : ">");
    return x;
}

// The highest layer index among the file's "blk.N." tensors, or -1 if none.
int64_t last_layer_in_tensors(const gguf::GgufFile& f) {
    int64_t last = -1;
    for (const auto& t : f.tensors()) {
        std::string_view n = t.name;
        if (!n.starts_with("blk.")) continue;
        n.remove_prefix(4);
        uint64_t il = 0;
        const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), il);
        if (ec != std::errc() || end == n.data() + n.size() || *end != '.') continue;
        last = std::max(last, static_cast<int64_t>(std::min<uint64_t>(il, UINT32_MAX)));
    }
    return last;
}

// Experts: counts, widths, and whether the router renormalizes the chosen
// weights (llama.cpp's choice per architecture: Mixtral and Qwen3-MoE do,
// Qwen2-MoE does not; a file's expert_weights_norm overrides).
// Only the architectures headroom runs are checked and given n_ff as the
// widest feed-forward (every layer of theirs is a MoE layer).
template <class Opt>
void read_experts(const gguf::GgufFile& f, const std::string& a, HParams& hp, const Opt& opt) {
    hp.n_expert = opt(a + "expert_count", 0);
    hp.n_expert_used = opt(a + "expert_used_count", 0);
    if (hp.n_expert == 0 || !is_supported_arch(hp.arch)) return;
    if (hp.n_expert > kernels::kMaxExperts || hp.n_expert_used == 0 ||
        hp.n_expert_used > std::min(hp.n_expert, kernels::kMaxExpertsUsed))
        fail(
            "{}: expert_count {} and expert_used_count {}: expected 1 to {} experts, of which 1 "
            "to {} are used",
            f.path(), hp.n_expert, hp.n_expert_used, kernels::kMaxExperts,
            std::min(hp.n_expert, kernels::kMaxExpertsUsed));
    hp.n_ff_exp = opt(a + "expert_feed_forward_length", hp.n_ff);
    if (hp.n_ff_exp == 0)
        fail(
            "{}: {}expert_feed_forward_length (or feed_forward_length) is 0 or missing: the "
            "experts have no width",
            f.path(), a);
    hp.n_ff_shexp = opt(a + "expert_shared_feed_forward_length", 0);
    hp.n_ff = std::max(hp.n_ff_exp, hp.n_ff_shexp);
    hp.expert_weights_norm = hp.arch != "qwen2moe" && hp.arch != "gpt-oss";
    hp.softmax_after_topk = hp.arch == "gpt-oss";
    hp.swiglu_oai = hp.arch == "gpt-oss";
    if (auto v = f.get_bool(a + "expert_weights_norm")) hp.expert_weights_norm = *v;
}

}  // namespace

HParams read_hparams(const gguf::GgufFile& f, bool for_inference) {
    HParams hp;
    hp.arch = std::string(f.architecture());
    if (auto n = f.get_string("general.name")) hp.name = std::string(*n);
    // An architecture is a short identifier, and every key name is built on
    // it: anything else is a damaged header.
    if (hp.arch.empty() || hp.arch.size() > 64)
        fail("{}: general.architecture is '{}', expected a name such as llama", f.path(),
             clipped(hp.arch));
    if (for_inference && !is_supported_arch(hp.arch))
        fail(
            "{}: architecture '{}' is not supported, expected one of llama, qwen2, qwen3, "
            "gemma3, qwen2moe, qwen3moe, gpt-oss",
            f.path(), clipped(hp.arch));
    const std::string a = hp.arch + ".";
    auto req = [&](const std::string& key) { return to_u32(f, key, f.require_uint(key)); };
    auto opt = [&](const std::string& key, uint32_t dflt) {
        auto v = f.get_uint(key);
        return v ? to_u32(f, key, *v) : dflt;
    };
    hp.n_embd = req(a + "embedding_length");
    hp.n_layer = req(a + "block_count");
    hp.n_head = req(a + "attention.head_count");
    hp.n_ctx_train = opt(a + "context_length", 0);
    hp.n_ff = opt(a + "feed_forward_length", 0);
    hp.n_head_kv = opt(a + "attention.head_count_kv", hp.n_head);
    if (hp.n_embd == 0 || hp.n_layer == 0 || hp.n_head == 0 || hp.n_head_kv == 0)
        fail(
            "{}: embedding_length, block_count, head_count and head_count_kv must be > 0 "
            "(got {}, {}, {}, {})",
            f.path(), hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv);
    if (hp.n_layer > kMaxLayers)
        fail("{}: block_count is {}, more than {}: the header is damaged", f.path(), hp.n_layer,
             kMaxLayers);
    if (const auto parts = f.get_uint("split.count"); parts && *parts > 1)
        fail(
            "{}: one part of a model split into {} files: merge them first (llama-gguf-split "
            "--merge)",
            f.path(), *parts);
    // A model file holds every layer's tensors; a count past them is a
    // damaged header (and would size per-layer tables for nothing).
    if (const int64_t last = last_layer_in_tensors(f); last >= 0 && hp.n_layer > last + 1)
        fail("{}: block_count is {} but the file's layer tensors stop at blk.{}", f.path(),
             hp.n_layer, last);
    if (hp.n_head % hp.n_head_kv != 0)
        fail("{}: head_count {} is not a multiple of head_count_kv {}", f.path(), hp.n_head,
             hp.n_head_kv);
    hp.head_dim_k = opt(a + "attention.key_length", hp.n_embd / hp.n_head);
    hp.head_dim_v = opt(a + "attention.value_length", hp.head_dim_k);
    hp.n_rot = opt(a + "rope.dimension_count", hp.head_dim_k);
    if (hp.n_rot > hp.head_dim_k || hp.n_rot % 2 != 0)
        fail("{}: rope.dimension_count {} must be even and at most the head size {}", f.path(),
             hp.n_rot, hp.head_dim_k);
    auto opt_float = [&](const std::string& key, float dflt, bool zero_ok) {
        auto v = f.get_float(key);
        return v ? checked_float(f, key, *v, zero_ok) : dflt;
    };
    hp.rms_eps = opt_float(a + "attention.layer_norm_rms_epsilon", hp.rms_eps, true);
    hp.rope_base = opt_float(a + "rope.freq_base", hp.rope_base, false);
    hp.rope_base_local = hp.rope_base;
    // A linear scaling factor of 0 means none, as llama.cpp reads it.
    auto inverse_factor = [&](const std::string& key) {
        const float factor = opt_float(key, 1.0f, true);
        return factor == 0 ? 1.0f : 1.0f / factor;
    };
    if (auto type = f.get_string(a + "rope.scaling.type"); type && *type == "linear") {
        hp.rope_scale = inverse_factor(a + "rope.scaling.factor");
    } else if (f.has(a + "rope.scale_linear")) {
        hp.rope_scale = inverse_factor(a + "rope.scale_linear");
    }
    if (auto type = f.get_string(a + "rope.scaling.type"); type && *type == "yarn") {
        hp.yarn_factor = opt_float(a + "rope.scaling.factor", 0.0f, true);
        if (hp.yarn_factor > 0 && hp.yarn_factor <= 1) hp.yarn_factor = 0;  // extends nothing
        hp.yarn_orig_ctx = opt(a + "rope.scaling.original_context_length", hp.n_ctx_train);
        hp.yarn_beta_fast = opt_float(a + "rope.scaling.yarn_beta_fast", 32.0f, false);
        hp.yarn_beta_slow = opt_float(a + "rope.scaling.yarn_beta_slow", 1.0f, false);
        hp.yarn_truncate = hp.arch != "gpt-oss";
        if (hp.yarn_factor > 0 && hp.yarn_orig_ctx == 0)
            fail(
                "{}: YaRN RoPE scaling needs {}rope.scaling.original_context_length (or "
                "context_length) > 0",
                f.path(), a);
    }
    read_experts(f, a, hp, opt);
    hp.kv_lora_rank = opt(a + "attention.kv_lora_rank", 0);
    hp.qk_rope_head_dim = opt(a + "rope.dimension_count", 0);

    if (auto v = f.get_uint(a + "vocab_size"))
        hp.n_vocab = to_u32(f, a + "vocab_size", *v);
    else if (const auto* tokens = f.get_array("tokenizer.ggml.tokens"))
        hp.n_vocab = static_cast<uint32_t>(tokens->n);
    else if (const auto* emb = f.find_tensor("token_embd.weight"))
        hp.n_vocab = static_cast<uint32_t>(emb->ne[1]);

    hp.tied_embeddings = f.find_tensor("output.weight") == nullptr;
    hp.rope_style = hp.arch == "llama" ? RopeStyle::Normal : RopeStyle::NeoX;
    // A Hugging Face folder's llama keeps its q/k projections unpermuted:
    // the same rotation pairs (i, i + d/2) (checkpoint/hf-folder.h).
    if (f.get_bool("headroom.rope.neox").value_or(false)) hp.rope_style = RopeStyle::NeoX;
    hp.qk_norm = hp.arch == "qwen3" || hp.arch == "qwen3moe" || hp.arch == "gemma3";

    hp.layer_is_swa.assign(hp.n_layer, false);
    if (hp.arch == "gemma3" || hp.arch == "gpt-oss") {
        hp.sliding_window = opt(a + "attention.sliding_window", 0);
        // The last layer of every `pattern` is global: gemma3 has 5 local : 1
        // global, gpt-oss alternates (even layers local), unless the file
        // says otherwise.
        const uint32_t pattern =
            opt(a + "attention.sliding_window_pattern", hp.arch == "gemma3" ? 6 : 2);
        if (hp.sliding_window > 0 && pattern > 0)
            for (uint32_t il = 0; il < hp.n_layer; ++il)
                hp.layer_is_swa[il] = (il + 1) % pattern != 0;
        hp.rope_base_local = opt_float(a + "rope.freq_base_swa",
                                       hp.arch == "gemma3" ? 10000.0f : hp.rope_base, false);
    } else if (auto w = f.get_uint(a + "attention.sliding_window"); w && *w > 0) {
        hp.sliding_window = to_u32(f, a + "attention.sliding_window", *w);
        hp.layer_is_swa.assign(hp.n_layer, true);
    }
    return hp;
}

}  // namespace headroom
