// headroom doctor [LOGFILE | -]: explain the out-of-memory errors in a log from
// PyTorch, vLLM, llama.cpp, Ollama, TGI or SGLang.
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "core/error.h"
#include "core/units.h"
#include "doctor/doctor.h"
#include "doctor/report.h"
#include "format/gguf-reader.h"
#include "model/hparams.h"

namespace headroom::cli {

namespace {

struct DoctorOptions {
    std::string log = "-";
    std::string model;
    std::string hf_config;
    std::string device_memory;
    bool json = false;
};

// Weights and KV bytes per token as the GGUF stores them. K and V are kept
// in F16 (2 bytes) for every layer; sliding-window layers would hold less,
// so this is the upper bound a long context approaches.
doctor::ModelFacts facts_from_gguf(const std::string& path) {
    const auto file = gguf::GgufFile::open(path);
    const HParams hp = read_hparams(file, false);
    doctor::ModelFacts m;
    m.name = hp.name.empty() ? std::filesystem::path(path).stem().string() : hp.name;
    std::map<std::string, uint64_t> by_type;
    for (const auto& t : file.tensors()) {
        m.n_params += t.n_elements;
        by_type[std::string(name(t.type))] += t.size_bytes;
    }
    m.weight_bytes = file.tensor_bytes_total();
    m.weight_bytes_by_type.assign(by_type.begin(), by_type.end());
    m.kv_bytes_per_token =
        uint64_t{hp.n_layer} * hp.n_head_kv * (hp.head_dim_k + hp.head_dim_v) * 2;
    return m;
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
                    "GGUF file of the model, for advice in its real sizes");
    cmd->add_option("--hf-config", opt->hf_config, "Hugging Face config.json of the model");
    cmd->add_option("--device-memory", opt->device_memory,
                    "GPU memory when the log does not say it (24GiB, 80GB)");
    cmd->add_flag("--json", opt->json, "Print JSON for tools");
    cmd->callback([opt] {
        doctor::Options options;
        if (!opt->device_memory.empty())
            options.device_memory_bytes =
                parse_bytes_or_throw(opt->device_memory, "doctor --device-memory");
        if (!opt->hf_config.empty())
            fail(
                "doctor --hf-config {}: reading Hugging Face configs is not available yet; pass "
                "the model's GGUF file with -m",
                opt->hf_config);
        if (!opt->model.empty()) {
            if (!std::filesystem::is_regular_file(opt->model))
                fail(
                    "doctor -m {}: model names are not available yet; pass the path of a GGUF "
                    "file",
                    opt->model);
            options.model = facts_from_gguf(opt->model);
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
