// headroom quantize IN OUT TYPE
#include <memory>

#include "checkpoint/open.h"
#include "cli/commands.h"
#include "cli/engine-flags.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "format/gguf-reader.h"
#include "memory/terms.h"
#include "memory/weight-estimate.h"
#include "model/registry.h"
#include "tools/quantize.h"

namespace headroom::cli {

namespace {

// The file types quantize writes: the GGUF types of the planner's list that
// the reference quantizers produce.
bool writable(const WeightTypeInfo& t) {
    return t.gguf;
}

std::string writable_names() {
    std::string names;
    for (const auto& t : weight_types())
        if (writable(t)) names += (names.empty() ? "" : ", ") + std::string(t.name);
    return names;
}

WeightType parse_file_type(const std::string& s) {
    const auto t = weight_type_from_name(s);
    if (!t || !writable(info(*t)))
        fail("quantize TYPE: unknown file type '{}', expected one of {}", s, writable_names());
    return *t;
}

TensorType parse_tensor_type(const std::string& s, const char* what) {
    auto t = tensor_type_from_name(s);
    if (!t) fail("{}: unknown tensor type '{}', expected e.g. q8_0, q6_k, q4_k, f16", what, s);
    return *t;
}

}  // namespace

void add_quantize_command(CLI::App& app) {
    struct Opts {
        std::string in, out, type, embedding_type, output_type;
        int threads = physical_core_count();
        bool pure = false;
        bool quiet = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand(
        "quantize",
        "Re-quantize a GGUF model to one of llama.cpp's file types, with its per-tensor rules "
        "(the output or tied embeddings Q6_K; in the K mixes attn_v and ffn_down of some layers "
        "with more bits). Norms, biases and the MoE router are F32; rows that do not fit a "
        "K-type's 256-element blocks fall back to a 32-element type. `plan --weight-type TYPE` "
        "predicts the bytes it writes");
    cmd->add_option("in", o->in,
                    "Input GGUF file, Hugging Face checkpoint folder or short model name")
        ->required();
    cmd->add_option("out", o->out, "Output GGUF file")->required();
    cmd->add_option("type", o->type,
                    "File type, case-insensitive: " + writable_names() +
                        " (q4_k and q5_k: every matrix that type, no mix)")
        ->required();
    cmd->add_flag("--pure", o->pure,
                  "Every matrix the file type's base type: no per-tensor mix (llama.cpp's --pure)");
    cmd->add_option("--embedding-type", o->embedding_type,
                    "Tensor type for token_embd.weight (default: the file type's rule)");
    cmd->add_option("--output-type", o->output_type,
                    "Tensor type for output.weight (default: the file type's rule)");
    cmd->add_option("-t,--threads", o->threads, "Threads")->capture_default_str();
    cmd->add_flag("-q,--quiet", o->quiet, "No progress bar");
    cmd->callback([o] {
        const WeightType type = parse_file_type(o->type);
        QuantizeOptions opt;
        opt.recipe = gguf_recipe(type);
        if (o->pure) opt.recipe.mix = TensorMix::Pure;
        opt.file_type = gguf_file_type_code(type);
        if (!o->embedding_type.empty())
            opt.embedding_type = parse_tensor_type(o->embedding_type, "--embedding-type");
        if (!o->output_type.empty())
            opt.output_type = parse_tensor_type(o->output_type, "--output-type");
        opt.n_threads = thread_count(o->threads, "quantize --threads");
        opt.progress = !o->quiet;
        const auto in = open_model_file(resolve_model_path(o->in));
        quantize_model(in, o->out, opt);
    });
}

void add_convert_command(CLI::App& app) {
    struct Opts {
        std::string in, out, type;
        int threads = physical_core_count();
        bool quiet = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand(
        "convert",
        "Write a Hugging Face checkpoint folder (or a GGUF) as a GGUF file llama.cpp loads: "
        "llama.cpp's tensor names, metadata and q/k layout, the tokenizer and chat template "
        "from tokenizer.json and tokenizer_config.json, weights as stored (or --type)");
    cmd->add_option("in", o->in, "Hugging Face checkpoint folder, GGUF file or short model name")
        ->required();
    cmd->add_option("out", o->out, "Output GGUF file")->required();
    cmd->add_option("--type", o->type,
                    "File type, case-insensitive: " + writable_names() +
                        " (default: each tensor as stored; a pre-quantized checkpoint's as "
                        "headroom repacks it)");
    cmd->add_option("-t,--threads", o->threads, "Threads")->capture_default_str();
    cmd->add_flag("-q,--quiet", o->quiet, "No progress bar");
    cmd->callback([o] {
        const auto in = open_model_file(resolve_model_path(o->in));
        QuantizeOptions opt;
        if (o->type.empty()) {
            // Each tensor as stored (a pre-quantized checkpoint's as repacked).
            opt.keep_types = true;
            const auto own = weight_type_from_name(describe_gguf(in).weight_type);
            opt.file_type = own && info(*own).gguf ? gguf_file_type_code(*own) : 0;
        } else {
            const WeightType wt = parse_file_type(o->type);
            opt.recipe = gguf_recipe(wt);
            opt.file_type = gguf_file_type_code(wt);
        }
        opt.n_threads = thread_count(o->threads, "convert --threads");
        opt.progress = !o->quiet;
        quantize_model(in, o->out, opt);
    });
}

}  // namespace headroom::cli
