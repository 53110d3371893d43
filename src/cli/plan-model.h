// What `plan` and `doctor` mean by a model: a GGUF path or short name, a
// built-in table entry (hyperparameters only), or a Hugging Face config.json,
// optionally in another weight type.
#pragma once

#include <string>

#include "memory/planner.h"

namespace headroom::cli {

// Throws headroom::Error naming what could not be found, with the built-in names.
PlanModel resolve_plan_model(const std::string& model, const std::string& hf_config,
                             const std::string& weight_type);

}  // namespace headroom::cli
