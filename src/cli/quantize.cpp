// headroom quantize IN OUT TYPE
#include <memory>

#include "cli/commands.h"
#include "cli/engine-flags.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "format/gguf-reader.h"
#include "model/quantize.h"
#include "model/registry.h"

namespace headroom::cli {

namespace {

TensorType parse_type(const std::string& s, const char* what) {
    auto t = tensor_type_from_name(s);
    if (!t)
        fail("{}: unknown tensor type '{}', expected e.g. q8_0, q4_0, q4_k, q6_k, f16", what, s);
    return *t;
}

}  // namespace

void add_quantize_command(CLI::App& app) {
    struct Opts {
        std::string in, out, type, embedding_type, output_type;
        int threads = physical_core_count();
        bool quiet = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand(
        "quantize",
        "Re-quantize a GGUF model. Norms and other 1-D tensors stay F32; rows that do not fit "
        "a K-type's 256-element blocks fall back to a 32-element type");
    cmd->add_option("in", o->in, "Input GGUF file or short model name")->required();
    cmd->add_option("out", o->out, "Output GGUF file")->required();
    cmd->add_option("type", o->type,
                    "Target type, case-insensitive: q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, "
                    "q6_k, f16, bf16, f32")
        ->required();
    cmd->add_option("--embedding-type", o->embedding_type,
                    "Type for token_embd.weight (default: the target type)");
    cmd->add_option("--output-type", o->output_type,
                    "Type for output.weight (default: the target type)");
    cmd->add_option("-t,--threads", o->threads, "Threads")->capture_default_str();
    cmd->add_flag("-q,--quiet", o->quiet, "No progress bar");
    cmd->callback([o] {
        QuantizeOptions opt;
        opt.type = parse_type(o->type, "quantize TYPE");
        if (!o->embedding_type.empty())
            opt.embedding_type = parse_type(o->embedding_type, "--embedding-type");
        if (!o->output_type.empty()) opt.output_type = parse_type(o->output_type, "--output-type");
        opt.n_threads = thread_count(o->threads, "quantize --threads");
        opt.progress = !o->quiet;
        const auto in = gguf::GgufFile::open(resolve_model_path(o->in));
        quantize_model(in, o->out, opt);
    });
}

}  // namespace headroom::cli
