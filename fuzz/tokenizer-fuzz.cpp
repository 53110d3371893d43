// libFuzzer entry point for the tokenizers: a prompt is untrusted text from an
// HTTP body. The input's first byte picks a tokenizer (byte-level BPE under
// each pre-tokenizer family, or SentencePiece with byte fallback) and whether
// special-token texts are parsed; the rest is the text. The contract checked:
// every id is in the vocabulary, the stream decoder returns valid UTF-8, the
// pre-tokenizer's words cover the text's codepoints exactly, and decoding
// arbitrary ids (the text's bytes read as ids) renders without failing.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/gguf-reader.h"
#include "format/gguf-writer.h"
#include "tokenizer/pre-tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using headroom::Tokenizer;
namespace gguf = headroom::gguf;
namespace unicode = headroom::unicode;

std::string gpt2_spelling(std::string_view text) {
    std::string s;
    for (char c : text) unicode::append_utf8(unicode::byte_to_gpt2_codepoint(c), s);
    return s;
}

std::unique_ptr<Tokenizer> load(const gguf::GgufWriter& w) {
    const auto bytes = w.to_bytes();
    return Tokenizer::from_gguf(gguf::GgufFile::parse(bytes, "fuzz.gguf"));
}

// The 256 byte tokens; merges of ASCII words, digits, contractions, runs of
// white space and one three-byte character (so merges also join the bytes of
// a character); control and user-defined tokens.
std::unique_ptr<Tokenizer> bpe(std::string_view pre) {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(gpt2_spelling(std::string(1, static_cast<char>(b))));
        types.push_back(1);
    }
    const std::pair<std::string_view, std::string_view> merges[] = {
        {"h", "e"},  {"l", "l"},   {"he", "ll"},         {"hell", "o"},  {" ", "w"},
        {"o", "r"},  {" w", "or"}, {"l", "d"},           {" wor", "ld"}, {"1", "2"},
        {"12", "3"}, {"'", "s"},   {"\xE4\xBD", "\xA0"}, {"\n", "\n"},   {" ", " "}};
    std::vector<std::string> merge_texts;
    for (const auto& [l, r] : merges) {
        merge_texts.push_back(gpt2_spelling(l) + " " + gpt2_spelling(r));
        tokens.push_back(gpt2_spelling(std::string(l) + std::string(r)));
        types.push_back(1);
    }
    tokens.insert(tokens.end(), {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "[SEP]"});
    types.insert(types.end(), {3, 3, 3, 4});
    gguf::GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", std::string(pre));
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_i32s("tokenizer.ggml.token_type", types);
    w.set_strings("tokenizer.ggml.merges", merge_texts);
    w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tokens.size() - 2));
    w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tokens.size() - 2));
    return load(w);
}

// <unk>, <s>, </s>, the 256 byte tokens, then scored pieces.
std::unique_ptr<Tokenizer> spm() {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<float> scores = {0, 0, 0};
    std::vector<int32_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        tokens.push_back(name);
        scores.push_back(0);
        types.push_back(6);
    }
    const std::pair<std::string_view, float> pieces[] = {{"\xE2\x96\x81", -1.0f},
                                                         {"a", -2.0f},
                                                         {"b", -3.0f},
                                                         {"ab", -4.0f},
                                                         {"\xE2\x96\x81"
                                                          "ab",
                                                          -5.0f},
                                                         {"\xE2\x96\x81"
                                                          "a",
                                                          -10.0f},
                                                         {"c", -6.0f},
                                                         {"bc", -0.5f},
                                                         {"\xE4\xBD\xA0", -7.0f},
                                                         {"<start_of_turn>", 0.0f}};
    for (const auto& [p, s] : pieces) {
        tokens.emplace_back(p);
        scores.push_back(s);
        types.push_back(p == "<start_of_turn>" ? 3 : 1);
    }
    gguf::GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_f32s("tokenizer.ggml.scores", scores);
    w.set_i32s("tokenizer.ggml.token_type", types);
    return load(w);
}

struct Tokenizers {
    std::vector<std::unique_ptr<Tokenizer>> all;
    Tokenizers() {
        for (std::string_view pre : {"default", "gpt-2", "smollm", "llama-bpe", "qwen2"})
            all.push_back(bpe(pre));
        all.push_back(spm());
    }
};

[[noreturn]] void broken(const char* what) {
    std::fprintf(stderr, "tokenizer contract broken: %s\n", what);
    std::abort();
}

void check_utf8(std::string_view s, const char* what) {
    if (unicode::valid_utf8_prefix(s) != s.size()) broken(what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const Tokenizers toks;
    if (size == 0) return 0;
    const uint8_t pick = data[0];
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    const Tokenizer& tok = *toks.all[pick % toks.all.size()];
    const bool parse_special = (pick / toks.all.size()) % 2 == 1;
    const bool add_special = (pick / toks.all.size()) % 4 >= 2;

    const auto ids = tok.encode(text, add_special, parse_special);
    for (int32_t id : ids)
        if (id < 0 || id >= tok.n_vocab()) broken("an id outside the vocabulary");
    headroom::StreamDecoder stream(tok, parse_special);
    std::string out;
    for (int32_t id : ids) out += stream.push(id);
    out += stream.flush();
    check_utf8(out, "the stream decoder returned invalid UTF-8");
    (void)tok.decode(ids, true);

    // The pre-tokenizers on the text's codepoints: their words partition it.
    std::vector<uint32_t> cpts;
    unicode::decode_utf8(text, cpts);
    std::vector<uint8_t> bits(cpts.size());
    for (size_t i = 0; i < cpts.size(); ++i) bits[i] = unicode::codepoint_bits(cpts[i]);
    for (auto kind : {headroom::PreTokenizer::Default, headroom::PreTokenizer::Gpt2,
                      headroom::PreTokenizer::Smollm, headroom::PreTokenizer::Llama3,
                      headroom::PreTokenizer::Qwen2}) {
        std::vector<uint32_t> lengths;
        headroom::split_words(kind, cpts, bits, lengths);
        uint64_t sum = 0;
        for (uint32_t n : lengths) sum += n;
        if (sum != cpts.size()) broken("the pre-tokenizer's words do not cover the text");
    }

    // Arbitrary ids, negative and past the vocabulary among them.
    std::vector<int32_t> raw(text.size() / 4);
    if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * 4);
    headroom::StreamDecoder raw_stream(tok, true);
    std::string raw_out;
    for (int32_t id : raw) raw_out += raw_stream.push(id % (2 * tok.n_vocab() + 1));
    raw_out += raw_stream.flush();
    check_utf8(raw_out, "the stream decoder returned invalid UTF-8 for arbitrary ids");
    (void)tok.decode(raw, false);
    return 0;
}
