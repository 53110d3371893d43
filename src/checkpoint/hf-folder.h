// Hugging Face checkpoint folders, read as they are: config.json,
// model.safetensors (or shards listed by model.safetensors.index.json),
// tokenizer.json, tokenizer_config.json or chat_template.jinja, and
// generation_config.json become one gguf::GgufFile whose metadata carries
// the keys a converted GGUF would (llama.cpp's names) and whose tensors point
// into the shards, mapped side by side in one span of address space, so the
// rest of headroom (hyperparameters, tokenizer, planner, backends) reads a
// folder as it reads a GGUF file. Nothing of the weights is copied but 1-D
// tensors (norms, biases: converted to f32, Gemma's norms with their +1) and
// the RoPE frequency factors of Llama 3.1 scaling. Tensors a folder stores
// otherwise than headroom runs them have producers instead of data
// (gguf::GgufFile::assemble): a mixture of experts' per-expert matrices,
// stacked, and a pre-quantized checkpoint's weights, repacked
// (checkpoint/hf-quantized.h); such a folder is written out as a GGUF
// before it is loaded (engine/instance.h).
//
// Differences from a converted GGUF that the model code honours:
//   - Llama's q/k projections are not permuted (llama.cpp's converter
//     permutes them for its pairwise RoPE): the folder says
//     headroom.rope.neox = true and RoPE pairs (i, i + d/2), which is the
//     same rotation of the unpermuted weights.
//
// Everything read is checked: every tensor the architecture needs present,
// with the config's shape and a float dtype, no tensor claimed by two shards.
// A bad folder raises one headroom::Error naming the file, the tensor and what
// was expected.
#pragma once

#include <string>

#include "format/gguf-reader.h"

namespace headroom::hf {

// True when `path` is a directory (a folder is read as a checkpoint).
bool is_folder(const std::string& path);

// Reads the folder. Throws headroom::Error for a missing or malformed file.
gguf::GgufFile open_folder(const std::string& dir);

// The metadata key that marks unpermuted q/k projections (NeoX pairs).
inline constexpr const char* kRopeNeoxKey = "headroom.rope.neox";

}  // namespace headroom::hf
