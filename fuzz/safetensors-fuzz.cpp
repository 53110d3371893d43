// libFuzzer entry point for what a Hugging Face folder feeds headroom: bytes
// that start with '{' are a tokenizer.json (checkpoint/hf-tokenizer.h),
// anything else a safetensors file's header (format/safetensors.h). Either
// is read or raises headroom::Error; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>

#include "checkpoint/hf-tokenizer.h"
#include "core/error.h"
#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        if (size > 0 && data[0] == '{') {
            const auto tok = nlohmann::json::parse(data, data + size, nullptr, false);
            if (tok.is_discarded()) return 0;
            headroom::gguf::GgufWriter w;
            headroom::hf::TokenizerFiles files;
            files.label = "fuzz/tokenizer.json";
            headroom::hf::add_tokenizer(tok, files, 4096, w);
            (void)w.to_bytes();
            return 0;
        }
        const auto h =
            headroom::safetensors::parse_header(std::span(data, size), "fuzz.safetensors");
        uint64_t sum = 0;
        for (const auto& t : h.tensors) sum += data[t.begin + t.size_bytes - 1];
        (void)sum;
    } catch (const headroom::Error&) {
    }
    return 0;
}
