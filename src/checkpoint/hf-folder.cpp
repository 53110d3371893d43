#include "checkpoint/hf-folder.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <set>

#include "checkpoint/hf-quantized.h"
#include "checkpoint/hf-tokenizer.h"
#include "core/error.h"
#include "core/half.h"
#include "core/strings.h"
#include "format/gguf-writer.h"
#include "format/safetensors.h"
#include "shape/model-shape.h"

namespace headroom::hf {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The shards of a checkpoint mapped read-only one after another in one
// reservation of address space, each at a page boundary: the span from the
// first to the end of the last is readable (a shard's last page is zero past
// its end), so the backends see one file.
class ShardMap {
  public:
    explicit ShardMap(const std::vector<std::string>& paths) {
        const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
        std::vector<uint64_t> sizes;
        for (const auto& p : paths) {
            struct stat st {};
            if (::stat(p.c_str(), &st) != 0) fail("{}: cannot open: {}", p, std::strerror(errno));
            if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", p);
            sizes.push_back(static_cast<uint64_t>(st.st_size));
            total_ += (sizes.back() + page - 1) / page * page;
        }
        if (total_ == 0) fail("{}: the weights are empty", paths.empty() ? "" : paths[0]);
        void* base = ::mmap(nullptr, total_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED)
            fail("cannot reserve {} bytes of address space for the weights: {}", total_,
                 std::strerror(errno));
        base_ = static_cast<uint8_t*>(base);
        uint64_t at = 0;
        for (size_t i = 0; i < paths.size(); ++i) {
            if (sizes[i] > 0) {
                const int fd = ::open(paths[i].c_str(), O_RDONLY | O_CLOEXEC);
                if (fd < 0) fail("{}: cannot open: {}", paths[i], std::strerror(errno));
                void* p = ::mmap(base_ + at, sizes[i], PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
                const int err = errno;
                ::close(fd);
                if (p == MAP_FAILED)
                    fail("{}: cannot map {} bytes: {}", paths[i], sizes[i], std::strerror(err));
                ::madvise(p, sizes[i], MADV_NOHUGEPAGE);
            }
            files_.push_back({base_ + at, sizes[i]});
            at += (sizes[i] + page - 1) / page * page;
        }
    }
    ~ShardMap() { ::munmap(base_, total_); }
    ShardMap(const ShardMap&) = delete;
    ShardMap& operator=(const ShardMap&) = delete;

    std::span<const uint8_t> file(size_t i) const { return files_[i]; }
    std::span<const uint8_t> all() const { return {base_, total_}; }

  private:
    uint8_t* base_ = nullptr;
    uint64_t total_ = 0;
    std::vector<std::span<const uint8_t>> files_;
};

// What the assembled file keeps alive: the mapped shards, tensor names, and
// the f32 copies of 1-D tensors.
struct Backing {
    std::unique_ptr<ShardMap> shards;
    std::deque<safetensors::Header> headers;
    StoredTensors stored;
    std::deque<std::string> names;
    std::deque<std::vector<float>> vectors;
};

json read_json(const fs::path& path) {
    auto j = read_json_file(path.string());
    if (!j) fail("{}: cannot read the file", path.string());
    return *j;
}

// The text part of a config (multimodal checkpoints nest it), falling back
// to the top level for keys it does not hold.
struct Config {
    const json& top;
    const json* text;
    const json* find(const char* key) const {
        if (text)
            if (auto it = text->find(key); it != text->end() && !it->is_null()) return &*it;
        if (auto it = top.find(key); it != top.end() && !it->is_null()) return &*it;
        return nullptr;
    }
};

double number(const Config& c, const std::string& label, const char* key, double dflt) {
    const json* v = c.find(key);
    if (!v) return dflt;
    if (!v->is_number()) fail("{}: '{}' is {}, expected a number", label, key, clipped(v->dump()));
    return v->get<double>();
}

double number_in(const json& obj, const std::string& label, const char* key, double dflt) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return dflt;
    if (!it->is_number())
        fail("{}: '{}' is {}, expected a number", label, key, clipped(it->dump()));
    return it->get<double>();
}

// RoPE settings: transformers 5 groups them under rope_parameters (per
// attention kind for models with two), older configs keep rope_theta and
// rope_scaling at the top.
struct Rope {
    double theta = 10000.0;
    double theta_local = 10000.0;
    const json* scaling = nullptr;  // {"rope_type"/"type": ..., "factor": ...}, or null
};

Rope read_rope(const Config& c, const std::string& label) {
    Rope r;
    r.theta = number(c, label, "rope_theta", r.theta);
    r.theta_local = number(c, label, "rope_local_base_freq", r.theta_local);
    if (const json* s = c.find("rope_scaling"); s && s->is_object()) r.scaling = s;
    if (const json* p = c.find("rope_parameters"); p && p->is_object()) {
        const json* full = p;
        if (auto f = p->find("full_attention"); f != p->end() && f->is_object()) {
            full = &*f;
            if (auto l = p->find("sliding_attention"); l != p->end() && l->is_object())
                r.theta_local = number_in(*l, label, "rope_theta", r.theta_local);
        }
        r.theta = number_in(*full, label, "rope_theta", r.theta);
        r.scaling = full;
    }
    if (r.scaling) {
        auto t = r.scaling->find("rope_type");
        if (t == r.scaling->end()) t = r.scaling->find("type");
        if (t == r.scaling->end() || !t->is_string() || *t == "default") r.scaling = nullptr;
    }
    return r;
}

std::string rope_type(const json& scaling) {
    auto t = scaling.find("rope_type");
    if (t == scaling.end()) t = scaling.find("type");
    return t->get<std::string>();
}

// Llama 3.1's frequency factors (the "llama3" rope type), as llama.cpp's
// converter stores them in rope_freqs.weight: each frequency's wavelength is
// kept below high_freq_wavelen, divided by `factor` above low_freq_wavelen,
// and blended between.
std::vector<float> llama3_freq_factors(const json& s, const std::string& label, double theta,
                                       uint32_t n_rot) {
    const double factor = number_in(s, label, "factor", 8.0);
    const double low = number_in(s, label, "low_freq_factor", 1.0);
    const double high = number_in(s, label, "high_freq_factor", 4.0);
    const double old_ctx = number_in(s, label, "original_max_position_embeddings", 8192.0);
    if (!(factor > 0) || !(high > low) || !(old_ctx > 0))
        fail("{}: rope_scaling llama3 needs factor > 0, high_freq_factor > low_freq_factor", label);
    const double low_wavelen = old_ctx / low;
    const double high_wavelen = old_ctx / high;
    std::vector<float> out;
    for (uint32_t i = 0; i < n_rot; i += 2) {
        const double freq = 1.0 / std::pow(theta, static_cast<double>(i) / n_rot);
        const double wavelen = 2 * std::numbers::pi / freq;
        if (wavelen < high_wavelen) {
            out.push_back(1.0f);
        } else if (wavelen > low_wavelen) {
            out.push_back(static_cast<float>(factor));
        } else {
            const double smooth = (old_ctx / wavelen - low) / (high - low);
            out.push_back(static_cast<float>(1.0 / ((1 - smooth) / factor + smooth)));
        }
    }
    return out;
}

// HF tensor name -> GGUF tensor name for the architectures headroom runs
// from folders; "" for a tensor headroom does not read.
std::string gguf_name(const std::string& hf, const std::string& arch) {
    static const std::map<std::string, std::string> kTop = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
    };
    if (auto it = kTop.find(hf); it != kTop.end()) return it->second;
    // Multimodal wrappers keep the text model under language_model.
    for (const char* prefix : {"model.language_model.", "language_model.model."}) {
        if (hf.starts_with(prefix)) return gguf_name("model." + hf.substr(strlen(prefix)), arch);
    }
    const std::string layers = "model.layers.";
    if (!hf.starts_with(layers)) return {};
    const size_t dot = hf.find('.', layers.size());
    if (dot == std::string::npos) return {};
    const std::string il = hf.substr(layers.size(), dot - layers.size());
    if (il.empty() || !std::all_of(il.begin(), il.end(), ::isdigit) || il.size() > 6) return {};
    const std::string rest = hf.substr(dot + 1);
    const bool gemma = arch == "gemma3";
    static const std::map<std::string, std::string> kLayer = {
        {"input_layernorm", "attn_norm"},
        {"self_attn.q_proj", "attn_q"},
        {"self_attn.k_proj", "attn_k"},
        {"self_attn.v_proj", "attn_v"},
        {"self_attn.o_proj", "attn_output"},
        {"self_attn.q_norm", "attn_q_norm"},
        {"self_attn.k_norm", "attn_k_norm"},
        {"mlp.gate_proj", "ffn_gate"},
        {"mlp.up_proj", "ffn_up"},
        {"mlp.down_proj", "ffn_down"},
        {"pre_feedforward_layernorm", "ffn_norm"},
        {"post_feedforward_layernorm", "post_ffw_norm"},
        // Mixtures of experts: the router, Qwen2-MoE's shared expert and its gate.
        {"mlp.gate", "ffn_gate_inp"},
        {"block_sparse_moe.gate", "ffn_gate_inp"},
        {"mlp.shared_expert.gate_proj", "ffn_gate_shexp"},
        {"mlp.shared_expert.up_proj", "ffn_up_shexp"},
        {"mlp.shared_expert.down_proj", "ffn_down_shexp"},
        {"mlp.shared_expert_gate", "ffn_gate_inp_shexp"},
    };
    const size_t last = rest.rfind('.');
    if (last == std::string::npos) return {};
    const std::string module = rest.substr(0, last);
    const std::string kind = rest.substr(last + 1);  // weight, bias
    if (kind != "weight" && kind != "bias") return {};
    std::string to;
    if (module == "post_attention_layernorm") {
        to = gemma ? "post_attention_norm" : "ffn_norm";
    } else if (auto it = kLayer.find(module); it != kLayer.end()) {
        to = it->second;
    } else {
        return {};
    }
    return fmt::format("blk.{}.{}.{}", il, to, kind);
}

// An expert's matrix: "model.layers.N.mlp.experts.E.gate_proj.weight" (Qwen
// MoE) or "model.layers.N.block_sparse_moe.experts.E.w1.weight" (Mixtral:
// w1 gate, w3 up, w2 down) -> the GGUF tensor of all the layer's experts
// ("blk.N.ffn_gate_exps.weight") and E; nullopt for any other tensor.
std::optional<std::pair<std::string, uint32_t>> expert_of(const std::string& hf) {
    const std::string layers = "model.layers.";
    if (!hf.starts_with(layers)) return std::nullopt;
    const size_t dot = hf.find('.', layers.size());
    if (dot == std::string::npos) return std::nullopt;
    const std::string il = hf.substr(layers.size(), dot - layers.size());
    std::string rest = hf.substr(dot + 1);
    for (const char* prefix : {"mlp.experts.", "block_sparse_moe.experts."}) {
        if (!rest.starts_with(prefix)) continue;
        rest = rest.substr(strlen(prefix));
        const size_t e_end = rest.find('.');
        if (e_end == std::string::npos || e_end == 0 || e_end > 6) return std::nullopt;
        const std::string e = rest.substr(0, e_end);
        if (!std::all_of(e.begin(), e.end(), ::isdigit) ||
            !std::all_of(il.begin(), il.end(), ::isdigit) || il.empty() || il.size() > 6)
            return std::nullopt;
        static const std::map<std::string, std::string> kParts = {
            {"gate_proj.weight", "ffn_gate_exps"}, {"up_proj.weight", "ffn_up_exps"},
            {"down_proj.weight", "ffn_down_exps"}, {"w1.weight", "ffn_gate_exps"},
            {"w3.weight", "ffn_up_exps"},          {"w2.weight", "ffn_down_exps"}};
        auto it = kParts.find(rest.substr(e_end + 1));
        if (it == kParts.end()) return std::nullopt;
        return std::pair{fmt::format("blk.{}.{}.weight", il, it->second),
                         static_cast<uint32_t>(std::stoul(e))};
    }
    return std::nullopt;
}

// The HF names that map to a GGUF tensor name, for messages: "'a' (or 'b')".
std::string hf_names_of(const std::string& gguf, const std::string& arch) {
    std::vector<std::string> candidates = {"model.embed_tokens.weight", "model.norm.weight",
                                           "lm_head.weight"};
    if (gguf.starts_with("blk.")) {
        const size_t dot = gguf.find('.', 4);
        const std::string il = gguf.substr(4, dot - 4);
        const size_t kind = gguf.rfind('.');
        for (const char* m :
             {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
              "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm",
              "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "pre_feedforward_layernorm",
              "post_feedforward_layernorm"})
            candidates.push_back(fmt::format("model.layers.{}.{}{}", il, m, gguf.substr(kind)));
    }
    std::string out;
    for (const auto& c : candidates)
        if (gguf_name(c, arch) == gguf)
            out += out.empty() ? fmt::format("'{}'", c) : fmt::format(" (or '{}')", c);
    return out.empty() ? fmt::format("'{}'", gguf) : out;
}

// Sliding-window layers as llama.cpp's gemma3 reads them: the last of every
// `pattern` layers is global.
uint32_t swa_pattern(const HParams& hp, const std::string& label) {
    if (hp.n_swa_layers() == 0) return 0;
    uint32_t pattern = 0;
    while (pattern < hp.n_layer && hp.layer_is_swa[pattern]) ++pattern;
    ++pattern;
    for (uint32_t il = 0; il < hp.n_layer; ++il)
        if (hp.layer_is_swa[il] != ((il + 1) % pattern != 0))
            fail(
                "{}: the sliding-window layers do not repeat as {} local then 1 global: headroom "
                "runs only that pattern",
                label, pattern - 1);
    return pattern;
}

void write_hparams(const Config& c, const ModelShape& s, const Rope& rope, const std::string& label,
                   gguf::GgufWriter& w) {
    const HParams& hp = s.hp;
    const std::string a = hp.arch + ".";
    w.set_string("general.architecture", hp.arch);
    if (!hp.name.empty()) w.set_string("general.name", hp.name);
    if (hp.n_ctx_train) w.set_u32(a + "context_length", hp.n_ctx_train);
    w.set_u32(a + "embedding_length", hp.n_embd);
    w.set_u32(a + "block_count", hp.n_layer);
    w.set_u32(a + "feed_forward_length", s.n_ff_dense);
    w.set_u32(a + "attention.head_count", hp.n_head);
    w.set_u32(a + "attention.head_count_kv", hp.n_head_kv);
    w.set_u32(a + "attention.key_length", hp.head_dim_k);
    w.set_u32(a + "attention.value_length", hp.head_dim_v);
    w.set_u32(a + "vocab_size", hp.n_vocab);
    const double eps = number(c, label, "rms_norm_eps", number(c, label, "layer_norm_eps", 1e-6));
    w.set_f32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(eps));
    w.set_f32(a + "rope.freq_base", static_cast<float>(rope.theta));
    if (hp.arch == "gemma3") {
        w.set_f32(a + "rope.freq_base_swa", static_cast<float>(rope.theta_local));
        const uint32_t pattern = swa_pattern(hp, label);
        if (pattern) {
            w.set_u32(a + "attention.sliding_window", hp.sliding_window);
            w.set_u32(a + "attention.sliding_window_pattern", pattern);
        }
        const double scalar = number(c, label, "query_pre_attn_scalar", hp.head_dim_k);
        if (scalar != hp.head_dim_k)
            fail(
                "{}: query_pre_attn_scalar {} differs from head_dim {}: not a scaling headroom "
                "runs",
                label, scalar, hp.head_dim_k);
        for (const char* cap : {"final_logit_softcapping", "attn_logit_softcapping"})
            if (c.find(cap))
                fail("{}: '{}' is set: headroom runs Gemma 3 without soft-capping", label, cap);
    } else if (hp.sliding_window > 0) {
        if (hp.n_swa_layers() != hp.n_layer)
            fail(
                "{}: sliding-window attention on some layers only: headroom runs it on every "
                "layer or none for '{}'",
                label, hp.arch);
        w.set_u32(a + "attention.sliding_window", hp.sliding_window);
    }
    if (rope.scaling) {
        const std::string type = rope_type(*rope.scaling);
        const double factor = number_in(*rope.scaling, label, "factor", 1.0);
        if (type == "linear") {
            w.set_string(a + "rope.scaling.type", "linear");
            w.set_f32(a + "rope.scaling.factor", static_cast<float>(factor));
        } else if (type == "yarn") {
            w.set_string(a + "rope.scaling.type", "yarn");
            w.set_f32(a + "rope.scaling.factor", static_cast<float>(factor));
            w.set_u32(
                a + "rope.scaling.original_context_length",
                static_cast<uint32_t>(number_in(
                    *rope.scaling, label, "original_max_position_embeddings", hp.n_ctx_train)));
            w.set_f32(a + "rope.scaling.yarn_beta_fast",
                      static_cast<float>(number_in(*rope.scaling, label, "beta_fast", 32.0)));
            w.set_f32(a + "rope.scaling.yarn_beta_slow",
                      static_cast<float>(number_in(*rope.scaling, label, "beta_slow", 1.0)));
        } else if (type != "llama3") {
            fail("{}: rope type '{}' is not one headroom runs (linear, yarn, llama3)", label,
                 clipped(type));
        }
    }
    if (hp.n_expert > 0) {
        w.set_u32(a + "expert_count", hp.n_expert);
        w.set_u32(a + "expert_used_count", hp.n_expert_used);
        w.set_u32(a + "expert_feed_forward_length", s.n_ff_expert);
        if (s.n_ff_shared) w.set_u32(a + "expert_shared_feed_forward_length", s.n_ff_shared);
        if (const json* norm = c.find("norm_topk_prob"); norm && norm->is_boolean())
            w.set_bool(a + "expert_weights_norm", norm->get<bool>());
    }
    if (hp.arch == "llama") w.set_bool(kRopeNeoxKey, true);
}

// The shard files, in order: the index's (each once), else model.safetensors.
std::vector<std::string> shard_files(const fs::path& dir,
                                     std::map<std::string, std::string>& claimed) {
    const fs::path index = dir / "model.safetensors.index.json";
    if (!fs::exists(index)) {
        const fs::path single = dir / "model.safetensors";
        if (!fs::exists(single))
            fail("{}: neither model.safetensors nor model.safetensors.index.json is here",
                 dir.string());
        return {single.string()};
    }
    const json j = read_json(index);
    const auto map = j.is_object() ? j.find("weight_map") : j.end();
    if (map == j.end() || !map->is_object())
        fail("{}: 'weight_map' is missing, expected an object of tensor -> file", index.string());
    std::vector<std::string> files;
    for (const auto& [name, file] : map->items()) {
        if (!file.is_string())
            fail("{}: tensor '{}' maps to {}, expected a file name", index.string(), clipped(name),
                 clipped(file.dump()));
        const std::string f = file.get<std::string>();
        if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
            fail("{}: tensor '{}' maps to '{}', expected a file in the folder", index.string(),
                 clipped(name), clipped(f));
        claimed[name] = f;
        const std::string path = (dir / f).string();
        if (std::find(files.begin(), files.end(), path) == files.end()) files.push_back(path);
    }
    std::sort(files.begin(), files.end());
    return files;
}

// A plain weight's type; another dtype is refused, naming the tensor.
TensorType float_type(const Stored& s) {
    switch (s.tensor->dtype) {
        case safetensors::Dtype::F32:
            return TensorType::F32;
        case safetensors::Dtype::F16:
            return TensorType::F16;
        case safetensors::Dtype::BF16:
            return TensorType::BF16;
        default:
            fail("{}: tensor '{}' is {}, expected F32, F16 or BF16", s.file, s.tensor->name,
                 safetensors::name(s.tensor->dtype));
    }
}

float element(const uint8_t* p, safetensors::Dtype d) {
    if (d == safetensors::Dtype::F32) {
        float f;
        std::memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    return d == safetensors::Dtype::F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

gguf::GgufFile open_checked(const std::string& dir_name) {
    const fs::path dir(dir_name);
    const fs::path config_path = dir / "config.json";
    if (!fs::exists(config_path))
        fail("{}: config.json is missing: not a Hugging Face checkpoint folder", dir_name);
    const json top = read_json(config_path);
    const std::string label = config_path.string();
    ModelShape s = shape_from_hf_config(top, label);
    HParams& hp = s.hp;
    if (!is_supported_arch(hp.arch) || hp.arch == "gpt-oss")
        fail(
            "{}: model_type '{}' is not one headroom runs from a folder (llama, mistral, mixtral, "
            "qwen2, qwen2_moe, qwen3, qwen3_moe, gemma3)",
            label, s.model_type);
    const std::optional<QuantizedCheckpoint> quant = QuantizedCheckpoint::from_config(top, label);
    const json* text = nullptr;
    if (auto it = top.find("text_config"); it != top.end() && it->is_object()) text = &*it;
    const Config cfg{top, text};
    const Rope rope = read_rope(cfg, label);
    if (hp.name.empty())
        hp.name = dir.filename().empty() ? dir.parent_path().filename().string()
                                         : dir.filename().string();

    gguf::GgufWriter w;
    write_hparams(cfg, s, rope, label, w);
    add_tokenizer(dir_name, hp.n_vocab, w);

    auto backing = std::make_shared<Backing>();
    std::map<std::string, std::string> claimed;  // index: tensor -> file
    const std::vector<std::string> files = shard_files(dir, claimed);
    backing->shards = std::make_unique<ShardMap>(files);
    const std::span<const uint8_t> all = backing->shards->all();

    // Every tensor of every shard, by HF name (the producers of a
    // pre-quantized checkpoint read them, so the backing keeps them).
    std::map<std::string, std::string> seen;  // HF name -> file
    for (size_t fi = 0; fi < files.size(); ++fi) {
        const std::span<const uint8_t> bytes = backing->shards->file(fi);
        backing->headers.push_back(safetensors::parse_header(bytes, files[fi]));
        const std::string file_name = fs::path(files[fi]).filename().string();
        for (const auto& t : backing->headers.back().tensors) {
            if (auto [it, fresh] = seen.emplace(t.name, file_name); !fresh)
                fail("{}: tensor '{}' is also in {}, expected each tensor in one file", files[fi],
                     clipped(t.name), it->second);
            if (auto it = claimed.find(t.name); it != claimed.end() && it->second != file_name)
                fail("{}: tensor '{}' is here but the index puts it in {}", files[fi],
                     clipped(t.name), it->second);
            backing->stored[t.name] = {files[fi], &t, bytes.data() + t.begin};
        }
    }

    // Where each tensor the model reads is, by GGUF name.
    std::vector<gguf::TensorInfo> tensors;
    std::vector<gguf::GgufFile::Producer> producers;
    std::map<std::string, std::string> origin;  // GGUF name -> "file: tensor 'HF name'"
    const bool gemma = hp.arch == "gemma3";
    // Each layer's experts, stored one matrix per expert, become one tensor
    // of n_expert matrices: written out (stacked) before loading.
    std::map<std::string, std::map<uint32_t, const Stored*>> expert_parts;
    for (const auto& [hf_name, stored] : backing->stored) {
        const safetensors::Tensor& t = *stored.tensor;
        if (auto e = expert_of(hf_name)) {
            if (!expert_parts[e->first].emplace(e->second, &stored).second)
                fail("{}: expert {} of '{}' appears twice", stored.file, e->second, e->first);
            origin[e->first] = fmt::format("{}: tensor '{}'", stored.file, t.name);
            continue;
        }
        // A packed weight stands for the weight it packs.
        std::string weight = hf_name;
        if (weight.ends_with(".weight_packed")) weight.resize(weight.size() - 7);
        if (weight.ends_with(".qweight")) weight = weight.substr(0, weight.size() - 8) + ".weight";
        const std::string name = gguf_name(weight, hp.arch);
        if (name.empty()) continue;
        gguf::TensorInfo info;
        info.name = backing->names.emplace_back(name);
        gguf::GgufFile::Producer produce;
        if (auto r = quant ? quant->repack(weight, backing->stored) : std::nullopt) {
            info.n_dims = 2;
            info.ne[0] = r->n_cols;
            info.ne[1] = r->n_rows;
            info.type = r->type;
            info.n_elements = static_cast<uint64_t>(r->n_rows) * r->n_cols;
            info.size_bytes = row_bytes(r->type, r->n_cols) * r->n_rows;
            produce = std::move(r->produce);
        } else {
            const TensorType type = float_type(stored);
            info.n_dims = static_cast<uint32_t>(t.shape.size());
            for (size_t d = 0; d < t.shape.size(); ++d)
                info.ne[d] = t.shape[t.shape.size() - 1 - d];
            info.type = type;
            info.n_elements = t.n_elements();
            info.size_bytes = t.size_bytes;
            info.data = stored.data;
            if (info.n_dims == 2 && info.ne[1] == 1 && name.ends_with("_shexp.weight")) {
                info.n_dims = 1;  // Qwen2-MoE's shared-expert gate: (1, n_embd), a vector
            }
            if (info.n_dims == 1) {
                // Norms and biases: f32, with Gemma's +1 (its RMSNorm scales by 1 + w).
                auto& v = backing->vectors.emplace_back(info.n_elements);
                const uint32_t es = safetensors::size_bytes(t.dtype);
                const bool plus_one = gemma && name.ends_with("norm.weight");
                for (uint64_t i = 0; i < info.n_elements; ++i)
                    v[i] = element(info.data + i * es, t.dtype) + (plus_one ? 1.0f : 0.0f);
                info.type = TensorType::F32;
                info.size_bytes = info.n_elements * sizeof(float);
                info.data = reinterpret_cast<const uint8_t*>(v.data());
            }
        }
        tensors.push_back(info);
        producers.push_back(std::move(produce));
        origin[name] = fmt::format("{}: tensor '{}'", stored.file, t.name);
    }
    for (const auto& [name, parts] : expert_parts) {
        const Stored& first = *parts.begin()->second;
        const auto& shape = first.tensor->shape;
        if (parts.size() != hp.n_expert || parts.rbegin()->first != hp.n_expert - 1)
            fail("{}: '{}' has {} experts of the config's {}", first.file, name, parts.size(),
                 hp.n_expert);
        const TensorType type = float_type(first);
        for (const auto& [e, st] : parts)
            if (st->tensor->shape != shape || st->tensor->dtype != first.tensor->dtype ||
                shape.size() != 2)
                fail("{}: expert {} of '{}' is not a {} matrix like expert 0's", st->file, e, name,
                     safetensors::name(first.tensor->dtype));
        gguf::TensorInfo info;
        info.name = backing->names.emplace_back(name);
        info.n_dims = 3;
        info.ne[0] = shape[1];
        info.ne[1] = shape[0];
        info.ne[2] = hp.n_expert;
        info.type = type;
        info.n_elements = first.tensor->n_elements() * hp.n_expert;
        info.size_bytes = first.tensor->size_bytes * hp.n_expert;
        std::vector<const Stored*> in_order;
        for (const auto& [e, st] : parts) in_order.push_back(st);
        tensors.push_back(info);
        producers.push_back([in_order](uint8_t* dst) {
            for (const Stored* st : in_order) {
                std::memcpy(dst, st->data, st->tensor->size_bytes);
                dst += st->tensor->size_bytes;
            }
        });
    }
    for (const auto& [name, file] : claimed)
        if (!seen.contains(name))
            fail(
                "{}: tensor '{}' is listed in model.safetensors.index.json but {} does not hold it",
                (dir / file).string(), clipped(name), file);
    if (rope.scaling && rope_type(*rope.scaling) == "llama3") {
        auto& v = backing->vectors.emplace_back(
            llama3_freq_factors(*rope.scaling, label, rope.theta, hp.n_rot));
        gguf::TensorInfo info;
        info.name = backing->names.emplace_back("rope_freqs.weight");
        info.n_dims = 1;
        info.ne[0] = static_cast<int64_t>(v.size());
        info.n_elements = v.size();
        info.size_bytes = v.size() * sizeof(float);
        info.data = reinterpret_cast<const uint8_t*>(v.data());
        tensors.push_back(info);
        producers.emplace_back();
    }

    // Every tensor the config implies, with its shape.
    std::map<std::string_view, const gguf::TensorInfo*> by_name;
    for (const auto& t : tensors) by_name[t.name] = &t;
    for (const WeightTensor& want : tensor_inventory(s)) {
        if (want.name == "output.weight" && hp.tied_embeddings) continue;
        auto it = by_name.find(want.name);
        if (it == by_name.end()) {
            if (want.name == "output.weight") continue;  // tied after all
            fail("{}: the weights lack {}, which the config implies", dir_name,
                 hf_names_of(want.name, hp.arch));
        }
        const gguf::TensorInfo& t = *it->second;
        if (static_cast<uint64_t>(t.ne[0]) != want.n_cols ||
            static_cast<uint64_t>(t.n_rows()) != want.n_rows * want.n_expert)
            fail("{} is {} x {} but the config implies {} x {}", origin[want.name], t.n_rows(),
                 t.ne[0], want.n_rows * want.n_expert, want.n_cols);
    }
    if (hp.tied_embeddings) {
        // A checkpoint may still store lm_head: the config says it is the embedding.
        for (size_t i = tensors.size(); i-- > 0;)
            if (tensors[i].name == "output.weight") {
                tensors.erase(tensors.begin() + static_cast<ptrdiff_t>(i));
                producers.erase(producers.begin() + static_cast<ptrdiff_t>(i));
            }
    }
    // Offsets from the span's start (the f32 copies lie outside it).
    const auto* lo = all.data();
    for (auto& t : tensors)
        if (t.data >= lo && t.data < lo + all.size()) t.offset = static_cast<uint64_t>(t.data - lo);
    return gguf::GgufFile::assemble(dir_name, w.to_bytes(), std::move(tensors), all,
                                    std::shared_ptr<const void>(backing, backing.get()), true,
                                    std::move(producers));
}

}  // namespace

bool is_folder(const std::string& path) {
    std::error_code ec;
    return fs::is_directory(path, ec);
}

gguf::GgufFile open_folder(const std::string& dir) {
    // A config field of an unexpected JSON type surfaces as the library's exception.
    try {
        return open_checked(dir);
    } catch (const json::exception& e) {
        fail("{}: a field of config.json or the index has an unexpected type ({})", dir, e.what());
    }
}

}  // namespace headroom::hf
