// POST /v1/embeddings: each input (a string, or token ids) becomes the pooled
// final hidden state of the model, as OpenAI's API returns it.
//
//   pooling        the GGUF's <arch>.pooling_type (mean, cls, last); mean
//                  when the file has none (a causal model's hidden states)
//   normalize      L2-normalized unless "normalize": false (an extension)
//   dimensions     the first d components (then normalized), for models
//                  trained to be truncated (Matryoshka)
//   encoding_format "float" (a list) or "base64" (float32 little-endian)
//
// Strings are tokenized as completions' prompts are (BOS as the model's
// metadata says, control-token texts kept as text). The engine computes
// embeddings between steps (engine/engine.h: Engine::embed).
#pragma once

#include <string>

#include "server/generation.h"

namespace headroom::server {

void handle_embeddings(const std::string& body, const GenerationContext& ctx,
                       httplib::Response& res);

}  // namespace headroom::server
