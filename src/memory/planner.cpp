#include "memory/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <tuple>

#include "checkpoint/open.h"
#include "core/error.h"
#include "core/strings.h"
#include "core/thread-pool.h"
#include "format/gguf-reader.h"
#include "kernels/backend.h"
#include "memory/budget.h"
#include "tokenizer/tokenizer.h"

namespace headroom {

namespace {

// GGUF architectures whose attention layout the planner knows: which layers
// slide, and whether KV is a latent vector.
const std::set<std::string>& known_gguf_archs() {
    static const std::set<std::string> kArchs = {"llama",    "qwen2",   "qwen3",   "gemma",
                                                 "gemma2",   "gemma3",  "gpt-oss", "deepseek2",
                                                 "qwen2moe", "qwen3moe"};
    return kArchs;
}

// Average bytes of text per vocabulary entry, for sizing the tokenizer of a
// model known only by its config (SmolLM2's 49152 tokens average 7.5 bytes,
// Gemma 3's 262144 8.8). With no merges counted, estimate_tokenizer_bytes
// is then an upper bound: 4.9 and 26 MiB against the 3.3 and 8.6 MiB the
// loaded tokenizers take.
constexpr uint64_t kTokenTextBytes = 8;

std::string gguf_name(const gguf::GgufFile& f, const HParams& hp) {
    if (!hp.name.empty()) return hp.name;
    return std::filesystem::path(f.path()).filename().string();
}

std::string mix_text(const std::map<std::string, uint64_t>& by_type) {
    std::vector<std::pair<uint64_t, std::string>> v;
    uint64_t total = 0;
    for (const auto& [t, b] : by_type) {
        v.emplace_back(b, t);
        total += b;
    }
    std::sort(v.rbegin(), v.rend());
    std::string out;
    for (const auto& [b, t] : v) {
        if (total == 0 || b * 100 < total) continue;  // leave out types under 1%
        out += fmt::format("{}{} {:.0f}%", out.empty() ? "" : ", ", t, 100.0 * b / total);
    }
    return out;
}

std::string elem_text(KvDtype d) {
    switch (d) {
        case KvDtype::F32:
            return "4 B";
        case KvDtype::Q8_0:
            return "34/32 B (q8_0)";
        default:
            return "2 B";
    }
}

std::string count_text(uint64_t n) {
    if (n >= 1000000000) return fmt::format("{:.2f}B", n / 1e9);
    if (n >= 1000000) return fmt::format("{:.1f}M", n / 1e6);
    return format_count(n);
}

// "1 sequence", "2 sequences".
std::string n_of(uint64_t n, const char* one, const char* many) {
    return fmt::format("{} {}", n, n == 1 ? one : many);
}

double quality(std::optional<WeightType> t) {
    return t ? info(*t).quality_cost : 0.0;
}

uint32_t round_context(uint64_t len, uint32_t block_size) {
    const uint64_t step = len >= 4096 ? 1024 : 256;
    uint64_t r = len / step * step;
    r = r / block_size * block_size;
    return static_cast<uint32_t>(std::min<uint64_t>(r, UINT32_MAX));
}

std::string model_arg(const PlanModel& m) {
    if (m.kind == "hf-config") return "--hf-config " + m.source;
    return "-m " + m.source;
}

// What the GGUF for this plan would be called when it is not the source file.
std::string gguf_file_for(const PlanModel& m) {
    if ((m.kind == "gguf" || m.kind == "folder") && !m.weight_type) return m.source;
    const std::filesystem::path p(m.source);
    // A config.json is named after its directory (the model's repository).
    const std::string base = m.kind == "builtin"             ? m.source
                             : p.filename() == "config.json" ? p.parent_path().filename().string()
                                                             : p.stem().string();
    return fmt::format("{}-{}.gguf", base.empty() ? "model" : base,
                       m.weight_type ? std::string(info(*m.weight_type).label) : "f16");
}

}  // namespace

PlanModel plan_model_from_gguf(const std::string& path) {
    const auto file = open_model_file(path);
    PlanModel m;
    m.source = path;
    // A Hugging Face folder is quantized at load (--quantization): the
    // planner offers its other weight types as it does a config's.
    m.kind = std::filesystem::is_directory(path) ? "folder" : "gguf";
    m.desc = describe_gguf(file);
    HParams& hp = m.desc.hp;
    if (!known_gguf_archs().contains(hp.arch)) {
        std::string names;
        for (const auto& a : known_gguf_archs()) names += (names.empty() ? "" : ", ") + a;
        fail(
            "{}: architecture '{}' is not one headroom can plan: its attention layout is unknown "
            "(known: {})",
            path, clipped(hp.arch), names);
    }
    // read_hparams marks every layer of a windowed model it does not run
    // (but Gemma 3 and gpt-oss) as sliding; Gemma 2 alternates, starting
    // with a sliding layer (llama.cpp: set_swa_pattern(2)).
    if (hp.arch == "gemma2" && hp.sliding_window > 0)
        for (uint32_t il = 0; il < hp.n_layer; ++il) hp.layer_is_swa[il] = il % 2 == 0;
    m.shape.hp = hp;
    m.shape.model_type = hp.arch;
    m.name = gguf_name(file, hp);
    m.tensors = tensor_inventory(file);
    m.file_type = m.desc.weight_type;
    m.runnable = is_supported_arch(hp.arch);
    // The engine's runtime term counts the loaded tokenizer; load it (the
    // vocabulary is in the header) so the prediction is the engine's number.
    try {
        m.desc.tokenizer_bytes = Tokenizer::from_gguf(file)->memory_bytes();
    } catch (const Error&) {
    }
    // The CPU engine keeps 1-D tensors (norms) as f32; others are converted
    // to f32 copies at load and count as weights (ModelDesc::vector_copy_bytes).
    if (!m.runnable) m.desc.vector_copy_bytes = 0;
    const uint64_t converted = m.desc.vector_copy_bytes;
    m.weights_basis =
        fmt::format("sum of the {} tensors in the file ({})", file.tensors().size(), mix_text([&] {
                        std::map<std::string, uint64_t> by;
                        for (const auto& t : file.tensors())
                            by[std::string(headroom::name(t.type))] += t.size_bytes;
                        return by;
                    }()));
    if (converted)
        m.weights_basis +=
            fmt::format(" + {} of 1-D tensors converted to f32 at load", format_bytes(converted));
    return m;
}

PlanModel plan_model_from_shape(const ModelShape& shape, const std::string& source,
                                const std::string& kind, WeightType type) {
    PlanModel m;
    m.source = source;
    m.kind = kind;
    m.shape = shape;
    m.name = shape.hp.name.empty() ? source : shape.hp.name;
    m.tensors = tensor_inventory(shape);
    m.desc.hp = shape.hp;
    m.desc.source = source;
    const uint64_t n_vocab = shape.hp.n_vocab;
    m.desc.tokenizer_bytes = estimate_tokenizer_bytes(n_vocab, n_vocab * kTokenTextBytes, 0);
    return requantized(m, type);
}

PlanModel requantized(const PlanModel& model, WeightType type) {
    PlanModel m = model;
    m.weight_type = type;
    m.runnable = false;
    const WeightEstimate e = estimate_weights(m.tensors, m.shape.hp, type);
    m.desc.weight_bytes = e.bytes;
    m.desc.vector_copy_bytes = 0;  // the estimate is the whole of the weights
    m.desc.n_params = e.n_params;
    m.desc.weights_exact = false;
    m.desc.weight_type = std::string(info(type).label);
    m.desc.layer_weight_bytes = e.layer_bytes;
    m.desc.layer_expert_parts.clear();
    if (m.shape.hp.n_expert > 0)
        for (const uint64_t b : e.layer_expert_bytes) m.desc.layer_expert_parts.push_back({b, b});
    m.weights_basis =
        fmt::format("{} parameters × {:.2f} bits per weight ({}: {})", count_text(e.n_params),
                    e.bits_per_weight(), info(type).label, mix_text(e.bytes_by_type));
    return m;
}

Capacity capacity(const PlanModel& model, const Device& device, const PlanSettings& settings) {
    Capacity cap;
    const Plan base = evaluate(model, device, settings);
    PlanSettings s = settings;
    s.config.max_model_len = base.mem.config.max_model_len;
    auto fits = [&](uint32_t len, uint32_t seqs) {
        PlanSettings t = s;
        t.config.max_model_len = len;
        t.config.max_num_seqs = seqs;
        try {
            return evaluate(model, device, t).fits_all();
        } catch (const Error&) {
            return false;  // e.g. more sequences than --max-num-batched-tokens
        }
    };
    // Largest n in [0, hi] with pred(n), pred monotone (true then false).
    auto largest = [](uint64_t hi, const auto& pred) {
        uint64_t lo = 0;
        while (lo < hi) {
            const uint64_t mid = lo + (hi - lo + 1) / 2;
            if (pred(mid))
                lo = mid;
            else
                hi = mid - 1;
        }
        return static_cast<uint32_t>(lo);
    };
    const uint32_t len = s.config.max_model_len;
    const uint32_t seqs = std::max(1u, s.config.max_num_seqs);
    cap.max_num_seqs_at_max_model_len =
        largest(1u << 20, [&](uint64_t n) { return n > 0 && fits(len, static_cast<uint32_t>(n)); });
    const uint32_t trained = model.desc.hp.n_ctx_train;
    const uint32_t top = std::max(len, trained > 0 ? trained : 1u << 22);
    cap.max_model_len_at_max_num_seqs =
        largest(top, [&](uint64_t n) { return n > 0 && fits(static_cast<uint32_t>(n), seqs); });
    cap.len_is_trained_context = trained > 0 && cap.max_model_len_at_max_num_seqs == top;
    return cap;
}

TermFormulas formulas(const PlanModel& model, const Plan& plan) {
    const MemoryPlan& mp = plan.mem;
    const HParams& hp = model.desc.hp;
    const EngineConfig& c = mp.config;
    TermFormulas f;
    f.weights = model.weights_basis;
    if (mp.split()) {
        // By part where the file says (shape/placement.h); an estimate moves
        // whole layers only.
        const bool by_part = model.desc.layer_parts.size() == hp.n_layer;
        f.weights += fmt::format("; on {}: layers {}-{}{}; on the host ({}): {}layers 0-{}",
                                 c.device, c.n_cpu_layers, hp.n_layer - 1,
                                 by_part ? ", the output matrix and its norm" : " and the rest",
                                 format_bytes(mp.host_weights_bytes),
                                 by_part ? "the embedding and " : "", c.n_cpu_layers - 1);
    } else if (c.n_cpu_layers > 0) {
        const uint64_t off = first_layers_bytes(model.desc, c.n_cpu_layers);
        f.weights +=
            fmt::format(", less {} for {} layers on the CPU", format_bytes(off), c.n_cpu_layers);
    }
    if (c.experts_on_cpu)
        f.weights += fmt::format(
            "; the experts of layers {}-{} ({}) in host memory, run by the CPU (--cpu-moe): a "
            "token reads {} of each layer's {}",
            c.n_cpu_layers, hp.n_layer - 1, format_bytes(experts_from(model.desc, c.n_cpu_layers)),
            hp.n_expert_used, hp.n_expert);
    const std::string elem = elem_text(c.kv_dtype);
    for (const auto& g : mp.kv_groups) {
        const size_t n = g.layers.size();
        std::string head = hp.head_dim_k == hp.head_dim_v
                               ? fmt::format("2 × {} layers × {} KV heads × {} × {}", n,
                                             hp.n_head_kv, hp.head_dim_k, elem)
                               : fmt::format("{} layers × {} KV heads × ({} + {}) × {}", n,
                                             hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, elem);
        if (g.kind == AttentionKind::Latent)
            head = fmt::format("{} layers × ({} latent + {} RoPE) × {}", n, hp.kv_lora_rank,
                               hp.qk_rope_head_dim, elem);
        std::string line = fmt::format("{} = {} per token", head, format_bytes(g.bytes_per_token));
        if (g.kind == AttentionKind::SlidingWindow)
            line = fmt::format("sliding window {}: {}, at most {} tokens per sequence", g.window,
                               line, uint64_t{g.max_blocks_per_seq} * c.block_size);
        if (mp.split()) line += g.on_host ? " (on the host)" : fmt::format(" (on {})", c.device);
        f.kv_groups.push_back(line);
    }
    uint64_t n_blocks = 0;
    for (const auto& g : mp.kv_groups)
        if (!g.on_host) n_blocks += g.n_blocks;
    f.kv_pool =
        fmt::format("pool of {} blocks of {} tokens ({}); one sequence of {} tokens needs {}",
                    format_count(n_blocks), c.block_size, format_bytes(mp.kv_cache_bytes),
                    c.max_model_len, format_bytes(mp.kv_bytes_per_seq));
    if (mp.split())
        f.kv_pool = fmt::format("on {}: {}; the host's layers have as many blocks ({})", c.device,
                                f.kv_pool, format_bytes(mp.host_kv_cache_bytes));
    const auto& a = mp.activations;
    const uint64_t logits = a.logits.size_bytes + a.sampler.size_bytes;
    const uint64_t tiles = a.thread_scratch.size_bytes;
    f.activations = fmt::format(
        "{} tokens per step: hidden states, q/k/v and FFN ({} wide) buffers {}; {} × {} logits "
        "and sampler {}; attention tiles of {} {}",
        a.n_tokens, hp.n_ff, format_bytes(a.total_bytes - logits - tiles), a.n_logit_rows,
        format_count(hp.n_vocab), format_bytes(logits), n_of(a.n_threads, "thread", "threads"),
        format_bytes(tiles));
    if (hp.n_expert > 0)
        f.activations += fmt::format(
            "; of the buffers, routing to {} of {} experts and the {} routed rows {}",
            hp.n_expert_used, hp.n_expert, format_count(uint64_t{a.n_tokens} * hp.n_expert_used),
            format_bytes(a.router.size_bytes + a.route.size_bytes + a.moe_x.size_bytes));
    if (mp.split())
        f.activations += fmt::format("; the CPU layers' own buffers and attention tiles of {} {}",
                                     n_of(mp.host_activations.n_threads, "thread", "threads"),
                                     format_bytes(mp.host_activations.device_bytes));
    const auto& r = mp.runtime;
    f.runtime =
        fmt::format("tokenizer {}, token lists and block tables of {} {}, prefix index {}",
                    format_bytes(r.tokenizer_bytes), n_of(c.max_num_seqs, "sequence", "sequences"),
                    format_bytes(r.sequences_bytes), format_bytes(r.prefix_index_bytes));
    if (r.metadata_bytes)
        f.runtime +=
            fmt::format(", model file header and index {}", format_bytes(r.metadata_bytes));
    if (r.thread_stacks_bytes)
        f.runtime += fmt::format(", {} {}", n_of(c.n_threads - 1, "worker stack", "worker stacks"),
                                 format_bytes(r.thread_stacks_bytes));
    if (r.grammar_bytes)
        f.runtime += fmt::format(", compiled grammars {} and grammar state of {} {}",
                                 format_bytes(c.grammar_cache_bytes),
                                 n_of(c.max_num_seqs, "sequence", "sequences"),
                                 format_bytes(r.grammar_bytes - c.grammar_cache_bytes));
    if (r.step_view_bytes)
        f.runtime += fmt::format(", step view {}{}", format_bytes(r.step_view_bytes),
                                 r.step_view_device_bytes ? " (and its copy on the device)" : "");
    if (r.device_context_bytes)
        f.runtime += fmt::format(
            ", {} {}", c.device != "host" ? "Vulkan RoPE tables" : "CUDA context and workspaces",
            format_bytes(r.device_context_bytes));
    return f;
}

std::string headroom_command(const PlanModel& model, const Device& device, const Plan& plan) {
    const EngineConfig& c = plan.mem.config;
    const bool gguf_weights = !model.weight_type || info(*model.weight_type).gguf;
    std::string cmd;
    // A folder is quantized as it loads: the same folder, --quantization TYPE.
    const bool at_load = model.kind == "folder" && model.weight_type && gguf_weights;
    const std::string target = at_load             ? model.source
                               : model.weight_type ? gguf_file_for(model)
                                                   : model.source;
    const std::string quantization =
        at_load ? fmt::format(" --quantization {}", name(*model.weight_type)) : std::string();
    if (gguf_weights && c.n_cpu_layers == 0 && !device.gpu) {
        cmd = fmt::format("headroom serve -m {}{}", target, quantization);
        if (device.source.find("--device-memory") != std::string::npos)
            cmd += fmt::format(" --device-memory {}MiB", device.total_bytes / MiB);
    } else if (gguf_weights && device.vulkan_index && model.desc.hp.n_expert == 0) {
        // headroom's own GPU backend runs it, split or not (not yet experts).
        cmd = fmt::format("headroom serve -m {}{} --device vulkan:{}", target, quantization,
                          *device.vulkan_index);
        if (device.source.find("--device-memory") != std::string::npos)
            cmd += fmt::format(" --device-memory {}MiB", device.total_bytes / MiB);
        if (plan.settings.reserve_bytes)
            cmd += fmt::format(" --reserve {}MiB", plan.settings.reserve_bytes / MiB);
        cmd += c.n_cpu_layers
                   ? fmt::format(" --n-gpu-layers {}", model.desc.hp.n_layer - c.n_cpu_layers)
                   : std::string(" --n-gpu-layers all");
    } else {
        // Configurations headroom cannot start yet (experts on the CPU under
        // a GPU among them): the plan that checks them.
        cmd = fmt::format("headroom plan {}", model_arg(model));
        if (model.weight_type && model.kind != "gguf")
            cmd += fmt::format(" --weight-type {}", name(*model.weight_type));
        if (device.gpu) cmd += fmt::format(" --device-memory {}MiB", device.total_bytes / MiB);
        if (plan.settings.reserve_bytes)
            cmd += fmt::format(" --reserve {}MiB", plan.settings.reserve_bytes / MiB);
        if (c.n_cpu_layers) cmd += fmt::format(" --cpu-layers {}", c.n_cpu_layers);
        if (c.experts_on_cpu) cmd += " --cpu-moe";
    }
    cmd += fmt::format(" --max-model-len {} --max-num-seqs {} --kv-dtype {}", c.max_model_len,
                       c.max_num_seqs, name(c.kv_dtype));
    if (plan.settings.kv_cache_bytes)
        cmd += fmt::format(" --kv-cache-memory {}", plan.settings.kv_cache_bytes);
    else
        cmd += fmt::format(" --mem-fraction {:.2f}", plan.settings.mem_fraction);
    return cmd;
}

std::string vllm_command(const PlanModel& model, const Device& device, const Plan& plan) {
    if (!device.gpu) return {};
    const EngineConfig& c = plan.mem.config;
    const bool gguf_weights = !model.weight_type || info(*model.weight_type).gguf;
    std::string target = model.hf_repo.empty() ? model.source : model.hf_repo;
    if (model.kind == "hf-config")
        target = std::filesystem::path(model.source).parent_path().string();
    if (gguf_weights &&
        (model.kind == "gguf" ||
         (model.weight_type && *model.weight_type != WeightType::BF16 &&
          *model.weight_type != WeightType::F16 && *model.weight_type != WeightType::F32)))
        target = gguf_file_for(model);
    // vLLM's fraction is of the whole GPU; the plan's budget is of what --reserve leaves.
    // Rounded down to the hundredth, less float noise (0.9 × total truncated
    // to whole bytes is 0.8999999...).
    const double util = std::floor(static_cast<double>(plan.mem.budget_bytes) /
                                       static_cast<double>(device.total_bytes) * 100.0 +
                                   1e-6) /
                        100.0;
    std::string cmd = fmt::format(
        "vllm serve {} --gpu-memory-utilization {:.2f} --max-model-len {} --max-num-seqs {}",
        target.empty() ? "MODEL" : target, util, c.max_model_len, c.max_num_seqs);
    if (c.kv_dtype == KvDtype::Q8_0) cmd += " --kv-cache-dtype fp8";
    if (model.weight_type) {
        switch (*model.weight_type) {
            case WeightType::FP8:
                cmd += " --quantization fp8";
                break;
            case WeightType::AWQ:
                cmd += " --quantization awq";
                break;
            case WeightType::GPTQ:
                cmd += " --quantization gptq";
                break;
            case WeightType::NF4:
                cmd += " --quantization bitsandbytes";
                break;
            default:
                break;
        }
    }
    if (c.n_cpu_layers) {
        // vLLM offloads weights only (GiB per GPU); the KV stays on the GPU.
        const uint64_t off = first_layers_bytes(model.desc, c.n_cpu_layers);
        cmd += fmt::format(" --cpu-offload-gb {:.0f}", std::ceil(static_cast<double>(off) / GiB));
    } else if (c.experts_on_cpu) {
        // vLLM has no experts-only offload: its weight offload of as many bytes.
        const uint64_t off = experts_from(model.desc, 0);
        cmd += fmt::format(" --cpu-offload-gb {:.0f}", std::ceil(static_cast<double>(off) / GiB));
    }
    return cmd;
}

std::string llama_cpp_command(const PlanModel& model, const Device& device, const Plan& plan) {
    if (model.weight_type && !info(*model.weight_type).gguf) return {};
    const EngineConfig& c = plan.mem.config;
    // -c is the context of all slots together; each of -np slots gets c / np.
    std::string cmd = fmt::format("llama-server -m {} -c {} -np {}", gguf_file_for(model),
                                  uint64_t{c.max_model_len} * c.max_num_seqs, c.max_num_seqs);
    const uint32_t n_layer = model.desc.hp.n_layer;
    if (!device.gpu)
        cmd += " -ngl 0";
    else if (c.n_cpu_layers == 0)
        cmd += " -ngl 999";
    else
        cmd += fmt::format(" -ngl {}", n_layer - c.n_cpu_layers);
    if (c.experts_on_cpu) cmd += " --cpu-moe";
    cmd += fmt::format(" -ctk {0} -ctv {0} -fa on", name(c.kv_dtype));
    return cmd;
}

namespace {

// The model and, unless its weight type is pinned or it is a GGUF file,
// the same model in each smaller weight type the device can run.
std::vector<PlanModel> weight_candidates(const PlanModel& model, const Device& device,
                                         const Pins& pins) {
    std::vector<PlanModel> models = {model};
    if (!pins.weight_type && model.kind != "gguf") {
        for (const auto& t : weight_types()) {
            if (!t.candidate || t.type == WeightType::F32 || t.type == WeightType::GPTQ ||
                t.type == WeightType::Q4_1)
                continue;
            if (!device.gpu && !t.gguf) continue;
            if (t.type == WeightType::MXFP4 && model.desc.hp.n_expert == 0) continue;
            if (model.weight_type && t.type == *model.weight_type) continue;
            if (!weight_type_holds(model.tensors, t.type)) continue;
            PlanModel q = requantized(model, t.type);
            if (q.desc.weight_bytes < model.desc.weight_bytes) models.push_back(std::move(q));
        }
    }
    return models;
}

// A configuration that fits, as a suggestion: each knob changed from the
// base configuration `bc`, the cost of those changes (quality, context,
// speed given up) and the command lines that run it.
Suggestion suggestion_for(const PlanModel& model, const Device& device, const EngineConfig& bc,
                          const PlanModel& m, const Plan& p) {
    const EngineConfig& c = p.mem.config;
    Suggestion s;
    s.plan = p;
    s.weight_type = m.weight_type;
    if (m.weight_type != model.weight_type) {
        s.changes.push_back(fmt::format(
            "weights {} (was {})", info(*m.weight_type).label,
            model.weight_type ? std::string(info(*model.weight_type).label) : model.file_type));
        s.cost += quality(m.weight_type) - quality(model.weight_type);
    }
    if (c.kv_dtype != bc.kv_dtype) {
        s.changes.push_back(fmt::format("--kv-dtype {}", name(c.kv_dtype)));
        s.cost += c.kv_dtype == KvDtype::Q8_0 ? 1.0 : 0.1;
    }
    if (c.max_model_len != bc.max_model_len) {
        s.changes.push_back(
            fmt::format("--max-model-len {} (was {})", c.max_model_len, bc.max_model_len));
        s.cost += 1.5 * std::log2(static_cast<double>(bc.max_model_len) / c.max_model_len);
    }
    if (c.max_num_seqs != bc.max_num_seqs) {
        s.changes.push_back(
            fmt::format("--max-num-seqs {} (was {})", c.max_num_seqs, bc.max_num_seqs));
        s.cost += 0.75 * std::log2(static_cast<double>(bc.max_num_seqs) / c.max_num_seqs);
    }
    if (c.n_cpu_layers != bc.n_cpu_layers) {
        s.changes.push_back(fmt::format("{} of {} layers on the CPU ({} of host memory)",
                                        c.n_cpu_layers, model.desc.hp.n_layer,
                                        format_bytes(p.host_bytes)));
        // Every token reads the CPU layers' weights from host memory, at a
        // fraction of the device's bandwidth: the cost grows with those bytes.
        const uint64_t host_weights = first_layers_bytes(m.desc, c.n_cpu_layers);
        const double ratio = static_cast<double>(host_weights) /
                             static_cast<double>(std::max<uint64_t>(1, p.mem.budget_bytes));
        s.cost += 2.0 + 4.0 * std::log2(1.0 + 10.0 * ratio);
    }
    if (c.experts_on_cpu && !bc.experts_on_cpu) {
        const HParams& hp = m.desc.hp;
        const uint64_t experts = experts_from(m.desc, c.n_cpu_layers);
        s.changes.push_back(
            fmt::format("experts on the CPU, dense and attention weights on {} (--cpu-moe; "
                        "{} of experts in host memory)",
                        device.name, format_bytes(experts)));
        // A token reads n_expert_used of n_expert experts from host
        // memory: the cost grows with those bytes, as a split's does.
        const double read =
            static_cast<double>(experts) * hp.n_expert_used / std::max<uint32_t>(1, hp.n_expert);
        const double ratio = read / static_cast<double>(std::max<uint64_t>(1, p.mem.budget_bytes));
        s.cost += 1.0 + 4.0 * std::log2(1.0 + 10.0 * ratio);
    }
    s.headroom_cmd = headroom_command(m, device, p);
    s.vllm_cmd = vllm_command(m, device, p);
    s.llama_cpp_cmd = llama_cpp_command(m, device, p);
    return s;
}

}  // namespace

std::vector<Suggestion> fit_search(const PlanModel& model, const Device& device,
                                   const PlanSettings& settings, const Pins& pins,
                                   size_t max_results) {
    const Plan base = evaluate(model, device, settings);
    const EngineConfig& bc = base.mem.config;
    // Candidates change single knobs of what was asked; defaults the user
    // left at 0 stay defaults (they follow max_num_seqs).
    EngineConfig start = settings.config;
    start.max_model_len = bc.max_model_len;

    std::vector<KvDtype> kv_types = {bc.kv_dtype};
    if (!pins.kv_dtype) {
        if (bc.kv_dtype == KvDtype::F32) kv_types.push_back(KvDtype::F16);
        if (bc.kv_dtype != KvDtype::Q8_0 && kv_dtype_fits(model.desc.hp, KvDtype::Q8_0))
            kv_types.push_back(KvDtype::Q8_0);
    }
    const std::vector<PlanModel> models = weight_candidates(model, device, pins);

    std::vector<Suggestion> out;
    std::set<std::tuple<int, int, uint32_t, uint32_t, uint32_t, bool>> seen;
    auto consider = [&](const PlanModel& m, const Plan& p) {
        if (!p.fits_all()) return;
        const EngineConfig& c = p.mem.config;
        const auto key = std::make_tuple(m.weight_type ? static_cast<int>(*m.weight_type) : -1,
                                         static_cast<int>(c.kv_dtype), c.max_model_len,
                                         c.max_num_seqs, c.n_cpu_layers, c.experts_on_cpu);
        if (!seen.insert(key).second) return;
        out.push_back(suggestion_for(model, device, bc, m, p));
    };

    for (const auto& m : models) {
        for (KvDtype kv : kv_types) {
            PlanSettings s = settings;
            s.config = start;
            s.config.kv_dtype = kv;
            const Plan p = evaluate(m, device, s);
            if (p.fits_all()) {
                consider(m, p);
                continue;
            }
            const Capacity cap =
                (!pins.max_num_seqs || !pins.max_model_len) ? capacity(m, device, s) : Capacity{};
            if (!pins.max_num_seqs && cap.max_num_seqs_at_max_model_len > 0 &&
                bc.max_num_seqs > 1) {
                PlanSettings t = s;
                t.config.max_num_seqs = cap.max_num_seqs_at_max_model_len;
                consider(m, evaluate(m, device, t));
            }
            if (!pins.max_model_len) {
                const uint32_t len =
                    round_context(cap.max_model_len_at_max_num_seqs, bc.block_size);
                if (len >= std::min<uint32_t>(512, bc.max_model_len) && len < bc.max_model_len) {
                    PlanSettings t = s;
                    t.config.max_model_len = len;
                    consider(m, evaluate(m, device, t));
                }
            }
            const uint32_t n_layer = m.desc.hp.n_layer;
            if (!pins.cpu_moe && device.gpu && !s.config.experts_on_cpu &&
                m.desc.layer_expert_parts.size() == n_layer && n_layer > 0) {
                PlanSettings t = s;
                t.config.experts_on_cpu = true;
                consider(m, evaluate(m, device, t));
            }
            if (!pins.cpu_layers && device.gpu && n_layer > 1 &&
                m.desc.layer_weight_bytes.size() == n_layer) {
                auto with_cpu = [&](uint32_t k) {
                    PlanSettings t = s;
                    t.config.n_cpu_layers = k;
                    return evaluate(m, device, t);
                };
                if (!with_cpu(n_layer - 1).fits_all()) continue;
                uint32_t lo = 1, hi = n_layer - 1;
                while (lo < hi) {
                    const uint32_t mid = (lo + hi) / 2;
                    if (with_cpu(mid).fits_all())
                        hi = mid;
                    else
                        lo = mid + 1;
                }
                consider(m, with_cpu(lo));
            }
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const Suggestion& a, const Suggestion& b) {
        if (a.cost != b.cost) return a.cost < b.cost;
        return a.plan.free_bytes() > b.plan.free_bytes();
    });
    if (out.size() > max_results) out.resize(max_results);
    return out;
}

namespace {

// What the configuration needs whatever the budget: the four terms with a KV
// pool of max_num_seqs full-length sequences.
void fill_needed(QuantRow& r, const Device& device, const PlanSettings& settings) {
    PlanSettings all = settings;
    all.kv_cache_bytes = uint64_t{r.plan.mem.config.max_num_seqs} * r.plan.mem.kv_bytes_per_seq;
    const Plan need = evaluate(r.model, device, all);
    r.kv_needed_bytes = need.mem.kv_cache_bytes;
    r.total_needed_bytes = need.mem.total_bytes();
}

}  // namespace

std::vector<QuantRow> compare_quant(const PlanModel& model, const Device& device,
                                    const PlanSettings& settings) {
    std::vector<QuantRow> rows;
    if (model.kind == "gguf" || model.kind == "folder") {
        QuantRow r;
        r.label = model.file_type + (model.kind == "gguf" ? " (this file)" : " (this folder)");
        r.bits = "file";
        r.model = model;
        r.plan = evaluate(model, device, settings);
        fill_needed(r, device, settings);
        rows.push_back(std::move(r));
    }
    const WeightType sixteen = model.kind != "gguf" && model.weight_type == WeightType::F16
                                   ? WeightType::F16
                                   : WeightType::BF16;
    const WeightType order[] = {sixteen,          WeightType::FP8,    WeightType::Q8_0,
                                WeightType::Q6_K, WeightType::Q5_K_M, WeightType::Q4_K_M,
                                WeightType::AWQ,  WeightType::NF4,    WeightType::Q4_0,
                                WeightType::MXFP4};
    for (WeightType t : order) {
        if (t == WeightType::MXFP4 && model.desc.hp.n_expert == 0) continue;
        // A format that cannot hold this model's shapes (e.g. AWQ groups) is not offered.
        if (!weight_type_holds(model.tensors, t)) continue;
        QuantRow r;
        r.type = t;
        r.label = std::string(info(t).label);
        r.bits = std::string(info(t).bits);
        r.model = requantized(model, t);
        r.plan = evaluate(r.model, device, settings);
        fill_needed(r, device, settings);
        rows.push_back(std::move(r));
    }
    return rows;
}

}  // namespace headroom
