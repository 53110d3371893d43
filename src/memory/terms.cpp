#include "memory/terms.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>

#include "core/error.h"
#include "core/strings.h"
#include "core/thread-pool.h"
#include "core/units.h"
#include "format/gguf-reader.h"
#include "kernels/backend.h"

namespace headroom {

namespace {

// Hash index entry per KV block for prefix caching (hash, block id, LRU links).
constexpr uint64_t kPrefixIndexBytesPerBlock = 64;
constexpr uint32_t kDefaultBatchedTokens = 512;

uint64_t div_ceil(uint64_t a, uint64_t b) {
    return (a + b - 1) / b;
}

uint64_t kv_row_bytes(KvDtype dtype, uint32_t n, const char* what) {
    const TensorType t = tensor_type(dtype);
    if (n % traits(t).block_size != 0)
        fail("--kv-dtype {}: {} {} is not a multiple of {}'s block size {}", name(dtype), what, n,
             traits(t).name, traits(t).block_size);
    return row_bytes(t, n);
}

// Blocks a group holds at once for one sequence of `len` tokens.
uint32_t blocks_for(const KvGroupPlan& g, uint64_t len, uint32_t block_size, uint32_t step) {
    const uint64_t full = div_ceil(len, block_size);
    if (g.kind != AttentionKind::SlidingWindow) return static_cast<uint32_t>(full);
    // The oldest key still needed is window - 1 tokens back; a step adds up to
    // `step` tokens; the window's start is not block-aligned (one more block).
    const uint64_t held = div_ceil(uint64_t{g.window} - 1 + step, block_size) + 1;
    return static_cast<uint32_t>(std::min(full, held));
}

uint64_t kv_bytes_for_len(const std::vector<KvGroupPlan>& groups, uint64_t len, uint32_t block_size,
                          uint32_t step) {
    uint64_t total = 0;
    for (const auto& g : groups) total += blocks_for(g, len, block_size, step) * g.block_bytes;
    return total;
}

std::string percent(double f) {
    return fmt::format("{:.0f}%", f * 100);
}

}  // namespace

uint64_t estimate_tokenizer_bytes(uint64_t n_vocab, uint64_t vocab_text_bytes, uint64_t n_merges) {
    // Token strings with their heap blocks, a text->id hash map, scores and
    // attributes, and the merge-rank map.
    return vocab_text_bytes + n_vocab * 96 + n_merges * 64;
}

uint64_t step_view_words(const EngineConfig& c, uint64_t n_groups) {
    const uint64_t table_words = div_ceil(c.max_model_len, c.block_size);
    return uint64_t{c.max_num_batched_tokens} * (3 + n_groups) + c.max_logit_rows +
           uint64_t{c.max_num_seqs} * (n_groups * (1 + table_words) + 1);
}

MemoryPlan plan_memory_fitting(const ModelDesc& model, const EngineConfig& config,
                               const BudgetSpec& budget, std::string* note) {
    MemoryPlan p = plan_memory(model, config, budget);
    if (p.fits || config.max_model_len != 0 || p.fit_len == 0) return p;
    EngineConfig shorter = config;
    shorter.max_model_len = p.fit_len;
    MemoryPlan q = plan_memory(model, shorter, budget);
    if (!q.fits) return p;
    if (note)
        *note = fmt::format(
            "the trained context of {} tokens needs {} of KV and the budget leaves room for {} "
            "tokens: "
            "serving up to {} tokens a sequence (--max-model-len sets it; more memory, or "
            "--kv-dtype q8_0, gives more)",
            p.config.max_model_len, format_bytes(p.kv_bytes_per_seq), p.fit_len, p.fit_len);
    return q;
}

std::vector<DeviceTerms> MemoryPlan::device_terms() const {
    DeviceTerms d{config.device, weights_bytes, kv_cache_bytes, activations_bytes(),
                  runtime_bytes()};
    if (config.device == "host") return {d};
    DeviceTerms host{"host", 0, 0, activations.staging_bytes,
                     runtime_bytes() - runtime.device_bytes()};
    d.activations_bytes = activations.device_bytes;
    d.runtime_bytes = runtime.device_bytes();
    return {d, host};
}

ModelDesc describe_gguf(const gguf::GgufFile& file) {
    ModelDesc m;
    m.hp = read_hparams(file, false);
    m.source = file.path();
    m.weights_exact = true;
    m.layer_weight_bytes.assign(m.hp.n_layer, 0);
    std::map<TensorType, uint64_t> by_type;
    for (const auto& t : file.tensors()) {
        m.weight_bytes += t.size_bytes;
        const uint64_t on_device = t.n_dims == 1 ? t.n_elements * 4 : t.size_bytes;
        m.device_weight_bytes += kernels::device_weight_slot(on_device);
        m.n_params += t.n_elements;
        if (t.n_dims > 1) by_type[t.type] += t.size_bytes;
        if (t.name.starts_with("blk.")) {
            uint32_t il = 0;
            const auto rest = t.name.substr(4);
            auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), il);
            if (ec == std::errc() && il < m.hp.n_layer) m.layer_weight_bytes[il] += t.size_bytes;
        }
    }
    uint64_t best = 0;
    for (const auto& [type, bytes] : by_type) {
        if (bytes > best) {
            best = bytes;
            m.weight_type = std::string(name(type));
        }
    }
    uint64_t text_bytes = 0, n_vocab = 0, n_merges = 0;
    if (const auto* tokens = file.get_array("tokenizer.ggml.tokens")) {
        n_vocab = tokens->n;
        for (auto s : tokens->strings) text_bytes += s.size();
    }
    if (const auto* merges = file.get_array("tokenizer.ggml.merges")) {
        n_merges = merges->n;
        for (auto s : merges->strings) text_bytes += s.size();
    }
    m.tokenizer_bytes = estimate_tokenizer_bytes(n_vocab, text_bytes, n_merges);
    // Parsed index: a string view per array string, an entry per key and per
    // tensor with their lookup-map nodes.
    uint64_t n_array_strings = 0;
    for (const auto& [key, value] : file.metadata())
        if (const auto* a = std::get_if<gguf::Array>(&value.data))
            n_array_strings += a->strings.size();
    m.metadata_bytes = file.data_offset() + n_array_strings * sizeof(std::string_view) +
                       file.metadata().size() * (sizeof(gguf::Value) + 96) +
                       file.tensors().size() * (sizeof(gguf::TensorInfo) + 64);
    return m;
}

std::vector<KvGroupPlan> kv_groups_for(const HParams& hp, const EngineConfig& config) {
    std::vector<KvGroupPlan> groups;
    if (hp.kv_lora_rank > 0) {
        // MLA caches the compressed latent and the shared RoPE key per token.
        KvGroupPlan g;
        g.kind = AttentionKind::Latent;
        const uint32_t dim = hp.kv_lora_rank + hp.qk_rope_head_dim;
        for (uint32_t il = config.n_cpu_layers; il < hp.n_layer; ++il) g.layers.push_back(il);
        g.bytes_per_token = g.layers.size() * kv_row_bytes(config.kv_dtype, dim, "latent size");
        groups.push_back(std::move(g));
    } else {
        const uint64_t per_layer =
            uint64_t{hp.n_head_kv} * (kv_row_bytes(config.kv_dtype, hp.head_dim_k, "key size") +
                                      kv_row_bytes(config.kv_dtype, hp.head_dim_v, "value size"));
        KvGroupPlan full, swa;
        full.kind = AttentionKind::Full;
        swa.kind = AttentionKind::SlidingWindow;
        swa.window = hp.sliding_window;
        for (uint32_t il = config.n_cpu_layers; il < hp.n_layer; ++il) {
            const bool is_swa = !config.swa_full && hp.sliding_window > 0 &&
                                il < hp.layer_is_swa.size() && hp.layer_is_swa[il];
            (is_swa ? swa : full).layers.push_back(il);
        }
        for (KvGroupPlan* g : {&full, &swa}) {
            if (g->layers.empty()) continue;
            g->bytes_per_token = g->layers.size() * per_layer;
            groups.push_back(std::move(*g));
        }
    }
    for (auto& g : groups) g.block_bytes = g.bytes_per_token * config.block_size;
    return groups;
}

namespace {

// Every term is a product of the model's widths and the configuration's
// counts. Past an exbibyte such a product can wrap around 64 bits and plan a
// huge configuration as small, so it is refused, with its numbers, before
// any term is counted. The bound is over-generous on purpose: each width is
// counted as f32 and as often as any term reads it.
void refuse_past_an_exbibyte(const ModelDesc& model, const EngineConfig& c) {
    using F = long double;
    const HParams& hp = model.hp;
    const F head = std::max(hp.head_dim_k, hp.head_dim_v);
    const F kv_per_token = F(hp.n_layer) *
                           (F(hp.n_head_kv) * head + F(hp.kv_lora_rank) + F(hp.qk_rope_head_dim)) *
                           2 * 4;
    const F seq_tokens = F(c.max_num_seqs) * c.max_model_len;
    const F widths = F(hp.n_embd) + F(hp.n_ff) + (F(hp.n_head) + hp.n_head_kv) * head;
    const F step = F(c.max_num_batched_tokens) * widths * 16 +
                   F(std::max(c.max_logit_rows, c.max_num_seqs)) * hp.n_vocab * 4 +
                   F(hp.n_vocab) * 16 + F(c.n_threads) * (widths * 64 + (1 << 20));
    const F need = F(model.weight_bytes) + seq_tokens * (kv_per_token + 16) + step;
    if (need > 0x1p60L)
        fail(
            "{} at --max-num-seqs {}, --max-model-len {}, --max-num-batched-tokens {} and "
            "--threads {} would need more than 1 EiB: lower them",
            model.source, c.max_num_seqs, c.max_model_len, c.max_num_batched_tokens, c.n_threads);
}

}  // namespace

MemoryPlan plan_memory(const ModelDesc& model, const EngineConfig& config_in,
                       const BudgetSpec& budget) {
    const HParams& hp = model.hp;
    MemoryPlan p;
    EngineConfig c = config_in;
    if (c.max_model_len == 0) c.max_model_len = hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096;
    if (c.max_num_seqs == 0) fail("--max-num-seqs must be at least 1");
    if (c.block_size == 0 || c.block_size > 4096)
        fail("--block-size {} is out of range, expected 1..4096", c.block_size);
    if (c.n_threads == 0) c.n_threads = 1;
    if (c.max_num_batched_tokens == 0)
        c.max_num_batched_tokens = std::max(kDefaultBatchedTokens, c.max_num_seqs);
    if (c.max_num_batched_tokens < c.max_num_seqs)
        fail(
            "--max-num-batched-tokens {} is below --max-num-seqs {}: every running sequence "
            "needs a token per step",
            c.max_num_batched_tokens, c.max_num_seqs);
    if (c.max_logit_rows == 0) c.max_logit_rows = c.max_num_seqs;
    if (c.n_cpu_layers >= hp.n_layer && c.n_cpu_layers > 0)
        fail("{} layers on the CPU leaves none of the model's {} layers on the device",
             c.n_cpu_layers, hp.n_layer);
    if (c.n_cpu_layers > 0 && model.layer_weight_bytes.size() != hp.n_layer)
        fail("layers on the CPU: the weights of {} are not known per layer", model.source);
    refuse_past_an_exbibyte(model, c);
    p.config = c;
    p.budget_spec = budget;

    const bool gpu = c.device != "host";
    p.weights_bytes =
        gpu && model.device_weight_bytes ? model.device_weight_bytes : model.weight_bytes;
    for (uint32_t il = 0; il < c.n_cpu_layers; ++il)
        p.weights_bytes -= model.layer_weight_bytes[il];
    p.kv_groups = kv_groups_for(hp, c);
    for (auto& g : p.kv_groups)
        g.max_blocks_per_seq =
            blocks_for(g, c.max_model_len, c.block_size, c.max_num_batched_tokens);
    if (hp.kv_lora_rank > 0) {
        p.kv_bytes_per_token = p.kv_groups[0].bytes_per_token;
    } else {
        p.kv_bytes_per_token = 0;
        for (const auto& g : p.kv_groups) p.kv_bytes_per_token += g.bytes_per_token;
    }
    p.kv_bytes_per_seq =
        kv_bytes_for_len(p.kv_groups, c.max_model_len, c.block_size, c.max_num_batched_tokens);
    p.activations = plan_activations(hp, c.max_num_batched_tokens, c.max_logit_rows, c.n_threads,
                                     c.device == "host");

    p.runtime.thread_stacks_bytes = uint64_t{c.n_threads - 1} * ThreadPool::kWorkerStackBytes;
    p.runtime.device_context_bytes = budget.device_context_bytes;
    p.runtime.tokenizer_bytes = model.tokenizer_bytes;
    p.runtime.metadata_bytes = model.metadata_bytes;
    p.runtime.step_view_bytes = step_view_words(c, p.kv_groups.size()) * 4;
    if (c.device != "host") p.runtime.step_view_device_bytes = p.runtime.step_view_bytes;
    p.runtime.sequences_bytes = uint64_t{c.max_num_seqs} *
                                (uint64_t{c.max_model_len} * 4 +
                                 p.kv_groups.size() * div_ceil(c.max_model_len, c.block_size) * 4);

    // Demand: blocks for max_num_seqs sequences of max_model_len.
    uint64_t demand_bytes = 0;
    for (const auto& g : p.kv_groups)
        demand_bytes += uint64_t{c.max_num_seqs} * g.max_blocks_per_seq * g.block_bytes;
    // What the budget holds besides the pool: everything on the CPU; on a
    // GPU, what the device holds (the host's share is host memory).
    const uint64_t fixed_bytes =
        gpu ? p.weights_bytes + p.activations.device_bytes + p.runtime.device_bytes()
            : p.weights_bytes + p.activations_bytes() + p.runtime.thread_stacks_bytes +
                  p.runtime.tokenizer_bytes + p.runtime.metadata_bytes + p.runtime.sequences_bytes +
                  p.runtime.step_view_bytes + p.runtime.device_context_bytes;
    // Bytes the pool may take, counting each block's prefix-index entry.
    uint64_t pool_bytes = 0;
    if (budget.kv_cache_bytes > 0) {
        pool_bytes = budget.kv_cache_bytes;
    } else {
        const auto total =
            static_cast<uint64_t>(static_cast<double>(budget.device_bytes) * budget.mem_fraction);
        p.budget_bytes = total;
        if (total > fixed_bytes) {
            uint64_t sum_block_bytes = 0;
            for (const auto& g : p.kv_groups) sum_block_bytes += g.block_bytes;
            const uint64_t left = total - fixed_bytes;
            // Leave room for the index (host memory, so not on a GPU): scale
            // left by block/(block + index entry).
            const double avg_block = static_cast<double>(sum_block_bytes) / p.kv_groups.size();
            const double index = gpu ? 0.0 : kPrefixIndexBytesPerBlock;
            const auto usable =
                static_cast<uint64_t>(static_cast<double>(left) * avg_block / (avg_block + index));
            pool_bytes = std::min(usable, demand_bytes);
        }
    }
    // Split the pool between groups in proportion to their demand, so that
    // each group runs out at the same concurrency.
    p.kv_cache_bytes = 0;
    uint64_t n_blocks_total = 0;
    for (auto& g : p.kv_groups) {
        const uint64_t demand_g = uint64_t{c.max_num_seqs} * g.max_blocks_per_seq * g.block_bytes;
        const auto share =
            static_cast<uint64_t>(static_cast<long double>(pool_bytes) * demand_g / demand_bytes);
        g.n_blocks = share / g.block_bytes;
        p.kv_cache_bytes += g.n_blocks * g.block_bytes;
        n_blocks_total += g.n_blocks;
    }
    p.runtime.prefix_index_bytes = n_blocks_total * kPrefixIndexBytesPerBlock;
    if (budget.kv_cache_bytes > 0) p.budget_bytes = p.budgeted_bytes();

    // Capacities.
    p.max_num_seqs_at_max_model_len = UINT32_MAX;
    for (const auto& g : p.kv_groups)
        p.max_num_seqs_at_max_model_len = static_cast<uint32_t>(
            std::min<uint64_t>(p.max_num_seqs_at_max_model_len,
                               g.max_blocks_per_seq ? g.n_blocks / g.max_blocks_per_seq : 0));
    uint64_t lo = 0, hi = uint64_t{c.max_model_len} * 1024;
    auto fits_len = [&](uint64_t len) {
        for (const auto& g : p.kv_groups)
            if (uint64_t{c.max_num_seqs} *
                    blocks_for(g, len, c.block_size, c.max_num_batched_tokens) >
                g.n_blocks)
                return false;
        return true;
    };
    while (lo < hi) {
        const uint64_t mid = (lo + hi + 1) / 2;
        if (fits_len(mid))
            lo = mid;
        else
            hi = mid - 1;
    }
    p.max_model_len_at_max_num_seqs = static_cast<uint32_t>(std::min<uint64_t>(lo, UINT32_MAX));

    p.fits = p.max_num_seqs_at_max_model_len >= 1 &&
             (budget.kv_cache_bytes > 0 || p.budgeted_bytes() <= p.budget_bytes);
    if (!p.fits) {
        const uint64_t kv_room =
            budget.kv_cache_bytes > 0
                ? budget.kv_cache_bytes
                : (p.budget_bytes > fixed_bytes ? p.budget_bytes - fixed_bytes : 0);
        std::string msg;
        if (budget.kv_cache_bytes == 0 && p.budget_bytes <= fixed_bytes) {
            msg = fmt::format(
                "weights ({}), activations ({}) and runtime ({}) need {} but the budget is {} ({} "
                "of "
                "{}): nothing is left for the KV cache",
                format_bytes(p.weights_bytes), format_bytes(p.activations_bytes()),
                format_bytes(p.runtime_bytes()), format_bytes(fixed_bytes),
                format_bytes(p.budget_bytes), percent(budget.mem_fraction),
                format_bytes(budget.device_bytes));
        } else {
            msg = fmt::format("KV for {} tokens needs {}, the budget leaves {}", c.max_model_len,
                              format_bytes(p.kv_bytes_per_seq), format_bytes(kv_room));
        }
        std::vector<std::string> fixes;
        // Longest context one sequence can have in the room left.
        uint64_t l_lo = 0, l_hi = c.max_model_len;
        while (l_lo < l_hi) {
            const uint64_t mid = (l_lo + l_hi + 1) / 2;
            if (kv_bytes_for_len(p.kv_groups, mid, c.block_size, c.max_num_batched_tokens) <=
                kv_room)
                l_lo = mid;
            else
                l_hi = mid - 1;
        }
        const uint64_t fit_len = l_lo / c.block_size * c.block_size;
        if (fit_len >= c.block_size) {
            fixes.push_back(fmt::format("use --max-model-len {}", fit_len));
            p.fit_len = static_cast<uint32_t>(fit_len);
        }
        if (c.kv_dtype != KvDtype::Q8_0) {
            EngineConfig q8 = c;
            q8.kv_dtype = KvDtype::Q8_0;
            try {
                auto groups = kv_groups_for(hp, q8);
                for (auto& g : groups)
                    g.max_blocks_per_seq =
                        blocks_for(g, c.max_model_len, c.block_size, c.max_num_batched_tokens);
                fixes.push_back(
                    fmt::format("--kv-dtype q8_0 ({})",
                                format_bytes(kv_bytes_for_len(groups, c.max_model_len, c.block_size,
                                                              c.max_num_batched_tokens))));
            } catch (const Error&) {
            }
        }
        if (budget.kv_cache_bytes > 0) {
            fixes.push_back(fmt::format("--kv-cache-memory {}", format_bytes(p.kv_bytes_per_seq)));
        } else if (budget.device_bytes > 0) {
            const double need = static_cast<double>(fixed_bytes + p.kv_bytes_per_seq) /
                                static_cast<double>(budget.device_bytes);
            if (need <= 0.98) fixes.push_back(fmt::format("--mem-fraction {:.2f}", need + 0.005));
        }
        if (p.weights_bytes > p.kv_bytes_per_seq / 4)
            fixes.push_back("a smaller weight type (headroom plan --compare-quant)");
        std::string fix_text;
        for (size_t i = 0; i < fixes.size(); ++i)
            fix_text += (i == 0 ? "" : (i + 1 == fixes.size() ? ", or " : ", or ")) + fixes[i];
        p.refusal = fix_text.empty() ? msg : msg + ": " + fix_text;
    }
    return p;
}

}  // namespace headroom
