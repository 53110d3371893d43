// Loading a model for the commands that run one: the mapped file, the
// forward pass, the tokenizer, and the description the byte accounting
// uses (with the loaded tokenizer's real size).
#pragma once

#include <memory>
#include <string>

#include "format/gguf-reader.h"
#include "memory/terms.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace headroom::cli {

struct LoadedModel {
    std::unique_ptr<gguf::GgufFile> file;
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tokenizer;
    ModelDesc desc;
};

// Throws headroom::Error with one clear line for any problem.
LoadedModel load_model(const std::string& path_or_name);

}  // namespace headroom::cli
