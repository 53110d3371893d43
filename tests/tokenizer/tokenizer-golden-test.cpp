// Tokenizers of real models and llama.cpp's reference vocabularies against
// llama.cpp's ids (tests/data/tokenizer/*.golden). Needs the model cache:
// scripts/fetch-model.sh smollm2-135m, gemma3-270m; scripts/fetch-reference-data.sh.
#include <gtest/gtest.h>

#include <malloc.h>

#include <cstdio>
#include <filesystem>

#include "format/gguf-reader.h"
#include "format/gguf-writer.h"
#include "golden.h"
#include "model/registry.h"

namespace headroom {
namespace {

struct GoldenModel {
    const char* name;
    const char* file;  // in the model cache
};

void PrintTo(const GoldenModel& m, std::ostream* os) {
    *os << m.name;
}

class TokenizerGolden : public ::testing::TestWithParam<GoldenModel> {};

std::string cached(const char* file) {
    return (std::filesystem::path(models_dir()) / file).string();
}

TEST_P(TokenizerGolden, MatchesLlamaCpp) {
    const std::string path = cached(GetParam().file);
    if (!std::filesystem::exists(path))
        GTEST_FAIL() << path << " is not fetched: run scripts/fetch-model.sh and scripts/fetch-reference-data.sh";
    const auto file = gguf::GgufFile::open(path);
    const auto tok = Tokenizer::from_gguf(file);
    test::check_golden(*tok, GetParam().name);
}

// memory_bytes() against what the allocator handed out while building.
TEST_P(TokenizerGolden, MemoryBytesMatchTheAllocator) {
    const std::string path = cached(GetParam().file);
    if (!std::filesystem::exists(path))
        GTEST_FAIL() << path << " is not fetched: run scripts/fetch-model.sh and scripts/fetch-reference-data.sh";
    const auto file = gguf::GgufFile::open(path);
    const auto in_use = [] {
        const struct mallinfo2 m = mallinfo2();
        return m.uordblks + m.hblkhd;
    };
    const size_t before = in_use();
    const auto tok = Tokenizer::from_gguf(file);
    const size_t measured = in_use() - before;
    if (measured == 0) GTEST_SKIP() << "mallinfo2 sees no allocations (sanitizer build?)";
    const double reported = static_cast<double>(tok->memory_bytes());
    std::printf("[ memory   ] %s: memory_bytes %.2f MB, allocator %.2f MB\n", GetParam().name,
                reported / 1e6, measured / 1e6);
    EXPECT_NEAR(reported, static_cast<double>(measured), 0.02 * static_cast<double>(measured));
}

INSTANTIATE_TEST_SUITE_P(
    Models, TokenizerGolden,
    ::testing::Values(GoldenModel{"smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"},
                      GoldenModel{"gemma3", "gemma-3-270m-q4_k_m.gguf"},
                      GoldenModel{"llama-bpe", "llama.cpp/vocab/ggml-vocab-llama-bpe.gguf"},
                      GoldenModel{"qwen2", "llama.cpp/vocab/ggml-vocab-qwen2.gguf"},
                      GoldenModel{"gpt-2", "llama.cpp/vocab/ggml-vocab-gpt-2.gguf"},
                      GoldenModel{"starcoder", "llama.cpp/vocab/ggml-vocab-starcoder.gguf"},
                      GoldenModel{"llama-spm", "llama.cpp/vocab/ggml-vocab-llama-spm.gguf"},
                      GoldenModel{"phi-3", "llama.cpp/vocab/ggml-vocab-phi-3.gguf"}),
    [](const auto& info) {
        std::string s = info.param.name;
        for (char& c : s) {
            if (c == '-') c = '_';
        }
        return s;
    });

// The "default" pre-tokenizer (what llama.cpp uses when tokenizer.ggml.pre is
// absent), on the gpt-2 vocabulary relabelled as the golden script does.
TEST(TokenizerGoldenDefault, MatchesLlamaCpp) {
    const std::string path = cached("llama.cpp/vocab/ggml-vocab-gpt-2.gguf");
    if (!std::filesystem::exists(path))
        GTEST_FAIL() << path << " is not fetched: run scripts/fetch-model.sh and scripts/fetch-reference-data.sh";
    const auto original = gguf::GgufFile::open(path);
    gguf::GgufWriter w;
    w.copy_metadata(original, {"tokenizer.ggml.pre"});
    w.set_string("tokenizer.ggml.pre", "default");
    const auto bytes = w.to_bytes();
    const auto file = gguf::GgufFile::parse(bytes, "gpt-2-default.gguf");
    const auto tok = Tokenizer::from_gguf(file);
    EXPECT_EQ(tok->vocab().pre(), PreTokenizer::Default);
    test::check_golden(*tok, "gpt-2-default");
}

}  // namespace
}  // namespace headroom
