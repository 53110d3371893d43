// A malformed or unsupported vocabulary is one headroom::Error naming the
// key, never a crash.
#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "format/gguf-reader.h"
#include "format/gguf-writer.h"
#include "tokenizer/tokenizer.h"

namespace headroom {
namespace {

// A valid byte-level BPE vocabulary: "a", "b", "ab", "<s>".
gguf::GgufWriter base_bpe() {
    gguf::GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "gpt-2");
    w.set_strings("tokenizer.ggml.tokens", {"a", "b", "ab", "<s>"});
    w.set_i32s("tokenizer.ggml.token_type", {1, 1, 1, 3});
    w.set_strings("tokenizer.ggml.merges", {"a b"});
    w.set_u32("tokenizer.ggml.bos_token_id", 3);
    w.set_u32("tokenizer.ggml.eos_token_id", 3);
    return w;
}

gguf::GgufWriter base_spm() {
    gguf::GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "<0x41>", "\xE2\x96\x81"});
    w.set_f32s("tokenizer.ggml.scores", {0, 0, 0, 0, -1});
    w.set_i32s("tokenizer.ggml.token_type", {2, 3, 3, 6, 1});
    return w;
}

// Loads the vocabulary after `edit`; returns the error message, "" if none.
std::string load_error(gguf::GgufWriter w, const std::function<void(gguf::GgufWriter&)>& edit) {
    edit(w);
    const auto bytes = w.to_bytes();
    try {
        const auto file = gguf::GgufFile::parse(bytes, "bad.gguf");
        Tokenizer::from_gguf(file);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

#define EXPECT_ERROR_NAMES(base, edit, ...)                                    \
    do {                                                                       \
        const std::string msg = load_error(base(), edit);                      \
        for (const char* part : {__VA_ARGS__}) {                               \
            EXPECT_NE(msg.find(part), std::string::npos) << "'" << msg << "'"; \
        }                                                                      \
    } while (0)

TEST(TokenizerVocabErrors, ValidBasesLoad) {
    EXPECT_EQ(load_error(base_bpe(), [](auto&) {}), "");
    EXPECT_EQ(load_error(base_spm(), [](auto&) {}), "");
}

TEST(TokenizerVocabErrors, ModelAndPreTokenizer) {
    gguf::GgufWriter empty;
    empty.set_string("general.architecture", "llama");
    empty.set_strings("tokenizer.ggml.tokens", {"a"});
    EXPECT_NE(load_error(empty, [](auto&) {}).find("tokenizer.ggml.model"), std::string::npos);
    EXPECT_ERROR_NAMES(
        base_bpe, [](auto& w) { w.set_string("tokenizer.ggml.model", "bert"); },
        "tokenizer.ggml.model", "'bert'");
    EXPECT_ERROR_NAMES(
        base_bpe, [](auto& w) { w.set_u32("tokenizer.ggml.model", 1); }, "tokenizer.ggml.model");
    EXPECT_ERROR_NAMES(
        base_bpe, [](auto& w) { w.set_string("tokenizer.ggml.pre", "tekken"); },
        "tokenizer.ggml.pre", "'tekken'", "llama-bpe");
}

TEST(TokenizerVocabErrors, TokenArrays) {
    EXPECT_ERROR_NAMES(
        base_bpe,
        [](auto& w) {
            w.set_i32s("tokenizer.ggml.tokens", {1, 2});
        },
        "tokenizer.ggml.tokens", "expected strings");
    EXPECT_ERROR_NAMES(
        base_bpe, [](auto& w) { w.set_strings("tokenizer.ggml.tokens", {}); },
        "tokenizer.ggml.tokens");
    EXPECT_ERROR_NAMES(
        base_bpe, [](auto& w) { w.set_u32("tokenizer.ggml.tokens", 5); }, "tokenizer.ggml.tokens");
    EXPECT_ERROR_NAMES(
        base_bpe,
        [](auto& w) {
            w.set_strings("tokenizer.ggml.tokens", {"a", "b", "a", "<s>"});
        },
        "tokenizer.ggml.tokens[2]", "repeats token 0");
    EXPECT_ERROR_NAMES(
        base_spm,
        [](auto& w) {
            w.set_f32s("tokenizer.ggml.scores", {0, 0});
        },
        "tokenizer.ggml.scores", "2 entries");
    EXPECT_ERROR_NAMES(
        base_spm,
        [](auto& w) {
            w.set_strings("tokenizer.ggml.scores", {"a", "b", "c", "d", "e"});
        },
        "tokenizer.ggml.scores");
    EXPECT_ERROR_NAMES(
        base_spm,
        [](auto& w) {
            w.set_i32s("tokenizer.ggml.token_type", {2, 3, 3, 6, 9});
        },
        "tokenizer.ggml.token_type[4]", "9");
    EXPECT_ERROR_NAMES(
        base_spm,
        [](auto& w) {
            w.set_i32s("tokenizer.ggml.token_type", {2, 3, 3, 6, 0});
        },
        "tokenizer.ggml.token_type[4]");
    EXPECT_ERROR_NAMES(
        base_spm,
        [](auto& w) {
            w.set_u32s("tokenizer.ggml.token_type", {2, 3, 3, 6, 1});
        },
        "tokenizer.ggml.token_type", "INT32");
    EXPECT_ERROR_NAMES(
        base_spm, [](auto& w) { w.set_i32s("tokenizer.ggml.token_type", {1}); },
        "tokenizer.ggml.token_type");
    EXPECT_ERROR_NAMES(
        base_spm,
        [](auto& w) {
            w.set_strings("tokenizer.ggml.tokens",
                          {"<unk>", "<s>", "</s>", "<0xZZ>", "\xE2\x96\x81"});
        },
        "tokenizer.ggml.tokens[3]", "<0xXX>");
}

TEST(TokenizerVocabErrors, SpecialIds) {
    EXPECT_ERROR_NAMES(
        base_bpe, [](auto& w) { w.set_u32("tokenizer.ggml.bos_token_id", 4); },
        "tokenizer.ggml.bos_token_id", "4", "4 tokens");
    EXPECT_ERROR_NAMES(
        base_bpe, [](auto& w) { w.set_i32("tokenizer.ggml.eos_token_id", -1); },
        "tokenizer.ggml.eos_token_id");
    EXPECT_ERROR_NAMES(
        base_spm, [](auto& w) { w.set_u32("tokenizer.ggml.eot_token_id", 1u << 31); },
        "tokenizer.ggml.eot_token_id");
    EXPECT_ERROR_NAMES(
        base_bpe, [](auto& w) { w.set_string("tokenizer.ggml.add_bos_token", "yes"); },
        "tokenizer.ggml.add_bos_token");
}

TEST(TokenizerVocabErrors, Merges) {
    EXPECT_ERROR_NAMES(
        base_bpe, [](auto& w) { w.set_strings("tokenizer.ggml.merges", {"ab"}); },
        "tokenizer.ggml.merges[0]", "'ab'");
    EXPECT_ERROR_NAMES(
        base_bpe, [](auto& w) { w.set_strings("tokenizer.ggml.merges", {"a "}); },
        "tokenizer.ggml.merges[0]");
    EXPECT_ERROR_NAMES(
        base_bpe, [](auto& w) { w.set_i32s("tokenizer.ggml.merges", {1}); },
        "tokenizer.ggml.merges", "expected strings");
    gguf::GgufWriter no_merges;
    no_merges.set_string("general.architecture", "llama");
    no_merges.set_string("tokenizer.ggml.model", "gpt2");
    no_merges.set_strings("tokenizer.ggml.tokens", {"a"});
    EXPECT_NE(load_error(no_merges, [](auto&) {}).find("tokenizer.ggml.merges"), std::string::npos);
    // Operands that are no token are fine (llama.cpp ranks them by text).
    EXPECT_EQ(load_error(base_bpe(),
                         [](auto& w) {
                             w.set_strings("tokenizer.ggml.merges", {"x y", "a b"});
                         }),
              "");
}

}  // namespace
}  // namespace headroom
