// Tokenizers on tiny hand-made vocabularies, with ids worked out by hand;
// the synthetic model's tokenizer against llama.cpp's goldens.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <random>

#include "format/gguf-reader.h"
#include "format/gguf-writer.h"
#include "golden.h"
#include "tokenizer/unicode.h"
#include "tools/synth.h"

namespace headroom {
namespace {

std::unique_ptr<Tokenizer> load(const gguf::GgufWriter& w) {
    const auto bytes = w.to_bytes();
    const auto file = gguf::GgufFile::parse(bytes, "test.gguf");
    return Tokenizer::from_gguf(file);  // keeps no reference to the bytes
}

std::string gpt2_spelling(std::string_view text) {
    std::string s;
    for (char c : text) unicode::append_utf8(unicode::byte_to_gpt2_codepoint(c), s);
    return s;
}

using Ids = std::vector<int32_t>;

// A byte-level BPE vocabulary: ids 0..255 are the bytes, then merged tokens.
[[maybe_unused]] constexpr int32_t kHe = 256, kLl = 257, kHell = 258, kHello = 259, kSpW = 260,
                                   kOr = 261, kSpWor = 262, kLd = 263, kSpWorld = 264, kAa = 265,
                                   kImStart = 266, kImEnd = 267, kEot = 268, kSep = 269, kXyz = 270;

gguf::GgufWriter bpe_vocab(std::string pre = "gpt-2") {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(gpt2_spelling(std::string(1, static_cast<char>(b))));
        types.push_back(1);
    }
    const std::vector<std::pair<std::string, std::string>> merges = {
        {"h", "e"}, {"l", "l"},   {"he", "ll"}, {"hell", "o"},  {" ", "w"},
        {"o", "r"}, {" w", "or"}, {"l", "d"},   {" wor", "ld"}, {"a", "a"}};
    std::vector<std::string> merge_texts;
    for (const auto& [l, r] : merges) {
        merge_texts.push_back(gpt2_spelling(l) + " " + gpt2_spelling(r));
        tokens.push_back(gpt2_spelling(l + r));
        types.push_back(1);
    }
    tokens.insert(tokens.end(), {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "[SEP]", "xyz"});
    // <|im_end|> is typed normal on purpose: its text makes it control and EOG.
    types.insert(types.end(), {3, 1, 3, 4, 1});
    gguf::GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", pre);
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_i32s("tokenizer.ggml.token_type", types);
    w.set_strings("tokenizer.ggml.merges", merge_texts);
    w.set_u32("tokenizer.ggml.bos_token_id", kEot);
    w.set_u32("tokenizer.ggml.eos_token_id", kEot);
    return w;
}

Ids bytes_of(std::string_view s) {
    Ids ids;
    for (char c : s) ids.push_back(static_cast<uint8_t>(c));
    return ids;
}

Ids cat(std::initializer_list<Ids> parts) {
    Ids all;
    for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
    return all;
}

TEST(BpeTokenizer, MergesByRank) {
    const auto tok = load(bpe_vocab());
    EXPECT_EQ(tok->encode("hello world", false, false), (Ids{kHello, kSpWorld}));
    EXPECT_EQ(tok->encode("hell", false, false), (Ids{kHell}));
    // (l,l) outranks (l,d) although it is not leftmost.
    EXPECT_EQ(tok->encode("lld", false, false), (Ids{kLl, 'd'}));
    // Equal ranks: leftmost first.
    EXPECT_EQ(tok->encode("aaa", false, false), (Ids{kAa, 'a'}));
    EXPECT_EQ(tok->encode("aaaa", false, false), (Ids{kAa, kAa}));
    EXPECT_EQ(tok->encode("hellohello", false, false), (Ids{kHello, kHello}));
    EXPECT_EQ(tok->encode("yes", false, false), bytes_of("yes"));
    EXPECT_EQ(tok->encode("\xC3\xA9", false, false), (Ids{0xC3, 0xA9}));  // é as its bytes
    EXPECT_EQ(tok->encode("", false, false), Ids{});
    // Invalid UTF-8 is U+FFFD.
    EXPECT_EQ(tok->encode("\xFF", false, false), (Ids{0xEF, 0xBF, 0xBD}));
}

TEST(BpeTokenizer, IgnoreMergesTakesWholeWords) {
    // "xyz" is a token no merge reaches: Llama 3's pre-tokenizer takes it whole.
    EXPECT_EQ(load(bpe_vocab("gpt-2"))->encode("xyz", false, false), bytes_of("xyz"));
    EXPECT_EQ(load(bpe_vocab("llama-bpe"))->encode("xyz", false, false), (Ids{kXyz}));
}

TEST(BpeTokenizer, SpecialTokens) {
    const auto tok = load(bpe_vocab());
    EXPECT_EQ(tok->encode("<|im_start|>hello<|im_end|>", false, true),
              (Ids{kImStart, kHello, kImEnd}));
    EXPECT_EQ(tok->encode("<|im_start|>hello<|im_end|>", false, false), cat({bytes_of("<|"),
                                                                             bytes_of("im"),
                                                                             bytes_of("_"),
                                                                             bytes_of("start"),
                                                                             bytes_of("|>"),
                                                                             {kHello},
                                                                             bytes_of("<|"),
                                                                             bytes_of("im"),
                                                                             bytes_of("_"),
                                                                             bytes_of("end"),
                                                                             bytes_of("|>")}));
    // User-defined tokens are cut out even when not parsing special tokens.
    EXPECT_EQ(tok->encode("a[SEP]b", false, false), (Ids{'a', kSep, 'b'}));
    EXPECT_TRUE(tok->is_end_of_generation(kImEnd));
    EXPECT_TRUE(tok->is_end_of_generation(kEot));
    EXPECT_FALSE(tok->is_end_of_generation(kImStart));
    EXPECT_FALSE(tok->is_end_of_generation(kHello));
    EXPECT_EQ(tok->token_attr(kImEnd), TokenAttr::Control);
    EXPECT_EQ(tok->token_attr(kSep), TokenAttr::UserDefined);
    EXPECT_EQ(tok->find_token("<|im_end|>"), kImEnd);
    EXPECT_EQ(tok->find_token("nope"), std::nullopt);
}

TEST(BpeTokenizer, BosAndEosFollowMetadata) {
    EXPECT_EQ(load(bpe_vocab())->encode("hello", true, false), (Ids{kHello}));  // gpt2: no BOS
    auto w = bpe_vocab();
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set_bool("tokenizer.ggml.add_eos_token", true);
    const auto tok = load(w);
    EXPECT_EQ(tok->encode("hello", true, false), (Ids{kEot, kHello, kEot}));
    EXPECT_EQ(tok->encode("hello", false, false), (Ids{kHello}));
    EXPECT_EQ(load(bpe_vocab("llama-bpe"))->encode("hello", true, false), (Ids{kEot, kHello}));
}

TEST(BpeTokenizer, Decodes) {
    const auto tok = load(bpe_vocab());
    EXPECT_EQ(tok->decode(Ids{kHello, kSpWorld}), "hello world");
    EXPECT_EQ(tok->decode(Ids{kImStart, kHello, kImEnd}), "hello");
    EXPECT_EQ(tok->decode(Ids{kImStart, kHello, kImEnd}, true), "<|im_start|>hello<|im_end|>");
    EXPECT_EQ(tok->decode(Ids{kSep}), "[SEP]");  // user-defined: always rendered
    EXPECT_EQ(tok->decode(Ids{0xE4, 0xB8, 0xAD}), "\xE4\xB8\xAD");
    EXPECT_EQ(tok->decode(Ids{-1, 100000, kHello}), "hello");
    EXPECT_EQ(tok->decode(Ids{' ', ','}), " ,");  // no clean-up of spaces
}

// A SentencePiece vocabulary with byte fallback; scores decide merges.
[[maybe_unused]] constexpr int32_t kByte0 = 3, kSp = 259, kA = 260, kB = 261, kAb = 262,
                                   kSpAb = 263, kSpA = 264, kC = 265, kBc = 266;

gguf::GgufWriter spm_vocab() {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<float> scores = {0, 0, 0};
    std::vector<int32_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(fmt::format("<0x{:02X}>", b));
        scores.push_back(0);
        types.push_back(6);
    }
    const std::vector<std::pair<std::string, float>> pieces = {{"\xE2\x96\x81", -1},
                                                               {"a", -2},
                                                               {"b", -3},
                                                               {"ab", -4},
                                                               {"\xE2\x96\x81"
                                                                "ab",
                                                                -5},
                                                               {"\xE2\x96\x81"
                                                                "a",
                                                                -10},
                                                               {"c", -6},
                                                               {"bc", -0.5f}};
    for (const auto& [p, s] : pieces) {
        tokens.push_back(p);
        scores.push_back(s);
        types.push_back(1);
    }
    gguf::GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_f32s("tokenizer.ggml.scores", scores);
    w.set_i32s("tokenizer.ggml.token_type", types);
    return w;
}

TEST(SpmTokenizer, MergesByScore) {
    const auto tok = load(spm_vocab());
    // "▁abc": bc (-0.5) first, then ▁a (-10); ab went stale when b merged.
    EXPECT_EQ(tok->encode("abc", false, false), (Ids{kSpA, kBc}));
    // "▁ab": ab (-4) before ▁a (-10), then ▁+ab = ▁ab.
    EXPECT_EQ(tok->encode("ab", false, false), (Ids{kSpAb}));
    EXPECT_EQ(tok->encode("ab ab", false, false), (Ids{kSpAb, kSpAb}));
    // é is no piece: its bytes.
    EXPECT_EQ(tok->encode("\xC3\xA9", false, false), (Ids{kSp, kByte0 + 0xC3, kByte0 + 0xA9}));
    EXPECT_EQ(tok->encode("", false, false), Ids{});
    EXPECT_EQ(tok->encode("", true, false), (Ids{1}));
}

TEST(SpmTokenizer, SpacePrefixAndBos) {
    const auto tok = load(spm_vocab());
    EXPECT_TRUE(tok->add_bos());  // SentencePiece default
    EXPECT_EQ(tok->encode("ab", true, false), (Ids{1, kSpAb}));
    // A special token is followed by the space prefix again.
    EXPECT_EQ(tok->encode("ab</s>ab", false, true), (Ids{kSpAb, 2, kSpAb}));
    auto w = spm_vocab();
    w.set_bool("tokenizer.ggml.add_space_prefix", false);
    w.set_bool("tokenizer.ggml.add_bos_token", false);
    const auto plain = load(w);
    EXPECT_EQ(plain->encode("ab", true, false), (Ids{kAb}));
    EXPECT_EQ(plain->decode(Ids{kSpAb}), " ab");
}

TEST(SpmTokenizer, Decodes) {
    const auto tok = load(spm_vocab());
    EXPECT_EQ(tok->decode(Ids{kSpAb, kSpAb}), "ab ab");  // the prefix space is dropped
    EXPECT_EQ(tok->decode(Ids{1, kSpAb}), " ab");        // ... only on the first token (llama.cpp)
    EXPECT_EQ(tok->decode(Ids{1, kSpAb}, true), "<s> ab");
    EXPECT_EQ(tok->decode(Ids{kByte0 + 0xC3, kByte0 + 0xA9}), "\xC3\xA9");
    EXPECT_EQ(tok->decode(Ids{0}), "");  // unknown renders like control
    EXPECT_EQ(tok->decode(Ids{0}, true), "<unk>");
    EXPECT_TRUE(tok->is_end_of_generation(2));
    EXPECT_EQ(tok->bos_id(), 1);
    EXPECT_EQ(tok->eos_id(), 2);
}

TEST(TokenizerStreamDecoder, HoldsIncompleteCharacters) {
    const auto tok = load(spm_vocab());
    StreamDecoder s(*tok);
    // 😀 = F0 9F 98 80 and 中 = E4 B8 AD, one byte token each.
    EXPECT_EQ(s.push(kByte0 + 0xF0), "");
    EXPECT_EQ(s.push(kByte0 + 0x9F), "");
    EXPECT_EQ(s.push(kByte0 + 0x98), "");
    EXPECT_EQ(s.push(kByte0 + 0x80), "\xF0\x9F\x98\x80");
    EXPECT_EQ(s.push(kSpAb), " ab");  // pieces as they are: a stream continues a prompt
    EXPECT_EQ(s.push(kByte0 + 0xE4), "");
    EXPECT_EQ(s.push(kByte0 + 0xB8), "");
    EXPECT_EQ(s.push(kByte0 + 0xAD), "\xE4\xB8\xAD");
    // A character cut short by other text is U+FFFD, and so is one left at the end.
    EXPECT_EQ(s.push(kByte0 + 0xE4), "");
    EXPECT_EQ(s.push(kA),
              "\xEF\xBF\xBD"
              "a");
    EXPECT_EQ(s.push(kByte0 + 0xF0), "");
    EXPECT_EQ(s.push(kByte0 + 0x9F), "");
    EXPECT_EQ(s.flush(), "\xEF\xBF\xBD");
    EXPECT_EQ(s.flush(), "");
    EXPECT_EQ(s.push(kByte0 + 0xFF), "\xEF\xBF\xBD");  // never valid: replaced at once
}

TEST(TokenizerStreamDecoder, RendersSpecialTokensOnRequest) {
    const auto tok = load(bpe_vocab());
    StreamDecoder plain(*tok);
    EXPECT_EQ(plain.push(kImEnd), "");
    StreamDecoder special(*tok, true);
    EXPECT_EQ(special.push(kImEnd), "<|im_end|>");
}

TEST(Tokenizer, ArbitraryBytesNeverCrash) {
    const auto bpe = load(bpe_vocab());
    const auto spm = load(spm_vocab());
    std::mt19937 rng(7);
    for (int i = 0; i < 2000; ++i) {
        std::string s(rng() % 40, '\0');
        for (char& c : s)
            c = static_cast<char>(i % 2 ? rng() : "ab <|>[SEP]\xC3\xE4\x80\xFF"[rng() % 16]);
        for (const Tokenizer* tok : {bpe.get(), spm.get()}) {
            const auto ids = tok->encode(s, true, i % 3 == 0);
            for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->n_vocab());
            StreamDecoder stream(*tok);
            std::string out;
            for (int32_t id : ids) out += stream.push(id);
            out += stream.flush();
            ASSERT_EQ(unicode::valid_utf8_prefix(out), out.size());
        }
        // Valid UTF-8 comes back exactly from SentencePiece's byte fallback.
        // (Not invalid: a stray lead byte swallows the first byte of a "▁".)
        const std::string valid = test::sanitized(s);
        EXPECT_EQ(spm->decode(spm->encode(valid, false, false)), valid);
    }
}

TEST(Tokenizer, MemoryBytesCoverTheTables) {
    const auto tok = load(bpe_vocab());
    size_t n_text = 0;
    for (int32_t id = 0; id < tok->n_vocab(); ++id) n_text += tok->token_text(id).size();
    // Texts, 16 bytes per token, a hash slot per token, the merge table.
    EXPECT_GE(tok->memory_bytes(), n_text + 16 * tok->n_vocab() + 4 * tok->n_vocab());
    EXPECT_LT(tok->memory_bytes(), 64 * 1024);
}

// The synthetic model's vocabulary (SentencePiece, byte fallback) against
// llama.cpp's ids for `headroom synth tiny`.
TEST(TokenizerGoldenSynth, MatchesLlamaCpp) {
    SynthOptions opt;
    opt.progress = false;
    const auto w = make_synth_model(find_synth_shape("tiny"), opt);
    const auto tok = load(w);
    test::check_golden(*tok, "synth-tiny");
}

}  // namespace
}  // namespace headroom
