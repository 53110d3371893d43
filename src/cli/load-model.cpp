#include "cli/load-model.h"

#include "core/thread-pool.h"
#include "kernels/cpu/cpu-backend.h"
#include "model/registry.h"

namespace headroom::cli {

std::unique_ptr<kernels::Backend> make_backend(const BackendOptions& options, Ledger& host) {
    const int n_threads =
        options.n_threads ? static_cast<int>(options.n_threads) : physical_core_count();
    return std::make_unique<kernels::CpuBackend>(host, n_threads);
}

LoadedModel load_model(const std::string& path_or_name, const BackendOptions& options) {
    LoadedModel m;
    m.host_ledger = std::make_unique<Ledger>("host");
    m.backend = make_backend(options, *m.host_ledger);
    m.file =
        std::make_unique<gguf::GgufFile>(gguf::GgufFile::open(resolve_model_path(path_or_name)));
    m.model = Model::load(*m.file, *m.backend);
    m.tokenizer = Tokenizer::from_gguf(*m.file);
    m.desc = describe_gguf(*m.file);
    m.desc.tokenizer_bytes = m.tokenizer->memory_bytes();
    m.desc.weight_bytes += m.model->converted_bytes();
    return m;
}

}  // namespace headroom::cli
