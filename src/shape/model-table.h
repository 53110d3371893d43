// Popular models by name (`headroom plan -m llama-3-8b`): hyperparameters
// only, written as the config.json keys their Hugging Face repositories
// publish, so they go through the same reader as --hf-config.
#pragma once

#include <string_view>
#include <vector>

#include "shape/model-shape.h"

namespace headroom {

struct BuiltinModel {
    std::string_view name;         // "llama-3-8b"
    std::string_view description;  // "Meta Llama 3 8B"
    std::string_view source;       // the config.json the keys come from
    std::string_view config_json;  // published keys the planner reads
};

const std::vector<BuiltinModel>& builtin_models();

// Case-insensitive. nullptr for an unknown name.
const BuiltinModel* find_builtin_model(std::string_view name);

// Parses the entry's keys (never fails for a table entry; tested).
ModelShape builtin_shape(const BuiltinModel& model);

}  // namespace headroom
