// Pre-tokenizer splits, worked out by hand from the regexes in
// pre-tokenizer.h.
#include "tokenizer/pre-tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/unicode.h"

namespace headroom {
namespace {

std::vector<std::string> split(PreTokenizer kind, std::string_view text) {
    std::vector<uint32_t> cpts;
    unicode::decode_utf8(text, cpts);
    std::vector<uint8_t> bits;
    for (uint32_t c : cpts) bits.push_back(unicode::codepoint_bits(c));
    std::vector<uint32_t> lengths;
    split_words(kind, cpts, bits, lengths);
    std::vector<std::string> words;
    size_t at = 0;
    for (uint32_t n : lengths) {
        std::string w;
        for (size_t i = at; i < at + n; ++i) unicode::append_utf8(cpts[i], w);
        words.push_back(w);
        at += n;
    }
    EXPECT_EQ(at, cpts.size());
    return words;
}

using Words = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
    EXPECT_EQ(split(PreTokenizer::Gpt2, "Hello world's 123  end\n"),
              (Words{"Hello", " world", "'s", " 123", " ", " end", "\n"}));
    EXPECT_EQ(split(PreTokenizer::Gpt2, "I'LL don't"), (Words{"I", "'", "LL", " don", "'t"}));
    EXPECT_EQ(split(PreTokenizer::Gpt2, "a+=b;  "), (Words{"a", "+=", "b", ";", "  "}));
    EXPECT_EQ(split(PreTokenizer::Gpt2, " !? x"), (Words{" !?", " x"}));
    EXPECT_EQ(split(PreTokenizer::Gpt2, "中文 abc"), (Words{"中文", " abc"}));
    EXPECT_EQ(split(PreTokenizer::Gpt2, ""), Words{});
}

TEST(PreTokenizer, Llama3) {
    EXPECT_EQ(split(PreTokenizer::Llama3, "Hello world's 12345 ab\n\n  x"),
              (Words{"Hello", " world", "'s", " ", "123", "45", " ab", "\n\n", " ", " x"}));
    // Contractions ignore case; a letter run takes one leading non-letter.
    EXPECT_EQ(split(PreTokenizer::Llama3, "I'LL (go)"), (Words{"I", "'LL", " (", "go", ")"}));
    EXPECT_EQ(split(PreTokenizer::Llama3, "x = 1;\r\n\ty"),
              (Words{"x", " =", " ", "1", ";\r\n", "\ty"}));
    EXPECT_EQ(split(PreTokenizer::Llama3, "a  \n b"), (Words{"a", "  \n", " b"}));
}

TEST(PreTokenizer, Qwen2SplitsEveryDigit) {
    EXPECT_EQ(split(PreTokenizer::Qwen2, "v12345"), (Words{"v", "1", "2", "3", "4", "5"}));
    EXPECT_EQ(split(PreTokenizer::Qwen2, "I'm 42"), (Words{"I", "'m", " ", "4", "2"}));
}

TEST(PreTokenizer, SmollmIsolatesDigitsThenGpt2) {
    // The digits go first, so the space before them stands alone.
    EXPECT_EQ(split(PreTokenizer::Smollm, " 123abc"), (Words{" ", "1", "2", "3", "abc"}));
    EXPECT_EQ(split(PreTokenizer::Smollm, "x1 y"), (Words{"x", "1", " y"}));
}

TEST(PreTokenizer, Default) {
    // Punctuation runs first, then GPT-2, then digit runs, then ASCII triples.
    EXPECT_EQ(split(PreTokenizer::Default, "hello, world!! 12345"),
              (Words{"hello", ",", " world", "!!", " ", "123", "45"}));
    // The backtick is not in llama.cpp's punctuation class.
    EXPECT_EQ(split(PreTokenizer::Default, "a`b"), (Words{"a", "`", "b"}));
    EXPECT_EQ(split(PreTokenizer::Default, "1234567"), (Words{"123", "456", "7"}));
}

}  // namespace
}  // namespace headroom
