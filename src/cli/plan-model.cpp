#include "cli/plan-model.h"

#include <filesystem>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "model/registry.h"
#include "shape/model-table.h"

namespace headroom::cli {

namespace {

std::string hf_repo_of(std::string_view url) {
    const std::string_view host = "huggingface.co/";
    const size_t at = url.find(host);
    if (at == std::string_view::npos) return {};
    std::string_view rest = url.substr(at + host.size());
    const size_t blob = rest.find("/blob/");
    return std::string(rest.substr(0, blob));
}

}  // namespace

PlanModel resolve_plan_model(const std::string& model, const std::string& hf_config,
                             const std::string& weight_type) {
    std::optional<WeightType> wt;
    if (!weight_type.empty()) {
        wt = weight_type_from_name(weight_type);
        if (!wt) {
            std::string names;
            for (const auto& t : weight_types())
                names += (names.empty() ? "" : ", ") + std::string(t.name);
            fail("--weight-type '{}': expected one of {}", weight_type, names);
        }
    }
    const std::string name = model.empty() ? std::string(kDefaultModel) : model;
    // A config.json given as the model is what --hf-config means.
    const std::string config =
        !hf_config.empty() ? hf_config : (name.ends_with(".json") ? name : std::string());
    if (!config.empty()) {
        const ModelShape shape = read_hf_config(config);
        return plan_model_from_shape(shape, config, "hf-config",
                                     wt.value_or(checkpoint_weight_type(shape)));
    }
    if (!std::filesystem::exists(name)) {
        if (const BuiltinModel* b = find_builtin_model(name)) {
            const ModelShape shape = builtin_shape(*b);
            PlanModel m = plan_model_from_shape(shape, std::string(b->name), "builtin",
                                                wt.value_or(checkpoint_weight_type(shape)));
            m.hf_repo = hf_repo_of(b->source);
            return m;
        }
    }
    std::string path;
    try {
        path = resolve_model_path(name);
    } catch (const Error& e) {
        std::string names;
        for (const auto& b : builtin_models())
            names += (names.empty() ? "" : ", ") + std::string(b.name);
        fail("{}; built-in models for planning: {}", e.what(), names);
    }
    PlanModel m = plan_model_from_gguf(path);
    if (wt) m = requantized(m, *wt);
    return m;
}

}  // namespace headroom::cli
