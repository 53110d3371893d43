// headroom inspect MODEL: what is in a GGUF file, for people and for tools.
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "checkpoint/open.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/units.h"
#include "format/gguf-reader.h"
#include "model/registry.h"
#include "shape/hparams.h"

namespace headroom::cli {

namespace {

using nlohmann::json;

struct InspectOptions {
    std::string model = std::string(kDefaultModel);
    bool json = false;
    bool metadata = false;
    bool full_arrays = false;
    bool no_tensors = false;
};

json value_to_json(const gguf::Value& v, bool full_arrays);

json array_to_json(const gguf::Array& a, bool full_arrays) {
    const bool inline_all = full_arrays || a.n <= 16;
    if (!inline_all) {
        return json{
            {"type", "array"}, {"elem_type", std::string(gguf::name(a.elem_type))}, {"n", a.n}};
    }
    json out = json::array();
    if (a.elem_type == gguf::ValueType::STRING) {
        for (auto s : a.strings) out.push_back(std::string(s));
    } else if (a.elem_type == gguf::ValueType::ARRAY) {
        for (const auto& inner : a.arrays) out.push_back(value_to_json(inner, full_arrays));
    } else {
        for (uint64_t i = 0; i < a.n; ++i) {
            switch (a.elem_type) {
                case gguf::ValueType::FLOAT32:
                case gguf::ValueType::FLOAT64:
                    out.push_back(a.float_at(i));
                    break;
                case gguf::ValueType::BOOL:
                    out.push_back(a.int_at(i) != 0);
                    break;
                case gguf::ValueType::UINT64:
                    out.push_back(a.uint_at(i));
                    break;
                default:
                    out.push_back(a.int_at(i));
                    break;
            }
        }
    }
    return out;
}

json value_to_json(const gguf::Value& v, bool full_arrays) {
    if (const auto* u = std::get_if<uint64_t>(&v.data)) return *u;
    if (const auto* s = std::get_if<int64_t>(&v.data)) return *s;
    if (const auto* f = std::get_if<double>(&v.data)) return *f;
    if (const auto* b = std::get_if<bool>(&v.data)) return *b;
    if (const auto* str = std::get_if<std::string_view>(&v.data)) {
        // nlohmann::json rejects invalid UTF-8 on dump; replace bad bytes.
        return std::string(*str);
    }
    return array_to_json(std::get<gguf::Array>(v.data), full_arrays);
}

std::string shape_string(const gguf::TensorInfo& t) {
    std::string s;
    for (uint32_t d = 0; d < t.n_dims; ++d) s += (d ? " × " : "") + std::to_string(t.ne[d]);
    return s;
}

struct TypeTotals {
    uint64_t n_tensors = 0;
    uint64_t n_elements = 0;
    uint64_t n_bytes = 0;
};

std::map<std::string, TypeTotals> totals_by_type(const gguf::GgufFile& f) {
    std::map<std::string, TypeTotals> by_type;
    for (const auto& t : f.tensors()) {
        auto& tt = by_type[std::string(name(t.type))];
        ++tt.n_tensors;
        tt.n_elements += t.n_elements;
        tt.n_bytes += t.size_bytes;
    }
    return by_type;
}

json tokenizer_json(const gguf::GgufFile& f) {
    json tok = json::object();
    if (auto m = f.get_string("tokenizer.ggml.model")) tok["model"] = std::string(*m);
    if (auto p = f.get_string("tokenizer.ggml.pre")) tok["pre"] = std::string(*p);
    if (const auto* t = f.get_array("tokenizer.ggml.tokens")) tok["n_tokens"] = t->n;
    if (const auto* m = f.get_array("tokenizer.ggml.merges")) tok["n_merges"] = m->n;
    for (const char* k : {"bos", "eos", "unknown", "padding"}) {
        if (auto id = f.get_uint(fmt::format("tokenizer.ggml.{}_token_id", k)))
            tok[fmt::format("{}_token_id", k)] = *id;
    }
    tok["has_chat_template"] = f.has("tokenizer.chat_template");
    return tok;
}

json hparams_json(const HParams& hp) {
    return json{{"arch", hp.arch},
                {"n_vocab", hp.n_vocab},
                {"n_ctx_train", hp.n_ctx_train},
                {"n_embd", hp.n_embd},
                {"n_layer", hp.n_layer},
                {"n_ff", hp.n_ff},
                {"n_head", hp.n_head},
                {"n_head_kv", hp.n_head_kv},
                {"head_dim_k", hp.head_dim_k},
                {"head_dim_v", hp.head_dim_v},
                {"n_rot", hp.n_rot},
                {"rope_base", hp.rope_base},
                {"rms_eps", hp.rms_eps},
                {"rope_style", hp.rope_style == RopeStyle::NeoX ? "neox" : "normal"},
                {"tied_embeddings", hp.tied_embeddings},
                {"sliding_window", hp.sliding_window},
                {"n_swa_layers", hp.n_swa_layers()}};
}

void print_json(const gguf::GgufFile& f, const InspectOptions& opt) {
    json out;
    out["path"] = f.path();
    out["format"] = f.is_assembled() ? "hf-folder" : "gguf";
    out["version"] = f.version();
    out["alignment"] = f.alignment();
    out["data_offset"] = f.data_offset();
    out["file_size_bytes"] = f.file_size_bytes();
    out["architecture"] = std::string(f.architecture());
    json md = json::object();
    for (const auto& [k, v] : f.metadata()) md[std::string(k)] = value_to_json(v, opt.full_arrays);
    out["metadata"] = md;
    json types = json::object();
    for (const auto& [k, v] : f.metadata()) types[std::string(k)] = std::string(gguf::name(v.type));
    out["metadata_types"] = types;
    try {
        out["hparams"] = hparams_json(read_hparams(f, false));
    } catch (const Error& e) {
        out["hparams"] = nullptr;
        out["hparams_error"] = e.what();
    }
    out["tokenizer"] = tokenizer_json(f);
    json tensors = json::array();
    uint64_t n_params = 0;
    for (const auto& t : f.tensors()) {
        tensors.push_back({{"name", std::string(t.name)},
                           {"type", std::string(name(t.type))},
                           {"shape", t.shape()},
                           {"offset", t.offset},
                           {"n_elements", t.n_elements},
                           {"bytes", t.size_bytes}});
        n_params += t.n_elements;
    }
    out["tensors"] = tensors;
    json by_type = json::object();
    for (const auto& [type, tt] : totals_by_type(f))
        by_type[type] = {
            {"n_tensors", tt.n_tensors}, {"n_elements", tt.n_elements}, {"bytes", tt.n_bytes}};
    out["bytes_by_type"] = by_type;
    out["n_tensors"] = f.tensors().size();
    out["n_params"] = n_params;
    out["tensor_bytes_total"] = f.tensor_bytes_total();
    fmt::print("{}\n", out.dump(2, ' ', false, json::error_handler_t::replace));
}

void print_human(const gguf::GgufFile& f, const InspectOptions& opt) {
    fmt::print("{}\n", f.path());
    if (f.is_assembled())
        fmt::print(
            "  Hugging Face folder, {} of weights, {} tensors, {} metadata keys (as a "
            "converted GGUF would hold them)\n",
            format_bytes(f.tensor_bytes_total()), f.tensors().size(), f.metadata().size());
    else
        fmt::print("  GGUF v{}, {}, {} tensors, {} metadata keys, alignment {}\n", f.version(),
                   format_bytes(f.file_size_bytes()), f.tensors().size(), f.metadata().size(),
                   f.alignment());
    fmt::print("\narchitecture  {}", f.architecture());
    if (auto n = f.get_string("general.name")) fmt::print("  \"{}\"", *n);
    fmt::print("\n");
    try {
        const HParams hp = read_hparams(f, false);
        fmt::print("  layers {}  embedding {}  ffn {}  vocab {}  trained context {}\n", hp.n_layer,
                   hp.n_embd, hp.n_ff, hp.n_vocab, hp.n_ctx_train);
        fmt::print("  heads {}  kv heads {} (GQA {}:1)  head dim {}", hp.n_head, hp.n_head_kv,
                   hp.gqa_group(), hp.head_dim_k);
        if (hp.head_dim_v != hp.head_dim_k) fmt::print("/{}", hp.head_dim_v);
        fmt::print("  rope base {:g} ({}, {} dims)  rms eps {:g}\n", hp.rope_base,
                   hp.rope_style == RopeStyle::NeoX ? "neox" : "normal", hp.n_rot, hp.rms_eps);
        fmt::print("  tied embeddings {}", hp.tied_embeddings ? "yes" : "no");
        if (hp.sliding_window)
            fmt::print("  sliding window {} on {} of {} layers", hp.sliding_window,
                       hp.n_swa_layers(), hp.n_layer);
        fmt::print("{}\n", is_supported_arch(hp.arch) ? "" : "  (not runnable by headroom)");
    } catch (const Error& e) {
        fmt::print("  hyperparameters unreadable: {}\n", e.what());
    }
    const json tok = tokenizer_json(f);
    if (tok.contains("model")) {
        fmt::print("\ntokenizer     {}", tok["model"].get<std::string>());
        if (tok.contains("pre")) fmt::print(" (pre-tokenizer {})", tok["pre"].get<std::string>());
        if (tok.contains("n_tokens")) fmt::print(", {} tokens", tok["n_tokens"].get<uint64_t>());
        if (tok.contains("n_merges")) fmt::print(", {} merges", tok["n_merges"].get<uint64_t>());
        if (tok.contains("bos_token_id"))
            fmt::print(", bos {}", tok["bos_token_id"].get<uint64_t>());
        if (tok.contains("eos_token_id"))
            fmt::print(", eos {}", tok["eos_token_id"].get<uint64_t>());
        fmt::print(", chat template {}\n", tok["has_chat_template"].get<bool>() ? "yes" : "no");
    }
    if (opt.metadata) {
        fmt::print("\nmetadata\n");
        size_t w = 0;
        for (const auto& [k, v] : f.metadata()) w = std::max(w, k.size());
        for (const auto& [k, v] : f.metadata())
            fmt::print("  {:<{}}  {:<6}  {}\n", k, w, gguf::name(v.type), v.to_display(80));
    }
    if (!opt.no_tensors) {
        size_t w = 4;
        for (const auto& t : f.tensors()) w = std::max(w, t.name.size());
        fmt::print("\n  {:<{}}  {:<6}  {:>16}  {:>12}\n", "tensor", w, "type", "shape", "bytes");
        for (const auto& t : f.tensors())
            fmt::print("  {:<{}}  {:<6}  {:>16}  {:>12}\n", t.name, w, name(t.type),
                       shape_string(t), format_count(t.size_bytes));
    }
    fmt::print("\n  {:<6}  {:>8}  {:>14}  {:>12}  {:>6}\n", "type", "tensors", "params", "bytes",
               "bpw");
    uint64_t n_params = 0;
    for (const auto& [type, tt] : totals_by_type(f)) {
        fmt::print("  {:<6}  {:>8}  {:>14}  {:>12}  {:>6.2f}\n", type, tt.n_tensors,
                   format_count(tt.n_elements), format_bytes(tt.n_bytes),
                   8.0 * tt.n_bytes / tt.n_elements);
        n_params += tt.n_elements;
    }
    const uint64_t total = f.tensor_bytes_total();
    fmt::print("  {:<6}  {:>8}  {:>14}  {:>12}  {:>6.2f}\n", "total", f.tensors().size(),
               format_count(n_params), format_bytes(total),
               n_params ? 8.0 * total / n_params : 0.0);
}

}  // namespace

void add_inspect_command(CLI::App& app) {
    auto opt = std::make_shared<InspectOptions>();
    auto* cmd = app.add_subcommand(
        "inspect", "Show a GGUF model's architecture, hyperparameters, tokenizer and tensors");
    cmd->add_option("model", opt->model,
                    "GGUF file, Hugging Face checkpoint folder (config.json, *.safetensors, "
                    "tokenizer.json) or short model name (smollm2-135m, gemma3-270m)")
        ->capture_default_str();
    cmd->add_option("-m,--model", opt->model, "Same as the positional MODEL");
    cmd->add_flag("--json", opt->json, "Print JSON for tools instead of tables");
    cmd->add_flag("--metadata", opt->metadata, "Also list every metadata key and value");
    cmd->add_flag("--full-arrays", opt->full_arrays,
                  "In --json, write metadata arrays in full (token lists are large)");
    cmd->add_flag("--no-tensors", opt->no_tensors, "Leave out the per-tensor table");
    cmd->callback([opt] {
        const auto file = open_model_file(resolve_model_path(opt->model));
        if (opt->json)
            print_json(file, *opt);
        else
            print_human(file, *opt);
    });
}

}  // namespace headroom::cli
