// A Hugging Face tokenizer.json (with tokenizer_config.json, chat_template.jinja
// and generation_config.json beside it) as the tokenizer.ggml.* metadata
// llama.cpp's converter writes, so headroom's own tokenizers read it:
//   - byte-level BPE (a ByteLevel pre-tokenizer or decoder): "gpt2", with the
//     pre-tokenizer named by what its rules are (GPT-2's, SmolLM's digits
//     then GPT-2's, Llama 3's or Qwen2's split regex);
//   - SentencePiece-style BPE (byte fallback, "▁" for spaces): "llama", each
//     token scored by the rank of the merge that makes it (a merge ranked
//     earlier scores higher, which is the order SentencePiece merges in).
// Token types: added special tokens are control tokens, other added tokens
// user-defined, <0xXX> byte tokens (SentencePiece) bytes; ids the files leave
// out up to the model's vocabulary size are unused "[PAD<id>]" tokens.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "format/gguf-writer.h"

namespace headroom::hf {

// A JSON file of the folder: nullopt when it is absent; headroom::Error
// naming it when it cannot be read or is not JSON.
std::optional<nlohmann::json> read_json_file(const std::string& path);

// Throws headroom::Error naming the file and the field for a missing
// tokenizer.json, a tokenizer kind headroom does not implement, or a
// vocabulary larger than the model's (n_vocab).
void add_tokenizer(const std::string& dir, uint32_t n_vocab, gguf::GgufWriter& w);

// The files beside tokenizer.json, parsed (null where absent).
struct TokenizerFiles {
    std::string label;  // tokenizer.json's path, for messages
    nlohmann::json tokenizer_config;
    nlohmann::json config;
    nlohmann::json generation_config;
    std::string chat_template;
};

// The same from parsed files (fuzzing, tests).
void add_tokenizer(const nlohmann::json& tokenizer, const TokenizerFiles& files, uint32_t n_vocab,
                   gguf::GgufWriter& w);

}  // namespace headroom::hf
