// One entry for every command's -m: a GGUF file, or a Hugging Face
// checkpoint folder (checkpoint/hf-folder.h), as one gguf::GgufFile.
#pragma once

#include <string>

#include "format/gguf-reader.h"

namespace headroom {

// Throws headroom::Error naming the path for anything unreadable or malformed.
gguf::GgufFile open_model_file(const std::string& path);

}  // namespace headroom
