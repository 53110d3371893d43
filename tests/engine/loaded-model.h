// A model loaded onto a CPU backend of its own, for tests that size their
// runners by hand (a pool of exact bytes, a context of their choosing)
// rather than as a deployment decides.
#pragma once

#include <memory>
#include <string>

#include "core/ledger.h"
#include "format/gguf-reader.h"
#include "kernels/cpu/cpu-backend.h"
#include "memory/terms.h"
#include "model/model.h"
#include "model/registry.h"
#include "tokenizer/tokenizer.h"

namespace headroom {

// Members are destroyed in reverse order: the model before the backend
// holding its weights, the backend before its ledger.
struct LoadedModel {
    LoadedModel(const std::string& path_or_name, int n_threads)
        : file(std::make_unique<gguf::GgufFile>(
              gguf::GgufFile::open(resolve_model_path(path_or_name)))),
          tokenizer(Tokenizer::from_gguf(*file)),
          backend(std::make_unique<kernels::CpuBackend>(ledger, n_threads)),
          model(Model::load(*file, *backend)),
          desc(describe_gguf(*file)) {
        desc.tokenizer_bytes = tokenizer->memory_bytes();
    }
    Ledger ledger{"host"};
    std::unique_ptr<gguf::GgufFile> file;
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<kernels::Backend> backend;
    std::unique_ptr<Model> model;
    ModelDesc desc;
};

}  // namespace headroom
