// headroom doctor [LOGFILE | -]: explain the out-of-memory errors in a log from
// PyTorch, vLLM, llama.cpp, Ollama, TGI or SGLang.
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "checkpoint/open.h"
#include "cli/commands.h"
#include "cli/plan-model.h"
#include "core/error.h"
#include "core/units.h"
#include "doctor/doctor.h"
#include "doctor/report.h"
#include "format/gguf-reader.h"
#include "shape/hparams.h"

namespace headroom::cli {

namespace {

struct DoctorOptions {
    std::string log = "-";
    std::string model;
    std::string hf_config;
    std::string device_memory;
    bool json = false;
};

// KV bytes a token takes in every layer with the whole context cached
// (sliding windows ignored: the bound a long context approaches), as the
// planner's layer groups count them: K and V in F16, or a latent-attention
// model's compressed latent (kv_groups_for).
uint64_t kv_bytes_per_token(const HParams& hp) {
    EngineConfig f16_all_layers;
    f16_all_layers.swa_full = true;
    uint64_t n = 0;
    for (const auto& g : kv_groups_for(hp, f16_all_layers)) n += g.bytes_per_token;
    return n;
}

// The model's facts from the planner's description (weights exact for a
// GGUF file, estimated for the checkpoint's type otherwise).
doctor::ModelFacts facts_from_plan_model(const PlanModel& pm) {
    doctor::ModelFacts m;
    m.name = pm.name;
    m.n_params = pm.desc.n_params;
    m.weight_bytes = pm.desc.weight_bytes;
    m.kv_bytes_per_token = kv_bytes_per_token(pm.desc.hp);
    const std::string type = pm.weight_type ? std::string(name(*pm.weight_type)) : pm.file_type;
    m.weight_bytes_by_type = {{type, pm.desc.weight_bytes}};
    return m;
}

// A GGUF file's: its tensors by type.
doctor::ModelFacts facts_from_gguf(const std::string& path, const PlanModel& pm) {
    doctor::ModelFacts m = facts_from_plan_model(pm);
    const auto file = open_model_file(path);
    if (pm.desc.hp.name.empty()) m.name = std::filesystem::path(path).stem().string();
    std::map<std::string, uint64_t> by_type;
    for (const auto& t : file.tensors()) by_type[std::string(name(t.type))] += t.size_bytes;
    m.weight_bytes = file.tensor_bytes_total();
    m.weight_bytes_by_type.assign(by_type.begin(), by_type.end());
    return m;
}

// The planner's weight bytes of the model in every type it knows: the sizes
// the advice quotes are `plan --compare-quant`'s.
void add_planner_sizes(doctor::ModelFacts& m, const PlanModel& pm) {
    for (const auto& t : weight_types()) {
        if (!t.candidate) continue;
        if (t.type == WeightType::MXFP4 && pm.desc.hp.n_expert == 0) continue;
        // A format that cannot hold this model's shapes (e.g. AWQ groups) is not offered.
        if (!weight_type_holds(pm.tensors, t.type)) continue;
        m.weight_bytes_as.emplace_back(std::string(t.name),
                                       requantized(pm, t.type).desc.weight_bytes);
    }
}

doctor::Report read_log(const std::string& path, const doctor::Options& options) {
    if (path == "-") return doctor::diagnose(std::cin, options);
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("doctor: cannot read '{}': {}", path, std::strerror(errno));
    return doctor::diagnose(in, options);
}

}  // namespace

void add_doctor_command(CLI::App& app) {
    auto opt = std::make_shared<DoctorOptions>();
    auto* cmd = app.add_subcommand(
        "doctor",
        "Explain out-of-memory errors in a log (PyTorch, vLLM, llama.cpp, Ollama, TGI, SGLang): "
        "the cause, the numbers and the fix");
    cmd->add_option("log", opt->log, "Log file, or - for standard input")->capture_default_str();
    cmd->add_option("-m,--model", opt->model,
                    "The model, for advice in its real sizes: a GGUF file, a short name, or a "
                    "built-in model (llama-3-8b, qwen2.5-14b... see plan --list-models)");
    cmd->add_option("--hf-config", opt->hf_config, "Hugging Face config.json of the model");
    cmd->add_option("--device-memory", opt->device_memory,
                    "GPU memory when the log does not say it (24GiB, 80GB)");
    cmd->add_flag("--json", opt->json, "Print JSON for tools");
    cmd->callback([opt] {
        doctor::Options options;
        if (!opt->device_memory.empty())
            options.device_memory_bytes =
                parse_bytes_or_throw(opt->device_memory, "doctor --device-memory");
        if (!opt->model.empty() || !opt->hf_config.empty()) {
            const PlanModel pm = resolve_plan_model(opt->model, opt->hf_config, "");
            options.model = !opt->model.empty() && std::filesystem::is_regular_file(opt->model) &&
                                    opt->hf_config.empty()
                                ? facts_from_gguf(opt->model, pm)
                                : facts_from_plan_model(pm);
            add_planner_sizes(*options.model, pm);
        }
        const doctor::Report report = read_log(opt->log, options);
        if (opt->json)
            fmt::print("{}\n",
                       doctor::render_json(report).dump(
                           2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
        else
            fmt::print("{}", doctor::render_text(report));
    });
}

}  // namespace headroom::cli
