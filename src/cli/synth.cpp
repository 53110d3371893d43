// headroom synth SHAPE OUT [--type T]
#include <memory>

#include "cli/commands.h"
#include "cli/engine-flags.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "tools/synth.h"

namespace headroom::cli {

void add_synth_command(CLI::App& app) {
    struct Opts {
        std::string shape, out, type = "q4_0";
        uint64_t seed = 42;
        int threads = physical_core_count();
        bool quiet = false;
    };
    auto o = std::make_shared<Opts>();
    std::string shapes;
    for (const auto& s : synth_shapes())
        shapes += (shapes.empty() ? "" : ", ") + std::string(s.name);
    auto* cmd = app.add_subcommand(
        "synth",
        "Write a GGUF of a named shape (llama, qwen2, qwen3, gemma3, or a mixture of experts: "
        "Mixtral, qwen2moe, qwen3moe, gpt-oss) with random weights and a working tokenizer, for "
        "benchmarks and tests");
    cmd->add_option("shape", o->shape, "Shape: " + shapes)->required();
    cmd->add_option("out", o->out, "Output GGUF file")->required();
    cmd->add_option(
           "--type", o->type,
           "Weight type for matrices (norms, biases and routers stay F32; gpt-oss in mxfp4 "
           "keeps its non-expert matrices in q8_0, as published)")
        ->capture_default_str();
    cmd->add_option("--seed", o->seed, "Random seed")->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "Threads")->capture_default_str();
    cmd->add_flag("-q,--quiet", o->quiet, "No progress bar");
    cmd->callback([o] {
        SynthOptions opt;
        const auto type = tensor_type_from_name(o->type);
        if (!type) fail("synth --type: unknown tensor type '{}'", o->type);
        opt.type = *type;
        opt.seed = o->seed;
        opt.n_threads = thread_count(o->threads, "synth --threads");
        opt.progress = !o->quiet;
        write_synth_model(find_synth_shape(o->shape), opt, o->out);
    });
}

}  // namespace headroom::cli
