#include "checkpoint/open.h"

#include "checkpoint/hf-folder.h"

namespace headroom {

gguf::GgufFile open_model_file(const std::string& path) {
    if (hf::is_folder(path)) return hf::open_folder(path);
    return gguf::GgufFile::open(path);
}

}  // namespace headroom
