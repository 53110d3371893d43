#include "cli/load-model.h"

#include "model/registry.h"

namespace headroom::cli {

LoadedModel load_model(const std::string& path_or_name) {
    LoadedModel m;
    m.file =
        std::make_unique<gguf::GgufFile>(gguf::GgufFile::open(resolve_model_path(path_or_name)));
    m.model = Model::load(*m.file);
    m.tokenizer = Tokenizer::from_gguf(*m.file);
    m.desc = describe_gguf(*m.file);
    m.desc.tokenizer_bytes = m.tokenizer->memory_bytes();
    m.desc.weight_bytes += m.model->converted_bytes();
    return m;
}

}  // namespace headroom::cli
