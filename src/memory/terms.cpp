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
#include "kernels/kv-layout.h"
#include "shape/placement.h"

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

uint32_t request_kv_blocks(const KvGroupPlan& g, uint32_t block_size, uint32_t n_prompt,
                           uint32_t n_kv_tokens, uint32_t n_candidates, uint32_t step) {
    const uint32_t end = (n_kv_tokens + block_size - 1) / block_size;
    const uint32_t first_pos =
        g.kind == AttentionKind::SlidingWindow
            ? kernels::first_visible(n_kv_tokens > 0 ? n_kv_tokens - 1 : 0, g.window)
            : 0;
    const uint32_t begin = std::min(first_pos / block_size, end);
    const uint32_t held = end - begin;
    if (n_candidates <= 1) return held;
    if (g.kind == AttentionKind::SlidingWindow)
        return n_candidates * blocks_for(g, n_kv_tokens, block_size, std::max(step, 1u));
    const uint32_t full_prompt = std::min(n_prompt / block_size, end);
    const uint32_t shared = full_prompt > begin ? full_prompt - begin : 0;
    return shared + n_candidates * (held - shared);
}

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

void refuse_past_device(MemoryPlan& p, std::string_view device) {
    const BudgetSpec& b = p.budget_spec;
    if (!p.fits || b.kv_cache_bytes == 0) return;
    const auto room = static_cast<uint64_t>(static_cast<double>(b.device_bytes) * b.mem_fraction);
    if (p.budgeted_bytes() <= room) return;
    p.fits = false;
    p.refusal = fmt::format("the terms on {} need {} but {} of its {} is {}", device,
                            format_bytes(p.budgeted_bytes()), percent(b.mem_fraction),
                            format_bytes(b.device_bytes), format_bytes(room));
}

std::vector<DeviceTerms> MemoryPlan::device_terms() const {
    DeviceTerms d{config.device, weights_bytes, kv_cache_bytes, activations_bytes(),
                  runtime_bytes()};
    if (config.device == "host") return {d};
    DeviceTerms host{"host", host_weights_bytes, host_kv_cache_bytes,
                     activations.staging_bytes + host_activations.device_bytes,
                     runtime_bytes() - runtime.device_bytes()};
    d.activations_bytes = activations.device_bytes;
    d.runtime_bytes = runtime.device_bytes();
    return {d, host};
}

namespace {

// A layer's experts: ffn_{gate,up,down}_exps (weights and gpt-oss's biases).
bool is_expert_tensor(std::string_view name) {
    return name.find("_exps.") != std::string_view::npos;
}

}  // namespace

ModelDesc describe_gguf(const gguf::GgufFile& file) {
    ModelDesc m;
    m.hp = read_hparams(file, false);
    m.source = file.path();
    m.weights_exact = true;
    m.layer_weight_bytes.assign(m.hp.n_layer, 0);
    m.layer_parts.assign(m.hp.n_layer, {});
    if (m.hp.n_expert > 0) m.layer_expert_parts.assign(m.hp.n_layer, {});
    std::map<TensorType, uint64_t> by_type;
    for (const auto& t : file.tensors()) {
        m.weight_bytes += t.size_bytes;
        const uint64_t on_device = t.n_dims == 1 ? t.n_elements * 4 : t.size_bytes;
        const uint64_t slot = kernels::device_weight_slot(on_device);
        m.device_weight_bytes += slot;
        m.largest_device_tensor_bytes = std::max(m.largest_device_tensor_bytes, slot);
        if (!is_expert_tensor(t.name))
            m.largest_dense_device_tensor_bytes =
                std::max(m.largest_dense_device_tensor_bytes, slot);
        // The CPU keeps a vector stored in another type as an f32 copy too;
        // a folder's vectors are f32 copies already, beside its mapped files
        // (the backend counts both, as for a copy it made), unless the folder
        // is written out to be run (a pre-quantized one, repacked).
        const auto section = file.data_section();
        const bool beside = t.data && !file.has_producers() &&
                            (t.data < section.data() || t.data >= section.data() + section.size());
        const uint64_t copy =
            t.n_dims == 1 && (t.type != TensorType::F32 || beside) ? t.n_elements * 4 : 0;
        const uint64_t on_host = t.size_bytes + copy;
        m.vector_copy_bytes += copy;
        uint32_t layer = 0;
        ModelDesc::PartBytes* part = &m.other;
        switch (tensor_role(t.name, &layer)) {
            case TensorRole::Embedding:
                part = &m.embedding;
                break;
            case TensorRole::Output:
                part = &m.output;
                break;
            case TensorRole::OutputNorm:
                part = &m.output_norm;
                break;
            case TensorRole::Layer:
                if (layer < m.hp.n_layer) part = &m.layer_parts[layer];
                if (layer < m.layer_expert_parts.size() && is_expert_tensor(t.name)) {
                    m.layer_expert_parts[layer].host += on_host;
                    m.layer_expert_parts[layer].device += slot;
                }
                break;
            case TensorRole::Other:
                break;
        }
        part->host += on_host;
        part->device += slot;
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
    m.metadata_bytes = file.header_bytes() + n_array_strings * sizeof(std::string_view) +
                       file.metadata().size() * (sizeof(gguf::Value) + 96) +
                       file.tensors().size() * (sizeof(gguf::TensorInfo) + 64);
    return m;
}

bool kv_dtype_fits(const HParams& hp, KvDtype dtype) {
    const uint32_t block = traits(tensor_type(dtype)).block_size;
    if (hp.kv_lora_rank > 0) return (hp.kv_lora_rank + hp.qk_rope_head_dim) % block == 0;
    return hp.head_dim_k % block == 0 && hp.head_dim_v % block == 0;
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
        // On headroom's GPU backend a split model's CPU layers have groups of
        // their own, in host memory; elsewhere only the device's layers count.
        const bool split = config.device != "host" && config.n_cpu_layers > 0;
        KvGroupPlan full, swa, host_full, host_swa;
        full.kind = host_full.kind = AttentionKind::Full;
        swa.kind = host_swa.kind = AttentionKind::SlidingWindow;
        swa.window = host_swa.window = hp.sliding_window;
        host_full.on_host = host_swa.on_host = true;
        for (uint32_t il = split ? 0 : config.n_cpu_layers; il < hp.n_layer; ++il) {
            const bool is_swa = !config.swa_full && hp.sliding_window > 0 &&
                                il < hp.layer_is_swa.size() && hp.layer_is_swa[il];
            const bool host = il < config.n_cpu_layers;
            (is_swa ? (host ? host_swa : swa) : (host ? host_full : full)).layers.push_back(il);
        }
        for (KvGroupPlan* g : {&full, &swa, &host_full, &host_swa}) {
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

namespace {

// The steps of plan_memory, in the order the design describes them.

// 1. The configuration with its defaults resolved, or a refusal of one that
// cannot run.
EngineConfig normalized(const ModelDesc& model, const EngineConfig& config_in) {
    const HParams& hp = model.hp;
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
    if (c.experts_on_cpu && (hp.n_expert == 0 || model.layer_expert_parts.size() != hp.n_layer))
        fail("--cpu-moe: {} has no experts{}", model.source,
             hp.n_expert ? " known per layer" : " (it is not a mixture of experts)");
    refuse_past_an_exbibyte(model, c);
    return c;
}

// 2. Weights: on the device, and (a split) the CPU layers' share in host memory.
void size_weights(MemoryPlan& p, const ModelDesc& model) {
    const HParams& hp = model.hp;
    const EngineConfig& c = p.config;
    const bool gpu = c.device != "host";
    p.weights_bytes = gpu && model.device_weight_bytes ? model.device_weight_bytes
                      : gpu                            ? model.weight_bytes
                            : model.weight_bytes + model.vector_copy_bytes;
    if (p.split() && model.layer_parts.size() == hp.n_layer) {
        // Each part where shape/placement.h puts it.
        p.weights_bytes = 0;
        auto add = [&](const ModelDesc::PartBytes& part, TensorRole role, uint32_t layer) {
            const Placement at = place_tensor(role, layer, c.n_cpu_layers, hp.tied_embeddings);
            if (at.on_cpu) p.host_weights_bytes += part.host;
            if (at.on_gpu) p.weights_bytes += part.device;
        };
        add(model.embedding, TensorRole::Embedding, 0);
        add(model.output, TensorRole::Output, 0);
        add(model.output_norm, TensorRole::OutputNorm, 0);
        add(model.other, TensorRole::Other, 0);
        for (uint32_t il = 0; il < hp.n_layer; ++il)
            add(model.layer_parts[il], TensorRole::Layer, il);
    } else {
        for (uint32_t il = 0; il < c.n_cpu_layers; ++il)
            p.weights_bytes -= model.layer_weight_bytes[il];
        if (p.split())
            for (uint32_t il = 0; il < c.n_cpu_layers; ++il)
                p.host_weights_bytes += model.layer_weight_bytes[il];
    }
    if (!c.experts_on_cpu) return;
    // The GPU layers' experts leave the device; on headroom's own GPU
    // backend the plan counts them in host memory (a GPU of the table: the
    // plan's host share, planner.cpp).
    const bool by_slot = gpu && (p.split() || model.device_weight_bytes);
    for (uint32_t il = c.n_cpu_layers; il < hp.n_layer; ++il) {
        const ModelDesc::PartBytes& e = model.layer_expert_parts[il];
        p.weights_bytes -= by_slot ? e.device : e.host;
        if (gpu) p.host_weights_bytes += e.host;
    }
}

// The device's groups: what the budget's pool holds (a split's host groups
// follow it, block for block).
std::vector<KvGroupPlan> device_groups_of(const MemoryPlan& p) {
    std::vector<KvGroupPlan> out;
    for (const auto& g : p.kv_groups)
        if (!g.on_host) out.push_back(g);
    return out;
}

// 3. The KV layer groups, their blocks per sequence and the bytes of one
// sequence of max_model_len.
void size_kv_groups(MemoryPlan& p, const HParams& hp) {
    const EngineConfig& c = p.config;
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
    p.kv_bytes_per_seq = kv_bytes_for_len(device_groups_of(p), c.max_model_len, c.block_size,
                                          c.max_num_batched_tokens);
}

// 4. Activations (a split's CPU layers have an arena of their own, without
// logits: the GPU computes them) and the runtime.
void size_activations_and_runtime(MemoryPlan& p, const ModelDesc& model, const BudgetSpec& budget) {
    const HParams& hp = model.hp;
    const EngineConfig& c = p.config;
    p.activations = plan_activations(hp, c.max_num_batched_tokens, c.max_logit_rows, c.n_threads,
                                     c.device == "host");
    if (p.split())
        p.host_activations = plan_activations(hp, c.max_num_batched_tokens, 0, c.n_threads, true);
    p.runtime.thread_stacks_bytes = uint64_t{c.n_threads - 1} * ThreadPool::kWorkerStackBytes;
    p.runtime.device_context_bytes = budget.device_context_bytes;
    p.runtime.tokenizer_bytes = model.tokenizer_bytes;
    p.runtime.metadata_bytes = model.metadata_bytes;
    p.runtime.step_view_bytes = step_view_words(c, p.kv_groups.size()) * 4;
    if (c.device != "host") p.runtime.step_view_device_bytes = p.runtime.step_view_bytes;
    p.runtime.sequences_bytes = uint64_t{c.max_num_seqs} *
                                (uint64_t{c.max_model_len} * 4 +
                                 p.kv_groups.size() * div_ceil(c.max_model_len, c.block_size) * 4);
    if (c.grammar_cache_bytes)
        p.runtime.grammar_bytes =
            c.grammar_cache_bytes + uint64_t{c.max_num_seqs} * grammar_state_bytes(hp.n_vocab);
}

// What the budget holds besides the pool: everything on the CPU; on a GPU,
// what the device holds (the host's share is host memory).
uint64_t fixed_bytes_of(const MemoryPlan& p) {
    if (p.config.device != "host")
        return p.weights_bytes + p.activations.device_bytes + p.runtime.device_bytes();
    return p.weights_bytes + p.activations_bytes() + p.runtime.thread_stacks_bytes +
           p.runtime.tokenizer_bytes + p.runtime.metadata_bytes + p.runtime.sequences_bytes +
           p.runtime.step_view_bytes + p.runtime.device_context_bytes + p.runtime.grammar_bytes;
}

// Demand: blocks for max_num_seqs sequences of max_model_len (the device's groups).
uint64_t demand_bytes_of(const MemoryPlan& p) {
    uint64_t demand = 0;
    for (const auto& g : device_groups_of(p))
        demand += uint64_t{p.config.max_num_seqs} * g.max_blocks_per_seq * g.block_bytes;
    return demand;
}

// 5. Bytes the pool may take: --kv-cache-memory, or what the budget leaves
// after the fixed terms, counting each block's prefix-index entry, and no
// more than the demand. Sets p.budget_bytes from the budget.
uint64_t pool_bytes_for(MemoryPlan& p, const BudgetSpec& budget, uint64_t fixed_bytes,
                        uint64_t demand_bytes) {
    if (budget.kv_cache_bytes > 0) return budget.kv_cache_bytes;
    const auto total =
        static_cast<uint64_t>(static_cast<double>(budget.device_bytes) * budget.mem_fraction);
    p.budget_bytes = total;
    if (total <= fixed_bytes) return 0;
    const std::vector<KvGroupPlan> device_groups = device_groups_of(p);
    uint64_t sum_block_bytes = 0;
    for (const auto& g : device_groups) sum_block_bytes += g.block_bytes;
    const uint64_t left = total - fixed_bytes;
    // Leave room for the index (host memory, so not on a GPU): scale left by
    // block/(block + index entry).
    const double avg_block = static_cast<double>(sum_block_bytes) / device_groups.size();
    const double index = p.config.device != "host" ? 0.0 : kPrefixIndexBytesPerBlock;
    const auto usable =
        static_cast<uint64_t>(static_cast<double>(left) * avg_block / (avg_block + index));
    return std::min(usable, demand_bytes);
}

// 6. The pool split between groups in proportion to their demand, so that
// each group runs out at the same concurrency. A split's host groups take the
// blocks of the device's group of their kind (the same number of sequences),
// or the same share of their demand.
void split_pool(MemoryPlan& p, const BudgetSpec& budget, uint64_t pool_bytes,
                uint64_t demand_bytes) {
    const EngineConfig& c = p.config;
    p.kv_cache_bytes = 0;
    uint64_t n_blocks_total = 0;
    const auto share_of = [&](const KvGroupPlan& g) {
        const uint64_t demand_g = uint64_t{c.max_num_seqs} * g.max_blocks_per_seq * g.block_bytes;
        return static_cast<uint64_t>(static_cast<long double>(pool_bytes) * demand_g /
                                     demand_bytes) /
               g.block_bytes;
    };
    for (auto& g : p.kv_groups) {
        if (g.on_host) continue;
        g.n_blocks = share_of(g);
        p.kv_cache_bytes += g.n_blocks * g.block_bytes;
        n_blocks_total += g.n_blocks;
    }
    for (auto& g : p.kv_groups) {
        if (!g.on_host) continue;
        g.n_blocks = share_of(g);
        for (const auto& d : p.kv_groups)
            if (!d.on_host && d.kind == g.kind && d.window == g.window) g.n_blocks = d.n_blocks;
        p.host_kv_cache_bytes += g.n_blocks * g.block_bytes;
        n_blocks_total += g.n_blocks;
    }
    p.runtime.prefix_index_bytes = n_blocks_total * kPrefixIndexBytesPerBlock;
    if (budget.kv_cache_bytes > 0) p.budget_bytes = p.budgeted_bytes();
}

// 7. Capacities: sequences at max_model_len, and the longest context for
// max_num_seqs sequences.
void size_capacities(MemoryPlan& p) {
    const EngineConfig& c = p.config;
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
}

// 8. A plan that does not fit: the refusal names the numbers and the fixes
// (a shorter context, a smaller KV dtype, more memory, a smaller weight type).
std::string refusal_for(MemoryPlan& p, const HParams& hp, const BudgetSpec& budget,
                        uint64_t fixed_bytes) {
    const EngineConfig& c = p.config;
    const std::vector<KvGroupPlan> device_groups = device_groups_of(p);
    const uint64_t kv_room = budget.kv_cache_bytes > 0      ? budget.kv_cache_bytes
                             : p.budget_bytes > fixed_bytes ? p.budget_bytes - fixed_bytes
                                                            : 0;
    std::string msg;
    if (budget.kv_cache_bytes == 0 && p.budget_bytes <= fixed_bytes) {
        const DeviceTerms d = p.device_terms()[0];
        msg = fmt::format(
            "weights ({}), activations ({}) and runtime ({}) need {} but the budget is {} ({} "
            "of {}): nothing is left for the KV cache",
            format_bytes(d.weights_bytes), format_bytes(d.activations_bytes),
            format_bytes(d.runtime_bytes), format_bytes(fixed_bytes), format_bytes(p.budget_bytes),
            percent(budget.mem_fraction), format_bytes(budget.device_bytes));
    } else {
        msg = fmt::format("KV for {} tokens needs {}, the budget leaves {}", c.max_model_len,
                          format_bytes(p.kv_bytes_per_seq), format_bytes(kv_room));
    }
    std::vector<std::string> fixes;
    // Longest context one sequence can have in the room left.
    uint64_t l_lo = 0, l_hi = c.max_model_len;
    while (l_lo < l_hi) {
        const uint64_t mid = (l_lo + l_hi + 1) / 2;
        if (kv_bytes_for_len(device_groups, mid, c.block_size, c.max_num_batched_tokens) <= kv_room)
            l_lo = mid;
        else
            l_hi = mid - 1;
    }
    const uint64_t fit_len = l_lo / c.block_size * c.block_size;
    if (fit_len >= c.block_size) {
        fixes.push_back(fmt::format("use --max-model-len {}", fit_len));
        p.fit_len = static_cast<uint32_t>(fit_len);
    }
    if (c.kv_dtype != KvDtype::Q8_0 && kv_dtype_fits(hp, KvDtype::Q8_0)) {
        EngineConfig q8 = c;
        q8.kv_dtype = KvDtype::Q8_0;
        auto groups = kv_groups_for(hp, q8);
        std::erase_if(groups, [](const KvGroupPlan& g) { return g.on_host; });
        for (auto& g : groups)
            g.max_blocks_per_seq =
                blocks_for(g, c.max_model_len, c.block_size, c.max_num_batched_tokens);
        fixes.push_back(
            fmt::format("--kv-dtype q8_0 ({})",
                        format_bytes(kv_bytes_for_len(groups, c.max_model_len, c.block_size,
                                                      c.max_num_batched_tokens))));
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
    for (size_t i = 0; i < fixes.size(); ++i) {
        if (i) fix_text += ", or ";
        fix_text += fixes[i];
    }
    return fix_text.empty() ? msg : msg + ": " + fix_text;
}

// 9. A device that limits one allocation takes the KV regions in pieces of
// whole blocks and the arena in pieces of whole buffers (kernels::SplitBuffer,
// the same rule) and the weights in chunks of whole tensors: no term
// changes, but a tensor, a block or a buffer larger than the limit cannot be
// had. Returns the refusal, or "".
std::string count_allocations(MemoryPlan& p, const ModelDesc& model, const BudgetSpec& budget) {
    const uint64_t limit = budget.max_allocation_bytes;
    p.kv_allocations = 0;
    uint64_t largest_block = 0;
    for (const auto& g : device_groups_of(p)) {
        const uint64_t per = limit ? std::max<uint64_t>(limit / g.block_bytes, 1) : g.n_blocks;
        p.kv_allocations += std::max<uint64_t>(div_ceil(g.n_blocks, std::max<uint64_t>(per, 1)), 1);
        largest_block = std::max(largest_block, g.block_bytes);
    }
    if (!limit || p.config.device == "host") return "";
    const uint64_t largest_tensor = p.config.experts_on_cpu
                                        ? model.largest_dense_device_tensor_bytes
                                        : model.largest_device_tensor_bytes;
    if (largest_tensor > limit)
        return fmt::format(
            "the model's largest weight tensor takes {} on {}, which allocates at most {} at "
            "once: a smaller weight type (headroom plan --compare-quant), or the CPU",
            format_bytes(largest_tensor), p.config.device, format_bytes(limit));
    if (largest_block > limit)
        return fmt::format(
            "a KV block takes {} but {} allocates at most {} at once: a smaller --block-size",
            format_bytes(largest_block), p.config.device, format_bytes(limit));
    const std::vector<uint64_t> ends = p.activations.device_ends();
    uint64_t largest_buffer = 0;
    for (size_t i = 0; i < ends.size(); ++i)
        largest_buffer = std::max(largest_buffer, ends[i] - (i ? ends[i - 1] : 0));
    if (largest_buffer > limit)
        return fmt::format(
            "the largest activation buffer takes {} but {} allocates at most {} at once: a "
            "smaller --max-num-batched-tokens",
            format_bytes(largest_buffer), p.config.device, format_bytes(limit));
    return "";
}

}  // namespace

MemoryPlan plan_memory(const ModelDesc& model, const EngineConfig& config_in,
                       const BudgetSpec& budget) {
    MemoryPlan p;
    p.config = normalized(model, config_in);
    p.budget_spec = budget;
    size_weights(p, model);
    size_kv_groups(p, model.hp);
    size_activations_and_runtime(p, model, budget);
    const uint64_t fixed_bytes = fixed_bytes_of(p);
    const uint64_t demand_bytes = demand_bytes_of(p);
    split_pool(p, budget, pool_bytes_for(p, budget, fixed_bytes, demand_bytes), demand_bytes);
    size_capacities(p);

    p.fits = p.max_num_seqs_at_max_model_len >= 1 &&
             (budget.kv_cache_bytes > 0 || p.budgeted_bytes() <= p.budget_bytes);
    // A split's host share must fit host memory too.
    const uint64_t host_room =
        static_cast<uint64_t>(static_cast<double>(budget.host_bytes) * budget.mem_fraction);
    if (p.fits && p.split() && budget.host_bytes > 0 &&
        p.device_terms()[1].total_bytes() > host_room) {
        p.fits = false;
        p.host_short = true;
        p.refusal = fmt::format(
            "the {} layers on the CPU need {} of host memory ({} weights, {} KV, {} activations "
            "and runtime) but {} of the host's {} is {}: put more layers on the GPU (a larger "
            "--n-gpu-layers)",
            p.config.n_cpu_layers, format_bytes(p.device_terms()[1].total_bytes()),
            format_bytes(p.host_weights_bytes), format_bytes(p.host_kv_cache_bytes),
            format_bytes(p.device_terms()[1].activations_bytes + p.device_terms()[1].runtime_bytes),
            percent(budget.mem_fraction), format_bytes(budget.host_bytes), format_bytes(host_room));
        return p;
    }
    if (!p.fits) p.refusal = refusal_for(p, model.hp, budget, fixed_bytes);
    if (std::string why = count_allocations(p, model, budget); !why.empty() && p.fits) {
        p.fits = false;
        p.allocation_short = true;
        p.refusal = why;
    }
    return p;
}

uint64_t grammar_state_bytes(uint32_t n_vocab) {
    return div_ceil(n_vocab, 32) * 4 + kGrammarMatcherBytes;
}

}  // namespace headroom
